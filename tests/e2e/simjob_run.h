// Helpers of the end-to-end tests: run build/bin/fr-simjob in a fresh temporary directory, read
// its result.json, and load the dump set it took into per-rank views (communicators identified
// by how the job made them: world by init, then tp, pp, dp by split order).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "log/reader.h"
#include "log/snapshot.h"

namespace fr::e2e {

struct SimRun {
  std::string dir;        // --out
  int exit_code = -1;     // fr-simjob's
  std::string output;     // its stdout and stderr
  nlohmann::json result;  // result.json (null when missing or unparsable)
};

// Runs fr-simjob with `args` (without --out) in a new mkdtemp directory. A run that takes longer
// than `timeout_s` is killed and reported with exit_code -2.
// interrupt_after_s > 0 sends interrupt_signal that long after the start (to test cleanup).
SimRun run_simjob(const std::vector<std::string>& args, double timeout_s = 120,
                  double interrupt_after_s = 0, int interrupt_signal = 15 /* SIGTERM */);

// Whether a process is gone (or a zombie nobody reaped yet: it runs no more either way).
bool process_gone(int pid);

// Removes the temporary directory of a run (kept when the test failed, for a post-mortem).
void remove_run(const SimRun& run);

std::string build_dir();

struct Op {
  uint64_t seq = 0;
  uint16_t op = 0;
  uint64_t count = 0;
  int dtype = -1;
  int redop = -1;
  int peer = -1;
  fr_gpu_state gpu = FR_GPU_NONE;
  uint32_t flags = 0;
};

// One rank's dump: its communicators by role and the ops on each, in sequence order.
struct RankView {
  int rank = -1;
  bool alive = false;
  fr::log::LogFile log;
  std::map<std::string, uint64_t> comm_ids;            // "world", "tp", "pp", "dp"
  std::map<std::string, std::vector<Op>> collectives;  // by role, ascending seq
  std::map<std::string, std::vector<Op>> p2p;          // by role, ascending seq

  // The collective with sequence number `seq` on `role`, if recorded.
  const Op* coll(const std::string& role, uint64_t seq) const;
  uint64_t last_coll_seq(const std::string& role) const;
  uint64_t last_p2p_seq(const std::string& role) const;
};

// Loads every process of a dump set, indexed by global rank. Fails (REQUIREs) on unreadable logs.
std::map<int, RankView> load_dump_set(const std::string& dir,
                                      fr::log::Manifest* manifest = nullptr);

// The job's shape used by most tests: 2 nodes x 4 ranks, TP 2, PP 2 (so DP 2).
std::vector<std::string> small_job(int steps, const std::vector<std::string>& faults,
                                   const std::string& snapshot_after = "3");

}  // namespace fr::e2e
