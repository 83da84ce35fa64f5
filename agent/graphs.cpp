// CUDA graphs that hold NCCL work. A collective captured into a graph runs at every replay, not
// at its call, so the agent follows graphs from capture to launch:
//  - capture: each NCCL op issued on a capturing stream gets a position K in its graph; stream
//    memory writes captured around it make every replay write "op K started / finished" into the
//    communicator's entry (graph_started, graph_completed), and the op is kept in the capture table
//    of the log, out of the ring, so replays never overwrite what they run; before the graph's
//    first op, a small kernel (replay_kernel.h) is captured that counts the replays on the GPU and
//    resets the graph's positions there, so they belong to the replay the GPU runs, not to the
//    newest one the host launched (without the kernel, each launch resets them from the host);
//  - instantiate (runtime and driver): the executable graph is mapped to the captured one;
//  - launch (cudaGraphLaunch as torch calls it, with its libcudart.so.13 version, cuGraphLaunch,
//    and the driver entries the runtime fetches through cuGetProcAddress): one ring record per
//    replay, and each communicator's sequence counters advance by the graph's ops on it.
// A launch costs a lock-free lookup, a few atomic adds and one record; nothing per captured op.
// Graphs without NCCL work, and every launch before the agent records, are plain forwards.
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <string.h>

#include "comms.h"
#include "gpu.h"
#include "graphs.h"
#include "log.h"

using namespace fr::agent;

