// See node.h. Threads: run() owns the control stream and sends heartbeats; a reader thread per
// connection takes commands; one dump thread (node_dump.cpp) snapshots and delivers, retrying
// until delivered. Each feeds NodeState under mu_ and carries out what it returns.
#include "daemon/rpc/node.h"
#include "common/files.h"
#include "common/prometheus.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <optional>

#include <grpcpp/grpcpp.h>

#include "daemon/rpc/convert.h"
#include "daemon/rpc/gate.h"
#include "daemon/host/dump_files.h"
#include "daemon/host/gpu_sampler.h"
#include "daemon/base/names.h"
#include "daemon/base/node_status.h"
#include "fr/v1/frd.grpc.pb.h"

namespace fr::daemon {

namespace {

std::string this_host() {
  char b[256] = {0};
  if (gethostname(b, sizeof b - 1) != 0) return "localhost";
  return b;
}

NodeStateConfig state_config(const NodeOptions& o) {
  NodeStateConfig c;
  c.address = o.client.address;
  c.spool_dir = o.spool_dir;
  c.stall_after_ns = o.stall_after_ns;
  c.heartbeat_interval_ns = o.heartbeat_interval_ns;
  return c;
}

}  // namespace

struct NodeDaemon::Stream {
  grpc::ClientContext ctx;
  std::unique_ptr<grpc::ClientReaderWriter<fr::v1::NodeMessage, fr::v1::CoordinatorMessage>> rw;
  std::mutex wmu;
  // Every message to the coordinator goes out here, and only when the version agreed with it
  // has the message's kind (gate.h); before the welcome, only what the oldest version has. One
  // held back counts as written.
  bool write(const fr::v1::NodeMessage& m, uint32_t agreed) {
    if (!may_send(m, agreed)) return true;
    std::lock_guard<std::mutex> lk(wmu);
    return rw->Write(m);
  }
};

// The options are settled (node name, spool) before the state copies what it needs of them.
NodeOptions NodeDaemon::settle(NodeOptions o) {
  if (o.node_name.empty()) o.node_name = this_host();
  o.node_name = sanitize_name(o.node_name);
  if (o.spool_dir.empty()) o.spool_dir = "/tmp/frd-node-" + o.node_name;
  return o;
}

NodeDaemon::NodeDaemon(NodeOptions opts)
    : opts_(settle(std::move(opts))), host_(this_host()), state_(state_config(opts_)) {
  last_live_ns_ = last_scan_ns_ = mono_ns();
}

NodeDaemon::~NodeDaemon() {
  stop();
  if (dumper_.joinable()) dumper_.join();
  if (idler_.joinable()) idler_.join();
}

void NodeDaemon::log(const std::string& line, LogLevel level) {
  if (!opts_.quiet) log_line(level, "frd node " + opts_.node_name + ": " + line);
}

void NodeDaemon::apply(const NodeActions& a) {
  for (const auto& l : a.log) log(l.text, l.level);
  if (a.wake) cv_.notify_all();
}

void NodeDaemon::send_dump_status(const std::string& incident, bool ok, const std::string& error) {
  fr::v1::NodeMessage m;
  m.mutable_dump_status()->set_incident_id(incident);
  m.mutable_dump_status()->set_ok(ok);
  m.mutable_dump_status()->set_error(error);
  std::lock_guard<std::mutex> lk(mu_);
  if (stream_) stream_->write(m, protocol_);
}

void NodeDaemon::note_connection(const std::string& state, const std::string& message) {
  NodeStatus st;
  st.pid = ::getpid();
  st.coordinator = opts_.client.address;
  st.state = state;
  st.message = message;
  NodeStatus before;
  // The time the state began: kept while only the message changes.
  st.since_real_ns = parse_node_status(status_written_, &before) && before.state == state
                         ? before.since_real_ns
                         : real_ns();
  const std::string text = format_node_status(st);
  if (text == status_written_) return;
  std::string error;
  if (fr::files::write_atomic(node_status_path(opts_.log_dir), text, &error))
    status_written_ = text;
}

void NodeDaemon::check_log_dir() {
  struct stat st;
  std::string why;
  if (::stat(opts_.log_dir.c_str(), &st) != 0)
    why = std::strerror(errno);
  else if (!S_ISDIR(st.st_mode))
    why = "not a directory";
  else if (::access(opts_.log_dir.c_str(), R_OK | X_OK) != 0)
    why = std::strerror(errno);
  std::lock_guard<std::mutex> lk(mu_);
  apply(state_.log_dir_checked(opts_.log_dir, why, mono_ns()));
}

std::string NodeDaemon::metrics() const {
  PrometheusText o;
  auto metric = [&](const char* name, const char* type, const char* help, uint64_t v) {
    o.family(name, type, help).sample(v);
  };
  metric("frd_node_connected", "gauge", "1 while the stream to the coordinator is up.",
         connected_ ? 1 : 0);
  std::lock_guard<std::mutex> lk(mu_);
  const NodeCounters& c = state_.counters();
  metric("frd_node_connects_total", "counter", "Connections the coordinator welcomed.", c.connects);
  metric("frd_node_connect_failures_total", "counter",
         "Attempts to reach the coordinator that failed.", c.connect_failures);
  metric("frd_node_heartbeats_total", "counter", "Heartbeats sent.", heartbeats_);
  metric("frd_node_processes", "gauge", "Processes with a flight log in the last scan.",
         processes_);
  metric("frd_node_processes_alive", "gauge", "Of those, alive.", processes_alive_);
  metric("frd_node_dumps_delivered_total", "counter", "Dumps the coordinator accepted.",
         c.dumps_delivered);
  metric("frd_node_dumps_failed_total", "counter", "Dumps that could not be taken or were refused.",
         c.dumps_failed);
  metric("frd_node_dumps_pending", "gauge", "Dumps taken or queued, not yet delivered.",
         state_.pending_count());
  metric("frd_node_unknown_messages_total", "counter",
         "Coordinator messages of a kind this node does not know (a newer coordinator's), skipped.",
         unknown_commands_);
  metric("frd_node_log_dir_readable", "gauge", "0 while the log directory cannot be read.",
         state_.log_dir_readable() ? 1 : 0);
  return o.take();
}

bool NodeDaemon::init(std::string* error) {
  if (!fr::files::make_dirs(opts_.spool_dir, error)) return false;
  // Dumps a previous run took and did not deliver: <spool>/<job>/<incident>/dump.json.
  std::vector<Key> found;
  for (const std::string& job : list_dir(opts_.spool_dir)) {
    if (!is_safe_name(job, kMaxNameLen)) continue;
    for (const std::string& incident : list_dir(opts_.spool_dir + "/" + job)) {
      Key k{job, incident};
      struct stat st;
      if (is_safe_name(incident, kMaxNameLen) &&
          stat((spool_of(k) + "/dump.json").c_str(), &st) == 0)
        found.push_back(k);
    }
  }
  {
    std::lock_guard<std::mutex> lk(mu_);
    apply(state_.recovered(found));
  }
  log("reading the logs in " + opts_.log_dir + " owned by " + opts_.log_owners.describe());
  // GPU health is optional: without NVML every dump says why, and nothing else changes.
  std::string why;
  if (gpus_.open(opts_.nvml_lib, &why))
    log("GPU health from NVML (" + opts_.nvml_lib + ")");
  else
    log(why + "; dumps carry no GPU health");
  return true;
}

void NodeDaemon::stop() {
  stopping_ = true;
  std::lock_guard<std::mutex> lk(mu_);
  if (stream_) stream_->ctx.TryCancel();
  cv_.notify_all();
}

bool NodeDaemon::sleep_for(int64_t ns) {
  std::unique_lock<std::mutex> lk(mu_);
  cv_.wait_for(lk, std::chrono::nanoseconds(ns), [&] { return stopping_.load(); });
  return !stopping_;
}

void NodeDaemon::run() {
  dumper_ = std::thread([this] { dump_loop(); });
  if (opts_.watch_idle) idler_ = std::thread([this] { idle_loop(); });
  while (!stopping_) {
    check_log_dir();
    connect_once();
  }
  {
    std::lock_guard<std::mutex> lk(mu_);
    cv_.notify_all();
  }
  dumper_.join();
  if (idler_.joinable()) idler_.join();
}

// Judged at the last scan only: between scans nothing is known, so nothing ages.
int64_t NodeDaemon::idle_ns() const { return last_scan_ns_.load() - last_live_ns_.load(); }

void NodeDaemon::note_scan(const ScanResult& scan) {
  const int64_t now = mono_ns();
  for (const auto& p : scan.processes)
    if (p.alive) last_live_ns_ = now;
  last_scan_ns_ = now;
}

void NodeDaemon::idle_loop() {
  LogWatcher watcher(opts_.log_dir, opts_.stall_after_ns);
  watcher.set_owners(opts_.log_owners);
  do {
    if (mono_ns() - last_scan_ns_.load() < 900'000'000) continue;  // the heartbeats scan
    {
      std::lock_guard<std::mutex> lk(mu_);
      watcher.set_job_filter(state_.job_filter());
    }
    note_scan(watcher.scan());
  } while (sleep_for(1'000'000'000));
}

void NodeDaemon::connect_once() {
  auto stub = fr::v1::Coordinator::NewStub(make_channel(opts_.client));
  Stream s;
  add_auth(&s.ctx, opts_.client);
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (stopping_) return;
    s.rw = stub->Connect(&s.ctx);
    stream_ = &s;
    state_.connecting();
  }
  std::atomic<bool> reader_done{false};
  std::thread reader;
  const bool said_hello = send_hello(s);
  if (said_hello) {
    reader = std::thread([this, &s, &reader_done] { read_commands(s, &reader_done); });
    heartbeat_loop(s, reader_done);
  }
  // A stream the coordinator closed (a refused token) is not cancelled, so that Finish returns
  // the coordinator's reason rather than CANCELLED.
  if (said_hello && !reader_done) s.ctx.TryCancel();
  if (reader.joinable()) reader.join();
  grpc::Status st = s.rw->Finish();
  NodeActions a;
  {
    std::lock_guard<std::mutex> lk(mu_);
    stream_ = nullptr;
    connected_ = false;
    protocol_ = 0;
    if (stopping_) return;
    const std::string why = st.ok() ? std::string() : status_text(st, opts_.client);
    a = state_.stream_closed(why, mono_ns());
    const bool refused = st.error_code() == grpc::StatusCode::UNAUTHENTICATED ||
                         st.error_code() == grpc::StatusCode::PERMISSION_DENIED ||
                         st.error_code() == grpc::StatusCode::FAILED_PRECONDITION;
    note_connection(refused ? "refused" : "unreachable", why.empty() ? "closed" : why);
  }
  apply(a);
  sleep_for(a.wait_ns);
}

bool NodeDaemon::send_hello(Stream& s) {
  fr::v1::NodeMessage hello;
  auto* h = hello.mutable_hello();
  h->set_protocol(kProtocol);
  h->set_node_name(opts_.node_name);
  h->set_host(host_);
  h->set_node_time_ns(real_ns());
  {
    std::lock_guard<std::mutex> lk(mu_);
    h->set_job_id(state_.job_filter());
    for (const auto& id : state_.pending_incidents()) h->add_pending()->set_incident_id(id);
  }
  return s.write(hello, protocol_);
}

// The reader thread: the coordinator's commands, until the stream ends.
void NodeDaemon::read_commands(Stream& s, std::atomic<bool>* done) {
  fr::v1::CoordinatorMessage m;
  while (s.rw->Read(&m)) {
    std::lock_guard<std::mutex> lk(mu_);
    switch (m.body_case()) {
      case fr::v1::CoordinatorMessage::kWelcome: {
        const auto& w = m.welcome();
        // A coordinator of protocol 1 names no version.
        protocol_ = w.protocol() == 0 ? 1u : std::min(w.protocol(), kProtocol);
        apply(state_.welcome(w.job_id(), w.stall_after_ms(), w.upload_key()));
        connected_ = true;
        note_connection("connected", "");
        break;
      }
      case fr::v1::CoordinatorMessage::kPing: state_.ping(m.ping().t1_ns(), real_ns()); break;
      case fr::v1::CoordinatorMessage::kDumpRequest: {
        const auto& r = m.dump_request();
        apply(state_.dump_request(r.job_id(), r.incident_id(), r.reason()));
        break;
      }
      default:
        // A newer coordinator's message: skipped, counted, said once.
        if (unknown_commands_.fetch_add(1) == 0)
          log("the coordinator sent a message this node does not know; skipping such messages");
    }
  }
  *done = true;
  std::lock_guard<std::mutex> lk(mu_);
  cv_.notify_all();
}

void NodeDaemon::heartbeat_loop(Stream& s, const std::atomic<bool>& reader_done) {
  LogWatcher watcher(opts_.log_dir, opts_.stall_after_ns);
  watcher.set_owners(opts_.log_owners);
  std::unique_ptr<GpuSampler> gpu;  // times each collective on the GPU while the stream lasts
  if (opts_.gpu_sample_ns > 0) {
    gpu = std::make_unique<GpuSampler>(opts_.log_dir, opts_.gpu_sample_ns);
    gpu->start();
    watcher.set_gpu_sampler(gpu.get());
  }
  const int64_t scan_every = std::min<int64_t>(opts_.heartbeat_interval_ns, 200'000'000);
  int64_t last_dir_check = 0;
  while (!stopping_ && !reader_done) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      watcher.set_job_filter(state_.job_filter());
      watcher.set_stall_after(state_.stall_after_ns());
    }
    ScanResult scan = watcher.scan();
    note_scan(scan);
    int64_t now = mono_ns();
    uint64_t alive = 0;
    for (const auto& p : scan.processes) alive += p.alive;
    processes_ = scan.processes.size();
    processes_alive_ = alive;
    if (now - last_dir_check >= 1'000'000'000) {
      check_log_dir();
      last_dir_check = now;
    }
    bool due;
    {
      std::lock_guard<std::mutex> lk(mu_);
      due = state_.heartbeat_due(scan.urgent, now);
    }
    if (due && !send_heartbeat(s, std::move(scan))) break;
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait_for(lk, std::chrono::nanoseconds(scan_every),
                 [&] { return stopping_.load() || reader_done.load(); });
  }
}

bool NodeDaemon::send_heartbeat(Stream& s, ScanResult scan) {
  NodeReport r;
  r.node_time_ns = real_ns();
  history_.add(scan.processes, r.node_time_ns);
  r.processes = std::move(scan.processes);
  r.unrecorded = std::move(scan.unrecorded);
  r.unreadable = std::move(scan.unreadable);
  r.gpu_alerts = check_gpus(&r.processes);
  std::optional<PingEcho> echo;
  {
    std::lock_guard<std::mutex> lk(mu_);
    r.seq = state_.heartbeat_sent(mono_ns(), &echo);
  }
  fr::v1::NodeMessage hb;
  to_proto(r, hb.mutable_heartbeat());
  if (echo) {
    auto* e = hb.mutable_heartbeat()->mutable_echo();
    e->set_t1_ns(echo->t1_ns);
    e->set_t2_ns(echo->t2_ns);
    e->set_t3_ns(real_ns());
  }
  if (!s.write(hb, protocol_)) return false;
  heartbeats_++;
  return true;
}

}  // namespace fr::daemon
