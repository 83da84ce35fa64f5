// A live flight log as the agent leaves it, for the daemon tests: a child process writes one
// rank's log under the agent's file name and holds the writer's lock on it until killed.
#pragma once

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "fixture.h"

namespace fr::daemon::test {

// A live log as the agent leaves it: no snapshot flag, the writer's pid and lock.
inline std::string live_bytes(FakeLog f, int pid, uint64_t create_ns) {
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
    path =
        dir + "/fr.job1.hostA." + std::to_string(pid) + "." + std::to_string(create_ns) + ".frlog";
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

}  // namespace fr::daemon::test
