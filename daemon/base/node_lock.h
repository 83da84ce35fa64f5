// The node lock: at most one `frd node` serves a log directory. `frd node` holds an exclusive
// flock on its node lock (node_lock_path: a file of a directory private to its user, named after
// LOG_DIR) for as long as it runs, with its pid written inside; the kernel
// drops the lock when the process ends however it ends, so a stale file never blocks a restart.
// `fr-run` probes the same lock to learn whether a node daemon already serves the node (one that
// systemd or a sidecar started counts as much as one that fr-run started) before it starts one.
// Plain POSIX, no gRPC: fr-run links this alone.
//
// The users of a node daemon: every fr-run holds an exclusive flock on a file of its own,
// LOG_DIR/frd-node.lock.users.<uid>.<pid> (created with O_EXCL, removed when it ends), for as
// long as it runs (its command with it), so that a node daemon that leaves when idle
// (`frd node --exit-when-idle`) does not leave while a job is still starting and has no flight
// log yet. A daemon about to leave looks for such files that are locked, trusting only regular
// files owned by the uid their name gives (and only of users it serves), drops its node lock,
// and looks again: an fr-run that found the daemon before it dropped the lock made its file
// before, so the second look sees it and the daemon takes its lock back and stays. Nothing
// another user plants there (a link, a FIFO, a file of theirs locked for good) can make a daemon
// leave a running job, and fr-run never waits on a file another user holds; another user's files
// keep a root daemon (which serves them too) for a grace only (ForeignUse).
#pragma once

#include <sys/types.h>
#include <unistd.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace fr::daemon {

inline constexpr const char* kNodeLockName = "frd-node.lock";

// The directory a node daemon running as `uid` keeps its lock in, out of reach of every other
// user: /run/fr for root; $XDG_RUNTIME_DIR/fr or /run/user/UID/fr for another user. Each must be
// a directory of its owner that nobody else can write (made when `create`); "" when none is.
std::string private_lock_dir(uid_t uid, bool create);

// The node lock of a daemon running as `uid` (this process's by default) on LOG_DIR: in its
// private lock directory, named after LOG_DIR's real path ('/' as '-', e.g.
// /run/fr/dev-shm-fr.node.lock); LOG_DIR/frd-node.lock only where that user has no private
// directory (or LOG_DIR does not exist yet). No other user can plant or hold it, so none can keep
// a node from being watched or fr-run waiting.
std::string node_lock_path(const std::string& log_dir, uid_t uid = ::geteuid());

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

// Held by fr-run for its lifetime: its own users file, locked (see above).
class NodeUse {
 public:
  NodeUse() = default;
  NodeUse(const NodeUse&) = delete;
  NodeUse& operator=(const NodeUse&) = delete;
  ~NodeUse();

  // Creates and locks the file at once (no waiting). False with *error when no file can be made.
  bool acquire(const std::string& log_dir, std::string* error);
  const std::string& path() const { return path_; }

 private:
  int fd_ = -1;
  std::string path_;
};

// Which users a node daemon serves (its --log-owner): only their users files count.
struct ServedUsers {
  bool any = true;
  std::vector<uid_t> uids;
  bool serves(uid_t uid) const;
};

// Other users' fr-runs keep a daemon of another uid (root's, serving everyone) for a grace only:
// a uid whose users files have been held in every look for `grace_ns` counts no more, so another
// user's file held for good cannot keep the daemon for ever. The daemon's own uid's files
// (which no other user can make) always count.
struct ForeignUse {
  int64_t grace_ns = 0;
  std::map<uid_t, int64_t> since_ns;  // each uid's first look in an unbroken run of looks
};

// For a node daemon about to leave when idle: true when no fr-run of a served user holds a users
// file in LOG_DIR now. Files that are links, not regular, or not owned by the uid their name
// gives are not counted (nor the files of users it does not serve). With `foreign`, other users'
// files count only within its grace, measured with `now_ns` (any monotonic clock).
bool claim_unused(const std::string& log_dir, const ServedUsers& users = {},
                  ForeignUse* foreign = nullptr, int64_t now_ns = 0);

// What a probe of the lock found.
struct NodeLockState {
  bool held = false;  // a node daemon serves the directory now
  pid_t pid = 0;      // its pid, when the file names one
};

// Probes the node lock without disturbing the holder (a shared lock taken and dropped at once):
// root's first when this process is not root (a root daemon serves every user), then this user's. A missing file, or one nobody holds, reads as not held; so does a file owned by neither
// root nor this user (another user's lock says nothing of a node daemon): *untrusted, when given,
// then says why in one line naming the path.
NodeLockState probe_node_lock(const std::string& log_dir, std::string* untrusted = nullptr);

}  // namespace fr::daemon
