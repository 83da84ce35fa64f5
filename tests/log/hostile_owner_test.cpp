// A log's owner is another user who may change the file while it is read (issue #37): the owner
// flips a valid log between 4 KiB and its full size while readers (the reader in a process of its
// own, `frd snapshot`) read it again and again, and none of them dies; a sparse log whose header
// claims 8 GiB is read without allocating its holes in the tmpfs it lives in, or more than a few
// MiB of memory.
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <string>

#include "log/reader.h"
#include "skip.h"
#include "test_log.h"

using fr::test::TempDir;
using fr::test::TestLog;

namespace {

constexpr uint64_t kComm = 0xF11B;

// The owner: a log of `ring` records (over 4 MiB at 40,000), flipped between 4 KiB and its full
// size until killed. Every 16th time it is whole again some of its records are written anew.
pid_t start_flipping_owner(const std::string& path, uint32_t ring, bool snapshot) {
  pid_t pid = fork();
  if (pid != 0) return pid;
  TestLog w;
  if (!w.create(path, 4, ring, 0, /*lock=*/true)) std::_Exit(3);
  if (snapshot) w.header()->flags |= FR_LOG_F_SNAPSHOT;
  w.add_comm(0, kComm, 2, 0, 0, 0);
  for (uint64_t flip = 0;; ++flip) {
    if (flip % 16 == 0)
      for (uint32_t i = 0; i < ring; i += 97) w.append(kComm);
    if (::ftruncate(w.fd, 4096) != 0) std::_Exit(4);
    if (::ftruncate(w.fd, off_t(w.size)) != 0) std::_Exit(4);
    w.add_comm(0, kComm, 2, 0, 0, 0);  // the table came back zero
  }
}

// How a child ended, in words, for the failure message.
std::string ended(int status) {
  if (WIFSIGNALED(status)) return "killed by signal " + std::to_string(WTERMSIG(status));
  return "exit " + std::to_string(WEXITSTATUS(status));
}

void stop(pid_t pid) {
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
}

}  // namespace

TEST_CASE("a log its owner flips between 4 KiB and full size never kills its reader") {
  const bool snapshot = GENERATE(false, true);
  const uint32_t ring = GENERATE(64u, 40000u);  // 40,000 records: over 4 MiB
  INFO((snapshot ? "a dump" : "a live log") << " of " << ring << " records");
  TempDir dir;
  const std::string path = dir.sub("fr.job.hostA.1.frlog");
  pid_t owner = start_flipping_owner(path, ring, snapshot);
  REQUIRE(owner > 0);
  ::usleep(50'000);
  pid_t reader = fork();
  REQUIRE(reader >= 0);
  if (reader == 0) {
    auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(1500);
    // What a read returns is whatever the owner wrote (a file regrown from zero can even repeat
    // a sequence-lock value, so no copy of it can be told whole); the reader only has to live.
    size_t reads = 0;
    while (std::chrono::steady_clock::now() < until) {
      auto r = fr::log::read_log(path);
      reads += r.ok() || !r.message.empty();
    }
    std::_Exit(reads > 0 ? 0 : 5);
  }
  int status = 0;
  ::waitpid(reader, &status, 0);
  stop(owner);
  INFO("reader: " << ended(status));
  CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 0));
}

TEST_CASE("frd snapshot survives a log its owner flips between 4 KiB and full size") {
  TempDir dir, out;
  pid_t owner = start_flipping_owner(dir.sub("fr.job.hostA.1.frlog"), 40000, false);
  REQUIRE(owner > 0);
  ::usleep(50'000);
  const std::string frd = std::string(FR_BUILD_DIR) + "/bin/frd";
  for (int i = 0; i < 12; ++i) {
    const std::string cmd = frd + " snapshot --log-dir " + dir.path + " --out " + out.path +
                            "/set" + std::to_string(i) + " >/dev/null 2>&1";
    int status = std::system(cmd.c_str());
    INFO("run " << i << ": " << ended(status));
    CHECK((WIFEXITED(status) && WEXITSTATUS(status) != 127 && WEXITSTATUS(status) < 128));
  }
  stop(owner);
}

namespace {

// A sparse log: a header claiming a ring of 4 Mi records of 2 KiB (8 GiB) and that many records
// written, nothing else. False when the file cannot be made.
bool make_sparse_log(const std::string& path) {
  fr_log_header h{};
  const uint32_t ring = FR_MAX_RING_CAPACITY, record = 2048;
  fr::test::fill_layout(&h, fr::test::v6::kVersion, 1, ring, 0, 0, 0);
  h.record_size = record;
  h.file_size = h.ring_offset + uint64_t{ring} * record;
  h.record_counter = ring;
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return false;
  bool ok = ::pwrite(fd, &h, sizeof h, 0) == ssize_t(sizeof h) &&
            ::ftruncate(fd, off_t(h.file_size)) == 0;
  ::close(fd);
  return ok;
}

// In a child: reads `path` and reports (exit codes) whether the file's allocated blocks stayed
// the same. 0: read and nothing allocated; 6: blocks were allocated; 7: the read failed.
int read_sparse(const std::string& path) {
  struct stat before {};
  struct stat after {};
  if (::stat(path.c_str(), &before) != 0) return 8;
  auto r = fr::log::read_log(path);
  if (!r.ok()) return 7;
  if (::stat(path.c_str(), &after) != 0) return 8;
  return after.st_blocks == before.st_blocks ? 0 : 6;
}

}  // namespace

TEST_CASE("a sparse 8 GiB log costs its reader neither memory nor its tmpfs's space") {
  TempDir dir;
  pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    // A tmpfs of 64 MiB of its own (as /dev/shm is a tmpfs), in a mount namespace of this child:
    // nothing the read allocates can reach the machine's own tmpfs.
    if (::unshare(CLONE_NEWNS) != 0 || ::mount("none", "/", nullptr, MS_REC | MS_PRIVATE, nullptr))
      std::_Exit(kFrSkipExitCode);
    if (::mount("fr-test", dir.path.c_str(), "tmpfs", 0, "size=64m") != 0)
      std::_Exit(kFrSkipExitCode);
    const std::string path = dir.sub("fr.job.hostA.9.frlog");
    if (!make_sparse_log(path)) std::_Exit(9);
    std::_Exit(read_sparse(path));
  }
  int status = 0;
  struct rusage use {};
  REQUIRE(::wait4(child, &status, 0, &use) == child);
  if (WIFEXITED(status) && WEXITSTATUS(status) == kFrSkipExitCode)
    FR_SKIP("no private tmpfs here (unshare or mount not permitted)");
  INFO("reader: " << ended(status) << ", peak RSS " << use.ru_maxrss / 1024 << " MiB");
  CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 0));
  CHECK(use.ru_maxrss < 256 * 1024);  // KiB
}
