// fr-run: its flags and environment as pure functions; the node lock; then the real launcher on
// the emulation: exit codes and signals passed on, stdio untouched, one node daemon for several
// concurrent ranks, and a hung job under fr-run caught by the daemons with the right verdict.
#include <signal.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "daemon/base/node_lock.h"
#include "daemon/base/node_status.h"
#include "options.h"
#include "proc.h"
#include "skip.h"
#include "testing/files.h"
#include "testing/wait.h"

namespace fs = std::filesystem;
using namespace fr::clitest;
using fr::run::Env;
using fr::run::Options;
using fr::test::slurp;
using fr::test::spit;
using fr::test::wait_for;

namespace {

const std::string kBuild = FR_BUILD_DIR;
const std::string kFrRun = kBuild + "/bin/fr-run";
const std::string kFrd = kBuild + "/bin/frd";
const std::string kAgent = kBuild + "/lib/libfr_agent.so";

void need(const std::vector<std::string>& paths) {
  for (const auto& p : paths)
    if (::access(p.c_str(), X_OK) != 0 && ::access(p.c_str(), R_OK) != 0)
      FR_SKIP(p << " is not built (build the target first)");
}

Options parsed(const std::vector<std::string>& args) {
  Options o;
  std::string error;
  REQUIRE(fr::run::parse_args(args, &o, &error));
  return o;
}

std::string parse_error(const std::vector<std::string>& args) {
  Options o;
  std::string error;
  CHECK_FALSE(fr::run::parse_args(args, &o, &error));
  return error;
}

bool no_file(const std::string&) { return false; }
bool any_file(const std::string&) { return true; }

// Stops the node daemon serving `log_dir`, if any, and waits until it is gone.
void stop_node_daemon(const std::string& log_dir) {
  auto s = fr::daemon::probe_node_lock(log_dir);
  if (s.held && s.pid > 0) {
    ::kill(s.pid, SIGTERM);
    wait_for([&] { return gone(s.pid); }, 20);
  }
}

}  // namespace

TEST_CASE("fr-run: flags, then the command, with or without --", "[cli][fr-run]") {
  Options o = parsed({"--coordinator", "c:1", "--job-id=j7", "--frd-arg", "--stall-after",
                      "--frd-arg=5", "--", "python", "-u", "train.py", "--lr", "1"});
  CHECK(o.coordinator == "c:1");
  CHECK(o.job_id == "j7");
  CHECK(o.frd_args == std::vector<std::string>{"--stall-after", "5"});
  CHECK(o.command == std::vector<std::string>{"python", "-u", "train.py", "--lr", "1"});
  // The first word that is not a flag starts the command; its own flags stay its own.
  o = parsed({"--no-daemon", "python", "--coordinator", "x"});
  CHECK(o.no_daemon);
  CHECK(o.coordinator.empty());
  CHECK(o.command == std::vector<std::string>{"python", "--coordinator", "x"});
  CHECK(parsed({"--version"}).version);
  CHECK(parsed({"-h"}).help);

  CHECK(parse_error({}).find("no command") != std::string::npos);
  CHECK(parse_error({"--job-id", "j"}).find("no command") != std::string::npos);
  CHECK(parse_error({"--"}).find("no command") != std::string::npos);
  CHECK(parse_error({"--bogus", "--", "x"}).find("unknown flag --bogus") != std::string::npos);
  CHECK(parse_error({"--coordinator"}).find("needs a value") != std::string::npos);
  CHECK(parse_error({"--log-dir=", "--", "x"}).find("non-empty") != std::string::npos);
}

TEST_CASE("fr-run: empty values, short flags, flag values and repeats read as documented",
          "[cli][fr-run]") {
  // `--x=` is an empty value, never the next argument; only --frd-arg may be empty.
  Options o =
      parsed({"--frd-arg=", "--frd-arg", "", "--frd-arg=--x=1", "--frd-arg", "--", "--", "cmd"});
  CHECK(o.frd_args == std::vector<std::string>{"", "", "--x=1", "--"});
  CHECK(o.command == std::vector<std::string>{"cmd"});
  CHECK(parse_error({"--coordinator=", "--", "x"}).find("--coordinator needs a non-empty value") !=
        std::string::npos);
  CHECK(parse_error({"--job-id", "", "x"}).find("non-empty") != std::string::npos);
  // A value flag takes the next argument whatever it looks like.
  CHECK(parsed({"--log-dir", "--weird", "x"}).log_dir == "--weird");
  // Short flags do not combine; flags take no values.
  CHECK(parse_error({"-vh", "x"}).find("unknown flag -vh") != std::string::npos);
  CHECK(parse_error({"--verbose=1", "x"}).find("--verbose takes no value") != std::string::npos);
  CHECK(parse_error({"--no-daemon=true", "x"}).find("takes no value") != std::string::npos);
  CHECK(parsed({"-v", "--verbose", "x"}).verbose);
  // Repeated: the last value counts, each --parent-death-signal must name a signal.
  o = parsed(
      {"--log-dir", "/a", "--log-dir=/b", "--coordinator", "c:1", "--coordinator", "c:2", "x"});
  CHECK(o.log_dir == "/b");
  CHECK(o.coordinator == "c:2");
  CHECK(parsed({"--parent-death-signal", "TERM", "--parent-death-signal", "HUP", "x"})
            .parent_death_signal == SIGHUP);
  CHECK(parse_error({"--parent-death-signal", "BOGUS", "--parent-death-signal", "TERM", "x"})
            .find("not a signal") != std::string::npos);
  // -h and --version end the flags: what follows is not read.
  CHECK(parsed({"--job-id", "j", "--help", "--bogus"}).help);
  CHECK(parsed({"--version", "--log-dir="}).version);
  // A lone "-" is the command.
  CHECK(parsed({"-"}).command == std::vector<std::string>{"-"});
}

