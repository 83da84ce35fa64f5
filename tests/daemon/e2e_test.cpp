// Whole jobs through the daemons, as real processes: every fault kind of fr-simjob run with
// --daemons must come back with the right verdict and culprits, a healthy or merely slow job with
// no incident; and our own faults: the coordinator killed and restarted mid-job, a node daemon
// killed while its dump is wanted, a node daemon frozen until it counts as lost, a full dump
// directory, a wrong token. Reported as skipped (never passed) when fr-simjob or frd is missing,
// which building this test prevents: it depends on both.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "fixture.h"
#include "skip.h"
#include "stack_frames.h"
#include "testing/files.h"
#include "testing/wait.h"

namespace fs = std::filesystem;
using fr::daemon::test::TempDir;
using fr::test::slurp;
using fr::test::wait_for;
using nlohmann::json;

namespace {

const std::string kBuild = FR_BUILD_DIR;
const std::string kFrd = kBuild + "/bin/frd";
const std::string kSimjob = kBuild + "/bin/fr-simjob";

// Ends the test as skipped when the programs it runs are missing.
void require_built() {
  if (access(kFrd.c_str(), X_OK) == 0 && access(kSimjob.c_str(), X_OK) == 0) return;
  FR_SKIP("not built: " << kSimjob << " or " << kFrd);
}

// A child process in its own process group, killed with its group when the test ends.
struct Proc {
  pid_t pid = -1;
  int status = 0;
  bool reaped = false;

  Proc(const std::vector<std::string>& argv, const std::string& log) {
    pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      setpgid(0, 0);
      int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      if (fd >= 0) {
        dup2(fd, 1);
        dup2(fd, 2);
      }
      std::vector<char*> a;
      for (const auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
      a.push_back(nullptr);
      execv(a[0], a.data());
      _exit(127);
    }
    setpgid(pid, pid);
  }
  ~Proc() { stop(SIGKILL); }
  Proc(const Proc&) = delete;