namespace {

constexpr const char* kCudartVersion = "libcudart.so.13";

// Set while a runtime graph call runs: the driver call it makes is the same launch.
constinit thread_local int t_in_graph_call __attribute__((tls_model("initial-exec"))) = 0;

uint32_t exec_bucket(uint64_t key) {
  return (uint32_t)((key * 0x9e3779b97f4a7c15ull) >> 40) & (kExecBuckets - 1);
}

int32_t exec_lookup(uint64_t key) {
  ExecSlot* t = g_graphs.execs;
  uint32_t i = exec_bucket(key);
  for (uint32_t probes = 0; probes < kExecBuckets; ++probes, i = (i + 1) & (kExecBuckets - 1)) {
    uint64_t k = __atomic_load_n(&t[i].key, __ATOMIC_ACQUIRE);
    if (k == key) return __atomic_load_n(&t[i].graph, __ATOMIC_ACQUIRE);
    if (k == 0) return -1;
  }
  return -1;
}

// Under g_graphs.lock. An exec handle may be reused after its graph was destroyed: the newest wins.
void exec_map(uint64_t key, int32_t graph) {
  ExecSlot* t = g_graphs.execs;
  uint32_t i = exec_bucket(key);
  for (uint32_t probes = 0; probes < kExecBuckets; ++probes, i = (i + 1) & (kExecBuckets - 1)) {
    uint64_t k = __atomic_load_n(&t[i].key, __ATOMIC_RELAXED);
    if (k == key) {
      __atomic_store_n(&t[i].graph, graph, __ATOMIC_RELEASE);
      return;
    }
    if (k == 0) {
      if (graph < 0) return;  // nothing to forget
      __atomic_store_n(&t[i].graph, graph, __ATOMIC_RELAXED);
      __atomic_store_n(&t[i].key, key, __ATOMIC_RELEASE);
      return;
    }
  }
  debug_log("graph exec map full; launches of exec %llx go unrecorded", (unsigned long long)key);
}

bool active() { return __atomic_load_n(&g_agent.mode, __ATOMIC_ACQUIRE) == kRecording; }

// After a successful instantiation: which captured graph (if any) the exec runs.
void note_instantiate(const void* exec_out, const void* graph) {
  if (!active() || exec_out == nullptr) return;
  uint64_t exec = (uint64_t)(uintptr_t) * (void* const*)exec_out;
  if (exec == 0) return;
  pthread_mutex_lock(&g_graphs.lock);
  int32_t slot = -1;
  for (uint32_t i = 0; i < g_graphs.next_slot; ++i)
    if (__atomic_load_n(&g_graphs.priv[i].handle, __ATOMIC_RELAXED) == (uint64_t)(uintptr_t)graph)
      slot = (int32_t)i;  // the newest capture into this graph
  exec_map(exec, slot);
  pthread_mutex_unlock(&g_graphs.lock);
}

void clear_flag(int32_t g, uint32_t flag) {
  __atomic_fetch_and(&g_log.graphs[g].flags, ~flag, __ATOMIC_RELAXED);
}

// One replay: the record and the communicators' sequence counters.
template <class Call>
int launch(const void* exec, const void* stream, Call call) {
  if (t_in_graph_call || !active()) return call();
  int32_t g = exec_lookup((uint64_t)(uintptr_t)exec);
  if (g < 0) return call();
  ++t_in_graph_call;
  fr_graph_entry* e = &g_log.graphs[g];
  fr_record r = {};
  r.call_ns = now_ns();
  r.tid = current_tid();
  r.op = FR_OP_GRAPH_LAUNCH;
  r.seq = __atomic_add_fetch(&e->replays, 1, __ATOMIC_RELAXED);
  r.aux = __atomic_load_n(&e->id, __ATOMIC_RELAXED);
  r.count = __atomic_load_n(&e->n_ops, __ATOMIC_RELAXED);
  r.op_index = (uint64_t)g + 1;
  r.stream = (uint64_t)(uintptr_t)stream;
  r.redop = -1;
  r.peer = -1;
  r.result = FR_RESULT_PENDING;
  r.flags = FR_REC_F_IN_CALL;
  __atomic_store_n(&e->last_launch_ns, r.call_ns, __ATOMIC_RELAXED);
  const GraphPriv& gp = g_graphs.priv[g];
  uint32_t n_comms = __atomic_load_n(&gp.n_comms, __ATOMIC_ACQUIRE);
  // The graph's replay kernel resets its positions on the GPU, when the replay starts there; the
  // host must not, or a replay launched while the previous one still runs would take over the
  // positions that one writes. Without the kernel, replay N starts from "no op reached" here.
  if (!(__atomic_load_n(&e->flags, __ATOMIC_RELAXED) & FR_GRAPH_F_GPU_REPLAYS)) {
    const uint64_t zero = FR_GRAPH_POS(g + 1, 0);
    for (uint32_t i = 0; i < n_comms; ++i) {
      fr_comm_entry* ce = &g_log.comms[gp.comms[i].slot];
      __atomic_store_n(&ce->graph_started, zero, __ATOMIC_RELAXED);
      __atomic_store_n(&ce->graph_completed, zero, __ATOMIC_RELEASE);
    }
  }
  record_begin(r);
  int res = call();
  uint64_t end = now_ns();
  r.duration_ns = end > r.call_ns ? end - r.call_ns : 0;
  r.result = res;
  if (res == 0) {
    // The graph's ops take their sequence numbers now, in host order, as NCCL gives them.
    for (uint32_t i = 0; i < n_comms; ++i) {
      fr_comm_entry* ce = &g_log.comms[gp.comms[i].slot];
      if (gp.comms[i].n_coll)
        __atomic_add_fetch(&ce->coll_seq, gp.comms[i].n_coll, __ATOMIC_RELAXED);
      if (gp.comms[i].n_p2p) __atomic_add_fetch(&ce->p2p_seq, gp.comms[i].n_p2p, __ATOMIC_RELAXED);
    }
    r.flags = FR_REC_F_LAUNCHED;
    r.gpu_state = FR_GPU_ENQUEUED;
  } else {
    // Not a replay: `replays` counts those the GPU will run, as its own counter does.
    __atomic_sub_fetch(&e->replays, 1, __ATOMIC_RELAXED);
    r.flags = FR_REC_F_NEVER_LAUNCHED;
  }
  record_update(r);
  --t_in_graph_call;
  return res;
}

// Real functions. Driver: the next definition, else inside an already loaded libcuda.so.1 (the
// runtime dlopens it privately). Runtime: the libcudart.so.13 version first, as torch binds it.
void* resolve_in(const char* lib, const char* name, const char* version, const void* self) {
  void* p = version != nullptr ? real_dlvsym(RTLD_NEXT, name, version) : nullptr;
  if (p == nullptr || p == self) p = real_dlsym(RTLD_NEXT, name);
  if (p == nullptr || p == self) {
    p = nullptr;
    void* h = os_dlopen(lib, RTLD_NOLOAD | RTLD_LAZY);
    if (h != nullptr) {
      p = version != nullptr ? real_dlvsym(h, name, version) : nullptr;
      if (p == nullptr || p == self) p = real_dlsym(h, name);
      if (p == self) p = nullptr;
      os_dlclose(h);
    }
  }
  return p;
}

void* cached(void** cache, const char* lib, const char* name, const char* version,
             const void* self) {
  void* p = __atomic_load_n(cache, __ATOMIC_ACQUIRE);
  if (__builtin_expect(p == nullptr, 0)) {
    p = resolve_in(lib, name, version, self);
    if (p != nullptr) __atomic_store_n(cache, p, __ATOMIC_RELEASE);
  }
  return p;
}

}  // namespace