TEST_CASE("fr-run: defaults from the environment, flags win", "[cli][fr-run]") {
  Env env = {{"FR_COORDINATOR", "envc:7"},
             {"FR_JOB_ID", "envjob"},
             {"FR_LOG_DIR", "/logs/"},
             {"XDG_RUNTIME_DIR", "/run/user/5"}};
  Options o = parsed({"--job-id", "flagjob", "--", "x"});
  fr::run::resolve(&o, env, "/opt/fr/bin", 5, any_file);
  CHECK(o.coordinator == "envc:7");
  CHECK(o.job_id == "flagjob");
  CHECK(o.log_dir == "/logs");
  CHECK(o.agent == "/opt/fr/bin/../lib/libfr_agent.so");
  CHECK(o.frd == "/opt/fr/bin/frd");
  CHECK(o.daemon_log == "/logs/frd-node.log");
  CHECK(o.token_file == "/run/user/5/frd-5/token");  // the default, since it exists

  o = parsed({"x"});
  fr::run::resolve(&o, {}, "/b", 1000, no_file);
  CHECK(o.log_dir == "/dev/shm");
  CHECK(o.coordinator.empty());
  CHECK(o.token_file.empty());  // no default file: frd gets no --token-file
  CHECK(fr::run::default_token_file({}, 1000) == "/tmp/frd-1000/token");

  o = parsed({"--token-file", "/t", "x"});
  fr::run::resolve(&o, {{"FR_TOKEN_FILE", "/env-t"}}, "/b", 0, any_file);
  CHECK(o.token_file == "/t");
  o = parsed({"x"});
  fr::run::resolve(&o, {{"FR_TOKEN_FILE", "/env-t"}, {"FR_AGENT", "/a.so"}}, "/b", 0, no_file);
  CHECK(o.token_file == "/env-t");
  CHECK(o.agent == "/a.so");
}

TEST_CASE("fr-run: relative paths become absolute before the daemon starts in /", "[cli][fr-run]") {
  fr::run::Options o;
  o.log_dir = "logs";
  o.token_file = "tok/x";
  o.frd = "/opt/fr/bin/frd";
  o.frd_args = {"--tls-ca", "ca.pem", "--dump-dir=spool", "--heartbeat-interval", "0.2"};
  fr::run::resolve(&o, {}, "bin", 0, no_file);
  fr::run::make_paths_absolute(&o, "/home/me/job");
  CHECK(o.log_dir == "/home/me/job/logs");
  CHECK(o.token_file == "/home/me/job/tok/x");
  CHECK(o.daemon_log == "/home/me/job/logs/frd-node.log");
  CHECK(o.agent == "/home/me/job/bin/../lib/libfr_agent.so");
  CHECK(o.frd == "/opt/fr/bin/frd");
  CHECK(o.frd_args == std::vector<std::string>{"--tls-ca", "/home/me/job/ca.pem",
                                               "--dump-dir=/home/me/job/spool",
                                               "--heartbeat-interval", "0.2"});
  const auto argv = fr::run::frd_node_argv(o);
  CHECK(std::find(argv.begin(), argv.end(), "/home/me/job/tok/x") != argv.end());
}

TEST_CASE("node status file: written and read back, odd text refused", "[cli][node-lock]") {
  fr::daemon::NodeStatus st;
  st.pid = 42;
  st.coordinator = "127.0.0.1:7470";
  st.state = "refused";
  st.message = "UNAUTHENTICATED: wrong token (file /t)\nsecond line";
  st.since_real_ns = 123;
  fr::daemon::NodeStatus back;
  REQUIRE(fr::daemon::parse_node_status(fr::daemon::format_node_status(st), &back));
  CHECK(back.pid == 42);
  CHECK(back.coordinator == st.coordinator);
  CHECK(back.state == "refused");
  CHECK(back.message == "UNAUTHENTICATED: wrong token (file /t) second line");
  CHECK(back.since_real_ns == 123);
  CHECK_FALSE(fr::daemon::parse_node_status("pid 0\nstate connected\n", &back));
  CHECK_FALSE(fr::daemon::parse_node_status("pid 7\nstate sleeping\n", &back));
  CHECK_FALSE(fr::daemon::parse_node_status("pid x7\nstate connected\n", &back));
  // A link planted in the log directory is not read.
  TempDir d;
  fs::create_symlink(d.path + "/elsewhere", d.path + "/frd-node.state");
  spit(d.path + "/elsewhere", fr::daemon::format_node_status(st));
  CHECK_FALSE(fr::daemon::read_node_status(d.path, &back));
  fs::remove(d.path + "/frd-node.state");
  spit(d.path + "/frd-node.state", fr::daemon::format_node_status(st));
  CHECK(fr::daemon::read_node_status(d.path, &back));
}

TEST_CASE("fr-run: the command's environment and the node daemon's command line", "[cli][fr-run]") {
  Options o = parsed({"--coordinator", "c:1", "--node-name", "n3", "--frd-arg", "--tls-ca",
                      "--frd-arg", "/ca.pem", "x"});
  fr::run::resolve(&o, {}, "/opt/fr/bin", 0, no_file);
  o.agent = "/opt/fr/lib/libfr_agent.so";

  Env e = fr::run::child_env(o, {{"PATH", "/bin"}, {"LD_PRELOAD", "/other.so"}}, true);
  CHECK(e["LD_PRELOAD"] == "/opt/fr/lib/libfr_agent.so:/other.so");
  CHECK(e["FR_LOG_DIR"] == "/dev/shm");
  CHECK(e.count("FR_JOB_ID") == 0);
  CHECK(e["PATH"] == "/bin");
  // Already preloaded (an fr-run inside an fr-run): not twice.
  e = fr::run::child_env(o, {{"LD_PRELOAD", "/x.so /opt/fr/lib/libfr_agent.so"}}, true);
  CHECK(e["LD_PRELOAD"] == "/x.so /opt/fr/lib/libfr_agent.so");
  // The agent is NCCL's profiler plugin too, unless the user named one (or "none").
  CHECK(e["NCCL_PROFILER_PLUGIN"] == "/opt/fr/lib/libfr_agent.so");
  e = fr::run::child_env(o, {{"NCCL_PROFILER_PLUGIN", "/their/libnccl-profiler.so"}}, true);
  CHECK(e["NCCL_PROFILER_PLUGIN"] == "/their/libnccl-profiler.so");
  e = fr::run::child_env(o, {{"NCCL_PROFILER_PLUGIN", "none"}}, true);
  CHECK(e["NCCL_PROFILER_PLUGIN"] == "none");
  // The agent missing: LD_PRELOAD untouched.
  e = fr::run::child_env(o, {}, false);
  CHECK(e.count("LD_PRELOAD") == 0);
  CHECK(e.count("NCCL_PROFILER_PLUGIN") == 0);
  o.job_id = "j";
  CHECK(fr::run::child_env(o, {}, true)["FR_JOB_ID"] == "j");
  // Kernel channels only when asked for (a user's own FR_PROFILER_KERNEL_CH passes through).
  CHECK(fr::run::child_env(o, {}, true).count("FR_PROFILER_KERNEL_CH") == 0);
  CHECK(fr::run::child_env(o, {{"FR_PROFILER_KERNEL_CH", "1"}}, true)["FR_PROFILER_KERNEL_CH"] ==
        "1");
  fr::run::Options k = o;
  std::string err;
  REQUIRE(fr::run::parse_args({"--profiler-kernel-channels", "--", "true"}, &k, &err));
  CHECK(k.kernel_channels);
  CHECK(fr::run::child_env(k, {}, true)["FR_PROFILER_KERNEL_CH"] == "1");

  std::vector<std::string> argv = fr::run::frd_node_argv(o);
  CHECK(argv == std::vector<std::string>{"/opt/fr/bin/frd", "node", "--coordinator", "c:1",
                                         "--log-dir", "/dev/shm", "--node-name", "n3",
                                         "--exit-when-idle", "60", "--tls-ca", "/ca.pem"});
  // --daemon-exit-when-idle: passed on; 0 is never; not a number is bad usage.
  Options idle = parsed({"--daemon-exit-when-idle", "0", "x"});
  argv = fr::run::frd_node_argv(idle);
  CHECK(std::find(argv.begin(), argv.end(), "--exit-when-idle") + 1 ==
        std::find(argv.begin(), argv.end(), "0"));
  CHECK(parse_error({"--daemon-exit-when-idle", "soon", "x"}).find("not a number of seconds") !=
        std::string::npos);
  CHECK(parse_error({"--daemon-exit-when-idle=-1", "x"}).find("not a number of seconds") !=
        std::string::npos);
  o.token_file = "/tok";
  argv = fr::run::frd_node_argv(o);
  CHECK(std::find(argv.begin(), argv.end(), "--token-file") + 1 ==
        std::find(argv.begin(), argv.end(), "/tok"));
}

