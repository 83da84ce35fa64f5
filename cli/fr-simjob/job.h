// The shape of a simulated training job and the faults injected into it: parsing, validation and
// the rank layout. The launcher (fr-simjob) and every rank process (fr-simjob-rank) parse the
// same specification with this code, so both sides agree on groups, steps and faults.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace fr::simjob {

// The communicators every rank uses. The order is the order of creation in each rank.
enum class CommKind { kWorld, kTp, kPp, kDp };
const char* comm_kind_name(CommKind c);
std::optional<CommKind> parse_comm_kind(const std::string& s);

// FAULT_LIST(X): X(enum, "spec name"). One list so the parser, the help text and result.json
// cannot drift.
#define FR_SIMJOB_FAULT_LIST(X)          \
  X(kHangHost, "hang-host")              \
  X(kSkip, "skip")                       \
  X(kCrash, "crash")                     \
  X(kGpuStall, "gpu-stall")              \
  X(kMismatchCount, "mismatch-count")    \
  X(kMismatchDtype, "mismatch-dtype")    \
  X(kMismatchOp, "mismatch-op")          \
  X(kMismatchRoot, "mismatch-root")      \
  X(kP2pSkip, "p2p-skip")                \
  X(kSlow, "slow")                       \
  X(kGpuSlow, "gpu-slow")                \
  X(kLinkSlow, "link-slow")              \
  X(kChanStall, "chan-stall")            \
  X(kProxyStall, "proxy-stall")          \
  X(kProxyRecvStall, "proxy-recv-stall") \
  X(kLinkDown, "link-down")

enum class FaultKind {
#define FR_SIMJOB_X_ENUM(e, s) e,
  FR_SIMJOB_FAULT_LIST(FR_SIMJOB_X_ENUM)
#undef FR_SIMJOB_X_ENUM
};
const char* fault_kind_name(FaultKind k);
std::optional<FaultKind> parse_fault_kind(const std::string& s);
std::string fault_kind_list();  // "hang-host, skip, ..." for messages

struct Fault {
  int rank = -1;
  int step = -1;  // 0-based step index
  FaultKind kind = FaultKind::kHangHost;
  CommKind comm = CommKind::kDp;
  bool comm_given = false;
  int64_t ms = -1;   // slow: sleep per step; gpu-stall: stall length (-1 = forever)
  int64_t xid = -1;  // the rank's GPU reports this Xid when the fault strikes (-1: none)
  // The transport faults (chan-stall, proxy-stall, proxy-recv-stall, link-down) strike the
  // collective `nth` of `comm` in the step (0: its first), at its channel step `at`: chan-stall on `channel`
  // (-1: all), the others between this rank and global rank `peer` (sim/include/fr_sim_nccl.h).
  int channel = -1;
  int peer = -1;
  int at = 0;
  int nth = 0;  // which collective of comm in the step (world: 0 the AllReduce, 1 the Broadcast)
  // gpu-slow: the rank's GPU works `factor` times slower; link-slow: what it transmits to global
  // rank `peer` takes `factor` times longer per channel step (0: not given).
  double factor = 0;

  std::string to_spec() const;  // canonical "rank=R,step=S,kind=K[,comm=C][,ms=M][,xid=X]..."
};

// Parses one --fault value. Errors name the offending key or value.
bool parse_fault(const std::string& text, Fault* out, std::string* error);

struct Shape {
  int nodes = 1;
  int ranks_per_node = 1;
  int tp = 1;
  int pp = 1;
  int steps = 1;
  // The host's work per step, as a training loop's forward and backward compute: every rank
  // sleeps step_ms before the step's first call. With jitter J > 1 one step in ten of each rank
  // takes longer, by a factor drawn evenly from 1 to J (the same draw on every run).
  int step_ms = 0;
  int jitter = 1;
  // Every rank pauses pause_ms at the start of step pause_step, as for a checkpoint (-1: never),
  // and again every pause_every steps after it (0: once).
  int pause_step = -1;
  int pause_ms = 0;
  int pause_every = 0;
  int seed = 0;  // varies the jitter draw between runs of the same shape
  // The emulated GPU's pace (FRSIM_KERNEL_US and FRSIM_STEP_US, sim/nccl/pace.cpp): each
  // collective's own kernel work and each channel step's transmission, in us (0: instantaneous).
  // gpu-slow and link-slow multiply it; with such a fault and no --gpu-us it is kDefaultGpuUs.
  int gpu_us = -1;
  int elastic =
      -1;  // --elastic STEP: the highest rank leaves at STEP and a fresh one joins; -1: no

  int world() const { return nodes * ranks_per_node; }
  int dp() const { return world() / (tp * pp); }
};

// Checks that the shape divides (T within a node, P stages over the rest) and that every fault
// fits it (rank, step, communicator, kind-specific arguments). The first problem is returned as
// one line.
bool validate(const Shape& shape, std::vector<Fault>* faults, std::string* error);

// Where one global rank sits: Megatron's order (TP fastest, then DP, then PP).
struct Position {
  int rank = 0;
  int node = 0;
  int local_rank = 0;
  int tp_rank = 0;   // index inside the TP group
  int dp_rank = 0;   // index inside the DP group
  int stage = 0;     // pipeline stage = index inside the PP group
  int tp_color = 0;  // ncclCommSplit colors: equal colors share a communicator
  int dp_color = 0;
  int pp_color = 0;
};
Position position_of(const Shape& shape, int rank);

// The global ranks of rank's group of a kind, in communicator-rank order.
std::vector<int> group_of(const Shape& shape, int rank, CommKind kind);

// How long `rank` works on the host before `step` (step time, jitter and the pause), in ms.
int64_t host_ms(const Shape& shape, int rank, int step);

// The pace the ranks run with: gpu_us when given, else kDefaultGpuUs with a fail-slow fault, else 0.
inline constexpr int kDefaultGpuUs = 1000;
int effective_gpu_us(const Shape& shape, const std::vector<Fault>& faults);

// Parses --pause "step=S,ms=M[,every=N]" (or "every=N,ms=M": from step N) into the shape.
bool parse_pause(const std::string& text, Shape* shape, std::string* error);
// The emulated GPU of a local rank as the emulated NVML shows it (sim/nvml): its PCI bus id,
// "0000:3b:00.0" for local rank 0, one bus further per local rank.
std::string sim_gpu_bus_id(int local_rank);
// The environment variable naming a node's emulated NVML file; Xid events go to "<file>.events".
inline constexpr const char* kEnvSimNvml = "FR_SIM_NVML";

// Whether the kind is one of the transport model's faults (chan-stall ... link-down).
bool is_transport_fault(FaultKind k);

// The steps after which results are no longer checked: a fault changes what peers receive.
int first_fault_step(const std::vector<Fault>& faults);

}  // namespace fr::simjob
