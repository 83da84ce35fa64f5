// fr-run under a real launcher, both ways: torchrun starting one fr-run per local rank, and
// fr-run wrapping torchrun. Each rank sees the agent preloaded and the job's environment, the
// node has exactly one node daemon, a failing rank's status comes out of torchrun and fr-run, and
// SIGTERM to an fr-run that wraps torchrun ends the launcher and its workers. Skipped where
// torchrun is not installed.
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "daemon/base/node_lock.h"
#include "proc.h"
#include "skip.h"
#include "testing/files.h"
#include "testing/wait.h"

using namespace fr::clitest;
using fr::test::slurp;
using fr::test::wait_for;

namespace {

const std::string kBuild = FR_BUILD_DIR;
const std::string kFrRun = kBuild + "/bin/fr-run";
const std::string kFrd = kBuild + "/bin/frd";
const std::string kAgent = kBuild + "/lib/libfr_agent.so";

std::string find_on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::string p = path ? path : "/usr/bin:/bin";
  for (size_t start = 0; start <= p.size();) {
    size_t end = p.find(':', start);
    if (end == std::string::npos) end = p.size();
    std::string full = p.substr(start, end - start) + "/" + name;
    if (::access(full.c_str(), X_OK) == 0) return full;
    start = end + 1;
  }
  return {};
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

void stop_node_daemon(const std::string& log_dir) {
  auto s = fr::daemon::probe_node_lock(log_dir);
  if (s.held && s.pid > 0) {
    ::kill(s.pid, SIGTERM);
    wait_for([&] { return gone(s.pid); }, 20);
  }
}

}  // namespace

TEST_CASE("fr-run under torchrun and around torchrun", "[cli][fr-run][torchrun]") {
  std::string torchrun = find_on_path("torchrun");
  if (torchrun.empty()) FR_SKIP("torchrun is not installed");
  for (const auto& p : {kFrRun, kFrd, kAgent})
    if (::access(p.c_str(), R_OK) != 0) FR_SKIP(p << " is not built");
  TempDir d;
  Proc coord({kFrd, "coordinator", "--listen", "127.0.0.1:0", "--port-file", d.path + "/port",
              "--dump-dir", d.path + "/dumps"},
             {}, d.path, "coordinator");
  REQUIRE(wait_for([&] { return !slurp(d.path + "/port").empty(); }, 30));
  std::string addr = "127.0.0.1:" + slurp(d.path + "/port");
  while (!addr.empty() && (addr.back() == '\n' || addr.back() == ' ')) addr.pop_back();
  const std::string spool = "--frd-arg=" + d.path + "/spool";
  const char* show = "echo \"rank=$RANK job=$FR_JOB_ID logs=$FR_LOG_DIR preload=$LD_PRELOAD\"";
  const std::string agent = kBuild + "/bin/../lib/libfr_agent.so";

  SECTION("torchrun starts one fr-run per local rank") {
    std::string logs = d.path + "/shm1";
    Result r = run({torchrun, "--standalone", "--nproc-per-node", "3", "--no-python", kFrRun,
                    "--coordinator", addr, "--job-id", "tr1", "--log-dir", logs,
                    "--frd-arg=--dump-dir", spool, "--", "/bin/sh", "-c", show},
                   {}, d.path, "", 240);
    INFO(r.out << r.err);
    CHECK(r.status == 0);
    for (int i = 0; i < 3; ++i)
      CHECK(count(r.out, "rank=" + std::to_string(i) + " job=tr1 logs=" + logs +
                             " preload=" + agent) == 1);
    auto s = fr::daemon::probe_node_lock(logs);
    CHECK(s.held);
    CHECK(processes_with_args({kFrd, "node", logs}).size() == 1);
    stop_node_daemon(logs);

    // A failing rank: torchrun reports the failure with its own status, which fr-run passes on.
    r = run({torchrun, "--standalone", "--nproc-per-node", "2", "--no-python", kFrRun, "--log-dir",
             logs, "--", "/bin/sh", "-c", "[ \"$RANK\" = 1 ] && exit 3; exit 0"},
            {}, d.path, "", 240);
    CHECK(r.status == 1);
  }

  SECTION("fr-run wraps torchrun: the preload reaches every worker") {
    std::string logs = d.path + "/shm2";
    Result r = run({kFrRun, "--coordinator", addr, "--job-id", "tr2", "--log-dir", logs,
                    "--frd-arg=--dump-dir", spool, "--", torchrun, "--standalone",
                    "--nproc-per-node", "2", "--no-python", "/bin/sh", "-c", show},
                   {}, d.path, "", 240);
    INFO(r.out << r.err);
    CHECK(r.status == 0);
    for (int i = 0; i < 2; ++i)
      CHECK(count(r.out, "rank=" + std::to_string(i) + " job=tr2 logs=" + logs +
                             " preload=" + agent) == 1);
    CHECK(processes_with_args({kFrd, "node", logs}).size() == 1);

    // SIGTERM to fr-run reaches torchrun, which stops its workers and exits.
    Proc p({kFrRun, "--coordinator", addr, "--log-dir", logs, "--", torchrun, "--standalone",
            "--nproc-per-node", "2", "--no-python", "/bin/sh", "-c",
            "echo worker $RANK up; exec sleep 587"},
           {}, d.path, "wrapped");
    REQUIRE(wait_for([&] { return count(p.out(), " up") == 2; }, 180));
    ::kill(p.pid, SIGTERM);
    REQUIRE(p.wait(60));
    CHECK(p.status != 0);
    wait_for([&] { return processes_with_args({"sleep", "587"}).empty(); }, 30);
    CHECK(processes_with_args({"sleep", "587"}).empty());
    stop_node_daemon(logs);
  }
}
