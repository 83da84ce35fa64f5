// See torch_dumps.h.
#include "daemon/host/torch_dumps.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <set>
#include <thread>

#include "common/files.h"
#include "daemon/base/proc_file.h"
#include "daemon/host/watcher.h"
#include "log/safe_file.h"

namespace fr::daemon {
namespace {

// The bound the analyzer reads a torch dump with.
constexpr size_t kMaxTorchDumpBytes = size_t(256) << 20;

std::string base_of(const std::string& log_dir, int pid) { return proc_file_path(log_dir, pid); }

}  // namespace

TorchAsked ask_torch_dumps(const std::string& log_dir, const fr::log::LogOwners& owners,
                           const std::string& job_filter) {
  TorchAsked out;
  out.registered = list_registrations(log_dir, owners, job_filter, real_ns());
  out.asked_mono_ns = mono_ns();
  for (const auto& u : out.registered) {
    if (!u.torch) continue;
    const std::string base = base_of(log_dir, u.pid);
    ::unlink((base + kTorchDumpSuffix).c_str());  // an earlier incident's, never taken
    std::string err;
    if (fr::files::write_atomic(base + kTorchRequestSuffix, "fr-dump-request/1\n", &err))
      out.asked.push_back(u.pid);
  }
  return out;
}

std::string torch_dump_name(const std::string& node, const UnrecordedProcess& u) {
  // The rank last: torch's gloo dump does not say its rank, and the reader takes a dump's
  // trailing digits for it, as torch names its own files.
  return node + "-pid" + std::to_string(u.pid) + "-rank" +
         (u.rank >= 0 ? std::to_string(u.rank) : std::string("x")) + kTorchDumpFileSuffix;
}

TorchGathered gather_torch_dumps(const std::string& log_dir, const TorchAsked& asked,
                                 const std::string& node, const std::string& out_dir,
                                 int64_t budget_ns) {
  TorchGathered out;
  std::map<int, const UnrecordedProcess*> by_pid;
  for (const auto& u : asked.registered) by_pid[u.pid] = &u;
  std::set<int> left(asked.asked.begin(), asked.asked.end());
  const uid_t me = ::geteuid();
  while (!left.empty()) {
    for (auto it = left.begin(); it != left.end();) {
      const std::string path = base_of(log_dir, *it) + kTorchDumpSuffix;
      fr::log::OpenedFile f = fr::log::open_regular(path);
      if (!f.ok()) {
        ++it;
        continue;
      }
      std::string bytes, err;
      const UnrecordedProcess& u = *by_pid[*it];
      const std::string name = torch_dump_name(node, u);
      // Only the process's own user (or root) writes there; anything else is not its dump.
      struct stat reg {};
      const bool owned = ::stat(base_of(log_dir, *it).c_str(), &reg) == 0 &&
                         (f.st.st_uid == reg.st_uid || f.st.st_uid == 0 || f.st.st_uid == me);
      if (!owned)
        out.notes.push_back("pid " + std::to_string(*it) + ": its torch dump has another owner");
      else if (!fr::log::read_all(f.fd.get(), kMaxTorchDumpBytes, &bytes, &err, path) ||
               !fr::files::write_atomic(out_dir + "/" + name, bytes, &err))
        out.notes.push_back("pid " + std::to_string(*it) + ": " + err);
      else
        out.files.push_back(name);
      ::unlink(path.c_str());
      it = left.erase(it);
    }
    if (left.empty() || mono_ns() - asked.asked_mono_ns >= budget_ns) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  for (int pid : left) {
    const UnrecordedProcess& u = *by_pid[pid];
    out.notes.push_back("rank " + std::to_string(u.rank) + " (pid " + std::to_string(pid) +
                        "): torch's recorder did not dump within " +
                        std::to_string(budget_ns / 1'000'000) + " ms");
    ::unlink((base_of(log_dir, pid) + kTorchRequestSuffix).c_str());
  }
  return out;
}

}  // namespace fr::daemon
