// The launcher: prepares the run (build outputs, output folders, the progress board), starts the
// ranks (and the frd daemons with --daemons), stops and cleans up everything it made, and runs
// the whole job in order (run_job). Single-threaded until the analysis, so everything a forked
// child needs is prepared before fork().
#include "launcher.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "common/files.h"
#include "launch.h"

namespace fr::simjob {

namespace fs = std::filesystem;

volatile sig_atomic_t g_signal = 0;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

uint64_t realtime_ns() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

std::string read_small_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

namespace {

void on_signal(int sig) { g_signal = sig; }

// The build directory is the parent of the directory holding this executable (build/bin).
std::string build_dir() {
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return {};
  return exe.parent_path().parent_path().string();
}

std::string fresh_job_id() {
  std::random_device rd;
  char buf[64];
  std::snprintf(buf, sizeof buf, "simjob-%llx-%d-%04x",
                static_cast<unsigned long long>(realtime_ns() / 1000000ull), ::getpid(),
                static_cast<unsigned>(rd() & 0xffff));
  return buf;
}

// Removes every /dev/shm object whose name starts with `prefix` (the emulation's per-run prefix).
int remove_shm(const std::string& prefix) {
  if (prefix.empty()) return 0;
  int removed = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/dev/shm", ec)) {
    std::string name = e.path().filename().string();
    if (name.rfind(prefix, 0) == 0 && fs::remove_all(e.path(), ec) > 0) ++removed;
  }
  return removed;
}

}  // namespace

bool Job::prepare() {
  build = build_dir();
  if (build.empty()) {
    err("cannot locate the build directory from /proc/self/exe");
    return false;
  }
  if (!find_programs()) return false;

  std::error_code ec;
  out = fs::absolute(o.out_dir, ec).lexically_normal().string();
  while (out.size() > 1 && out.back() == '/') out.pop_back();
  fs::create_directories(out, ec);
  if (ec || !fs::is_directory(out)) {
    err("cannot create --out " + o.out_dir + ": " + (ec ? ec.message() : "not a directory"));
    return false;
  }
  // Outputs of an earlier run in the same directory would mix with this one's.
  for (const char* old : {"/dumps", "/incidents", "/.simjob", "/result.json"})
    fs::remove_all(out + old, ec);
  run_dir = out + "/.simjob";
  fs::create_directories(run_dir, ec);
  for (int n = 0; n < o.shape.nodes; ++n) {
    fs::create_directories(node_log_dir(n), ec);
    if (ec) {
      err("cannot create " + node_log_dir(n) + ": " + ec.message());
      return false;
    }
    for (const auto& e : fs::directory_iterator(node_log_dir(n), ec))
      if (e.path().extension() == ".frlog") fs::remove(e.path(), ec);
  }

  job_id = fresh_job_id();
  shm_prefix = "frsim-" + job_id + "-";  // FRSIM_SHM_PREFIX is this with a leading '/'
  // Kept for post-mortems: if the launcher itself is killed, this names what it left in /dev/shm.
  std::string id_error;
  if (!fr::files::write_atomic(run_dir + "/job_id", job_id + "\n", &id_error)) {
    err(id_error);
    return false;
  }
  return map_board();
}

// The programs and libraries the run needs, in the build directory; the first one missing is said.
bool Job::find_programs() {
  rank_exe = build + "/bin/fr-simjob-rank";
  if (o.python) {
    rank_exe = build + "/bin/fr-simjob-rank.py";
    python_exe = fr::files::find_on_path("python3");  // execve takes a path
    if (python_exe.empty()) {
      err("--python: no python3 on PATH");
      return false;
    }
  }
  sim_lib = build + "/sim/lib";
  agent_lib = build + "/lib/libfr_agent.so";
  frd_exe = build + "/bin/frd";
  std::vector<std::pair<std::string, std::string>> needed = {
      {rank_exe, o.python ? "the Python rank program (cli/fr-simjob/rank.py)"
                          : "the rank program (build target fr-simjob-rank)"},
      {sim_lib + "/libnccl.so.2", "the NCCL emulation (sim/)"},
      {sim_lib + "/libcuda.so.1", "the CUDA driver emulation (sim/)"}};
  if (o.agent) needed.push_back({agent_lib, "the agent (agent/)"});
  if (o.daemons) needed.push_back({frd_exe, "frd (cli/frd)"});
  for (auto& [path, what] : needed) {
    if (::access(path.c_str(), R_OK) != 0) {
      err("missing " + path + ": " + what + " is not built in " + build);
      return false;
    }
  }
  return true;
}

