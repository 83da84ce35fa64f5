// The launcher: fork/exec of the ranks (and the frd daemons with --daemons), stall detection from
// the progress board, the dump set, cleanup and result.json. Single-threaded until the analysis,
// so everything a forked child needs is prepared before fork().
#include "launcher.h"
#include "files/files.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "log/reader.h"
#include "log/snapshot.h"
#include "progress.h"

#ifdef FR_SIMJOB_HAVE_ANALYZER
#include "analyzer/analyze.h"
#endif

extern char** environ;

namespace fr::simjob {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using json = nlohmann::json;

constexpr double kStartGraceS = 30;

volatile sig_atomic_t g_signal = 0;
void on_signal(int sig) { g_signal = sig; }

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

uint64_t realtime_ns() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

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

// A prepared child: argv and envp as owned strings and the pointer arrays execve wants.
struct ChildSpec {
  std::vector<std::string> argv, envp;
  std::string log_path;
  std::vector<char*> argv_ptrs, envp_ptrs;

  void freeze() {  // again after a copy: the pointers must name this spec's own strings
    argv_ptrs.clear();
    envp_ptrs.clear();
    for (auto& s : argv) argv_ptrs.push_back(s.data());
    argv_ptrs.push_back(nullptr);
    for (auto& s : envp) envp_ptrs.push_back(s.data());
    envp_ptrs.push_back(nullptr);
  }
};

// The parent environment without the names we set, plus ours.
std::vector<std::string> make_env(const std::vector<std::pair<std::string, std::string>>& set) {
  std::vector<std::string> out;
  for (char** e = environ; e && *e; ++e) {
    std::string kv = *e;
    std::string name = kv.substr(0, kv.find('='));
    bool replaced = false;
    for (auto& [k, v] : set) replaced |= (k == name);
    if (!replaced) out.push_back(kv);
  }
  for (auto& [k, v] : set) out.push_back(k + "=" + v);
  return out;
}

// fork + exec into process group `pgid` (0: a new group led by the child). The child dies with
// the launcher (PR_SET_PDEATHSIG), writes its output to log_path, and starts with the default
// signal mask. Returns the pid or -1.
pid_t spawn(ChildSpec& c, pid_t pgid) {
  pid_t parent = ::getpid();
  int log_fd = ::open(c.log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (log_fd < 0) return -1;
  pid_t pid = ::fork();
  if (pid < 0) {
    ::close(log_fd);
    return -1;
  }
  if (pid == 0) {
    ::setpgid(0, pgid);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::dup2(log_fd, 1);
    ::dup2(log_fd, 2);
    int devnull = ::open("/dev/null", O_RDONLY);
    if (devnull >= 0) ::dup2(devnull, 0);
    ::execve(c.argv_ptrs[0], c.argv_ptrs.data(), c.envp_ptrs.data());
    const char msg[] = "fr-simjob: exec failed\n";
    (void)!::write(2, msg, sizeof msg - 1);
    ::_exit(127);
  }
  ::setpgid(pid, pgid == 0 ? pid : pgid);  // both sides set it: no race with a later killpg
  ::close(log_fd);
  return pid;
}

struct ChildState {
  pid_t pid = -1;
  bool exited = false;
  int status = 0;
  bool stopped = false;  // still running when the launcher stopped it
  std::string role;      // daemons: "coordinator" or "node<K>"
  std::string log;       // where its output went
};

// Reaps whatever has exited; returns how many are still running.
int reap(std::vector<ChildState>& kids) {
  int running = 0;
  for (auto& k : kids) {
    if (k.pid <= 0 || k.exited) continue;
    int st = 0;
    pid_t r = ::waitpid(k.pid, &st, WNOHANG);
    if (r == k.pid) {
      k.exited = true;
      k.status = st;
    } else if (r < 0 && errno == ECHILD) {
      k.exited = true;
      k.status = 0;
    } else {
      ++running;
    }
  }
  return running;
}

// Waits for every child, up to `seconds`; returns whether all were reaped.
bool reap_all(std::vector<ChildState>& kids, double seconds) {
  auto start = Clock::now();
  while (reap(kids) > 0) {
    if (seconds_since(start) > seconds) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

void kill_all(std::vector<ChildState>& kids, pid_t pgid, int sig) {
  reap(kids);
  for (auto& k : kids)
    if (k.pid > 0 && !k.exited) k.stopped = true;
  if (pgid > 0) ::killpg(pgid, sig);
  for (auto& k : kids)
    if (k.pid > 0 && !k.exited) ::kill(k.pid, sig);
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


std::string read_small_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// The per-rank summary of a dump set: per communicator (by role: the world from init, then the
// tp, pp, dp splits in creation order) the last op the rank called and how far its GPU got.
std::string dump_summary(const std::string& dir, int max_ranks) {
  log::Manifest m;
  std::string error;
  if (!log::read_manifest(dir, &m, &error)) return "  (cannot read the manifest: " + error + ")\n";
  std::vector<const log::SnapshotProcess*> procs;
  for (const auto& p : m.processes) procs.push_back(&p);
  std::sort(procs.begin(), procs.end(), [](auto* a, auto* b) { return a->rank < b->rank; });
  std::ostringstream out;
  int shown = 0;
  for (const auto* p : procs) {
    if (shown++ == max_ranks) {
      out << "  ... " << procs.size() - max_ranks << " more rank(s)\n";
      break;
    }
    log::ReadResult rr = log::read_log(dir + "/" + p->file);
    char head[96];
    std::snprintf(head, sizeof head, "  rank %-3d %-6s %-5s", p->rank, p->host.c_str(),
                  p->alive ? "alive" : "dead");
    out << head;
    if (!rr.ok()) {
      out << " unreadable: " << rr.message << "\n";
      continue;
    }
    const log::LogFile& lf = *rr.log;
    std::vector<std::pair<std::string, uint64_t>> roles;
    std::vector<const fr_comm_entry*> splits;
    for (const auto& c : lf.comms) {
      if (c.origin == FR_ORIGIN_INIT_RANK) roles.push_back({"world", c.id});
      if (c.origin == FR_ORIGIN_SPLIT) splits.push_back(&c);
    }
    std::stable_sort(splits.begin(), splits.end(),
                     [](auto* a, auto* b) { return a->create_ns < b->create_ns; });
    const char* names[] = {"tp", "pp", "dp"};
    for (size_t i = 0; i < splits.size() && i < 3; ++i) roles.push_back({names[i], splits[i]->id});
    for (const auto& [role, id] : roles) {
      const log::Record* last = nullptr;
      for (const auto& rec : lf.records)
        if (rec.raw.comm_id == id && (log::op_is_collective(rec.raw.op) || log::op_is_p2p(rec.raw.op)))
          last = &rec;
      out << " | " << role << " ";
      if (!last) {
        out << "-";
        continue;
      }
      out << log::op_name(last->raw.op) << " #" << last->raw.seq << " "
          << log::gpu_state_name(last->gpu_state);
    }
    out << "\n";
  }
  return out.str();
}

// ---- the job -----------------------------------------------------------------------------------

struct Job {
  const LaunchOptions& o;
  std::string build, out, run_dir, job_id, shm_prefix;
  std::string rank_exe, sim_lib, agent_lib, frd_exe, python_exe;
  ProgressBoard* board = nullptr;
  size_t board_bytes = 0;
  std::vector<ChildState> ranks;
  pid_t rank_pgid = 0;
  // --elastic: how the fresh process of the highest rank is started, and the process it replaced.
  ChildSpec joiner_spec;
  ChildState left;
  Clock::time_point joiner_started;
  std::vector<ChildState> daemons;  // [0] coordinator, then one node per simulated node
  pid_t daemon_pgid = 0;
  Clock::time_point start = Clock::now();
  Clock::time_point ranks_started, ranks_ended;  // job_s: from the first fork to the last exit

  std::string stop_reason;  // completed | exited | stalled | incident | interrupted | no_verdict
  std::string dump_set;     // empty: none
  json snapshot_info;       // processes, skipped
  json analysis;            // null: none
  std::string analysis_error, daemon_error;
  double stalled_for_s = 0;
  double ranks_cpu_s = -1;  // user + system CPU of the reaped rank processes

  explicit Job(const LaunchOptions& opts) : o(opts) {}

  void say(const std::string& line) const {
    if (!o.quiet) std::printf("fr-simjob: %s\n", line.c_str());
    std::fflush(stdout);
  }
  static void err(const std::string& line) { std::fprintf(stderr, "fr-simjob: %s\n", line.c_str()); }

  std::string node_dir(int node) const { return out + "/node" + std::to_string(node); }
  // The node's emulated NVML (sim/nvml): one GPU per local rank, with the rank's PID once
  // it runs. The frd node reads it through the emulated libnvidia-ml.so.1.
  std::string nvml_file(int node) const { return node_dir(node) + "/nvml.conf"; }
  void write_nvml(int node) {
    std::string text = "driver 550.54.15\n";
    for (int l = 0; l < o.shape.ranks_per_node; ++l) {
      int r = node * o.shape.ranks_per_node + l;
      text += "gpu " + sim_gpu_bus_id(l) + " nvlinks=4";
      if (r < static_cast<int>(ranks.size()) && ranks[r].pid > 0) text += " pids=" + std::to_string(ranks[r].pid);
      text += "\n";
    }
    std::string error;
    if (!fr::files::write_atomic(nvml_file(node), text, &error)) Job::err(error);
  }
  std::string node_log_dir(int node) const { return node_dir(node) + "/shm"; }

  bool prepare();
  bool start_daemons();
  bool start_ranks();
  bool start_joiner();
  void monitor();
  bool snapshot();
  void analyze();
  void stop_everything();
  void cleanup();
  std::string find_incident_analysis() const;
  json result_json() const;
  uint64_t total_progress() const;
};

bool Job::prepare() {
  build = build_dir();
  if (build.empty()) {
    err("cannot locate the build directory from /proc/self/exe");
    return false;
  }
  rank_exe = build + "/bin/fr-simjob-rank";
  if (o.python) {
    rank_exe = build + "/bin/fr-simjob-rank.py";
    // execve takes a path: python3 as the shell would find it.
    const char* path = std::getenv("PATH");
    std::string dirs = path ? path : "/usr/local/bin:/usr/bin:/bin";
    for (size_t pos = 0; python_exe.empty() && pos <= dirs.size();) {
      size_t end = dirs.find(':', pos);
      if (end == std::string::npos) end = dirs.size();
      std::string cand = dirs.substr(pos, end - pos) + "/python3";
      if (end > pos && ::access(cand.c_str(), X_OK) == 0) python_exe = cand;
      pos = end + 1;
    }
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

  std::error_code ec;
  out = fs::absolute(o.out_dir, ec).lexically_normal().string();
  while (out.size() > 1 && out.back() == '/') out.pop_back();
  fs::create_directories(out, ec);
  if (ec || !fs::is_directory(out)) {
    err("cannot create --out " + o.out_dir + ": " + (ec ? ec.message() : "not a directory"));
    return false;
  }
  // Outputs of an earlier run in the same directory would mix with this one's.
  for (const char* old : {"/dumps", "/incidents", "/.simjob", "/result.json"}) fs::remove_all(out + old, ec);
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

  // The progress board.
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

bool Job::start_ranks() {
  const Shape& s = o.shape;
  auto visible_devices = [&](int node) {
    std::string list;
    for (int i = 0; i < s.ranks_per_node; ++i)
      list += (i ? "," : "") + std::to_string(node * s.ranks_per_node + i);
    return list;
  };
  std::vector<std::string> args = {rank_exe,
                                   "--nodes", std::to_string(s.nodes),
                                   "--ranks-per-node", std::to_string(s.ranks_per_node),
                                   "--tp", std::to_string(s.tp),
                                   "--pp", std::to_string(s.pp),
                                   "--steps", std::to_string(s.steps),
                                   "--step-ms", std::to_string(s.step_ms),
                                   "--step-jitter", std::to_string(s.jitter),
                                   "--pause-step", std::to_string(s.pause_step),
                                   "--pause-ms", std::to_string(s.pause_ms)};
  if (o.graphs) args.push_back("--graphs");
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
        // Each node has its own GPUs; a rank takes the one at LOCAL_RANK, as launchers do.
        {"CUDA_VISIBLE_DEVICES", visible_devices(p.node)},
        {kEnvBoard, run_dir + "/board"},
        {kEnvRunDir, run_dir},
        {kEnvSimNvml, nvml_file(p.node)},
    };
    if (o.agent) {
      env.push_back({"LD_PRELOAD", agent_lib});
    } else {
      env.push_back({"LD_PRELOAD", ""});
    }
    specs[r].argv = args;
    specs[r].envp = make_env(env);
    specs[r].log_path = node_dir(p.node) + "/rank" + std::to_string(r) + ".log";
    specs[r].freeze();
  }
  if (s.elastic >= 0) {  // the successor of the rank that leaves: same place, one flag more
    joiner_spec = specs[s.world() - 1];
    joiner_spec.argv.push_back("--join");
    joiner_spec.log_path = node_dir(position_of(s, s.world() - 1).node) + "/rank" +
                           std::to_string(s.world() - 1) + "-joiner.log";
    joiner_spec.freeze();
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
  say("job " + job_id + ": " + std::to_string(s.world()) + " ranks on " +
      std::to_string(s.nodes) + " node(s), tp " + std::to_string(s.tp) + ", pp " +
      std::to_string(s.pp) + ", dp " + std::to_string(s.dp()) + ", " + std::to_string(s.steps) +
      " steps" + (o.agent ? "" : ", no agent"));
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

bool Job::start_daemons() {
  std::error_code ec;
  std::string incidents = out + "/incidents";
  fs::create_directories(incidents, ec);
  std::string port_file = run_dir + "/coordinator.port";
  const std::string& stall = o.stall_after;
  ChildSpec coord;
  coord.argv = {frd_exe, "coordinator", "--listen", "127.0.0.1:0", "--port-file", port_file,
                "--dump-dir", incidents, "--job-id", job_id, "--stall-after", stall,
                "--expect-ranks", std::to_string(o.shape.world())};
  // The daemons' token: a file of this run (the coordinator creates it), not the user's default.
  const std::string token_env = run_dir + "/frd-token";
  coord.envp = make_env({{"FR_TOKEN_FILE", token_env}});
  coord.log_path = out + "/coordinator.log";
  coord.freeze();
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

  // The coordinator writes its port once it listens.
  std::string port;
  auto t0 = Clock::now();
  while (port.empty()) {
    std::string text = read_small_file(port_file);
    while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
    if (!text.empty() && text.find_first_not_of("0123456789") == std::string::npos) port = text;
    reap(daemons);
    if (daemons[0].exited) {
      daemon_error = "frd coordinator exited at start (see " + coord.log_path + ")";
      return false;
    }
    if (seconds_since(t0) > 30 || g_signal) {
      daemon_error = "frd coordinator wrote no port file " + port_file + " within 30 s";
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  for (int n = 0; n < o.shape.nodes; ++n) {
    write_nvml(n);
    ChildSpec node;
    node.argv = {frd_exe, "node", "--coordinator", "127.0.0.1:" + port, "--log-dir",
                 node_log_dir(n), "--node-name", "node" + std::to_string(n),
                 "--heartbeat-interval", "0.2", "--dump-dir", node_dir(n) + "/spool",
                 "--nvml-lib", sim_lib + "/libnvidia-ml.so.1"};
    if (o.shared_dump_dir) {
      node.argv.push_back("--shared-dump-dir");
      node.argv.push_back(incidents);
    }
    node.envp = make_env({{"FR_TOKEN_FILE", token_env}, {kEnvSimNvml, nvml_file(n)}});
    node.log_path = node_dir(n) + "/frd-node.log";
    node.freeze();
    pid_t np = spawn(node, daemon_pgid);
    if (np < 0) {
      daemon_error = std::string("cannot start frd node: ") + std::strerror(errno);
      return false;
    }
    daemons.emplace_back();
    daemons.back().pid = np;
    daemons.back().role = "node" + std::to_string(n);
    daemons.back().log = node.log_path;
  }
  // As on a real cluster, the sidecars run before the job starts: each node daemon has read its
  // GPUs (and registered for their Xid events) and reached the coordinator.
  auto t1 = Clock::now();
  for (size_t d = 1; d < daemons.size(); ++d) {
    while (read_small_file(daemons[d].log).find("connected to") == std::string::npos) {
      reap(daemons);
      if (daemons[d].exited) {
        daemon_error = "frd " + daemons[d].role + " exited at start (see " + daemons[d].log + ")";
        return false;
      }
      if (seconds_since(t1) > 30 || g_signal) {
        daemon_error = "frd " + daemons[d].role + " did not reach the coordinator within 30 s (see " +
                       daemons[d].log + ")";
        return false;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  say("frd coordinator on 127.0.0.1:" + port + ", " + std::to_string(o.shape.nodes) +
      " node daemon(s), stall after " + stall + " s");
  return true;
}

uint64_t Job::total_progress() const {
  uint64_t sum = 0;
  for (uint32_t r = 0; r < board->ranks; ++r)
    sum += board->slots[r].progress.load(std::memory_order_relaxed);
  return sum;
}

// The first incident whose analysis.json exists (the coordinator writes it last, atomically).
std::string Job::find_incident_analysis() const {
  std::error_code ec;
  fs::path job_dir = fs::path(out) / "incidents" / job_id;
  std::vector<fs::path> found;
  for (const auto& e : fs::directory_iterator(job_dir, ec))
    if (e.is_directory(ec) && fs::exists(e.path() / "analysis.json", ec)) found.push_back(e.path());
  if (found.empty()) return {};
  std::sort(found.begin(), found.end());
  return found.front().string();
}

void Job::monitor() {
  uint64_t last = total_progress();
  auto last_change = Clock::now();
  for (;;) {
    if (g_signal) {
      stop_reason = "interrupted";
      return;
    }
    int running = reap(ranks);
    if (o.shape.elastic >= 0 && left.pid <= 0) {
      const ChildState& k = ranks[o.shape.world() - 1];
      if (k.exited && WIFEXITED(k.status) && WEXITSTATUS(k.status) == kRankExitLeft) {
        if (!start_joiner()) {
          stop_reason = "exited";
          return;
        }
        ++running;
      }
    }
    uint64_t now = total_progress();
    if (now != last) {
      last = now;
      last_change = Clock::now();
    }
    if (o.daemons) {
      std::string incident = find_incident_analysis();
      if (!incident.empty()) {
        stop_reason = "incident";
        dump_set = incident;
        stalled_for_s = seconds_since(last_change);
        return;
      }
      reap(daemons);
      if (!daemons.empty() && daemons[0].exited) {
        daemon_error = "frd coordinator exited during the job (see " + out + "/coordinator.log)";
        stop_reason = "no_verdict";
        return;
      }
    }
    if (running == 0) {
      ranks_ended = Clock::now();
      bool all_ok = true;
      for (uint32_t r = 0; r < board->ranks; ++r) {
        const ChildState& k = ranks[r];
        all_ok &= WIFEXITED(k.status) && WEXITSTATUS(k.status) == 0 &&
                  board->slots[r].steps_done.load() == static_cast<uint64_t>(o.shape.steps);
      }
      stop_reason = all_ok ? "completed" : "exited";
      if (o.daemons && !all_ok) {
        // Every rank is gone: give the coordinator its chance to report the deaths.
        auto t0 = Clock::now();
        while (seconds_since(t0) < o.verdict_timeout_s && !g_signal) {
          std::string incident = find_incident_analysis();
          if (!incident.empty()) {
            stop_reason = "incident";
            dump_set = incident;
            return;
          }
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        daemon_error = "frd coordinator gave no verdict within " +
                       std::to_string(static_cast<int>(o.verdict_timeout_s)) + " s";
        stop_reason = "no_verdict";
      }
      return;
    }
    double idle = seconds_since(last_change);
    // A rank that has not reached main yet (exec and library loading on a loaded machine) is
    // slow, not stalled: it gets a longer grace before the job counts as stuck.
    bool starting = false;
    for (uint32_t r = 0; r < board->ranks; ++r)
      starting |= !ranks[r].exited &&
                  board->slots[r].phase.load() == static_cast<uint32_t>(RankPhase::kStarting);
    bool recent = seconds_since(start) < kStartGraceS ||
                  (left.pid > 0 && seconds_since(joiner_started) < kStartGraceS);
    if (starting && recent) idle = 0;
    if (o.daemons) {
      if (idle > stall_after_limit_s(o) + o.verdict_timeout_s) {
        daemon_error = "frd coordinator gave no verdict within " +
                       std::to_string(static_cast<int>(o.verdict_timeout_s)) +
                       " s after the stall threshold";
        stop_reason = "no_verdict";
        stalled_for_s = idle;
        return;
      }
    } else if (o.snapshot_after_s > 0 && idle >= o.snapshot_after_s) {
      stop_reason = "stalled";
      stalled_for_s = idle;
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

bool Job::snapshot() {
  if (!o.agent) return false;  // no agent, no flight logs
  std::string dir = out + "/dumps";
  std::vector<log::SnapshotProcess> procs;
  std::vector<log::SnapshotSkip> skipped;
  std::vector<log::ManifestNode> nodes;
  uint64_t t = realtime_ns();
  for (int n = 0; n < o.shape.nodes; ++n) {
    log::SnapshotOptions so;
    so.log_dir = node_log_dir(n);
    so.out_dir = dir;
    so.host = "node" + std::to_string(n);
    so.job_id = job_id;
    so.file_prefix = "node" + std::to_string(n) + "-";
    so.write_manifest = false;
    log::SnapshotResult res = log::snapshot_dir(so);
    if (!res.ok()) {
      err("snapshot of " + so.log_dir + " failed: " + res.error);
      return false;
    }
    procs.insert(procs.end(), res.processes.begin(), res.processes.end());
    skipped.insert(skipped.end(), res.skipped.begin(), res.skipped.end());
    log::ManifestNode mn;
    mn.host = so.host;
    mn.clock_offset_ns = 0;  // every simulated node runs on this machine's clock
    mn.has_offset = true;
    nodes.push_back(mn);
  }
  if (procs.empty()) {
    // No rank ever wrote a flight log (they died before their first NCCL call): nothing to keep.
    err("no flight log to snapshot in " + out + "/node*/shm");
    std::error_code ec;
    fs::remove_all(dir, ec);
    return false;
  }
  std::string error;
  if (!log::write_manifest(dir, job_id, t, procs, skipped, nodes, "fr-simjob", o.shape.world(),
                           &error)) {
    err("cannot write the manifest of " + dir + ": " + error);
    return false;
  }
  dump_set = dir;
  snapshot_info = {{"processes", procs.size()}, {"skipped", json::array()}};
  for (const auto& s : skipped) snapshot_info["skipped"].push_back({{"file", s.file}, {"error", s.error}});
  return true;
}

void Job::analyze() {
  if (dump_set.empty()) return;
  if (o.daemons && stop_reason == "incident") {
    std::string text = read_small_file(dump_set + "/analysis.json");
    try {
      analysis = json::parse(text);
    } catch (const std::exception& e) {
      analysis_error = "cannot parse " + dump_set + "/analysis.json: " + e.what();
    }
    return;
  }
#ifdef FR_SIMJOB_HAVE_ANALYZER
  try {
    std::string fatal;
    analyzer::Options ao;
    ao.threads = 2;
    json a = analyzer::analyze_paths({dump_set}, ao, &fatal);
    if (a.is_null())
      analysis_error = fatal.empty() ? "the analyzer returned nothing" : fatal;
    else
      analysis = std::move(a);
  } catch (const std::exception& e) {
    analysis_error = std::string("analysis failed: ") + e.what();
  }
#endif
}

void Job::stop_everything() {
  kill_all(ranks, rank_pgid, SIGKILL);
  if (!reap_all(ranks, 10)) err("some rank processes did not die within 10 s of SIGKILL");
  // Only ranks have been reaped so far (daemons are stopped below), so this is their CPU time.
  struct rusage ru {};
  if (::getrusage(RUSAGE_CHILDREN, &ru) == 0)
    ranks_cpu_s = ru.ru_utime.tv_sec + ru.ru_stime.tv_sec +
                  (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
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

json Job::result_json() const {
  json r;
  r["completed"] = stop_reason == "completed";
  r["stop_reason"] = stop_reason;
  r["job_id"] = job_id;
  r["nodes"] = o.shape.nodes;
  r["ranks_per_node"] = o.shape.ranks_per_node;
  r["world_size"] = o.shape.world();
  r["tp"] = o.shape.tp;
  r["pp"] = o.shape.pp;
  r["dp"] = o.shape.dp();
  r["steps"] = o.shape.steps;
  r["step_ms"] = o.shape.step_ms;
  r["step_jitter"] = o.shape.jitter;
  r["pause"] = o.shape.pause_step >= 0
                   ? json{{"step", o.shape.pause_step}, {"ms", o.shape.pause_ms}}
                   : json(nullptr);
  r["graphs"] = o.graphs;
  r["elastic"] = o.shape.elastic >= 0 ? json(o.shape.elastic) : json(nullptr);
  r["agent"] = o.agent;
  r["daemons"] = o.daemons;
  json faults = json::array();
  for (const Fault& f : o.faults) {
    json jf = {{"spec", f.to_spec()}, {"rank", f.rank}, {"step", f.step},
               {"kind", fault_kind_name(f.kind)}};
    if (f.to_spec().find("comm=") != std::string::npos) jf["comm"] = comm_kind_name(f.comm);
    if (f.ms >= 0) jf["ms"] = f.ms;
    faults.push_back(jf);
  }
  r["faults"] = faults;
  json rs = json::array();
  for (int i = 0; i < o.shape.world(); ++i) {
    const ChildState& k = ranks.size() > static_cast<size_t>(i) ? ranks[i] : ChildState{};
    const RankSlot& slot = board->slots[i];
    json jr = {{"rank", i}, {"node", position_of(o.shape, i).node}, {"pid", k.pid}};
    jr["exit_code"] = k.exited && WIFEXITED(k.status) ? json(WEXITSTATUS(k.status)) : json(nullptr);
    jr["signal"] = k.exited && WIFSIGNALED(k.status) ? json(WTERMSIG(k.status)) : json(nullptr);
    jr["stopped"] = k.stopped;
    jr["steps_done"] = slot.steps_done.load();
    jr["check_failures"] = slot.check_failures.load();
    static const char* phases[] = {"starting", "init", "running", "finished", "failed"};
    uint32_t ph = slot.phase.load();
    jr["phase"] = ph < 5 ? phases[ph] : "unknown";
    if (left.pid > 0 && i == o.shape.world() - 1) {
      // --elastic: the process that left; the entry above is its successor.
      jr["joined"] = true;
      jr["left"] = {{"pid", left.pid}, {"exit_code", WEXITSTATUS(left.status)}};
    }
    rs.push_back(jr);
  }
  r["ranks"] = rs;
  if (o.daemons) {
    json ds = json::array();
    for (const ChildState& k : daemons) {
      json jd = {{"role", k.role}, {"pid", k.pid}, {"log", k.log}, {"stopped", k.stopped}};
      jd["exit_code"] = k.exited && WIFEXITED(k.status) ? json(WEXITSTATUS(k.status)) : json(nullptr);
      jd["signal"] = k.exited && WIFSIGNALED(k.status) ? json(WTERMSIG(k.status)) : json(nullptr);
      ds.push_back(jd);
    }
    r["daemon_processes"] = ds;
    r["stall_after"] = o.stall_after;
    // What the coordinator opened and found, from its files: every incident (also those that
    // closed as transient) and its findings (slow ranks).
    json opened = json::array(), findings = json::array();
    std::error_code ec;
    fs::path job_dir = fs::path(out) / "incidents" / job_id;
    std::vector<fs::path> dirs;
    for (const auto& e : fs::directory_iterator(job_dir, ec))
      if (e.is_directory(ec) && e.path().filename().string().rfind("incident-", 0) == 0)
        dirs.push_back(e.path());
    std::sort(dirs.begin(), dirs.end());
    for (const auto& d : dirs) {
      json inc = {{"id", d.filename().string()}};
      std::ifstream f(d / "incident.json");
      json j = json::parse(f, nullptr, false);
      if (j.is_object())
        for (const char* k : {"kind", "state", "reason", "verdict"})
          if (j.contains(k)) inc[k] = j[k];
      opened.push_back(inc);
    }
    std::ifstream ff(job_dir / "findings.json");
    json fj = json::parse(ff, nullptr, false);
    if (fj.is_object() && fj.contains("findings") && fj["findings"].is_array()) findings = fj["findings"];
    r["incidents_opened"] = opened;
    r["findings"] = findings;
  }
  r["dump_set"] = dump_set.empty() ? json(nullptr) : json(dump_set);
  if (!snapshot_info.is_null()) r["snapshot"] = snapshot_info;
  if (stalled_for_s > 0) r["stalled_for_s"] = stalled_for_s;
  r["duration_s"] = seconds_since(start);
  if (ranks_cpu_s >= 0) r["ranks_cpu_s"] = ranks_cpu_s;
  if (ranks_ended > ranks_started && ranks_started != Clock::time_point{})
    r["job_s"] = std::chrono::duration<double>(ranks_ended - ranks_started).count();
  if (!analysis.is_null()) r["analysis"] = analysis;
  if (!analysis_error.empty()) r["analysis_error"] = analysis_error;
  if (!daemon_error.empty()) r["daemon_error"] = daemon_error;
  return r;
}

}  // namespace

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
                                   job.stop_reason == "stalled" ||
                                   job.stop_reason == "no_verdict");
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

  std::string error;
  try {
    json r = job.result_json();
    if (!fr::files::write_atomic(job.out + "/result.json", r.dump(2) + "\n", &error)) Job::err(error);
  } catch (const std::exception& e) {
    Job::err(std::string("cannot write result.json: ") + e.what());
  }

  std::string summary = job.stop_reason;
  if (job.stop_reason == "stalled" || job.stop_reason == "incident") {
    char b[64];
    std::snprintf(b, sizeof b, " (no progress for %.1f s)", job.stalled_for_s);
    summary += b;
  }
  job.say("job " + job.job_id + " " + summary + " after " +
          std::to_string(seconds_since(job.start)).substr(0, 5) + " s");
  if (!job.dump_set.empty()) {
    job.say("dump set: " + job.dump_set);
    if (!o.quiet)
      std::printf("last op per rank and communicator (op #seq, GPU state):\n%s",
                  dump_summary(job.dump_set, 64).c_str());
  }
  if (!job.analysis.is_null() && job.analysis.contains("verdict")) {
    const json& v = job.analysis["verdict"];
    job.say("verdict: " + v.value("kind", std::string("?")) + ": " + v.value("summary", std::string()));
  }
  if (!job.analysis_error.empty()) Job::err("analysis: " + job.analysis_error);
  job.say("result: " + job.out + "/result.json");

  if (g_signal) return 128 + g_signal;
  if (!started) return daemons_failed ? kExitNoVerdict : kExitSetup;
  if (job.stop_reason == "no_verdict") return kExitNoVerdict;
  if (job.stop_reason == "completed" || !job.dump_set.empty()) return kExitOk;
  return kExitNoDump;
}

}  // namespace fr::simjob
