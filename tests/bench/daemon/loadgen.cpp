// frd-loadgen: N simulated node daemons x R ranks heartbeating against one coordinator, to
// measure what the coordinator costs at scale. Every node is one stream on gRPC's callback API
// (a few channels carry them all), in one of --procs worker processes (run_worker); heartbeats
// are spread evenly over the interval. After a
// warm-up it measures the coordinator's CPU (from /proc/PID/stat) over a window, then triggers a
// dump and measures the fan-out: the time until every node has received its dump request, from
// the trigger's send and from the coordinator's decision (the incident's opened_ns, read back
// with Status; both processes read the same CLOCK_REALTIME). The trigger and Status calls travel
// on a connection of their own, so they do not queue behind the heartbeats. It also prints the
// coordinator's memory (resident now and at peak, from /proc/PID/status) and what else shared
// the machine: the load generator runs beside the coordinator, on the same machine (on other
// cores when run.sh pins them, and then it prints which), so the figures are an upper bound of
// what the coordinator alone would cost. Its own receiving is shown apart:
// the CPU it used during the fan-out and when the median node had its request. With
// --http-port and --page-clients, clients reload the live page during the window while
// `/metrics` is timed (#37: a page being built must not keep a scrape waiting).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "daemon/rpc/client.h"
#include "daemon/rpc/convert.h"
#include "fr/v1/frd.grpc.pb.h"