// The progress board every rank writes into (progress.h), mapped shared.
bool Job::map_board() {
  std::string board_path = run_dir + "/board";
  board_bytes = ProgressBoard::bytes_for(o.shape.world());
  int fd = ::open(board_path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0 || ::ftruncate(fd, static_cast<off_t>(board_bytes)) != 0) {
    err("cannot create " + board_path + ": " + std::strerror(errno));
    if (fd >= 0) ::close(fd);
    return false;
  }
  void* p = ::mmap(nullptr, board_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) {
    err("cannot map " + board_path + ": " + std::strerror(errno));
    return false;
  }
  board = static_cast<ProgressBoard*>(p);
  board->ranks = static_cast<uint32_t>(o.shape.world());
  __atomic_store_n(&board->magic, kProgressMagic, __ATOMIC_RELEASE);
  return true;
}

// Written before the daemons start, and again once the ranks run (with their PIDs).
void Job::write_nvml(int node) {
  std::string text = "driver 550.54.15\n";
  for (int l = 0; l < o.shape.ranks_per_node; ++l) {
    int r = node * o.shape.ranks_per_node + l;
    text += "gpu " + sim_gpu_bus_id(l) + " nvlinks=4";
    for (const Fault& f : o.faults)  // a slow GPU shows why: its clocks slowed down (thermal)
      if (f.rank == r && f.kind == FaultKind::kGpuSlow) text += " throttle=0x40 temp=91";
    if (r < static_cast<int>(ranks.size()) && ranks[r].pid > 0)
      text += " pids=" + std::to_string(ranks[r].pid);
    text += "\n";
  }
  std::string error;
  if (!fr::files::write_atomic(nvml_file(node), text, &error)) Job::err(error);
}

