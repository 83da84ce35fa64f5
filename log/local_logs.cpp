// See local_logs.h. The listing reads only each log's header (512 bytes) and its lock, so the
// decisions cost a few system calls per file; the full read of an accepted log comes after, one
// log at a time, from a descriptor checked to be the same file.
#include "log/local_logs.h"

#include <dirent.h>
#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>

#include "fr/flight_log.h"
#include "log/safe_file.h"

namespace fr::log {

namespace {

// A claimed writer's process start may trail the log's creation by clock granularity only.
constexpr uint64_t kStartSlackNs = 1'000'000'000;

std::string user_name(uid_t uid) {
  struct passwd pw {};
  struct passwd* found = nullptr;
  char buf[4096];
  if (getpwuid_r(uid, &pw, buf, sizeof buf, &found) == 0 && found) return found->pw_name;
  return "";
}

std::string describe_uid(uid_t uid) {
  std::string n = user_name(uid);
  return "uid " + std::to_string(uid) + (n.empty() ? "" : " (" + n + ")");
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() > suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// /proc/PID/stat: whether the process exists and is not a zombie, and its start time (ns since
// the epoch). False when there is no such process (or it cannot be read).
bool process_start_ns(int pid, uint64_t* start_ns) {
  if (pid <= 0) return false;
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(f, line)) return false;
  size_t close = line.rfind(')');
  if (close == std::string::npos) return false;
  std::istringstream rest(line.substr(close + 1));
  std::string field;
  std::vector<std::string> fields;
  while (rest >> field && fields.size() < 20) fields.push_back(field);
  if (fields.size() < 20) return false;
  if (fields[0] == "Z" || fields[0] == "X" || fields[0] == "x") return false;  // exited
  unsigned long long ticks = std::strtoull(fields[19].c_str(), nullptr, 10);
  std::ifstream s("/proc/stat");
  unsigned long long btime = 0;
  while (std::getline(s, line))
    if (line.rfind("btime ", 0) == 0) btime = std::strtoull(line.c_str() + 6, nullptr, 10);
  long hz = sysconf(_SC_CLK_TCK);
  if (btime == 0 || hz <= 0) return false;
  *start_ns = btime * 1'000'000'000ull + ticks * (1'000'000'000ull / uint64_t(hz));
  return true;
}

// Whether process `lock_pid` (in this reader's namespace) is `pid` in its own namespace.
bool same_process(int lock_pid, int pid) { return lock_pid == pid || own_pid_of(lock_pid) == pid; }

// Step 1: type, owner, header and lock of one directory entry. False with `why` when refused.
bool examine(int dir_fd, const std::string& dir, const std::string& name,
             const LocalLogOptions& opts, LocalLog* out, bool* other_job, std::string* why) {
  struct stat st {};
  if (::fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    *why = std::string("cannot stat: ") + std::strerror(errno);
    return false;
  }
  if (!S_ISREG(st.st_mode)) {
    *why = std::string(file_kind(st.st_mode)) + ", not a regular file: not read";
    return false;
  }
  if (!opts.owners.accepts(st.st_uid)) {
    *why = "owned by " + describe_uid(st.st_uid) + ", not an accepted log owner (" +
           opts.owners.describe() + "; see --log-owner): not read";
    return false;
  }
  OpenedFile f = open_regular_at(dir_fd, name, dir + "/" + name);
  if (!f.ok()) {
    *why = f.reason;
    if (f.error == OpenError::kIo && f.message.find(std::strerror(EACCES)) != std::string::npos)
      *why += " (run the reader as the job's user or as root)";
    return false;
  }
  out->name = name;
  out->dev = f.st.st_dev;
  out->ino = f.st.st_ino;
  out->owner = f.st.st_uid;
  fr_log_header h{};
  ssize_t n = ::pread(f.fd.get(), &h, sizeof h, 0);
  out->has_header = n == ssize_t(sizeof h) && h.magic == FR_LOG_MAGIC && h.version >= 1 &&
                    h.version <= FR_LOG_VERSION;
  if (!out->has_header) return true;  // the full read names the problem
  out->pid = h.pid;
  out->rank = h.global_rank;
  out->job_id.assign(h.job_id, strnlen(h.job_id, FR_NAME_LEN));
  out->create_ns = h.create_ns;
  if (!opts.job_id.empty() && out->job_id != opts.job_id) {
    *other_job = true;
    return false;
  }
  out->snapshot = (h.flags & FR_LOG_F_SNAPSHOT) != 0;
  if (out->snapshot) {
    out->locked = h.writer_alive == 1;  // a dump says whether its writer lived
  } else {
    struct flock fl {};
    fl.l_type = F_WRLCK;
    fl.l_whence = SEEK_SET;
    fl.l_start = 0;
    fl.l_len = 1;
    if (fcntl(f.fd.get(), F_GETLK, &fl) == 0 && fl.l_type != F_UNLCK) {
      out->locked = true;
      out->lock_pid = fl.l_pid;
    }
  }
  return true;
}

}  // namespace

