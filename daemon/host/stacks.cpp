// See stacks.h. The helper side (`frd stacks`: ptrace, libdw, py-spy); the daemon side that runs
// it is stacks_take.cpp, and what the two share is stacks_internal.h.
#include "daemon/host/stacks.h"
#include "daemon/host/stacks_internal.h"
#include "common/files.h"
#include "common/spawn.h"

#include <cxxabi.h>
#include <dirent.h>
#include <dwarf.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwfl.h>
#include <fcntl.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <thread>

#include <nlohmann/json.hpp>

#include "daemon/base/model.h"
#include "log/json_fields.h"

namespace fr::daemon {
namespace {

using namespace stacks;

using fr::log::ProcessStacks;
using fr::log::StackFrame;
using fr::log::ThreadStack;

// A thread that does not reach its interrupt stop in this time is blocked in the kernel (state D)
// or being stopped by someone else; it is reported as such and the others go on.
constexpr int64_t kStopWaitNs = 300'000'000;

std::string read_small(const std::string& path) {
  std::string out;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return out;
  char buf[4096];
  ssize_t n;
  while (out.size() < 65536 && (n = ::read(fd, buf, sizeof buf)) > 0) out.append(buf, size_t(n));
  ::close(fd);
  return out;
}

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

// The state letter of /proc/<pid>/task/<tid>/stat (the field after the command's ")").
std::string thread_state(int pid, int tid) {
  std::string stat =
      read_small("/proc/" + std::to_string(pid) + "/task/" + std::to_string(tid) + "/stat");
  size_t p = stat.rfind(')');
  return p != std::string::npos && p + 2 < stat.size() ? stat.substr(p + 2, 1) : "";
}

std::vector<int> list_tasks(int pid) {
  std::vector<int> out;
  if (DIR* d = ::opendir(("/proc/" + std::to_string(pid) + "/task").c_str())) {
    while (dirent* e = ::readdir(d))
      if (e->d_name[0] >= '0' && e->d_name[0] <= '9') out.push_back(std::atoi(e->d_name));
    ::closedir(d);
  }
  std::sort(out.begin(), out.end());
  // The main thread first: it is the one the analysis shows.
  auto it = std::find(out.begin(), out.end(), pid);
  if (it != out.end()) std::rotate(out.begin(), it, it + 1);
  return out;
}

// One line: why the kernel refused to let us trace `pid`.
std::string ptrace_refusal(int pid, int err) {
  if (err == ESRCH) return "the process exited before its stacks were taken";
  std::string why = std::string("ptrace not permitted (") + std::strerror(err) + ")";
  struct stat st;
  if (::stat(("/proc/" + std::to_string(pid)).c_str(), &st) == 0 && st.st_uid != ::geteuid())
    return why + ": the process belongs to " + user_name(st.st_uid) + " and frd runs as " +
           user_name(::geteuid()) + " without CAP_SYS_PTRACE";
  std::string scope = trim(read_small("/proc/sys/kernel/yama/ptrace_scope"));
  if (!scope.empty() && scope != "0")
    return why + ": kernel.yama.ptrace_scope is " + scope +
           " (0, or CAP_SYS_PTRACE for frd, lets it read stacks)";
  return why + ": in a container, frd needs the SYS_PTRACE capability";
}

std::string demangle(const char* name) {
  if (!name) return "";
  std::string raw = name;
  raw = raw.substr(0, raw.find('@'));  // a symbol version: __libc_start_main@@GLIBC_2.34
  int status = 0;
  std::unique_ptr<char, decltype(&std::free)> d(
      abi::__cxa_demangle(raw.c_str(), nullptr, nullptr, &status), &std::free);
  return status == 0 && d ? std::string(d.get()) : raw;
}

// A function's name from its DWARF entry (or the entry it is an inlined instance of).
std::string die_name(Dwarf_Die* die) {
  Dwarf_Attribute a;
  const char* linkage = dwarf_formstring(dwarf_attr_integrate(die, DW_AT_linkage_name, &a));
  if (!linkage) linkage = dwarf_formstring(dwarf_attr_integrate(die, DW_AT_MIPS_linkage_name, &a));
  if (linkage) return demangle(linkage);
  const char* n = dwarf_formstring(dwarf_attr_integrate(die, DW_AT_name, &a));
  return n ? n : "";
}

// The frames of the functions inlined at `at`, innermost first: each inlined call is a frame of
// its own, at the line it reached, so "hang_forever <- run_step <- main" reads as the source does.
// `base` is the frame from the symbol table and the line table.
void add_with_inlines(Dwfl_Module* mod, Dwarf_Addr at, const StackFrame& base,
                      std::vector<StackFrame>* out) {
  Dwarf_Addr bias = 0;
  Dwarf_Die* cu = dwfl_module_addrdie(mod, at, &bias);
  Dwarf_Die* scopes = nullptr;
  int n = cu ? dwarf_getscopes(cu, at - bias, &scopes) : 0;
  if (n <= 0) {
    out->push_back(base);
    return;
  }
  // The innermost function at `at`, then its concrete containing scopes outward (for an inlined
  // instance, dwarf_getscopes would go on with the scopes of its abstract definition instead).
  Dwarf_Die inner;
  bool found = false;
  for (int i = 0; i < n && !found; ++i) {
    const int tag = dwarf_tag(&scopes[i]);
    if (tag == DW_TAG_inlined_subroutine || tag == DW_TAG_subprogram) {
      inner = scopes[i];
      found = true;
    }
  }
  std::free(scopes);
  scopes = nullptr;
  n = found ? dwarf_getscopes_die(&inner, &scopes) : 0;
  if (n <= 0) {
    out->push_back(base);
    return;
  }
  Dwarf_Files* files = nullptr;
  size_t nfiles = 0;
  if (dwarf_getsrcfiles(cu, &files, &nfiles) != 0) files = nullptr;
  std::string file = base.file;
  int line = base.line;
  bool any = false;
  for (int i = 0; i < n && out->size() < fr::log::kMaxStackFrames; ++i) {
    const int tag = dwarf_tag(&scopes[i]);
    if (tag != DW_TAG_inlined_subroutine && tag != DW_TAG_subprogram) continue;
    StackFrame f = base;
    f.function = die_name(&scopes[i]);
    if (tag == DW_TAG_subprogram && !base.function.empty()) f.function = base.function;
    f.file = file;
    f.line = line;
    if (any) f.pc = 0;
    out->push_back(std::move(f));
    any = true;
    if (tag == DW_TAG_subprogram) break;
    // The caller stands at the call site of this inlined call.
    Dwarf_Attribute a;
    Dwarf_Word w = 0;
    file.clear();
    line = 0;
    if (files && dwarf_formudata(dwarf_attr(&scopes[i], DW_AT_call_file, &a), &w) == 0 &&
        w < nfiles)
      if (const char* src = dwarf_filesrc(files, w, nullptr, nullptr)) file = src;
    if (dwarf_formudata(dwarf_attr(&scopes[i], DW_AT_call_line, &a), &w) == 0) line = int(w);
  }
  std::free(scopes);
  if (!any) out->push_back(base);
}

struct Unwind {
  ThreadStack* thread;
};

int on_frame(Dwfl_Frame* frame, void* arg) {
  auto* u = static_cast<Unwind*>(arg);
  Dwarf_Addr pc = 0;
  bool activation = false;
  if (!dwfl_frame_pc(frame, &pc, &activation)) return DWARF_CB_ABORT;
  // A return address points after the call: look up the call itself.
  Dwarf_Addr at = activation ? pc : pc - 1;
  StackFrame f;
  f.pc = pc;
  Dwfl* dwfl = dwfl_thread_dwfl(dwfl_frame_thread(frame));
  Dwfl_Module* mod = dwfl_addrmodule(dwfl, at);
  if (mod) {
    const char* mname =
        dwfl_module_info(mod, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr);
    if (mname) f.module = mname;
    f.function = demangle(dwfl_module_addrname(mod, at));
    if (Dwfl_Line* line = dwfl_module_getsrc(mod, at)) {
      int lineno = 0;
      const char* src = dwfl_lineinfo(line, nullptr, &lineno, nullptr, nullptr, nullptr);
      if (src) f.file = src;
      f.line = lineno;
    }
    add_with_inlines(mod, at, f, &u->thread->frames);
  } else {
    u->thread->frames.push_back(std::move(f));
  }
  return u->thread->frames.size() >= fr::log::kMaxStackFrames ? DWARF_CB_ABORT : DWARF_CB_OK;
}

// A thread that never stopped: its kernel function, where the kernel says (wchan), and its
// kernel stack where we may read it (root).
void add_kernel_frames(int pid, int tid, ThreadStack* t) {
  const std::string base = "/proc/" + std::to_string(pid) + "/task/" + std::to_string(tid);
  std::string stack = read_small(base + "/stack");
  size_t pos = 0;
  while (pos < stack.size() && t->frames.size() < 32) {
    size_t end = stack.find('\n', pos);
    if (end == std::string::npos) end = stack.size();
    std::string line = stack.substr(pos, end - pos);
    pos = end + 1;
    size_t sp = line.find("] ");
    std::string fn = sp == std::string::npos ? line : line.substr(sp + 2);
    fn = fn.substr(0, fn.find('+'));
    if (!fn.empty()) t->frames.push_back({fn, "", 0, "kernel", "kernel", 0});
  }
  if (t->frames.empty()) {
    std::string wchan = trim(read_small(base + "/wchan"));
    if (!wchan.empty() && wchan != "0") t->frames.push_back({wchan, "", 0, "kernel", "kernel", 0});
  }
}

}  // namespace

// ---- shared with the daemon's side (stacks_internal.h) -------------------------------------------

namespace stacks {

std::string user_name(uid_t uid) {
  passwd pw, *res = nullptr;
  char buf[1024];
  if (::getpwuid_r(uid, &pw, buf, sizeof buf, &res) == 0 && res) return res->pw_name;
  return "uid " + std::to_string(uid);
}

// Starts `argv` with stdout to a pipe; returns the child's pid and the pipe's read end. The helper
// dies with the daemon; when it cannot exec it exits with 127, which the caller sees as no output.
pid_t spawn_reader(const std::vector<std::string>& argv, int* out_fd) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) return -1;
  int devnull = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  fr::process::SpawnOptions o;
  o.argv = argv;
  o.search_path = true;
  o.parent_death_signal = SIGKILL;
  o.redirects.push_back({1, p[1]});
  if (devnull >= 0) o.redirects.push_back({0, devnull});
  o.wait_for_exec = false;
  fr::process::SpawnResult r = fr::process::spawn(o);
  ::close(p[1]);
  if (devnull >= 0) ::close(devnull);
  if (!r.ok()) {
    ::close(p[0]);
    errno = r.error;
    return -1;
  }
  *out_fd = p[0];
  return r.pid;
}

