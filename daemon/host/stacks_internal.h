// What the two halves of the stacks unit share (stacks.h): the helper side (stacks.cpp) runs
// py-spy, and the daemon side (stacks_take.cpp) runs `frd stacks`, each as a child whose stdout is
// read under a deadline and which is killed when the deadline passes; both name users and times
// in their one-line reasons. Internal to daemon/.
#pragma once

#include <poll.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <string>
#include <vector>

#include "daemon/base/model.h"
#include "log/side_files.h"

namespace fr::daemon::stacks {

// The name of user `uid`, or "uid N".
std::string user_name(uid_t uid);

// Starts `argv` with stdout to a pipe; returns the child's pid and the pipe's read end.
pid_t spawn_reader(const std::vector<std::string>& argv, int* out_fd);

// Reads `fd` until EOF or the deadline; a line callback sees every complete line. Returns
// whether EOF was reached.
template <class OnLine>
bool read_until(int fd, int64_t deadline_mono_ns, std::string* all, OnLine on_line) {
  std::string buf;
  char chunk[65536];
  for (;;) {
    int64_t left = deadline_mono_ns - mono_ns();
    if (left <= 0) return false;
    pollfd pfd{fd, POLLIN, 0};
    int r = ::poll(&pfd, 1, int(std::min<int64_t>(left / 1'000'000 + 1, 1000)));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) continue;
    ssize_t n = ::read(fd, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return true;
    if (all) {
      if (all->size() < fr::log::kMaxSideFileBytes) all->append(chunk, size_t(n));
      continue;
    }
    buf.append(chunk, size_t(n));
    size_t nl;
    while ((nl = buf.find('\n')) != std::string::npos) {
      on_line(buf.substr(0, nl));
      buf.erase(0, nl + 1);
    }
  }
}

// Waits for the child (SIGKILLed first when `kill_first`).
void reap(pid_t pid, bool kill_first);

// "0.3 s": a duration in a reason.
std::string seconds_text(int64_t ns);

}  // namespace fr::daemon::stacks
