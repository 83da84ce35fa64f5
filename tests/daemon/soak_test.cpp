// The coordinator under a long, mixed load: 2,000 simulated nodes heartbeating (one callback
// stream each, a few connections carry them all), incidents opening and closing (manual ones and
// a stall that resolves), nodes flapping, uploads cut mid-way and sent again, and the coordinator
// restarted twice on the same directory and port. Through all of it: no dump that was accepted is
// lost, memory stays under a stated bound, and every incident gets exactly one verdict (its
// analysis.json, and one run of the verdict command). Bounded to about a minute under `make test`
// (label soak); FR_SOAK_SECONDS=600 runs it longer. It prints its figures.
#include <catch2/catch.hpp>

#include <dirent.h>
#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "daemon/rpc/client.h"
#include "daemon/rpc/convert.h"
#include "daemon/rpc/server.h"
#include "fixture.h"
#include "peer.h"
#include "testing/clock.h"
#include "testing/files.h"

using namespace fr::daemon;
using fr::daemon::test::rss_mib;
using fr::daemon::test::TempDir;
using fr::test::exists;
using fr::test::kSec;
using fr::test::slurp;

namespace {

using Clock = std::chrono::steady_clock;

// One simulated node: its control stream on gRPC's callback API. It heartbeats when told; a
// "real" node (one that has logs) records the dump requests it gets, the others answer at once
// that they have nothing to dump.
class SimNode : public grpc::ClientBidiReactor<fr::v1::NodeMessage, fr::v1::CoordinatorMessage> {
 public:
  SimNode(fr::v1::Coordinator::Stub* stub, const std::string& token, int index, bool real)
      : index_(index), real_(real) {
    ctx_.AddMetadata("authorization", "Bearer " + token);
    stub->async()->Connect(&ctx_, this);
    fr::v1::NodeMessage hello;
    hello.mutable_hello()->set_protocol(1);
    hello.mutable_hello()->set_node_name(name());
    hello.mutable_hello()->set_host(name());
    StartRead(&in_);
    queue(std::move(hello));
    StartCall();
  }

  std::string name() const { return "node" + std::to_string(index_); }

  void heartbeat(int64_t stalled_ns) {
    NodeReport r;
    for (int k = 0; k < 8; ++k) {
      ProcessReport p;
      p.log = "fr.soak." + name() + "." + std::to_string(k) + ".frlog";
      p.rank = index_ * 8 + k;
      p.world_size = 16000;
      p.pid = 1000 + k;
      p.alive = true;
      p.job_id = "job1";
      p.host = name();
      for (int c = 0; c < 2; ++c) {
        CommProgress cp;
        cp.comm_id = 0x1000 + uint64_t(c);
        cp.size = 16000;
        cp.rank = p.rank;
        cp.coll_seq = cp.enqueued = cp.started = 50;
        bool stuck = stalled_ns > 0 && k == 0 && c == 0;
        cp.completed = stuck ? 49 : 50;
        cp.oldest_age_ns = stuck ? stalled_ns : 0;
        cp.oldest_seq = 50;
        p.comms.push_back(cp);
      }
      r.processes.push_back(std::move(p));
    }
    fr::v1::NodeMessage m;
    to_proto(r, m.mutable_heartbeat());
    queue(std::move(m));
  }

  void OnReadDone(bool ok) override {
    if (!ok) return;
    if (in_.has_welcome()) {
      std::lock_guard<std::mutex> lk(mu_);
      key_ = in_.welcome().upload_key();
      welcomed = true;
    } else if (in_.has_dump_request()) {
      if (real_) {
        std::lock_guard<std::mutex> lk(mu_);
        requests_.insert(in_.dump_request().incident_id());
      } else {
        fr::v1::NodeMessage st;
        st.mutable_dump_status()->set_incident_id(in_.dump_request().incident_id());
        st.mutable_dump_status()->set_ok(false);
        st.mutable_dump_status()->set_error("simulated node: no logs");
        queue(std::move(st));
      }
    }
    StartRead(&in_);
  }

  void OnWriteDone(bool ok) override {
    std::lock_guard<std::mutex> lk(mu_);
    writing_ = false;
    if (!ok || pending_.empty()) return;
    out_ = std::move(pending_.front());
    pending_.erase(pending_.begin());
    writing_ = true;
    StartWrite(&out_);
  }

  void OnDone(const grpc::Status&) override {
    std::lock_guard<std::mutex> lk(mu_);
    done_ = true;
    cv_.notify_all();
  }

  void cancel() { ctx_.TryCancel(); }
  void wait_done() {
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait(lk, [&] { return done_; });
  }
  std::string key() {
    std::lock_guard<std::mutex> lk(mu_);
    return key_;
  }
  std::set<std::string> requests() {
    std::lock_guard<std::mutex> lk(mu_);
    return requests_;
  }

  std::atomic<bool> welcomed{false};

 private:
  void queue(fr::v1::NodeMessage m) {
    std::lock_guard<std::mutex> lk(mu_);
    if (done_) return;
    if (writing_) {
      if (pending_.size() < 8) pending_.push_back(std::move(m));  // a heartbeat can wait
      return;
    }
    out_ = std::move(m);
    writing_ = true;
    StartWrite(&out_);
  }

