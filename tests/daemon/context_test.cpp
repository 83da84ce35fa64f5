// What a dump carries besides the logs: the stacks of every rank (daemon/host/stacks.h, through the
// real `frd stacks` helper where a daemon would use it) and GPU health from NVML (daemon/host/nvml.h,
// on the emulated libnvidia-ml.so.1 of sim/nvml). Real processes, real ptrace.
#include <fcntl.h>
#include <pwd.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "daemon/base/model.h"
#include "daemon/host/nvml.h"
#include "daemon/host/stacks.h"
#include "log/side_files.h"
#include "skip.h"
#include "temp_dir.h"
#include "testing/files.h"
#include "testing/wait.h"

namespace fs = std::filesystem;
using fr::log::ProcessStacks;
using fr::log::ThreadStack;
using fr::test::slurp;
using fr::test::TempDir;
using fr::test::wait_for;

namespace {

const std::string kBuild = FR_BUILD_DIR;
// Process states are sampled often: a stop under ptrace can be brief.
constexpr std::chrono::milliseconds kPoll{5};

// A field of /proc/<pid>/status ("State", "TracerPid").
std::string status_field(int pid, const std::string& key) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind(key + ":", 0) == 0) {
      std::string v = line.substr(key.size() + 1);
      v.erase(0, v.find_first_not_of(" \t"));
      return v;
    }
  return "";
}

char state_of(int pid) {
  std::string s = status_field(pid, "State");
  return s.empty() ? '?' : s[0];
}

// A child process running argv, started and standing in its known place when this returns.
struct Child {
  pid_t pid = -1;
  explicit Child(std::vector<std::string> argv, bool wait_ready = true) {
    int p[2];
    REQUIRE(::pipe(p) == 0);
    pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      ::dup2(p[1], 1);
      ::close(p[0]);
      std::vector<char*> a;
      for (auto& s : argv) a.push_back(s.data());
      a.push_back(nullptr);
      ::execvp(a[0], a.data());
      ::_exit(127);
    }
    ::close(p[1]);
    if (wait_ready) {
      char buf[16] = {0};
      ssize_t n = ::read(p[0], buf, sizeof buf - 1);
      REQUIRE(n > 0);
      // Past its print: blocked (hang) or running (spin) where the tests expect it.
      const bool spin = argv.size() > 1 && argv[1] == "spin";
      REQUIRE(wait_for([&] { return state_of(pid) == (spin ? 'R' : 'S'); }, 10, kPoll));
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ::close(p[0]);
  }
  ~Child() {
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      int st;
      ::waitpid(pid, &st, 0);
    }
  }
};

std::vector<std::string> functions(const ThreadStack& t) {
  std::vector<std::string> out;
  for (const auto& f : t.frames) out.push_back(f.function);
  return out;
}

const ThreadStack& main_thread(const ProcessStacks& s) {
  REQUIRE(!s.threads.empty());
  REQUIRE(s.threads.front().tid == s.pid);
  return s.threads.front();
}

// hang_forever <- run_step <- main, in that order, with the target's source file and lines.
void require_hang_stack(const ProcessStacks& s) {
  INFO("error: " << s.error);
  const ThreadStack& t = main_thread(s);
  std::vector<std::string> fns = functions(t);
  std::string joined;
  for (auto& f : fns) joined += f + " <- ";
  INFO("frames: " << joined);
  auto at = [&](const std::string& name) {
    return std::find(fns.begin(), fns.end(), name) - fns.begin();
  };
  REQUIRE(at("hang_forever") < at("run_step"));
  REQUIRE(at("run_step") < at("main"));
  REQUIRE(at("main") < long(fns.size()));
  const auto& hang = t.frames[size_t(at("hang_forever"))];
  REQUIRE(hang.file.find("stack_target.cpp") != std::string::npos);
  REQUIRE(hang.line > 0);
  REQUIRE(hang.kind == "native");
  REQUIRE(hang.module.find("stack_target") != std::string::npos);
}

