// fr::process::spawn (common/spawn.h): what the child gets (argv, environment, process group,
// signal mask and dispositions, descriptors, working directory), and how a failure to start is
// reported, waited for or not, attached or detached.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/spawn.h"
#include "temp_dir.h"
#include "testing/files.h"

using fr::process::spawn;
using fr::process::SpawnOptions;
using fr::process::SpawnResult;

namespace {

// Runs `o` with stdout to a pipe and returns what the child printed and its exit status.
struct Output {
  std::string text;
  int status = -1;
};

Output run_capture(SpawnOptions o) {
  int p[2];
  REQUIRE(::pipe2(p, O_CLOEXEC) == 0);
  o.redirects.insert(o.redirects.begin(), {1, p[1]});
  SpawnResult r = spawn(o);
  ::close(p[1]);
  INFO(r.message);
  REQUIRE(r.ok());
  Output out;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(p[0], buf, sizeof buf)) > 0) out.text.append(buf, size_t(n));
  ::close(p[0]);
  REQUIRE(::waitpid(r.pid, &out.status, 0) == r.pid);
  return out;
}

// The line of /proc/self/status that starts with `key` (SigBlk, SigIgn), as the child saw it.
std::string status_line(const std::string& text, const std::string& key) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(key + ":", 0) == 0) return line.substr(key.size() + 1);
  return {};
}

// Bit `sig` of a /proc hex signal mask.
bool has_signal(const std::string& hex_mask, int sig) {
  unsigned long long mask = std::stoull(hex_mask, nullptr, 16);
  return (mask >> (sig - 1)) & 1;
}

bool no_children_left() { return ::waitpid(-1, nullptr, WNOHANG) < 0 && errno == ECHILD; }

// True once `pid` is gone or a zombie (a process not ours to reap).
bool ended_within(pid_t pid, std::chrono::seconds limit) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string all;
    if (!std::getline(stat, all)) return true;
    size_t close = all.rfind(')');
    if (close != std::string::npos && close + 2 < all.size() && all[close + 2] == 'Z') return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

}  // namespace

TEST_CASE("spawn runs the program with its argv and reports its pid", "[common]") {
  SpawnOptions o;
  o.argv = {"/bin/sh", "-c", "echo \"$0 $1\"", "zero", "one"};
  Output out = run_capture(o);
  CHECK(out.text == "zero one\n");
  CHECK(WIFEXITED(out.status));
  CHECK(WEXITSTATUS(out.status) == 0);
}

TEST_CASE("spawn passes a long argv whole", "[common]") {
  SpawnOptions o;
  o.argv = {"/bin/sh", "-c", "echo $# \"$1\" \"${20000}\"", "sh"};
  for (int i = 1; i <= 20000; ++i) o.argv.push_back("argument-" + std::to_string(i));
  Output out = run_capture(o);
  CHECK(out.text == "20000 argument-1 argument-20000\n");
}

TEST_CASE("spawn gives the child the environment asked for, else this one", "[common]") {
  SpawnOptions o;
  o.argv = {"/bin/sh", "-c", "printf '%s|%s' \"$FR_SPAWN_A\" \"$FR_SPAWN_B\""};
  ::setenv("FR_SPAWN_B", "inherited", 1);
  CHECK(run_capture(o).text == "|inherited");
  o.env = std::vector<std::string>{"FR_SPAWN_A=given", "PATH=/usr/bin:/bin"};
  CHECK(run_capture(o).text == "given|");
  ::unsetenv("FR_SPAWN_B");
}

TEST_CASE("spawn reports a program that cannot be run and leaves no child", "[common]") {
  SpawnOptions o;
  o.argv = {"/nonexistent/fr-no-such-program", "x"};
  SpawnResult r = spawn(o);
  CHECK_FALSE(r.ok());
  CHECK(r.cannot_run);
  CHECK(r.error == ENOENT);
  CHECK(r.message == "cannot run /nonexistent/fr-no-such-program: No such file or directory");
  CHECK(no_children_left());

  fr::test::TempDir dir("fr-spawn");
  const std::string script = dir.sub("not-executable");
  std::ofstream(script) << "#!/bin/sh\n";
  o.argv = {script};
  r = spawn(o);
  CHECK(r.error == EACCES);
  CHECK(r.cannot_run);
  CHECK(no_children_left());
}

