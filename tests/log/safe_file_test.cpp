// Hostile log directories and dump sets: FIFOs, devices and links where files belong, logs of
// other users, copies of live logs and two logs claiming one rank. Every reader (the safe open,
// read_log, read_manifest, list_local_logs, snapshot_dir) refuses each with a clear reason and
// never blocks: every test runs under an alarm, so a reader that hangs fails instead.
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <csignal>

#include "log/local_logs.h"
#include "log/reader.h"
#include "log/safe_file.h"
#include "log/snapshot.h"
#include "skip.h"
#include "test_log.h"
#include "testing/clock.h"
#include "testing/files.h"

using fr::test::slurp;
using fr::test::spit;
using fr::test::TempDir;
using fr::test::TestLog;

namespace {

// Ends the test process (a failure) if a reader blocks.
struct HangGuard {
  HangGuard() { ::alarm(60); }
  ~HangGuard() { ::alarm(0); }
};

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// A valid, unlocked log of `rank` written by pid `pid` at `create_ns`.
void make_log(const std::string& path, int rank, int pid, uint64_t create_ns = 0) {
  TestLog w;
  REQUIRE(w.create(path, 2, 16, rank));
  w.header()->pid = pid;
  w.header()->create_ns = create_ns;
  w.add_comm(0, 0xABC, 2, rank, 1, 1);
  w.append(0xABC);
}

// A child process that writes a log as the agent does (its own pid in the header, holding the
// writer's lock) and lives until the object goes away.
struct LiveWriter {
  pid_t pid = -1;
  int done[2] = {-1, -1};
  LiveWriter(const std::string& path, int rank, uint64_t create_ns) {
    int ready[2];
    REQUIRE(pipe(ready) == 0);
    REQUIRE(pipe(done) == 0);
    pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      TestLog w;
      bool ok = w.create(path, 2, 16, rank, /*lock=*/true);
      if (ok) {
        w.header()->create_ns = create_ns;
        w.add_comm(0, 0xABC, 2, rank, 1, 1);
        w.append(0xABC);
      }
      char c = ok ? 'y' : 'n';
      (void)!write(ready[1], &c, 1);
      (void)!read(done[0], &c, 1);
      _exit(0);
    }
    char c = 0;
    REQUIRE(read(ready[0], &c, 1) == 1);
    REQUIRE(c == 'y');
    ::close(ready[0]);
    ::close(ready[1]);
  }
  ~LiveWriter() {
    char c = 'x';
    (void)!write(done[1], &c, 1);
    waitpid(pid, nullptr, 0);
    ::close(done[0]);
    ::close(done[1]);
  }
};

const fr::log::LocalRefusal* refusal(const fr::log::LocalLogs& l, const std::string& name) {
  for (const auto& r : l.refused)
    if (r.name == name) return &r;
  return nullptr;
}

}  // namespace

TEST_CASE("open_regular opens regular files only, and never blocks on a FIFO") {
  HangGuard guard;
  TempDir dir;
  const std::string file = dir.path + "/a.frlog", fifo = dir.path + "/pipe.frlog",
                    link = dir.path + "/link.frlog", fifo_link = dir.path + "/to-pipe";
  spit(file, "hello");
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  REQUIRE(symlink(file.c_str(), link.c_str()) == 0);
  REQUIRE(symlink(fifo.c_str(), fifo_link.c_str()) == 0);

  fr::log::OpenedFile f = fr::log::open_regular(file);
  REQUIRE(f.ok());
  std::string text, err;
  REQUIRE(fr::log::read_all(f.fd.get(), 100, &text, &err, file));
  CHECK(text == "hello");
  CHECK_FALSE(fr::log::read_all(f.fd.get(), 3, &text, &err, file));
  CHECK(contains(err, "larger than 3 bytes"));

  f = fr::log::open_regular(fifo);
  CHECK(f.error == fr::log::OpenError::kNotRegular);
  CHECK(contains(f.message, "FIFO"));

  f = fr::log::open_regular(link);
  CHECK(f.error == fr::log::OpenError::kLink);
  CHECK(contains(f.reason, "symbolic link"));
  CHECK(fr::log::open_regular(link, fr::log::Links::kFollow).ok());
  // A link the user named may be followed, but only to a regular file.
  CHECK(fr::log::open_regular(fifo_link, fr::log::Links::kFollow).error ==
        fr::log::OpenError::kNotRegular);
  CHECK(fr::log::open_regular(dir.path).error == fr::log::OpenError::kNotRegular);
  CHECK(fr::log::open_regular(dir.path + "/missing").error == fr::log::OpenError::kMissing);
  // A character device is refused by its type, before any open.
  CHECK(fr::log::open_regular("/dev/null", fr::log::Links::kFollow).error ==
        fr::log::OpenError::kNotRegular);
  CHECK(contains(fr::log::open_regular("/dev/null").reason, "character device"));
}