int64_t deadline_in(double s) { return fr::daemon::mono_ns() + int64_t(s * 1e9); }

fr::daemon::StackOptions helper_options() {
  fr::daemon::StackOptions o;
  o.frd_binary = kBuild + "/bin/frd";
  o.budget_ns = 10'000'000'000;
  return o;
}

}  // namespace

TEST_CASE("stacks: a hung process shows its functions, files and lines, and runs on", "[stacks]") {
  Child target({kBuild + "/tests/stack_target", "hang"});
  ProcessStacks s = fr::daemon::capture_process(target.pid, deadline_in(10), 0);
  require_hang_stack(s);
  REQUIRE(main_thread(s).state == "S");
  REQUIRE(status_field(target.pid, "TracerPid") == "0");
  REQUIRE(wait_for([&] { return state_of(target.pid) == 'S'; }, 5, kPoll));
}

TEST_CASE("stacks: the frd stacks helper writes one fr-stacks/1 file per rank beside its dump",
          "[stacks]") {
  Child a({kBuild + "/tests/stack_target", "hang"});
  Child b({kBuild + "/tests/stack_target", "spin"});
  TempDir tmp("fr-context");
  const std::string dir = tmp.path;
  fr::daemon::StacksTaken got = fr::daemon::take_stacks(helper_options(),
                                                        {{a.pid, 0, "rank0.frlog", true, ""},
                                                         {b.pid, 1, "rank1.frlog", true, ""},
                                                         {999999, 2, "rank2.frlog", false, ""}},
                                                        dir);
  REQUIRE(got.files.size() == 3);
  REQUIRE(got.taken == 2);
  ProcessStacks s;
  std::string err;
  REQUIRE(fr::log::parse_stacks(slurp(dir + "/rank0.frlog.stacks.json"), &s, &err));
  REQUIRE(s.rank == 0);
  require_hang_stack(s);
  REQUIRE(fr::log::parse_stacks(slurp(dir + "/rank1.frlog.stacks.json"), &s, &err));
  std::vector<std::string> fns = functions(main_thread(s));
  REQUIRE(std::find(fns.begin(), fns.end(), "spin_forever") != fns.end());
  REQUIRE(main_thread(s).state == "R");
  REQUIRE(fr::log::parse_stacks(slurp(dir + "/rank2.frlog.stacks.json"), &s, &err));
  REQUIRE(s.error == "the process had exited at the dump");
  REQUIRE(state_of(b.pid) == 'R');
}

TEST_CASE("stacks: a SIGSTOPped process is read and left stopped, with no stop of ours",
          "[stacks]") {
  Child target({kBuild + "/tests/stack_target", "hang"});
  ::kill(target.pid, SIGSTOP);
  REQUIRE(wait_for([&] { return state_of(target.pid) == 'T'; }, 5, kPoll));
  // Through the helper, as a daemon does: the tracer is not the process's parent.
  TempDir tmp("fr-context");
  const std::string dir = tmp.path;
  fr::daemon::take_stacks(helper_options(), {{target.pid, 0, "r0.frlog", true, ""}}, dir);
  ProcessStacks s;
  std::string err;
  REQUIRE(fr::log::parse_stacks(slurp(dir + "/r0.frlog.stacks.json"), &s, &err));
  require_hang_stack(s);
  REQUIRE(main_thread(s).state == "T");
  REQUIRE(status_field(target.pid, "TracerPid") == "0");
  REQUIRE(state_of(target.pid) == 'T');  // still the user's stop
  ::kill(target.pid, SIGCONT);
  REQUIRE(wait_for([&] { return state_of(target.pid) == 'S'; }, 5,
                   kPoll));  // and nothing else holds it
}

