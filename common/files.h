// fr::files: the file-system helpers every shipped part except the agent shares: a durable atomic
// write, mkdir -p, and a whole-buffer write. One copy each, so that every file fr writes (dump-set
// manifests, snapshots, torch exports, incident documents) gets the same durability.
#pragma once

#include <cstddef>
#include <string>

namespace fr::files {

// Writes `data` to `path` durably: into a hidden temporary file next to it (unique per process and
// call, so two threads may write the same path at once), fsync, then rename over `path`. A reader
// sees the old file or the whole new one, never a part; a crash leaves no partial `path`. On error
// `*error` says what failed and the temporary file is gone.
bool write_atomic(const std::string& path, const std::string& data, std::string* error);

// mkdir -p with mode 0755; true when `dir` exists as a directory afterwards.
bool make_dirs(const std::string& dir, std::string* error);

// write(2) until all of `data` is written, retrying on EINTR; false with errno set on failure.
bool write_all(int fd, const void* data, size_t size);

// "what: strerror(errno)".
std::string errno_text(const std::string& what);

// The executable `name` as a shell finds it: `name` itself when it holds a '/', else the first
// directory of PATH (/usr/local/bin:/usr/bin:/bin when unset) where it is executable; "" if none.
std::string find_on_path(const std::string& name);

}  // namespace fr::files