namespace fr::agent {

constinit GraphState g_graphs = {};

CaptureRef graph_capture_op(fr_record& r, int32_t comm_slot, bool p2p, bool) {
  CaptureRef out = {-1, 0, false};
  uint64_t capture_id = 0, graph = 0;
  if (!gpu_capture_info(r.stream, &capture_id, &graph)) return out;
  pthread_mutex_lock(&g_graphs.lock);
  int32_t g = -1;
  for (uint32_t i = 0; i < g_graphs.next_slot; ++i)
    if (g_graphs.priv[i].capture_id == capture_id &&
        __atomic_load_n(&g_graphs.priv[i].handle, __ATOMIC_RELAXED) == graph)
      g = (int32_t)i;
  if (g < 0 && g_graphs.next_slot < g_log.graph_cap) {
    g = (int32_t)g_graphs.next_slot++;
    GraphPriv& p = g_graphs.priv[g];
    memset(&p, 0, sizeof p);
    p.capture_id = capture_id;
    __atomic_store_n(&p.handle, graph, __ATOMIC_RELEASE);
    fr_graph_entry e = {};
    e.ordinal = (uint32_t)g + 1;
    e.id = hash_finish(hash_u64(
        hash_u64(hash_u64(kHashSeed, (uint64_t)g_log.hdr->pid), g_log.hdr->create_ns), e.ordinal));
    e.capture_ns = r.call_ns;
    e.stream = r.stream;
    fr_graph_publish_fixed(&g_log.graphs[g], &e);
    // Before the first op's position write: the replay kernel counts the replay and resets the
    // graph's positions (a kernel node, captured once; nothing per op).
    uint32_t flags = FR_GRAPH_F_GPU_POSITION;
    if (gpu_capture_replay_kernel(r.stream, &g_log.graphs[g].gpu_replays, e.ordinal))
      flags |= FR_GRAPH_F_GPU_REPLAYS;
    __atomic_store_n(&g_log.graphs[g].flags, flags, __ATOMIC_RELAXED);
    __atomic_fetch_add(&g_log.sections[FR_SECTION_GRAPHS].count, 1, __ATOMIC_RELEASE);
  } else if (g < 0) {
    __atomic_fetch_add(&g_log.sections[FR_SECTION_GRAPHS].dropped, 1, __ATOMIC_RELAXED);
  }
  if (g >= 0) {
    GraphPriv& p = g_graphs.priv[g];
    fr_graph_entry* e = &g_log.graphs[g];
    out.graph = g;
    out.pos = ++p.next_op;
    __atomic_store_n(&e->n_ops, out.pos, __ATOMIC_RELAXED);
    GraphComm* gc = nullptr;
    if (comm_slot >= 0) {
      for (uint32_t i = 0; i < p.n_comms; ++i)
        if (p.comms[i].slot == comm_slot) gc = &p.comms[i];
      if (gc == nullptr && p.n_comms < kMaxGraphComms) {
        gc = &p.comms[p.n_comms];
        *gc = GraphComm{comm_slot, 0, 0};
        __atomic_store_n(&p.n_comms, p.n_comms + 1, __ATOMIC_RELEASE);
      }
    }
    if (gc != nullptr) {
      if (p2p)
        ++gc->n_p2p;
      else
        ++gc->n_coll;
      fr_comm_entry* ce = &g_log.comms[comm_slot];
      uint32_t ord = e->ordinal;
      // Each launch resets the positions (launch below); the replay then marks op K started.
      out.marked = gpu_write_word(r.stream, &ce->graph_started, FR_GRAPH_POS(ord, out.pos));
    }
    if (!out.marked) clear_flag(g, FR_GRAPH_F_GPU_POSITION);
    r.aux = __atomic_load_n(&e->id, __ATOMIC_RELAXED);
    r.op_index = out.pos;
    if (out.marked) r.flags |= FR_REC_F_GPU_POSITION;
  }
  pthread_mutex_unlock(&g_graphs.lock);
  return out;
}

void graph_capture_done(const CaptureRef& cr, int32_t comm_slot, uint64_t stream,
                        const fr_record& r, bool ok, bool write_end) {
  if (cr.graph < 0) return;
  if (write_end && cr.marked && comm_slot >= 0) {
    if (!ok || !gpu_write_word(stream, &g_log.comms[comm_slot].graph_completed,
                               FR_GRAPH_POS(cr.graph + 1, cr.pos)))
      clear_flag(cr.graph, FR_GRAPH_F_GPU_POSITION);
  }
  uint32_t i = __atomic_fetch_add(&g_graphs.next_capture_slot, 1, __ATOMIC_RELAXED);
  if (i >= g_log.capture_cap) {
    __atomic_fetch_or(&g_log.graphs[cr.graph].flags, FR_GRAPH_F_OPS_DROPPED, __ATOMIC_RELAXED);
    return;
  }
  fr_record copy = r;
  copy.id = i;
  fr_record_publish(&g_log.captures[i], &copy);
  __atomic_fetch_add(&g_log.sections[FR_SECTION_CAPTURES].count, 1, __ATOMIC_RELEASE);
}

void graph_capture_finish_in_group(const CaptureRef& cr, int32_t comm_slot, uint64_t stream,
                                   ncclResult_t res) {
  if (cr.graph < 0 || !cr.marked || comm_slot < 0) return;
  bool ok = res == ncclSuccess || res == ncclInProgress;
  if (!ok || !gpu_write_word(stream, &g_log.comms[comm_slot].graph_completed,
                             FR_GRAPH_POS(cr.graph + 1, cr.pos)))
    clear_flag(cr.graph, FR_GRAPH_F_GPU_POSITION);
}

void graphs_forget_in_child() {
  // The child does not share the parent's graphs (its log is new when it records).
  // (The lock was made anew by the fork handler; the driver's entry points stay valid.)
  g_graphs.priv = nullptr;  // in the parent's private mapping (log.h)
  g_graphs.execs = nullptr;
  g_graphs.next_slot = 0;
  g_graphs.next_capture_slot = 0;
  t_in_graph_call = 0;
}

}  // namespace fr::agent