TEST_CASE("stacks: when the budget runs out, the rest say so and nothing is left stopped",
          "[stacks]") {
  Child a({kBuild + "/tests/stack_target", "spin"});
  Child b({kBuild + "/tests/stack_target", "spin"});
  fr::daemon::StackOptions o = helper_options();
  o.budget_ns = 300'000'000;
  o.hold_ns = 600'000'000;  // the first process alone outlasts the budget
  TempDir tmp("fr-context");
  const std::string dir = tmp.path;
  fr::daemon::StacksTaken got = fr::daemon::take_stacks(
      o, {{a.pid, 0, "r0.frlog", true, ""}, {b.pid, 1, "r1.frlog", true, ""}}, dir);
  REQUIRE(got.files.size() == 2);
  ProcessStacks s;
  std::string err;
  REQUIRE(fr::log::parse_stacks(slurp(dir + "/r1.frlog.stacks.json"), &s, &err));
  REQUIRE(s.error.find("budget") != std::string::npos);
  for (pid_t p : {a.pid, b.pid}) {
    REQUIRE(wait_for([&] { return status_field(p, "TracerPid") == "0" && state_of(p) == 'R'; }, 5,
                     kPoll));
  }
}

TEST_CASE("stacks: a daemon killed during capture leaves no process stopped", "[stacks]") {
  Child target({kBuild + "/tests/stack_target", "spin"});
  TempDir tmp("fr-context");
  const std::string dir = tmp.path;
  // The "daemon": a process that runs the capture as frd node does, holding the target a while.
  pid_t daemon = ::fork();
  REQUIRE(daemon >= 0);
  if (daemon == 0) {
    fr::daemon::StackOptions o = helper_options();
    o.hold_ns = 30'000'000'000;
    fr::daemon::take_stacks(o, {{target.pid, 0, "r0.frlog", true, ""}}, dir);
    ::_exit(0);
  }
  // Kill it while the helper holds the target stopped.
  bool held = wait_for(
      [&] { return status_field(target.pid, "TracerPid") != "0" && state_of(target.pid) == 't'; },
      20, kPoll);
  ::kill(daemon, SIGKILL);
  int st;
  ::waitpid(daemon, &st, 0);
  REQUIRE(held);
  REQUIRE(wait_for([&] { return status_field(target.pid, "TracerPid") == "0"; }, 10, kPoll));
  REQUIRE(wait_for([&] { return state_of(target.pid) == 'R'; }, 5, kPoll));
}

