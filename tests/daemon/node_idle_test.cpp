// `frd node --exit-when-idle` (the node daemon fr-run starts, with no coordinator reachable): it
// leaves once its log directory has had no live flight log and no fr-run for that long, and not
// before; it stays while a writer holds its log or an fr-run holds its users file, and leaves
// after, whatever another user plants there. It drops its node lock on the way out. Real frd
// processes, bounded in time.
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>
#include <thread>

#include "daemon/base/node_lock.h"
#include "fixture.h"
#include "live_rank.h"
#include "proc.h"
#include "skip.h"
#include "testing/clock.h"
#include "testing/wait.h"

using fr::clitest::Proc;
using fr::test::kSec;
using fr::test::now_real_ns;

namespace {

const std::string kFrd = std::string(FR_BUILD_DIR) + "/bin/frd";
using Clock = std::chrono::steady_clock;

// frd node against a coordinator that is not there, leaving after `idle` seconds.
std::unique_ptr<Proc> idle_node(const std::string& dir, const std::string& idle) {
  if (::access(kFrd.c_str(), X_OK) != 0)
    FR_SKIP(kFrd << " is not built (build the frd target first)");
  return std::make_unique<Proc>(
      std::vector<std::string>{kFrd, "node", "--insecure", "--coordinator", "127.0.0.1:1",
                               "--log-dir", dir + "/shm", "--dump-dir", dir + "/spool",
                               "--exit-when-idle", idle},
      std::map<std::string, std::string>{}, dir, "node");
}

double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

}  // namespace

TEST_CASE("frd node --exit-when-idle: with no live flight log it leaves, and drops its node lock",
          "[daemon][node-idle]") {
  fr::daemon::test::TempDir d;
  REQUIRE(::mkdir((d.path + "/shm").c_str(), 0700) == 0);
  const auto t0 = Clock::now();
  auto node = idle_node(d.path, "1.5");
  REQUIRE(
      fr::test::wait_for([&] { return fr::daemon::probe_node_lock(d.path + "/shm").held; }, 20));
  REQUIRE(node->wait(30));
  const double took = since(t0);
  std::printf("frd node --exit-when-idle 1.5 with nothing to watch left after %.1f s\n", took);
  INFO(node->err());
  CHECK(node->status == 0);
  CHECK(took >= 1.5);
  CHECK(node->err().find("no live flight log in " + d.path +
                         "/shm and no fr-run using it for 1.5 s; exiting") != std::string::npos);
  CHECK_FALSE(fr::daemon::probe_node_lock(d.path + "/shm").held);
}

TEST_CASE(
    "frd node --exit-when-idle: it stays while a writer holds its log, and leaves after it dies",
    "[daemon][node-idle]") {
  fr::daemon::test::TempDir d;
  REQUIRE(::mkdir((d.path + "/shm").c_str(), 0700) == 0);
  fr::daemon::test::Rank rank(d.path + "/shm", 0, now_real_ns() - kSec);
  auto node = idle_node(d.path, "1");
  // Four times the idle limit with the rank alive: still there.
  CHECK_FALSE(node->wait(4));
  rank.kill_now();  // the log stays, its writer is gone
  const auto t0 = Clock::now();
  REQUIRE(node->wait(30));
  std::printf("frd node --exit-when-idle 1 left %.1f s after the last writer died\n", since(t0));
  INFO(node->err());
  CHECK(node->status == 0);
  CHECK(node->err().find("exiting (--exit-when-idle)") != std::string::npos);
}

TEST_CASE("frd node --exit-when-idle: it stays while an fr-run uses the directory",
          "[daemon][node-idle]") {
  fr::daemon::test::TempDir d;
  REQUIRE(::mkdir((d.path + "/shm").c_str(), 0700) == 0);
  std::string error;
  auto use = std::make_unique<fr::daemon::NodeUse>();
  REQUIRE(use->acquire(d.path + "/shm", &error));
  auto node = idle_node(d.path, "1");
  // A job still starting: no flight log yet, but its fr-run holds the users lock.
  CHECK_FALSE(node->wait(4));
  use.reset();
  REQUIRE(node->wait(30));
  CHECK(node->status == 0);
  // Once it has left, an fr-run coming now takes its users file at once and finds no node
  // daemon (and would start one).
  fr::daemon::NodeUse late;
  REQUIRE(late.acquire(d.path + "/shm", &error));
  CHECK_FALSE(fr::daemon::probe_node_lock(d.path + "/shm").held);
}

