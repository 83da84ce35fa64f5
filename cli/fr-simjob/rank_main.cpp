// fr-simjob-rank: one rank of a simulated training job. fr-simjob starts N x R of these with the
// usual launcher environment; each one is an ordinary NCCL program (linked against libnccl.so.2
// and libcuda.so.1, found at run time on LD_LIBRARY_PATH), so the agent preloaded into it records
// exactly what it would record in a real job.
//
// Per step: TP all-gather and reduce-scatter, the pipeline's forward and backward send/recv (each
// direction one NCCL group), the DP all-reduce of gradients, the world all-reduce of the loss and
// a world broadcast from rank 0; then the stream is synchronized and, until the first fault, the
// data is checked. Faults are injected exactly where the specification says.
//
// With --graphs, step 0 runs eagerly (the warm-up), then the whole step, every communicator's ops
// included, is captured into one CUDA graph through the CUDA runtime (as torch captures it) and
// replayed for every later step. Faults then act on replays (see README.md).
//
// With --elastic STEP, the highest global rank leaves at step STEP; the survivors revoke the world
// communicator, shrink it without that rank and grow it back with a fresh process (started by
// fr-simjob with --join), which takes the freed rank through ncclCommGrow; then everyone splits
// TP, PP and DP again from the grown world and training goes on.
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <nccl.h>
#include <signal.h>
#include <unistd.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <string>
#include <thread>
#include <vector>

#include "fr/version.h"
#include "job.h"
#include "progress.h"