TEST_CASE("stacks: another user's process yields a clear reason", "[stacks]") {
  if (::geteuid() != 0) FR_SKIP("needs root, to create a second user for the capture to run as");
  const char* user = "fr-stacks-test";
  if (::getpwnam(user) == nullptr) {
    int rc = std::system(
        "useradd --system --no-create-home --shell /usr/sbin/nologin fr-stacks-test >/dev/null 2>&1");
    if (rc != 0 && ::getpwnam(user) == nullptr)
      FR_SKIP("useradd could not create the user " << user);
  }
  passwd* pw = ::getpwnam(user);
  REQUIRE(pw != nullptr);
  Child target({kBuild + "/tests/stack_target", "hang"});  // ours (root's)
  // frd as that user, from a copy it can reach whatever the build folder's permissions.
  TempDir tmp("fr-context");
  const std::string dir = tmp.path;
  ::chmod(dir.c_str(), 0755);
  fs::copy_file(kBuild + "/bin/frd", dir + "/frd");
  ::chmod((dir + "/frd").c_str(), 0755);
  int p[2];
  REQUIRE(::pipe(p) == 0);
  pid_t helper = ::fork();
  REQUIRE(helper >= 0);
  if (helper == 0) {
    ::dup2(p[1], 1);
    if (::setgid(pw->pw_gid) != 0 || ::setuid(pw->pw_uid) != 0) ::_exit(126);
    std::string frd = dir + "/frd", pid = std::to_string(target.pid) + ":4";
    ::execl(frd.c_str(), frd.c_str(), "stacks", "--pid", pid.c_str(), "--budget-ms", "5000",
            nullptr);
    ::_exit(127);
  }
  ::close(p[1]);
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::read(p[0], buf, sizeof buf)) > 0;) out.append(buf, size_t(n));
  ::close(p[0]);
  int st;
  ::waitpid(helper, &st, 0);
  REQUIRE(WIFEXITED(st));
  REQUIRE(WEXITSTATUS(st) == 0);
  ProcessStacks s;
  std::string err;
  REQUIRE(fr::log::parse_stacks(out, &s, &err));
  INFO(s.error);
  REQUIRE(s.rank == 4);
  REQUIRE(s.threads.empty());
  REQUIRE(s.error.find("ptrace not permitted") == 0);
  REQUIRE(s.error.find("belongs to root") != std::string::npos);
  REQUIRE(s.error.find("CAP_SYS_PTRACE") != std::string::npos);
  REQUIRE(s.error.find('\n') == std::string::npos);
  REQUIRE(state_of(target.pid) == 'S');
  // And a flight log of that user naming root's process does not make frd (root) read it.
  const std::string log = dir + "/fr.forged.frlog";
  std::ofstream(log) << "x";
  REQUIRE(::chown(log.c_str(), pw->pw_uid, pw->pw_gid) == 0);
  fr::daemon::StacksTaken got =
      fr::daemon::take_stacks(helper_options(), {{target.pid, 0, "r0.frlog", true, log}}, dir);
  REQUIRE(got.taken == 0);
  REQUIRE(fr::log::parse_stacks(slurp(dir + "/r0.frlog.stacks.json"), &s, &err));
  REQUIRE(s.error == "not taken: the process belongs to root, its flight log to fr-stacks-test");
}

TEST_CASE("stacks: a Python process's time.sleep frame is named, with its Python callers",
          "[stacks]") {
  if (std::system("command -v py-spy >/dev/null 2>&1") != 0)
    FR_SKIP("py-spy is not installed (scripts/install-deps.sh installs it)");
  Child target({"python3", "-c",
                "import sys, time\n"
                "def wait_for_peer():\n"
                "    time.sleep(600)\n"
                "print('ready', flush=True)\n"
                "wait_for_peer()\n"});
  // The interpreter prints before it reaches the sleep: give it a moment there.
  REQUIRE(wait_for([&] { return state_of(target.pid) == 'S'; }, 10, kPoll));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  ProcessStacks s = fr::daemon::capture_process(target.pid, deadline_in(30), 0);
  REQUIRE(s.error.empty());
  REQUIRE(fr::daemon::is_python_process(target.pid));
  fr::daemon::add_python_frames("", deadline_in(30), &s);
  INFO("py-spy: " << s.python_error);
  REQUIRE(s.python_error.empty());
  REQUIRE(s.taker == "libdw+py-spy");
  const ThreadStack& t = main_thread(s);
  std::vector<std::string> fns = functions(t);
  auto sleep = std::find(fns.begin(), fns.end(), "time_sleep");
  auto caller = std::find(fns.begin(), fns.end(), "wait_for_peer");
  REQUIRE(sleep != fns.end());
  REQUIRE(caller != fns.end());
  REQUIRE(sleep < caller);
  REQUIRE(t.frames[size_t(caller - fns.begin())].kind == "python");
  REQUIRE(t.frames[size_t(caller - fns.begin())].line == 3);
  REQUIRE(t.frames[size_t(sleep - fns.begin())].kind == "native");
  REQUIRE(status_field(target.pid, "TracerPid") == "0");
}

// ---- GPU health -------------------------------------------------------------------------------

