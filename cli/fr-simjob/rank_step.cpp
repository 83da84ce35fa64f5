// One training step of a rank. Per step: TP all-gather and reduce-scatter, the pipeline's forward
// and backward send/recv (each direction one NCCL group), the DP all-reduce of gradients, the
// world all-reduce of the loss and a world broadcast from rank 0; then the stream is synchronized
// and, until the first fault, the data is checked. Faults are injected exactly where the
// specification says. With --graphs, every step after the first replays the step captured once
// into a CUDA graph through the CUDA runtime (as torch captures it); faults then act on replays.
#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "rank.h"

namespace fr::simjob {

namespace {

float* hptr(Rank& r, const Rank::Buf& b) { return r.host + b.off; }
void* dptr(Rank& r, const Rank::Buf& b) {
  return reinterpret_cast<void*>(r.dev + b.off * sizeof(float));
}
cudaStream_t nccl_stream(Rank& r) { return reinterpret_cast<cudaStream_t>(r.stream); }

// ---- faults ------------------------------------------------------------------------------------

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
  cuda_check(
      r,
      cuLaunchHostFunc(r.stream, stall_host_fn, reinterpret_cast<void*>(static_cast<intptr_t>(ms))),
      "cuLaunchHostFunc(stall)");
}

// A transport fault (chan-stall, proxy-stall, proxy-recv-stall, link-down) is armed in the
// emulation for the collective `nth` of `comm` in the step (0: the first) (frsim_nccl_fault, sim/include/fr_sim_nccl.h),
// looked up at run time: on a real NCCL there is nothing to arm and the fault does not happen.
ncclComm_t comm_handle(Rank& r, CommKind comm) {
  switch (comm) {
    case CommKind::kWorld: return r.world;
    case CommKind::kTp: return r.tp;
    case CommKind::kPp: return r.pp;
    case CommKind::kDp: return r.dp;
  }
  return nullptr;
}

void arm_transport_fault(Rank& r, int step, CommKind comm) {
  static const std::pair<FaultKind, int> kKinds[] = {{FaultKind::kChanStall, 1},
                                                     {FaultKind::kProxyStall, 2},
                                                     {FaultKind::kProxyRecvStall, 3},
                                                     {FaultKind::kLinkDown, 4}};
  using Arm = ncclResult_t (*)(ncclComm_t, int, int, int, int, int);
  static Arm arm = reinterpret_cast<Arm>(dlsym(RTLD_DEFAULT, "frsim_nccl_fault"));
  for (auto [kind, code] : kKinds) {
    const Fault* f = fault_on(r, step, kind, comm);
    if (f == nullptr || arm == nullptr) continue;
    int peer = -1;
    if (f->peer >= 0) {
      std::vector<int> g = group_of(r.shape, r.pos.rank, comm);
      peer = static_cast<int>(std::find(g.begin(), g.end(), f->peer) - g.begin());
    }
    if (arm(comm_handle(r, comm), code, f->channel, peer, f->at, f->nth) != ncclSuccess)
      std::fprintf(stderr, "fr-simjob-rank: cannot arm %s\n", f->to_spec().c_str());
  }
}

// gpu-slow and link-slow multiply the emulation's pace (frsim_gpu_slow, frsim_nccl_link_slow of
// sim/include/fr_sim_nccl.h, looked up at run time: on a real NCCL nothing slows down). Applied
// at every step from S on, so communicators made again (--elastic) are slowed as well.
void apply_fail_slow(Rank& r, int step) {
  using GpuSlow = ncclResult_t (*)(double);
  using LinkSlow = ncclResult_t (*)(ncclComm_t, int, double);
  static GpuSlow gpu = reinterpret_cast<GpuSlow>(dlsym(RTLD_DEFAULT, "frsim_gpu_slow"));
  static LinkSlow link = reinterpret_cast<LinkSlow>(dlsym(RTLD_DEFAULT, "frsim_nccl_link_slow"));
  for (const Fault& f : r.faults) {
    if (f.rank != r.pos.rank || step < f.step) continue;
    if (f.kind == FaultKind::kGpuSlow && gpu != nullptr && gpu(f.factor) != ncclSuccess)
      std::fprintf(stderr, "fr-simjob-rank: cannot apply %s\n", f.to_spec().c_str());
    if (f.kind != FaultKind::kLinkSlow || link == nullptr) continue;
    // Every collective communicator that holds both ends carries the link (pp has no
    // collectives).
    for (CommKind k : {CommKind::kWorld, CommKind::kTp, CommKind::kDp}) {
      std::vector<int> g = group_of(r.shape, r.pos.rank, k);
      auto it = std::find(g.begin(), g.end(), f.peer);
      ncclComm_t c = comm_handle(r, k);
      if (it == g.end() || c == nullptr) continue;
      if (link(c, static_cast<int>(it - g.begin()), f.factor) != ncclSuccess)
        std::fprintf(stderr, "fr-simjob-rank: cannot apply %s on %s\n", f.to_spec().c_str(),
                     comm_kind_name(k));
    }
  }
}

// --graphs: a kernel captured before a communicator's first op; it counts the replays that reach
// it and stalls the one the host armed (a device counter and flag read by a spinning kernel, on
// a real GPU), wherever the host is by then.
struct Gate {
  Rank* r;
  CommKind comm;
};

void gate_fn(void* p) {
  auto* g = static_cast<Gate*>(p);
  const int c = static_cast<int>(g->comm);
  uint64_t run = g->r->gate_runs[c].fetch_add(1) + 1;
  if (run != g->r->gate_at[c].load()) return;
  int64_t ms = g->r->gate_ms[c];
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
  arm_transport_fault(r, step, comm);
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
        std::fprintf(stderr, "fr-simjob-rank %d: step %d: %s[%zu] = %g, expected %g\n", r.pos.rank,
                     step, what, i, p[i], want);
        ++bad;
        return;
      }
    }
  };
  int t = r.shape.tp;
  expect("tp all-gather", hptr(r, r.ag_recv), kTpCount * t,
         [&](size_t i) { return 1000.0f * static_cast<float>(i / kTpCount + 1) + step_tag(step); });
  expect("tp reduce-scatter", hptr(r, r.rs_recv), kTpCount,
         [&](size_t) { return static_cast<float>(t * (t + 1) / 2 + t * r.pos.tp_rank); });
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
    std::string line =
        "xid " + sim_gpu_bus_id(r.pos.local_rank) + " " + std::to_string(f.xid) + "\n";
    int fd = ::open((std::string(nvml) + ".events").c_str(),
                    O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
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
    nccl_check(
        r,
        ncclReduceScatter(dptr(r, r.rs_send), dptr(r, r.rs_recv), a.count, a.dtype, a.op, r.tp, s),
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
    nccl_check(r,
               ncclAllReduce(dptr(r, r.loss), dptr(r, r.loss), a.count, a.dtype, a.op, r.world, s),
               "ncclAllReduce(world)");
    bump(r);
  }
  {
    CollArgs a{kBcastCount};
    a.root = fault_on(r, step, FaultKind::kMismatchRoot, CommKind::kWorld) ? 1 : 0;
    nccl_check(
        r, ncclBroadcast(dptr(r, r.bcast), dptr(r, r.bcast), a.count, a.dtype, a.root, r.world, s),
        "ncclBroadcast(world)");
    bump(r);
  }
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

// One replay: the gate armed for a gpu-stall of this step (by the replay's launch number), a
// graph of its own for a fault that changes the ops, the faultless graph otherwise.
void replay_step(Rank& r, int step) {
  if (!r.graph) r.graph = capture_step(r, -1);
  cudaGraphExec_t exec = r.graph;
  if (captures_differently(r, step)) exec = capture_step(r, step);
  const uint64_t launch = ++r.launches;
  for (const Fault& f : r.faults)
    if (f.rank == r.pos.rank && f.step == step && f.kind == FaultKind::kGpuStall) {
      const int c = static_cast<int>(f.comm);
      r.gate_ms[c] = f.ms;
      r.gate_at[c].store(launch);
    }
  rt_check(r, cudaGraphLaunch(exec, nccl_stream(r)), "cudaGraphLaunch");
  bump(r);
}

// --run-ahead: the step ends once the previous replay has finished; this one may still run.
void wait_previous_replay(Rank& r, int step) {
  CUevent& done = r.replay_done[step % 2];
  if (!done) cuda_check(r, cuEventCreate(&done, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
  cuda_check(r, cuEventRecord(done, r.stream), "cuEventRecord");
  if (CUevent prev = r.replay_done[(step + 1) % 2])
    cuda_check(r, cuEventSynchronize(prev), "cuEventSynchronize");
}
}  // namespace

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
  apply_fail_slow(r, step);

  bool replay = r.graphs && step > 0;
  if (replay && fault_at(r, step, FaultKind::kSkip)) {  // the whole replay is skipped
    if (r.slot) r.slot->steps_done.fetch_add(1);
    bump(r);
    return;
  }
  // Running ahead, the buffers belong to a replay that may still run: left alone, not checked.
  bool ahead = replay && r.run_ahead;
  bool checking = step < r.check_until && !ahead;
  if (!ahead) fill(r, step);
  if (replay)
    replay_step(r, step);
  else
    issue_ops(r, step, false);

  // The step ends where a real loop reads its loss: the host waits for the stream.
  if (ahead)
    wait_previous_replay(r, step);
  else
    cuda_check(r, cuStreamSynchronize(r.stream), "cuStreamSynchronize");
  if (checking) {
    int bad = check(r, step);
    if (bad && r.slot) r.slot->check_failures.fetch_add(bad);
  }
  if (r.slot) r.slot->steps_done.fetch_add(1);
  bump(r);
}

}  // namespace fr::simjob
