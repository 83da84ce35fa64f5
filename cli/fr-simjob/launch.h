// The state of one launched job, shared by the launcher's passes: start the ranks and daemons and
// stop them (launcher.cpp), watch the progress board until the job completes, stalls or the
// coordinator reports (monitor.cpp), then take what the job left: the dump set, its analysis and
// result.json (outcome.cpp). Internal to fr-simjob.
#pragma once

#include <signal.h>

#include <chrono>
#include <cstdio>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "analyzer/result.h"
#include "children.h"
#include "log/snapshot.h"
#include "launcher.h"
#include "progress.h"

namespace fr::simjob {

using Clock = std::chrono::steady_clock;
using json = nlohmann::json;

// The signal that interrupted the launcher (SIGINT, SIGTERM, SIGHUP), 0 while none has.
extern volatile sig_atomic_t g_signal;

double seconds_since(Clock::time_point t);
uint64_t realtime_ns();
std::string read_small_file(const std::string& path);

// The per-rank summary of a dump set: per communicator (by role: the world from init, then the
// tp, pp, dp splits in creation order) the last op the rank called and how far its GPU got.
std::string dump_summary(const std::string& dir, int max_ranks);

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
  std::optional<analyzer::Analysis> analysis;  // none: no dump set, or its analysis failed
  std::string analysis_error, daemon_error;
  double stalled_for_s = 0;
  double ranks_cpu_s = -1;  // user + system CPU of the reaped rank processes

  explicit Job(const LaunchOptions& opts) : o(opts) {}

  void say(const std::string& line) const {
    if (!o.quiet) std::printf("fr-simjob: %s\n", line.c_str());
    std::fflush(stdout);
  }
  static void err(const std::string& line) {
    std::fprintf(stderr, "fr-simjob: %s\n", line.c_str());
  }

  std::string node_dir(int node) const { return out + "/node" + std::to_string(node); }
  // The node's emulated NVML (sim/nvml): one GPU per local rank, with the rank's PID once
  // it runs. The frd node reads it through the emulated libnvidia-ml.so.1.
  std::string nvml_file(int node) const { return node_dir(node) + "/nvml.conf"; }
  std::string node_log_dir(int node) const { return node_dir(node) + "/shm"; }

  // Start and stop (launcher.cpp).
  bool prepare();
  bool find_programs();
  bool map_board();
  bool start_daemons();  // coordinator, then one node daemon per node, all connected
  bool start_coordinator(const std::string& port_file);
  bool wait_for_daemon(size_t d, const std::function<bool()>& ready, const std::string& late_error);
  std::string wait_for_port(const std::string& port_file);
  bool start_node(int node, const std::string& port);
  bool wait_for_nodes();
  std::string token_file() const;
  std::string incidents_dir() const;
  bool start_ranks();
  bool start_joiner();
  void write_nvml(int node);
  void stop_everything();
  void cleanup();
  // Watch (monitor.cpp).
  void monitor();
  uint64_t total_progress() const;
  std::string find_incident_analysis() const;
  // What the job left (outcome.cpp).
  bool snapshot();
  json take_stacks(const std::string& dir, const std::vector<log::SnapshotProcess>& procs);
  void analyze();
  json result_json() const;
  json rank_entries() const;
  void add_daemon_entries(json& r) const;
  // Writes result.json and tells the user how the job ended, where its dump set is and the verdict.
  void report();
};

}  // namespace fr::simjob
