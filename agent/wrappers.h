// The shape every NCCL wrapper shares (wrappers_*.cpp): resolve the real function, forward,
// record behind the per-thread guard, return the real result untouched. Without any NCCL loaded
// the wrappers answer ncclSystemError; when the loaded NCCL lacks the function (an older release),
// ncclInvalidUsage, NCCL's answer to a feature it cannot serve. Neither ever crashes. Lookups
// through dlsym on NCCL's handle reach the wrappers too (dl.cpp).
//
// The wrappers cover every function of NCCL 2.32's nccl.h that can take part in a hang, the host
// calls of its device API (ncclDevCommCreate/Destroy, ncclCommQueryProperties), and the 2.29+
// functions older headers lack: the rows of the NCCL API list, fr/nccl_api.def, which declares
// them (nccl_extra.h) and fails the link where one has no wrapper (wrappers.cpp). One file per
// kind of call:
//  - wrappers_ops.cpp, collectives and point-to-point: one record with the per-communicator
//    sequence number; outside a group the op launches at its call, inside one at the outermost
//    GroupEnd (GPU markers placed then). The *Config collectives are recorded exactly as their
//    plain forms (flag FR_REC_F_COLL_CONFIG);
//  - wrappers_one_sided.cpp, signals and windows: the signal calls are one-sided point-to-point
//    (peer, stream, signal index and context), one WaitSignal record per descriptor; window
//    registration is a record each;
//  - wrappers_groups.cpp: GroupStart, GroupEnd, GroupSimulateEnd, and the launch of the group's ops;
//  - wrappers_comms.cpp, unique ids, communicator creation (init, split, shrink, grow) and
//    lifecycle (finalize, destroy, abort, revoke, suspend, resume): a record, and the communicator
//    table entry (id, parent, state); async errors are recorded once per distinct error;
//  - wrappers_resources.cpp: registration, memory, reduction ops, device communicators (a record
//    each); queries (version, count, device, rank, error strings, properties, memory statistics,
//    a window's user pointer) are forwarded only.
// Left out on purpose (not exported, so they bind straight to NCCL): the window address queries of
// the device API and its requirement helpers, ncclParam*, ncclSetEncryption (docs/agent.md).
//
// The op path's fast lane below is inlined into each wrapper whole (header-inline, always_inline),
// so an op's arguments stay in registers on their way to its record without relying on the
// link-time optimizer; what is called rather than inlined (the general op path, other API calls'
// records, record updates, deferred launches, capture) lives in wrappers.cpp.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "agent.h"
#include "comms.h"
#include "gpu.h"
#include "graphs.h"
#include "log.h"

// The call path's helpers are inlined into each wrapper whole.
#define FR_INLINE inline __attribute__((always_inline))