  void signal(int sig) {
    if (!reaped) ::kill(-pid, sig);
  }
  bool running() {
    if (reaped) return false;
    if (waitpid(pid, &status, WNOHANG) == pid) reaped = true;
    return !reaped;
  }
  int stop(int sig = SIGTERM) {
    if (reaped) return status;
    ::kill(-pid, sig);
    if (!wait_for([&] { return !running(); }, 15)) {
      ::kill(-pid, SIGKILL);
      waitpid(pid, &status, 0);
      reaped = true;
    }
    ::kill(-pid, SIGKILL);  // whatever the group left behind
    return status;
  }
  int wait(double seconds) {
    if (!wait_for([&] { return !running(); }, seconds)) stop(SIGKILL);
    return status;
  }
};

int run(const std::vector<std::string>& argv, const std::string& log, double seconds = 120) {
  Proc p(argv, log);
  int st = p.wait(seconds);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

struct JobResult {
  int rc = -1;
  json result;
  std::string out;
};

std::vector<std::string> simjob_argv(const TempDir& dir, const std::vector<std::string>& faults,
                                     int steps, const std::vector<std::string>& extra) {
  std::vector<std::string> argv = {kSimjob,
                                   "--nodes",
                                   "2",
                                   "--ranks-per-node",
                                   "4",
                                   "--tp",
                                   "2",
                                   "--pp",
                                   "2",
                                   "--steps",
                                   std::to_string(steps),
                                   "--daemons",
                                   "--stall-after",
                                   "2",
                                   "--quiet",
                                   "--out",
                                   dir.path + "/job"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  for (const auto& f : faults) {
    argv.push_back("--fault");
    argv.push_back(f);
  }
  return argv;
}

JobResult job_result(const TempDir& dir, int rc) {
  JobResult r;
  r.out = dir.path + "/job";
  r.rc = rc;
  std::string text = slurp(r.out + "/result.json");
  r.result = json::parse(text, nullptr, false);
  INFO("simjob: " << slurp(dir.path + "/simjob.log"));
  INFO("coordinator: " << slurp(r.out + "/coordinator.log"));
  REQUIRE_FALSE(r.result.is_discarded());
  return r;
}

JobResult simjob_with_daemons(const TempDir& dir, const std::vector<std::string>& faults,
                              int steps = 6, const std::vector<std::string>& extra = {}) {
  return job_result(dir,
                    run(simjob_argv(dir, faults, steps, extra), dir.path + "/simjob.log", 180));
}

void check_verdict(const JobResult& r, const std::string& kind, std::set<int> culprits) {
  INFO("result.json: " << r.result.dump(1).substr(0, 3000));
  INFO("coordinator: " << slurp(r.out + "/coordinator.log"));
  REQUIRE(r.rc == 0);
  REQUIRE(r.result.contains("dump_set"));
  REQUIRE(r.result["dump_set"].is_string());
  std::string set = r.result["dump_set"];
  REQUIRE(fs::exists(set + "/analysis.json"));
  json manifest = json::parse(slurp(set + "/manifest.json"));
  CHECK(manifest["source"] == "frd coordinator");
  CHECK(manifest["processes"].size() == 8);
  CHECK(manifest["nodes"].size() == 2);
  const json& v = r.result["analysis"]["verdict"];
  CHECK(v["kind"] == kind);
  std::set<int> got;
  for (const auto& c : v["culprit_ranks"]) got.insert(c.get<int>());
  CHECK(got == culprits);
}

// The job ran to its end without the coordinator opening any incident (fr-simjob then takes its
// own final dump set, outside the coordinator's incidents, and analyses it: no hang).
void check_no_incident(const JobResult& r) {
  INFO("result.json: " << r.result.dump(1).substr(0, 2000));
  INFO("coordinator: " << slurp(r.out + "/coordinator.log"));
  CHECK(r.rc == 0);
  CHECK(r.result["completed"] == true);
  CHECK(slurp(r.out + "/coordinator.log").find("opened") == std::string::npos);
  std::error_code ec;
  bool any = false;
  for (const auto& e : fs::recursive_directory_iterator(r.out + "/incidents", ec))
    any |= e.path().filename() == "analysis.json";
  CHECK_FALSE(any);
  if (r.result.contains("analysis")) CHECK(r.result["analysis"]["verdict"]["kind"] == "no_hang");
}

std::string read_port(const std::string& file) {
  std::string p;
  wait_for(
      [&] {
        p = slurp(file);
        while (!p.empty() && (p.back() == '\n')) p.pop_back();
        return !p.empty();
      },
      30);
  return p;
}

json status(const std::string& addr, const std::string& dir, const std::string& token_file = "") {
  std::vector<std::string> argv = {kFrd, "status", "--coordinator", addr, "--json"};
  if (!token_file.empty()) {
    argv.push_back("--token-file");
    argv.push_back(token_file);
  }
  std::string out = dir + "/status.out";
  ::unlink(out.c_str());
  if (run(argv, out, 20) != 0) return json();
  return json::parse(slurp(out), nullptr, false);
}

int connected(const json& st) {
  int n = 0;
  if (st.is_object())
    for (const auto& node : st["nodes"]) n += node["connected"].get<bool>();
  return n;
}

// The first incident directory under dumps/<job>/ with an analysis.json.
std::string find_analysis(const std::string& dumps) {
  std::error_code ec;
  std::vector<std::string> found;
  for (const auto& job : fs::directory_iterator(dumps, ec))
    for (const auto& inc : fs::directory_iterator(job.path(), ec))
      if (fs::exists(inc.path() / "analysis.json", ec)) found.push_back(inc.path().string());
  std::sort(found.begin(), found.end());
  return found.empty() ? std::string() : found.front();
}

// A long job without daemons of its own (2 nodes x 2 ranks): every step takes 50 ms so the job
// lasts (every rank alike: a straggler would open a slow incident); with `hang_step` >= 0 rank 1's
// GPU stalls for good at that step.
std::unique_ptr<Proc> long_job(const TempDir& dir, int hang_step) {
  std::vector<std::string> argv = {kSimjob, "--nodes", "2",       "--ranks-per-node",
                                   "2",     "--steps", "1000000", "--step-ms",
                                   "50",    "--quiet", "--out",   dir.path + "/job"};
  if (hang_step >= 0) {
    argv.push_back("--fault");
    argv.push_back("rank=1,step=" + std::to_string(hang_step) + ",kind=gpu-stall");
  }
  auto p = std::make_unique<Proc>(argv, dir.path + "/simjob.log");
  REQUIRE(wait_for(
      [&] {
        return fs::exists(dir.path + "/job/node0/shm") && fs::exists(dir.path + "/job/node1/shm");
      },
      30));
  return p;
}

// The hang of long_job (rank 1's GPU) as a whole dump set under `dumps`: all 4 ranks, the
// right verdict.
void check_long_job_set(const std::string& dumps, double seconds) {
  std::string set;
  REQUIRE(wait_for([&] { return !(set = find_analysis(dumps)).empty(); }, seconds));
  json manifest = json::parse(slurp(set + "/manifest.json"));
  CHECK(manifest["processes"].size() == 4);
  json a = json::parse(slurp(set + "/analysis.json"));
  CHECK(a["verdict"]["kind"] == "stuck_in_collective");
  CHECK(a["verdict"]["culprit_ranks"] == json::array({1}));
}

std::unique_ptr<Proc> coordinator(const TempDir& dir, const std::string& dumps,
                                  const std::string& listen, const std::string& deadline = "8",
                                  std::vector<std::string> extra = {},
                                  const std::string& heartbeat_timeout = "3") {
  std::vector<std::string> argv = {kFrd,
                                   "coordinator",
                                   "--listen",
                                   listen,
                                   "--port-file",
                                   dir.path + "/port",
                                   "--dump-dir",
                                   dumps,
                                   "--stall-after",
                                   "2",
                                   "--heartbeat-timeout",
                                   heartbeat_timeout,
                                   "--dump-deadline",
                                   deadline};
  argv.insert(argv.end(), extra.begin(), extra.end());
  ::unlink((dir.path + "/port").c_str());
  return std::make_unique<Proc>(argv, dir.path + "/coordinator.log");
}

std::unique_ptr<Proc> node(const TempDir& dir, int n, const std::string& addr,
                           std::vector<std::string> extra = {}) {
  std::string name = "node" + std::to_string(n);
  std::vector<std::string> argv = {kFrd,
                                   "node",
                                   "--coordinator",
                                   addr,
                                   "--log-dir",
                                   dir.path + "/job/" + name + "/shm",
                                   "--node-name",
                                   name,
                                   "--heartbeat-interval",
                                   "0.2",
                                   "--stall-after",
                                   "2",
                                   "--dump-dir",
                                   dir.path + "/spool-" + name};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return std::make_unique<Proc>(argv, dir.path + "/" + name + ".log");
}

std::string logs(const TempDir& dir) {
  return "coordinator:\n" + slurp(dir.path + "/coordinator.log") + "node0:\n" +
         slurp(dir.path + "/node0.log") + "node1:\n" + slurp(dir.path + "/node1.log");
}

}  // namespace

TEST_CASE("daemons: hang-host is not_entered on the hung rank", "[daemon][e2e]") {
  require_built();
  TempDir d;
  check_verdict(simjob_with_daemons(d, {"rank=5,step=3,kind=hang-host"}), "not_entered", {5});
}

TEST_CASE("daemons: a crash is rank_dead", "[daemon][e2e]") {
  require_built();
  TempDir d;
  check_verdict(simjob_with_daemons(d, {"rank=2,step=3,kind=crash"}), "rank_dead", {2});
}

TEST_CASE("daemons: a skipped all-reduce is not_entered", "[daemon][e2e]") {
  require_built();
  TempDir d;
  check_verdict(simjob_with_daemons(d, {"rank=3,step=3,kind=skip,comm=dp"}), "not_entered", {3});
}

TEST_CASE("daemons: a stalled GPU is stuck_in_collective", "[daemon][e2e]") {
  require_built();
  TempDir d;
  check_verdict(simjob_with_daemons(d, {"rank=6,step=3,kind=gpu-stall,comm=dp"}),
                "stuck_in_collective", {6});
}

using fr::test::frame_index;
using fr::test::frames_text;

json evidence_of(const json& verdict, int rank) {
  for (const auto& e : verdict["evidence"])
    if (e["rank"] == rank) return e;
  return json();
}

TEST_CASE("daemons: a host hang shows the hung function in the culprit's stack",
          "[daemon][e2e][stacks]") {
  require_built();
  TempDir d;
  JobResult r = simjob_with_daemons(d, {"rank=5,step=3,kind=hang-host"});
  check_verdict(r, "not_entered", {5});
  const std::string set = r.result["dump_set"];
  json a = json::parse(slurp(set + "/analysis.json"));
  json e = evidence_of(a["verdict"], 5);
  REQUIRE(e.contains("stack"));
  const json& st = e["stack"];
  INFO("rank 5: " << frames_text(st));
  size_t hang = frame_index(st, "hang_forever"), step = frame_index(st, "run_step"),
         main = frame_index(st, "main");
  REQUIRE(hang < step);
  REQUIRE(step < main);
  REQUIRE(main < st.size());
  for (const auto& f : st) {
    REQUIRE(f.contains("function"));
    REQUIRE(f.contains("file"));
    REQUIRE(f.contains("line"));
    REQUIRE(f.contains("module"));
    REQUIRE((f["kind"] == "native" || f["kind"] == "python" || f["kind"] == "kernel"));
  }
  CHECK(st[hang]["file"].get<std::string>().find("rank_main.cpp") != std::string::npos);
  CHECK(st[hang]["line"].get<int>() > 0);
  // Rank 5 alone stands apart from the others.
  bool outlier = false;
  for (const auto& g : a["stack_groups"])
    if (g["outlier"] == true && g["ranks"] == json::array({5})) outlier = true;
  CHECK(outlier);
  std::string report = slurp(set + "/report.txt");
  INFO(report);
  CHECK(report.find("rank 5 is in hang_forever \u2190 run_step \u2190 main (rank_main.cpp:") !=
        std::string::npos);
  // Every rank's stacks and each node's GPU health are in the dump set, and travel with it.
  size_t stacks = 0, gpus = 0;
  for (const auto& f : fs::directory_iterator(set)) {
    std::string n = f.path().filename().string();
    stacks += n.size() > 12 && n.compare(n.size() - 12, 12, ".stacks.json") == 0;
    gpus += n.size() > 9 && n.compare(n.size() - 9, 9, ".gpu.json") == 0;
  }
  CHECK(stacks == 8);
  CHECK(gpus == 2);
  const std::string copy = d.path + "/copied";
  fs::copy(set, copy);
  std::string out = d.path + "/copied.json";
  REQUIRE(run({kBuild + "/bin/fr-analyze", "--json", copy}, out, 60) == 0);
  json b = json::parse(slurp(out));
  CHECK(evidence_of(b["verdict"], 5)["stack"] == st);
  CHECK(b["stack_groups"] == a["stack_groups"]);
  // Damaged side files cost only themselves: a stacks file of another schema, a GPU file that is
  // not JSON, a stacks file replaced by a FIFO (never opened). Each is named; the verdict stands.
  std::vector<std::string> side;
  for (const auto& f : fs::directory_iterator(copy)) {
    std::string n = f.path().filename().string();
    if (n.size() > 12 && n.compare(n.size() - 12, 12, ".stacks.json") == 0)
      side.push_back(f.path().string());
  }
  std::sort(side.begin(), side.end());
  REQUIRE(side.size() == 8);
  std::ofstream(side[0]) << "{\"schema\": \"fr-stacks/99\"}";
  fs::remove(side[1]);
  REQUIRE(::mkfifo(side[1].c_str(), 0644) == 0);
  std::ofstream(copy + "/node0.gpu.json") << "not json";
  REQUIRE(run({kBuild + "/bin/fr-analyze", "--json", copy}, out + ".2", 60) == 0);
  json c = json::parse(slurp(out + ".2"));
  CHECK(c["verdict"]["kind"] == "not_entered");
  CHECK(c["verdict"]["culprit_ranks"] == json::array({5}));
  CHECK(evidence_of(c["verdict"], 5)["stack"] == st);
  std::string warnings = c["inputs"]["warnings"].dump();
  INFO(warnings);
  CHECK(warnings.find("stacks not read: schema 'fr-stacks/99', expected fr-stacks/1") !=
        std::string::npos);
  CHECK(warnings.find("stacks not read: a FIFO") != std::string::npos);
  CHECK(warnings.find("GPU health not read: not a JSON object") != std::string::npos);
}

TEST_CASE(
    "daemons: a GPU stall shows every rank in the stream synchronization, with the culprit's GPU health",
    "[daemon][e2e][stacks]") {
  require_built();
  TempDir d;
  JobResult r = simjob_with_daemons(d, {"rank=6,step=3,kind=gpu-stall,comm=dp,xid=79"});
  check_verdict(r, "stuck_in_collective", {6});
  const std::string set = r.result["dump_set"];
  json a = json::parse(slurp(set + "/analysis.json"));
  std::set<int> syncing;
  for (const auto& g : a["stack_groups"]) {
    INFO("group " << g["ranks"].dump() << ": " << frames_text(g["frames"]));
    if (frame_index(g["frames"], "cuStreamSynchronize") < g["frames"].size())
      for (const auto& rank : g["ranks"]) syncing.insert(rank.get<int>());
  }
  CHECK(syncing == std::set<int>{0, 1, 2, 3, 4, 5, 6, 7});
  // Rank 6 is local rank 2 of node 1: the emulated GPU 0000:3d:00.0, which reported Xid 79.
  const json& v = a["verdict"];
  REQUIRE(v.contains("gpu_problems"));
  const std::string want = "rank 6's GPU 0000:3d:00.0 reported Xid 79 at ";
  CHECK(v["gpu_problems"][0]["summary"].get<std::string>().rfind(want, 0) == 0);
  CHECK(v["gpu_problems"][0]["ranks"] == json::array({6}));
  json e = evidence_of(v, 6);
  CHECK(e["gpu"]["pci_bus_id"] == "0000:3d:00.0");
  bool found = false;
  for (const auto& g : a["gpus"])
    if (g["node"] == "node1" && g["pci_bus_id"] == "0000:3d:00.0") {
      found = true;
      CHECK(g["ranks"] == json::array({6}));
      CHECK(g["xids"][0]["xid"] == 79);
    }
  CHECK(found);
  CHECK(slurp(set + "/report.txt").find(want) != std::string::npos);
}

TEST_CASE("daemons: fr-simjob --python: the hung Python rank's time.sleep frame is named",
          "[daemon][e2e][stacks]") {
  require_built();
  if (std::system("command -v py-spy >/dev/null 2>&1") != 0)
    FR_SKIP("py-spy is not installed (scripts/install-deps.sh installs it)");
  TempDir d;
  // Python ranks on NCCL through ctypes: the agent sees their calls through lookups on NCCL's own
  // handle, so the verdict is the one of the C++ ranks.
  // py-spy attaches after the native stacks, in what is left of the node's stack budget: a
  // generous one, so that a loaded test machine still leaves py-spy its time.
  JobResult r = simjob_with_daemons(d, {"rank=5,step=3,kind=hang-host"}, 6,
                                    {"--python", "--stack-budget", "30"});
  check_verdict(r, "not_entered", {5});
  const std::string set = r.result["dump_set"];
  json a = json::parse(slurp(set + "/analysis.json"));
  json e = evidence_of(a["verdict"], 5);
  REQUIRE(e.contains("stack"));
  const json& st = e["stack"];
  INFO("rank 5: " << frames_text(st));
  INFO("python stack error: " << e.value("python_stack_error", std::string("none")));
  size_t sleep = frame_index(st, "time_sleep"), hang = frame_index(st, "hang_forever"),
         step = frame_index(st, "run_step");
  REQUIRE(sleep < hang);
  REQUIRE(hang < step);
  REQUIRE(step < st.size());
  CHECK(st[sleep]["kind"] == "native");
  CHECK(st[hang]["kind"] == "python");
  CHECK(st[hang]["file"].get<std::string>().find("fr-simjob-rank.py") != std::string::npos);
  CHECK(st[hang]["line"].get<int>() > 0);
  std::string report = slurp(set + "/report.txt");
  INFO(report);
  CHECK(
      report.find(
          "rank 5 is in time_sleep \u2190 hang_forever \u2190 Rank.run_step (fr-simjob-rank.py:") !=
      std::string::npos);
}

TEST_CASE("daemons: nodes writing into a shared dump dir give the same verdict", "[daemon][e2e]") {
  require_built();
  TempDir d;
  JobResult r =
      simjob_with_daemons(d, {"rank=6,step=3,kind=gpu-stall,comm=dp"}, 6, {"--shared-dump-dir"});
  check_verdict(r, "stuck_in_collective", {6});
  json inc = json::parse(slurp(r.result["dump_set"].get<std::string>() + "/incident.json"));
  CHECK(inc["nodes_placed"] == json::array({"node0", "node1"}));
}

TEST_CASE("daemons: two jobs at once on one machine keep their dumps apart", "[daemon][e2e]") {
  require_built();
  // Same node names, same incident ids: each node's spool lives under its own job's directory,
  // so neither job's coordinator can receive the other's dump.
  TempDir a, b;
  Proc pa(simjob_argv(a, {"rank=3,step=3,kind=skip,comm=dp"}, 6, {}), a.path + "/simjob.log");
  Proc pb(simjob_argv(b, {"rank=6,step=3,kind=gpu-stall,comm=dp"}, 6, {}), b.path + "/simjob.log");
  int sa = pa.wait(180), sb = pb.wait(180);
  check_verdict(job_result(a, WIFEXITED(sa) ? WEXITSTATUS(sa) : 128), "not_entered", {3});
  check_verdict(job_result(b, WIFEXITED(sb) ? WEXITSTATUS(sb) : 128), "stuck_in_collective", {6});
}

TEST_CASE("daemons: mismatches name the odd rank", "[daemon][e2e]") {
  require_built();
  struct Case {
    const char* fault;
    int culprit;
  };
  for (Case c : {Case{"rank=1,step=3,kind=mismatch-count,comm=tp", 1},
                 Case{"rank=7,step=2,kind=mismatch-dtype,comm=dp", 7},
                 Case{"rank=4,step=3,kind=mismatch-op,comm=world", 4},
                 Case{"rank=0,step=3,kind=mismatch-root", 0}}) {
    DYNAMIC_SECTION(c.fault) {
      TempDir d;
      check_verdict(simjob_with_daemons(d, {c.fault}), "mismatch", {c.culprit});
    }
  }
}

TEST_CASE("daemons: a skipped pipeline send blames its sender", "[daemon][e2e]") {
  require_built();
  TempDir d;
  JobResult r = simjob_with_daemons(d, {"rank=2,step=3,kind=p2p-skip"});
  REQUIRE(r.rc == 0);
  const json& a = r.result["analysis"];
  CHECK(a["verdict"]["culprit_ranks"] == json::array({2}));
  bool reported = a["verdict"]["kind"] == "p2p_unmatched";
  for (const auto& f : a["findings"])
    reported |= f["kind"] == "p2p_unmatched" && f["culprit_ranks"] == json::array({2});
  CHECK(reported);
}

TEST_CASE("daemons: a healthy job raises no incident", "[daemon][e2e]") {
  require_built();
  TempDir d;
  check_no_incident(simjob_with_daemons(d, {}, 12));
}

TEST_CASE("daemons: a slow rank in a job too short to judge raises no incident", "[daemon][e2e]") {
  // Six steps (about a second): fewer collectives and judgements than a slow finding needs (the
  // fail-slow incident itself is fr-simjob's e2e test).
  require_built();
  TempDir d;
  JobResult r = simjob_with_daemons(d, {"rank=3,step=1,kind=slow,ms=150"});
  check_no_incident(r);
  // fr-simjob's own final dump set shows the slow rank first in the skew.
  REQUIRE(r.result.contains("analysis"));
  const json& a = r.result["analysis"];
  REQUIRE(a["skew"].is_array());
  REQUIRE(!a["skew"].empty());
  CHECK(a["skew"][0]["rank"] == 3);
  bool finding = false;
  for (const auto& f : a["findings"]) finding |= f["kind"] == "skew";
  CHECK(finding);
}

TEST_CASE("daemons: the coordinator killed and restarted mid-job still catches the hang",
          "[daemon][e2e]") {
  require_built();
  TempDir d;
  std::string dumps = d.path + "/dumps";
  auto job = long_job(d, 60);
  auto coord = coordinator(d, dumps, "127.0.0.1:0");
  std::string port = read_port(d.path + "/port");
  REQUIRE(!port.empty());
  std::string addr = "127.0.0.1:" + port;
  auto n0 = node(d, 0, addr);
  auto n1 = node(d, 1, addr);
  REQUIRE(wait_for([&] { return connected(status(addr, d.path)) == 2; }, 30));
  coord->stop(SIGKILL);
  coord = coordinator(d, dumps, addr);
  REQUIRE(read_port(d.path + "/port") == port);
  INFO(logs(d));
  check_long_job_set(dumps, 90);
}

TEST_CASE("daemons: a node daemon killed while its dump is wanted delivers after its restart",
          "[daemon][e2e]") {
  require_built();
  TempDir d;
  std::string dumps = d.path + "/dumps";
  auto job = long_job(d, 40);
  // A long heartbeat timeout: node1 is away on purpose, not lost.
  auto coord = coordinator(d, dumps, "127.0.0.1:0", "60", {}, "60");
  std::string addr = "127.0.0.1:" + read_port(d.path + "/port");
  auto n0 = node(d, 0, addr);
  auto n1 = node(d, 1, addr);
  REQUIRE(wait_for([&] { return connected(status(addr, d.path)) == 2; }, 30));
  // node1 freezes before the hang, so the dump request waits unread in its socket; then it is
  // killed for good. Its ranks (2 and 3) are still there, hung with everyone else.
  n1->signal(SIGSTOP);
  INFO(logs(d));
  REQUIRE(wait_for(
      [&] { return slurp(d.path + "/coordinator.log").find("opened") != std::string::npos; }, 60));
  n1->stop(SIGKILL);
  json st = status(addr, d.path);
  REQUIRE(st.is_object());
  REQUIRE(st["incidents"].size() == 1);
  CHECK(st["incidents"][0]["state"] == "collecting");  // still waiting for node1
  CHECK(find_analysis(dumps).empty());
  // Restarted, it is asked again at once and the dump set completes with every rank.
  n1 = node(d, 1, addr);
  check_long_job_set(dumps, 60);
}

TEST_CASE("daemons: a node daemon killed mid-upload delivers whole after its restart",
          "[daemon][e2e]") {
  require_built();
  TempDir d;
  std::string dumps = d.path + "/dumps";
  auto job = long_job(d, 30);
  auto coord = coordinator(d, dumps, "127.0.0.1:0", "60", {}, "60");
  std::string addr = "127.0.0.1:" + read_port(d.path + "/port");
  auto n0 = node(d, 0, addr);
  // node1 uploads slowly (its two logs take several seconds), so it can be killed mid-way.
  auto n1 = node(d, 1, addr, {"--upload-rate", "16K"});
  INFO(logs(d));
  std::string inc_dir;
  auto staging = [&] {
    std::error_code ec;
    for (const auto& job_dir : fs::directory_iterator(dumps, ec))
      for (const auto& inc : fs::directory_iterator(job_dir.path(), ec))
        for (const auto& e : fs::directory_iterator(inc.path(), ec))
          if (e.path().filename().string().rfind(".upload-node1-", 0) == 0) {
            inc_dir = inc.path().string();
            for (const auto& f : fs::directory_iterator(e.path(), ec))
              if (fs::file_size(f.path(), ec) > 0) return true;
          }
    return false;
  };
  REQUIRE(wait_for(staging, 90));
  n1->stop(SIGKILL);
  // The partial upload is dropped: no staging left, none of node1's files in the incident, and
  // no dump set yet (node1 is still wanted).
  CHECK(wait_for([&] { return !staging(); }, 40));
  int node1_files = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(inc_dir, ec))
    node1_files += e.path().filename().string().rfind("node1-", 0) == 0;
  CHECK(node1_files == 0);
  CHECK(find_analysis(dumps).empty());
  // Restarted at full speed, node1 delivers from its spool and the dump set is whole.
  n1 = node(d, 1, addr);
  check_long_job_set(dumps, 60);
}

TEST_CASE("daemons: a frozen node daemon counts as lost and the others dump", "[daemon][e2e]") {
  require_built();
  TempDir d;
  std::string dumps = d.path + "/dumps";
  auto job = long_job(d, -1);
  auto coord = coordinator(d, dumps, "127.0.0.1:0");
  std::string addr = "127.0.0.1:" + read_port(d.path + "/port");
  auto n0 = node(d, 0, addr);
  auto n1 = node(d, 1, addr);
  REQUIRE(wait_for(
      [&] {
        json st = status(addr, d.path);
        return connected(st) == 2 && st["ranks"]["alive"] == 4;
      },
      30));
  n1->signal(SIGSTOP);
  INFO(logs(d));
  std::string set;
  REQUIRE(wait_for([&] { return !(set = find_analysis(dumps)).empty(); }, 30));
  n1->signal(SIGCONT);
  json inc = json::parse(slurp(set + "/incident.json"));
  CHECK(inc["kind"] == "node_lost");
  CHECK(inc["nodes_asked"] == json::array({"node0"}));
  json manifest = json::parse(slurp(set + "/manifest.json"));
  REQUIRE(manifest["processes"].size() == 2);
  for (const auto& p : manifest["processes"]) CHECK(p["host"] == "node0");
  // Back from SIGCONT: known and connected again, no second incident.
  CHECK(wait_for([&] { return connected(status(addr, d.path)) == 2; }, 20));
  CHECK(status(addr, d.path)["incidents"].size() == 1);
}

TEST_CASE("daemons: a full dump directory is reported and loses nothing", "[daemon][e2e]") {
  require_built();
  TempDir d;
  std::string dumps = d.path + "/dumps";
  fs::create_directories(dumps);
  if (mount("tmpfs", dumps.c_str(), "tmpfs", 0, "size=16k") != 0) {
    FR_SKIP("cannot mount a small tmpfs: " << std::strerror(errno));
  }
  struct Unmount {
    std::string p;
    ~Unmount() { umount2(p.c_str(), MNT_DETACH); }
  } unmount{dumps};
  auto job = long_job(d, 30);
  auto coord = coordinator(d, dumps, "127.0.0.1:0", "4");
  std::string addr = "127.0.0.1:" + read_port(d.path + "/port");
  auto n0 = node(d, 0, addr);
  auto n1 = node(d, 1, addr);
  INFO(logs(d));
  // The dumps (tens of KiB each) do not fit in 16 KiB: the uploads fail.
  REQUIRE(wait_for(
      [&] {
        json st = status(addr, d.path);
        return st.is_object() && !st["incidents"].empty() &&
               st["incidents"][0]["error"].get<std::string>().find("space") != std::string::npos;
      },
      60));
  // The coordinator keeps serving, and the undelivered dumps wait in the nodes' spools.
  CHECK(coord->running());
  bool kept = false;
  std::error_code ec;
  for (const char* n : {"/spool-node0", "/spool-node1"})
    for (const auto& e : fs::recursive_directory_iterator(d.path + n, ec))
      kept |= e.path().extension() == ".frlog";
  CHECK(kept);
  // Room again: the dumps arrive and the dump set is written whole.
  umount2(dumps.c_str(), MNT_DETACH);
  unmount.p.clear();
  std::string set;
  CHECK(wait_for(
      [&] {
        set = find_analysis(dumps);
        if (set.empty()) return false;
        json m = json::parse(slurp(set + "/manifest.json"), nullptr, false);
        return m.is_object() && m["processes"].size() == 4;
      },
      60));
}

TEST_CASE("daemons: a wrong token is refused (no node joins within 1 s)", "[daemon][e2e]") {
  require_built();
  TempDir d;
  std::string dumps = d.path + "/dumps";
  std::ofstream(d.path + "/token") << "right-token\n";
  std::ofstream(d.path + "/wrong") << "wrong-token\n";
  // Token files are private (a readable one works, with a warning on stderr).
  fs::permissions(d.path + "/token", fs::perms::owner_read | fs::perms::owner_write);
  fs::permissions(d.path + "/wrong", fs::perms::owner_read | fs::perms::owner_write);
  auto coord = coordinator(d, dumps, "127.0.0.1:0", "8", {"--token-file", d.path + "/token"});
  std::string addr = "127.0.0.1:" + read_port(d.path + "/port");
  CHECK(run({kFrd, "status", "--coordinator", addr}, d.path + "/s1.log") == 1);
  CHECK(slurp(d.path + "/s1.log").find("token") != std::string::npos);
  CHECK(run({kFrd, "dump", "--coordinator", addr, "--token-file", d.path + "/wrong"},
            d.path + "/s2.log") == 1);
  fs::create_directories(d.path + "/job/node0/shm");
  auto n0 = node(d, 0, addr, {"--token-file", d.path + "/wrong"});
  std::this_thread::sleep_for(std::chrono::seconds(1));
  json st = status(addr, d.path, d.path + "/token");
  REQUIRE(st.is_object());
  CHECK(st["nodes"].empty());
  // Off loopback without a token (--insecure) the coordinator refuses to start.
  CHECK(run({kFrd, "coordinator", "--insecure", "--listen", "0.0.0.0:0", "--dump-dir", dumps},
            d.path + "/c2.log", 20) == 1);
  CHECK(slurp(d.path + "/c2.log").find("token") != std::string::npos);
}

TEST_CASE("frd: usage errors and an unreachable coordinator have distinct exit codes",
          "[daemon][e2e]") {
  if (access(kFrd.c_str(), X_OK) != 0) FR_SKIP("not built: " << kFrd);
  TempDir d;
  const std::string log = d.path + "/out.log";
  CHECK(run({kFrd, "node", "--log-dir", d.path}, log) == 2);
  CHECK(run({kFrd, "coordinator"}, log) == 2);
  CHECK(
      run({kFrd, "node", "--coordinator", "x:1", "--log-dir", d.path, "--heartbeat-interval", "0"},
          log) == 2);
  CHECK(run({kFrd, "node", "--coordinator", "x:1", "--log-dir", d.path, "--tls-cert", "c"}, log) ==
        2);
  for (const char* rate : {"fast", "0", "-5K", "10X", "1e30"})
    CHECK(run({kFrd, "node", "--coordinator", "x:1", "--log-dir", d.path, "--upload-rate", rate},
              log) == 2);
  CHECK(run({kFrd, "status", "--coordinator", "127.0.0.1:1"}, log) == 1);
  CHECK(run({kFrd, "dump", "--coordinator", "127.0.0.1:1"}, log) == 1);
  CHECK(run({kFrd, "status", "--token-file", d.path + "/missing"}, log) == 2);
  CHECK(run({kFrd, "coordinator", "--listen", "256.1.1.1:1", "--dump-dir", d.path + "/x"}, log) ==
        1);
  // --stall-after: auto or seconds from 0.1; anything else is refused before serving.
  for (const char* bad : {"soon", "0", "-3", "2s", "", "1e9", "Auto"}) {
    INFO("--stall-after '" << bad << "'");
    CHECK(
        run({kFrd, "coordinator", "--insecure", "--dump-dir", d.path + "/x", "--stall-after", bad},
            log) == 2);
  }
  CHECK(
      run({kFrd, "coordinator", "--insecure", "--dump-dir", d.path + "/x", "--stall-after", "soon"},
          log) == 2);
  CHECK(slurp(log).find("'soon' is neither auto nor a number of seconds") != std::string::npos);
  CHECK(
      run({kFrd, "coordinator", "--insecure", "--dump-dir", d.path + "/x", "--stall-factor", "0.5"},
          log) == 2);
}

TEST_CASE("frd: numeric flags that are NaN, infinite or past their type are refused",
          "[daemon][e2e]") {
  // CLI11's Range lets "nan" through (#37): frd node took --heartbeat-interval nan and ran with a
  // heartbeat interval of int64_t(NaN); `frd stacks --pid 99999999999999999999` read it as -1.
  if (access(kFrd.c_str(), X_OK) != 0) FR_SKIP("not built: " << kFrd);
  TempDir d;
  const std::string log = d.path + "/out.log";
  const std::vector<std::string> node = {kFrd,         "node",      "--coordinator", "127.0.0.1:1",
                                         "--insecure", "--log-dir", d.path};
  for (const char* flag :
       {"--heartbeat-interval", "--stall-after", "--exit-when-idle", "--stack-budget"})
    for (const char* bad : {"nan", "NaN", "inf", "-inf", "1e400", "99999999999999999999"}) {
      INFO("frd node " << flag << " " << bad);
      std::vector<std::string> argv = node;
      argv.insert(argv.end(), {flag, bad});
      CHECK(run(argv, log, 10) == 2);
      CHECK(slurp(log).find(std::string(flag) + ": '" + bad + "' is not a number from ") !=
            std::string::npos);
    }
  const std::vector<std::string> coord = {kFrd, "coordinator", "--insecure", "--dump-dir",
                                          d.path + "/x"};
  for (const char* flag :
       {"--stall-factor", "--heartbeat-timeout", "--dump-deadline", "--on-verdict-timeout"})
    for (const char* bad : {"nan", "inf", "1e400"}) {
      INFO("frd coordinator " << flag << " " << bad);
      std::vector<std::string> argv = coord;
      argv.insert(argv.end(), {flag, bad});
      CHECK(run(argv, log, 10) == 2);
    }
  for (const char* bad : {"127.0.0.1:99999999999999999999", "127.0.0.1:65536", "127.0.0.1:-1"}) {
    INFO("--listen " << bad);
    std::vector<std::string> argv = coord;
    argv.insert(argv.end(), {"--listen", bad});
    CHECK(run(argv, log, 10) == 1);
    CHECK(slurp(log).find("not HOST:PORT with a port from 0 to 65535") != std::string::npos);
    argv = node;
    argv.insert(argv.end(), {"--metrics-listen", bad});
    CHECK(run(argv, log, 10) == 2);
    CHECK(slurp(log).find("not HOST:PORT with a port from 0 to 65535") != std::string::npos);
  }
  for (const char* bad : {"99999999999999999999", "4294967297", "1:99999999999999", "1:-5"}) {
    INFO("frd stacks --pid " << bad);
    CHECK(run({kFrd, "stacks", "--pid", bad}, log, 10) == 2);
    CHECK(slurp(log).find("is not PID or PID:RANK") != std::string::npos);
  }
  for (const char* bad : {"-1", "99999999999999999999", "4294967296"}) {
    INFO("frd status --limit " << bad);
    CHECK(run({kFrd, "status", "--insecure", "--coordinator", "127.0.0.1:1", "--limit", bad}, log,
              10) == 2);
  }
}