TEST_CASE("frd node --exit-when-idle: another user's links and locks neither keep it nor end it",
          "[daemon][node-idle]") {
  // A second local user (uid 65534) plants a link at the very name this process's users file
  // takes, and holds the users lock of older versions for good (#37).
  if (::getuid() != 0 || ::access("/usr/bin/setpriv", X_OK) != 0 ||
      ::access("/usr/bin/flock", X_OK) != 0)
    FR_SKIP("needs root, setpriv and flock to act as a second user");
  fr::daemon::test::TempDir d;
  REQUIRE(::chmod(d.path.c_str(), 0755) == 0);
  const std::string logs = d.path + "/shm";
  REQUIRE(::mkdir(logs.c_str(), 0777) == 0);
  REQUIRE(::chmod(logs.c_str(), 01777) == 0);
  const std::string mine = logs + "/" + fr::daemon::kNodeUsersName + "." +
                           std::to_string(::getuid()) + "." + std::to_string(::getpid());
  const std::string setpriv = "/usr/bin/setpriv --reuid 65534 --regid 65534 --clear-groups ";
  REQUIRE(std::system((setpriv + "ln -s /etc/shadow " + mine).c_str()) == 0);
  Proc holder({"/usr/bin/setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups",
               "/usr/bin/flock", "-x", logs + "/" + fr::daemon::kNodeUsersName, "sleep", "60"},
              {}, d.path, "holder");
  REQUIRE(fr::test::wait_for(
      [&] { return ::access((logs + "/" + fr::daemon::kNodeUsersName).c_str(), F_OK) == 0; }, 10));
  std::string error;
  auto use = std::make_unique<fr::daemon::NodeUse>();
  const auto t0 = Clock::now();
  REQUIRE(use->acquire(logs, &error));
  CHECK(since(t0) < 1);               // generous: older versions waited 10 s on the held lock
  CHECK(use->path() == mine + "-1");  // the link passed over, never followed
  auto node = idle_node(d.path, "1");
  CHECK_FALSE(node->wait(4));  // the job still starting: it stays
  use.reset();
  REQUIRE(node->wait(30));  // the job gone: it leaves, whatever the other user holds
  CHECK(node->status == 0);
}

TEST_CASE("frd node --exit-when-idle: another user's fr-run keeps a root daemon for a grace only",
          "[daemon][node-idle]") {
  // A root daemon without --log-owner serves every user, so another user's users file counts;
  // one held for good (uid 65534 here) kept it for ever before (#37). Ten idle limits, no more.
  if (::getuid() != 0 || ::access("/usr/bin/setpriv", X_OK) != 0 ||
      ::access("/usr/bin/flock", X_OK) != 0)
    FR_SKIP("needs root, setpriv and flock to act as a second user");
  fr::daemon::test::TempDir d;
  REQUIRE(::chmod(d.path.c_str(), 0755) == 0);
  const std::string logs = d.path + "/shm";
  REQUIRE(::mkdir(logs.c_str(), 0777) == 0);
  REQUIRE(::chmod(logs.c_str(), 01777) == 0);
  const std::string theirs = logs + "/" + fr::daemon::kNodeUsersName + ".65534.7";
  Proc holder({"/usr/bin/setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups",
               "/usr/bin/flock", "-x", theirs, "sleep", "60"},
              {}, d.path, "holder");
  REQUIRE(fr::test::wait_for([&] { return ::access(theirs.c_str(), F_OK) == 0; }, 10));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the lock taken
  const auto t0 = Clock::now();
  auto node = idle_node(d.path, "0.5");
  CHECK_FALSE(node->wait(3));  // within the grace (5 s), the other user's fr-run counts
  REQUIRE(node->wait(30));     // after it, not: the daemon leaves
  std::printf("a root daemon kept by another user's held users file left after %.1f s\n",
              since(t0));
  INFO(node->err());
  CHECK(node->status == 0);
  CHECK(node->err().find("exiting (--exit-when-idle)") != std::string::npos);
}
