// Real processes for the launcher and packaging tests (see proc.h).
#include "proc.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "testing/files.h"
#include "testing/wait.h"

extern char** environ;

namespace fr::clitest {

using fr::test::slurp;
using fr::test::spit;
using fr::test::wait_for;

Proc::Proc(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
           const std::string& dir, const std::string& name, const std::string& stdin_text) {
  out_path = dir + "/" + name + ".stdout";
  err_path = dir + "/" + name + ".stderr";
  std::string in_path = dir + "/" + name + ".stdin";
  spit(in_path, stdin_text);
  std::map<std::string, std::string> all;
  for (char** e = environ; *e; ++e) {
    std::string kv = *e;
    size_t eq = kv.find('=');
    if (eq != std::string::npos) all[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  for (const auto& [k, v] : env) {
    if (v == "<unset>")
      all.erase(k);
    else
      all[k] = v;
  }
  std::vector<std::string> env_text;
  for (const auto& [k, v] : all) env_text.push_back(k + "=" + v);
  std::vector<char*> args, envp;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  for (auto& e : env_text) envp.push_back(e.data());
  envp.push_back(nullptr);
  pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);  // its own group: a timeout kills whatever it started too
    int in = ::open(in_path.c_str(), O_RDONLY);
    int out = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int err = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(in, 0);
    ::dup2(out, 1);
    ::dup2(err, 2);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::execve(args[0], args.data(), envp.data());
    std::perror("execve");
    _exit(255);
  }
}

Proc::~Proc() {
  if (pid > 0 && !reaped) {
    ::kill(-pid, SIGKILL);
    wait(10);
  }
}

bool Proc::wait(double timeout_s) {
  if (reaped) return true;
  return wait_for(
      [&] {
        int st = 0;
        if (::waitpid(pid, &st, WNOHANG) != pid) return false;
        reaped = true;
        status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        return true;
      },
      timeout_s);
}

std::string Proc::out() const { return slurp(out_path); }
std::string Proc::err() const { return slurp(err_path); }

Result run(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
           const std::string& dir, const std::string& stdin_text, double timeout_s) {
  static int counter = 0;
  Proc p(argv, env, dir, "run" + std::to_string(++counter), stdin_text);
  Result r;
  if (!p.wait(timeout_s)) {
    ::kill(-p.pid, SIGKILL);
    p.wait(10);
    r.status = -2;
  } else {
    r.status = p.status;
  }
  r.out = p.out();
  r.err = p.err();
  return r;
}

std::vector<pid_t> processes_with_args(const std::vector<std::string>& words) {
  std::vector<pid_t> found;
  DIR* d = ::opendir("/proc");
  if (!d) return found;
  while (dirent* e = ::readdir(d)) {
    char* end = nullptr;
    long pid = std::strtol(e->d_name, &end, 10);
    if (*end || pid <= 0 || gone(pid_t(pid))) continue;
    std::string cmd = slurp("/proc/" + std::string(e->d_name) + "/cmdline");
    std::vector<std::string> args;
    std::string cur;
    for (char c : cmd) {
      if (c == '\0') {
        args.push_back(cur);
        cur.clear();
      } else {
        cur += c;
      }
    }
    bool all = !args.empty();
    for (const auto& w : words) {
      bool has = false;
      for (const auto& a : args) has = has || a == w;
      all = all && has;
    }
    if (all) found.push_back(pid_t(pid));
  }
  ::closedir(d);
  return found;
}

bool gone(pid_t pid) {
  std::string stat = slurp("/proc/" + std::to_string(pid) + "/stat");
  if (stat.empty()) return true;
  size_t paren = stat.rfind(')');
  if (paren == std::string::npos || paren + 2 >= stat.size()) return true;
  char state = stat[paren + 2];
  return state == 'Z' || state == 'X';
}

}  // namespace fr::clitest
