// Starting, reaping and stopping the launcher's child processes; see children.h.
#include "children.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <thread>

#include "common/spawn.h"

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

pid_t spawn(const ChildSpec& c, pid_t pgid) {
  int log_fd = ::open(c.log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (log_fd < 0) return -1;
  int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  fr::process::SpawnOptions o;
  o.argv = c.argv;
  o.env = c.envp;
  o.process_group = pgid;
  o.parent_death_signal = SIGKILL;
  o.signal_mask = fr::process::signal_set({});
  o.redirects = {{1, log_fd}, {2, log_fd}};
  if (devnull >= 0) o.redirects.push_back({0, devnull});
  o.wait_for_exec = false;  // a rank that cannot exec exits 127, its log says why
  o.failure_note = "fr-simjob: exec failed\n";
  fr::process::SpawnResult r = fr::process::spawn(o);
  ::close(log_fd);
  if (devnull >= 0) ::close(devnull);
  if (!r.ok()) errno = r.error;
  return r.pid;
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