void reap(pid_t pid, bool kill_first) {
  if (kill_first) ::kill(pid, SIGKILL);
  int st;
  while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
}

std::string seconds_text(int64_t ns) {
  char b[32];
  std::snprintf(b, sizeof b, "%.3g s", double(ns) / 1e9);
  return b;
}

}  // namespace stacks

// ---- the helper's side ---------------------------------------------------------------------------

namespace {

// One thread of the process being captured, as ptrace holds it.
struct Held {
  int tid;
  bool seized = false;
  bool stopped = false;
  int pending_signal = 0;  // a signal-delivery stop: the signal goes back on detach
  bool gone = false;
};

// Seizes every thread and asks each to stop. False (with `error` set) when ptrace refuses the
// process itself; threads that ended meanwhile are left out.
bool seize_threads(int pid, const std::vector<int>& tids, std::vector<Held>* held,
                   std::string* error) {
  for (int tid : tids) {
    Held h{tid};
    if (::ptrace(PTRACE_SEIZE, tid, nullptr, nullptr) != 0) {
      int err = errno;
      if (err == ESRCH && tid != pid) continue;  // a thread that just ended
      if (held->empty()) {
        *error = ptrace_refusal(pid, err);
        return false;
      }
      continue;
    }
    h.seized = true;
    ::ptrace(PTRACE_INTERRUPT, tid, nullptr, nullptr);
    held->push_back(h);
  }
  return true;
}

// Waits for each thread's stop: an interrupt stop, a group stop (the process was SIGSTOPped), or a
// signal-delivery stop, whose signal is handed back at the detach.
void wait_for_stops(std::vector<Held>& held, int64_t deadline_mono_ns) {
  const int64_t stop_deadline = std::min(deadline_mono_ns, mono_ns() + kStopWaitNs);
  for (;;) {
    bool waiting = false;
    for (auto& h : held) {
      if (h.stopped || h.gone) continue;
      int st = 0;
      pid_t r = ::waitpid(h.tid, &st, __WALL | WNOHANG);
      if (r == h.tid) {
        if (WIFSTOPPED(st)) {
          h.stopped = true;
          int sig = WSTOPSIG(st);
          int event = st >> 16;
          if (event == 0 && sig != SIGTRAP) h.pending_signal = sig;
          if (event == 0 && sig == SIGTRAP) h.pending_signal = 0;
        } else {
          h.gone = true;
        }
      } else if (r < 0 && errno == ECHILD) {
        h.gone = true;
      } else {
        waiting = true;
      }
    }
    if (!waiting || mono_ns() >= stop_deadline) break;
    ::usleep(500);
  }
}

// Every held thread's native stack through libdw (the kernel's frames for one that never
// stopped), with its name and the state it had before it was stopped.
void unwind_threads(int pid, const std::vector<Held>& held, std::map<int, std::string>& states,
                    ProcessStacks* s) {
  static char* debuginfo_path = nullptr;
  static const Dwfl_Callbacks callbacks = {dwfl_linux_proc_find_elf, dwfl_standard_find_debuginfo,
                                           nullptr, &debuginfo_path};
  Dwfl* dwfl = dwfl_begin(&callbacks);
  bool attached = false;
  if (dwfl) {
    dwfl_report_begin(dwfl);
    int rc = dwfl_linux_proc_report(dwfl, pid);
    dwfl_report_end(dwfl, nullptr, nullptr);
    attached = rc == 0 && dwfl_linux_proc_attach(dwfl, pid, true) == 0;
    if (!attached) s->error = std::string("libdw cannot read the process: ") + dwfl_errmsg(-1);
  } else {
    s->error = std::string("libdw: ") + dwfl_errmsg(-1);
  }
  const std::string task_dir = "/proc/" + std::to_string(pid) + "/task/";
  for (const auto& h : held) {
    if (h.gone) continue;
    ThreadStack t;
    t.tid = h.tid;
    t.name = trim(read_small(task_dir + std::to_string(h.tid) + "/comm"));
    t.state = states[h.tid];
    if (!h.stopped) {
      t.error = "did not stop within " + seconds_text(kStopWaitNs) + " (state " + t.state +
                (t.state == "D" ? ": blocked in the kernel)" : ")");
      add_kernel_frames(pid, h.tid, &t);
    } else if (attached) {
      Unwind u{&t};
      if (dwfl_getthread_frames(dwfl, h.tid, on_frame, &u) != 0 && t.frames.empty())
        t.error = std::string("unwinding failed: ") + dwfl_errmsg(-1);
    }
    s->threads.push_back(std::move(t));
  }
  if (dwfl) dwfl_end(dwfl);
}

// Detach. A thread that never stopped cannot be detached now; it stays seized (not stopped) until
// this helper exits, when the kernel detaches it and clears the pending interrupt.
void release_threads(std::vector<Held>& held) {
  for (auto& h : held) {
    if (h.stopped) {
      ::ptrace(PTRACE_DETACH, h.tid, nullptr, reinterpret_cast<void*>(intptr_t(h.pending_signal)));
      h.stopped = false;
      h.gone = true;
    }
  }
  for (auto& h : held) {
    if (h.gone) continue;
    int st = 0;
    if (::waitpid(h.tid, &st, __WALL | WNOHANG) == h.tid && WIFSTOPPED(st)) {
      int sig = (st >> 16) == 0 && WSTOPSIG(st) != SIGTRAP ? WSTOPSIG(st) : 0;
      ::ptrace(PTRACE_DETACH, h.tid, nullptr, reinterpret_cast<void*>(intptr_t(sig)));
    }
  }
}

}  // namespace

