// The launcher side of fr-simjob: starts the rank processes (and optionally the frd daemons),
// watches the progress board, takes the dump set when the job stalls or ends, stops and cleans up
// everything it made, and writes result.json.
#pragma once

#include <string>
#include <vector>

#include "job.h"

namespace fr::simjob {

// Exit codes of fr-simjob (documented in --help).
constexpr int kExitOk = 0;         // the job completed, or a dump set was taken
constexpr int kExitUsage = 2;      // bad command line
constexpr int kExitSetup = 3;      // missing build outputs, unwritable DIR, fork failed
constexpr int kExitNoDump = 4;     // the job did not complete and no dump set was taken
constexpr int kExitNoVerdict = 5;  // --daemons: the coordinator gave no verdict in time
// Interrupted by SIGINT/SIGTERM/SIGHUP: 128 + the signal number, after cleanup.

struct LaunchOptions {
  Shape shape;
  std::vector<Fault> faults;
  std::string out_dir;
  double snapshot_after_s = 0;  // 0: never snapshot a stalled job
  bool graphs = false;          // --graphs: steps after the first are CUDA-graph replays
  bool run_ahead = false;       // --run-ahead: replay S+1 is launched before replay S finished
  bool agent = true;
  bool daemons = false;
  std::string stall_after = "auto";  // --daemons: the coordinator's --stall-after (auto or SEC)
  double verdict_timeout_s = 60;     // --daemons: how long to wait for analysis.json
  bool shared_dump_dir = false;      // --daemons: nodes write dumps into the coordinator's dump dir
  double stack_budget_s = 0;         // stacks' budget per dump: the nodes' --stack-budget with
      // --daemons, else fr-simjob's own dump set's (0: frd's default)
  int64_t gpu_sample_us = -1;  // --daemons: the nodes' --gpu-sample-us (-1: frd's default)
  bool quiet = false;
  bool python = false;  // ranks are Python programs on NCCL through ctypes (rank.py)
};

// The longest an op may be in flight before the coordinator opens an incident: --stall-after's
// seconds, or under auto the cap (30 s).
double stall_after_limit_s(const LaunchOptions& opts);

// Runs the whole job; returns the process exit code. Never throws.
int run_job(const LaunchOptions& opts);

}  // namespace fr::simjob
