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

#include "daemon/coordinator.h"
#include "daemon/watcher.h"
#include "fixture.h"
#include "log/reader.h"
#include "skip.h"

using namespace fr::daemon;
using fr::daemon::test::FakeLog;
using fr::daemon::test::TempDir;
using fr::daemon::test::config;

namespace {

constexpr int64_t kSec = 1'000'000'000;

uint64_t now_real_ns() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

// A live log as the agent leaves it: no snapshot flag, the writer's pid and lock.
std::string live_bytes(FakeLog f, int pid, uint64_t create_ns) {
  f.pid = pid;
  std::string bytes = fr::log::encode_snapshot(fr::daemon::test::make_log(f), create_ns);
  auto* h = reinterpret_cast<fr_log_header*>(bytes.data());
  h->flags &= ~FR_LOG_F_SNAPSHOT;
  h->snapshot_ns = 0;
  h->writer_alive = -1;
  h->create_ns = create_ns;
  return bytes;
}

// A child process writing one rank's log and holding its lock until killed.
struct Rank {
  pid_t pid = -1;
  std::string path;
  Rank(const std::string& dir, int rank, uint64_t create_ns) {
    int ready[2];
    REQUIRE(pipe(ready) == 0);
    pid = fork();
    REQUIRE(pid >= 0);
    FakeLog f;
    f.rank = rank;
    if (pid == 0) {
      // The agent's file name: fr.<job>.<host>.<pid>.<create-ns>.frlog
      std::string p = dir + "/fr.job1.hostA." + std::to_string(getpid()) + "." +
                      std::to_string(create_ns) + ".frlog";
      std::string bytes = live_bytes(f, getpid(), create_ns);
      int fd = ::open(p.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
      struct flock fl {};
      fl.l_type = F_WRLCK;
      fl.l_whence = SEEK_SET;
      fl.l_len = 1;
      bool ok = fd >= 0 && ::write(fd, bytes.data(), bytes.size()) == ssize_t(bytes.size()) &&
                fcntl(fd, F_SETLK, &fl) == 0;
      char c = ok ? 'y' : 'n';
      (void)!::write(ready[1], &c, 1);
      for (;;) pause();
    }
    char c = 0;
    REQUIRE(::read(ready[0], &c, 1) == 1);
    REQUIRE(c == 'y');
    ::close(ready[0]);
    ::close(ready[1]);
    path = dir + "/fr.job1.hostA." + std::to_string(pid) + "." + std::to_string(create_ns) + ".frlog";
  }
  void kill_now() {
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
      pid = -1;
    }
  }
  ~Rank() { kill_now(); }
};

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

TEST_CASE("copying a live flight log to a new name opens no incident on a healthy job", "[daemon]") {
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
    std::ofstream(logs.path + "/forged-rank1.frlog", std::ios::binary).write(bytes.data(), std::streamsize(bytes.size()));
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