// ---- exported entry points ---------------------------------------------------------------------

#define FR_CU_API extern "C" __attribute__((visibility("default")))

namespace {
using LaunchFn = CUresult (*)(CUgraphExec, CUstream);
using InstFlagsFn = CUresult (*)(CUgraphExec*, CUgraph, unsigned long long);
using InstParamsFn = CUresult (*)(CUgraphExec*, CUgraph, CUDA_GRAPH_INSTANTIATE_PARAMS*);
using ProcFn = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
using ProcV1Fn = CUresult (*)(const char*, void**, int, cuuint64_t);

constexpr CUresult kNoDriver = CUDA_ERROR_NOT_INITIALIZED;
constexpr cudaError_t kNoRuntime = cudaErrorInitializationError;

// The one path of every graph entry point: the driver's exports, the driver pointers the agent
// hands out through cuGetProcAddress, and the runtime's exports. Each forwards to `real`, or
// answers `missing` when there is none. A launch records the replay; its real call runs flagged,
// so the driver launch a runtime launch makes inside is the same replay, never a second one.
template <class Result, class Fn, class Exec, class Stream>
Result launch_entry(Fn real, Result missing, Exec exec, Stream stream) {
  if (real == nullptr) return missing;
  return (Result)launch(exec, stream, [&] {
    ++t_in_graph_call;
    int r = (int)real(exec, stream);
    --t_in_graph_call;
    return r;
  });
}

// An instantiation maps the new exec to the graph it was captured from (0 is success in both APIs).
template <class Result, class Fn, class Exec, class Graph, class Arg>
Result instantiate_entry(Fn real, Result missing, Exec* exec, Graph graph, Arg arg) {
  if (real == nullptr) return missing;
  Result res = real(exec, graph, arg);
  if ((int)res == 0) note_instantiate(exec, graph);
  return res;
}
}  // namespace