ProcessStacks capture_process(int pid, int64_t deadline_mono_ns, int64_t hold_ns) {
  ProcessStacks s;
  s.pid = pid;
  s.taker = "libdw";
  s.time_ns = real_ns();
  const int64_t t0 = mono_ns();
  std::vector<int> tids = list_tasks(pid);
  if (tids.empty()) {
    s.error = "the process exited before its stacks were taken";
    return s;
  }
  std::map<int, std::string> states;  // before we stop them
  for (int tid : tids) states[tid] = thread_state(pid, tid);
  std::vector<Held> held;
  if (!seize_threads(pid, tids, &held, &s.error)) return s;
  wait_for_stops(held, deadline_mono_ns);
  if (hold_ns > 0) std::this_thread::sleep_for(std::chrono::nanoseconds(hold_ns));
  unwind_threads(pid, held, states, &s);
  release_threads(held);
  s.took_ns = mono_ns() - t0;
  return s;
}

bool is_python_process(int pid) {
  char exe[4096];
  ssize_t n = ::readlink(("/proc/" + std::to_string(pid) + "/exe").c_str(), exe, sizeof exe - 1);
  if (n > 0) {
    exe[n] = 0;
    const char* base = std::strrchr(exe, '/');
    base = base ? base + 1 : exe;
    if (std::strncmp(base, "python", 6) == 0) return true;
  }
  return read_small("/proc/" + std::to_string(pid) + "/maps").find("/libpython") !=
         std::string::npos;
}

