// The soak with hostile clients beside a job: a simulated job of 2 nodes x 2 ranks (fr-simjob,
// rank 1's GPU stalling for good a few seconds in), a real frd coordinator and one frd node per
// node, while 700 hostile HTTP connections (silent, slow headers, slow bodies) crowd the
// coordinator's pages, 300 hostile TCP connections (silent, a cut HTTP/2 preface, garbage) crowd
// its gRPC port, and 24 hostile gRPC peers connect, heartbeat empty reports and leave, over and
// over. The job's verdict (stuck_in_collective, rank 1, all four ranks in the set) must still
// arrive, `/metrics` must keep answering, and the daemons' resident memory must stay under
// generous bounds. The figures are printed. About 30 s; bounded to 60 s of hostility.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "fixture.h"
#include "horde.h"
#include "peer.h"
#include "proc.h"
#include "skip.h"
#include "testing/files.h"
#include "testing/wait.h"

namespace fs = std::filesystem;
using fr::clitest::Proc;
using fr::test::slurp;
using fr::test::wait_for;
using nlohmann::json;

namespace {

const std::string kBuild = FR_BUILD_DIR;
const std::string kFrd = kBuild + "/bin/frd";
const std::string kSimjob = kBuild + "/bin/fr-simjob";
using Clock = std::chrono::steady_clock;

double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// VmRSS of a process, in MiB (0 once it is gone).
double rss_of(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
  return 0;
}

// The first incident directory under `dumps` (any job) with an analysis.json.
std::string find_analysis(const std::string& dumps) {
  std::error_code ec;
  for (const auto& job : fs::directory_iterator(dumps, ec))
    for (const auto& inc : fs::directory_iterator(job.path(), ec))
      if (fs::exists(inc.path() / "analysis.json", ec)) return inc.path().string();
  return "";
}

// Hostile gRPC peers: each connects under a name of its own, heartbeats an empty report, leaves,
// and does it again, until `stop`.
void flapping_peers(int port, int count, const std::atomic<bool>& stop,
                    std::atomic<size_t>* sessions) {
  std::vector<std::thread> threads;
  for (int k = 0; k < count; ++k)
    threads.emplace_back([&, k] {
      fr::daemon::ClientOptions c;
      c.address = "127.0.0.1:" + std::to_string(port);
      while (!stop) {
        fr::daemon::test::Peer p(c, "hostile-" + std::to_string(k));
        p.heartbeat(fr::daemon::NodeReport{});
        ++*sessions;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    });
  for (auto& t : threads) t.join();
}

}  // namespace

TEST_CASE(
    "soak: a hung job's verdict arrives through hostile HTTP clients and gRPC peers, memory bounded",
    "[soak][hostile]") {
  if (::access(kFrd.c_str(), X_OK) != 0 || ::access(kSimjob.c_str(), X_OK) != 0)
    FR_SKIP("not built: " << kSimjob << " or " << kFrd);
  REQUIRE(fr::daemon::test::raise_open_files(8192));  // the daemons inherit it
  fr::daemon::test::TempDir d;
  const std::string dumps = d.path + "/dumps";
  Proc coord(
      {kFrd, "coordinator", "--insecure", "--listen", "127.0.0.1:0", "--port-file",
       d.path + "/port", "--dump-dir", dumps, "--stall-after", "2", "--heartbeat-timeout", "5",
       "--dump-deadline", "8", "--expect-ranks", "4", "--metrics-listen", "127.0.0.1:0"},
      {}, d.path, "coordinator");
  std::smatch m;
  std::string log;
  REQUIRE(wait_for(
      [&] {
        log = coord.err();
        return std::regex_search(log, m, std::regex("metrics on port (\\d+)")) &&
               !slurp(d.path + "/port").empty();
      },
      30));
  const int http_port = std::stoi(m[1]);
  const int grpc_port = std::stoi(slurp(d.path + "/port"));
  const std::string addr = "127.0.0.1:" + std::to_string(grpc_port);

  // The job: every step takes 50 ms, so it lasts (every rank alike: a straggler would open a slow
  // incident first); rank 1's GPU stalls at step 100.
  Proc job({kSimjob, "--nodes", "2", "--ranks-per-node", "2", "--steps", "1000000", "--step-ms",
            "50", "--fault", "rank=1,step=100,kind=gpu-stall", "--quiet", "--out", d.path + "/job"},
           {}, d.path, "simjob");
  REQUIRE(wait_for(
      [&] {
        return fs::exists(d.path + "/job/node0/shm") && fs::exists(d.path + "/job/node1/shm");
      },
      30));
  std::vector<std::unique_ptr<Proc>> nodes;
  for (int n = 0; n < 2; ++n) {
    const std::string name = "node" + std::to_string(n);
    nodes.push_back(std::make_unique<Proc>(
        std::vector<std::string>{kFrd, "node", "--insecure", "--coordinator", addr, "--log-dir",
                                 d.path + "/job/" + name + "/shm", "--node-name", name,
                                 "--heartbeat-interval", "0.2", "--stall-after", "2", "--dump-dir",
                                 d.path + "/spool-" + name},
        std::map<std::string, std::string>{}, d.path, name));
  }

  const auto t0 = Clock::now();
  fr::daemon::test::Horde http(http_port, fr::daemon::test::http_horde_kinds());
  for (int s = 0; s < 24; ++s) http.add(25, "127.0.0." + std::to_string(3 + s));
  http.add(100, "127.0.0.2");
  fr::daemon::test::Horde grpc(grpc_port, fr::daemon::test::grpc_horde_kinds());
  for (int s = 0; s < 3; ++s) grpc.add(100, "127.0.1." + std::to_string(1 + s));
  std::atomic<bool> stop{false};
  std::atomic<size_t> peer_sessions{0};
  std::thread http_attack([&] { http.run(stop); });
  std::thread grpc_attack([&] { grpc.run(stop); });
  std::thread peers([&] { flapping_peers(grpc_port, 24, stop, &peer_sessions); });

  double coord_peak = 0, node_peak = 0, worst_page = 0;
  size_t pages = 0, pages_ok = 0;
  std::string set;
  while (since(t0) < 60 && (set = find_analysis(dumps)).empty()) {
    coord_peak = std::max(coord_peak, rss_of(coord.pid));
    for (const auto& n : nodes) node_peak = std::max(node_peak, rss_of(n->pid));
    std::string body;
    auto [status, seconds] = fr::daemon::test::timed_http_get(http_port, "/metrics", &body);
    ++pages;
    pages_ok += status == "HTTP/1.1 200 OK" && body.find("frd_nodes") != std::string::npos;
    worst_page = std::max(worst_page, seconds);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
  const double verdict_after = since(t0);
  coord_peak = std::max(coord_peak, rss_of(coord.pid));
  stop = true;
  http_attack.join();
  grpc_attack.join();
  peers.join();
  std::printf(
      "hostile soak: verdict after %.1f s under %zu hostile HTTP and %zu hostile gRPC connections "
      "(reopened %zu and %zu times) and %zu hostile peer sessions; /metrics %zu/%zu answered, worst "
      "%.0f ms; peak RSS coordinator %.0f MiB, node daemons %.0f MiB; longest held on the gRPC "
      "port: silent %.1f s, cut preface %.1f s, garbage %.1f s\n",
      verdict_after, http.size(), grpc.size(), http.reopened, grpc.reopened, peer_sessions.load(),
      pages_ok, pages, worst_page * 1e3, coord_peak, node_peak, grpc.longest_s[0],
      grpc.longest_s[1], grpc.longest_s[2]);
  INFO("coordinator: " << coord.err().substr(0, 6000));
  REQUIRE_FALSE(set.empty());
  json manifest = json::parse(slurp(set + "/manifest.json"));
  CHECK(manifest["processes"].size() == 4);
  json a = json::parse(slurp(set + "/analysis.json"));
  CHECK(a["verdict"]["kind"] == "stuck_in_collective");
  CHECK(a["verdict"]["culprit_ranks"] == json::array({1}));
  // Silent sockets on the gRPC port are dropped by its 10 s handshake deadline.
  if (verdict_after > 14) CHECK(grpc.longest_s[0] < 14);
  CHECK(pages_ok == pages);
  CHECK(worst_page < 2.0);
  // Generous: the figures above are what to watch.
  CHECK(coord_peak < 1024);
  CHECK(node_peak < 256);
}
