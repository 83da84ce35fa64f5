// See register.h.
#include "register.h"

#include <unistd.h>

#include "common/files.h"
#include "daemon/base/proc_file.h"

namespace fr::run {

bool Registration::write(int pid, std::string* error) {
  fr::daemon::ProcFile p = fr::daemon::proc_file_from_env([this](const char* name) {
    auto it = env_.find(name);
    return it == env_.end() ? std::string() : it->second;
  });
  p.pid = pid;
  p.start_ticks = fr::daemon::process_start_ticks(pid);
  if (p.start_ticks == 0) {
    *error = "the command (pid " + std::to_string(pid) + ") ended before it was registered";
    return false;
  }
  std::string err;
  if (!fr::files::write_atomic(fr::daemon::proc_file_path(log_dir_, pid),
                               fr::daemon::proc_file_text(p), &err)) {
    *error = "cannot register the command for the node daemon: " + err;
    return false;
  }
  pid_ = pid;
  return true;
}

Registration::~Registration() {
  if (pid_ == 0) return;
  const std::string base = fr::daemon::proc_file_path(log_dir_, pid_);
  for (const char* suffix : {"", fr::daemon::kTorchProgressSuffix, fr::daemon::kTorchRequestSuffix,
                             fr::daemon::kTorchDumpSuffix})
    ::unlink((base + suffix).c_str());
}

}  // namespace fr::run