TEST_CASE("open_beneath follows no link on the way down") {
  HangGuard guard;
  TempDir dir, outside;
  REQUIRE(mkdir((dir.path + "/sub").c_str(), 0755) == 0);
  spit(dir.path + "/sub/x.frlog", "x");
  spit(outside.path + "/secret", "secret");
  REQUIRE(symlink(outside.path.c_str(), (dir.path + "/out").c_str()) == 0);
  CHECK(fr::log::open_beneath(dir.path, "sub/x.frlog").ok());
  fr::log::OpenedFile f = fr::log::open_beneath(dir.path, "out/secret");
  CHECK(f.error == fr::log::OpenError::kLink);
  CHECK(contains(f.reason, "symbolic link on the way"));
  CHECK_FALSE(fr::log::open_beneath(dir.path, "../x").ok());
}

TEST_CASE("read_log and read_manifest refuse FIFOs and links with a clear error") {
  HangGuard guard;
  TempDir dir, outside;
  const std::string fifo = dir.path + "/pipe.frlog";
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  auto r = fr::log::read_log(fifo);
  CHECK_FALSE(r.ok());
  CHECK(r.error == fr::log::ReadError::kIo);
  CHECK(contains(r.message, "FIFO"));
  CHECK(fr::log::writer_alive(fifo) == std::nullopt);

  // manifest.json as a FIFO: an error, never a hang.
  REQUIRE(mkfifo((dir.path + "/manifest.json").c_str(), 0600) == 0);
  fr::log::Manifest m;
  std::string err;
  CHECK_FALSE(fr::log::read_manifest(dir.path, &m, &err));
  CHECK(contains(err, "FIFO"));

  // manifest.json as a link to a valid manifest elsewhere: refused.
  TempDir set;
  spit(outside.path + "/manifest.json", R"({"schema":"fr-dumpset/1","processes":[]})");
  REQUIRE(symlink((outside.path + "/manifest.json").c_str(),
                  (set.path + "/manifest.json").c_str()) == 0);
  CHECK_FALSE(fr::log::read_manifest(set.path, &m, &err));
  CHECK(contains(err, "symbolic link"));
}

TEST_CASE("log owners: the default, names and numbers") {
  fr::log::LogOwners d = fr::log::LogOwners::defaults();
  if (geteuid() == 0) {
    CHECK(d.any);
  } else {
    CHECK(d.accepts(geteuid()));
    CHECK_FALSE(d.accepts(geteuid() + 1));
  }
  fr::log::LogOwners o;
  std::string err;
  REQUIRE(o.add("root", &err));
  REQUIRE(o.add("4321", &err));
  CHECK(o.accepts(0));
  CHECK(o.accepts(4321));
  CHECK_FALSE(o.accepts(1234));
  CHECK(contains(o.describe(), "uid 0 (root)"));
  CHECK_FALSE(o.add("no-such-user-here", &err));
  CHECK(contains(err, "no such user"));
}

TEST_CASE("frd snapshot copies no link, FIFO or device out of the log dir") {
  HangGuard guard;
  TempDir logs, outside, out;
  make_log(logs.path + "/fr.job-test.hostA.100.frlog", 0, 100);
  // A valid log outside the log dir, linked in; a secret, linked in; a FIFO; a link to a tty.
  make_log(outside.path + "/elsewhere.frlog", 1, 101);
  spit(outside.path + "/secret", std::string(4096, 's'));
  REQUIRE(symlink((outside.path + "/elsewhere.frlog").c_str(),
                  (logs.path + "/linked.frlog").c_str()) == 0);
  REQUIRE(symlink((outside.path + "/secret").c_str(), (logs.path + "/secret.frlog").c_str()) == 0);
  REQUIRE(mkfifo((logs.path + "/pipe.frlog").c_str(), 0600) == 0);
  REQUIRE(symlink("/dev/tty", (logs.path + "/tty.frlog").c_str()) == 0);

  fr::log::SnapshotOptions opts;
  opts.log_dir = logs.path;
  opts.out_dir = out.path + "/set";
  auto res = fr::log::snapshot_dir(opts);
  REQUIRE(res.ok());
  REQUIRE(res.processes.size() == 1);
  CHECK(res.processes[0].rank == 0);
  REQUIRE(res.skipped.size() == 4);
  for (const auto& s : res.skipped) {
    INFO(s.file << ": " << s.error);
    if (contains(s.file, "pipe.frlog"))
      CHECK(contains(s.error, "FIFO"));
    else
      CHECK(contains(s.error, "symbolic link"));
  }
}

TEST_CASE("frd snapshot never opens a device in the log dir") {
  HangGuard guard;
  TempDir logs, out;
  // A character device node (the null device's numbers) named like a log.
  if (mknod((logs.path + "/dev.frlog").c_str(), S_IFCHR | 0600, makedev(1, 3)) != 0)
    FR_SKIP("cannot make a device node here (needs root): " << std::strerror(errno));
  make_log(logs.path + "/fr.job-test.hostA.100.frlog", 0, 100);
  fr::log::SnapshotOptions opts;
  opts.log_dir = logs.path;
  opts.out_dir = out.path + "/set";
  auto res = fr::log::snapshot_dir(opts);
  REQUIRE(res.ok());
  CHECK(res.processes.size() == 1);
  REQUIRE(res.skipped.size() == 1);
  CHECK(contains(res.skipped[0].error, "character device"));
}

