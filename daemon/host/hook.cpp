// See hook.h.
#include "daemon/host/hook.h"

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <cerrno>
#include <cstring>

extern char** environ;

namespace fr::daemon {

VerdictHook::VerdictHook(std::string command, int64_t timeout_ns, size_t max_running)
    : command_(std::move(command)), timeout_ns_(timeout_ns), max_running_(max_running) {}

bool VerdictHook::start(const std::string& incident, const std::map<std::string, std::string>& env,
                        int64_t now_mono, std::string* error) {
  if (children_.size() >= max_running_) {
    *error = std::to_string(children_.size()) + " earlier --on-verdict commands still run";
    return false;
  }
  // The coordinator's environment, with the incident's variables set afresh.
  std::vector<std::string> vars;
  for (char** e = environ; e && *e; ++e) {
    std::string v = *e;
    if (!env.count(v.substr(0, v.find('=')))) vars.push_back(std::move(v));
  }
  for (const auto& [k, v] : env) vars.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (auto& v : vars) envp.push_back(v.data());
  envp.push_back(nullptr);
  std::string sh = "/bin/sh", dash_c = "-c", cmd = command_;
  char* argv[] = {sh.data(), dash_c.data(), cmd.data(), nullptr};

  // The daemon blocks its stop signals for sigwait; the command starts with none blocked and
  // default dispositions, in a group of its own (so a time-out kills whatever it started).
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, defaults;
  sigemptyset(&none);
  sigemptyset(&defaults);
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE, SIGCHLD}) sigaddset(&defaults, s);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF |
                                      POSIX_SPAWN_SETPGROUP);
  pid_t pid = -1;
  int rc = posix_spawn(&pid, sh.c_str(), nullptr, &attr, argv, envp.data());
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    *error = std::string("cannot start /bin/sh: ") + std::strerror(rc);
    return false;
  }
  children_.push_back({pid, incident, now_mono, false});
  return true;
}

std::vector<std::string> VerdictHook::poll(int64_t now_mono) {
  std::vector<std::string> lines;
  for (size_t i = 0; i < children_.size();) {
    Child& c = children_[i];
    int status = 0;
    pid_t r = waitpid(c.pid, &status, WNOHANG);
    if (r == c.pid || (r < 0 && errno == ECHILD)) {
      std::string how;
      if (r < 0) how = "was reaped elsewhere";
      else if (c.killed) how = "was killed after " + std::to_string(timeout_ns_ / 1'000'000'000) + " s";
      else if (WIFEXITED(status)) how = "exited with " + std::to_string(WEXITSTATUS(status));
      else how = "died of signal " + std::to_string(WTERMSIG(status));
      if (c.killed || r < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        lines.push_back("frd coordinator: --on-verdict for " + c.incident + " " + how);
      children_.erase(children_.begin() + long(i));
      continue;
    }
    if (!c.killed && now_mono - c.started > timeout_ns_) {
      ::kill(-c.pid, SIGKILL);
      c.killed = true;
    }
    ++i;
  }
  return lines;
}

}  // namespace fr::daemon
