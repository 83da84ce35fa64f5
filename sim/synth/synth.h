// Synthetic dump sets: a deterministic training job (world and tensor-parallel communicators,
// collectives, grouped ops, point-to-point exchanges) played out rank by rank with a planted
// fault, and written as real dump files plus manifest.json. fr-gendumps and the analyzer tests
// use it; the GPU side is simulated the way NCCL behaves (an op starts when its stream reaches it
// and finishes once every peer has started its side), so the states in the dumps are the ones a
// real hang leaves.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "log/reader.h"

namespace fr::synth {

// Fault kinds, as fr-simjob names them: healthy, hang-host, skip, crash, gpu-stall,
// mismatch-count, mismatch-dtype, mismatch-op, mismatch-root, p2p-skip, slow, gpu-slow; plus
// node-lost (every rank on the host of `rank` crashes at `step` and its dumps are missing).
struct Fault {
  std::string kind = "healthy";
  int rank = 0;
  int step = -1;               // -1: the last step
  std::string comm = "world";  // world | tp
  int ms = 50;                 // slow: added per step
  double factor = 4;           // gpu-slow: how many times slower its GPU works
};

// gpu-slow: each rank's GPU works kGpuWorkNs per step that its host waits for at the step's end;
// a GPU `factor` times slower makes its host (factor - 1) x that late, and the dump set gets each
// host's GPU health (<node>.gpu.json) with that GPU throttled (HW thermal slowdown).
inline constexpr double kGpuWorkNs = 2'000'000;

// Parses fr-simjob's syntax "rank=R,step=S,kind=K[,comm=world|tp][,ms=M][,factor=F]"; "kind" alone (e.g.
// "hang-host") is accepted too, with rank 0 and the last step.
bool parse_fault(const std::string& spec, Fault* out, std::string* error);

struct Spec;
// Plants the fault `spec` (parse_fault's syntax) in `out`; false, with `error`, when it does not
// parse.
bool add_fault(const std::string& spec, Spec* out, std::string* error);

struct Spec {
  int ranks = 8;
  int entries = 64;  // ring capacity per rank (records kept in each dump)
  int steps = 0;     // 0: enough steps to wrap every ring by about a quarter
  int ranks_per_host = 4;
  int tp = 2;  // tensor-parallel group size; 1: no tp communicators
  std::vector<Fault> faults;
  std::vector<int> omit_ranks;  // no dump file for these (missing ranks)
  bool gpu_tracking = true;
  bool wrap_jitter = true;   // ranks wrap their rings at different points
  int64_t host_skew_ns = 0;  // host h's clock runs h * skew ahead; the manifest corrects it
  std::string job_id = "synthetic";
  uint64_t base_ns = 1796205600000000000ull;
  unsigned threads = 0;
  bool dir_per_host = false;  // one dump set per host (DIR/node<h>/, each with its manifest), as
                              // node daemons write them, instead of one for the whole job
};

// The logs, one per rank (ascending), as a snapshot would have captured them.
std::vector<fr::log::LogFile> make_logs(const Spec& spec);

// Writes the dump set: one dump file per rank (through fr::log::encode_snapshot) and the manifest;
// with Spec::dir_per_host, one such set per host under `dir`. Streams rank by rank, so large sets
// never sit in memory whole.
bool write_dump_set(const Spec& spec, const std::string& dir, std::string* error);

// With a gpu-slow fault, each host's GPU health beside its dumps (gpus.cpp): one GPU per rank,
// running that rank's pid, the slow ones throttled; nothing without one. set_dir(h): host h's set.
bool write_gpu_health(const Spec& spec, int ranks, const std::function<std::string(int)>& set_dir,
                      std::string* error);

}  // namespace fr::synth
