// fr::process::spawn: see spawn.h. The child reports how far it got through a close-on-exec pipe:
// nothing arrives when exec succeeds (the pipe just closes), one record when a step failed; a
// detached start adds the record with the program's pid, written by the middle process.
#include "common/spawn.h"

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>

#include "common/files.h"

extern char** environ;

namespace fr::process {
namespace {

// One record per write(2): 12 bytes, far below PIPE_BUF, so records never interleave.
enum Kind : int32_t { kPid = 1, kFork, kChdir, kRedirect, kExec };
struct Record {
  int32_t kind;
  int32_t err;
  int32_t value;  // kPid: the pid; kRedirect: the target descriptor
};

// Everything the child touches, made before the fork.
struct Prepared {
  const SpawnOptions* o = nullptr;
  std::string program;
  std::vector<char*> argv, envp;
  char* const* env = nullptr;  // envp.data() or environ
  pid_t parent = 0;
  int status_fd = -1;        // the pipe's write end; -1 when nobody waits for the exec
  std::vector<int> targets;  // the redirect targets, sorted
  int max_target = 2;        // the highest redirect target
  struct sigaction dfl {};
};

void send(int fd, Record r) {
  if (fd >= 0) (void)!::write(fd, &r, sizeof r);
}

[[noreturn]] void fail(const Prepared& p, Kind kind, int err, int value) {
  send(p.status_fd, {kind, err, value});
  const std::string& note = p.o->failure_note;
  if (!note.empty()) (void)!::write(2, note.data(), note.size());
  ::_exit(p.o->failure_status);
}

// Keeps the status pipe clear of the redirect targets and of close_other_fds.
void move_status_fd(Prepared& p) {
  if (p.status_fd < 0 || p.status_fd > p.max_target) return;
  int moved = ::fcntl(p.status_fd, F_DUPFD_CLOEXEC, p.max_target + 1);
  ::close(p.status_fd);
  p.status_fd = moved;
}

// Closes every descriptor from 3 up but the redirect targets (sorted) and the status pipe, which
// move_status_fd put above them all.
void close_others(const std::vector<int>& targets, int status_fd) {
  unsigned from = 3;
  auto keep = [&](int fd) {
    if (fd < int(from)) return;
    if (unsigned(fd) > from) ::close_range(from, unsigned(fd) - 1, 0);
    from = unsigned(fd) + 1;
  };
  for (int fd : targets) keep(fd);
  keep(status_fd);
  ::close_range(from, ~0U, 0);
}

// The child, between fork and exec: async-signal-safe calls only, nothing allocated.
[[noreturn]] void run_child(Prepared& p) {
  const SpawnOptions& o = *p.o;
  if (o.process_group) ::setpgid(0, *o.process_group);
  // The parent may have died between the fork and the prctl: then the signal would never come.
  if (o.parent_death_signal > 0 &&
      (::prctl(PR_SET_PDEATHSIG, o.parent_death_signal) != 0 || ::getppid() != p.parent))
    ::raise(o.parent_death_signal);
  if (o.default_signals)
    for (int s = 1; s < NSIG; ++s)
      if (sigismember(&*o.default_signals, s) == 1) ::sigaction(s, &p.dfl, nullptr);
  if (!o.chdir.empty() && ::chdir(o.chdir.c_str()) != 0) fail(p, kChdir, errno, 0);
  move_status_fd(p);
  for (const Redirect& r : o.redirects) {
    if (r.source == r.target) {  // dup2 would do nothing and leave close-on-exec set
      int flags = ::fcntl(r.target, F_GETFD);
      if (flags < 0 || ::fcntl(r.target, F_SETFD, flags & ~FD_CLOEXEC) != 0)
        fail(p, kRedirect, errno, r.target);
    } else if (::dup2(r.source, r.target) < 0) {
      fail(p, kRedirect, errno, r.target);
    }
  }
  if (o.close_other_fds) close_others(p.targets, p.status_fd);
  if (o.signal_mask) ::sigprocmask(SIG_SETMASK, &*o.signal_mask, nullptr);
  ::execve(p.program.c_str(), p.argv.data(), p.env);
  fail(p, kExec, errno, 0);
}

bool prepare(const SpawnOptions& o, Prepared* p, SpawnResult* r) {
  p->o = &o;
  if (o.argv.empty() || (o.detached && o.parent_death_signal > 0)) {
    r->error = EINVAL;
    r->message = o.argv.empty() ? "spawn: no program given"
                                : "spawn: a detached child has no parent to outlive";
    return false;
  }
  p->program = o.program.empty() ? o.argv[0] : o.program;
  if (o.search_path) {
    std::string found = fr::files::find_on_path(p->program);
    if (found.empty()) {
      r->error = ENOENT;
      r->cannot_run = true;
      r->message = "cannot run " + p->program + ": not found on PATH";
      return false;
    }
    p->program = found;
  }
  for (const auto& a : o.argv) p->argv.push_back(const_cast<char*>(a.c_str()));
  p->argv.push_back(nullptr);
  if (o.env) {
    for (const auto& e : *o.env) p->envp.push_back(const_cast<char*>(e.c_str()));
    p->envp.push_back(nullptr);
    p->env = p->envp.data();
  } else {
    p->env = environ;
  }
  p->parent = ::getpid();
  for (const Redirect& x : o.redirects) {
    p->targets.push_back(x.target);
    p->max_target = std::max(p->max_target, x.target);
  }
  std::sort(p->targets.begin(), p->targets.end());
  p->dfl.sa_handler = SIG_DFL;
  sigemptyset(&p->dfl.sa_mask);
  return true;
}

// Reads the child's records until every writer has closed the pipe. False on a failure record,
// with `r` filled; `*pid` gets a kPid record's pid.
bool read_status(int fd, const Prepared& p, pid_t* pid, SpawnResult* r) {
  bool ok = true;
  for (;;) {
    Record rec{};
    size_t got = 0;
    while (got < sizeof rec) {
      ssize_t n = ::read(fd, reinterpret_cast<char*>(&rec) + got, sizeof rec - got);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      got += size_t(n);
    }
    if (got < sizeof rec) return ok;
    if (rec.kind == kPid) {
      *pid = rec.value;
      continue;
    }
    ok = false;
    r->error = rec.err;
    r->cannot_run = rec.kind != kFork;
    const std::string why = std::strerror(rec.err);
    if (rec.kind == kFork)
      r->message = "fork: " + why;
    else if (rec.kind == kChdir)
      r->message = "cannot change to " + p.o->chdir + ": " + why;
    else if (rec.kind == kRedirect)
      r->message = "cannot set fd " + std::to_string(rec.value) + ": " + why;
    else
      r->message = "cannot run " + p.program + ": " + why;
  }
}

void reap(pid_t pid) {
  int st = 0;
  while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
}

// fork twice: the middle process leaves the session and reports the program's pid, then exits.
pid_t fork_detached(Prepared& p) {
  pid_t mid = ::fork();
  if (mid != 0) return mid;
  ::setsid();
  pid_t pid = ::fork();
  if (pid == 0) run_child(p);
  if (pid < 0)
    send(p.status_fd, {kFork, errno, 0});
  else
    send(p.status_fd, {kPid, 0, pid});
  ::_exit(0);
}

}  // namespace

SpawnResult spawn(const SpawnOptions& o) {
  SpawnResult r;
  Prepared p;
  if (!prepare(o, &p, &r)) return r;
  const bool wait = o.wait_for_exec || o.detached;
  int pipefd[2] = {-1, -1};
  if (wait && ::pipe2(pipefd, O_CLOEXEC) != 0) {
    r.error = errno;
    r.message = fr::files::errno_text("pipe");
    return r;
  }
  p.status_fd = pipefd[1];
  pid_t pid = o.detached ? fork_detached(p) : ::fork();
  if (pid == 0) run_child(p);
  const int fork_errno = errno;
  if (wait) ::close(pipefd[1]);
  if (pid < 0) {
    if (wait) ::close(pipefd[0]);
    r.error = fork_errno;
    r.message = std::string("fork: ") + std::strerror(fork_errno);
    return r;
  }
  if (o.process_group && !o.detached)
    ::setpgid(pid, *o.process_group == 0 ? pid : *o.process_group);
  if (!wait) {
    r.pid = pid;
    return r;
  }
  pid_t program = o.detached ? -1 : pid;
  bool ok = read_status(pipefd[0], p, &program, &r);
  ::close(pipefd[0]);
  if (o.detached)
    reap(pid);  // the middle process, gone at once
  else if (!ok)
    reap(pid);  // the child that could not exec
  if (ok && program <= 0) {
    r.error = ECHILD;
    r.message = "the detached child reported no pid";
  } else if (ok) {
    r.pid = program;
  }
  return r;
}

sigset_t signal_set(std::initializer_list<int> signals) {
  sigset_t s;
  sigemptyset(&s);
  for (int sig : signals) sigaddset(&s, sig);
  return s;
}

sigset_t all_signals() {
  sigset_t s;
  sigfillset(&s);
  return s;
}

}  // namespace fr::process