namespace {

// py-spy on one process, started; `fd` gives its JSON. -1 with s->python_error set when it cannot run.
pid_t start_py_spy(const std::string& py_spy, ProcessStacks* s, int* fd) {
  s->python = true;
  std::string exe = fr::files::find_on_path(py_spy.empty() ? "py-spy" : py_spy);
  if (exe.empty()) {
    s->python_error = py_spy.empty()
                          ? "py-spy not found on PATH (pip install py-spy, or give --py-spy PATH)"
                          : "py-spy " + py_spy + " is not an executable";
    return -1;
  }
  pid_t child =
      spawn_reader({exe, "dump", "--pid", std::to_string(s->pid), "--native", "--json"}, fd);
  if (child < 0) s->python_error = std::string("cannot run py-spy: ") + std::strerror(errno);
  return child;
}

// Reads what py-spy prints (until the deadline) and merges its threads into `s`.
void finish_py_spy(pid_t child, int fd, int64_t deadline_mono_ns, ProcessStacks* s) {
  std::string out;
  bool eof = read_until(fd, deadline_mono_ns, &out, [](const std::string&) {});
  ::close(fd);
  reap(child, !eof);
  if (!eof) {
    s->python_error = "py-spy did not answer within the stack budget";
    return;
  }
  nlohmann::json j = nlohmann::json::parse(out, nullptr, false);
  if (j.is_discarded() || !j.is_array()) {
    s->python_error = "py-spy gave no stacks (is the process a Python interpreter py-spy knows?)";
    return;
  }
  size_t merged = 0;
  for (const auto& tj : j) {
    const nlohmann::json* frames = fr::log::array_field(tj, "frames");
    if (frames == nullptr) continue;
    int tid = fr::log::field_or(tj, "os_thread_id", 0);
    ThreadStack t;
    t.tid = tid;
    t.name = fr::log::field_or(tj, "thread_name", std::string());
    for (const auto& fj : *frames) {
      if (!fj.is_object() || t.frames.size() >= fr::log::kMaxStackFrames) break;
      StackFrame f;
      f.function = fr::log::field_or(fj, "name", std::string());
      const bool native = fr::log::read_field(fj, "module", &f.module);
      f.kind = native ? "native" : "python";
      if (!native) f.file = fr::log::field_or(fj, "filename", std::string());
      f.line = native ? 0 : fr::log::field_or(fj, "line", 0);
      t.frames.push_back(std::move(f));
    }
    // py-spy's frames (Python, with the native ones around them) replace libdw's for that
    // thread; libdw's native file:line are richer, py-spy's are the only Python ones.
    auto it = std::find_if(s->threads.begin(), s->threads.end(),
                           [&](const ThreadStack& x) { return x.tid == tid; });
    if (it != s->threads.end()) {
      if (!t.name.empty()) it->name = t.name;
      it->frames = std::move(t.frames);
      it->error.clear();
    } else {
      s->threads.push_back(std::move(t));
    }
    ++merged;
  }
  if (merged)
    s->taker = "libdw+py-spy";
  else
    s->python_error = "py-spy found no Python thread";
}

bool emit(const ProcessStacks& s) {
  std::string line = fr::log::stacks_to_text(s);
  bool ok = std::fwrite(line.data(), 1, line.size(), stdout) == line.size();
  std::fflush(stdout);
  return ok;
}

}  // namespace

