// The daemon's side of the stacks (stacks.h): take_stacks starts the capture helper (`frd stacks`)
// for the live rank processes of a dump, reads one fr-stacks/1 document per process from it under
// the incident's budget, and writes each rank's stacks file beside its dump, with a one-line
// reason for every process it could not take.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>

#include "daemon/base/model.h"
#include "daemon/host/stacks.h"
#include "daemon/host/stacks_internal.h"
#include "common/files.h"

namespace fr::daemon {

using fr::log::ProcessStacks;
using namespace stacks;

StackOptions stack_options(const std::string& py_spy_flag, double budget_seconds, bool disabled) {
  StackOptions o;
  o.enabled = !disabled && budget_seconds > 0;
  o.py_spy = py_spy_flag;
  o.budget_ns = int64_t(budget_seconds * 1e9);
  if (const char* hold = std::getenv("FR_STACKS_HOLD_MS")) o.hold_ns = std::atoll(hold) * 1'000'000;
  return o;
}

StacksTaken take_stacks(const StackOptions& opts, const std::vector<StackTarget>& targets,
                        const std::string& out_dir) {
  StacksTaken res;
  const int64_t t0 = mono_ns();
  std::map<int, ProcessStacks> got;
  std::vector<const StackTarget*> live;
  std::map<int, std::string> refused;  // pid -> why
  for (const auto& t : targets) {
    if (!t.alive || t.pid <= 0) continue;
    struct stat log_st, proc_st;
    if (!t.log_path.empty() && ::stat(t.log_path.c_str(), &log_st) == 0 &&
        ::stat(("/proc/" + std::to_string(t.pid)).c_str(), &proc_st) == 0 &&
        log_st.st_uid != proc_st.st_uid) {
      refused[t.pid] = "not taken: the process belongs to " + user_name(proc_st.st_uid) +
                       ", its flight log to " + user_name(log_st.st_uid);
      continue;
    }
    live.push_back(&t);
  }
  std::string common_error;
  if (!opts.enabled) common_error = "stacks are off (--no-stacks or a zero --stack-budget)";
  std::string frd = opts.frd_binary;
  if (common_error.empty() && frd.empty()) {
    char self[4096];
    ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
    if (n > 0) {
      std::string exe(self, size_t(n));
      // An frd replaced on disk since it started (an upgrade) is run by its path as it is now.
      const std::string deleted = " (deleted)";
      if (exe.size() > deleted.size() &&
          exe.compare(exe.size() - deleted.size(), deleted.size(), deleted) == 0)
        exe.resize(exe.size() - deleted.size());
      if (exe.size() >= 4 && exe.compare(exe.size() - 4, 4, "/frd") == 0) frd = exe;
    }
    if (frd.empty()) common_error = "no frd binary to take stacks with";
  }
  if (common_error.empty() && !live.empty()) {
    std::vector<std::string> argv = {
        frd, "stacks", "--budget-ms",
        std::to_string(std::max<int64_t>(1, opts.budget_ns / 1'000'000))};
    if (!opts.py_spy.empty()) argv.insert(argv.end(), {"--py-spy", opts.py_spy});
    if (opts.hold_ns > 0)
      argv.insert(argv.end(), {"--hold-ms", std::to_string(opts.hold_ns / 1'000'000)});
    for (const auto* t : live)
      argv.insert(argv.end(), {"--pid", std::to_string(t->pid) + ":" + std::to_string(t->rank)});
    int fd = -1;
    pid_t child = spawn_reader(argv, &fd);
    if (child < 0) {
      common_error = std::string("cannot start frd stacks: ") + std::strerror(errno);
    } else {
      // The helper keeps to the budget itself; a second more before it is killed.
      bool eof = read_until(fd, t0 + opts.budget_ns + 1'000'000'000, nullptr,
                            [&](const std::string& line) {
                              ProcessStacks s;
                              std::string err;
                              if (fr::log::parse_stacks(line, &s, &err)) got[s.pid] = std::move(s);
                            });
      ::close(fd);
      reap(child, !eof);
    }
  }
  for (const auto& t : targets) {
    if (t.pid <= 0 || t.dump_file.empty()) continue;
    ProcessStacks s;
    auto it = got.find(t.pid);
    if (it != got.end()) {
      s = std::move(it->second);
    } else if (refused.count(t.pid)) {
      s.pid = t.pid;
      s.error = refused[t.pid];
    } else {
      s.pid = t.pid;
      s.error = !t.alive ? "the process had exited at the dump"
                : !common_error.empty()
                    ? common_error
                    : "not taken: the stack budget of " + seconds_text(opts.budget_ns) + " ran out";
    }
    s.rank = t.rank;
    bool any = false;
    for (const auto& th : s.threads) any |= !th.frames.empty();
    if (any)
      ++res.taken;
    else
      res.notes.push_back("rank " + std::to_string(t.rank) + " (pid " + std::to_string(t.pid) +
                          "): " + (s.error.empty() ? "no frames" : s.error));
    const std::string name = fr::log::stacks_file_for(t.dump_file);
    std::string err;
    if (fr::files::write_atomic(out_dir + "/" + name, fr::log::stacks_to_text(s), &err))
      res.files.push_back(name);
    else
      res.notes.push_back(err);
  }
  res.took_ns = mono_ns() - t0;
  return res;
}

}  // namespace fr::daemon
