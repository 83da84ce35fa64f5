// The node lock (see node_lock.h): an flock on LOG_DIR/frd-node.lock, the holder's pid inside.
// The file is opened without following a symlink and must be a regular file, so a link or FIFO
// planted in a shared directory such as /dev/shm cannot redirect the write or hang the open.
#include "daemon/base/node_lock.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

namespace fr::daemon {
namespace {

// Opens the lock file: read-write (created 0644) when allowed, else read-only, which still locks
// (flock needs no write access), so a file another user created does not stop the probe.
int open_lock_file(const std::string& path, bool create, std::string* error) {
  int flags = O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK;
  int fd = ::open(path.c_str(), flags | O_RDWR | (create ? O_CREAT : 0), 0644);
  if (fd < 0 && (errno == EACCES || errno == EPERM || errno == EROFS))
    fd = ::open(path.c_str(), flags | O_RDONLY);
  if (fd < 0) {
    if (error) {
      *error = "cannot open " + path + ": " +
               (errno == ELOOP ? std::string("it is a symbolic link") : std::strerror(errno));
    }
    return -1;
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    if (error) *error = path + " is not a regular file";
    ::close(fd);
    return -1;
  }
  return fd;
}

pid_t read_pid(int fd) {
  char buf[32] = {};
  ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
  if (n <= 0) return 0;
  char* end = nullptr;
  long v = std::strtol(buf, &end, 10);
  return v > 0 && v < (1L << 30) ? pid_t(v) : 0;
}

}  // namespace

std::string node_lock_path(const std::string& log_dir) {
  return (log_dir.empty() ? std::string(".") : log_dir) + "/" + kNodeLockName;
}

NodeLock::~NodeLock() {
  if (fd_ >= 0) ::close(fd_);  // closing drops the flock
}

NodeLockOutcome NodeLock::acquire(const std::string& log_dir, std::string* error, int wait_ms) {
  std::string path = node_lock_path(log_dir);
  int fd = open_lock_file(path, true, error);
  if (fd < 0) return NodeLockOutcome::failed;
  for (int waited = 0;; waited += 20) {
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0) break;
    if (errno != EWOULDBLOCK && errno != EINTR) {
      *error = "cannot lock " + path + ": " + std::strerror(errno);
      ::close(fd);
      return NodeLockOutcome::failed;
    }
    if (waited >= wait_ms) {
      pid_t pid = read_pid(fd);
      *error = "another frd node serves " + log_dir +
               (pid ? " (pid " + std::to_string(pid) + ")" : std::string()) + "; it holds " + path;
      ::close(fd);
      return NodeLockOutcome::held;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  // Best effort: a read-only file (another user's) keeps its old text, which only a probe reads.
  std::string text = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd, 0) == 0) {
    ssize_t written = ::pwrite(fd, text.data(), text.size(), 0);
    (void)written;
  }
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
  return NodeLockOutcome::acquired;
}

void NodeLock::release() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

namespace {

std::string users_path(const std::string& log_dir) {
  return (log_dir.empty() ? std::string(".") : log_dir) + "/" + kNodeUsersName;
}

// The uid a users file's name gives (frd-node.lock.users.<uid>.<anything>); -1 for any other
// name (the single shared name of older versions included: anyone could have made it).
long named_uid(const char* name) {
  const size_t n = std::strlen(kNodeUsersName);
  if (std::strncmp(name, kNodeUsersName, n) != 0 || name[n] != '.') return -1;
  char* end = nullptr;
  errno = 0;
  long uid = std::strtol(name + n + 1, &end, 10);
  if (errno != 0 || end == name + n + 1 || *end != '.' || uid < 0) return -1;
  return uid;
}

}  // namespace

NodeUse::~NodeUse() {
  if (fd_ < 0) return;
  ::unlink(path_.c_str());  // still locked while it goes: a daemon looking now counts it
  ::close(fd_);
}

bool NodeUse::acquire(const std::string& log_dir, std::string* error) {
  const std::string base =
      users_path(log_dir) + "." + std::to_string(::getuid()) + "." + std::to_string(::getpid());
  // A name taken (a file an earlier process of this pid left, or one another user planted) is
  // passed over for the next: O_EXCL never opens what is there, a link included.
  for (int n = 0; n < 16; ++n) {
    const std::string path = n == 0 ? base : base + "-" + std::to_string(n);
    int fd =
        ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
    if (fd < 0 && errno == EEXIST) continue;
    if (fd < 0) {
      *error = "cannot create " + path + ": " + std::strerror(errno);
      return false;
    }
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      *error = "cannot lock " + path + ": " + std::strerror(errno);
      ::unlink(path.c_str());
      ::close(fd);
      return false;
    }
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
    path_ = path;
    return true;
  }
  *error = "cannot create " + base + ": that name and 15 others are taken";
  return false;
}

bool ServedUsers::serves(uid_t uid) const {
  return any || std::find(uids.begin(), uids.end(), uid) != uids.end();
}

bool claim_unused(const std::string& log_dir, const ServedUsers& users) {
  DIR* dir = ::opendir(log_dir.empty() ? "." : log_dir.c_str());
  if (dir == nullptr) return true;
  bool in_use = false;
  while (dirent* e = ::readdir(dir)) {
    const long uid = named_uid(e->d_name);
    if (uid < 0 || !users.serves(uid_t(uid))) continue;
    int fd = ::openat(::dirfd(dir), e->d_name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) continue;
    struct stat st {};
    if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == uid_t(uid)) {
      if (::flock(fd, LOCK_EX | LOCK_NB) == 0)
        ::flock(fd, LOCK_UN);  // a file its fr-run left behind: nobody uses it
      else if (errno == EWOULDBLOCK)
        in_use = true;
    }
    ::close(fd);
    if (in_use) break;
  }
  ::closedir(dir);
  return !in_use;
}

NodeLockState probe_node_lock(const std::string& log_dir, std::string* untrusted) {
  NodeLockState s;
  const std::string path = node_lock_path(log_dir);
  int fd = open_lock_file(path, false, nullptr);
  if (fd < 0) return s;
  struct stat st {};
  if (::fstat(fd, &st) != 0 || (st.st_uid != 0 && st.st_uid != ::geteuid())) {
    if (untrusted)
      *untrusted = path + " belongs to uid " + std::to_string(st.st_uid) +
                   ", neither root nor this user: not taken as a node daemon's lock";
    ::close(fd);
    return s;
  }
  if (::flock(fd, LOCK_SH | LOCK_NB) == 0) {
    ::flock(fd, LOCK_UN);
  } else if (errno == EWOULDBLOCK) {
    s.held = true;
    s.pid = read_pid(fd);
  }
  ::close(fd);
  return s;
}

}  // namespace fr::daemon
