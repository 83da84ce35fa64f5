// One rank of the simulated job (fr-simjob-rank), shared by its parts: the rank's state, its exit
// codes, the checks that end it on an NCCL or CUDA error, and the passes each part provides:
// setup and the unique-id exchange (rank_main.cpp), one training step with its faults
// (rank_step.cpp), and the --elastic leave, shrink and grow (rank_elastic.cpp). Internal to
// fr-simjob-rank.
#pragma once

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <atomic>
#include <cstddef>
#include <initializer_list>
#include <string>
#include <vector>

#include "job.h"
#include "progress.h"

namespace fr::simjob {

// Exit codes of a rank (fr-simjob reports them per rank in result.json).
constexpr int kExitUsage = 2;
constexpr int kExitCheckFailed = 3;
constexpr int kExitNcclError = 4;
constexpr int kExitCudaError = 5;
constexpr int kExitSetup = 6;

// Element counts per op; small enough that 16 ranks x 100 steps run in seconds on two cores.
constexpr size_t kTpCount = 256;
constexpr size_t kPpCount = 256;
constexpr size_t kDpCount = 1024;
constexpr size_t kBcastCount = 16;
constexpr size_t kLossCount = 1;
constexpr size_t kSlack = 16;  // room for mismatch-count's extra elements

struct Rank {
  Shape shape;
  Position pos;
  std::vector<Fault> faults;
  int check_until = 0;  // results are checked for steps below this
  RankSlot* slot = nullptr;
  std::string run_dir;

  bool joiner = false;  // --join: the fresh process that takes the freed rank at --elastic STEP
  bool graphs = false;
  cudaGraphExec_t graph = nullptr;  // --graphs: the step as captured once, replayed every step
  bool run_ahead = false;  // --run-ahead: the host waits for replay S-1, not S, after launching S
  CUevent replay_done[2] = {nullptr, nullptr};  // --run-ahead: recorded after replays S-1 and S
  // Replays launched so far. The gate kernel captured before each communicator's first op counts
  // the replays that reach it (gate_runs) and stalls the one whose number the host armed
  // (gate_at, 0: none) for gate_ms: armed per replay, so it holds while the host runs ahead.
  uint64_t launches = 0;
  std::atomic<uint64_t> gate_at[4] = {};
  std::atomic<uint64_t> gate_runs[4] = {};
  int64_t gate_ms[4] = {-1, -1, -1, -1};

  CUstream stream = nullptr;
  ncclComm_t world = nullptr, tp = nullptr, pp = nullptr, dp = nullptr;

  // One host-registered arena; the device pointers below are its device mapping.
  float* host = nullptr;
  size_t host_elems = 0;
  CUdeviceptr dev = 0;
  struct Buf {
    size_t off;
    size_t n;
  };
  Buf ag_send, ag_recv, rs_send, rs_recv, fwd_send, fwd_recv, bwd_send, bwd_recv, grad, loss, bcast;
};

[[noreturn]] void die(Rank& r, int code, const std::string& msg);
// End the rank (exit kExitNcclError or kExitCudaError) when a call failed.
void nccl_check(Rank& r, ncclResult_t res, const char* what);
void cuda_check(Rank& r, CUresult res, const char* what);
void rt_check(Rank& r, cudaError_t res, const char* what);

// Every call and step moves the rank's progress on the board (the launcher's stall detection).
inline void bump(Rank& r) {
  if (r.slot) r.slot->progress.fetch_add(1, std::memory_order_relaxed);
}

// The fault of this rank at `step` of a kind (and on a communicator), or none.
const Fault* fault_at(const Rank& r, int step, FaultKind kind);
const Fault* fault_on(const Rank& r, int step, FaultKind kind, CommKind comm);
[[noreturn]] void hang_forever();

// Setup and teardown (rank_main.cpp): a unique id published through a file in the run directory
// and read by the others; the TP, PP and DP groups split from the world communicator; the
// communicators finalized then destroyed; the step's CUDA graph dropped.
void publish_id(Rank& r, const char* name, const ncclUniqueId& id);
ncclUniqueId read_id(Rank& r, const char* name, const char* who);
void split_groups(Rank& r);
void finalize_and_destroy(Rank& r, std::initializer_list<ncclComm_t*> comms);
void drop_graph(Rank& r);

// One step (rank_step.cpp): host work, the step's ops (eager, or a CUDA-graph replay), the faults
// of the step, the stream synchronized and the results checked.
void run_step(Rank& r, int step);

// --elastic (rank_elastic.cpp).
// The highest rank leaves the job at the elastic step, as a host that is taken away would.
[[noreturn]] void leave(Rank& r);
// A survivor at the elastic step: revoke, shrink, grow the world back, split the groups anew.
void shrink_and_grow(Rank& r);
// The fresh process of the freed rank joins the grown world.
void join(Rank& r);

}  // namespace fr::simjob
