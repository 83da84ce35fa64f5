// A copied or planted flight log must never become a dead rank. Live writers here are child
// processes that hold the writer's lock as the agent does; the node's watcher scans the log dir and
// its reports drive the coordinator's state machine (no sockets), which must open no incident on
// a healthy job whatever copies sit beside the logs, and must still see a real death.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <ctime>
#include <fstream>

#include "daemon/logic/coordinator.h"
#include "daemon/host/watcher.h"
#include "fixture.h"
#include "live_rank.h"
#include "log/reader.h"
#include "skip.h"
#include "testing/clock.h"

using namespace fr::daemon;
using fr::daemon::test::config;
using fr::daemon::test::FakeLog;
using fr::daemon::test::live_bytes;
using fr::daemon::test::Rank;
using fr::daemon::test::TempDir;
using fr::test::kSec;
using fr::test::now_real_ns;

namespace {

void copy_file(const std::string& from, const std::string& to) {
  std::ifstream in(from, std::ios::binary);
  std::ofstream(to, std::ios::binary) << in.rdbuf();
}

NodeReport report(ScanResult s) {
  NodeReport r;
  r.processes = std::move(s.processes);
  r.unreadable = std::move(s.unreadable);
  return r;
}

bool mentions(const std::vector<std::string>& lines, const std::string& part) {
  for (const auto& l : lines)
    if (l.find(part) != std::string::npos) return true;
  return false;
}

}  // namespace

TEST_CASE("copying a live flight log to a new name opens no incident on a healthy job",
          "[daemon]") {
  TempDir logs, dumps;
  const uint64_t created = now_real_ns();
  Rank r0(logs.path, 0, created), r1(logs.path, 1, created);
  // The red team's move: a copy of rank 0's live log under a new name, and a forged rank 1 log
  // naming a pid that does not run (it reads as a dead writer).
  copy_file(r0.path, logs.path + "/copy-of-rank0.frlog");
  {
    FakeLog f;
    f.rank = 1;
    std::string bytes = live_bytes(f, 999999, created);
    std::ofstream(logs.path + "/forged-rank1.frlog", std::ios::binary)
        .write(bytes.data(), std::streamsize(bytes.size()));
  }

  LogWatcher w(logs.path, 30 * kSec);
  CoordinatorState st(config(dumps.path));
  std::string err;
  uint64_t s = st.connect("n0", "h0", "job1", 0, &err);
  REQUIRE(s);
  for (int64_t t = 0; t < 10 * kSec; t += kSec / 2) {
    ScanResult scan = w.scan();
    REQUIRE(scan.processes.size() == 2);
    for (const auto& p : scan.processes) CHECK(p.alive);
    CHECK(mentions(scan.unreadable, "copy-of-rank0.frlog: duplicate"));
    CHECK(mentions(scan.unreadable, "forged-rank1.frlog: duplicate"));
    st.heartbeat(s, report(std::move(scan)), t);
    CHECK(st.tick(t).dumps.empty());
  }
  CHECK(st.incidents().empty());

  SECTION("the genuine rank's real death is still seen once, copy or not") {
    r0.kill_now();
    size_t dead_reports = 0;
    for (int64_t t = 10 * kSec; t < 14 * kSec && st.incidents().empty(); t += kSec / 2) {
      ScanResult scan = w.scan();
      for (const auto& p : scan.processes)
        if (!p.alive && p.rank == 0) ++dead_reports;
      CHECK(scan.processes.size() == 2);  // the dead rank 0 once, and rank 1
      st.heartbeat(s, report(std::move(scan)), t);
      st.tick(t);
    }
    CHECK(dead_reports > 0);
    REQUIRE(st.incidents().size() == 1);
    CHECK(st.incidents()[0].kind == IncidentKind::kRankDead);
  }
}

TEST_CASE("the node takes only the configured owners' logs", "[daemon]") {
  TempDir logs;
  FakeLog f;
  fr::daemon::test::write_log(logs.path, "r0.frlog", f);
  f.rank = 1;
  std::string planted = fr::daemon::test::write_log(logs.path, "r1.frlog", f);
  if (chown(planted.c_str(), 54321, 54321) != 0)
    FR_SKIP("cannot give a file to another user here (needs root): " << std::strerror(errno));
  LogWatcher w(logs.path, 30 * kSec);
  fr::log::LogOwners mine;
  mine.uids = {geteuid()};
  w.set_owners(mine);
  ScanResult scan = w.scan();
  REQUIRE(scan.processes.size() == 1);
  CHECK(scan.processes[0].rank == 0);
  CHECK(mentions(scan.unreadable, "r1.frlog: owned by uid 54321"));
}