namespace {

using Clock = std::chrono::steady_clock;

int64_t real_now() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// One GET / HEAD-less request from 127.0.0.1: the seconds it took, the response's size in
// *bytes (0 when it failed); every read limited to 10 s.
double timed_get(int port, const char* path, size_t* bytes) {
  const auto t0 = Clock::now();
  *bytes = 0;
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
    timeval tv{10, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    const std::string req =
        std::string("GET ") + path + " HTTP/1.1\r\nHost: x\r\n" + "Connection: close\r\n\r\n";
    (void)!::write(fd, req.data(), req.size());
    char buf[65536];
    ssize_t n;
    while ((n = ::read(fd, buf, sizeof buf)) > 0) *bytes += size_t(n);
  }
  if (fd >= 0) ::close(fd);
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// While it lives: `clients` threads reload the live page as fast as it comes, and `/metrics` is
// scraped every 100 ms and timed; the figures are printed at the end (nothing when no port).
class PageLoad {
 public:
  PageLoad(int port, int clients) : port_(port) {
    if (port <= 0) return;
    for (int c = 0; c < clients; ++c)
      threads_.emplace_back([this] {
        while (!stop_) {
          size_t bytes = 0;
          timed_get(port_, "/", &bytes);
          if (bytes) ++pages_, page_bytes_ = bytes;
        }
      });
    threads_.emplace_back([this] {
      while (!stop_) {
        size_t bytes = 0;
        const double s = timed_get(port_, "/metrics", &bytes);
        if (bytes) scrapes_.push_back(s);
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    });
    clients_ = clients;
  }
  ~PageLoad() {
    if (port_ <= 0) return;
    stop_ = true;
    for (auto& t : threads_) t.join();
    std::sort(scrapes_.begin(), scrapes_.end());
    if (scrapes_.empty()) {
      std::printf("  /metrics: no scrape answered\n");
      return;
    }
    auto at = [&](double q) {
      return scrapes_[std::min(scrapes_.size() - 1, size_t(q * scrapes_.size()))] * 1e3;
    };
    std::printf(
        "  live page: %zu pages of %zu KiB to %d clients; /metrics meanwhile over %zu scrapes: "
        "median %.1f ms, 90%% %.1f ms, worst %.1f ms\n",
        pages_.load(), page_bytes_.load() / 1024, clients_, scrapes_.size(), at(0.5), at(0.9),
        scrapes_.back() * 1e3);
  }

 private:
  int port_, clients_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<size_t> pages_{0}, page_bytes_{0};
  std::vector<double> scrapes_;  // the scraping thread's alone until the end
  std::vector<std::thread> threads_;
};

class SimNode : public grpc::ClientBidiReactor<fr::v1::NodeMessage, fr::v1::CoordinatorMessage> {
 public:
  SimNode(fr::v1::Coordinator::Stub* stub, int index, int ranks, int comms) {
    fr::daemon::NodeReport r;
    for (int k = 0; k < ranks; ++k) {
      fr::daemon::ProcessReport p;
      p.log = "fr.load.node" + std::to_string(index) + "." + std::to_string(k) + ".frlog";
      p.rank = index * ranks + k;
      p.world_size = 1 << 20;
      p.pid = 1000 + k;
      p.alive = true;
      p.job_id = "load";
      p.host = "node" + std::to_string(index);
      p.records = 100000;
      for (int c = 0; c < comms; ++c) {
        fr::daemon::CommProgress cp;
        cp.comm_id = 0x1000 + uint64_t(c);
        cp.size = 8;
        cp.rank = k;
        cp.state = 1;
        cp.coll_seq = cp.enqueued = cp.started = cp.completed = 12345;
        p.comms.push_back(cp);
      }
      r.processes.push_back(p);
    }
    fr::daemon::to_proto(r, hb_.mutable_heartbeat());
    stub->async()->Connect(&ctx_, this);
    fr::v1::NodeMessage hello;
    hello.mutable_hello()->set_protocol(1);
    hello.mutable_hello()->set_node_name("node" + std::to_string(index));
    hello.mutable_hello()->set_host("node" + std::to_string(index));
    StartRead(&in_);
    queue(std::move(hello));
    StartCall();
  }

  void heartbeat() {
    std::lock_guard<std::mutex> lk(mu_);
    if (done_ || writing_) {
      skipped++;
      return;
    }
    auto* h = hb_.mutable_heartbeat();
    h->set_seq(h->seq() + 1);
    h->set_node_time_ns(real_now());
    if (ping_t1_) {
      h->mutable_echo()->set_t1_ns(ping_t1_);
      h->mutable_echo()->set_t2_ns(ping_t2_);
      h->mutable_echo()->set_t3_ns(real_now());
      ping_t1_ = 0;
    } else {
      h->clear_echo();
    }
    // Written as it is, not copied: it changes only here, and only while no write is in flight.
    writing_ = true;
    StartWrite(&hb_);
    sent++;
  }

  void OnReadDone(bool ok) override {
    if (!ok) return;
    if (in_.has_dump_request()) {
      asked_real = real_now();
      asked_at = Clock::now().time_since_epoch().count();
      fr::v1::NodeMessage st;
      st.mutable_dump_status()->set_incident_id(in_.dump_request().incident_id());
      st.mutable_dump_status()->set_ok(false);
      st.mutable_dump_status()->set_error("load generator: no logs");
      queue(std::move(st));
    } else if (in_.has_ping()) {
      std::lock_guard<std::mutex> lk(mu_);
      ping_t1_ = in_.ping().t1_ns();
      ping_t2_ = real_now();
    } else if (in_.has_welcome()) {
      welcomed = true;
    }
    StartRead(&in_);
  }

  void OnWriteDone(bool ok) override {
    std::lock_guard<std::mutex> lk(mu_);
    writing_ = false;
    if (!ok) return;
    if (!pending_.empty()) {
      out_ = std::move(pending_.back());
      pending_.pop_back();
      writing_ = true;
      StartWrite(&out_);
    }
  }

  void OnDone(const grpc::Status& s) override {
    std::lock_guard<std::mutex> lk(mu_);
    done_ = true;
    status_ = s;
    cv_.notify_all();
  }

  void cancel() { ctx_.TryCancel(); }
  void wait_done() {
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait(lk, [&] { return done_; });
  }
  bool failed() {
    std::lock_guard<std::mutex> lk(mu_);
    return done_;
  }

  std::atomic<int64_t> asked_at{0};
  std::atomic<int64_t> asked_real{0};  // CLOCK_REALTIME, to compare with the coordinator's
  std::atomic<bool> welcomed{false};
  std::atomic<uint64_t> sent{0}, skipped{0};

 private:
  void queue(fr::v1::NodeMessage m) {
    std::lock_guard<std::mutex> lk(mu_);
    if (done_) return;
    if (writing_) {
      pending_.push_back(std::move(m));
      return;
    }
    out_ = std::move(m);
    writing_ = true;
    StartWrite(&out_);
  }

  grpc::ClientContext ctx_;
  fr::v1::CoordinatorMessage in_;
  fr::v1::NodeMessage hb_, out_;
  std::vector<fr::v1::NodeMessage> pending_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool writing_ = false, done_ = false;
  int64_t ping_t1_ = 0, ping_t2_ = 0;
  grpc::Status status_;
};

double cpu_seconds(int pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string s((std::istreambuf_iterator<char>(f)), {});
  size_t p = s.rfind(')');
  if (p == std::string::npos) return -1;
  std::istringstream in(s.substr(p + 2));
  std::string tok;
  long long ut = 0, st = 0;
  for (int i = 3; i <= 15 && in >> tok; ++i) {
    if (i == 14) ut = std::atoll(tok.c_str());
    if (i == 15) st = std::atoll(tok.c_str());
  }
  return double(ut + st) / double(sysconf(_SC_CLK_TCK));
}

// A field of /proc/PID/status in MiB ("VmRSS", "VmHWM"); -1 when unknown.
double status_mib(int pid, const char* field) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  std::string want = std::string(field) + ":";
  while (std::getline(f, line))
    if (line.rfind(want, 0) == 0) return std::atof(line.c_str() + want.size()) / 1024.0;
  return -1;
}

double self_cpu_seconds() { return cpu_seconds(int(getpid())); }

// The CPUs a process may run on ("0-1", "1"), from its affinity mask; "?" when unreadable.
std::string cpus_of(int pid) {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(pid, sizeof set, &set) != 0) return "?";
  std::string out;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (!CPU_ISSET(c, &set)) continue;
    int e = c;
    while (e + 1 < CPU_SETSIZE && CPU_ISSET(e + 1, &set)) ++e;
    if (!out.empty()) out += ",";
    out += e == c ? std::to_string(c) : std::to_string(c) + "-" + std::to_string(e);
    c = e;
  }
  return out;
}

