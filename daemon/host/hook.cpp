// See hook.h.
#include "daemon/host/hook.h"

#include <signal.h>
#include <sys/wait.h>

#include <cerrno>
#include <cstring>

#include "common/spawn.h"

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
  fr::process::SpawnOptions o;
  o.argv = {"/bin/sh", "-c", command_};
  o.env = std::move(vars);
  // The daemon blocks its stop signals for sigwait; the command starts with none blocked and
  // default dispositions, in a group of its own (so a time-out kills whatever it started).
  o.signal_mask = fr::process::signal_set({});
  o.default_signals = fr::process::signal_set({SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE, SIGCHLD});
  o.process_group = 0;
  fr::process::SpawnResult r = fr::process::spawn(o);
  if (!r.ok()) {
    *error = std::string("cannot start /bin/sh: ") + std::strerror(r.error);
    return false;
  }
  children_.push_back({r.pid, incident, now_mono, false});
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
      if (r < 0)
        how = "was reaped elsewhere";
      else if (c.killed)
        how = "was killed after " + std::to_string(timeout_ns_ / 1'000'000'000) + " s";
      else if (WIFEXITED(status))
        how = "exited with " + std::to_string(WEXITSTATUS(status));
      else
        how = "died of signal " + std::to_string(WTERMSIG(status));
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