TEST_CASE("spawn looks a name up on PATH only when asked", "[common]") {
  SpawnOptions o;
  o.argv = {"sh", "-c", "exit 3"};
  SpawnResult r = spawn(o);
  CHECK(r.error == ENOENT);  // "sh" in the working directory
  o.search_path = true;
  r = spawn(o);
  REQUIRE(r.ok());
  int st = 0;
  REQUIRE(::waitpid(r.pid, &st, 0) == r.pid);
  CHECK(WEXITSTATUS(st) == 3);
  o.argv = {"fr-no-such-program-anywhere"};
  r = spawn(o);
  CHECK(r.error == ENOENT);
  CHECK(r.cannot_run);
  CHECK(r.message == "cannot run fr-no-such-program-anywhere: not found on PATH");
}

TEST_CASE("without waiting for the exec, a failure is the child's status and note", "[common]") {
  fr::test::TempDir dir("fr-spawn");
  const std::string log = dir.sub("stderr");
  int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  REQUIRE(fd >= 0);
  SpawnOptions o;
  o.argv = {"/nonexistent/fr-no-such-program"};
  o.wait_for_exec = false;
  o.failure_status = 42;
  o.failure_note = "could not exec\n";
  o.redirects = {{2, fd}};
  SpawnResult r = spawn(o);
  ::close(fd);
  REQUIRE(r.ok());
  int st = 0;
  REQUIRE(::waitpid(r.pid, &st, 0) == r.pid);
  CHECK(WIFEXITED(st));
  CHECK(WEXITSTATUS(st) == 42);
  CHECK(fr::test::slurp(log) == "could not exec\n");
}

TEST_CASE("spawn puts the child in a new process group or an existing one", "[common]") {
  SpawnOptions o;
  o.argv = {"/bin/sleep", "30"};
  o.process_group = 0;
  SpawnResult leader = spawn(o);
  REQUIRE(leader.ok());
  CHECK(::getpgid(leader.pid) == leader.pid);
  o.process_group = leader.pid;
  SpawnResult member = spawn(o);
  REQUIRE(member.ok());
  CHECK(::getpgid(member.pid) == leader.pid);
  o.process_group.reset();
  SpawnResult plain = spawn(o);
  REQUIRE(plain.ok());
  CHECK(::getpgid(plain.pid) == ::getpgrp());
  ::kill(-leader.pid, SIGKILL);
  ::kill(plain.pid, SIGKILL);
  for (pid_t pid : {leader.pid, member.pid, plain.pid}) ::waitpid(pid, nullptr, 0);
}

TEST_CASE("spawn sets the child's signal mask and default dispositions", "[common]") {
  sigset_t usr1, old;
  sigemptyset(&usr1);
  sigaddset(&usr1, SIGUSR1);
  ::sigprocmask(SIG_BLOCK, &usr1, &old);
  struct sigaction ignore {
  }, old_usr2{};
  ignore.sa_handler = SIG_IGN;
  ::sigaction(SIGUSR2, &ignore, &old_usr2);

  SpawnOptions o;
  o.argv = {"/bin/cat", "/proc/self/status"};
  std::string inherited = run_capture(o).text;
  CHECK(has_signal(status_line(inherited, "SigBlk"), SIGUSR1));
  CHECK(has_signal(status_line(inherited, "SigIgn"), SIGUSR2));

  o.signal_mask = fr::process::signal_set({});
  o.default_signals = fr::process::signal_set({SIGUSR2});
  std::string reset = run_capture(o).text;
  CHECK_FALSE(has_signal(status_line(reset, "SigBlk"), SIGUSR1));
  CHECK_FALSE(has_signal(status_line(reset, "SigIgn"), SIGUSR2));

  // glibc reserves the signals between 31 and SIGRTMIN for itself and will not reset them; some
  // launchers start programs with them ignored.
  unsigned long long settable = 0;
  for (int s = 1; s <= 64; ++s)
    if (s < 32 || s >= SIGRTMIN) settable |= 1ull << (s - 1);
  o.default_signals = fr::process::all_signals();
  CHECK((std::stoull(status_line(run_capture(o).text, "SigIgn"), nullptr, 16) & settable) == 0);

  ::sigaction(SIGUSR2, &old_usr2, nullptr);
  ::sigprocmask(SIG_SETMASK, &old, nullptr);
}

