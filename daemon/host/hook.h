// `frd coordinator --on-verdict CMD`: the operator's command, run once for every dump set the
// coordinator writes (page someone, post the verdict, stop the job so the scheduler restarts it).
// It runs as `/bin/sh -c CMD` in its own process group, with the coordinator's environment plus
// the incident (FR_INCIDENT_ID, FR_INCIDENT_DIR, FR_INCIDENT_KIND, FR_JOB_ID, FR_VERDICT,
// FR_CULPRITS, FR_SUMMARY; for a slow incident also FR_SLOW_CAUSE and FR_SLOW_FACTOR), and is never waited for on the caller's thread: poll() reaps it and
// kills it (its whole group) once past its time limit.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace fr::daemon {

class VerdictHook {
 public:
  VerdictHook(std::string command, int64_t timeout_ns, size_t max_running = 4);

  bool enabled() const { return !command_.empty(); }
  // Starts the command for one incident. False with *error when it could not be started, or when
  // max_running commands are still running.
  bool start(const std::string& incident, const std::map<std::string, std::string>& env,
             int64_t now_mono, std::string* error);
  // Reaps finished commands and kills those past the limit; returns lines for the log.
  std::vector<std::string> poll(int64_t now_mono);
  size_t running() const { return children_.size(); }

 private:
  struct Child {
    pid_t pid = -1;
    std::string incident;
    int64_t started = 0;
    bool killed = false;
  };
  std::string command_;
  int64_t timeout_ns_;
  size_t max_running_;
  std::vector<Child> children_;
};

}  // namespace fr::daemon