TEST_CASE("logs of users not accepted are named and left out") {
  HangGuard guard;
  TempDir logs;
  make_log(logs.path + "/mine.frlog", 0, 100);
  make_log(logs.path + "/theirs.frlog", 1, 101);
  if (chown((logs.path + "/theirs.frlog").c_str(), 54321, 54321) != 0)
    FR_SKIP("cannot give a file to another user here (needs root): " << std::strerror(errno));
  fr::log::LocalLogOptions o;
  o.dir = logs.path;
  o.owners = fr::log::LogOwners{};
  o.owners.uids = {geteuid()};
  auto l = fr::log::list_local_logs(o);
  REQUIRE(l.logs.size() == 1);
  CHECK(l.logs[0].name == "mine.frlog");
  const auto* r = refusal(l, "theirs.frlog");
  REQUIRE(r);
  CHECK(contains(r->why, "owned by uid 54321"));
  CHECK(contains(r->why, "--log-owner"));
  o.owners.uids.push_back(54321);
  CHECK(fr::log::list_local_logs(o).logs.size() == 2);
}

TEST_CASE("a copy of a live log is a duplicate, never a dead process") {
  HangGuard guard;
  TempDir logs;
  const uint64_t created = fr::test::now_real_ns();
  const std::string genuine = logs.path + "/fr.job-test.hostA.live.frlog";
  LiveWriter w(genuine, 0, created);
  // The copy has the writer's pid, rank and creation time, but nobody holds its lock.
  spit(logs.path + "/copy.frlog", slurp(genuine));
  // A forged log: another pid claiming the same rank, unlocked (reads as dead).
  make_log(logs.path + "/forged.frlog", 0, 999999, created);

  fr::log::LocalLogOptions o;
  o.dir = logs.path;
  auto l = fr::log::list_local_logs(o);
  REQUIRE(l.logs.size() == 1);
  CHECK(l.logs[0].name == "fr.job-test.hostA.live.frlog");
  CHECK(l.logs[0].locked);
  CHECK(l.logs[0].lock_pid == w.pid);
  const auto* copy = refusal(l, "copy.frlog");
  REQUIRE(copy);
  CHECK(contains(copy->why, "duplicate"));
  const auto* forged = refusal(l, "forged.frlog");
  REQUIRE(forged);
  CHECK(contains(forged->why, "claims the same rank"));

  auto r = fr::log::read_local_log(logs.path, l.logs[0]);
  REQUIRE(r.ok());
  CHECK(r.log->writer_alive);
}

TEST_CASE("an unlocked log whose writer still runs is not a dead process") {
  HangGuard guard;
  TempDir logs;
  const uint64_t created = fr::test::now_real_ns();
  // Rank 1 lives and writes its log; rank 0's log claims this (live) test process as writer,
  // created after it started, but nobody holds its lock: a copy from elsewhere.
  LiveWriter w(logs.path + "/rank1.frlog", 1, created);
  make_log(logs.path + "/rank0.frlog", 0, getpid(), created);
  fr::log::LocalLogOptions o;
  o.dir = logs.path;
  auto l = fr::log::list_local_logs(o);
  REQUIRE(l.logs.size() == 1);
  CHECK(l.logs[0].name == "rank1.frlog");
  const auto* r = refusal(l, "rank0.frlog");
  REQUIRE(r);
  CHECK(contains(r->why, "is alive but does not hold this log"));

  // A writer that is gone (a pid that no longer runs): a genuine dead rank, kept.
  pid_t gone = fork();
  if (gone == 0) _exit(0);
  waitpid(gone, nullptr, 0);
  make_log(logs.path + "/rank0.frlog", 0, gone, created);
  l = fr::log::list_local_logs(o);
  CHECK(l.logs.size() == 2);
}

TEST_CASE("a log locked by another process than its header's writer is refused") {
  HangGuard guard;
  TempDir logs;
  // The child holds the lock and writes its own pid; the header is then made to name another.
  const std::string path = logs.path + "/rank0.frlog";
  LiveWriter w(path, 0, fr::test::now_real_ns());
  {
    // Patched through another descriptor: the child's lock stays.
    int fd = ::open(path.c_str(), O_RDWR);
    REQUIRE(fd >= 0);
    int32_t other = 1;  // init: alive, and not the lock holder
    REQUIRE(pwrite(fd, &other, sizeof other, offsetof(fr_log_header, pid)) == sizeof other);
    ::close(fd);
  }
  fr::log::LocalLogOptions o;
  o.dir = logs.path;
  auto l = fr::log::list_local_logs(o);
  CHECK(l.logs.empty());
  const auto* r = refusal(l, "rank0.frlog");
  REQUIRE(r);
  CHECK(contains(r->why, "its lock is held by pid"));
}
