// Starting, reaping and stopping the launcher's child processes; see children.h.
#include "children.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <thread>

extern char** environ;

namespace fr::simjob {

std::vector<std::string> make_env(const std::vector<std::pair<std::string, std::string>>& set) {
  std::vector<std::string> out;
  for (char** e = environ; e && *e; ++e) {
    std::string kv = *e;
    std::string name = kv.substr(0, kv.find('='));
    bool replaced = false;
    for (auto& [k, v] : set) replaced |= (k == name);
    if (!replaced) out.push_back(kv);
  }
  for (auto& [k, v] : set) out.push_back(k + "=" + v);
  return out;
}

pid_t spawn(ChildSpec& c, pid_t pgid) {
  pid_t parent = ::getpid();
  int log_fd = ::open(c.log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (log_fd < 0) return -1;
  pid_t pid = ::fork();
  if (pid < 0) {
    ::close(log_fd);
    return -1;
  }
  if (pid == 0) {
    ::setpgid(0, pgid);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::dup2(log_fd, 1);
    ::dup2(log_fd, 2);
    int devnull = ::open("/dev/null", O_RDONLY);
    if (devnull >= 0) ::dup2(devnull, 0);
    ::execve(c.argv_ptrs[0], c.argv_ptrs.data(), c.envp_ptrs.data());
    const char msg[] = "fr-simjob: exec failed\n";
    (void)!::write(2, msg, sizeof msg - 1);
    ::_exit(127);
  }
  ::setpgid(pid, pgid == 0 ? pid : pgid);  // both sides set it: no race with a later killpg
  ::close(log_fd);
  return pid;
}

int reap(std::vector<ChildState>& kids) {
  int running = 0;
  for (auto& k : kids) {
    if (k.pid <= 0 || k.exited) continue;
    int st = 0;
    pid_t r = ::waitpid(k.pid, &st, WNOHANG);
    if (r == k.pid) {
      k.exited = true;
      k.status = st;
    } else if (r < 0 && errno == ECHILD) {
      k.exited = true;
      k.status = 0;
    } else {
      ++running;
    }
  }
  return running;
}

bool reap_all(std::vector<ChildState>& kids, double seconds) {
  auto start = std::chrono::steady_clock::now();
  while (reap(kids) > 0) {
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > seconds)
      return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

void kill_all(std::vector<ChildState>& kids, pid_t pgid, int sig) {
  reap(kids);
  for (auto& k : kids)
    if (k.pid > 0 && !k.exited) k.stopped = true;
  if (pgid > 0) ::killpg(pgid, sig);
  for (auto& k : kids)
    if (k.pid > 0 && !k.exited) ::kill(k.pid, sig);
}


}  // namespace fr::simjob