#define FR_CU_REAL(type, sym, self)                                                  \
  ([]() {                                                                            \
    static void* cache_;                                                             \
    return (type)cached(&cache_, "libcuda.so.1", sym, nullptr, (const void*)(self)); \
  }())
#define FR_RT_REAL(type, sym, self)                                                         \
  ([]() {                                                                                   \
    static void* cache_;                                                                    \
    return (type)cached(&cache_, kCudartVersion, sym, kCudartVersion, (const void*)(self)); \
  }())

FR_CU_API CUresult fr_cuGraphLaunch(CUgraphExec exec, CUstream stream) __asm__("cuGraphLaunch");
FR_CU_API CUresult fr_cuGraphLaunch(CUgraphExec exec, CUstream stream) {
  return launch_entry(FR_CU_REAL(LaunchFn, "cuGraphLaunch", &fr_cuGraphLaunch), kNoDriver, exec,
                      stream);
}

FR_CU_API CUresult fr_cuGraphLaunch_ptsz(CUgraphExec exec,
                                         CUstream stream) __asm__("cuGraphLaunch_ptsz");
FR_CU_API CUresult fr_cuGraphLaunch_ptsz(CUgraphExec exec, CUstream stream) {
  return launch_entry(FR_CU_REAL(LaunchFn, "cuGraphLaunch_ptsz", &fr_cuGraphLaunch_ptsz), kNoDriver,
                      exec, stream);
}

FR_CU_API CUresult
fr_cuGraphInstantiateWithFlags(CUgraphExec* exec, CUgraph graph,
                               unsigned long long flags) __asm__("cuGraphInstantiateWithFlags");
FR_CU_API CUresult fr_cuGraphInstantiateWithFlags(CUgraphExec* exec, CUgraph graph,
                                                  unsigned long long flags) {
  return instantiate_entry(
      FR_CU_REAL(InstFlagsFn, "cuGraphInstantiateWithFlags", &fr_cuGraphInstantiateWithFlags),
      kNoDriver, exec, graph, flags);
}

FR_CU_API CUresult fr_cuGraphInstantiateWithParams(
    CUgraphExec* exec, CUgraph graph,
    CUDA_GRAPH_INSTANTIATE_PARAMS* params) __asm__("cuGraphInstantiateWithParams");
FR_CU_API CUresult fr_cuGraphInstantiateWithParams(CUgraphExec* exec, CUgraph graph,
                                                   CUDA_GRAPH_INSTANTIATE_PARAMS* params) {
  return instantiate_entry(
      FR_CU_REAL(InstParamsFn, "cuGraphInstantiateWithParams", &fr_cuGraphInstantiateWithParams),
      kNoDriver, exec, graph, params);
}

FR_CU_API CUresult fr_cuGraphInstantiateWithParams_ptsz(
    CUgraphExec* exec, CUgraph graph,
    CUDA_GRAPH_INSTANTIATE_PARAMS* params) __asm__("cuGraphInstantiateWithParams_ptsz");
FR_CU_API CUresult fr_cuGraphInstantiateWithParams_ptsz(CUgraphExec* exec, CUgraph graph,
                                                        CUDA_GRAPH_INSTANTIATE_PARAMS* params) {
  return instantiate_entry(FR_CU_REAL(InstParamsFn, "cuGraphInstantiateWithParams_ptsz",
                                      &fr_cuGraphInstantiateWithParams_ptsz),
                           kNoDriver, exec, graph, params);
}

// ---- the driver entries the runtime fetches through cuGetProcAddress --------------------------