LogOwners LogOwners::defaults() {
  LogOwners o;
  if (::geteuid() == 0)
    o.any = true;
  else
    o.uids.push_back(::geteuid());
  return o;
}

bool LogOwners::accepts(uid_t uid) const {
  return any || std::find(uids.begin(), uids.end(), uid) != uids.end();
}

bool LogOwners::add(const std::string& user, std::string* error) {
  any = false;
  if (!user.empty() && user.find_first_not_of("0123456789") == std::string::npos &&
      user.size() <= 10) {
    unsigned long v = std::strtoul(user.c_str(), nullptr, 10);
    if (v <= 0xfffffffeul) {
      uids.push_back(uid_t(v));
      return true;
    }
  }
  struct passwd pw {};
  struct passwd* found = nullptr;
  char buf[4096];
  if (getpwnam_r(user.c_str(), &pw, buf, sizeof buf, &found) != 0 || !found) {
    *error = "no such user: '" + user.substr(0, 64) + "'";
    return false;
  }
  uids.push_back(found->pw_uid);
  return true;
}

std::string LogOwners::describe() const {
  if (any) return "any user";
  std::string s;
  for (uid_t u : uids) s += (s.empty() ? "" : ", ") + describe_uid(u);
  return s.empty() ? "no user" : s;
}

namespace {

// The logs of the directory that examine() accepts, in name order; the others are refused.
std::vector<LocalLog> examine_dir(DIR* d, const LocalLogOptions& opts, LocalLogs* out) {
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d))
    if (ends_with(e->d_name, FR_LOG_FILE_SUFFIX)) names.push_back(e->d_name);
  std::sort(names.begin(), names.end());

  std::vector<LocalLog> found;
  size_t examined = 0;
  for (const std::string& name : names) {
    if (opts.max_logs && examined >= opts.max_logs) {
      out->refused.push_back(
          {name, "more than " + std::to_string(opts.max_logs) + " logs, not read"});
      continue;
    }
    ++examined;
    LocalLog l;
    bool other_job = false;
    std::string why;
    if (examine(::dirfd(d), opts.dir, name, opts, &l, &other_job, &why))
      found.push_back(std::move(l));
    else if (!other_job)
      out->refused.push_back({name, why});
  }
  return found;
}

// A lock held by a process that is not the writer the header names: someone else's file.
// Returns whether some writer's pid reads the same here (this reader shares its pid namespace).
bool refuse_foreign_locks(const std::vector<LocalLog>& found, std::vector<bool>* keep,
                          LocalLogs* out) {
  bool shared_pid_ns = false;
  for (size_t i = 0; i < found.size(); ++i) {
    const LocalLog& l = found[i];
    if (!l.locked || l.lock_pid <= 0) continue;  // not visible here (or an open file lock)
    if (same_process(l.lock_pid, l.pid)) {
      shared_pid_ns = shared_pid_ns || l.lock_pid == l.pid;
      continue;
    }
    (*keep)[i] = false;
    out->refused.push_back({l.name, "its lock is held by pid " + std::to_string(l.lock_pid) +
                                        ", but its header names pid " + std::to_string(l.pid) +
                                        ": not that process's log"});
  }
  return shared_pid_ns;
}

