// The node lock (see node_lock.h): an flock on LOG_DIR/frd-node.lock, the holder's pid inside.
// The file is opened without following a symlink and must be a regular file, so a link or FIFO
// planted in a shared directory such as /dev/shm cannot redirect the write or hang the open.
#include "daemon/base/node_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

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
}  // namespace

NodeUse::~NodeUse() {
  if (fd_ >= 0) ::close(fd_);
}

bool NodeUse::acquire(const std::string& log_dir, std::string* error, int wait_ms) {
  const std::string path = users_path(log_dir);
  int fd = open_lock_file(path, true, error);
  if (fd < 0) return false;
  for (int waited = 0; ::flock(fd, LOCK_SH | LOCK_NB) != 0; waited += 20) {
    if ((errno != EWOULDBLOCK && errno != EINTR) || waited >= wait_ms) {
      *error = errno == EWOULDBLOCK ? "a node daemon leaving " + log_dir + " still holds " + path
                                    : "cannot lock " + path + ": " + std::strerror(errno);
      ::close(fd);
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
  return true;
}

bool claim_unused(const std::string& log_dir) {
  int fd = open_lock_file(users_path(log_dir), true, nullptr);
  if (fd < 0) return true;
  if (::flock(fd, LOCK_EX | LOCK_NB) == 0) return true;  // fd left open: held until the end
  ::close(fd);
  return false;
}

NodeLockState probe_node_lock(const std::string& log_dir) {
  NodeLockState s;
  int fd = open_lock_file(node_lock_path(log_dir), false, nullptr);
  if (fd < 0) return s;
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