namespace {
template <class Fn>
Fn proc_real(void** entry) {
  return (Fn)__atomic_load_n(entry, __ATOMIC_ACQUIRE);
}
CUresult proc_launch(CUgraphExec exec, CUstream stream) {
  return launch_entry(proc_real<LaunchFn>(&g_graphs.proc_launch), kNoDriver, exec, stream);
}
CUresult proc_launch_ptsz(CUgraphExec exec, CUstream stream) {
  return launch_entry(proc_real<LaunchFn>(&g_graphs.proc_launch_ptsz), kNoDriver, exec, stream);
}
CUresult proc_inst_flags(CUgraphExec* exec, CUgraph graph, unsigned long long flags) {
  return instantiate_entry(proc_real<InstFlagsFn>(&g_graphs.proc_inst_flags), kNoDriver, exec,
                           graph, flags);
}
CUresult proc_inst_params(CUgraphExec* exec, CUgraph graph, CUDA_GRAPH_INSTANTIATE_PARAMS* p) {
  return instantiate_entry(proc_real<InstParamsFn>(&g_graphs.proc_inst_params), kNoDriver, exec,
                           graph, p);
}
CUresult proc_inst_params_ptsz(CUgraphExec* exec, CUgraph graph, CUDA_GRAPH_INSTANTIATE_PARAMS* p) {
  return instantiate_entry(proc_real<InstParamsFn>(&g_graphs.proc_inst_params_ptsz), kNoDriver,
                           exec, graph, p);
}

// The agent's entry in place of the driver's, remembering the driver's; `fn` unchanged otherwise.
// One driver function per name and stream flavour, so the first pointer handed out is kept.
bool is_own_entry(void* fn);

void* substitute_proc(const char* symbol, void* fn, int cuda_version, cuuint64_t flags) {
  // A driver that looks its own names up with dlsym gets the agent's exports already (dl.cpp).
  if (fn == nullptr || symbol == nullptr || is_own_entry(fn)) return fn;
  bool ptsz = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
  void** cache = nullptr;
  void* ours = nullptr;
  if (strcmp(symbol, "cuGraphLaunch") == 0) {
    cache = ptsz ? &g_graphs.proc_launch_ptsz : &g_graphs.proc_launch;
    ours = ptsz ? (void*)&proc_launch_ptsz : (void*)&proc_launch;
  } else if (strcmp(symbol, "cuGraphInstantiateWithFlags") == 0 ||
             (strcmp(symbol, "cuGraphInstantiate") == 0 && cuda_version >= 12000)) {
    cache = &g_graphs.proc_inst_flags;
    ours = (void*)&proc_inst_flags;
  } else if (strcmp(symbol, "cuGraphInstantiateWithParams") == 0) {
    cache = ptsz ? &g_graphs.proc_inst_params_ptsz : &g_graphs.proc_inst_params;
    ours = ptsz ? (void*)&proc_inst_params_ptsz : (void*)&proc_inst_params;
  } else {
    return fn;
  }
  void* expected = nullptr;
  if (!__atomic_compare_exchange_n(cache, &expected, fn, false, __ATOMIC_ACQ_REL,
                                   __ATOMIC_ACQUIRE) &&
      expected != fn)
    return fn;  // a different driver function under the same name: leave it alone
  return ours;
}
}  // namespace

namespace {
bool is_own_entry(void* fn) {
  return fn == (void*)&fr_cuGraphLaunch || fn == (void*)&fr_cuGraphLaunch_ptsz ||
         fn == (void*)&fr_cuGraphInstantiateWithFlags ||
         fn == (void*)&fr_cuGraphInstantiateWithParams ||
         fn == (void*)&fr_cuGraphInstantiateWithParams_ptsz;
}
}  // namespace

FR_CU_API CUresult
fr_cuGetProcAddress_v2(const char* symbol, void** pfn, int cuda_version, cuuint64_t flags,
                       CUdriverProcAddressQueryResult* status) __asm__("cuGetProcAddress_v2");