void add_python_frames(const std::string& py_spy, int64_t deadline_mono_ns, ProcessStacks* s) {
  int fd = -1;
  pid_t child = start_py_spy(py_spy, s, &fd);
  if (child >= 0) finish_py_spy(child, fd, deadline_mono_ns, s);
}

int run_stacks_helper(const std::vector<int>& pids, const std::vector<int>& ranks,
                      int64_t budget_ns, const std::string& py_spy, int64_t hold_ns) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  const int64_t deadline = mono_ns() + budget_ns;
  // Native stacks one process after the other (each held briefly), each printed at once, so that
  // a helper killed at the budget still gave what it had.
  std::vector<ProcessStacks> all(pids.size());
  for (size_t i = 0; i < pids.size(); ++i) {
    ProcessStacks& s = all[i];
    if (mono_ns() >= deadline) {
      s.pid = pids[i];
      s.error = "not taken: the stack budget of " + seconds_text(budget_ns) + " ran out";
    } else {
      s = capture_process(pids[i], deadline, hold_ns);
    }
    if (i < ranks.size()) s.rank = ranks[i];
    if (!emit(s)) return 1;
  }
  // Then py-spy on every Python process at once (each attaches to its own process), and their
  // stacks again with the Python frames.
  struct Run {
    size_t index;
    pid_t child;
    int fd;
  };
  std::vector<Run> runs;
  for (size_t i = 0; i < all.size(); ++i) {
    if (!all[i].error.empty() || !is_python_process(all[i].pid)) continue;
    int fd = -1;
    pid_t child = start_py_spy(py_spy, &all[i], &fd);
    if (child >= 0)
      runs.push_back({i, child, fd});
    else if (!emit(all[i]))
      return 1;
  }
  for (const Run& r : runs) {
    finish_py_spy(r.child, r.fd, deadline, &all[r.index]);
    if (!emit(all[r.index])) return 1;
  }
  return 0;
}

}  // namespace fr::daemon