TEST_CASE("node lock: one holder, probes see it, bad files refused", "[cli][node-lock]") {
  TempDir d;
  CHECK_FALSE(fr::daemon::probe_node_lock(d.path).held);  // no file yet
  std::string error;
  {
    fr::daemon::NodeLock a;
    REQUIRE(a.acquire(d.path, &error) == fr::daemon::NodeLockOutcome::acquired);
    auto s = fr::daemon::probe_node_lock(d.path);
    CHECK(s.held);
    CHECK(s.pid == ::getpid());
    fr::daemon::NodeLock b;  // flock is per open file: a second open in one process conflicts too
    CHECK(b.acquire(d.path, &error, 50) == fr::daemon::NodeLockOutcome::held);
    CHECK(error.find("another frd node serves") != std::string::npos);
    CHECK(error.find(std::to_string(::getpid())) != std::string::npos);
  }
  CHECK_FALSE(fr::daemon::probe_node_lock(d.path).held);  // released with its holder
  fr::daemon::NodeLock c;
  CHECK(c.acquire(d.path, &error) == fr::daemon::NodeLockOutcome::acquired);

  // A missing directory: a clear error.
  fr::daemon::NodeLock e;
  CHECK(e.acquire(d.path + "/missing", &error) == fr::daemon::NodeLockOutcome::failed);
  CHECK(error.find("No such file") != std::string::npos);
  // A symlink or a FIFO at LOG_DIR/frd-node.lock: nothing to this process where its lock lies in
  // its private directory (#37), a clear error where it has none and the lock lies there.
  const bool private_lock = !fr::daemon::private_lock_dir(::geteuid(), true).empty();
  fs::create_directories(d.path + "/link");
  fs::create_symlink(d.path + "/elsewhere", d.path + "/link/frd-node.lock");
  if (private_lock) {
    CHECK(fr::daemon::node_lock_path(d.path + "/link").rfind(d.path, 0) != 0);
    fr::daemon::NodeLock f;
    CHECK(f.acquire(d.path + "/link", &error) == fr::daemon::NodeLockOutcome::acquired);
    CHECK(fr::daemon::probe_node_lock(d.path + "/link").held);
  } else {
    CHECK(e.acquire(d.path + "/link", &error) == fr::daemon::NodeLockOutcome::failed);
    CHECK(error.find("symbolic link") != std::string::npos);
  }
  CHECK_FALSE(fs::exists(d.path + "/elsewhere"));
  fs::create_directories(d.path + "/fifo");
  REQUIRE(::mkfifo((d.path + "/fifo/frd-node.lock").c_str(), 0600) == 0);
  if (!private_lock) {
    CHECK(e.acquire(d.path + "/fifo", &error) == fr::daemon::NodeLockOutcome::failed);
    CHECK(error.find("not a regular file") != std::string::npos);
  }
  CHECK_FALSE(fr::daemon::probe_node_lock(d.path + "/fifo").held);
}

TEST_CASE("node lock: kept apart per log directory, under its real path", "[cli][node-lock]") {
  TempDir d;
  fs::create_directories(d.path + "/a b");
  fs::create_directories(d.path + "/c");
  fs::create_directory_symlink(d.path + "/c", d.path + "/to-c");
  const std::string a = fr::daemon::node_lock_path(d.path + "/a b");
  CHECK(a != fr::daemon::node_lock_path(d.path + "/c"));
  CHECK(fr::daemon::node_lock_path(d.path + "/to-c") == fr::daemon::node_lock_path(d.path + "/c"));
  if (!fr::daemon::private_lock_dir(::geteuid(), true).empty())
    CHECK(a.find("-a%20b.node.lock") != std::string::npos);
  std::string error;
  fr::daemon::NodeLock one, two;
  CHECK(one.acquire(d.path + "/a b", &error) == fr::daemon::NodeLockOutcome::acquired);
  CHECK(two.acquire(d.path + "/to-c", &error) == fr::daemon::NodeLockOutcome::acquired);
  fr::daemon::NodeLock three;
  CHECK(three.acquire(d.path + "/c", &error, 0) == fr::daemon::NodeLockOutcome::held);
}

TEST_CASE("fr-run: exit codes pass through, 128+N for a signal", "[cli][fr-run]") {
  need({kFrRun, kAgent});
  TempDir d;
  Env env = {{"FR_LOG_DIR", d.path}};
  CHECK(run({kFrRun, "--", "/bin/sh", "-c", "exit 0"}, env, d.path).status == 0);
  CHECK(run({kFrRun, "--", "/bin/sh", "-c", "exit 3"}, env, d.path).status == 3);
  CHECK(run({kFrRun, "/bin/sh", "-c", "exit 255"}, env, d.path).status == 255);
  CHECK(run({kFrRun, "--", "/bin/sh", "-c", "kill -TERM $$"}, env, d.path).status == 128 + SIGTERM);
  CHECK(run({kFrRun, "--", "/bin/sh", "-c", "kill -KILL $$"}, env, d.path).status == 128 + SIGKILL);
  Result r = run({kFrRun, "--", "no-such-program-anywhere"}, env, d.path);
  CHECK(r.status == 127);
  CHECK(r.err.find("command not found") != std::string::npos);
  spit(d.path + "/not-exec", "#!/bin/sh\n");
  r = run({kFrRun, "--", d.path + "/not-exec"}, env, d.path);
  CHECK(r.status == 126);
  r = run({kFrRun}, env, d.path);
  CHECK(r.status == 2);
  CHECK(r.err.find("no command") != std::string::npos);
  r = run({kFrRun, "--bogus", "--", "true"}, env, d.path);
  CHECK(r.status == 2);
  // CMD found on PATH, as the shell would.
  CHECK(run({kFrRun, "--", "sh", "-c", "exit 4"}, env, d.path).status == 4);
}