bool Job::start_ranks() {
  const Shape& s = o.shape;
  auto visible_devices = [&](int node) {
    std::string list;
    for (int i = 0; i < s.ranks_per_node; ++i)
      list += (i ? "," : "") + std::to_string(node * s.ranks_per_node + i);
    return list;
  };
  // clang-format off
  std::vector<std::string> args = {rank_exe,
      "--nodes",          std::to_string(s.nodes),
      "--ranks-per-node", std::to_string(s.ranks_per_node),
      "--tp",             std::to_string(s.tp),
      "--pp",             std::to_string(s.pp),
      "--steps",          std::to_string(s.steps),
      "--step-ms",        std::to_string(s.step_ms),
      "--step-jitter",    std::to_string(s.jitter),
      "--pause-step",     std::to_string(s.pause_step),
      "--pause-ms",       std::to_string(s.pause_ms),
      "--pause-every",    std::to_string(s.pause_every),
      "--seed",           std::to_string(s.seed)};
  // clang-format on
  if (o.graphs) args.push_back("--graphs");
  if (o.run_ahead) args.push_back("--run-ahead");
  if (s.elastic >= 0) {
    args.push_back("--elastic");
    args.push_back(std::to_string(s.elastic));
  }
  for (const Fault& f : o.faults) {
    args.push_back("--fault");
    args.push_back(f.to_spec());
  }
  if (o.python) args.insert(args.begin(), python_exe);
  const char* old_ld = std::getenv("LD_LIBRARY_PATH");
  std::string ld_path = sim_lib + (old_ld && *old_ld ? ":" + std::string(old_ld) : "");
  const int gpu_us = effective_gpu_us(s, o.faults);
  std::vector<ChildSpec> specs(s.world());
  for (int r = 0; r < s.world(); ++r) {
    Position p = position_of(s, r);
    std::vector<std::pair<std::string, std::string>> env = {
        {"RANK", std::to_string(r)},
        {"WORLD_SIZE", std::to_string(s.world())},
        {"LOCAL_RANK", std::to_string(p.local_rank)},
        {"LOCAL_WORLD_SIZE", std::to_string(s.ranks_per_node)},
        {"GROUP_RANK", std::to_string(p.node)},
        {"FR_JOB_ID", job_id},
        {"FR_LOG_DIR", node_log_dir(p.node)},
        {"LD_LIBRARY_PATH", ld_path},
        {"FRSIM_SHM_PREFIX", "/" + shm_prefix},
        // Ranks of different nodes talk over NET in the emulation's transport model.
        {"FRSIM_NODE", std::to_string(p.node)},
        // Each node has its own GPUs; a rank takes the one at LOCAL_RANK, as launchers do.
        {"CUDA_VISIBLE_DEVICES", visible_devices(p.node)},
        {kEnvBoard, run_dir + "/board"},
        {kEnvRunDir, run_dir},
        {kEnvSimNvml, nvml_file(p.node)},
        // The emulated GPU's pace, which gpu-slow and link-slow multiply (sim/nccl/pace.cpp).
        {"FRSIM_KERNEL_US", std::to_string(gpu_us)},
        {"FRSIM_STEP_US", std::to_string(gpu_us)},
    };
    if (o.agent) {
      env.push_back({"LD_PRELOAD", agent_lib});
      // The agent is also NCCL's profiler plugin (docs/agent.md), unless the user has one.
      const char* prof = std::getenv("NCCL_PROFILER_PLUGIN");
      env.push_back({"NCCL_PROFILER_PLUGIN", prof != nullptr && *prof ? prof : agent_lib});
    } else {
      env.push_back({"LD_PRELOAD", ""});
    }
    specs[r].argv = args;
    specs[r].envp = make_env(env);
    specs[r].log_path = node_dir(p.node) + "/rank" + std::to_string(r) + ".log";
  }
  if (s.elastic >= 0) {  // the successor of the rank that leaves: same place, one flag more
    joiner_spec = specs[s.world() - 1];
    joiner_spec.argv.push_back("--join");
    joiner_spec.log_path = node_dir(position_of(s, s.world() - 1).node) + "/rank" +
                           std::to_string(s.world() - 1) + "-joiner.log";
  }
  ranks.assign(s.world(), {});
  ranks_started = Clock::now();
  for (int r = 0; r < s.world(); ++r) {
    pid_t pid = spawn(specs[r], rank_pgid);
    if (pid < 0) {
      err("cannot start rank " + std::to_string(r) + ": " + std::strerror(errno));
      return false;
    }
    if (rank_pgid == 0) rank_pgid = pid;
    ranks[r].pid = pid;
  }
  // Each emulated GPU now runs its rank: NVML lists the rank's PID on it.
  for (int n = 0; n < s.nodes; ++n) write_nvml(n);
  say("job " + job_id + ": " + std::to_string(s.world()) + " ranks on " + std::to_string(s.nodes) +
      " node(s), tp " + std::to_string(s.tp) + ", pp " + std::to_string(s.pp) + ", dp " +
      std::to_string(s.dp()) + ", " + std::to_string(s.steps) + " steps" +
      (o.agent ? "" : ", no agent"));
  return true;
}

// --elastic: the highest rank left (its exit code says so); a fresh process takes its place.
bool Job::start_joiner() {
  int r = o.shape.world() - 1;
  left = ranks[r];
  board->slots[r].phase.store(static_cast<uint32_t>(RankPhase::kStarting));
  pid_t pid = spawn(joiner_spec, rank_pgid);
  if (pid < 0) {
    err("cannot start the joining rank " + std::to_string(r) + ": " + std::strerror(errno));
    return false;
  }
  ranks[r] = ChildState{};
  ranks[r].pid = pid;
  ranks[r].log = joiner_spec.log_path;
  joiner_started = Clock::now();
  say("rank " + std::to_string(r) + " left at step " + std::to_string(o.shape.elastic) +
      "; a fresh process (pid " + std::to_string(pid) + ") joins with ncclCommGrow");
  return true;
}