// The incident's opened_ns (the coordinator's decision, CLOCK_REALTIME) from Status; 0 when absent.
int64_t incident_opened_ns(fr::v1::Coordinator::Stub* stub, const std::string& id,
                           int deadline_s = 30) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(deadline_s));
  fr::v1::StatusRequest req;
  req.set_summary(true);
  req.set_node_limit(1);
  fr::v1::StatusReply rep;
  if (!stub->Status(&ctx, req, &rep).ok()) return 0;
  auto j = nlohmann::json::parse(rep.json(), nullptr, false);
  if (j.is_discarded() || !j.contains("incidents")) return 0;
  for (const auto& i : j["incidents"])
    if (i.value("id", std::string()) == id) return i.value("opened_ns", int64_t(0));
  return 0;
}

struct Options {
  std::string addr;
  int nodes = 512, ranks = 8, pid = 0, channels = 64, procs = 4;
  int comms = 4;                        // communicators per rank
  int http_port = 0, page_clients = 0;  // clients reloading `/` during the window
  double interval = 1.0, warmup = 4, window = 6;
};

// A worker process: every procs-th simulated node, on connections of its own. gRPC queues every
// stream's completions of a process on one queue and (as Debian builds it) checks each completion
// against that queue's pending operations one by one, so one process for 16k nodes would spend
// most of a core on that; several share it out. The parent drives it with one-line commands:
//   count  -> "<welcomed> <heartbeats sent> <skipped>"
//   asked  -> "<asked> <last asked, steady ns> <asked, real ns>..." once all its nodes have their
//             dump request (or after 30 s)
//   stop   -> it ends its streams and exits.
int run_worker(const Options& o, int index, FILE* in, FILE* out) {
  std::vector<std::unique_ptr<fr::v1::Coordinator::Stub>> stubs;
  const int channels = std::max(1, o.channels / o.procs);
  for (int c = 0; c < channels; ++c) {
    grpc::ChannelArguments args;
    args.SetInt("fr.loadgen.channel", index * channels + c);  // distinct: a connection each
    args.SetMaxReceiveMessageSize(8 << 20);
    stubs.push_back(fr::v1::Coordinator::NewStub(
        grpc::CreateCustomChannel(o.addr, grpc::InsecureChannelCredentials(), args)));
  }
  std::vector<std::unique_ptr<SimNode>> sims;
  for (int n = index; n < o.nodes; n += o.procs)
    sims.push_back(
        std::make_unique<SimNode>(stubs[sims.size() % stubs.size()].get(), n, o.ranks, o.comms));
  std::atomic<bool> stop{false};
  // Heartbeats spread over the interval: node n is due at (tick + n/nodes) periods, over all the
  // workers. The ticker wakes every 5 ms and sends whatever is due, so a loaded machine delays
  // but never drops them.
  std::thread ticker([&] {
    auto start = Clock::now();
    uint64_t next = 0;  // heartbeats due so far, all nodes, in schedule order
    while (!stop) {
      double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
      uint64_t due = uint64_t(elapsed / o.interval * o.nodes);
      for (; next < due && !stop; ++next) {
        const uint64_t node = next % uint64_t(o.nodes);
        if (node % uint64_t(o.procs) == uint64_t(index))
          sims[node / uint64_t(o.procs)]->heartbeat();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });
  char line[64];
  while (std::fgets(line, sizeof line, in)) {
    const std::string cmd(line);
    if (cmd == "count\n") {
      int welcomed = 0;
      uint64_t sent = 0, skipped = 0;
      for (auto& s : sims) {
        welcomed += s->welcomed;
        sent += s->sent;
        skipped += s->skipped;
      }
      std::fprintf(out, "%d %llu %llu\n", welcomed, static_cast<unsigned long long>(sent),
                   static_cast<unsigned long long>(skipped));
    } else if (cmd == "asked\n") {
      auto t0 = Clock::now();
      int asked = 0;
      int64_t last = 0;
      while (Clock::now() - t0 < std::chrono::seconds(30)) {
        asked = 0;
        last = 0;
        for (auto& s : sims)
          if (int64_t a = s->asked_at) {
            ++asked;
            last = std::max(last, a);
          }
        if (asked == int(sims.size())) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      std::fprintf(out, "%d %lld", asked, static_cast<long long>(last));
      for (auto& s : sims)
        if (int64_t r = s->asked_real) std::fprintf(out, " %lld", static_cast<long long>(r));
      std::fprintf(out, "\n");
    } else {
      break;  // "stop", or the parent is gone
    }
    std::fflush(out);
  }
  stop = true;
  ticker.join();
  for (auto& s : sims) s->cancel();
  for (auto& s : sims) s->wait_done();
  return 0;
}

struct Worker {
  pid_t pid = 0;
  FILE* to = nullptr;
  FILE* from = nullptr;
  // Sends a command; returns its one-line answer ("" when the worker is gone).
  std::string ask(const char* cmd) {
    std::fputs(cmd, to);
    std::fflush(to);
    char* buf = nullptr;
    size_t cap = 0;
    ssize_t n = getline(&buf, &cap, from);
    std::string out = n > 0 ? std::string(buf, size_t(n)) : std::string();
    std::free(buf);
    return out;
  }
};

// Starts the workers, before this process touches gRPC (it is not safe across fork).
bool start_workers(const Options& o, std::vector<Worker>* workers) {
  std::fflush(stdout);
  for (int i = 0; i < o.procs; ++i) {
    int down[2], up[2];
    if (pipe(down) != 0 || pipe(up) != 0) return false;
    pid_t pid = fork();
    if (pid < 0) return false;
    if (pid == 0) {
      close(down[1]);
      close(up[0]);
      for (auto& w : *workers) {
        std::fclose(w.to);
        std::fclose(w.from);
      }
      FILE* in = fdopen(down[0], "r");
      FILE* out = fdopen(up[1], "w");
      _exit(run_worker(o, i, in, out));
    }
    close(down[0]);
    close(up[1]);
    workers->push_back({pid, fdopen(down[1], "w"), fdopen(up[0], "r")});
  }
  return true;
}

double workers_cpu_seconds(const std::vector<Worker>& workers) {
  double sum = self_cpu_seconds();
  for (const auto& w : workers) sum += cpu_seconds(int(w.pid));
  return sum;
}

}  // namespace

int main(int argc, char** argv) {
  fr::daemon::setup_grpc_process();
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--coordinator")
      o.addr = v;
    else if (k == "--nodes")
      o.nodes = std::atoi(v.c_str());
    else if (k == "--ranks")
      o.ranks = std::atoi(v.c_str());
    else if (k == "--coordinator-pid")
      o.pid = std::atoi(v.c_str());
    else if (k == "--channels")
      o.channels = std::atoi(v.c_str());
    else if (k == "--procs")
      o.procs = std::atoi(v.c_str());
    else if (k == "--interval")
      o.interval = std::atof(v.c_str());
    else if (k == "--warmup")
      o.warmup = std::atof(v.c_str());
    else if (k == "--window")
      o.window = std::atof(v.c_str());
    else if (k == "--comms")
      o.comms = std::atoi(v.c_str());
    else if (k == "--http-port")
      o.http_port = std::atoi(v.c_str());
    else if (k == "--page-clients")
      o.page_clients = std::atoi(v.c_str());
    else {
      std::fprintf(stderr, "frd-loadgen: unknown option %s\n", k.c_str());
      return 2;
    }
  }
  if (o.addr.empty() || o.nodes < 1 || o.ranks < 1 || o.channels < 1 || o.procs < 1 ||
      o.interval <= 0) {
    std::fprintf(stderr,
                 "usage: frd-loadgen --coordinator HOST:PORT --coordinator-pid PID [--nodes N] "
                 "[--ranks R] [--interval SEC] [--channels C] [--procs P] [--warmup SEC] "
                 "[--window SEC] [--comms C] [--http-port PORT --page-clients N]\n");
    return 2;
  }
  o.procs = std::min(o.procs, o.nodes);
  std::vector<Worker> workers;
  if (!start_workers(o, &workers)) {
    std::perror("frd-loadgen: starting the workers");
    return 1;
  }
  const std::string addr = o.addr;
  const int nodes = o.nodes, ranks = o.ranks, pid = o.pid;
  const double warmup = o.warmup, window = o.window;
  // The trigger and Status calls: a connection of their own, as `frd trigger` would have.
  grpc::ChannelArguments control_args;
  control_args.SetInt("fr.loadgen.channel", -1);
  control_args.SetMaxReceiveMessageSize(64 << 20);
  auto control = fr::v1::Coordinator::NewStub(
      grpc::CreateCustomChannel(addr, grpc::InsecureChannelCredentials(), control_args));
  // Connected while the coordinator is idle, and kept in use (an idle connection is not read, so
  // the coordinator's keepalive would close it): a coordinator short of CPU may not complete a
  // new connection's handshake in time, and the trigger should not need one.
  incident_opened_ns(control.get(), "");
  std::atomic<bool> keep{true};
  std::thread keeper([&] {
    while (keep) {
      incident_opened_ns(control.get(), "", 5);
      std::this_thread::sleep_for(std::chrono::seconds(1));
    }
  });
  auto t_start = Clock::now();
  while (Clock::now() - t_start < std::chrono::duration<double>(warmup))
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  // The workers' counts: welcomed nodes, heartbeats sent, skipped.
  auto counts = [&](int* welcomed, uint64_t* sent, uint64_t* skipped) {
    *welcomed = 0;
    *sent = *skipped = 0;
    for (auto& w : workers) {
      int a = 0;
      unsigned long long b = 0, c = 0;
      if (std::sscanf(w.ask("count\n").c_str(), "%d %llu %llu", &a, &b, &c) != 3) continue;
      *welcomed += a;
      *sent += b;
      *skipped += c;
    }
  };
  int welcomed = 0;
  uint64_t sent0 = 0, skipped = 0;
  counts(&welcomed, &sent0, &skipped);
  double c0 = pid ? cpu_seconds(pid) : 0;
  double self0 = workers_cpu_seconds(workers);
  double load0[3] = {0, 0, 0};
  getloadavg(load0, 3);
  auto w0 = Clock::now();
  {
    PageLoad pages(o.http_port, o.page_clients);
    std::this_thread::sleep_for(std::chrono::duration<double>(window));
  }
  double c1 = pid ? cpu_seconds(pid) : 0;
  double self1 = workers_cpu_seconds(workers);
  double wsec = std::chrono::duration<double>(Clock::now() - w0).count();
  double rss = pid ? status_mib(pid, "VmRSS") : -1;
  uint64_t sent1 = 0;
  int welcomed_after = 0;
  counts(&welcomed_after, &sent1, &skipped);

  keep = false;
  // How long the coordinator takes to answer a call now (its backlog).
  auto s0 = Clock::now();
  incident_opened_ns(control.get(), "");
  const double status_s = std::chrono::duration<double>(Clock::now() - s0).count();

  // Fan-out: trigger a dump, wait until every node has its request (or 30 s).
  std::string error, incident;
  auto t0 = Clock::now();
  const int64_t t0_real = real_now();
  const double fan_c0 = pid ? cpu_seconds(pid) : 0, fan_self0 = workers_cpu_seconds(workers);
  bool triggered = false;
  double replied = -1;
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    fr::v1::TriggerRequest req;
    req.set_reason("load generator fan-out");
    fr::v1::TriggerReply rep;
    grpc::Status st = control->TriggerDump(&ctx, req, &rep);
    triggered = st.ok() && rep.ok();
    incident = rep.incident_id();
    if (!triggered) error = st.ok() ? rep.error() : st.error_message();
    replied = std::chrono::duration<double>(Clock::now() - t0).count();
  }
  // Each worker answers once all its nodes have their request (or after 30 s): how many, the
  // last one's time, and when each had it (real time, to compare with the decision).
  int asked = 0;
  int64_t last = 0;
  std::vector<int64_t> asked_real;
  if (triggered) {
    for (auto& w : workers) std::fputs("asked\n", w.to), std::fflush(w.to);
    for (auto& w : workers) {
      char* buf = nullptr;
      size_t cap = 0;
      if (getline(&buf, &cap, w.from) > 0) {
        std::istringstream in(buf);
        int a = 0;
        long long l = 0, r = 0;
        in >> a >> l;
        asked += a;
        last = std::max(last, int64_t(l));
        while (in >> r) asked_real.push_back(r);
      }
      std::free(buf);
    }
  }
  double fanout = last ? double(last - t0.time_since_epoch().count()) / 1e9 : -1;
  const double fan_wall = std::chrono::duration<double>(Clock::now() - t0).count();
  const double fan_cpu = pid ? cpu_seconds(pid) - fan_c0 : 0;
  const double fan_self = workers_cpu_seconds(workers) - fan_self0;
  std::sort(asked_real.begin(), asked_real.end());
  const int64_t opened = triggered ? incident_opened_ns(control.get(), incident) : 0;

  keeper.join();
  for (auto& w : workers) {
    std::fputs("stop\n", w.to);
    std::fclose(w.to);
    std::fclose(w.from);
    waitpid(w.pid, nullptr, 0);
  }

  std::printf("nodes %d x %d ranks (%d GPUs): %d/%d connected, %.0f heartbeats/s (%llu skipped)\n",
              nodes, ranks, nodes * ranks, welcomed, nodes, double(sent1 - sent0) / wsec,
              static_cast<unsigned long long>(skipped));
  if (pid) {
    std::printf("  coordinator CPU: %.3f cores over %.1f s (%.3f per 1k nodes)\n", (c1 - c0) / wsec,
                wsec, (c1 - c0) / wsec / (nodes / 1000.0));
    std::printf("  coordinator memory: %.0f MiB resident, %.0f MiB peak (%.1f KiB per node)\n", rss,
                status_mib(pid, "VmHWM"), rss * 1024 / nodes);
  }
  std::printf(
      "  measured on %ld cores: the coordinator on CPU %s, the load generator (%.2f cores) "
      "on CPU %s, and whatever else ran (load average %.1f at the start of the window)\n",
      sysconf(_SC_NPROCESSORS_ONLN), pid ? cpus_of(pid).c_str() : "?", (self1 - self0) / wsec,
      cpus_of(0).c_str(), load0[0]);
  if (!triggered)
    std::printf("  fan-out: trigger failed: %s\n", error.c_str());
  else
    std::printf(
        "  fan-out: %d/%d nodes asked to dump within %.3f s of the trigger's send (trigger "
        "answered after %.3f s; a status call before it, %.3f s)\n",
        asked, nodes, fanout, replied, status_s);
  if (opened && !asked_real.empty()) {
    auto since = [&](int64_t t) { return double(t - opened) / 1e9; };
    std::printf(
        "  fan-out from the coordinator's decision (%.3f s after the send): every node "
        "asked within %.3f s; half within %.3f s, 99%% within %.3f s\n",
        since(t0_real) * -1, since(asked_real.back()), since(asked_real[asked_real.size() / 2]),
        since(asked_real[std::min(asked_real.size() - 1, asked_real.size() * 99 / 100)]));
  }
  if (triggered)
    std::printf(
        "  during the fan-out (%.2f s): coordinator %.2f cores, load generator %.2f cores "
        "(receiving the requests and answering them)\n",
        fan_wall, pid ? fan_cpu / fan_wall : 0.0, fan_self / fan_wall);
  return triggered && asked == nodes ? 0 : 1;
}