namespace {

const std::string kNvml = kBuild + "/sim/lib/libnvidia-ml.so.1";

struct SimNvml {
  TempDir tmp{"fr-context"};
  const std::string dir = tmp.path;
  std::string file = dir + "/nvml.conf";
  explicit SimNvml(const std::string& text) {
    std::ofstream(file) << text;
    ::setenv("FR_SIM_NVML", file.c_str(), 1);
  }
  ~SimNvml() { ::unsetenv("FR_SIM_NVML"); }
};

}  // namespace

TEST_CASE("nvml: absent or failing NVML is one line, never an error of the daemon", "[nvml]") {
  ::unsetenv("FR_SIM_NVML");
  fr::daemon::GpuMonitor none;
  std::string why;
  REQUIRE_FALSE(none.open("libnvidia-ml-absent.so.1", &why));
  REQUIRE(why.find("NVML not available: cannot load libnvidia-ml-absent.so.1") == 0);
  REQUIRE(none.read(true).error == why);
  REQUIRE(none.read(true).gpus.empty());
  fr::daemon::GpuMonitor no_driver;  // the library is there, the driver is not
  REQUIRE_FALSE(no_driver.open(kNvml, &why));
  REQUIRE(why == "NVML not available: nvmlInit failed: Driver Not Loaded");
}

TEST_CASE("nvml: the full reading of an incident, with what a GPU does not support named",
          "[nvml]") {
  SimNvml sim(
      "driver 550.54.15\n"
      "gpu 0000:3b:00.0 pids=101,102 temp=71 power=310000 throttle=0x41 ecc_corrected=5 "
      "ecc_uncorrected=2 retired_pending=1 remap_pending=1 pcie_replays=7 nvlinks=4 "
      "nvlink_down=2\n"
      "gpu 0000:3c:00.0 unsupported=ecc,remap,pcie,nvlink,retired\n");
  fr::daemon::GpuMonitor m;
  std::string why;
  REQUIRE(m.open(kNvml, &why));
  fr::log::NodeGpus g = m.read(true);
  REQUIRE(g.error.empty());
  REQUIRE(g.driver_version == "550.54.15");
  REQUIRE(g.gpus.size() == 2);
  const auto& a = g.gpus[0];
  REQUIRE(a.pci_bus_id == "0000:3b:00.0");
  REQUIRE(a.pids == std::vector<int>{101, 102});
  REQUIRE(a.temperature_c == 71);
  REQUIRE(a.power_mw == 310000);
  REQUIRE(a.throttle_names == std::vector<std::string>{"GpuIdle", "HwThermalSlowdown"});
  REQUIRE(a.ecc_volatile_corrected == 5);
  REQUIRE(a.ecc_volatile_uncorrected == 2);
  REQUIRE(a.retired_pages_pending == 1);
  REQUIRE(a.remapped_rows_pending == 1);
  REQUIRE(a.pcie_replays == 7);
  REQUIRE(a.nvlinks.size() == 4);
  REQUIRE_FALSE(a.nvlinks[2].active);
  REQUIRE(a.nvlinks[2].recovery_errors == 1);
  REQUIRE(a.unavailable.empty());
  const auto& b = g.gpus[1];
  REQUIRE(b.ecc_volatile_corrected == -1);
  REQUIRE(b.remapped_rows_pending == -1);
  REQUIRE(b.pcie_replays == -1);
  REQUIRE(b.nvlinks.empty());
  auto named = [&](const std::string& s) {
    return std::find(b.unavailable.begin(), b.unavailable.end(), s) != b.unavailable.end();
  };
  REQUIRE(named("ecc: Not Supported"));
  REQUIRE(named("remapped_rows: Not Supported"));
  REQUIRE(named("pcie_replays: Not Supported"));
  REQUIRE(named("nvlink: Not Supported"));
  // The cheap reading of a heartbeat leaves the incident's fields out.
  fr::log::NodeGpus cheap = m.read(false);
  REQUIRE(cheap.gpus[0].temperature_c == 71);
  REQUIRE(cheap.gpus[0].ecc_volatile_uncorrected == -1);
  REQUIRE(cheap.gpus[0].pids.empty());
  // What is written is what is read back.
  fr::log::NodeGpus back;
  std::string err;
  REQUIRE(fr::log::parse_gpus(fr::log::gpus_to_text(g), &back, &err));
  REQUIRE(back.gpus.size() == 2);
  REQUIRE(back.gpus[0].nvlinks.size() == 4);
  REQUIRE(back.gpus[1].unavailable == b.unavailable);
}