TEST_CASE("fr-run: stdio untouched, the agent preloaded, the environment set", "[cli][fr-run]") {
  need({kFrRun, kAgent});
  TempDir d;
  std::string input;
  for (int i = 0; i < 70000; ++i) input += char(i * 7 % 256);  // binary, over a pipe's buffer
  Result r = run({kFrRun, "--", "/bin/sh", "-c", "cat; printf 'to stderr\\n' >&2"},
                 {{"FR_LOG_DIR", d.path}}, d.path, input);
  CHECK(r.status == 0);
  CHECK(r.out == input);
  CHECK(r.err == "to stderr\n");  // nothing of fr-run's own

  r = run({kFrRun, "--job-id", "jobA", "--log-dir", d.path + "/logs", "--", "/bin/sh", "-c",
           "printf '%s|%s|%s' \"$LD_PRELOAD\" \"$FR_LOG_DIR\" \"$FR_JOB_ID\""},
          {{"LD_PRELOAD", "<unset>"}}, d.path);
  CHECK(r.status == 0);
  std::string agent = kBuild + "/bin/../lib/libfr_agent.so";
  CHECK(r.out == agent + "|" + d.path + "/logs|jobA");

  // No agent: the command runs, unrecorded, and fr-run says so once.
  r = run({kFrRun, "--agent", d.path + "/none.so", "--", "/bin/sh", "-c",
           "printf '[%s]' \"$LD_PRELOAD\""},
          {{"LD_PRELOAD", "<unset>"}, {"FR_LOG_DIR", d.path}}, d.path);
  CHECK(r.status == 0);
  CHECK(r.out == "[]");
  CHECK(r.err.find("runs unrecorded") != std::string::npos);
}

TEST_CASE("fr-run: signals are forwarded to the command", "[cli][fr-run]") {
  need({kFrRun, kAgent});
  TempDir d;
  const char* script =
      "trap 'echo got HUP' HUP; trap 'echo got USR1' USR1; trap 'echo got USR2' USR2; "
      "trap 'echo got INT' INT; trap 'echo got TERM; exit 7' TERM; echo ready; "
      "while :; do sleep 0.02; done";
  Proc p({kFrRun, "--", "/bin/sh", "-c", script}, {{"FR_LOG_DIR", d.path}}, d.path, "sig");
  REQUIRE(wait_for([&] { return p.out().find("ready") != std::string::npos; }, 20));
  for (auto [sig, said] : {std::pair{SIGHUP, "got HUP"}, std::pair{SIGUSR1, "got USR1"},
                           std::pair{SIGUSR2, "got USR2"}, std::pair{SIGINT, "got INT"}}) {
    // A plain variable: lambdas cannot capture a structured binding (C++17, clang).
    const std::string text = said;
    INFO(text);
    ::kill(p.pid, sig);
    CHECK(wait_for([&] { return p.out().find(text) != std::string::npos; }, 20));
  }
  ::kill(p.pid, SIGTERM);
  REQUIRE(p.wait(20));
  CHECK(p.status == 7);
  CHECK(p.out() == "ready\ngot HUP\ngot USR1\ngot USR2\ngot INT\ngot TERM\n");

  // A command that does not catch the signal dies of it: 128+N.
  Proc q({kFrRun, "--", "/bin/sh", "-c", "echo ready; exec sleep 60"}, {{"FR_LOG_DIR", d.path}},
         d.path, "sig2");
  REQUIRE(wait_for([&] { return q.out().find("ready") != std::string::npos; }, 20));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // sleep has replaced the shell
  ::kill(q.pid, SIGINT);
  REQUIRE(q.wait(20));
  CHECK(q.status == 128 + SIGINT);
}

TEST_CASE("fr-run: --parent-death-signal names a signal or none", "[cli][fr-run]") {
  CHECK(parsed({"sleep", "1"}).parent_death_signal == SIGKILL);
  CHECK(parsed({"--parent-death-signal", "TERM", "--", "sleep"}).parent_death_signal == SIGTERM);
  CHECK(parsed({"--parent-death-signal=SIGHUP", "sleep"}).parent_death_signal == SIGHUP);
  CHECK(parsed({"--parent-death-signal", "15", "sleep"}).parent_death_signal == 15);
  CHECK(parsed({"--parent-death-signal", "none", "sleep"}).parent_death_signal == 0);
  for (const char* bad : {"BOGUS", "99", "-1", "SIG", "1x"})
    CHECK(parse_error({"--parent-death-signal", bad, "sleep"}).find("not a signal") !=
          std::string::npos);
}

TEST_CASE("fr-run: killed with SIGKILL, it takes its command along (unless told not to)",
          "[cli][fr-run]") {
  need({kFrRun, kAgent});
  TempDir d;
  // The command says its pid and sleeps; fr-run is then killed outright.
  const char* script = "echo pid $$; exec sleep 60";
  auto command_pid = [](Proc& p) {
    int pid = 0;
    wait_for([&] { return std::sscanf(p.out().c_str(), "pid %d", &pid) == 1; }, 20);
    return pid;
  };
  Proc tied({kFrRun, "--no-daemon", "--", "/bin/sh", "-c", script}, {{"FR_LOG_DIR", d.path}},
            d.path, "tied");
  const int child = command_pid(tied);
  REQUIRE(child > 0);
  ::kill(tied.pid, SIGKILL);
  REQUIRE(tied.wait(20));
  CHECK(wait_for([&] { return gone(child); }, 20));

  Proc free({kFrRun, "--no-daemon", "--parent-death-signal", "none", "--", "/bin/sh", "-c", script},
            {{"FR_LOG_DIR", d.path}}, d.path, "free");
  const int lives = command_pid(free);
  REQUIRE(lives > 0);
  ::kill(free.pid, SIGKILL);
  REQUIRE(free.wait(20));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  CHECK_FALSE(gone(lives));
  ::kill(lives, SIGKILL);
  CHECK(wait_for([&] { return gone(lives); }, 20));
}

