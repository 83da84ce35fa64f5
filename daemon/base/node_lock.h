// The node lock: at most one `frd node` serves a log directory. `frd node` holds an exclusive
// flock on LOG_DIR/frd-node.lock for as long as it runs, with its pid written inside; the kernel
// drops the lock when the process ends however it ends, so a stale file never blocks a restart.
// `fr-run` probes the same lock to learn whether a node daemon already serves the node (one that
// systemd or a sidecar started counts as much as one that fr-run started) before it starts one.
// Plain POSIX, no gRPC: fr-run links this alone.
//
// The users of a node daemon: every fr-run holds a shared flock on LOG_DIR/frd-node.lock.users
// for as long as it runs (its command with it), so that a node daemon that leaves when idle
// (`frd node --exit-when-idle`) does not leave while a job is still starting and has no flight
// log yet. A daemon leaving takes that lock exclusively (only when no fr-run holds it) and drops
// its node lock before it exits: an fr-run that comes meanwhile waits, then finds no node daemon
// and starts one.
#pragma once

#include <sys/types.h>

#include <string>

namespace fr::daemon {

inline constexpr const char* kNodeLockName = "frd-node.lock";

// LOG_DIR/frd-node.lock.
std::string node_lock_path(const std::string& log_dir);

enum class NodeLockOutcome {
  acquired,  // this process now serves the directory
  held,      // another live process holds it (its pid in the error text when known)
  failed,    // the lock file cannot be made (missing directory, no permission, not a file)
};

// Held by `frd node` for its lifetime; released by the destructor or by the process's end.
class NodeLock {
 public:
  NodeLock() = default;
  NodeLock(const NodeLock&) = delete;
  NodeLock& operator=(const NodeLock&) = delete;
  ~NodeLock();

  // Takes the lock without blocking for long: a holder that is just exiting, or a prober holding
  // it shared for a moment, is waited out for up to `wait_ms`. *error says why when not acquired.
  NodeLockOutcome acquire(const std::string& log_dir, std::string* error, int wait_ms = 1000);
  // Drops the lock now (a daemon leaving, before its last words).
  void release();

 private:
  int fd_ = -1;
};

inline constexpr const char* kNodeUsersName = "frd-node.lock.users";

// Held by fr-run for its lifetime: a shared lock on LOG_DIR/frd-node.lock.users.
class NodeUse {
 public:
  NodeUse() = default;
  NodeUse(const NodeUse&) = delete;
  NodeUse& operator=(const NodeUse&) = delete;
  ~NodeUse();

  // Takes the shared lock, waiting up to `wait_ms` for a node daemon that is leaving. False with
  // *error when the file cannot be made or the wait runs out.
  bool acquire(const std::string& log_dir, std::string* error, int wait_ms = 10000);

 private:
  int fd_ = -1;
};

// For a node daemon about to leave when idle: true when no fr-run uses LOG_DIR (its users lock
// then stays taken, exclusively, until this process ends, so none can start using it while the
// daemon leaves); false when one does. A users file that cannot be opened reads as no users.
bool claim_unused(const std::string& log_dir);

// What a probe of the lock found.
struct NodeLockState {
  bool held = false;  // a node daemon serves the directory now
  pid_t pid = 0;      // its pid, when the file names one
};

// Probes LOG_DIR/frd-node.lock without disturbing the holder (a shared lock taken and dropped at
// once). A missing file, or one nobody holds, reads as not held.
NodeLockState probe_node_lock(const std::string& log_dir);

}  // namespace fr::daemon