namespace {

// A process in a PID namespace of its own (unshare -Urpf --mount-proc): `unshare` forks it as pid
// 1 there; `host_pid` is its pid here. Killed with its unshare parent on destruction.
struct NamespacedSleeper {
  pid_t unshare_pid = -1;
  int host_pid = 0;
  NamespacedSleeper() {
    unshare_pid = ::fork();
    if (unshare_pid == 0) {
      ::execl("/usr/bin/unshare", "unshare", "-Urpf", "--mount-proc", "/bin/sleep", "60",
              static_cast<char*>(nullptr));
      ::_exit(127);
    }
    // The forked child of unshare, once it is there.
    fr::test::wait_for(
        [&] {
          std::ifstream f("/proc/" + std::to_string(unshare_pid) + "/task/" +
                          std::to_string(unshare_pid) + "/children");
          int pid = 0;
          if (f >> pid) host_pid = pid;
          return host_pid > 0;
        },
        10);
  }
  ~NamespacedSleeper() {
    if (host_pid > 0) ::kill(host_pid, SIGKILL);
    if (unshare_pid > 0) {
      ::kill(unshare_pid, SIGKILL);
      ::waitpid(unshare_pid, nullptr, 0);
    }
  }
};

}  // namespace

TEST_CASE("nvml: the host PIDs NVML reports are mapped to the PIDs processes see in a namespace",
          "[nvml]") {
  if (std::system("/usr/bin/unshare -Urpf --mount-proc /bin/true 2>/dev/null") != 0) {
    FR_SKIP("cannot create a PID namespace here (unshare -Urpf is not permitted)");
  }
  struct stat self_ns {};
  if (::stat("/proc/self/ns/pid", &self_ns) != 0 || self_ns.st_ino != 0xEFFFFFFCu) {
    FR_SKIP(
        "this test runs in a nested PID namespace: NVML's PIDs (the initial namespace's) "
        "cannot be mapped from here");
  }
  NamespacedSleeper ns;
  REQUIRE(ns.host_pid > 0);
  // The emulated NVML reports host PIDs, as the driver does: the namespaced process, and this one.
  const int self = int(::getpid());
  SimNvml sim("gpu 0000:3b:00.0 pids=" + std::to_string(ns.host_pid) + "," + std::to_string(self) +
              "\n");
  fr::daemon::GpuMonitor m;
  std::string why;
  REQUIRE(m.open(kNvml, &why));
  fr::log::NodeGpus g = m.read(true);
  REQUIRE(g.gpus.size() == 1);
  CHECK(g.gpus[0].pids == std::vector<int>{ns.host_pid, self});
  // Inside its namespace the sleeper is pid 1 (what a rank there records); this process shares
  // the reader's namespace, so it is itself.
  CHECK(g.gpus[0].own_pids == std::vector<int>{1, self});
  fr::log::NodeGpus back;
  std::string err;
  REQUIRE(fr::log::parse_gpus(fr::log::gpus_to_text(g), &back, &err));
  CHECK(back.gpus[0].own_pids == g.gpus[0].own_pids);
}

