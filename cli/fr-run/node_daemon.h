// Exactly one `frd node` per node: fr-run starts one only when no process holds the node lock
// (daemon/base/node_lock.h) of the log directory. Concurrent fr-runs (the ranks of a node) take turns
// on a second lock file beside it (its name with .start), so only the first starts a daemon and the
// others find it holding the node lock. The daemon is started detached (its own session, stdin
// from /dev/null, output appended to a log file, cwd /) and outlives the fr-run that started it:
// the coordinator may still want a dump after the ranks are gone.
//
// One job, one daemon: a daemon found serving the directory for another coordinator is replaced
// (stopped, and a new one started under the start lock) when it is this user's and its
// coordinator is gone or refused it; one whose coordinator is alive serves another job and is
// left alone (fr-run then says so).
#pragma once

#include <sys/types.h>

#include <string>

#include "options.h"

namespace fr::run {

enum class DaemonOutcome {
  running,  // one already served the log directory
  started,  // this fr-run started it
  failed,   // could not start one (message says why); the command runs anyway
};

struct DaemonResult {
  DaemonOutcome outcome = DaemonOutcome::failed;
  pid_t pid = 0;
  std::string message;
  // A running daemon that follows another coordinator than the one asked for (read from its
  // command line when visible), and was left running because that coordinator is alive (it
  // serves another job): the ranks are recorded, but that coordinator gets their news.
  std::string other_coordinator;
  // A daemon of this user that followed another coordinator, one that is gone (nothing listens
  // at its address, or it has not been reachable for 10 s) or that refused it, was stopped and
  // this one started in its place: that coordinator's address, and why.
  std::string replaced;
};

// A log directory of this job's own, for when the daemon serving o.log_dir follows another
// coordinator that is alive (another job still runs there): LOG_DIR/fr-<coordinator address>,
// made 0700 when absent. It must be a directory of this user that others cannot write (not a
// link); false with *why otherwise. The ranks of one job compute the same directory.
bool own_log_dir(const Options& o, std::string* dir, std::string* why);

// After the daemon is there: waits up to `wait_ms` for its first word on the connection
// (daemon/base/node_status.h) and returns one line when the coordinator refused it (a wrong or
// missing token), naming the file; empty when it connected, is still trying, or says nothing.
std::string refusal_of(const Options& o, pid_t pid, int wait_ms = 2000);

// Makes sure a node daemon serves o.log_dir, waiting at most `timeout_ms` for one to take the lock.
DaemonResult ensure_node_daemon(const Options& o, int timeout_ms = 10000);

}  // namespace fr::run