namespace fr::agent {

struct CommRef {
  int32_t slot;
  uint64_t id;
  fr_comm_entry* entry;
  bool nonblocking;
};

// The record's result word (result, flags) as one 64-bit value.
inline uint64_t result_word(int32_t result, uint32_t flags) {
  return (uint64_t)(uint32_t)result | (uint64_t)flags << 32;
}
static_assert(offsetof(RecResultFlags, flags) == 4, "result_word packs RecResultFlags");

// The communicator's slot: this thread's last one when it is the same handle and no handle was
// mapped since (the common case, one compare), else the shared table.
FR_INLINE CommRef comm_ref(const void* comm) {
  ThreadState& t = thread_state();
  const uint64_t key = (uint64_t)(uintptr_t)comm;
  const uint64_t gen = __atomic_load_n(&g_comms.gen, __ATOMIC_ACQUIRE);
  if (__builtin_expect(key == t.cache_handle && gen == t.cache_gen, 1))
    return CommRef{t.cache_slot, t.cache_id, t.cache_entry, t.cache_flags != 0};
  CommRef c = {-1, 0, nullptr, false};
  c.slot = comm_lookup(comm);
  if (c.slot >= 0) {
    c.entry = &g_log.comms[c.slot];
    c.id = __atomic_load_n(&c.entry->id, __ATOMIC_RELAXED);
    c.nonblocking = __atomic_load_n(&g_comms.priv[c.slot].nonblocking, __ATOMIC_ACQUIRE) != 0;
    current_tid();  // the op path reads tid unchecked once the cache is filled
    t.cache_handle = key;
    t.cache_gen = gen;
    t.cache_id = c.id;
    t.cache_entry = c.entry;
    t.cache_slot = c.slot;
    t.cache_flags = c.nonblocking ? FR_REC_F_NONBLOCKING : 0u;
    t.cache_enter_word = result_word(FR_RESULT_PENDING, FR_REC_F_IN_CALL | t.cache_flags);
    t.cache_exit_word =
        result_word(ncclSuccess, FR_REC_F_LAUNCHED | FR_REC_F_GPU_UNTRACKED | t.cache_flags);
  }
  return c;
}

// A record of call `op` on communicator `c`, entering its call (run_api's records; wrappers.cpp).
FR_HIDDEN fr_record new_record(fr_op op, const CommRef& c);

// Host time since `since`; 0 if the wall clock stepped back meanwhile (NTP, re-anchoring).
inline uint64_t elapsed_since(uint64_t since) {
  uint64_t now = now_ns();
  return now > since ? now - since : 0;
}

// The record's duration and result, once the call returned (wrappers.cpp).
FR_HIDDEN void finish(fr_record& r, ncclResult_t res);

// Scoped recording: holds the guard, so NCCL's internal calls to its own API are not recorded.
// `active` is false when the call must be a plain forward.
struct Scope {
  ThreadState& t;
  bool active;
  __attribute__((always_inline)) Scope() : t(thread_state()), active(false) {
    if (t.guard != 0) return;
    ++t.guard;  // held while the agent starts, too: its own NCCL calls are never recorded
    active = recording();
    if (!active) --t.guard;
  }
  __attribute__((always_inline)) ~Scope() {
    if (active) --t.guard;
  }
};

inline bool is_tracked(int mode) { return mode == kGpuMarkers || mode == kGpuEvents; }

// ---- record updates applied in place (wrappers.cpp) --------------------------------------------

// Sets `flags` on a record already written (and the GPU state to enqueued when they say it
// launched), and its op index when non-zero: only those words are stored.
FR_HIDDEN void mark(uint64_t rec_id, uint32_t flags, uint64_t op_index);

// ---- nonblocking launches (wrappers.cpp) --------------------------------------------------------

// Holds the completion markers of an op launched in progress until the application sees it succeed.
FR_HIDDEN void defer(int32_t slot, uint64_t rec_id, uint64_t stream, uint64_t op_index);
// The application saw its nonblocking launches succeed: place their completion markers now.
FR_HIDDEN void release_deferred(int32_t slot);
FR_HIDDEN void drop_deferred(int32_t slot);

// ---- ops (collectives, point-to-point, signals): the record written in place -------------------

struct OpArgs {
  fr_op op;
  bool p2p;
  const void* send;
  const void* recv;
  size_t count;
  int dtype;
  int redop;
  int peer;
  const void* comm;
  cudaStream_t stream;
  uint64_t aux = 0;    // signals: FR_SIGNAL_AUX
  uint32_t flags = 0;  // FR_REC_F_* to add
};

struct OpState {
  CommRef c;
  uint64_t id;      // the record's id
  fr_record* slot;  // its ring slot
  uint64_t call_ns;
  uint64_t stream;
  uint64_t op_index;   // 0 when untracked
  RecTidOp tid_op;     // as written at entry
  uint32_t flags;      // as written at entry: FR_REC_F_IN_GROUP and _CAPTURED say how it launches
  uint32_t group_pos;  // in a group: index in the thread's group ops, or kMaxGroupOps
  CaptureRef capture;  // captured: the op's place in its graph
  fr_record cap;       // captured: the whole record, for the graph's capture table (cold path)
};

// Every word of a record entering its call, stored into its slot (held) directly; `result_flags`
// is the result word (result_word).
FR_INLINE void store_entry(fr_record* s, uint64_t id, uint64_t comm_id, uint64_t seq,
                           uint64_t op_index, uint64_t count, uint64_t stream, uint64_t group_id,
                           uint64_t call_ns, uint64_t send, uint64_t recv, RecTidOp tid_op,
                           RecRedopPeer redop_peer, uint64_t result_flags, uint64_t aux) {
  set_record_word(s, offsetof(fr_record, id), id);
  set_record_word(s, offsetof(fr_record, comm_id), comm_id);
  set_record_word(s, offsetof(fr_record, seq), seq);
  set_record_word(s, offsetof(fr_record, op_index), op_index);
  set_record_word(s, offsetof(fr_record, count), count);
  set_record_word(s, offsetof(fr_record, stream), stream);
  set_record_word(s, offsetof(fr_record, group_id), group_id);
  set_record_word(s, offsetof(fr_record, call_ns), call_ns);
  set_record_word(s, offsetof(fr_record, duration_ns), uint64_t{0});
  set_record_word(s, offsetof(fr_record, sendbuff), send);
  set_record_word(s, offsetof(fr_record, recvbuff), recv);
  set_record_word(s, offsetof(fr_record, tid), tid_op);
  set_record_word(s, offsetof(fr_record, redop), redop_peer);
  set_record_word(s, offsetof(fr_record, result), result_flags);
  set_record_word(s, offsetof(fr_record, aux), aux);
}

// Capture time (cold, wrappers.cpp): the op's place in its graph, and the graph's position write
// before it.
FR_HIDDEN __attribute__((noinline, cold)) void capture_enter(const OpArgs& a, OpState& o,
                                                             uint64_t* aux, uint32_t* flags);
// The captured op's whole record, as it returned, into the graph's capture table (cold).
FR_HIDDEN __attribute__((noinline, cold)) void capture_exit(OpState& o, ncclResult_t res,
                                                            uint64_t duration, uint32_t flags);

// The general op path (wrappers.cpp), for every case the fast lane below leaves out (a
// communicator not in this thread's cache, a clock re-anchor, a capturing stream) and for
// WaitSignal's records. Entry: every field of the record is stored into its slot directly, under
// the slot's lock.
FR_HIDDEN void op_enter(const OpArgs& a, OpState& o);
// Exit: only the words that change are stored (duration, result and flags, and the GPU state when
// the op launched).
FR_HIDDEN void op_exit(OpState& o, ncclResult_t res);

// ---- the op path's fast lane -------------------------------------------------------------------
// The common case, as few instructions as it can be: the communicator is this thread's cached one,
// the TSC clock needs no re-anchor, and the stream is not capturing. Its record is the same, word
// for word, as op_enter and op_exit write; anything else takes that general path, decided before
// anything is written. The state between entry and exit is small, so it stays in registers.
struct FastOp {
  fr_record* slot;  // the record's ring slot
  uint64_t lock;    // the slot's lock value after the entry's release; kLockLost when the slot
                    // was busy and the record is lost (counted)
  uint64_t id;      // the record's id
  uint64_t tsc;     // the TSC at entry: the duration is the ticks since, converted once
  uint32_t rare;  // kFastTracked, kFastInGroup: the exit takes the rare branch (ThreadState::op_*)
};
// A lock value no slot reaches (it moves by 2 from 0 per write): the exit's retake then falls
// back to record_take_in, which finds another record's id in the slot (the lost one was never
// stored) and stores nothing, as the general path does for a lost record.
inline constexpr uint64_t kLockLost = ~0ull;
inline constexpr uint32_t kFastTracked = 0x1;  // a "started" marker was placed: op_index is set
inline constexpr uint32_t kFastInGroup = 0x2;

// GPU work at an op's entry, where a CUDA driver is loaded (wrappers.cpp): the stream's capture
// state, and, for a launch that is not captured, the "started" marker (*op_index set when placed).
// Nothing is placed when the stream captures: the op then takes the general path.
struct GpuEnter {
  int capture;        // StreamCapture
  uint64_t op_index;  // 0 when no marker was placed
};
FR_HIDDEN GpuEnter op_gpu_enter(int32_t slot, uint64_t stream, bool in_group);
// An op in a group takes its place in the thread's group ops (or sets the overflow).
FR_INLINE uint32_t group_add(ThreadState& t, const GroupOp& op) {
  if (__builtin_expect(t.n_ops >= kMaxGroupOps, 0)) {
    t.overflow = 1;
    return kMaxGroupOps;
  }
  uint32_t pos = t.n_ops++;
  thread_ops()[pos] = op;
  return pos;
}

// Takes the lock of the record this thread released with value `lock`: one compare-and-swap while
// nothing else touched the slot since, else the general check (busy, or holding a newer record).
FR_INLINE bool record_retake(fr_record* s, uint64_t lock, uint64_t id, HeldRecord* held) {
  if (__builtin_expect(fr_seq_try_begin_from(&s->lock, lock), 1)) {
    held->slot = s;
    held->before = lock;
    return true;
  }
  return record_take_in(s, id, held);
}

inline uint64_t tid_op_word(uint32_t tid, fr_op op, int dtype, uint8_t gpu_state) {
  return (uint64_t)tid | (uint64_t)(uint16_t)op << 32 | (uint64_t)(uint8_t)dtype << 48 |
         (uint64_t)gpu_state << 56;
}
static_assert(offsetof(RecTidOp, op) == 4 && offsetof(RecTidOp, dtype) == 6 &&
                  offsetof(RecTidOp, gpu_state) == 7,
              "tid_op_word packs RecTidOp (little-endian)");

// The fast lane's entry once its clock is read: the communicator's counters, the record's id and
// slot, and every word of the record stored under the slot's lock (FastOp::slot, lock and id).
FR_INLINE void fast_store(const OpArgs& a, ThreadState& t, FastOp& f, uint64_t call_ns,
                          uint64_t op_index, bool in_group) {
  fr_comm_entry* e = t.cache_entry;
  __atomic_store_n(&e->last_call_ns, call_ns, __ATOMIC_RELAXED);
  // NCCL lets one thread at a time issue operations on a communicator (its "Thread Safety"
  // rules), so the program's own synchronization orders every increment of its counters: a load
  // and a store do, without a locked instruction. (A program breaking that rule, which NCCL does
  // not survive either, may see a sequence number twice.)
  uint64_t* const seq_word = a.p2p ? &e->p2p_seq : &e->coll_seq;
  const uint64_t seq = __atomic_load_n(seq_word, __ATOMIC_RELAXED) + 1;
  __atomic_store_n(seq_word, seq, __ATOMIC_RELAXED);
  const uint64_t flags_word = (uint64_t)a.flags << 32;  // a constant of the wrapper
  HeldRecord h;
  f.lock = kLockLost;
  if (__builtin_expect(record_reserve(call_ns, &f.id, &h), 1)) {
    store_entry(h.slot, f.id, t.cache_id, seq, op_index, (uint64_t)a.count,
                (uint64_t)(uintptr_t)a.stream, 0, call_ns, (uint64_t)(uintptr_t)a.send,
                (uint64_t)(uintptr_t)a.recv,
                record_word_of<RecTidOp>(tid_op_word(t.tid, a.op, a.dtype, FR_GPU_NONE)),
                RecRedopPeer{a.redop, a.peer}, t.cache_enter_word | flags_word, a.aux);
    if (in_group) {  // the words that differ in a group
      set_record_word(h.slot, offsetof(fr_record, group_id), t.group_id);
      set_record_word(h.slot, offsetof(fr_record, result),
                      t.cache_enter_word | flags_word | (uint64_t)FR_REC_F_IN_GROUP << 32);
    }
    record_release(h);
    f.lock = h.before + 2u;
  }
  f.slot = h.slot;  // set even when lost (record_reserve names the slot it tried)
}

// The fast lane's entry in a group, or where a CUDA driver is loaded: the capture check and the
// "started" marker first (a capturing stream takes the general path: false, nothing written),
// then the record, and what the exit's rare branch needs in ThreadState::op_*. Kept apart from
// the common case so that its op index and group state are constants there.
FR_INLINE bool op_fast_enter_gpu_or_group(const OpArgs& a, ThreadState& t, FastOp& f, uint64_t tsc,
                                          uint64_t call_ns) {
  const bool in_group = t.group_depth > 0;
  uint64_t op_index = 0;
  uint32_t bits = 0;
  if (!__atomic_load_n(&g_gpu.cuda_absent, __ATOMIC_RELAXED)) {
    const GpuEnter g = op_gpu_enter(t.cache_slot, (uint64_t)(uintptr_t)a.stream, in_group);
    if (g.capture == kCapturing) return false;
    if (g.capture == kCaptureUnknown) bits = kOpNoMarkers;
    op_index = g.op_index;
  } else {
    t.cuda_unknown = 0;  // no driver, for good: the next ops outside a group take kLaneFast
  }
  fast_store(a, t, f, call_ns, op_index, in_group);
  f.tsc = tsc;
  f.rare = (op_index != 0 ? kFastTracked : 0u) | (in_group ? kFastInGroup : 0u);
  if (f.rare != 0) {
    t.op_stream = (uint64_t)(uintptr_t)a.stream;
    t.op_index = op_index;
    t.op_comm_slot = t.cache_slot;
    t.op_group_pos = in_group ? group_add(t, GroupOp{f.id, (uint64_t)(uintptr_t)a.stream, 0,
                                                     t.cache_slot, bits, CaptureRef{-1, 0, false}})
                              : kMaxGroupOps;
  }
  return true;
}

// Which way an op goes (fast_lane): the general path, the fast lane's common case (no GPU
// driver, no group: no op index, nothing for the exit's rare branch), or the fast lane's entry in
// a group or with a driver (op_fast_enter_gpu_or_group).
enum Lane : int { kLaneGeneral = 0, kLaneFast = 1, kLaneFastGpuOrGroup = 2 };

// The fast lane's checks, nothing written: the communicator is this thread's cached one and the
// TSC clock needs no re-anchor; *tsc and *call_ns are the entry's clock then.
FR_INLINE Lane fast_lane(const OpArgs& a, const ThreadState& t, uint64_t* tsc, uint64_t* call_ns) {
#if defined(__x86_64__) && defined(__ORDER_LITTLE_ENDIAN__)
  const uint64_t key = (uint64_t)(uintptr_t)a.comm;
  if (__builtin_expect(
          key != t.cache_handle || __atomic_load_n(&g_comms.gen, __ATOMIC_ACQUIRE) != t.cache_gen,
          0))
    return kLaneGeneral;
  *tsc = __builtin_ia32_rdtsc();
  const uint64_t ticks = *tsc - t.anchor_tsc;
  if (__builtin_expect(ticks >= g_clock.reanchor_ticks, 0)) return kLaneGeneral;  // 0 without TSC
  *call_ns = t.anchor_ns + ((ticks * g_clock.ns_per_tick_q32) >> 32);
  if (__builtin_expect((t.group_depth | (int)t.cuda_unknown) != 0, 0))  // group_depth >= 0
    return kLaneFastGpuOrGroup;
  return kLaneFast;
#else
  (void)a;
  (void)t;
  (void)tsc;
  (void)call_ns;
  return kLaneGeneral;
#endif
}

// Exit of the fast lane, other than its two common cases (wrappers.cpp): a GPU-tracked op, a
// failed or nonblocking call. The same words as op_exit stores.
FR_HIDDEN __attribute__((noinline)) void op_fast_exit_rare(FastOp f, ncclResult_t res,
                                                           uint64_t duration, uint32_t op_flags);

// Exit of the fast lane: the words that change, as op_exit stores them. The common cases
// (launched and not GPU-tracked, or in a group) need nothing but FastOp; the tid word is read back from the
// slot (held, so it is this record's), so that little lives across the call. `op_flags`: the
// wrapper's own flags (OpArgs::flags, a constant).
FR_INLINE void op_fast_exit(const ThreadState& t, const FastOp& f, ncclResult_t res,
                            uint32_t op_flags) {
#if defined(__x86_64__)
  // Launched and untracked, or issued in a group (it launches at the outermost GroupEnd): the
  // two cases made here; the others out of line. In a group the call only queues the op, so its
  // duration is not measured (0, no clock read: see docs/agent.md, "Groups").
  const bool grouped = (f.rare & kFastInGroup) != 0;
  const uint64_t duration = grouped
                                ? 0
                                : (uint64_t)(((unsigned __int128)(__builtin_ia32_rdtsc() - f.tsc) *
                                              g_clock.ns_per_tick_q32) >>
                                             32);
  if (__builtin_expect(res != ncclSuccess || (f.rare != 0 && f.rare != kFastInGroup), 0))
    return op_fast_exit_rare(f, res, duration, op_flags);
  HeldRecord h;
  if (__builtin_expect(record_retake(f.slot, f.lock, f.id, &h), 1)) {
    set_record_word(h.slot, offsetof(fr_record, duration_ns), duration);
    if (__builtin_expect(!grouped, 1)) {
      // The GPU state goes from none (as written at entry) to enqueued: its byte alone (x86 only
      // here, where a byte store inside a word the readers load whole is atomic with it).
      __atomic_store_n((uint8_t*)h.slot + offsetof(fr_record, gpu_state), (uint8_t)FR_GPU_ENQUEUED,
                       __ATOMIC_RELAXED);
    }
#ifdef FR_TEST_PARK_WRITER
    sched_yield();  // as in op_exit
#endif
    set_record_word(h.slot, offsetof(fr_record, result),
                    grouped ? result_word(ncclSuccess, t.cache_flags | op_flags | FR_REC_F_IN_GROUP)
                            : t.cache_exit_word | (uint64_t)op_flags << 32);
    record_release(h);
  }
#else
  (void)t;
  (void)f;
  (void)res;
  (void)op_flags;
#endif
}

// Inlined into each wrapper whole, so the arguments stay in registers on their way to the record.
template <class Call>
FR_INLINE ncclResult_t run_op(const OpArgs& a, Call call) {
  ThreadState& t = thread_state();
  if (t.guard != 0) return call();  // inside a wrapper: NCCL calling its own API
  ++t.guard;  // held while the agent starts, too: its own NCCL calls are never recorded
  // A hit in the communicator cache means the agent records (the mode never leaves kRecording
  // once there, and a forked child starts with an empty cache): the fast lane skips that check.
  // Each lane has its own call and exit, so that the common one carries no group or GPU state
  // across the call.
  uint64_t tsc = 0, call_ns = 0;
  const Lane lane = fast_lane(a, t, &tsc, &call_ns);
  if (__builtin_expect(lane == kLaneFast, 1)) {
    FastOp f;
    fast_store(a, t, f, call_ns, 0, false);
    f.tsc = tsc;
    f.rare = 0;
    const ncclResult_t res = call();
    op_fast_exit(t, f, res, a.flags);
    --t.guard;
    return res;
  }
  if (lane == kLaneFastGpuOrGroup) {
    FastOp f;
    if (op_fast_enter_gpu_or_group(a, t, f, tsc, call_ns)) {
      const ncclResult_t res = call();
      op_fast_exit(t, f, res, a.flags);
      --t.guard;
      return res;
    }
  } else if (!recording()) {
    --t.guard;
    return call();
  }
  // The general path gets a copy of the arguments built field by field here, so that nothing of
  // it is built on the fast lane.
  OpState o;
  const OpArgs copy = {a.op,    a.p2p,  a.send, a.recv,   a.count, a.dtype,
                       a.redop, a.peer, a.comm, a.stream, a.aux,   a.flags};
  op_enter(copy, o);
  const ncclResult_t res = call();
  op_exit(o, res);
  --t.guard;
  return res;
}

// ---- other API calls ---------------------------------------------------------------------------

// Records one API call around `call`: `before` fills arguments, `after` the outputs.
template <class Call, class Before, class After>
ncclResult_t run_api(fr_op op, const void* comm, Call call, Before before, After after) {
  Scope s;
  if (!s.active) return call();
  CommRef c = comm_ref(comm);
  fr_record r = new_record(op, c);
  before(r, c);
  record_begin(r);
  ncclResult_t res = call();
  finish(r, res);
  after(r, c, res);
  record_update(r);
  return res;
}

inline constexpr auto no_before = [](fr_record&, const CommRef&) {};
inline constexpr auto no_after = [](fr_record&, const CommRef&, ncclResult_t) {};

// The answer of a wrapper whose real function is not there (rare path: it looks again each time).
FR_HIDDEN ncclResult_t missing_real(const char* fn);

}  // namespace fr::agent

// Every wrapper starts with these: exported under NCCL's name, its real function resolved (or the
// call answered as missing_real says).
#define FR_API extern "C" __attribute__((visibility("default")))
#define FR_REAL_OR_FAIL(fn)                \
  auto real = FR_REAL(fn);                 \
  if (real == nullptr) {                   \
    return ::fr::agent::missing_real(#fn); \
  }
