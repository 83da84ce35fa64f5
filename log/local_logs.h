// Which files in a log directory are the flight logs of live or dead local processes. The log
// directory (/dev/shm) is writable by every local user, so a file named *.frlog proves nothing:
// it may be a link to a secret, a FIFO, a device, another user's file, or a copy of a live log
// (whose copy has no writer holding its lock, so it reads as a dead rank). The node daemon's
// watcher and `frd snapshot` both list the directory through here, which decides once for both:
//   - links, FIFOs, devices and sockets are refused by their type, before any open;
//   - a log must be owned by an accepted user (LogOwners);
//   - a log whose lock is held by a process other than the writer its header names is refused;
//   - copies (same writer pid and creation time) and several logs claiming one rank of one job
//     are resolved: the log whose writer holds its lock wins, else the newest; the others are
//     refused as duplicates, so they are never counted as a death;
//   - an unlocked log whose claimed writer still runs (same pid, started before the log was made)
//     is refused: a live process is not a dead rank. This check needs the reader to share the
//     writers' pid namespace, which the scan proves from any log whose lock holder is its writer.
// Every refusal comes with a one-line reason.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "log/reader.h"

namespace fr::log {

// Whose logs are accepted.
struct LogOwners {
  bool any = false;         // every owner
  std::vector<uid_t> uids;  // else these

  // The reader's own user; every user when the reader runs as root (a root sidecar serves
  // whichever user the job runs as; restrict it with --log-owner on a shared host).
  static LogOwners defaults();
  bool accepts(uid_t uid) const;
  // Adds a user by name or number; false with a message when there is no such user.
  bool add(const std::string& user, std::string* error);
  // "any user", "uid 1000 (alice)", ...
  std::string describe() const;
};

// A log listed and accepted, with what identifies it.
struct LocalLog {
  std::string name;  // file name in the directory
  dev_t dev = 0;
  ino_t ino = 0;
  uid_t owner = 0;
  bool has_header = false;  // false: the header is unreadable (the full read will say why)
  int pid = 0;
  int rank = -1;
  std::string job_id;
  uint64_t create_ns = 0;
  bool snapshot = false;  // a dump file (FR_LOG_F_SNAPSHOT), not a live log
  bool locked = false;    // a process holds the writer's lock (a dump: its writer lived)
  int lock_pid = 0;       // that process, as this reader sees it (0: not visible)
};

struct LocalRefusal {
  std::string name;  // file name in the directory
  std::string why;
};

struct LocalLogs {
  std::vector<LocalLog> logs;         // accepted, in name order
  std::vector<LocalRefusal> refused;  // not taken, with the reason
  std::string error;                  // the directory itself could not be listed
};

struct LocalLogOptions {
  std::string dir;
  LogOwners owners = LogOwners::defaults();
  std::string job_id;   // only this job's logs, others left out without a note (empty: all)
  size_t max_logs = 0;  // at most this many are examined (0: no limit); the rest are refused
};

LocalLogs list_local_logs(const LocalLogOptions& opts);

// Reads an accepted log: opened again by name (links refused), and required to be the same file
// that was listed and checked.
ReadResult read_local_log(const std::string& dir, const LocalLog& log);

// Process `pid` of this reader's PID namespace as it sees itself: the last entry of NSpid in its
// /proc/PID/status (the pid in its innermost namespace; `pid` itself when it shares this one).
// 0 when the process is not there or the kernel does not say.
int own_pid_of(int pid);

}  // namespace fr::log
