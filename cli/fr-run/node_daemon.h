// Exactly one `frd node` per node: fr-run starts one only when no process holds the node lock
// (daemon/base/node_lock.h) of the log directory. Concurrent fr-runs (the ranks of a node) take turns
// on a second lock file beside it (its name with .start), so only the first starts a daemon and the
// others find it holding the node lock. The daemon is started detached (its own session, stdin
// from /dev/null, output appended to a log file, cwd /) and outlives the fr-run that started it:
// the coordinator may still want a dump after the ranks are gone.
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
  // command line when visible): the ranks are recorded, but that coordinator gets their news.
  std::string other_coordinator;
};

// Makes sure a node daemon serves o.log_dir, waiting at most `timeout_ms` for one to take the lock.
DaemonResult ensure_node_daemon(const Options& o, int timeout_ms = 10000);

}  // namespace fr::run
