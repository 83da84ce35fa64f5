// The node lock (see node_lock.h): an flock on a file of the daemon's private lock directory (or,
// without one, LOG_DIR/frd-node.lock), the holder's pid inside. The file is opened without
// following a symlink and must be a regular file, so a link or FIFO planted in a shared directory
// such as /dev/shm cannot redirect the write or hang the open.
#include "daemon/base/node_lock.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <utility>
#include <vector>

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

namespace {

// A directory only `uid` (and root) can write into: a directory, not a link, owned by `owner`,
// writable by nobody else.
bool private_dir(const std::string& path, uid_t owner) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == owner &&
         (st.st_mode & 022) == 0;
}

// The log directory's real path as one file name: '/' becomes '-', any byte but [A-Za-z0-9._]
// becomes %XX; a name too long for a file is the directory's device and inode instead.
std::string lock_name(const std::string& log_dir) {
  char* real = ::realpath(log_dir.empty() ? "." : log_dir.c_str(), nullptr);
  if (real == nullptr) return {};
  std::string path(real), name;
  std::free(real);
  for (size_t i = 1; i < path.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(path[i]);
    if (c == '/') {
      name += '-';
    } else if (std::isalnum(c) || c == '.' || c == '_') {
      name += char(c);
    } else {
      char hex[4];
      std::snprintf(hex, sizeof hex, "%%%02X", c);
      name += hex;
    }
  }
  if (name.empty()) name = "-";
  if (name.size() > 200) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) return {};
    name = "dir-" + std::to_string(st.st_dev) + "-" + std::to_string(st.st_ino);
  }
  return name + ".node.lock";
}

}  // namespace

std::string private_lock_dir(uid_t uid, bool create) {
  std::vector<std::pair<std::string, uid_t>> bases;  // (base, its owner)
  if (uid == 0) {
    bases.push_back({"/run", 0});
  } else {
    const char* xdg = uid == ::geteuid() ? std::getenv("XDG_RUNTIME_DIR") : nullptr;
    if (xdg != nullptr && xdg[0] == '/') bases.push_back({xdg, uid});
    bases.push_back({"/run/user/" + std::to_string(uid), uid});
  }
  for (const auto& [base, owner] : bases) {
    if (!private_dir(base, owner)) continue;
    const std::string dir = base + "/fr";
    if (create) ::mkdir(dir.c_str(), uid == 0 ? 0755 : 0700);
    if (private_dir(dir, uid)) return dir;
  }
  return {};
}

std::string node_lock_path(const std::string& log_dir, uid_t uid) {
  const std::string dir = private_lock_dir(uid, uid == ::geteuid());
  const std::string name = dir.empty() ? std::string() : lock_name(log_dir);
  if (!name.empty()) return dir + "/" + name;
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

bool claim_unused(const std::string& log_dir, const ServedUsers& users, ForeignUse* foreign,
                  int64_t now_ns) {
  DIR* dir = ::opendir(log_dir.empty() ? "." : log_dir.c_str());
  if (dir == nullptr) return true;
  bool in_use = false;
  std::vector<uid_t> seen;  // the other users whose fr-runs hold a file now
  while (dirent* e = ::readdir(dir)) {
    const long uid = named_uid(e->d_name);
    if (uid < 0 || !users.serves(uid_t(uid))) continue;
    int fd = ::openat(::dirfd(dir), e->d_name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) continue;
    struct stat st {};
    bool held = false;
    if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == uid_t(uid)) {
      if (::flock(fd, LOCK_EX | LOCK_NB) == 0)
        ::flock(fd, LOCK_UN);  // a file its fr-run left behind: nobody uses it
      else if (errno == EWOULDBLOCK)
        held = true;
    }
    ::close(fd);
    if (!held) continue;
    if (foreign == nullptr || uid_t(uid) == ::geteuid()) {
      in_use = true;
      break;
    }
    if (std::find(seen.begin(), seen.end(), uid_t(uid)) == seen.end()) seen.push_back(uid_t(uid));
  }
  ::closedir(dir);
  if (foreign == nullptr) return !in_use;
  // Another user's fr-run counts from the first look that saw it, for the grace only.
  std::map<uid_t, int64_t> kept;
  for (uid_t uid : seen) {
    auto it = foreign->since_ns.find(uid);
    const int64_t since = it == foreign->since_ns.end() ? now_ns : it->second;
    kept[uid] = since;
    if (now_ns - since < foreign->grace_ns) in_use = true;
  }
  foreign->since_ns = std::move(kept);
  return !in_use;
}

namespace {

NodeLockState probe_path(const std::string& path, std::string* untrusted) {
  NodeLockState s;
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

}  // namespace

NodeLockState probe_node_lock(const std::string& log_dir, std::string* untrusted) {
  // A root daemon serves every user: a user's fr-run finds it first.
  if (::geteuid() != 0) {
    NodeLockState root = probe_path(node_lock_path(log_dir, 0), nullptr);
    if (root.held) return root;
  }
  return probe_path(node_lock_path(log_dir), untrusted);
}

}  // namespace fr::daemon
