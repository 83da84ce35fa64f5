// fr::process::spawn: the one fork/exec of every shipped part but the agent. frd's --on-verdict
// hook, frd's `frd stacks` and py-spy helpers, fr-run's command and its detached node daemon, and
// fr-simjob's ranks and daemons each describe their child in a SpawnOptions (program, argv,
// environment, process group, signals, descriptors, working directory) and get its pid or a
// reason. Everything the child needs is prepared before the fork; between fork and exec the child
// makes only async-signal-safe calls and allocates nothing, so a multi-threaded parent (frd) is as
// safe as a single-threaded one.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

namespace fr::process {

// dup2(source, target) in the child. A source equal to its target is kept open across exec.
struct Redirect {
  int target;
  int source;
};

struct SpawnOptions {
  std::vector<std::string> argv;  // argv[0] is what the program sees as its name; never empty
  std::string program;            // the file run; empty: argv[0]
  // A program without a '/' is looked up on this process's PATH (as execvp does) before the fork;
  // off, it is run as named (execv).
  bool search_path = false;
  // "NAME=value" entries, the whole environment of the program; unset: this process's environment.
  std::optional<std::vector<std::string>> env;

  // setpgid(0, group) in the child and setpgid(child, group) in the parent, so the group is set
  // whichever runs first: 0 starts a new group led by the child; unset: this process's group.
  // Failures are ignored (a group that ended meanwhile leaves the child in this one).
  std::optional<pid_t> process_group;
  // PR_SET_PDEATHSIG: the child gets this signal when its parent (this thread) dies; when the
  // parent died before the child could ask, the child raises it at once. 0: none.
  int parent_death_signal = 0;
  // Signals whose dispositions go back to SIG_DFL in the child (an ignored signal stays ignored
  // across exec otherwise). Unset: none.
  std::optional<sigset_t> default_signals;
  // The child's signal mask, set last before exec; unset: the calling thread's mask.
  std::optional<sigset_t> signal_mask;

  std::string chdir;                // the child's working directory; empty: this one
  std::vector<Redirect> redirects;  // applied in order, like a shell's
  bool close_other_fds = false;     // every descriptor above 2 but the targets closed

  // A daemon nobody waits for: forked twice, the middle process starts a new session and exits,
  // so the program is never a zombie of the caller nor in its session or process group. The pid
  // returned is the program's. Not with parent_death_signal.
  bool detached = false;

  // On (and always when detached): spawn returns once the child has exec'd, and a failure in the
  // child (chdir, redirect, exec) is returned as an error, the child reaped. Off: spawn returns
  // right after the fork, and such a failure shows only as the child's exit status (and note).
  bool wait_for_exec = true;
  int failure_status = 127;  // the child's exit status when it cannot get to the program
  std::string failure_note;  // written to the child's fd 2 then (after the redirects)
};

struct SpawnResult {
  pid_t pid = -1;  // the program's process; -1 when it does not run
  int error = 0;   // errno of what failed; 0 when it runs
  // The program itself could not be started (not found, not executable, its chdir or a redirect
  // failed), as opposed to this process running out of something (pipe, fork).
  bool cannot_run = false;
  std::string message;  // what failed: "fork: ...", "cannot run /x/y: No such file or directory"
  bool ok() const { return pid > 0; }
};

SpawnResult spawn(const SpawnOptions& options);

// The signals a child should start with default dispositions or an empty mask: sigset_t values
// for SpawnOptions, without the sigset calls at every site.
sigset_t signal_set(std::initializer_list<int> signals);
// Every signal a program may set. glibc keeps two (32 and 33, below SIGRTMIN) for its threads and
// refuses to change them, so a parent that ignores those passes that on whatever is asked here.
sigset_t all_signals();

}  // namespace fr::process
