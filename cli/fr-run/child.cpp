// The command as a child, its signals forwarded, its status passed on (see child.h). The signals
// stay blocked in fr-run and are taken one at a time with sigwaitinfo, so no handler runs at an
// awkward moment and none is lost between fork and exec.
#include "child.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

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

int run_command(const std::vector<std::string>& argv, const Env& env, int death_signal) {
  int err = 0;
  std::string program = find_program(argv[0], env, &err);
  if (program.empty()) {
    std::fprintf(stderr, "fr-run: %s: %s\n", argv[0].c_str(),
                 err == EACCES ? "permission denied" : "command not found");
    return err == EACCES ? 126 : 127;
  }
  std::vector<std::string> env_text;
  for (const auto& [k, v] : env) env_text.push_back(k + "=" + v);
  std::vector<char*> args, envp;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  for (auto& e : env_text) envp.push_back(e.data());
  envp.push_back(nullptr);

  sigset_t wanted, old;
  sigemptyset(&wanted);
  for (int s : kForwarded) sigaddset(&wanted, s);
  sigaddset(&wanted, SIGCHLD);
  ::sigprocmask(SIG_BLOCK, &wanted, &old);

  const pid_t self = ::getpid();
  pid_t child = ::fork();
  if (child < 0) {
    std::fprintf(stderr, "fr-run: fork: %s\n", std::strerror(errno));
    return 126;
  }
  if (child == 0) {
    // fr-run may have died between the fork and the prctl: then the signal would never come.
    if (death_signal > 0 &&
        (::prctl(PR_SET_PDEATHSIG, death_signal) != 0 || ::getppid() != self))
      ::raise(death_signal);
    ::sigprocmask(SIG_SETMASK, &old, nullptr);
    ::execve(program.c_str(), args.data(), envp.data());
    int e = errno;
    std::fprintf(stderr, "fr-run: %s: %s\n", argv[0].c_str(), std::strerror(e));
    _exit(e == ENOENT ? 127 : 126);
  }

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
