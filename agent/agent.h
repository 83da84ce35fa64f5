// The agent's private interface: the process-wide context (the open flight log, the communicator
// table, GPU tracking state) and the helpers the NCCL wrappers are built from. Nothing here is
// exported from libfr_agent.so; only the wrappers in wrappers.cpp are.
//
// The agent runs inside arbitrary training processes, so it never throws, never allocates from the
// heap on the call path, and turns recording off (never the forwarded call) when anything fails.
#pragma once

#include <nccl.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "fr/flight_log.h"
#include "nccl_extra.h"

#define FR_HIDDEN __attribute__((visibility("hidden")))

namespace fr::agent {

// How far the agent is with the process: nothing happens before the first NCCL call.
enum Mode : int { kUninit = 0, kStarting = 1, kRecording = 2, kOff = 3 };

// How GPU progress is tracked; decided once, at the first launched op that can decide it.
enum GpuMode : int { kGpuUndecided = 0, kGpuMarkers = 1, kGpuEvents = 2, kGpuNone = 3 };

// Ops of one group, remembered per thread until the outermost GroupEnd launches them.
inline constexpr uint32_t kMaxGroupOps = 128;
inline constexpr uint32_t kOpCaptured = 0x1;   // the stream was capturing when the op was issued
inline constexpr uint32_t kOpFailed = 0x2;     // the call itself failed: nothing to launch
inline constexpr uint32_t kOpNoMarkers = 0x4;  // the capture state is unknown: enqueue nothing
// A captured NCCL op's place in its graph (graphs.cpp).
struct CaptureRef {
  int32_t graph;  // graph slot, -1 untracked
  uint32_t pos;   // 1-based position in the graph
  bool marked;    // the graph writes its position around this op
};
struct GroupOp {
  uint64_t rec_id;
  uint64_t stream;
  uint64_t op_index;  // assigned at the outermost GroupEnd; 0 when untracked
  int32_t comm_slot;  // -1 when the communicator is not in the table
  uint32_t bits;      // kOp*
  CaptureRef capture;  // kOpCaptured: the op's place in its graph
};

// Small and touched by every call: kept in static TLS (initial-exec) so reaching it is one load.
struct ThreadState {
  uint32_t tid;       // gettid(), cached; 0 until first use (reset in a forked child)
  int guard;          // > 0 while inside a wrapper: nested NCCL calls are plain forwards
  int group_depth;    // ncclGroupStart nesting, as NCCL counts it per thread
  uint32_t n_ops;     // entries of thread_ops() used by the open group
  uint64_t group_id;  // id of the open group, 0 outside groups
  uint32_t overflow;  // ops beyond kMaxGroupOps were issued in this group
  uint32_t pad;
  uint64_t anchor_tsc;  // per-thread clock anchor (see now_ns)
  uint64_t anchor_ns;
};

// Completion markers of a nonblocking launch, held until the application sees it succeed.
inline constexpr uint32_t kMaxDeferred = 64;
struct Deferred {
  uint64_t rec_id;
  uint64_t stream;
  uint64_t op_index;  // 0 when the op has no GPU tracking
};

// Per-communicator state that readers do not need (kept out of the shared file).
struct CommPriv {
  uint64_t split_calls;  // per-kind call counters for derived ids (atomic)
  uint64_t shrink_calls;
  uint64_t grow_calls;
  uint32_t nonblocking;  // set before the handle is mapped, read-only after (atomic)
  uint32_t ready;        // size/rank/device known (atomic)
  int lock;              // spin lock over deferred (short critical sections only)
  uint32_t n_deferred;
  Deferred deferred[kMaxDeferred];
};

// A CUDA graph that holds NCCL work, as the agent tracks it privately (fr_graph_entry is the
// shared part). Filled while the graph is captured (under graph_lock), read-only once launched.
inline constexpr uint32_t kMaxGraphComms = 16;
struct GraphComm {
  int32_t slot;     // communicator table slot
  uint32_t n_coll;  // collectives of the graph on it
  uint32_t n_p2p;   // point-to-point ops of the graph on it
};
struct GraphPriv {
  uint64_t handle;      // the CUgraph captured into (atomic)
  uint64_t capture_id;  // the driver's capture id
  uint32_t n_comms;     // entries of comms in use (atomic)
  uint32_t next_op;     // captured ops numbered so far
  GraphComm comms[kMaxGraphComms];
};
// CUgraphExec -> graph slot, open addressing (keys written under graph_lock, read lock-free).
inline constexpr uint32_t kExecBuckets = 1024;
struct ExecSlot {
  uint64_t key;  // the CUgraphExec, 0 = empty (atomic)
  int32_t graph;  // graph slot, -1: an exec of a graph without NCCL work (atomic)
  uint32_t pad;
};

// The one context of the process. Zero-initialised (constinit), so loading the library does
// nothing; start() fills it at the first NCCL call.
struct Context {
  int mode;   // Mode (atomic)
  int debug;  // FR_DEBUG=1
  int fd;
  uint32_t ring_cap;
  uint32_t comm_cap;
  uint64_t map_size;
  uint8_t* map;  // the shared mapping of the log file
  fr_log_header* hdr;
  fr_comm_entry* comms;
  fr_record* ring;
  // Private tables, one anonymous mapping: handle map then CommPriv[comm_cap].
  uint8_t* priv_map;
  uint64_t priv_size;
  uint64_t* handle_keys;  // open addressing: ncclComm_t value, 0 = empty (atomic)
  int32_t* handle_slots;  // comm table slot for the key (atomic)
  uint32_t handle_mask;
  CommPriv* priv;
  // CUDA graphs (graphs.cpp)
  uint32_t graph_cap;
  uint32_t capture_cap;
  fr_graph_entry* graphs;
  fr_record* captures;
  GraphPriv* graph_priv;
  ExecSlot* execs;
  uint32_t next_graph_slot;    // under graph_lock
  uint32_t next_capture_slot;  // (atomic)
  pthread_mutex_t graph_lock;  // graph registration (capture and instantiate, never on a launch)
  uint32_t next_comm_slot;  // allocation counter of the comm table (atomic)
  uint64_t next_group_id;   // (atomic)
  uint64_t init_all_calls;  // (atomic) per-process counter for ncclCommInitAll ids
  int32_t largest_comm;     // size of the communicator global_rank was taken from (under reg_lock)
  int rank_from_env;
  int env_blocking;  // NCCL_COMM_BLOCKING (overrides every config): 0 unset, 1 blocking, 2 not
  pthread_mutex_t reg_lock;  // communicator registration (rare, never on the op path)
  char path[512];
  // GPU tracking
  int gpu_mode;  // GpuMode (atomic)
  int gpu_tries;
  uint64_t dev_base;  // device address of `map` (CUdeviceptr)
  pthread_mutex_t gpu_lock;
  // Clock: CLOCK_REALTIME costs tens of ns on many machines; an invariant TSC, calibrated once
  // and re-anchored per thread, gives the same nanoseconds for a few.
  int use_tsc;
  double ns_per_tick;
  uint64_t reanchor_ticks;
};

FR_HIDDEN extern Context g_ctx;
FR_HIDDEN ThreadState& thread_state();
// The open group's ops on this thread (kMaxGroupOps entries), only touched inside groups.
FR_HIDDEN GroupOp* thread_ops();

// ---- lifecycle (agent.cpp) -------------------------------------------------------------------
// True when calls are being recorded; starts the agent on the first call.
FR_HIDDEN bool recording();
FR_HIDDEN void debug_log(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
FR_HIDDEN uint64_t now_ns();
FR_HIDDEN uint32_t current_tid();

// ---- the dynamic linker (dl.cpp) ---------------------------------------------------------------
// The real dlsym and dlvsym (the agent exports its own: lookups on NCCL's handle answer the
// wrappers). The agent never calls dlsym by name.
FR_HIDDEN void* real_dlsym(void* handle, const char* name);
FR_HIDDEN void* real_dlvsym(void* handle, const char* name, const char* version);
// dlopen, dlclose, pthread_create and pthread_sigmask bound to their oldest symbol versions, so
// the agent loads on glibc 2.28 (glibc_compat.h). The rest of the agent calls only these.
FR_HIDDEN void* os_dlopen(const char* file, int mode);
FR_HIDDEN int os_dlclose(void* handle);
FR_HIDDEN int os_pthread_create(pthread_t* th, const pthread_attr_t* attr, void* (*fn)(void*),
                                void* arg);
FR_HIDDEN int os_pthread_sigmask(int how, const sigset_t* set, sigset_t* old);

// ---- real NCCL symbols (agent.cpp) -----------------------------------------------------------
// The next definition of `name` after this library; if NCCL was loaded RTLD_LOCAL, the `pname`
// alias (or `name`) inside the already loaded libnccl.so.2. Never returns `self`.
FR_HIDDEN void* resolve_real(const char* name, const char* pname, const void* self);

// resolve_real once per symbol; a miss is retried on the next call (NCCL may be dlopen'ed later).
inline void* real_cached(void** cache, const char* name, const char* pname, const void* self) {
  void* p = __atomic_load_n(cache, __ATOMIC_ACQUIRE);
  if (__builtin_expect(p == nullptr, 0)) {
    p = resolve_real(name, pname, self);
    if (p != nullptr) __atomic_store_n(cache, p, __ATOMIC_RELEASE);
  }
  return p;
}

// The real NCCL function `fn` (typed), or nullptr when no NCCL is loaded.
#define FR_REAL(fn)                                                                              \
  ([]() {                                                                                        \
    static void* cache_;                                                                         \
    return (decltype(&::fn))::fr::agent::real_cached(&cache_, #fn, "p" #fn, (const void*)&::fn); \
  }())

// ---- the log (log.cpp) -----------------------------------------------------------------------
FR_HIDDEN bool log_open();
FR_HIDDEN void log_forget_in_child();
// Reserves a record id and publishes `r` (whose id it fills in). Returns the id.
FR_HIDDEN uint64_t record_begin(fr_record& r);
// Republishes a record already begun, if its slot still holds it.
FR_HIDDEN void record_update(const fr_record& r);
// Applies `fn` to the stored copy of record `id`, if its slot still holds it.
FR_HIDDEN void record_modify(uint64_t id, void (*fn)(fr_record&, const void*), const void* arg);
FR_HIDDEN void set_log_flags(uint32_t set, uint32_t clear);

// ---- communicators (comms.cpp) ---------------------------------------------------------------
// Slot of the communicator with this handle, or -1.
FR_HIDDEN int32_t comm_lookup(const void* handle);
// Registers a new communicator entry (fixed part from `e`); maps `handle` to it when non-null.
FR_HIDDEN int32_t comm_register(const fr_comm_entry& e, uint32_t state, const void* handle,
                                bool nonblocking);
FR_HIDDEN void comm_set_state(int32_t slot, uint32_t state);
// Fills size, rank and device from the real NCCL queries; learns the global rank if needed.
FR_HIDDEN void comm_learn_shape(int32_t slot, ncclComm_t comm);
FR_HIDDEN uint64_t hash_bytes(uint64_t h, const void* p, size_t n);
FR_HIDDEN uint64_t hash_u64(uint64_t h, uint64_t v);
FR_HIDDEN uint64_t hash_finish(uint64_t h);
inline constexpr uint64_t kHashSeed = 0xcbf29ce484222325ull;

// ---- GPU progress (gpu.cpp) ------------------------------------------------------------------
// Whether `stream` is being captured into a CUDA graph (loads the driver table at first use).
// kCaptureUnknown when the driver cannot tell (e.g. the legacy stream while another stream
// captures in global mode): nothing may be enqueued into it then.
enum StreamCapture : int { kNotCapturing = 0, kCapturing = 1, kCaptureUnknown = 2 };
FR_HIDDEN int gpu_stream_capture(uint64_t stream);
// Decides the tracking mode once (loads libcuda, registers the log). Returns the mode.
FR_HIDDEN int gpu_prepare();
// Places the "started" marker for `index` on `stream` before a launch; false if untracked.
FR_HIDDEN bool gpu_before(int32_t slot, uint64_t stream, uint64_t index);
// Places the "completed" marker after a launch; false if untracked.
FR_HIDDEN bool gpu_after(int32_t slot, uint64_t stream, uint64_t index);
FR_HIDDEN void gpu_forget_in_child();
// Writes `value` to `word` (a word of the log) from `stream`: a stream memory write, captured into
// the graph when the stream is capturing. False when markers are not in use or the write failed.
FR_HIDDEN bool gpu_write_word(uint64_t stream, uint64_t* word, uint64_t value);
// The driver's capture id and graph of a capturing stream; false when it cannot tell.
FR_HIDDEN bool gpu_capture_info(uint64_t stream, uint64_t* capture_id, uint64_t* graph);

// ---- CUDA graphs (graphs.cpp) ------------------------------------------------------------------
// A captured NCCL op: its position in the graph being captured on `stream`. Fills the record's
// graph id (aux) and position (op_index), places the "started" position write, and returns the
// graph slot (-1 when the graph cannot be tracked).
FR_HIDDEN CaptureRef graph_capture_op(fr_record& r, int32_t comm_slot, bool p2p, bool write_start);
// After the captured call returned: the "completed" position write and the capture-table copy.
FR_HIDDEN void graph_capture_done(const CaptureRef& c, int32_t comm_slot, uint64_t stream,
                                  const fr_record& r, bool ok, bool write_end);
// A captured group's launch returned `res`: the "finished" position write of one of its ops.
FR_HIDDEN void graph_capture_finish_in_group(const CaptureRef& c, int32_t comm_slot,
                                             uint64_t stream, ncclResult_t res);
FR_HIDDEN void graphs_forget_in_child();

}  // namespace fr::agent
