// The node's view of the processes fr-run registered (see watcher.h, scan_registrations, and
// daemon/base/proc_file.h for the files). A registration counts only while it is a regular file
// of an accepted user and its process runs with the start time it names; a process that has a
// flight log is reported through the log, not here. The torch progress file beside a
// registration gives, by its age, how long torch's process groups have not moved.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <set>

#include "daemon/base/proc_file.h"
#include "daemon/host/watcher.h"
#include "log/safe_file.h"

namespace fr::daemon {
namespace {

constexpr size_t kMaxRegistrationBytes = 4096;

// A side file of a registration: its text and mtime when it is a regular file of `owner`.
bool read_side(int dir_fd, const std::string& name, uid_t owner, std::string* text,
               int64_t* mtime_ns) {
  fr::log::OpenedFile f = fr::log::open_regular_at(dir_fd, name, name);
  if (!f.ok() || f.st.st_uid != owner) return false;
  std::string err;
  if (!fr::log::read_all(f.fd.get(), kMaxRegistrationBytes, text, &err, name)) return false;
  *mtime_ns = int64_t(f.st.st_mtim.tv_sec) * 1'000'000'000 + f.st.st_mtim.tv_nsec;
  return true;
}

}  // namespace

std::vector<UnrecordedProcess> scan_registrations(const std::string& log_dir,
                                                  const fr::log::LogOwners& owners,
                                                  const std::string& job_filter,
                                                  const std::vector<ProcessReport>& processes,
                                                  int64_t now_real_ns) {
  std::set<int> logged;
  for (const auto& p : processes)
    if (p.alive) logged.insert(p.pid);
  std::vector<UnrecordedProcess> out;
  for (auto& u : list_registrations(log_dir, owners, job_filter, now_real_ns))
    if (!logged.count(u.pid)) out.push_back(std::move(u));
  return out;
}

std::vector<UnrecordedProcess> list_registrations(const std::string& log_dir,
                                                  const fr::log::LogOwners& owners,
                                                  const std::string& job_filter,
                                                  int64_t now_real_ns) {
  std::vector<UnrecordedProcess> out;
  DIR* d = ::opendir(log_dir.c_str());
  if (!d) return out;
  std::vector<std::string> names;
  while (struct dirent* e = ::readdir(d))
    if (proc_file_pid(e->d_name) > 0) names.push_back(e->d_name);
  const int dir_fd = ::dirfd(d);
  std::sort(names.begin(), names.end());
  for (const auto& name : names) {
    if (out.size() >= UnrecordedProcess::kMaxPerNode) break;
    fr::log::OpenedFile f = fr::log::open_regular_at(dir_fd, name, name);
    if (!f.ok() || !owners.accepts(f.st.st_uid)) continue;
    std::string text, err;
    ProcFile reg;
    if (!fr::log::read_all(f.fd.get(), kMaxRegistrationBytes, &text, &err, name) ||
        !parse_proc_file(text, &reg, &err) || reg.pid != proc_file_pid(name))
      continue;
    if (process_start_ticks(reg.pid) != reg.start_ticks) continue;
    if (!job_filter.empty() && reg.job_id != job_filter) continue;
    UnrecordedProcess u;
    u.pid = reg.pid;
    u.rank = reg.rank;
    u.world_size = reg.world_size;
    u.job_id = reg.job_id;
    u.file = name;
    std::string progress;
    int64_t mtime = 0;
    if (read_side(dir_fd, name + kTorchProgressSuffix, f.st.st_uid, &progress, &mtime) &&
        parse_torch_progress(progress, &u.torch_seq)) {
      u.torch = true;
      u.torch_idle_ns = std::max<int64_t>(0, now_real_ns - mtime);
    }
    out.push_back(std::move(u));
  }
  ::closedir(d);
  return out;
}

}  // namespace fr::daemon