TEST_CASE("fr-run: concurrent ranks of a node share exactly one node daemon", "[cli][fr-run]") {
  need({kFrRun, kAgent, kFrd});
  TempDir d;
  std::string logs = d.path + "/shm";
  Proc coord({kFrd, "coordinator", "--listen", "127.0.0.1:0", "--port-file", d.path + "/port",
              "--dump-dir", d.path + "/dumps"},
             {}, d.path, "coordinator");
  REQUIRE(wait_for([&] { return !slurp(d.path + "/port").empty(); }, 30));
  std::string addr = "127.0.0.1:" + slurp(d.path + "/port");
  while (!addr.empty() && (addr.back() == '\n' || addr.back() == ' ')) addr.pop_back();

  std::vector<std::unique_ptr<Proc>> ranks;
  for (int i = 0; i < 6; ++i)
    ranks.push_back(std::make_unique<Proc>(
        std::vector<std::string>{kFrRun, "--coordinator", addr, "--log-dir", logs,
                                 "--frd-arg=--dump-dir", "--frd-arg=" + d.path + "/spool", "--",
                                 "/bin/sh", "-c", "sleep 0.5; echo rank $RANK done"},
        std::map<std::string, std::string>{{"RANK", std::to_string(i)}}, d.path,
        "rank" + std::to_string(i)));
  for (int i = 0; i < 6; ++i) {
    INFO("rank " << i << " stderr: " << ranks[i]->err());
    REQUIRE(ranks[i]->wait(60));
    CHECK(ranks[i]->status == 0);
    CHECK(ranks[i]->out() == "rank " + std::to_string(i) + " done\n");
    CHECK(ranks[i]->err().empty());
  }
  auto s = fr::daemon::probe_node_lock(logs);
  INFO("daemon log: " << slurp(logs + "/frd-node.log"));
  REQUIRE(s.held);
  std::vector<pid_t> daemons = processes_with_args({kFrd, "node", logs});
  CHECK(daemons == std::vector<pid_t>{s.pid});
  // Its own session, away from the ranks' process group; it outlives the fr-runs.
  CHECK(::getsid(s.pid) != ::getsid(0));
  CHECK(::getpgid(s.pid) != ::getpgrp());

  // A later rank reuses it; a daemon started by hand meanwhile is refused.
  Result later = run({kFrRun, "--coordinator", addr, "--log-dir", logs, "--", "true"}, {}, d.path);
  CHECK(later.status == 0);
  CHECK(later.err.empty());
  // A rank of another job pointed at the same directory, while this one's coordinator is alive,
  // gets a directory and a daemon of its own below it; this job's daemon stays.
  later = run({kFrRun, "--coordinator", "127.0.0.1:1", "--log-dir", logs, "--", "/bin/sh", "-c",
               "echo $FR_LOG_DIR"},
              {}, d.path);
  CHECK(later.status == 0);
  const std::string own = logs + "/fr-127.0.0.1_1";
  CHECK(later.err.find("follows " + addr + ", which is alive and serves another job; this job's " +
                       "flight logs go to " + own + ", with a node daemon of its own") !=
        std::string::npos);
  CHECK(later.out == own + "\n");
  CHECK(fr::daemon::probe_node_lock(own).held);
  CHECK(fr::daemon::probe_node_lock(logs).pid == s.pid);
  stop_node_daemon(own);
  Result second = run({kFrd, "node", "--coordinator", addr, "--log-dir", logs}, {}, d.path, "", 30);
  CHECK(second.status == 1);
  CHECK(second.err.find("another frd node serves") != std::string::npos);
  CHECK(processes_with_args({kFrd, "node", logs}) == std::vector<pid_t>{s.pid});

  stop_node_daemon(logs);
  CHECK(gone(s.pid));
  // Once it is gone, the next fr-run starts a new one.
  CHECK(run({kFrRun, "--coordinator", addr, "--log-dir", logs, "--frd-arg=--dump-dir",
             "--frd-arg=" + d.path + "/spool", "--", "true"},
            {}, d.path)
            .status == 0);
  auto s2 = fr::daemon::probe_node_lock(logs);
  CHECK(s2.held);
  CHECK(s2.pid != s.pid);
  stop_node_daemon(logs);
}

TEST_CASE("fr-run: the daemon it starts holds none of its caller's pipes", "[cli][fr-run]") {
  need({kFrRun, kAgent, kFrd});
  TempDir d;
  std::string logs = d.path + "/shm";
  // The shell reads fr-run's stdout, and a second pipe left open on fd 5, to their ends: both
  // must close when fr-run exits although the node daemon it started lives on.
  std::string script = "exec 5>&1; out=$(" + kFrRun + " --coordinator 127.0.0.1:1 --log-dir " +
                       logs + " --frd-arg=--dump-dir --frd-arg=" + d.path +
                       "/spool -- echo hi); echo \"[$out]\"";
  Result r = run({"/bin/sh", "-c", "{ " + script + "; } | cat"}, {}, d.path, "", 60);
  CHECK(r.status == 0);
  CHECK(r.out == "[hi]\n");
  auto s = fr::daemon::probe_node_lock(logs);
  CHECK(s.held);
  stop_node_daemon(logs);
}

TEST_CASE("fr-run: the node daemon it starts stays while it runs, and leaves when the node is idle",
          "[cli][fr-run]") {
  need({kFrRun, kAgent, kFrd});
  TempDir d;
  std::string logs = d.path + "/shm";
  // No coordinator there, and a command that makes no flight log: only fr-run's use keeps it.
  Proc job({kFrRun, "--coordinator", "127.0.0.1:1", "--log-dir", logs, "--daemon-exit-when-idle",
            "1", "--frd-arg=--dump-dir", "--frd-arg=" + d.path + "/spool", "--", "sleep", "4"},
           {}, d.path, "job");
  REQUIRE(wait_for([&] { return fr::daemon::probe_node_lock(logs).held; }, 20));
  const pid_t daemon = fr::daemon::probe_node_lock(logs).pid;
  std::this_thread::sleep_for(std::chrono::seconds(3));
  CHECK_FALSE(gone(daemon));  // three idle limits, and fr-run still runs
  REQUIRE(job.wait(30));
  CHECK(job.status == 0);
  CHECK(wait_for([&] { return gone(daemon); }, 20));
  CHECK(slurp(logs + "/frd-node.log").find("exiting (--exit-when-idle)") != std::string::npos);
}

