// The launcher's child processes (ranks and frd daemons): a child is prepared whole before fork
// (argv and environment as owned strings), started into a process group that is stopped as one,
// dies with the launcher, and is reaped without blocking while the launcher watches the job.
#pragma once

#include <sys/types.h>

#include <string>
#include <utility>
#include <vector>

namespace fr::simjob {

// A prepared child: argv and the whole environment as owned strings, and where its output goes.
struct ChildSpec {
  std::vector<std::string> argv, envp;
  std::string log_path;
};

// The parent environment without the names we set, plus ours.
std::vector<std::string> make_env(const std::vector<std::pair<std::string, std::string>>& set);

// Starts `c` (common/spawn.h) in process group `pgid` (0: a new group led by the child). The child
// dies with the launcher (PR_SET_PDEATHSIG), writes its output to log_path, and starts with an
// empty signal mask. Returns the pid, or -1 with errno set.
pid_t spawn(const ChildSpec& c, pid_t pgid);

struct ChildState {
  pid_t pid = -1;
  bool exited = false;
  int status = 0;
  bool stopped = false;  // still running when the launcher stopped it
  std::string role;      // daemons: "coordinator" or "node<K>"
  std::string log;       // where its output went
};

// Reaps whatever has exited; returns how many are still running.
int reap(std::vector<ChildState>& kids);
// Waits for every child, up to `seconds`; returns whether all were reaped.
bool reap_all(std::vector<ChildState>& kids, double seconds);
// Sends `sig` to the group and to every child still running, which counts as stopped.
void kill_all(std::vector<ChildState>& kids, pid_t pgid, int sig);

}  // namespace fr::simjob
