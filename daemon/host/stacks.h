// Stacks of every rank at a dump, taken from outside the process (docs/frd.md, "Stacks").
//
// Two halves, in two processes on purpose:
//   - the capture (capture_process, run_stacks_helper; stacks.cpp) runs in `frd stacks`, a
//     short-lived child of the daemon that dies with it (PR_SET_PDEATHSIG). It attaches to each
//     thread with PTRACE_SEIZE + PTRACE_INTERRUPT (no SIGSTOP is ever sent), unwinds and
//     symbolizes with elfutils' libdw, detaches, then asks py-spy for the Python frames of Python
//     processes.
//     Should the daemon be killed mid-capture, the helper dies too and the kernel detaches every
//     thread it held: nothing is left stopped.
//   - the daemon side (take_stacks; stacks_take.cpp) starts the helper for every rank process of a
//     dump, reads one fr-stacks/1 document per process from it under the incident's time budget,
//     kills it when the budget runs out, and writes `<dump file>.stacks.json` beside each dump,
//     with a one-line reason for every process it could not take.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "log/side_files.h"

namespace fr::daemon {

struct StackOptions {
  bool enabled = true;
  std::string frd_binary;  // the frd that runs `frd stacks`; empty: this program when it is frd
  std::string py_spy;      // py-spy to run for Python processes; empty: "py-spy" on PATH
  int64_t budget_ns = 5'000'000'000;  // per incident, for all processes of the node together
  int64_t hold_ns = 0;  // tests: keep the threads stopped this long (FR_STACKS_HOLD_MS)
};

struct StackTarget {
  int pid = 0;
  int rank = -1;
  std::string dump_file;  // the rank's dump file in the dump set; the stacks go beside it
  bool alive = true;
  // The live flight log the PID came from. Its owner must own the process too: a log written by
  // one user cannot make frd (as root) read the stacks of another user's process.
  std::string log_path;
};

struct StacksTaken {
  std::vector<std::string> files;  // written into the dump set, relative names
  size_t taken = 0;                // processes with at least one stack
  std::vector<std::string> notes;  // one line per process without stacks
  int64_t took_ns = 0;
};

// Fills StackOptions from the environment and the flags of `frd snapshot` / `frd node`.
StackOptions stack_options(const std::string& py_spy_flag, double budget_seconds, bool disabled);

// Runs the capture helper over `targets` and writes their stacks files into `out_dir`.
StacksTaken take_stacks(const StackOptions& opts, const std::vector<StackTarget>& targets,
                        const std::string& out_dir);

// ---- the helper's side (`frd stacks`) ------------------------------------------------------------

// Native stacks of every thread of `pid`, holding it at most until `deadline_mono_ns`.
fr::log::ProcessStacks capture_process(int pid, int64_t deadline_mono_ns, int64_t hold_ns);

// Python frames from `py_spy dump --native --json`, merged into `s` (thread by thread).
void add_python_frames(const std::string& py_spy, int64_t deadline_mono_ns,
                       fr::log::ProcessStacks* s);

// Whether `pid` runs a Python interpreter (its executable or a mapped libpython).
bool is_python_process(int pid);

// `frd stacks`: one fr-stacks/1 line per pid on stdout, in order, within the budget.
int run_stacks_helper(const std::vector<int>& pids, const std::vector<int>& ranks,
                      int64_t budget_ns, const std::string& py_spy, int64_t hold_ns);

}  // namespace fr::daemon
