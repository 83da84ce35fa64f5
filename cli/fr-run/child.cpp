// The command as a child, its signals forwarded, its status passed on (see child.h). The signals
// stay blocked in fr-run and are taken one at a time with sigwaitinfo, so no handler runs at an
// awkward moment and none is lost between fork and exec.
#include "child.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "common/spawn.h"

namespace fr::run {
namespace {

// Everything a process may be asked to do by signal, except the job-control stops (the terminal
// stops the whole process group itself) and SIGCHLD (fr-run's own).
constexpr int kForwarded[] = {SIGHUP,  SIGINT,  SIGQUIT,  SIGTERM, SIGUSR1, SIGUSR2,
                              SIGALRM, SIGCONT, SIGWINCH, SIGURG,  SIGPIPE, SIGVTALRM,
                              SIGPROF, SIGXCPU, SIGXFSZ,  SIGPWR,  SIGSYS};

// PATH lookup over the child's own PATH, as the shell does.
std::string find_program(const std::string& name, const Env& env, int* err) {
  *err = ENOENT;
  if (name.find('/') != std::string::npos) {
    if (::access(name.c_str(), X_OK) == 0) return name;
    *err = errno;
    return {};
  }
  auto it = env.find("PATH");
  std::string path = it != env.end() ? it->second : "/usr/local/bin:/usr/bin:/bin";
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find(':', start);
    if (end == std::string::npos) end = path.size();
    std::string dir = path.substr(start, end - start);
    std::string full = (dir.empty() ? "." : dir) + "/" + name;
    if (::access(full.c_str(), X_OK) == 0) return full;
    if (errno == EACCES && ::access(full.c_str(), F_OK) == 0) *err = EACCES;
    start = end + 1;
  }
  return {};
}

}  // namespace

int run_command(const std::vector<std::string>& argv, const Env& env, int death_signal,
                const std::function<void(int pid)>& started_hook) {
  int err = 0;
  std::string program = find_program(argv[0], env, &err);
  if (program.empty()) {
    std::fprintf(stderr, "fr-run: %s: %s\n", argv[0].c_str(),
                 err == EACCES ? "permission denied" : "command not found");
    return err == EACCES ? 126 : 127;
  }
  fr::process::SpawnOptions o;
  o.argv = argv;
  o.program = program;
  o.env.emplace();
  for (const auto& [k, v] : env) o.env->push_back(k + "=" + v);
  o.parent_death_signal = death_signal;

  sigset_t wanted, old;
  sigemptyset(&wanted);
  for (int s : kForwarded) sigaddset(&wanted, s);
  sigaddset(&wanted, SIGCHLD);
  ::sigprocmask(SIG_BLOCK, &wanted, &old);
  o.signal_mask = old;

  fr::process::SpawnResult started = fr::process::spawn(o);
  if (!started.ok()) {
    if (!started.cannot_run) {
      std::fprintf(stderr, "fr-run: %s\n", started.message.c_str());
      return 126;
    }
    std::fprintf(stderr, "fr-run: %s: %s\n", argv[0].c_str(), std::strerror(started.error));
    return started.error == ENOENT ? 127 : 126;
  }
  const pid_t child = started.pid;
  if (started_hook) started_hook(int(child));

  while (true) {
    siginfo_t info{};
    int sig = ::sigwaitinfo(&wanted, &info);
    if (sig < 0) continue;  // EINTR
    if (sig != SIGCHLD) {
      // Sent by the terminal to the foreground process group: the command has it already.
      bool from_tty = info.si_code == SI_KERNEL &&
                      (sig == SIGINT || sig == SIGQUIT || sig == SIGWINCH || sig == SIGHUP) &&
                      ::getpgid(child) == ::getpgrp();
      if (!from_tty) ::kill(child, sig);
      continue;
    }
    int status = 0;
    pid_t done = ::waitpid(child, &status, WNOHANG);
    if (done == child) {
      if (WIFEXITED(status)) return WEXITSTATUS(status);
      if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
    }
  }
}

}  // namespace fr::run
