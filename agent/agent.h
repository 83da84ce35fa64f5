// The agent's private interface: the process-wide context (the open flight log, the communicator
// table, GPU tracking state) and the helpers the NCCL wrappers are built from. Nothing here is
// exported from libfr_agent.so; only the wrappers (wrappers_*.cpp) are.
//
// The agent runs inside arbitrary training processes, so it never throws, never allocates from the
// heap on the call path, and turns recording off (never the forwarded call) when anything fails.
#pragma once

#include <nccl.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

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
  uint64_t op_index;   // assigned at the outermost GroupEnd; 0 when untracked
  int32_t comm_slot;   // -1 when the communicator is not in the table
  uint32_t bits;       // kOp*
  CaptureRef capture;  // kOpCaptured: the op's place in its graph
};

inline constexpr uint64_t kNoCacheGen = ~0ull;

// Small and touched by every call: kept in static TLS (initial-exec) so reaching it is one load.
struct ThreadState {
  uint32_t tid;       // gettid(), cached; 0 until first use (reset in a forked child)
  int guard;          // > 0 while inside a wrapper: nested NCCL calls are plain forwards
  int group_depth;    // ncclGroupStart nesting, as NCCL counts it per thread
  uint32_t n_ops;     // entries of thread_ops() used by the open group
  uint64_t group_id;  // id of the open group, 0 outside groups
  // Group ids this thread may hand out, [group_ids_next, group_ids_end): taken from
  // g_ctx.next_group_id kGroupIdBlock at a time, so that a group costs no locked instruction for
  // its id. Ids stay unique in the process and increase on each thread.
  uint64_t group_ids_next;
  uint64_t group_ids_end;
  uint32_t overflow;  // ops beyond kMaxGroupOps were issued in this group
  // 1 until this thread saw g_ctx.cuda_absent set (it is never cleared): until then the fast
  // lane checks for a CUDA driver. With group_depth, one test keeps the common case apart.
  uint32_t cuda_unknown = 1;
  uint64_t anchor_tsc;  // per-thread clock anchor (see now_ns)
  uint64_t anchor_ns;
  // The communicator this thread called last (comm_ref): valid while comm_gen equals cache_gen,
  // which starts (and restarts in a forked child) at kNoCacheGen, a value comm_gen never reaches;
  // a filled cache also means tid is set.
  uint64_t cache_handle;
  uint64_t cache_gen = kNoCacheGen;
  uint64_t cache_id;
  fr_comm_entry* cache_entry;
  int32_t cache_slot;
  uint32_t cache_flags;  // FR_REC_F_NONBLOCKING or 0
  // The record's result word of an op on it, made once: as entering its call, and as returned
  // launched and untracked (the fast lane's common exit).
  uint64_t cache_enter_word;
  uint64_t cache_exit_word;
  GroupOp* ops;  // this thread's group ops (thread_ops), 0 until first used
  // The op in its call on this thread, as the fast lane's rare exits need it (wrappers.h): set
  // only when the op is GPU-tracked or in a group. One at a time: nested calls are forwards.
  uint64_t op_stream;
  uint64_t op_index;
  int32_t op_comm_slot;
  uint32_t op_group_pos;
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
  uint64_t nccl_hash;      // NCCL's hash of the communicator (profiler.h); 0: not known (atomic)
  uint32_t nccl_children;  // splits and grows made from it, as NCCL counts them (atomic)
  uint32_t nonblocking;    // set before the handle is mapped, read-only after (atomic)
  uint32_t ready;          // size/rank/device known (atomic)
  int lock;                // spin lock over deferred (short critical sections only)
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
  uint64_t key;   // the CUgraphExec, 0 = empty (atomic)
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
  fr_log_section* sections;  // the log's directory, one row per kind (FR_SECTION_*)
  fr_comm_entry* comms;
  fr_record* ring;
  // Private tables, one anonymous mapping: handle map then CommPriv[comm_cap].
  uint8_t* priv_map;
  uint64_t priv_size;
  uint64_t* handle_keys;  // open addressing: ncclComm_t value, 0 = empty (atomic)
  int32_t* handle_slots;  // comm table slot for the key (atomic)
  uint32_t handle_mask;
  uint64_t comm_gen;   // bumped whenever a handle is (re)mapped: per-thread caches see it (atomic)
  uint32_t ring_mask;  // ring_cap - 1 when ring_cap is a power of two, else 0
  CommPriv* priv;
  // CUDA graphs (graphs.cpp)
  uint32_t graph_cap;
  uint32_t capture_cap;
  fr_graph_entry* graphs;
  fr_record* captures;
  // Channel progress from NCCL's profiler interface (profiler.cpp)
  uint32_t chan_cap;
  fr_chan_entry* chans;
  GraphPriv* graph_priv;
  ExecSlot* execs;
  uint32_t next_graph_slot;    // under graph_lock
  uint32_t next_capture_slot;  // (atomic)
  pthread_mutex_t graph_lock;  // graph registration (capture and instantiate, never on a launch)
  uint32_t next_comm_slot;     // allocation counter of the comm table (atomic)
  uint64_t next_group_id;      // (atomic)
  uint64_t init_all_calls;     // (atomic) per-process counter for ncclCommInitAll ids
  int32_t largest_comm;  // size of the communicator global_rank was taken from (under reg_lock)
  int rank_from_env;
  int env_blocking;  // NCCL_COMM_BLOCKING (overrides every config): 0 unset, 1 blocking, 2 not
  pthread_mutex_t reg_lock;  // communicator registration (rare, never on the op path)
  char path[512];
  // GPU tracking
  int gpu_mode;     // GpuMode (atomic)
  int cuda_absent;  // libcuda.so.1 could not be loaded: no capture check, no marker (atomic)
  int gpu_tries;
  uint64_t dev_base;  // device address of `map` (CUdeviceptr)
  pthread_mutex_t gpu_lock;
  // Clock: CLOCK_REALTIME costs tens of ns on many machines; an invariant TSC, calibrated once
  // and re-anchored per thread, gives the same nanoseconds for a few.
  int use_tsc;
  uint64_t ns_per_tick_q32;  // nanoseconds per tick, fixed point with 32 fraction bits
  uint64_t reanchor_ticks;
  // Records lost to a busy slot (atomic; the header's overwritten adds laps).
  uint64_t records_lost;
  // NIXL transfers (xfers.cpp)
  uint32_t xfer_cap;
  fr_xfer_entry* xfers;
};