namespace fr::simjob {
namespace {

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
  // The gate kernel captured before each communicator's first op reads this when the replay
  // reaches it: 1 + the CommKind whose ops stall (0: none), and for how long.
  volatile int gate_comm = 0;
  volatile int64_t gate_ms = -1;

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

[[noreturn]] void die(Rank& r, int code, const std::string& msg) {
  std::fprintf(stderr, "fr-simjob-rank %d: %s\n", r.pos.rank, msg.c_str());
  if (r.slot) r.slot->phase.store(static_cast<uint32_t>(RankPhase::kFailed));
  std::fflush(stderr);
  std::_Exit(code);
}

void nccl_check(Rank& r, ncclResult_t res, const char* what) {
  if (res != ncclSuccess && res != ncclInProgress)
    die(r, kExitNcclError, std::string(what) + " failed: " + ncclGetErrorString(res));
}

void cuda_check(Rank& r, CUresult res, const char* what) {
  if (res != CUDA_SUCCESS) {
    const char* s = nullptr;
    cuGetErrorString(res, &s);
    die(r, kExitCudaError, std::string(what) + " failed: " + (s ? s : "unknown CUDA error"));
  }
}

void bump(Rank& r) {
  if (r.slot) r.slot->progress.fetch_add(1, std::memory_order_relaxed);
}

float* hptr(Rank& r, const Rank::Buf& b) { return r.host + b.off; }
void* dptr(Rank& r, const Rank::Buf& b) {
  return reinterpret_cast<void*>(r.dev + b.off * sizeof(float));
}
cudaStream_t nccl_stream(Rank& r) { return reinterpret_cast<cudaStream_t>(r.stream); }

const Fault* fault_at(const Rank& r, int step, FaultKind kind) {
  for (const Fault& f : r.faults)
    if (f.rank == r.pos.rank && f.step == step && f.kind == kind) return &f;
  return nullptr;
}
const Fault* fault_on(const Rank& r, int step, FaultKind kind, CommKind comm) {
  const Fault* f = fault_at(r, step, kind);
  return f && f->comm == comm ? f : nullptr;
}

// ---- the board and the unique-id exchange ------------------------------------------------------

RankSlot* map_board(int rank) {
  const char* path = std::getenv(kEnvBoard);
  if (!path || !*path) return nullptr;  // run by hand: no board
  int fd = ::open(path, O_RDWR | O_CLOEXEC);
  if (fd < 0) return nullptr;
  struct stat st {};
  void* p = MAP_FAILED;
  if (::fstat(fd, &st) == 0 &&
      static_cast<uint64_t>(st.st_size) >= ProgressBoard::bytes_for(rank + 1))
    p = ::mmap(nullptr, st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) return nullptr;
  auto* board = static_cast<ProgressBoard*>(p);
  if (board->magic != kProgressMagic || static_cast<int>(board->ranks) <= rank) return nullptr;
  return &board->slots[rank];
}

// A unique id travels through a file in the run directory: written once, atomically, by the rank
// that made it; read by the others, who wait for it.
void publish_id(Rank& r, const char* name, const ncclUniqueId& id) {
  std::string final_path = r.run_dir + "/" + name;
  std::string tmp = final_path + ".tmp." + std::to_string(::getpid());
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f || std::fwrite(&id, sizeof id, 1, f) != 1 || std::fclose(f) != 0)
    die(r, kExitSetup, "cannot write " + tmp + ": " + std::strerror(errno));
  if (std::rename(tmp.c_str(), final_path.c_str()) != 0)
    die(r, kExitSetup, "cannot publish " + final_path + ": " + std::strerror(errno));
}

ncclUniqueId read_id(Rank& r, const char* name, const char* who) {
  ncclUniqueId id{};
  std::string final_path = r.run_dir + "/" + name;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  for (;;) {
    FILE* f = std::fopen(final_path.c_str(), "rb");
    if (f) {
      size_t got = std::fread(&id, sizeof id, 1, f);
      std::fclose(f);
      if (got == 1) return id;
    }
    if (std::chrono::steady_clock::now() > deadline)
      die(r, kExitSetup, std::string(who) + " never published the unique id in " + final_path);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

ncclUniqueId exchange_unique_id(Rank& r) {
  ncclUniqueId id{};
  if (r.pos.rank != 0) return read_id(r, "world.uid", "rank 0");
  nccl_check(r, ncclGetUniqueId(&id), "ncclGetUniqueId");
  publish_id(r, "world.uid", id);
  return id;
}

// ---- setup -------------------------------------------------------------------------------------

void setup_cuda(Rank& r) {
  cuda_check(r, cuInit(0), "cuInit");
  int count = 0;
  cuda_check(r, cuDeviceGetCount(&count), "cuDeviceGetCount");
  if (count < 1) die(r, kExitCudaError, "no CUDA device");
  CUdevice dev = 0;
  cuda_check(r, cuDeviceGet(&dev, r.pos.local_rank % count), "cuDeviceGet");
  CUcontext ctx = nullptr;
  cuda_check(r, cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
  cuda_check(r, cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
  cuda_check(r, cuStreamCreate(&r.stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");

  size_t off = 0;
  auto carve = [&](size_t n) {
    Rank::Buf b{off, n};
    off += n + kSlack;
    return b;
  };
  size_t t = static_cast<size_t>(r.shape.tp);
  r.ag_send = carve(kTpCount);
  r.ag_recv = carve(kTpCount * t);
  r.rs_send = carve(kTpCount * t);
  r.rs_recv = carve(kTpCount);
  r.fwd_send = carve(kPpCount);
  r.fwd_recv = carve(kPpCount);
  r.bwd_send = carve(kPpCount);
  r.bwd_recv = carve(kPpCount);
  r.grad = carve(kDpCount);
  r.loss = carve(kLossCount);
  r.bcast = carve(kBcastCount);
  r.host_elems = off;
  size_t bytes = off * sizeof(float);
  bytes = (bytes + 4095) & ~static_cast<size_t>(4095);
  void* mem = nullptr;
  if (posix_memalign(&mem, 4096, bytes) != 0) die(r, kExitSetup, "out of memory");
  std::memset(mem, 0, bytes);
  r.host = static_cast<float*>(mem);
  cuda_check(r, cuMemHostRegister(mem, bytes, CU_MEMHOSTREGISTER_DEVICEMAP), "cuMemHostRegister");
  cuda_check(r, cuMemHostGetDevicePointer(&r.dev, mem, 0), "cuMemHostGetDevicePointer");
}

// Every member calls every split in the same order; the key keeps global-rank order. Each group
// gets a name (commName, as frameworks name their process groups) so verdicts read "tp2".
void split_groups(Rank& r) {
  struct Split {
    ncclComm_t* out;
    int color;
    std::string name;
  } splits[] = {{&r.tp, r.pos.tp_color, "tp" + std::to_string(r.pos.tp_color)},
                {&r.pp, r.pos.pp_color, "pp" + std::to_string(r.pos.pp_color)},
                {&r.dp, r.pos.dp_color, "dp" + std::to_string(r.pos.dp_color)}};
  for (Split& sp : splits) {
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.commName = sp.name.c_str();
    std::string what = "ncclCommSplit(" + sp.name + ")";
    nccl_check(r, ncclCommSplit(r.world, sp.color, r.pos.rank, sp.out, &cfg), what.c_str());
    bump(r);
  }
}

void setup_comms(Rank& r) {
  ncclUniqueId id = exchange_unique_id(r);
  bump(r);
  nccl_check(r, ncclCommInitRank(&r.world, r.shape.world(), id, r.pos.rank), "ncclCommInitRank");
  bump(r);
  split_groups(r);
}

// ---- faults ------------------------------------------------------------------------------------

[[noreturn]] void hang_forever() {
  for (;;) ::pause();
}

// The stream stalls in an emulated kernel: the emulation's stall kernel (frsim_stream_stall of
// sim/include/fr_sim.h, looked up at run time so the program also loads on a real driver),
// otherwise a host function on the stream, which stalls a real stream the same way.
void CUDA_CB stall_host_fn(void* p) {
  int64_t ms = static_cast<int64_t>(reinterpret_cast<intptr_t>(p));
  if (ms < 0) hang_forever();
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

void stall_stream(Rank& r, int64_t ms) {
  using SimStall = CUresult (*)(CUstream, int);
  static SimStall sim = reinterpret_cast<SimStall>(dlsym(RTLD_DEFAULT, "frsim_stream_stall"));
  if (sim) {
    cuda_check(r, sim(r.stream, ms < 0 ? -1 : static_cast<int>(ms)), "frsim_stream_stall");
    return;
  }
  cuda_check(r, cuLaunchHostFunc(r.stream, stall_host_fn, reinterpret_cast<void*>(static_cast<intptr_t>(ms))),
             "cuLaunchHostFunc(stall)");
}

// --graphs: a kernel captured before a communicator's first op; it stalls the replay in which the
// host armed it (a device flag read by a spinning kernel, on a real GPU).
struct Gate {
  Rank* r;
  CommKind comm;
};

void gate_fn(void* p) {
  auto* g = static_cast<Gate*>(p);
  if (g->r->gate_comm != static_cast<int>(g->comm) + 1) return;
  int64_t ms = g->r->gate_ms;
  if (ms < 0) hang_forever();
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

void CUDA_CB gate_host_fn(void* p) { gate_fn(p); }

void capture_gate(Rank& r, CommKind comm) {
  static Gate gates[4];
  Gate* g = &gates[static_cast<int>(comm)];
  *g = Gate{&r, comm};
  using SimLaunch = CUresult (*)(CUstream, void (*)(void*), void*);
  static SimLaunch sim = reinterpret_cast<SimLaunch>(dlsym(RTLD_DEFAULT, "frsim_stream_launch"));
  if (sim) {
    cuda_check(r, sim(r.stream, gate_fn, g), "frsim_stream_launch(gate)");
    return;
  }
  cuda_check(r, cuLaunchHostFunc(r.stream, gate_host_fn, g), "cuLaunchHostFunc(gate)");
}

// The arguments of one collective after any mismatch fault is applied.
struct CollArgs {
  size_t count;
  ncclDataType_t dtype = ncclFloat32;
  ncclRedOp_t op = ncclSum;
  int root = 0;
};

CollArgs apply_mismatch(const Rank& r, int step, CommKind comm, CollArgs a) {
  if (fault_on(r, step, FaultKind::kMismatchCount, comm)) a.count += 1;
  if (fault_on(r, step, FaultKind::kMismatchDtype, comm)) a.dtype = ncclInt32;  // same width
  if (fault_on(r, step, FaultKind::kMismatchOp, comm)) a.op = ncclMax;
  if (fault_on(r, step, FaultKind::kMismatchRoot, comm)) a.root = 1;
  return a;
}

// Before the first op of `comm` in `step`: a gpu-stall lands on the stream here; returns whether
// a skip fault removes the op.
// While capturing (`capturing`), the gate kernel goes there instead: the stall happens in replays.
bool before_op(Rank& r, int step, CommKind comm, bool capturing = false) {
  if (capturing) {
    capture_gate(r, comm);
    return false;
  }
  if (const Fault* f = fault_on(r, step, FaultKind::kGpuStall, comm)) stall_stream(r, f->ms);
  return fault_on(r, step, FaultKind::kSkip, comm) != nullptr;
}

// ---- one step ----------------------------------------------------------------------------------

float step_tag(int step) { return static_cast<float>(step % 97); }

void fill(Rank& r, int step) {
  int t = r.pos.tp_rank;
  for (size_t i = 0; i < kTpCount; ++i) hptr(r, r.ag_send)[i] = 1000.0f * (t + 1) + step_tag(step);
  for (size_t i = 0; i < kTpCount * r.shape.tp; ++i) {
    hptr(r, r.rs_send)[i] = static_cast<float>(t + 1 + static_cast<int>(i / kTpCount));
    hptr(r, r.ag_recv)[i] = -1.0f;  // receive buffers start poisoned: an op that did not run shows
  }
  for (size_t i = 0; i < kTpCount; ++i) hptr(r, r.rs_recv)[i] = -1.0f;
  for (size_t i = 0; i < kPpCount; ++i) {
    hptr(r, r.fwd_send)[i] = 10.0f * r.pos.rank + step_tag(step);
    hptr(r, r.bwd_send)[i] = 10.0f * r.pos.rank + 5.0f;
    hptr(r, r.fwd_recv)[i] = -1.0f;
    hptr(r, r.bwd_recv)[i] = -1.0f;
  }
  for (size_t i = 0; i < kDpCount; ++i) hptr(r, r.grad)[i] = static_cast<float>(r.pos.rank + 1);
  hptr(r, r.loss)[0] = static_cast<float>(r.pos.rank + 1);
  for (size_t i = 0; i < kBcastCount; ++i)
    hptr(r, r.bcast)[i] = r.pos.rank == 0 ? step_tag(step) + 1.0f : -1.0f;
}

int check(Rank& r, int step) {
  int bad = 0;
  auto expect = [&](const char* what, const float* p, size_t n, auto value) {
    for (size_t i = 0; i < n; ++i) {
      float want = value(i);
      if (p[i] != want) {
        std::fprintf(stderr, "fr-simjob-rank %d: step %d: %s[%zu] = %g, expected %g\n",
                     r.pos.rank, step, what, i, p[i], want);
        ++bad;
        return;
      }
    }
  };
  int t = r.shape.tp;
  expect("tp all-gather", hptr(r, r.ag_recv), kTpCount * t, [&](size_t i) {
    return 1000.0f * static_cast<float>(i / kTpCount + 1) + step_tag(step);
  });
  expect("tp reduce-scatter", hptr(r, r.rs_recv), kTpCount, [&](size_t) {
    return static_cast<float>(t * (t + 1) / 2 + t * r.pos.tp_rank);
  });
  int stride = r.shape.tp * r.shape.dp();  // global-rank distance between adjacent stages
  if (r.pos.stage > 0)
    expect("pp forward recv", hptr(r, r.fwd_recv), kPpCount,
           [&](size_t) { return 10.0f * (r.pos.rank - stride) + step_tag(step); });
  if (r.pos.stage < r.shape.pp - 1)
    expect("pp backward recv", hptr(r, r.bwd_recv), kPpCount,
           [&](size_t) { return 10.0f * (r.pos.rank + stride) + 5.0f; });
  float dp_sum = 0;
  for (int g : group_of(r.shape, r.pos.rank, CommKind::kDp)) dp_sum += static_cast<float>(g + 1);
  expect("dp all-reduce", hptr(r, r.grad), kDpCount, [&](size_t) { return dp_sum; });
  int w = r.shape.world();
  expect("world all-reduce", hptr(r, r.loss), kLossCount,
         [&](size_t) { return static_cast<float>(w) * (w + 1) / 2.0f; });
  expect("world broadcast", hptr(r, r.bcast), kBcastCount,
         [&](size_t) { return step_tag(step) + 1.0f; });
  return bad;
}

// A fault with xid=X: this rank's emulated GPU reports Xid X now (the emulated NVML hands it to
// the node daemon's event set).
void report_xids(const Rank& r, int step) {
  const char* nvml = std::getenv(kEnvSimNvml);
  if (!nvml || !*nvml) return;
  for (const Fault& f : r.faults) {
    if (f.rank != r.pos.rank || f.step != step || f.xid < 0) continue;
    std::string line = "xid " + sim_gpu_bus_id(r.pos.local_rank) + " " + std::to_string(f.xid) + "\n";
    int fd = ::open((std::string(nvml) + ".events").c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) continue;
    ssize_t n = ::write(fd, line.data(), line.size());
    (void)n;
    ::close(fd);
  }
}

// Issues one step's NCCL ops on the stream, with the faults of `step` applied (eagerly), or
// captured into a graph (`capturing`: stalls become gate kernels; mismatches and p2p-skip of
// `step` change the captured ops; step -1 captures the faultless step).
void issue_ops(Rank& r, int step, bool capturing) {
  cudaStream_t s = nccl_stream(r);
  auto before_op = [&](Rank& rr, int st, CommKind comm) {
    return fr::simjob::before_op(rr, st, comm, capturing);
  };

  // Tensor parallel: gather activations, reduce-scatter their gradients.
  if (!before_op(r, step, CommKind::kTp)) {
    CollArgs a = apply_mismatch(r, step, CommKind::kTp, {kTpCount});
    nccl_check(r, ncclAllGather(dptr(r, r.ag_send), dptr(r, r.ag_recv), a.count, a.dtype, r.tp, s),
               "ncclAllGather(tp)");
    bump(r);
  }
  {
    CollArgs a{kTpCount};
    a.op = fault_on(r, step, FaultKind::kMismatchOp, CommKind::kTp) ? ncclMax : ncclSum;
    nccl_check(r, ncclReduceScatter(dptr(r, r.rs_send), dptr(r, r.rs_recv), a.count, a.dtype,
                                    a.op, r.tp, s),
               "ncclReduceScatter(tp)");
    bump(r);
  }

  // Pipeline: activations forward, gradients backward; each direction is one group, as pipeline
  // schedules issue them.
  if (r.shape.pp > 1) {
    int stage = r.pos.stage, last = r.shape.pp - 1;
    bool skip_send = fault_at(r, step, FaultKind::kP2pSkip) != nullptr;
    bool skip_fwd_send = skip_send && stage < last;
    bool skip_bwd_send = skip_send && stage == last;
    if (!before_op(r, step, CommKind::kPp)) {
      nccl_check(r, ncclGroupStart(), "ncclGroupStart");
      if (stage > 0)
        nccl_check(r, ncclRecv(dptr(r, r.fwd_recv), kPpCount, ncclFloat32, stage - 1, r.pp, s),
                   "ncclRecv(pp forward)");
      if (stage < last && !skip_fwd_send)
        nccl_check(r, ncclSend(dptr(r, r.fwd_send), kPpCount, ncclFloat32, stage + 1, r.pp, s),
                   "ncclSend(pp forward)");
      nccl_check(r, ncclGroupEnd(), "ncclGroupEnd");
      bump(r);
    }
    nccl_check(r, ncclGroupStart(), "ncclGroupStart");
    if (stage < last)
      nccl_check(r, ncclRecv(dptr(r, r.bwd_recv), kPpCount, ncclFloat32, stage + 1, r.pp, s),
                 "ncclRecv(pp backward)");
    if (stage > 0 && !skip_bwd_send)
      nccl_check(r, ncclSend(dptr(r, r.bwd_send), kPpCount, ncclFloat32, stage - 1, r.pp, s),
                 "ncclSend(pp backward)");
    nccl_check(r, ncclGroupEnd(), "ncclGroupEnd");
    bump(r);
  }

  // Data parallel: all-reduce the gradients in place.
  if (!before_op(r, step, CommKind::kDp)) {
    CollArgs a = apply_mismatch(r, step, CommKind::kDp, {kDpCount});
    nccl_check(r, ncclAllReduce(dptr(r, r.grad), dptr(r, r.grad), a.count, a.dtype, a.op, r.dp, s),
               "ncclAllReduce(dp)");
    bump(r);
  }

  // World: the loss, then a broadcast from rank 0 (e.g. the next batch's seed).
  if (!before_op(r, step, CommKind::kWorld)) {
    CollArgs a = apply_mismatch(r, step, CommKind::kWorld, {kLossCount});
    a.root = 0;
    nccl_check(r, ncclAllReduce(dptr(r, r.loss), dptr(r, r.loss), a.count, a.dtype, a.op, r.world, s),
               "ncclAllReduce(world)");
    bump(r);
  }
  {
    CollArgs a{kBcastCount};
    a.root = fault_on(r, step, FaultKind::kMismatchRoot, CommKind::kWorld) ? 1 : 0;
    nccl_check(r, ncclBroadcast(dptr(r, r.bcast), dptr(r, r.bcast), a.count, a.dtype, a.root,
                                r.world, s),
               "ncclBroadcast(world)");
    bump(r);
  }
}

void rt_check(Rank& r, cudaError_t res, const char* what) {
  if (res != cudaSuccess)
    die(r, kExitCudaError, std::string(what) + " failed: " + cudaGetErrorString(res));
}

// The step's ops captured into one graph, instantiated (through the CUDA runtime, as torch does).
cudaGraphExec_t capture_step(Rank& r, int fault_step) {
  cudaStream_t s = nccl_stream(r);
  rt_check(r, cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), "cudaStreamBeginCapture");
  issue_ops(r, fault_step, true);
  cudaGraph_t g = nullptr;
  rt_check(r, cudaStreamEndCapture(s, &g), "cudaStreamEndCapture");
  cudaGraphExec_t exec = nullptr;
  rt_check(r, cudaGraphInstantiate(&exec, g, 0), "cudaGraphInstantiate");
  rt_check(r, cudaGraphDestroy(g), "cudaGraphDestroy");
  return exec;
}

bool captures_differently(const Rank& r, int step) {
  for (FaultKind k : {FaultKind::kMismatchCount, FaultKind::kMismatchDtype, FaultKind::kMismatchOp,
                      FaultKind::kMismatchRoot, FaultKind::kP2pSkip})
    if (fault_at(r, step, k)) return true;
  return false;
}

// One replay: the gate armed for a gpu-stall of this step, a graph of its own for a fault that
// changes the ops, the faultless graph otherwise.
void replay_step(Rank& r, int step) {
  if (!r.graph) r.graph = capture_step(r, -1);
  r.gate_comm = 0;
  for (const Fault& f : r.faults)
    if (f.rank == r.pos.rank && f.step == step && f.kind == FaultKind::kGpuStall) {
      r.gate_ms = f.ms;
      r.gate_comm = static_cast<int>(f.comm) + 1;
    }
  cudaGraphExec_t exec = r.graph;
  if (captures_differently(r, step)) exec = capture_step(r, step);
  rt_check(r, cudaGraphLaunch(exec, nccl_stream(r)), "cudaGraphLaunch");
  bump(r);
}

void run_step(Rank& r, int step) {
  report_xids(r, step);
  if (fault_at(r, step, FaultKind::kCrash)) {
    std::fflush(nullptr);
    ::kill(::getpid(), SIGKILL);
  }
  if (fault_at(r, step, FaultKind::kHangHost)) hang_forever();
  if (int64_t ms = host_ms(r.shape, r.pos.rank, step); ms > 0)
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  for (const Fault& f : r.faults)
    if (f.rank == r.pos.rank && f.kind == FaultKind::kSlow && step >= f.step)
      std::this_thread::sleep_for(std::chrono::milliseconds(f.ms));

  bool replay = r.graphs && step > 0;
  if (replay && fault_at(r, step, FaultKind::kSkip)) {  // the whole replay is skipped
    if (r.slot) r.slot->steps_done.fetch_add(1);
    bump(r);
    return;
  }
  bool checking = step < r.check_until;
  fill(r, step);
  if (replay)
    replay_step(r, step);
  else
    issue_ops(r, step, false);

  // The step ends where a real loop reads its loss: the host waits for the stream.
  cuda_check(r, cuStreamSynchronize(r.stream), "cuStreamSynchronize");
  r.gate_comm = 0;
  if (checking) {
    int bad = check(r, step);
    if (bad && r.slot) r.slot->check_failures.fetch_add(bad);
  }
  if (r.slot) r.slot->steps_done.fetch_add(1);
  bump(r);
}

// ---- --elastic: leave, revoke, shrink, grow -------------------------------------------------------

// ncclCommGrow and ncclCommGetUniqueId are NCCL 2.30 calls the SDK's nccl.h may lack: looked up at
// run time (through the agent when it is preloaded, so they are recorded like every other call).
using GrowFn = ncclResult_t (*)(ncclComm_t, int, const ncclUniqueId*, int, ncclComm_t*, ncclConfig_t*);
using GetIdFn = ncclResult_t (*)(ncclComm_t, ncclUniqueId*);

template <class Fn>
Fn nccl_entry(Rank& r, const char* name) {
  auto fn = reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, name));
  if (!fn) die(r, kExitNcclError, std::string("the loaded NCCL has no ") + name + " (--elastic needs NCCL 2.30)");
  return fn;
}

void finalize_and_destroy(Rank& r, std::initializer_list<ncclComm_t*> comms) {
  for (ncclComm_t* c : comms) nccl_check(r, ncclCommFinalize(*c), "ncclCommFinalize");
  for (ncclComm_t* c : comms) {
    nccl_check(r, ncclCommDestroy(*c), "ncclCommDestroy");
    *c = nullptr;
  }
}

void drop_graph(Rank& r) {
  if (r.graph) rt_check(r, cudaGraphExecDestroy(r.graph), "cudaGraphExecDestroy");
  r.graph = nullptr;  // a graph captures communicators: the next replay captures the new ones
}

// The highest rank leaves the job at the elastic step, as a host that is taken away would.
[[noreturn]] void leave(Rank& r) {
  drop_graph(r);
  finalize_and_destroy(r, {&r.dp, &r.pp, &r.tp, &r.world});
  bump(r);
  std::fprintf(stderr, "fr-simjob-rank %d: leaving at step %d (--elastic)\n", r.pos.rank, r.shape.elastic);
  std::fflush(nullptr);
  std::_Exit(kRankExitLeft);
}

// The grown world: every member and the joiner call ncclCommGrow with the same size; the
// coordinating member (rank 0) makes the id and hands it to the joiner through the run directory.
void grow_world(Rank& r, ncclComm_t shrunk) {
  auto grow = nccl_entry<GrowFn>(r, "ncclCommGrow");
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.commName = "world";
  int n = r.shape.world();
  if (shrunk == nullptr) {  // the joiner: no parent, the coordinator's id, the freed rank
    ncclUniqueId id = read_id(r, "grow.uid", "the coordinating rank 0");
    nccl_check(r, grow(nullptr, n, &id, r.pos.rank, &r.world, &cfg), "ncclCommGrow(join)");
  } else if (r.pos.rank == 0) {
    ncclUniqueId id{};
    nccl_check(r, nccl_entry<GetIdFn>(r, "ncclCommGetUniqueId")(shrunk, &id), "ncclCommGetUniqueId");
    publish_id(r, "grow.uid", id);
    nccl_check(r, grow(shrunk, n, &id, -1, &r.world, &cfg), "ncclCommGrow");
  } else {
    nccl_check(r, grow(shrunk, n, nullptr, -1, &r.world, &cfg), "ncclCommGrow");
  }
  bump(r);
}

// A survivor at the elastic step: revoke the world, wait until it is quiescent, shrink it without
// the rank that left, drop the groups that held it, grow the world back and split the groups anew.
// A crash fault of this step hits between the revoke and the shrink.
void shrink_and_grow(Rank& r) {
  drop_graph(r);
  nccl_check(r, ncclCommRevoke(r.world, NCCL_REVOKE_DEFAULT), "ncclCommRevoke");
  for (ncclResult_t st = ncclInProgress; st == ncclInProgress;) {
    nccl_check(r, ncclCommGetAsyncError(r.world, &st), "ncclCommGetAsyncError");
    if (st != ncclSuccess && st != ncclInProgress)
      die(r, kExitNcclError, std::string("revoked world communicator: ") + ncclGetErrorString(st));
    if (st == ncclInProgress) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  bump(r);
  if (fault_at(r, r.shape.elastic, FaultKind::kCrash)) {
    std::fflush(nullptr);
    ::kill(::getpid(), SIGKILL);
  }
  int gone = r.shape.world() - 1;
  ncclComm_t shrunk = nullptr;
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.commName = "world-shrunk";
  nccl_check(r, ncclCommShrink(r.world, &gone, 1, &shrunk, &cfg, NCCL_SHRINK_DEFAULT), "ncclCommShrink");
  bump(r);
  nccl_check(r, ncclCommDestroy(r.world), "ncclCommDestroy(revoked world)");  // no finalize after a revoke
  r.world = nullptr;
  finalize_and_destroy(r, {&r.dp, &r.pp, &r.tp});
  grow_world(r, shrunk);
  finalize_and_destroy(r, {&shrunk});
  split_groups(r);
}

// The fresh process of the freed rank: a hang-host at the elastic step keeps it from ever calling
// ncclCommGrow; otherwise it joins and splits the groups with the others.
void join(Rank& r) {
  if (fault_at(r, r.shape.elastic, FaultKind::kHangHost)) hang_forever();
  grow_world(r, nullptr);
  split_groups(r);
}

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  return (*end == '\0' && x >= 0 && x < (1L << 30)) ? static_cast<int>(x) : -1;
}

int usage(const std::string& msg) {
  std::fprintf(stderr, "fr-simjob-rank: %s\n", msg.c_str());
  std::fprintf(stderr,
               "usage: fr-simjob-rank --nodes N --ranks-per-node R --tp T --pp P --steps S "
               "[--graphs] [--elastic STEP [--join]] [--fault SPEC]...\n(started by fr-simjob with RANK, WORLD_SIZE and %s set)\n",
               kEnvRunDir);
  return kExitUsage;
}

}  // namespace
}  // namespace fr::simjob

int main(int argc, char** argv) {
  using namespace fr::simjob;
  Rank r;
  if (argc == 2 && std::string(argv[1]) == "--version") {
    std::printf("%s\n", FR_VERSION_LINE("fr-simjob-rank"));
    return 0;
  }
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--graphs" || a == "--join") {
      (a == "--graphs" ? r.graphs : r.joiner) = true;
      continue;
    }
    if (i + 1 >= argc) return usage("missing value after " + a);
    std::string v = argv[++i];
    int* target = a == "--nodes"            ? &r.shape.nodes
                  : a == "--ranks-per-node" ? &r.shape.ranks_per_node
                  : a == "--tp"             ? &r.shape.tp
                  : a == "--pp"             ? &r.shape.pp
                  : a == "--steps"          ? &r.shape.steps
                  : a == "--elastic"        ? &r.shape.elastic
                                            : nullptr;
    // Options that may be 0 (or -1 for the pause step).
    int* zero_ok = a == "--step-ms"       ? &r.shape.step_ms
                   : a == "--step-jitter" ? &r.shape.jitter
                   : a == "--pause-step"  ? &r.shape.pause_step
                   : a == "--pause-ms"    ? &r.shape.pause_ms
                                          : nullptr;
    if (zero_ok) {
      char* end = nullptr;
      long x = std::strtol(v.c_str(), &end, 10);
      if (*end != '\0' || x < -1 || x > (1L << 30)) return usage("bad value for " + a + ": " + v);
      *zero_ok = static_cast<int>(x);
    } else if (target) {
      char* end = nullptr;
      long x = std::strtol(v.c_str(), &end, 10);
      long least = a == "--elastic" ? 0 : 1;
      if (*end != '\0' || x < least || x > (1L << 30)) return usage("bad value for " + a + ": " + v);
      *target = static_cast<int>(x);
    } else if (a == "--fault") {
      Fault f;
      std::string err;
      if (!parse_fault(v, &f, &err)) return usage(err);
      r.faults.push_back(f);
    } else {
      return usage("unknown option " + a);
    }
  }
  std::string err;
  if (!validate(r.shape, &r.faults, &err)) return usage(err);
  if (r.joiner && r.shape.elastic < 0) return usage("--join needs --elastic STEP");
  int rank = env_int("RANK", -1), world = env_int("WORLD_SIZE", -1);
  if (rank < 0 || rank >= r.shape.world() || world != r.shape.world())
    return usage("RANK/WORLD_SIZE missing or not matching the job shape");
  const char* run_dir = std::getenv(kEnvRunDir);
  if (!run_dir || !*run_dir) return usage(std::string(kEnvRunDir) + " is not set");
  r.run_dir = run_dir;
  r.pos = position_of(r.shape, rank);
  r.check_until = first_fault_step(r.faults);
  r.slot = map_board(rank);
  if (r.slot) {
    r.slot->pid.store(::getpid());
    r.slot->phase.store(static_cast<uint32_t>(RankPhase::kInit));
  }

  if (r.joiner && rank != r.shape.world() - 1) return usage("--join: only the highest rank is replaced");

  setup_cuda(r);
  if (r.joiner)
    join(r);
  else
    setup_comms(r);
  if (r.slot) r.slot->phase.store(static_cast<uint32_t>(RankPhase::kRunning));
  for (int step = r.joiner ? r.shape.elastic : 0; step < r.shape.steps; ++step) {
    if (step == r.shape.elastic && !r.joiner) {
      if (rank == r.shape.world() - 1) leave(r);
      shrink_and_grow(r);
    }
    run_step(r, step);
  }

  if (r.graph) rt_check(r, cudaGraphExecDestroy(r.graph), "cudaGraphExecDestroy");
  for (ncclComm_t* c : {&r.dp, &r.pp, &r.tp, &r.world})
    nccl_check(r, ncclCommFinalize(*c), "ncclCommFinalize");
  for (ncclComm_t* c : {&r.dp, &r.pp, &r.tp, &r.world})
    nccl_check(r, ncclCommDestroy(*c), "ncclCommDestroy");
  cuMemHostUnregister(r.host);
  std::free(r.host);
  cuStreamDestroy(r.stream);
  bump(r);
  uint64_t failures = r.slot ? r.slot->check_failures.load() : 0;
  if (r.slot)
    r.slot->phase.store(static_cast<uint32_t>(failures ? RankPhase::kFailed : RankPhase::kFinished));
  return failures ? kExitCheckFailed : 0;
}