// Groups of logs that claim one process (a copy keeps the writer's pid and creation time) or
// one rank of one job: the log whose writer holds its lock wins, else the newest.
// Between copies of a dead writer's log, the one under the agent's own name for it.
void refuse_duplicates(const std::vector<LocalLog>& found, std::vector<bool>* keep,
                       LocalLogs* out) {
  auto agent_named = [&](const LocalLog& l) {
    return ends_with(l.name, "." + std::to_string(l.pid) + "." + std::to_string(l.create_ns) +
                                 FR_LOG_FILE_SUFFIX);
  };
  auto better = [&](size_t a, size_t b) {
    if (found[a].locked != found[b].locked) return found[a].locked;
    if (found[a].create_ns != found[b].create_ns) return found[a].create_ns > found[b].create_ns;
    if (agent_named(found[a]) != agent_named(found[b])) return agent_named(found[a]);
    return found[a].name < found[b].name;
  };
  auto resolve = [&](auto key_of, const char* what) {
    std::map<std::string, std::vector<size_t>> groups;
    for (size_t i = 0; i < found.size(); ++i) {
      if (!(*keep)[i] || !found[i].has_header) continue;
      std::string key = key_of(found[i]);
      if (!key.empty()) groups[key].push_back(i);
    }
    for (auto& [key, members] : groups) {
      if (members.size() < 2) continue;
      size_t best = members[0];
      for (size_t m : members)
        if (better(m, best)) best = m;
      for (size_t m : members) {
        // Two live writers of one rank are two processes, not a copy: both stay.
        if (m == best || (found[m].locked && found[best].locked)) continue;
        (*keep)[m] = false;
        out->refused.push_back(
            {found[m].name, std::string("duplicate: ") + what + " as " + found[best].name +
                                ", which " +
                                (found[best].locked ? "its live writer holds" : "is newer") +
                                "; not counted as a process"});
      }
    }
  };
  resolve(
      [](const LocalLog& l) {
        // A log without a creation time (not the agent's) has nothing to be a copy of.
        return l.create_ns
                   ? l.job_id + "\n" + std::to_string(l.pid) + "\n" + std::to_string(l.create_ns)
                   : std::string();
      },
      "the same writer pid and creation time");
  resolve(
      [](const LocalLog& l) {
        return l.rank >= 0 ? l.job_id + "\n" + std::to_string(l.rank) : std::string();
      },
      "claims the same rank");
}

// An unlocked log whose claimed writer still runs and was there when the log was made.
void refuse_live_copies(const std::vector<LocalLog>& found, std::vector<bool>* keep,
                        LocalLogs* out) {
  for (size_t i = 0; i < found.size(); ++i) {
    const LocalLog& l = found[i];
    if (!(*keep)[i] || !l.has_header || l.locked || l.snapshot) continue;
    uint64_t start = 0;
    if (process_start_ns(l.pid, &start) && start <= l.create_ns + kStartSlackNs) {
      (*keep)[i] = false;
      out->refused.push_back({l.name, "its writer, pid " + std::to_string(l.pid) +
                                          ", is alive but does not hold this log (a copy, or "
                                          "the process exec'd): not a dead process"});
    }
  }
}

}  // namespace

LocalLogs list_local_logs(const LocalLogOptions& opts) {
  LocalLogs out;
  DIR* d = ::opendir(opts.dir.c_str());
  if (!d) {
    out.error = "cannot read log directory " + opts.dir + ": " + std::strerror(errno);
    return out;
  }
  std::vector<LocalLog> found = examine_dir(d, opts, &out);
  ::closedir(d);
  std::vector<bool> keep(found.size(), true);
  const bool shared_pid_ns = refuse_foreign_locks(found, &keep, &out);
  refuse_duplicates(found, &keep, &out);
  if (shared_pid_ns) refuse_live_copies(found, &keep, &out);

  for (size_t i = 0; i < found.size(); ++i)
    if (keep[i]) out.logs.push_back(std::move(found[i]));
  return out;
}

ReadResult read_local_log(const std::string& dir, const LocalLog& log) {
  const std::string path = dir + "/" + log.name;
  OpenedFile f = open_regular(path, Links::kRefuse);
  ReadResult r;
  if (!f.ok()) {
    r.error = ReadError::kIo;
    r.message = f.message;
    return r;
  }
  if (f.st.st_dev != log.dev || f.st.st_ino != log.ino) {
    r.error = ReadError::kIo;
    r.message = path + ": replaced since it was listed: not read";
    return r;
  }
  return read_log_fd(f.fd.get(), f.st, path);
}

int own_pid_of(int pid) {
  if (pid <= 0) return 0;
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("NSpid:", 0) != 0) continue;
    std::istringstream in(line.substr(6));
    long v = 0, last = 0;
    while (in >> v) last = v;
    return last > 0 && last <= INT32_MAX ? int(last) : 0;
  }
  return 0;
}

}  // namespace fr::log
