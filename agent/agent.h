// The agent's private interface, its core: the process's lifecycle, the clock, the per-thread
// state, the dynamic linker and the real NCCL symbols. Each subsystem has its own header with its
// state and its functions: log.h (the flight log), comms.h (communicators), gpu.h (GPU progress),
// graphs.h (CUDA graphs), nixl.h (NIXL transfers), profiler.h (NCCL's profiler plugin). Nothing
// here is exported from libfr_agent.so; only the wrappers (wrappers_*.cpp) are.
//
// The agent's state is one constinit global per subsystem, `g_<subsystem>` of type
// `<Subsystem>State`, declared in the subsystem's header and defined in its .cpp file: zero
// before the first NCCL call (loading the library runs no constructor), filled as the subsystem
// starts; in a forked child, the subsystem's *_forget_in_child resets what the child must not keep.
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

// The process's lifecycle (agent.cpp).
struct AgentState {
  int mode;                // Mode (atomic)
  int debug;               // FR_DEBUG=1
  uint64_t next_group_id;  // (atomic) handed to threads kGroupIdBlock at a time (ThreadState)
  int atfork_registered;   // survives fork: handlers are inherited by the child
};
FR_HIDDEN extern constinit AgentState g_agent;

// The clock (agent.cpp): CLOCK_REALTIME costs tens of ns on many machines; an invariant TSC,
// calibrated once and re-anchored per thread, gives the same nanoseconds for a few.
struct ClockState {
  int use_tsc;
  uint64_t ns_per_tick_q32;  // nanoseconds per tick, fixed point with 32 fraction bits
  uint64_t reanchor_ticks;   // 0 without an invariant TSC
};
FR_HIDDEN extern constinit ClockState g_clock;

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
  // g_agent.next_group_id kGroupIdBlock at a time, so that a group costs no locked instruction for
  // its id. Ids stay unique in the process and increase on each thread.
  uint64_t group_ids_next;
  uint64_t group_ids_end;
  uint32_t overflow;  // ops beyond kMaxGroupOps were issued in this group
  // 1 until this thread saw g_gpu.cuda_absent set (it is never cleared): until then the fast
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
  if (__builtin_expect(__atomic_load_n(&g_agent.mode, __ATOMIC_ACQUIRE) == kRecording, 1))
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
  if (__builtin_expect(d < g_clock.reanchor_ticks, 1))  // 0 without an invariant TSC
    return t.anchor_ns + ((d * g_clock.ns_per_tick_q32) >> 32);
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

}  // namespace fr::agent