  int index_;
  bool real_;
  grpc::ClientContext ctx_;
  fr::v1::CoordinatorMessage in_;
  fr::v1::NodeMessage out_;
  std::vector<fr::v1::NodeMessage> pending_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool writing_ = false, done_ = false;
  std::string key_;
  std::set<std::string> requests_;
};

}  // namespace

TEST_CASE("soak: 2,000 nodes, incidents, flapping, cut uploads and two restarts", "[soak]") {
  double seconds = 60;
  if (const char* s = std::getenv("FR_SOAK_SECONDS")) seconds = std::max(30.0, std::atof(s));
  const int kNodes = 2000, kReal = 4, kChannels = 16;
  const double kRssBoundMiB = 1536;  // the stated bound: this process, coordinator and nodes
  TempDir dumps, logs, out;
  const std::string token = "soak-token";
  CoordinatorConfig cfg;
  cfg.dump_dir = dumps.path;
  cfg.job_id = "job1";
  cfg.stall_after_ns = 3 * kSec;
  cfg.heartbeat_timeout_ns = 15 * kSec;
  cfg.dump_deadline_ns = 20 * kSec;
  cfg.heartbeat_interval_ns = kSec;
  ServerOptions so;
  so.listen = "127.0.0.1:0";
  so.quiet = true;
  so.token = token;
  so.on_verdict = "echo \"$FR_INCIDENT_ID\" >> " + out.path + "/verdicts";
  // The real nodes' dumps: one flight log each.
  std::vector<std::string> dump_bytes;
  for (int i = 0; i < kReal; ++i) {
    fr::daemon::test::FakeLog f;
    f.rank = i * 8;
    f.world_size = 16000;
    f.pid = 1000;
    f.ops = {{FR_OP_ALLREDUCE, 1, 1, kSec, true, false}};
    fr::daemon::test::write_log(logs.path, "r" + std::to_string(i) + ".frlog", f);
    dump_bytes.push_back(slurp(logs.path + "/r" + std::to_string(i) + ".frlog"));
  }

  std::map<std::string, std::string> accepted;  // incident dir/file -> bytes, for every ok upload
  uint64_t heartbeats = 0, flaps = 0, cut = 0, triggers = 0;
  double peak_rss = rss_mib();
  size_t peak_retained = 0;
  int port = 0;
  const auto t_start = Clock::now();

  for (int epoch = 0; epoch < 3; ++epoch) {
    if (port) so.listen = "127.0.0.1:" + std::to_string(port);
    auto server = std::make_unique<CoordinatorServer>(cfg, so);
    std::string err;
    REQUIRE(server->start(&err));
    port = server->port();
    ClientOptions c;
    c.address = "127.0.0.1:" + std::to_string(port);
    c.token = token;
    std::vector<std::unique_ptr<fr::v1::Coordinator::Stub>> stubs;
    for (int k = 0; k < kChannels; ++k) {
      grpc::ChannelArguments args;
      args.SetInt("fr.soak.channel", k);
      stubs.push_back(fr::v1::Coordinator::NewStub(
          grpc::CreateCustomChannel(c.address, grpc::InsecureChannelCredentials(), args)));
    }
    std::vector<std::unique_ptr<SimNode>> sims;
    for (int n = 0; n < kNodes; ++n)
      sims.push_back(
          std::make_unique<SimNode>(stubs[size_t(n % kChannels)].get(), token, n, n < kReal));
    std::mt19937 rng(uint32_t(epoch + 1));
    const auto e_start = Clock::now();
    const double e_len = seconds / 3;
    std::map<std::string, int> tried;  // incident/node -> upload attempts
    auto elapsed = [&] { return std::chrono::duration<double>(Clock::now() - e_start).count(); };
    double next_beat = 0, next_trigger = 2, next_flap = 1;
    while (elapsed() < e_len) {
      double t = elapsed();
      if (t >= next_beat) {
        // Node 0 reports a stall for a few seconds in the middle epoch, then it clears.
        int64_t stall = epoch == 1 && t > 3 && t < 9 ? int64_t((t - 2) * kSec) : 0;
        for (int n = 0; n < kNodes; ++n) sims[size_t(n)]->heartbeat(n == 0 ? stall : 0);
        heartbeats += kNodes;
        next_beat += 1;
      }
      if (t >= next_flap) {
        // Twenty nodes (not the real ones) drop their stream and reconnect.
        for (int i = 0; i < 20; ++i) {
          size_t n = kReal + rng() % (kNodes - kReal);
          sims[n]->cancel();
          sims[n]->wait_done();
          sims[n] = std::make_unique<SimNode>(stubs[n % kChannels].get(), token, int(n), false);
          flaps++;
        }
        next_flap += 1;
      }
      if (t >= next_trigger && t < e_len - 4) {
        std::string id;
        if (trigger_dump(c, "soak", &id, &err)) triggers++;
        next_trigger += 5;
      }
      // The real nodes deliver what they were asked: first cut off half-way, then whole.
      for (int r = 0; r < kReal; ++r) {
        for (const auto& id : sims[size_t(r)]->requests()) {
          std::string k = id + "/" + sims[size_t(r)]->name();
          if (tried[k] >= 3) continue;
          int attempt = tried[k]++;
          std::string file = sims[size_t(r)]->name() + "-rank" + std::to_string(r * 8) + ".frlog";
          fr::v1::UploadReply reply;
          size_t cut_after = attempt == 0 ? dump_bytes[size_t(r)].size() / 2 : 0;
          grpc::Status st =
              fr::daemon::test::upload(c, id, sims[size_t(r)]->name(), sims[size_t(r)]->key(),
                                       {{file, dump_bytes[size_t(r)]}}, &reply, cut_after);
          if (cut_after) cut++;
          if (st.ok() && reply.ok() && !reply.duplicate())
            accepted[dumps.path + "/job1/" + id + "/" + file] = dump_bytes[size_t(r)];
        }
      }
      peak_rss = std::max(peak_rss, rss_mib());
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (epoch == 2) {
      // The last coordinator finishes what is open before the end.
      auto busy = [&] {
        for (const auto& i : server->status()["incidents"])
          if (i["state"] == "collecting" || i["state"] == "analyzing") return true;
        return false;
      };
      auto until = Clock::now() + std::chrono::seconds(60);
      while (busy() && Clock::now() < until) {
        for (int n = 0; n < kNodes; ++n) sims[size_t(n)]->heartbeat(0);
        for (int r = 0; r < kReal; ++r)
          for (const auto& id : sims[size_t(r)]->requests()) {
            std::string k = id + "/" + sims[size_t(r)]->name();
            if (tried[k] >= 3) continue;
            tried[k]++;
            std::string file = sims[size_t(r)]->name() + "-rank" + std::to_string(r * 8) + ".frlog";
            fr::v1::UploadReply reply;
            if (fr::daemon::test::upload(c, id, sims[size_t(r)]->name(), sims[size_t(r)]->key(),
                                         {{file, dump_bytes[size_t(r)]}}, &reply)
                    .ok() &&
                reply.ok() && !reply.duplicate())
              accepted[dumps.path + "/job1/" + id + "/" + file] = dump_bytes[size_t(r)];
          }
        std::this_thread::sleep_for(std::chrono::milliseconds(500));
      }
      CHECK_FALSE(busy());
    }
    auto st = server->status();
    int welcomed = 0;
    for (auto& s : sims) welcomed += s->welcomed;
    std::printf("soak epoch %d: %d of %d nodes welcomed, %zu incidents known, RSS %.0f MiB\n",
                epoch, welcomed, kNodes, st["incidents"].size(), rss_mib());
    nlohmann::json page;
    REQUIRE(fetch_status(c, &page, &err, 0, 0, true));
    CHECK(page.dump().size() < (8u << 20));
    // The coordinator goes away with the streams open (a restart).
    server.reset();
    for (auto& s : sims) s->cancel();
    for (auto& s : sims) s->wait_done();
  }
  const double took = std::chrono::duration<double>(Clock::now() - t_start).count();

  // Every incident: exactly one verdict.
  std::map<std::string, int> verdicts;
  std::istringstream vs(slurp(out.path + "/verdicts"));
  for (std::string id; std::getline(vs, id);) verdicts[id]++;
  std::vector<std::string> incidents;
  if (DIR* d = opendir((dumps.path + "/job1").c_str())) {
    while (dirent* e = readdir(d))
      if (std::string(e->d_name).rfind("incident-", 0) == 0) incidents.push_back(e->d_name);
    closedir(d);
  }
  int no_verdict = 0, twice = 0;
  for (const auto& id : incidents) {
    std::string dir = dumps.path + "/job1/" + id;
    if (!exists(dir + "/analysis.json") || verdicts[id] == 0) {
      no_verdict++;
      INFO(id << " has no verdict: " << slurp(dir + "/incident.json"));
      CHECK(false);
    }
    if (verdicts[id] > 1) twice++;
  }
  // No accepted dump lost.
  int lost = 0;
  for (const auto& [path, bytes] : accepted) lost += slurp(path) != bytes;
  std::printf(
      "soak: %.0f s, %d nodes, %llu heartbeats, %llu flaps, %llu manual triggers, "
      "%zu incidents (%d without a verdict, %d with more than one), %zu uploads accepted "
      "(%d lost), %llu cut mid-way, 2 restarts, peak RSS %.0f MiB (bound %.0f)\n",
      took, kNodes, (unsigned long long)heartbeats, (unsigned long long)flaps,
      (unsigned long long)triggers, incidents.size(), no_verdict, twice, accepted.size(), lost,
      (unsigned long long)cut, peak_rss, kRssBoundMiB);
  CHECK(incidents.size() >= 3);
  CHECK(twice == 0);
  CHECK(lost == 0);
  CHECK(accepted.size() > 0);
  CHECK(peak_rss < kRssBoundMiB);
  (void)peak_retained;
}