FR_HIDDEN extern Context g_ctx;
// Static TLS: the agent is loaded at start-up (LD_PRELOAD or linked), where static TLS is sized
// for it, and the state is small. Reaching it is one load from the thread pointer; `constinit`
// tells every user that no dynamic initialisation (no TLS wrapper call) is needed.
FR_HIDDEN extern constinit thread_local ThreadState t_state
    __attribute__((tls_model("initial-exec")));
inline ThreadState& thread_state() { return t_state; }
// The open group's ops on this thread (kMaxGroupOps entries), only touched inside groups. They
// live in dynamic TLS (too large for the static block); the address is kept in ThreadState, so
// the TLS lookup happens once per thread.
FR_HIDDEN GroupOp* thread_ops_slow();
inline GroupOp* thread_ops() {
  GroupOp* ops = t_state.ops;
  return __builtin_expect(ops != nullptr, 1) ? ops : thread_ops_slow();
}

// ---- lifecycle (agent.cpp) -------------------------------------------------------------------
// True when calls are being recorded; starts the agent on the first call.
FR_HIDDEN bool recording_slow();
inline bool recording() {
  if (__builtin_expect(__atomic_load_n(&g_ctx.mode, __ATOMIC_ACQUIRE) == kRecording, 1))
    return true;
  return recording_slow();
}
FR_HIDDEN void debug_log(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
// A line on stderr whatever FR_DEBUG says: only for what a user must know once (a feature the
// agent turned off), never per call.
FR_HIDDEN void notice_log(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
// CLOCK_REALTIME in ns: the TSC, anchored per thread to the wall clock (see calibrate_clock), so
// the call path reads one clock and does one multiply.
FR_HIDDEN uint64_t now_ns_slow();
inline uint64_t now_ns() {
#if defined(__x86_64__)
  ThreadState& t = t_state;
  uint64_t d = __builtin_ia32_rdtsc() - t.anchor_tsc;
  if (__builtin_expect(d < g_ctx.reanchor_ticks, 1))  // 0 without an invariant TSC
    return t.anchor_ns + ((d * g_ctx.ns_per_tick_q32) >> 32);
#endif
  return now_ns_slow();
}
FR_HIDDEN uint32_t current_tid_slow();
inline uint32_t current_tid() {
  uint32_t tid = t_state.tid;
  return __builtin_expect(tid != 0, 1) ? tid : current_tid_slow();
}

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

// A record slot held under its sequence lock: the call path stores the fields into it directly
// (never building a record and copying it), and at exit only the words that changed.
struct HeldRecord {
  fr_record* slot;
  uint64_t before;  // the lock's even value when taken
};
// The ring slot of record `id`.
inline fr_record* record_slot(uint64_t id) {
  const Context& c = g_ctx;
  return &c.ring[__builtin_expect(c.ring_mask != 0, 1) ? (id & c.ring_mask) : id % c.ring_cap];
}
// A record lost to a slot busy with another thread's write (rare): counted, and the header's
// count updated (agent.cpp).
FR_HIDDEN __attribute__((noinline, cold)) void record_lost(uint64_t id);
// Reserves the next record id (*id) and takes its slot's lock; `heartbeat_ns` becomes the log's
// heartbeat. False when the slot was busy with another thread's write (the ring lapped it): the
// record is counted lost and nothing may be written (held->slot still names the slot).
__attribute__((always_inline)) inline bool record_reserve(uint64_t heartbeat_ns, uint64_t* id,
                                                          HeldRecord* held) {
  fr_log_header* h = g_ctx.hdr;
  *id = __atomic_fetch_add(&h->record_counter, 1, __ATOMIC_ACQ_REL);
  // The header's count of lost records: the ring's laps plus the records lost to a busy slot,
  // stored rather than added to, so that a record costs one locked instruction less. With several
  // threads writing at once it can trail by the records being reserved at that moment, never lead;
  // readers take the larger of it and record_counter - ring_capacity (log/reader.cpp).
  if (__builtin_expect(*id >= g_ctx.ring_cap, 1))
    __atomic_store_n(
        &h->overwritten,
        *id + 1 - g_ctx.ring_cap + __atomic_load_n(&g_ctx.records_lost, __ATOMIC_RELAXED),
        __ATOMIC_RELAXED);
  __atomic_store_n(&h->heartbeat_ns, heartbeat_ns, __ATOMIC_RELAXED);
  held->slot = record_slot(*id);
  if (__builtin_expect(fr_seq_try_begin(&held->slot->lock, &held->before), 1)) return true;
  record_lost(*id);
  return false;
}
// The same, for callers that test held->slot (nullptr when the record is lost). Returns the id.
__attribute__((always_inline)) inline uint64_t record_take_new(uint64_t heartbeat_ns,
                                                               HeldRecord* held) {
  uint64_t id;
  if (!record_reserve(heartbeat_ns, &id, held)) held->slot = nullptr;
  return id;
}
// Takes the lock of record `id` again, in its slot `s`; false if the slot is busy or holds a newer
// record.
__attribute__((always_inline)) inline bool record_take_in(fr_record* s, uint64_t id,
                                                          HeldRecord* held) {
  if (__builtin_expect(!fr_seq_try_begin(&s->lock, &held->before), 0)) return false;
  if (__builtin_expect(__atomic_load_n(&s->id, __ATOMIC_RELAXED) != id, 0)) {
    // Lapped: leave the newer record as it is (the lock value still moves on, which is harmless).
    fr_seq_end(&s->lock, held->before);
    return false;
  }
  held->slot = s;
  return true;
}
inline bool record_take(uint64_t id, HeldRecord* held) {
  return record_take_in(record_slot(id), id, held);
}
inline void record_release(const HeldRecord& held) { fr_seq_end(&held.slot->lock, held.before); }

// One 64-bit word of a held record, read or written with relaxed atomic accesses (the lock orders
// them for readers), seen through a struct that mirrors the record's fields at `offset`.
template <class T>
inline T record_word(const fr_record* r, size_t offset) {
  static_assert(sizeof(T) == 8, "one record word");
  uint64_t v = __atomic_load_n((const uint64_t*)((const uint8_t*)r + offset), __ATOMIC_RELAXED);
  T t;
  memcpy(&t, &v, sizeof t);
  return t;
}
template <class T>
inline void set_record_word(fr_record* r, size_t offset, const T& t) {
  static_assert(sizeof(T) == 8, "one record word");
  uint64_t v;
  memcpy(&v, &t, sizeof v);
  __atomic_store_n((uint64_t*)((uint8_t*)r + offset), v, __ATOMIC_RELAXED);
}
// A record word's struct from its 64-bit value.
template <class T>
inline T record_word_of(uint64_t v) {
  static_assert(sizeof(T) == 8, "one record word");
  T t;
  memcpy(&t, &v, sizeof t);
  return t;
}
// The record's words made of smaller fields, in the record's own order.
struct RecTidOp {
  uint32_t tid;
  uint16_t op;
  uint8_t dtype;
  uint8_t gpu_state;
};
struct RecRedopPeer {
  int32_t redop;
  int32_t peer;
};
struct RecResultFlags {
  int32_t result;
  uint32_t flags;
};
static_assert(offsetof(fr_record, op) == offsetof(fr_record, tid) + 4 &&
                  offsetof(fr_record, dtype) == offsetof(fr_record, tid) + 6 &&
                  offsetof(fr_record, gpu_state) == offsetof(fr_record, tid) + 7 &&
                  offsetof(fr_record, peer) == offsetof(fr_record, redop) + 4 &&
                  offsetof(fr_record, flags) == offsetof(fr_record, result) + 4 &&
                  offsetof(fr_record, tid) % 8 == 0 && offsetof(fr_record, redop) % 8 == 0 &&
                  offsetof(fr_record, result) % 8 == 0,
              "the word structs mirror fr_record");

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
// Captures the replay kernel (replay_kernel.h) into `stream`'s capture: each replay then adds one
// to *counter (a word of the log) and resets the positions of graph `ordinal`. False when the
// kernel cannot be had or launched; the graph's replays are then tracked from the host.
FR_HIDDEN bool gpu_capture_replay_kernel(uint64_t stream, uint64_t* counter, uint32_t ordinal);

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

// ---- NIXL transfers (xfers.cpp) ------------------------------------------------------------------
// Takes a free transfer entry for request `handle` and publishes `fixed` into it (its id, lock and
// live words are set here). Returns the entry, or nullptr when the table is full (counted).
FR_HIDDEN fr_xfer_entry* xfer_open(uint64_t handle, fr_xfer_entry& fixed);
// The live entry of request `handle`, or nullptr.
FR_HIDDEN fr_xfer_entry* xfer_find(uint64_t handle);
// Republishes the fixed part of entry `e` from `fixed` (a post changed its notification).
FR_HIDDEN void xfer_republish(fr_xfer_entry* e, const fr_xfer_entry& fixed);
// One ring record of a NIXL call (op kind NIXL): `aux` the transfer id or 0, `count` bytes.
FR_HIDDEN void nixl_record(fr_op op, uint64_t call_ns, uint64_t aux, uint64_t count, uint64_t seq,
                           int32_t status);
FR_HIDDEN void xfers_forget_in_child();

}  // namespace fr::agent
