// fr::files: see files.h.
#include "common/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace fr::files {

std::string errno_text(const std::string& what) { return what + ": " + std::strerror(errno); }

bool write_all(int fd, const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size) {
    ssize_t w = ::write(fd, p, size);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      if (w == 0) errno = ENOSPC;
      return false;
    }
    p += w;
    size -= size_t(w);
  }
  return true;
}

bool make_dirs(const std::string& dir, std::string* error) {
  size_t i = 0;
  while (i <= dir.size()) {
    size_t j = dir.find('/', i);
    if (j == std::string::npos) j = dir.size();
    const std::string cur = dir.substr(0, j);
    if (!cur.empty() && ::mkdir(cur.c_str(), 0755) != 0 && errno != EEXIST) {
      *error = errno_text("cannot create " + cur);
      return false;
    }
    i = j + 1;
  }
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    *error = dir + ": not a directory";
    return false;
  }
  return true;
}

bool write_atomic(const std::string& path, const std::string& data, std::string* error) {
  static std::atomic<uint64_t> seq{0};
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? std::string() : path.substr(0, slash + 1);
  const std::string base = path.substr(slash == std::string::npos ? 0 : slash + 1);
  // Hidden ('.'-leading), so that a directory scan meanwhile does not take it for a dump.
  const std::string tmp = dir + "." + base + ".tmp." + std::to_string(::getpid()) + "." +
                          std::to_string(seq.fetch_add(1, std::memory_order_relaxed));
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) {
    *error = errno_text("cannot create " + tmp);
    return false;
  }
  bool ok = write_all(fd, data.data(), data.size()) && ::fsync(fd) == 0;
  if (!ok) *error = errno_text("cannot write " + path);
  if (::close(fd) != 0 && ok) {
    *error = errno_text("cannot write " + path);
    ok = false;
  }
  if (ok && ::rename(tmp.c_str(), path.c_str()) != 0) {
    *error = errno_text("cannot rename into " + path);
    ok = false;
  }
  if (!ok) ::unlink(tmp.c_str());
  return ok;
}

std::string find_on_path(const std::string& name) {
  if (name.find('/') != std::string::npos) return ::access(name.c_str(), X_OK) == 0 ? name : "";
  const char* path = std::getenv("PATH");
  std::string p = path ? path : "/usr/local/bin:/usr/bin:/bin";
  size_t pos = 0;
  while (pos <= p.size()) {
    size_t end = p.find(':', pos);
    if (end == std::string::npos) end = p.size();
    std::string dir = p.substr(pos, end - pos);
    if (!dir.empty()) {
      std::string full = dir + "/" + name;
      if (::access(full.c_str(), X_OK) == 0) return full;
    }
    pos = end + 1;
  }
  return "";
}

}  // namespace fr::files