FR_CU_API CUresult fr_cuGetProcAddress_v2(const char* symbol, void** pfn, int cuda_version,
                                          cuuint64_t flags,
                                          CUdriverProcAddressQueryResult* status) {
  auto real = FR_CU_REAL(ProcFn, "cuGetProcAddress_v2", &fr_cuGetProcAddress_v2);
  if (real == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  CUresult res = real(symbol, pfn, cuda_version, flags, status);
  if (res == CUDA_SUCCESS && pfn != nullptr)
    *pfn = substitute_proc(symbol, *pfn, cuda_version, flags);
  return res;
}

FR_CU_API CUresult fr_cuGetProcAddress(const char* symbol, void** pfn, int cuda_version,
                                       cuuint64_t flags) __asm__("cuGetProcAddress");
FR_CU_API CUresult fr_cuGetProcAddress(const char* symbol, void** pfn, int cuda_version,
                                       cuuint64_t flags) {
  auto real = FR_CU_REAL(ProcV1Fn, "cuGetProcAddress", &fr_cuGetProcAddress);
  if (real == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  CUresult res = real(symbol, pfn, cuda_version, flags);
  if (res == CUDA_SUCCESS && pfn != nullptr)
    *pfn = substitute_proc(symbol, *pfn, cuda_version, flags);
  return res;
}

// ---- the CUDA runtime (libcudart.so.13), as torch's libtorch_cuda.so calls it ------------------
// Exported unversioned: an unversioned definition satisfies torch's versioned reference
// (cudaGraphLaunch@libcudart.so.13), as the agent's dlsym does for glibc's; the real function is
// looked up under that version.

namespace {
using RtLaunchFn = cudaError_t (*)(cudaGraphExec_t, cudaStream_t);
using RtInstFn = cudaError_t (*)(cudaGraphExec_t*, cudaGraph_t, unsigned long long);
using RtInstParamsFn = cudaError_t (*)(cudaGraphExec_t*, cudaGraph_t, cudaGraphInstantiateParams*);
}  // namespace

FR_CU_API cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
  return launch_entry(FR_RT_REAL(RtLaunchFn, "cudaGraphLaunch", &cudaGraphLaunch), kNoRuntime, exec,
                      stream);
}

FR_CU_API cudaError_t cudaGraphLaunch_ptsz(cudaGraphExec_t exec, cudaStream_t stream) {
  return launch_entry(FR_RT_REAL(RtLaunchFn, "cudaGraphLaunch_ptsz", &cudaGraphLaunch_ptsz),
                      kNoRuntime, exec, stream);
}

FR_CU_API cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph,
                                           unsigned long long flags) {
  return instantiate_entry(
      FR_RT_REAL(RtInstFn, "cudaGraphInstantiate", (RtInstFn)&cudaGraphInstantiate), kNoRuntime,
      exec, graph, flags);
}

FR_CU_API cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t* exec, cudaGraph_t graph,
                                                    unsigned long long flags) {
  return instantiate_entry(FR_RT_REAL(RtInstFn, "cudaGraphInstantiateWithFlags",
                                      (RtInstFn)&cudaGraphInstantiateWithFlags),
                           kNoRuntime, exec, graph, flags);
}

FR_CU_API cudaError_t cudaGraphInstantiateWithParams(cudaGraphExec_t* exec, cudaGraph_t graph,
                                                     cudaGraphInstantiateParams* params) {
  return instantiate_entry(FR_RT_REAL(RtInstParamsFn, "cudaGraphInstantiateWithParams",
                                      (RtInstParamsFn)&cudaGraphInstantiateWithParams),
                           kNoRuntime, exec, graph, params);
}

extern "C" cudaError_t cudaGraphInstantiateWithParams_ptsz(cudaGraphExec_t*, cudaGraph_t,
                                                           cudaGraphInstantiateParams*);
FR_CU_API cudaError_t cudaGraphInstantiateWithParams_ptsz(cudaGraphExec_t* exec, cudaGraph_t graph,
                                                          cudaGraphInstantiateParams* params) {
  return instantiate_entry(FR_RT_REAL(RtInstParamsFn, "cudaGraphInstantiateWithParams_ptsz",
                                      (RtInstParamsFn)&cudaGraphInstantiateWithParams_ptsz),
                           kNoRuntime, exec, graph, params);
}
