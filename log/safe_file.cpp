// See safe_file.h. The O_PATH descriptor is what makes the type check race-free: the inode checked
// is the inode reopened, so a file swapped for a FIFO or a device between the check and the read
// is refused, never opened.
#include "log/safe_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <sstream>

namespace fr::log {

Fd& Fd::operator=(Fd&& o) noexcept {
  if (this != &o) {
    reset();
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

void Fd::reset() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

const char* file_kind(mode_t mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISLNK(mode)) return "a symbolic link";
  if (S_ISFIFO(mode)) return "a FIFO (pipe)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

namespace {

constexpr int kReadFlags = O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC;

OpenedFile failure(OpenError e, const std::string& shown, const std::string& what) {
  OpenedFile r;
  r.error = e;
  r.message = shown + ": " + what;
  r.reason = what;
  return r;
}

OpenedFile open_failure(int err, const std::string& shown) {
  if (err == ENOENT) return failure(OpenError::kMissing, shown, "no such file");
  if (err == ELOOP) return failure(OpenError::kLink, shown, "a symbolic link: not followed");
  return failure(OpenError::kIo, shown, std::string("cannot open: ") + std::strerror(err));
}

// Steps 2 and 3 of safe_file.h for a descriptor opened with O_PATH. `reopen_by_name` opens the
// same name again (for a system without /proc).
template <typename Reopen>
OpenedFile finish(Fd path_fd, const std::string& shown, Reopen reopen_by_name) {
  struct stat want {};
  if (::fstat(path_fd.get(), &want) != 0)
    return failure(OpenError::kIo, shown, std::string("cannot stat: ") + std::strerror(errno));
  if (S_ISLNK(want.st_mode))
    return failure(OpenError::kLink, shown, "a symbolic link: not followed");
  if (!S_ISREG(want.st_mode))
    return failure(OpenError::kNotRegular, shown,
                   std::string(file_kind(want.st_mode)) + ", not a regular file: not read");
  std::string proc = "/proc/self/fd/" + std::to_string(path_fd.get());
  Fd fd(::open(proc.c_str(), kReadFlags));
  if (!fd.valid() && errno == ENOENT) fd = Fd(reopen_by_name());
  if (!fd.valid()) return open_failure(errno, shown);
  OpenedFile r;
  if (::fstat(fd.get(), &r.st) != 0)
    return failure(OpenError::kIo, shown, std::string("cannot stat: ") + std::strerror(errno));
  if (r.st.st_dev != want.st_dev || r.st.st_ino != want.st_ino || !S_ISREG(r.st.st_mode))
    return failure(OpenError::kChanged, shown, "replaced while being opened: not read");
  r.fd = std::move(fd);
  return r;
}

}  // namespace

OpenedFile open_regular(const std::string& path, Links links) {
  int flags = O_PATH | O_CLOEXEC | (links == Links::kRefuse ? O_NOFOLLOW : 0);
  Fd p(::open(path.c_str(), flags));
  if (!p.valid()) return open_failure(errno, path);
  return finish(std::move(p), path, [&] {
    return ::open(path.c_str(), kReadFlags | (links == Links::kRefuse ? O_NOFOLLOW : 0));
  });
}

OpenedFile open_regular_at(int dir_fd, const std::string& name, const std::string& shown) {
  if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..")
    return failure(OpenError::kIo, shown, "not a file name");
  Fd p(::openat(dir_fd, name.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC));
  if (!p.valid()) return open_failure(errno, shown);
  return finish(std::move(p), shown,
                [&] { return ::openat(dir_fd, name.c_str(), kReadFlags | O_NOFOLLOW); });
}

OpenedFile open_beneath(const std::string& dir, const std::string& relative) {
  const std::string shown = dir + "/" + relative;
  Fd cur(::open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!cur.valid()) return open_failure(errno, dir);
  std::stringstream ss(relative);
  std::string part, next;
  if (!std::getline(ss, part, '/')) return failure(OpenError::kIo, shown, "empty path");
  while (std::getline(ss, next, '/')) {
    if (part.empty() || part == "." || part == "..")
      return failure(OpenError::kIo, shown, "leaves the directory");
    Fd sub(::openat(cur.get(), part.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!sub.valid()) {
      int err = errno;
      struct stat st {};
      // O_NOFOLLOW|O_DIRECTORY on a link fails with ENOTDIR: say that it is a link.
      if (::fstatat(cur.get(), part.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode))
        return failure(OpenError::kLink, shown,
                       "a symbolic link on the way (" + part + "): not followed");
      return open_failure(err, shown);
    }
    cur = std::move(sub);
    part = next;
  }
  return open_regular_at(cur.get(), part, shown);
}

bool read_all(int fd, size_t max_bytes, std::string* out, std::string* error,
              const std::string& name) {
  out->clear();
  char buf[65536];
  off_t off = 0;
  for (;;) {
    ssize_t n = ::pread(fd, buf, sizeof buf, off);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      *error = name + ": cannot read: " + std::strerror(errno);
      return false;
    }
    if (n == 0) return true;
    if (out->size() + size_t(n) > max_bytes) {
      *error = name + ": larger than " + std::to_string(max_bytes) + " bytes";
      return false;
    }
    out->append(buf, size_t(n));
    off += n;
  }
}

bool read_regular_file(const std::string& path, size_t max_bytes, std::string* out,
                       std::string* error, Links links) {
  OpenedFile f = open_regular(path, links);
  if (!f.ok()) {
    *error = f.message;
    return false;
  }
  if (uint64_t(f.st.st_size) > max_bytes) {
    *error = path + ": larger than " + std::to_string(max_bytes) + " bytes";
    return false;
  }
  out->reserve(size_t(f.st.st_size));
  return read_all(f.fd.get(), max_bytes, out, error, path);
}

}  // namespace fr::log
