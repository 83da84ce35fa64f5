// The node lock: at most one `frd node` serves a log directory. `frd node` holds an exclusive
// flock on LOG_DIR/frd-node.lock for as long as it runs, with its pid written inside; the kernel
// drops the lock when the process ends however it ends, so a stale file never blocks a restart.
// `fr-run` probes the same lock to learn whether a node daemon already serves the node (one that
// systemd or a sidecar started counts as much as one that fr-run started) before it starts one.
// Plain POSIX, no gRPC: fr-run links this alone.
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

 private:
  int fd_ = -1;
};

// What a probe of the lock found.
struct NodeLockState {
  bool held = false;  // a node daemon serves the directory now
  pid_t pid = 0;      // its pid, when the file names one
};

// Probes LOG_DIR/frd-node.lock without disturbing the holder (a shared lock taken and dropped at
// once). A missing file, or one nobody holds, reads as not held.
NodeLockState probe_node_lock(const std::string& log_dir);

}  // namespace fr::daemon