TEST_CASE("fr-run: a daemon that cannot start does not stop the command", "[cli][fr-run]") {
  need({kFrRun, kAgent});
  TempDir d;
  Result r = run({kFrRun, "--coordinator", "127.0.0.1:1", "--frd", d.path + "/no-frd", "--log-dir",
                  d.path + "/shm", "--", "/bin/sh", "-c", "echo ran"},
                 {}, d.path);
  CHECK(r.status == 0);
  CHECK(r.out == "ran\n");
  CHECK(r.err.find("no node daemon: cannot run " + d.path + "/no-frd") != std::string::npos);
}

namespace {

// A coordinator for one job (--stall-after 1, 4 ranks), serving until the test ends.
struct Coordinator {
  std::unique_ptr<Proc> proc;
  std::string addr, dumps;
  Coordinator(const std::string& dir, const std::string& dumps_dir,
              std::vector<std::string> extra = {})
      : dumps(dumps_dir) {
    std::vector<std::string> argv = {kFrd,          "coordinator",    "--listen",
                                     "127.0.0.1:0", "--port-file",    dir + "/port",
                                     "--dump-dir",  dumps_dir,        "--stall-after",
                                     "1",           "--expect-ranks", "4"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    fs::remove(dir + "/port");
    proc = std::make_unique<Proc>(argv, std::map<std::string, std::string>{}, dir, "coordinator");
    REQUIRE(wait_for([&] { return !slurp(dir + "/port").empty(); }, 30));
    addr = "127.0.0.1:" + slurp(dir + "/port");
    while (!addr.empty() && (addr.back() == '\n' || addr.back() == ' ')) addr.pop_back();
  }
};

// Four ranks of a simulated job, each under its own fr-run, rank 1 hung on the host at step 3.
std::vector<std::unique_ptr<Proc>> start_hung_job(const std::string& dir, const std::string& logs,
                                                  const std::string& addr, const std::string& job,
                                                  std::vector<std::string> fr_run_flags = {}) {
  const std::string rank_exe = kBuild + "/bin/fr-simjob-rank";
  fs::create_directories(dir + "/run-" + job);
  std::vector<std::unique_ptr<Proc>> ranks;
  for (int r = 0; r < 4; ++r) {
    std::vector<std::string> argv = {kFrRun,
                                     "--coordinator",
                                     addr,
                                     "--job-id",
                                     job,
                                     "--log-dir",
                                     logs,
                                     "--frd-arg=--heartbeat-interval",
                                     "--frd-arg=0.2",
                                     "--frd-arg=--dump-dir",
                                     "--frd-arg=" + dir + "/spool"};
    argv.insert(argv.end(), fr_run_flags.begin(), fr_run_flags.end());
    argv.insert(argv.end(),
                {"--", rank_exe, "--nodes", "1", "--ranks-per-node", "4", "--tp", "2", "--pp", "2",
                 "--steps", "20", "--fault", "rank=1,step=3,kind=hang-host"});
    ranks.push_back(std::make_unique<Proc>(
        argv,
        std::map<std::string, std::string>{{"RANK", std::to_string(r)},
                                           {"WORLD_SIZE", "4"},
                                           {"LOCAL_RANK", std::to_string(r)},
                                           {"LOCAL_WORLD_SIZE", "4"},
                                           {"CUDA_VISIBLE_DEVICES", "0,1,2,3"},
                                           {"LD_LIBRARY_PATH", kBuild + "/sim/lib"},
                                           {"FRSIM_SHM_PREFIX", "/frrun" + job},
                                           {"FRSIMJOB_RUN_DIR", dir + "/run-" + job},
                                           {"FRSIMJOB_BOARD", "<unset>"}},
        dir, "rank" + std::to_string(r)));
  }
  return ranks;
}

// The first analysis.json under `dumps` within `seconds`; empty when none came.
std::string wait_for_analysis(const std::string& dumps, int seconds) {
  std::string analysis;
  wait_for(
      [&] {
        std::error_code ec;
        for (auto it = fs::recursive_directory_iterator(dumps, ec); !ec && it != fs::end(it);
             it.increment(ec))
          if (it->path().filename() == "analysis.json") analysis = it->path().string();
        return !analysis.empty();
      },
      seconds);
  return analysis;
}

void need_simjob() {
  need({kFrRun, kAgent, kFrd, kBuild + "/bin/fr-simjob-rank", kBuild + "/sim/lib/libnccl.so.2",
        kBuild + "/sim/lib/libcuda.so.1"});
}

}  // namespace

TEST_CASE("fr-run: a hung job run rank by rank under fr-run is caught by the daemons",
          "[cli][fr-run][e2e]") {
  need_simjob();
  TempDir d;
  std::string logs = d.path + "/shm";
  Coordinator coord(d.path, d.path + "/dumps");
  std::string job = "frrun-" + std::to_string(::getpid());
  auto ranks = start_hung_job(d.path, logs, coord.addr, job);
  const std::string analysis = wait_for_analysis(coord.dumps, 90);
  INFO("coordinator: " << coord.proc->err() << "\nnode daemon: " << slurp(logs + "/frd-node.log")
                       << "\nrank0: " << ranks[0]->err());
  REQUIRE(!analysis.empty());
  // The flight logs are the job's, in the log dir fr-run gave.
  int frlogs = 0;
  for (const auto& e : fs::directory_iterator(logs))
    frlogs += e.path().extension() == ".frlog" &&
              e.path().filename().string().find(job) != std::string::npos;
  CHECK(frlogs == 4);
  nlohmann::json a = nlohmann::json::parse(slurp(analysis));
  INFO(a.dump(2).substr(0, 2000));
  CHECK(a["verdict"]["kind"] == "not_entered");
  CHECK(a["verdict"]["culprit_ranks"] == nlohmann::json::array({1}));

  // SIGTERM to each fr-run reaches its rank, which dies of it.
  for (auto& r : ranks) ::kill(r->pid, SIGTERM);
  for (auto& r : ranks) {
    REQUIRE(r->wait(30));
    CHECK(r->status == 128 + SIGTERM);
  }
  stop_node_daemon(logs);
  ::kill(coord.proc->pid, SIGTERM);
  coord.proc->wait(20);
}

TEST_CASE("fr-run: a second job in the same log directory within seconds is watched too",
          "[cli][fr-run][e2e]") {
  // The first job's node daemon outlives it (it leaves when idle, after 60 s). The second job,
  // with a coordinator of its own, replaces it instead of running unwatched.
  need_simjob();
  TempDir d;
  const std::string logs = d.path + "/shm";
  fs::create_directories(d.path + "/one");
  fs::create_directories(d.path + "/two");
  pid_t first_daemon = 0;
  {
    Coordinator one(d.path + "/one", d.path + "/one/dumps");
    auto ranks = start_hung_job(d.path, logs, one.addr, "first-" + std::to_string(::getpid()));
    INFO("coordinator one: " << one.proc->err());
    REQUIRE(!wait_for_analysis(one.dumps, 90).empty());
    for (auto& r : ranks) ::kill(r->pid, SIGKILL);
    for (auto& r : ranks) r->wait(30);
    first_daemon = fr::daemon::probe_node_lock(logs).pid;
    ::kill(one.proc->pid, SIGTERM);
    REQUIRE(one.proc->wait(20));
  }
  REQUIRE(first_daemon > 0);
  REQUIRE(fr::daemon::probe_node_lock(logs).held);  // still there, following a coordinator gone
  Coordinator two(d.path + "/two", d.path + "/two/dumps");
  const std::string job = "second-" + std::to_string(::getpid());
  auto ranks = start_hung_job(d.path, logs, two.addr, job);
  const std::string analysis = wait_for_analysis(two.dumps, 90);
  INFO("coordinator two: " << two.proc->err() << "\nnode daemon: " << slurp(logs + "/frd-node.log")
                           << "\nrank0: " << ranks[0]->err());
  REQUIRE(!analysis.empty());
  nlohmann::json a = nlohmann::json::parse(slurp(analysis));
  CHECK(a["verdict"]["culprit_ranks"] == nlohmann::json::array({1}));
  CHECK(a["inputs"]["job_id"] == job);
  // One fr-run replaced the old daemon and said so; none ran unwatched.
  std::string said;
  for (auto& r : ranks) said += r->err();
  CHECK(said.find("fr-run: replaced the node daemon serving " + logs) != std::string::npos);
  CHECK(said.find("runs unwatched") == std::string::npos);
  CHECK(fr::daemon::probe_node_lock(logs).pid != first_daemon);
  for (auto& r : ranks) ::kill(r->pid, SIGKILL);
  for (auto& r : ranks) r->wait(30);
  stop_node_daemon(logs);
  ::kill(two.proc->pid, SIGTERM);
  two.proc->wait(20);
}

TEST_CASE("fr-run: two jobs at once in one log directory: the second gets its own, and is watched",
          "[cli][fr-run][e2e]") {
  need_simjob();
  TempDir d;
  const std::string logs = d.path + "/shm";
  fs::create_directories(d.path + "/one");
  fs::create_directories(d.path + "/two");
  // Job one still runs (its coordinator alive, its rank sleeping): its daemon serves `logs`.
  Coordinator one(d.path + "/one", d.path + "/one/dumps");
  Proc first({kFrRun, "--coordinator", one.addr, "--log-dir", logs, "--", "/bin/sleep", "60"}, {},
             d.path, "first");
  REQUIRE(wait_for([&] { return fr::daemon::probe_node_lock(logs).held; }, 20));
  const pid_t first_daemon = fr::daemon::probe_node_lock(logs).pid;
  Coordinator two(d.path + "/two", d.path + "/two/dumps");
  const std::string job = "second-" + std::to_string(::getpid());
  auto ranks = start_hung_job(d.path, logs, two.addr, job);
  const std::string analysis = wait_for_analysis(two.dumps, 90);
  const std::string own = logs + "/fr-" + two.addr.substr(0, two.addr.find(':')) + "_" +
                          two.addr.substr(two.addr.find(':') + 1);
  INFO("coordinator two: " << two.proc->err() << "\nrank0: " << ranks[0]->err());
  REQUIRE(!analysis.empty());
  nlohmann::json a = nlohmann::json::parse(slurp(analysis));
  CHECK(a["verdict"]["culprit_ranks"] == nlohmann::json::array({1}));
  CHECK(ranks[0]->err().find("this job's flight logs go to " + own) != std::string::npos);
  // Job one's daemon was left alone.
  CHECK(fr::daemon::probe_node_lock(logs).pid == first_daemon);
  CHECK(fr::daemon::probe_node_lock(own).held);
  for (auto& r : ranks) ::kill(r->pid, SIGKILL);
  for (auto& r : ranks) r->wait(30);
  ::kill(first.pid, SIGKILL);
  first.wait(10);
  stop_node_daemon(own);
  stop_node_daemon(logs);
  for (auto* c : {&one, &two}) {
    ::kill(c->proc->pid, SIGTERM);
    c->proc->wait(20);
  }
}

TEST_CASE("fr-run: a wrong token is said on fr-run's first line, by the node and the coordinator",
          "[cli][fr-run]") {
  need({kFrRun, kFrd});
  TempDir d;
  fs::create_directories(d.path + "/tok");
  spit(d.path + "/tok/coord", "the-right-token\n");
  spit(d.path + "/tok/node", "a-wrong-token\n");
  ::chmod((d.path + "/tok/coord").c_str(), 0600);
  ::chmod((d.path + "/tok/node").c_str(), 0600);
  Coordinator coord(d.path, d.path + "/dumps", {"--token-file", d.path + "/tok/coord"});
  const std::string logs = d.path + "/shm";
  // A relative token file: fr-run makes it absolute for the daemon, which runs in /.
  Proc run({"/bin/sh", "-c",
            "cd \"$0\" && exec \"$1\" --coordinator \"$2\" --token-file tok/node --log-dir shm "
            "-- /bin/true",
            d.path, kFrRun, coord.addr},
           {}, d.path, "fr-run");
  REQUIRE(run.wait(30));
  CHECK(run.status == 0);
  INFO("fr-run: " << run.err() << "\ncoordinator: " << coord.proc->err()
                  << "\nnode daemon: " << slurp(logs + "/frd-node.log"));
  const std::string first = run.err().substr(0, run.err().find('\n'));
  CHECK(first.find("fr-run: the node daemon (pid ") == 0);
  CHECK(first.find("UNAUTHENTICATED: wrong token (file " + d.path + "/tok/node)") !=
        std::string::npos);
  CHECK(slurp(logs + "/frd-node.log")
            .find("UNAUTHENTICATED: wrong token (file " + d.path + "/tok/node)") !=
        std::string::npos);
  CHECK(wait_for(
      [&] {
        return coord.proc->err().find("refused a node's connection") != std::string::npos &&
               coord.proc->err().find("wrong token") != std::string::npos;
      },
      10));
  stop_node_daemon(logs);
  ::kill(coord.proc->pid, SIGTERM);
  coord.proc->wait(20);
}

TEST_CASE(
    "fr-run: what another user plants in the log directory neither hangs it nor ends the watch",
    "[cli][fr-run]") {
  // A second local user (uid 65534) in a world-writable log directory, as /dev/shm is (#37): a
  // FIFO named frd-node.log, a link at the start lock's old place, the node lock's old place and
  // the users lock of older versions held exclusively for good. fr-run must start its daemon and
  // its command at once, say what it refused, and the daemon must stay while the job runs and
  // still leave when it is idle.
  need({kFrRun, kAgent, kFrd});
  if (::getuid() != 0 || ::access("/usr/bin/setpriv", X_OK) != 0 ||
      ::access("/usr/bin/flock", X_OK) != 0)
    FR_SKIP("needs root, setpriv and flock to act as a second user");
  TempDir d;
  REQUIRE(::chmod(d.path.c_str(), 0755) == 0);
  const std::string logs = d.path + "/shm";
  REQUIRE(::mkdir(logs.c_str(), 0777) == 0);
  REQUIRE(::chmod(logs.c_str(), 01777) == 0);
  const std::vector<std::string> as_other = {"/usr/bin/setpriv", "--reuid", "65534",
                                             "--regid",          "65534",   "--clear-groups"};
  auto other = [&](std::vector<std::string> argv) {
    argv.insert(argv.begin(), as_other.begin(), as_other.end());
    return argv;
  };
  REQUIRE(run(other({"/bin/sh", "-c",
                     "mkfifo " + logs + "/frd-node.log && ln -s /etc/shadow " + logs +
                         "/frd-node.lock.start"}),
              {}, d.path)
              .status == 0);
  Proc holder(other({"/usr/bin/flock", "-x", logs + "/frd-node.lock.users", "sleep", "60"}), {},
              d.path, "holder");
  Proc node_holder(other({"/usr/bin/flock", "-x", logs + "/frd-node.lock", "sleep", "60"}), {},
                   d.path, "node-holder");
  REQUIRE(wait_for([&] { return fs::exists(logs + "/frd-node.lock.users"); }, 10));
  REQUIRE(wait_for([&] { return fs::exists(logs + "/frd-node.lock"); }, 10));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the lock taken

  const auto t0 = std::chrono::steady_clock::now();
  Proc job({kFrRun, "--coordinator", "127.0.0.1:1", "--log-dir", logs, "--daemon-exit-when-idle",
            "1", "--frd-arg=--dump-dir", "--frd-arg=" + d.path + "/spool", "--", "sleep", "4"},
           {}, d.path, "job");
  REQUIRE(wait_for([&] { return fr::daemon::probe_node_lock(logs).held; }, 20));
  const double started =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("fr-run's node daemon held its lock %.2f s after fr-run started\n", started);
  CHECK(started < 5);  // generous: the users lock of an older version made it wait 10 s
  const pid_t daemon = fr::daemon::probe_node_lock(logs).pid;
  std::this_thread::sleep_for(std::chrono::seconds(3));
  CHECK_FALSE(gone(daemon));  // three idle limits, and the job still runs
  REQUIRE(job.wait(30));
  INFO(job.err());
  CHECK(job.status == 0);
  CHECK(job.err().find("fr-run: the node daemon's output goes nowhere: " + logs +
                       "/frd-node.log: a FIFO or device, not a regular file") != std::string::npos);
  // The start lock and the node lock lie in root's private directory: the planted ones are
  // nothing to them.
  CHECK(job.err().find("frd-node.lock") == std::string::npos);
  // The job is over: the daemon leaves, whatever the other user holds.
  CHECK(wait_for([&] { return gone(daemon); }, 20));
}

TEST_CASE("fr-run: its torch hook goes first on PYTHONPATH, once, the rest kept", "[cli][fr-run]") {
  Options o = parsed({"x"});
  fr::run::resolve(&o, {}, "/opt/fr/bin", 0, no_file);
  // No hook (not installed, or --no-torch-hook): PYTHONPATH untouched.
  CHECK(fr::run::child_env(o, {{"PYTHONPATH", "/mine"}}, true)["PYTHONPATH"] == "/mine");
  CHECK(fr::run::child_env(o, {}, true).count("PYTHONPATH") == 0);
  o.python_hook = "/opt/fr/share/fr/python";
  CHECK(fr::run::child_env(o, {}, true)["PYTHONPATH"] == "/opt/fr/share/fr/python");
  CHECK(fr::run::child_env(o, {{"PYTHONPATH", "/mine:/other"}}, true)["PYTHONPATH"] ==
        "/opt/fr/share/fr/python:/mine:/other");
  // An fr-run inside an fr-run: the hook once, first; an empty entry (the current folder) kept.
  CHECK(fr::run::child_env(o, {{"PYTHONPATH", "/mine:/opt/fr/share/fr/python::/x"}},
                           true)["PYTHONPATH"] == "/opt/fr/share/fr/python:/mine::/x");
  Options n = parsed({"--no-torch-hook", "x"});
  CHECK(n.no_torch_hook);
}

TEST_CASE("fr-run's python hook runs the sitecustomize it shadows and leaves a program alone",
          "[cli][fr-run]") {
  const std::string hook = kBuild + "/share/fr/python";
  need({hook + "/sitecustomize.py"});
  if (run({"/usr/bin/env", "python3", "-c", "pass"}, {}, ".").status != 0)
    FR_SKIP("no python3 on PATH");
  TempDir d;
  fs::create_directories(d.path + "/other");
  spit(d.path + "/other/sitecustomize.py",
       "import os\nopen(os.environ['MARK'], 'w').write('chained')\n");
  // Not registered by fr-run: the hook's thread starts, imports nothing, and the program's
  // own sitecustomize still runs.
  Result r = run({"/usr/bin/env", "python3", "-c",
                  "import sys, threading\n"
                  "print('torch' in sys.modules, 'fr-torch-hook' in "
                  "[t.name for t in threading.enumerate()])"},
                 {{"FR_LOG_DIR", d.path},
                  {"PYTHONPATH", hook + ":" + d.path + "/other"},
                  {"MARK", d.path + "/mark"}},
                 d.path);
  INFO(r.err);
  CHECK(r.status == 0);
  CHECK(r.out == "False True\n");
  CHECK(slurp(d.path + "/mark") == "chained");
  // FR_TORCH_HOOK=0: no thread.
  r = run({"/usr/bin/env", "python3", "-c",
           "import threading\nprint([t.name for t in threading.enumerate()])"},
          {{"FR_LOG_DIR", d.path}, {"PYTHONPATH", hook}, {"FR_TORCH_HOOK", "0"}}, d.path);
  CHECK(r.out == "['MainThread']\n");
}