// The daemons share a token file of this run (the coordinator creates it), not the user's default.
std::string Job::token_file() const { return run_dir + "/frd-token"; }
std::string Job::incidents_dir() const { return out + "/incidents"; }

bool Job::start_coordinator(const std::string& port_file) {
  ChildSpec coord;
  coord.argv = {frd_exe,          "coordinator",
                "--listen",       "127.0.0.1:0",
                "--port-file",    port_file,
                "--dump-dir",     incidents_dir(),
                "--job-id",       job_id,
                "--stall-after",  o.stall_after,
                "--expect-ranks", std::to_string(o.shape.world())};
  coord.envp = make_env({{"FR_TOKEN_FILE", token_file()}});
  coord.log_path = out + "/coordinator.log";
  pid_t pid = spawn(coord, 0);
  if (pid < 0) {
    daemon_error = std::string("cannot start frd coordinator: ") + std::strerror(errno);
    return false;
  }
  daemon_pgid = pid;
  daemons.emplace_back();
  daemons.back().pid = pid;
  daemons.back().role = "coordinator";
  daemons.back().log = coord.log_path;
  return true;
}

// Polls ready() every 10 ms until it holds; false, with daemon_error, when daemon d exits first
// or 30 s pass (late_error) or the launcher is interrupted.
bool Job::wait_for_daemon(size_t d, const std::function<bool()>& ready,
                          const std::string& late_error) {
  auto t0 = Clock::now();
  while (!ready()) {
    reap(daemons);
    if (daemons[d].exited) {
      daemon_error = "frd " + daemons[d].role + " exited at start (see " + daemons[d].log + ")";
      return false;
    }
    if (seconds_since(t0) > 30 || g_signal) {
      daemon_error = late_error;
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

// The coordinator writes its port once it listens. Empty: it exited or wrote none in 30 s.
std::string Job::wait_for_port(const std::string& port_file) {
  std::string port;
  auto written = [&] {
    std::string text = read_small_file(port_file);
    while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
    if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos) return false;
    port = text;
    return true;
  };
  if (!wait_for_daemon(0, written,
                       "frd coordinator wrote no port file " + port_file + " within 30 s"))
    return "";
  return port;
}

bool Job::start_node(int n, const std::string& port) {
  write_nvml(n);
  ChildSpec node;
  // clang-format off
  node.argv = {frd_exe, "node",
      "--coordinator",        "127.0.0.1:" + port,
      "--log-dir",            node_log_dir(n),
      "--node-name",          "node" + std::to_string(n),
      "--heartbeat-interval", "0.2",
      "--dump-dir",           node_dir(n) + "/spool",
      "--nvml-lib",           sim_lib + "/libnvidia-ml.so.1"};
  // clang-format on
  if (o.stack_budget_s > 0) {
    node.argv.push_back("--stack-budget");
    node.argv.push_back(std::to_string(o.stack_budget_s));
  }
  if (o.gpu_sample_us >= 0) {
    node.argv.push_back("--gpu-sample-us");
    node.argv.push_back(std::to_string(o.gpu_sample_us));
  }
  if (o.shared_dump_dir) {
    node.argv.push_back("--shared-dump-dir");
    node.argv.push_back(incidents_dir());
  }
  node.envp = make_env({{"FR_TOKEN_FILE", token_file()}, {kEnvSimNvml, nvml_file(n)}});
  node.log_path = node_dir(n) + "/frd-node.log";
  pid_t pid = spawn(node, daemon_pgid);
  if (pid < 0) {
    daemon_error = std::string("cannot start frd node: ") + std::strerror(errno);
    return false;
  }
  daemons.emplace_back();
  daemons.back().pid = pid;
  daemons.back().role = "node" + std::to_string(n);
  daemons.back().log = node.log_path;
  return true;
}

// As on a real cluster, the sidecars run before the job starts: each node daemon has read its
// GPUs (and registered for their Xid events) and reached the coordinator.
bool Job::wait_for_nodes() {
  for (size_t d = 1; d < daemons.size(); ++d) {
    auto connected = [&] {
      return read_small_file(daemons[d].log).find("connected to") != std::string::npos;
    };
    if (!wait_for_daemon(d, connected,
                         "frd " + daemons[d].role +
                             " did not reach the coordinator within 30 s (see " + daemons[d].log +
                             ")"))
      return false;
  }
  return true;
}

bool Job::start_daemons() {
  std::error_code ec;
  fs::create_directories(incidents_dir(), ec);
  std::string port_file = run_dir + "/coordinator.port";
  if (!start_coordinator(port_file)) return false;
  std::string port = wait_for_port(port_file);
  if (port.empty()) return false;
  for (int n = 0; n < o.shape.nodes; ++n)
    if (!start_node(n, port)) return false;
  if (!wait_for_nodes()) return false;
  say("frd coordinator on 127.0.0.1:" + port + ", " + std::to_string(o.shape.nodes) +
      " node daemon(s), stall after " + o.stall_after + " s");
  return true;
}

void Job::stop_everything() {
  kill_all(ranks, rank_pgid, SIGKILL);
  if (!reap_all(ranks, 10)) err("some rank processes did not die within 10 s of SIGKILL");
  // Only ranks have been reaped so far (daemons are stopped below), so this is their CPU time.
  struct rusage ru {};
  if (::getrusage(RUSAGE_CHILDREN, &ru) == 0)
    ranks_cpu_s =
        ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
  if (!daemons.empty()) {
    kill_all(daemons, daemon_pgid, SIGTERM);
    if (!reap_all(daemons, 3)) {
      kill_all(daemons, daemon_pgid, SIGKILL);
      reap_all(daemons, 5);
    }
  }
}

void Job::cleanup() {
  remove_shm(shm_prefix);
  std::error_code ec;
  fs::remove(run_dir + "/world.uid", ec);
}

double stall_after_limit_s(const LaunchOptions& o) {
  if (o.stall_after == "auto") return 30;
  return std::strtod(o.stall_after.c_str(), nullptr);
}

int run_job(const LaunchOptions& o) {
  Job job(o);
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) ::sigaction(sig, &sa, nullptr);
  ::signal(SIGPIPE, SIG_IGN);

  bool ok = false;
  try {
    ok = job.prepare();
  } catch (const std::exception& e) {
    Job::err(std::string("setup failed: ") + e.what());
  }
  if (!ok) return kExitSetup;

  bool started = true, daemons_failed = false;
  if (o.daemons && !job.start_daemons()) {
    Job::err(job.daemon_error);
    started = false;
    daemons_failed = true;
  }
  if (started && !g_signal) started = job.start_ranks();
  if (started && !g_signal) job.monitor();

  if (g_signal) job.stop_reason = "interrupted";
  bool take_snapshot = started && (job.stop_reason == "completed" || job.stop_reason == "exited" ||
                                   job.stop_reason == "stalled" || job.stop_reason == "no_verdict");
  if (take_snapshot) {
    // Live writers are copied while they are still stalled; the ranks are stopped afterwards.
    try {
      job.snapshot();
    } catch (const std::exception& e) {
      Job::err(std::string("snapshot failed: ") + e.what());
    }
  }
  job.stop_everything();
  job.cleanup();
  if (!g_signal) job.analyze();

  job.report();

  if (g_signal) return 128 + g_signal;
  if (!started) return daemons_failed ? kExitNoVerdict : kExitSetup;
  if (job.stop_reason == "no_verdict") return kExitNoVerdict;
  if (job.stop_reason == "completed" || !job.dump_set.empty()) return kExitOk;
  return kExitNoDump;
}

}  // namespace fr::simjob