TEST_CASE("spawn redirects descriptors in order and closes the rest when asked", "[common]") {
  fr::test::TempDir dir("fr-spawn");
  const std::string file = dir.sub("out");
  int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  REQUIRE(fd >= 0);
  SpawnOptions o;
  o.argv = {"/bin/sh", "-c", "echo to-out; echo to-err >&2"};
  o.redirects = {{1, fd}, {2, 1}};  // 2>&1 after 1>file: both into the file
  SpawnResult r = spawn(o);
  ::close(fd);
  REQUIRE(r.ok());
  REQUIRE(::waitpid(r.pid, nullptr, 0) == r.pid);
  CHECK(fr::test::slurp(file) == "to-out\nto-err\n");

  // A close-on-exec descriptor redirected onto itself stays open; one left open without
  // close-on-exec goes with close_other_fds.
  int kept = ::fcntl(0, F_DUPFD_CLOEXEC, 50);
  int leaked = ::fcntl(0, F_DUPFD, 60);
  REQUIRE(kept >= 50);
  REQUIRE(leaked >= 60);
  SpawnOptions ls;
  ls.argv = {"/bin/ls", "/proc/self/fd"};
  std::string open_fds = "\n" + run_capture(ls).text;
  CHECK(open_fds.find("\n" + std::to_string(kept) + "\n") == std::string::npos);
  CHECK(open_fds.find("\n" + std::to_string(leaked) + "\n") != std::string::npos);
  ls.redirects = {{kept, kept}};
  ls.close_other_fds = true;
  open_fds = "\n" + run_capture(ls).text;
  CHECK(open_fds.find("\n" + std::to_string(kept) + "\n") != std::string::npos);
  CHECK(open_fds.find("\n" + std::to_string(leaked) + "\n") == std::string::npos);
  ::close(kept);
  ::close(leaked);
}

TEST_CASE("spawn changes the child's directory and reports one it cannot enter", "[common]") {
  SpawnOptions o;
  o.argv = {"/bin/pwd"};
  o.chdir = "/";
  CHECK(run_capture(o).text == "/\n");
  o.chdir = "/nonexistent/fr-dir";
  SpawnResult r = spawn(o);
  CHECK_FALSE(r.ok());
  CHECK(r.cannot_run);
  CHECK(r.message == "cannot change to /nonexistent/fr-dir: No such file or directory");
  CHECK(no_children_left());
}

TEST_CASE("a detached child is in its own session and not this process's child", "[common]") {
  SpawnOptions o;
  o.argv = {"/bin/sleep", "30"};
  o.detached = true;
  SpawnResult r = spawn(o);
  REQUIRE(r.ok());
  CHECK(::getsid(r.pid) != ::getsid(0));
  CHECK(::waitpid(r.pid, nullptr, WNOHANG) < 0);  // not ours to reap
  CHECK(no_children_left());                      // the middle process is reaped
  ::kill(r.pid, SIGKILL);
  CHECK(ended_within(r.pid, std::chrono::seconds(10)));

  o.argv = {"/nonexistent/fr-no-such-program"};
  r = spawn(o);
  CHECK_FALSE(r.ok());
  CHECK(r.error == ENOENT);
  CHECK(r.cannot_run);
  o.parent_death_signal = SIGKILL;
  CHECK(spawn(o).error == EINVAL);
}

TEST_CASE("the parent death signal reaches the child when its parent dies", "[common]") {
  int p[2];
  REQUIRE(::pipe(p) == 0);
  pid_t parent = ::fork();
  REQUIRE(parent >= 0);
  if (parent == 0) {
    SpawnOptions o;
    o.argv = {"/bin/sleep", "30"};
    o.parent_death_signal = SIGKILL;
    SpawnResult r = spawn(o);
    (void)!::write(p[1], &r.pid, sizeof r.pid);
    ::_exit(0);
  }
  ::close(p[1]);
  pid_t child = -1;
  REQUIRE(::read(p[0], &child, sizeof child) == sizeof child);
  ::close(p[0]);
  REQUIRE(::waitpid(parent, nullptr, 0) == parent);
  REQUIRE(child > 0);
  CHECK(ended_within(child, std::chrono::seconds(10)));
}

TEST_CASE("spawn refuses an empty argv", "[common]") {
  SpawnResult r = spawn(SpawnOptions{});
  CHECK_FALSE(r.ok());
  CHECK(r.error == EINVAL);
}