TEST_CASE("nvml: 36 links are read, and the current calls fall back to the deprecated ones",
          "[nvml]") {
  // GPU 0: 36 NVLinks (NVML_NVLINK_MAX_LINKS of today's nvml.h); only the current calls answer
  // (the deprecated ones refuse, as a driver that dropped them).
  // GPU 1: a driver whose nvmlDeviceGetTemperatureV and nvmlDeviceGetCurrentClocksEventReasons
  // refuse: the deprecated calls give the same values, and nothing is named unavailable.
  SimNvml sim(
      "gpu 0000:3b:00.0 temp=66 throttle=0x4 nvlinks=36 nvlink_down=35 "
      "unsupported=temperature_legacy,throttle_legacy\n"
      "gpu 0000:3c:00.0 temp=52 throttle=0x40 unsupported=temperature_v,clocks_event\n");
  fr::daemon::GpuMonitor m;
  std::string why;
  REQUIRE(m.open(kNvml, &why));
  fr::log::NodeGpus g = m.read(true);
  REQUIRE(g.gpus.size() == 2);
  const auto& a = g.gpus[0];
  CHECK(a.temperature_c == 66);
  CHECK(a.throttle_names == std::vector<std::string>{"SwPowerCap"});
  REQUIRE(a.nvlinks.size() == 36);
  CHECK(a.nvlinks[35].link == 35);
  CHECK_FALSE(a.nvlinks[35].active);
  CHECK(a.nvlinks[34].active);
  const auto& b = g.gpus[1];
  CHECK(b.temperature_c == 52);
  CHECK(b.throttle_names == std::vector<std::string>{"HwThermalSlowdown"});
  for (const std::string& u : b.unavailable) {
    INFO(u);
    CHECK(u.rfind("temperature", 0) != 0);
    CHECK(u.rfind("throttle", 0) != 0);
  }
}

TEST_CASE("nvml: Xid events after the start are kept with their time", "[nvml]") {
  SimNvml sim("gpu 0000:3b:00.0 pids=7\ngpu 0000:3c:00.0\nxid 0000:3b:00.0 13\n");  // 13: before us
  fr::daemon::GpuMonitor m;
  std::string why;
  REQUIRE(m.open(kNvml, &why));
  const int64_t t0 = fr::daemon::real_ns();
  std::ofstream(sim.file + ".events", std::ios::app) << "xid 0000:3c:00.0 79\n";
  REQUIRE(wait_for([&] { return !m.read(false).gpus[1].xids.empty(); }, 10, kPoll));
  fr::log::NodeGpus g = m.read(true);
  REQUIRE(g.gpus[0].xids.empty());
  REQUIRE(g.gpus[1].xids.size() == 1);
  REQUIRE(g.gpus[1].xids[0].xid == 79);
  REQUIRE(g.gpus[1].xids[0].time_ns >= t0);
}

TEST_CASE("side files: wrong schema and hostile sizes are refused or bounded", "[stacks]") {
  ProcessStacks s;
  std::string err;
  REQUIRE_FALSE(fr::log::parse_stacks("{\"schema\":\"fr-stacks/9\"}", &s, &err));
  REQUIRE(err == "schema 'fr-stacks/9', expected fr-stacks/1");
  REQUIRE_FALSE(fr::log::parse_stacks("not json", &s, &err));
  REQUIRE(err == "not a JSON object");
  std::string frames;
  for (int i = 0; i < 1000; ++i)
    frames += std::string(i ? "," : "") + "{\"function\":\"f\",\"kind\":\"evil\"}";
  REQUIRE(fr::log::parse_stacks(
      "{\"schema\":\"fr-stacks/1\",\"pid\":3,\"threads\":[{\"tid\":3,\"frames\":[" + frames +
          "]}]}",
      &s, &err));
  REQUIRE(s.threads[0].frames.size() == fr::log::kMaxStackFrames);
  REQUIRE(s.threads[0].frames[0].kind == "native");
  fr::log::NodeGpus g;
  REQUIRE_FALSE(fr::log::parse_gpus("{\"schema\":\"fr-stacks/1\"}", &g, &err));
  REQUIRE(err == "schema 'fr-stacks/1', expected fr-gpu/1");
}
