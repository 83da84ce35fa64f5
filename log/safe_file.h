// Opening a dump, a log or a manifest for reading without trusting what is at the path. Log
// directories (/dev/shm is world-writable) and dump sets are written by other processes: a FIFO
// in place of a file blocks a plain open() or read() forever, a device may act on open, and a
// link leads the reader out of the directory to another user's file. Every reader of a dump or a
// log (fr-analyze, `frd snapshot`, the node, the coordinator) opens through here, then reads from
// the descriptor it got, never from the path a second time:
//   1. open the path with O_PATH|O_NOFOLLOW, which opens nothing (no FIFO waits, no device acts),
//   2. fstat it and require a regular file,
//   3. reopen that very inode through /proc/self/fd with O_RDONLY|O_NONBLOCK|O_NOCTTY|O_CLOEXEC
//      (without /proc: the path again with O_NOFOLLOW|O_NONBLOCK), and check with fstat that the
//      file opened is the one checked.
#pragma once

#include <sys/stat.h>

#include <cstddef>
#include <string>

namespace fr::log {

// An owned file descriptor.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Fd& operator=(Fd&& o) noexcept;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }
  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void reset();

 private:
  int fd_ = -1;
};

// Links inside a log directory or a dump set are never followed; a path a user names on a
// command line may be a link (the user chose it), but what it leads to must be a regular file.
enum class Links { kRefuse, kFollow };

// Why a file was not opened. The message names the path and says it in words.
enum class OpenError {
  kNone,
  kMissing,     // no such file
  kLink,        // a symbolic link where links are refused
  kNotRegular,  // a FIFO, device, socket or directory
  kChanged,     // replaced between the check and the open
  kIo,          // permission denied, too many open files, ...
};

struct OpenedFile {
  Fd fd;
  struct stat st {};
  OpenError error = OpenError::kNone;
  std::string message;  // "PATH: a FIFO (pipe), not a regular file: not read"; empty on success
  std::string reason;   // the same without "PATH: "
  bool ok() const { return fd.valid(); }
};

// Opens `path` for reading as described above.
OpenedFile open_regular(const std::string& path, Links links = Links::kRefuse);

// `name` (one path component) in the open directory `dir_fd`; links are refused. `shown` is the
// path used in messages.
OpenedFile open_regular_at(int dir_fd, const std::string& name, const std::string& shown);

// `relative` inside `dir`, following no link on the way down (a manifest's file entry: a linked
// folder must not lead out of the dump set either). `relative` has no "..", "." or empty part.
OpenedFile open_beneath(const std::string& dir, const std::string& relative);

// What a file of this type is, in words: "a FIFO", "a character device", "a symbolic link", ...
const char* file_kind(mode_t mode);

// Reads `fd` from offset 0 to its end into `out`, refusing more than `max_bytes`. `name` is used
// in messages.
bool read_all(int fd, size_t max_bytes, std::string* out, std::string* error,
              const std::string& name);

// open_regular + read_all.
bool read_regular_file(const std::string& path, size_t max_bytes, std::string* out,
                       std::string* error, Links links = Links::kRefuse);

}  // namespace fr::log
