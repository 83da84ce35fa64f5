// The shape every NCCL wrapper shares (wrappers_*.cpp): resolve the real function, forward,
// record behind the per-thread guard, return the real result untouched. Without any NCCL loaded
// the wrappers answer ncclSystemError; when the loaded NCCL lacks the function (an older release),
// ncclInvalidUsage, NCCL's answer to a feature it cannot serve. Neither ever crashes. Lookups
// through dlsym on NCCL's handle reach the wrappers too (dl.cpp).
//
// The wrappers cover every function of NCCL 2.32's nccl.h that can take part in a hang, the host
// calls of its device API (ncclDevCommCreate/Destroy, ncclCommQueryProperties), and the 2.29+
// functions older headers lack (nccl_extra.h), one file per kind of call:
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
// The op path below is inlined into each wrapper whole (header-inline, always_inline), so an op's
// arguments stay in registers on their way to its record without relying on the link-time
// optimizer; what is called rather than inlined (other API calls' records, record updates,
// deferred launches, capture) lives in wrappers.cpp.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "agent.h"

// The call path's helpers are inlined into each wrapper whole.
#define FR_INLINE inline __attribute__((always_inline))

namespace fr::agent {

struct CommRef {
  int32_t slot;
  uint64_t id;
  fr_comm_entry* entry;
  bool nonblocking;
};

// The communicator's slot: this thread's last one when it is the same handle and no handle was
// mapped since (the common case, one compare), else the shared table.
FR_INLINE CommRef comm_ref(const void* comm) {
  ThreadState& t = thread_state();
  const uint64_t key = (uint64_t)(uintptr_t)comm;
  const uint64_t gen = __atomic_load_n(&g_ctx.comm_gen, __ATOMIC_ACQUIRE);
  if (__builtin_expect(key == t.cache_handle && gen == t.cache_gen && key != 0, 1))
    return CommRef{t.cache_slot, t.cache_id, t.cache_entry, t.cache_nonblocking != 0};
  CommRef c = {-1, 0, nullptr, false};
  c.slot = comm_lookup(comm);
  if (c.slot >= 0) {
    c.entry = &g_ctx.comms[c.slot];
    c.id = __atomic_load_n(&c.entry->id, __ATOMIC_RELAXED);
    c.nonblocking = __atomic_load_n(&g_ctx.priv[c.slot].nonblocking, __ATOMIC_ACQUIRE) != 0;
    t.cache_handle = key;
    t.cache_gen = gen;
    t.cache_id = c.id;
    t.cache_entry = c.entry;
    t.cache_slot = c.slot;
    t.cache_nonblocking = c.nonblocking;
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
  uint64_t id;         // the record's id
  fr_record* slot;     // its ring slot
  uint64_t call_ns;
  uint64_t stream;
  uint64_t op_index;   // 0 when untracked
  RecTidOp tid_op;     // as written at entry
  uint32_t flags;      // as written at entry: FR_REC_F_IN_GROUP and _CAPTURED say how it launches
  uint32_t group_pos;  // in a group: index in the thread's group ops, or kMaxGroupOps
  CaptureRef capture;  // captured: the op's place in its graph
  fr_record cap;       // captured: the whole record, for the graph's capture table (cold path)
};

// Every word of a record entering its call, stored into its slot (held) directly.
FR_INLINE void store_entry(fr_record* s, uint64_t id, uint64_t comm_id, uint64_t seq,
                           uint64_t op_index, uint64_t count, uint64_t stream, uint64_t group_id,
                           uint64_t call_ns, uint64_t send, uint64_t recv, RecTidOp tid_op,
                           RecRedopPeer redop_peer, uint32_t flags, uint64_t aux) {
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
  set_record_word(s, offsetof(fr_record, result), RecResultFlags{FR_RESULT_PENDING, flags});
  set_record_word(s, offsetof(fr_record, aux), aux);
}

// Capture time (cold, wrappers.cpp): the op's place in its graph, and the graph's position write
// before it.
FR_HIDDEN __attribute__((noinline, cold)) void capture_enter(const OpArgs& a, OpState& o,
                                                             uint64_t* aux, uint32_t* flags);
// The captured op's whole record, as it returned, into the graph's capture table (cold).
FR_HIDDEN __attribute__((noinline, cold)) void capture_exit(OpState& o, ncclResult_t res,
                                                            uint64_t duration, uint32_t flags);

// Entry: every field of the record is stored into its slot directly, under the slot's lock.
FR_INLINE void op_enter(const OpArgs& a, OpState& o) {
  ThreadState& t = thread_state();
  o.c = comm_ref(a.comm);
  o.call_ns = now_ns();
  o.stream = (uint64_t)(uintptr_t)a.stream;
  const bool in_group = t.group_depth > 0;
  if (o.c.entry != nullptr) __atomic_store_n(&o.c.entry->last_call_ns, o.call_ns, __ATOMIC_RELAXED);
  bool captured = false;
  bool no_markers = false;  // the stream's capture state is unknown: enqueue nothing into it
  o.op_index = 0;
  o.group_pos = kMaxGroupOps;
  // Without a CUDA driver nothing can be captured or tracked: one load decides it.
  if (!__atomic_load_n(&g_ctx.cuda_absent, __ATOMIC_RELAXED)) {
    int capture = gpu_stream_capture(o.stream);
    captured = capture == kCapturing;
    no_markers = capture == kCaptureUnknown;
    if (!in_group && !captured && !no_markers && o.c.slot >= 0 && is_tracked(gpu_prepare())) {
      uint64_t index = __atomic_add_fetch(&o.c.entry->op_index, 1, __ATOMIC_RELAXED);
      if (gpu_before(o.c.slot, o.stream, index)) o.op_index = index;
    }
  }
  // A captured op runs at each replay: it takes its sequence numbers there (graphs.cpp), and
  // its record names the graph and its place in it.
  uint64_t seq = 0;
  uint64_t aux = a.aux;
  uint32_t capture_flags = 0;
  o.capture = CaptureRef{-1, 0, false};
  if (__builtin_expect(captured, 0))
    capture_enter(a, o, &aux, &capture_flags);
  else if (o.c.entry != nullptr)
    seq = __atomic_add_fetch(a.p2p ? &o.c.entry->p2p_seq : &o.c.entry->coll_seq, 1,
                             __ATOMIC_RELAXED);
  o.flags = FR_REC_F_IN_CALL | a.flags | (o.c.nonblocking ? FR_REC_F_NONBLOCKING : 0u) |
            (in_group ? FR_REC_F_IN_GROUP : 0u) | (captured ? FR_REC_F_CAPTURED : 0u) |
            capture_flags;
  o.tid_op = RecTidOp{current_tid(), (uint16_t)a.op, (uint8_t)a.dtype, FR_GPU_NONE};

  HeldRecord h;
  o.id = record_take_new(o.call_ns, &h);
  o.slot = __builtin_expect(h.slot != nullptr, 1) ? h.slot : record_slot(o.id);
  if (h.slot != nullptr) {
    store_entry(h.slot, o.id, o.c.id, seq, o.op_index, (uint64_t)a.count, o.stream,
                in_group ? t.group_id : 0, o.call_ns, (uint64_t)(uintptr_t)a.send,
                (uint64_t)(uintptr_t)a.recv, o.tid_op, RecRedopPeer{a.redop, a.peer}, o.flags,
                aux);
    record_release(h);
  }
  if (__builtin_expect(captured, 0)) {
    o.cap = fr_record{};
    store_entry(&o.cap, o.id, o.c.id, 0, o.op_index, (uint64_t)a.count, o.stream,
                in_group ? t.group_id : 0, o.call_ns, (uint64_t)(uintptr_t)a.send,
                (uint64_t)(uintptr_t)a.recv, o.tid_op, RecRedopPeer{a.redop, a.peer}, o.flags, aux);
  }
  if (in_group) {
    if (t.n_ops < kMaxGroupOps) {
      o.group_pos = t.n_ops++;
      thread_ops()[o.group_pos] = GroupOp{o.id, o.stream, 0, o.c.slot,
                                          captured     ? kOpCaptured
                                          : no_markers ? kOpNoMarkers
                                                       : 0u,
                                          o.capture};
    } else {
      t.overflow = 1;
    }
  }
}

// Exit: only the words that change are stored (duration, result and flags, and the GPU state when
// the op launched).
FR_INLINE void op_exit(OpState& o, ncclResult_t res) {
  uint64_t duration = elapsed_since(o.call_ns);
  uint32_t flags = o.flags & ~FR_REC_F_IN_CALL;
  bool launched = false;
  if (__builtin_expect(res == ncclSuccess && !(o.flags & (FR_REC_F_IN_GROUP | FR_REC_F_CAPTURED)), 1)) {
    launched = true;
    flags |= FR_REC_F_LAUNCHED;
    if (o.op_index == 0 || !gpu_after(o.c.slot, o.stream, o.op_index))
      flags |= FR_REC_F_GPU_UNTRACKED;
  } else if (res != ncclSuccess && res != ncclInProgress) {
    // Failed: never launched. In a group, the outermost GroupEnd must not launch it either; a
    // captured op would have run when its graph was launched.
    flags |= FR_REC_F_NEVER_LAUNCHED;
    if ((o.flags & FR_REC_F_IN_GROUP) && o.group_pos < kMaxGroupOps)
      thread_ops()[o.group_pos].bits |= kOpFailed;
  }
  // Otherwise: in a group it launches (or not) at the outermost GroupEnd; captured into a CUDA
  // graph it runs when the graph is launched, never counted in flight here; in progress on a
  // nonblocking communicator, it launches once the application sees success (deferred below).
  HeldRecord h;
  if (record_take_in(o.slot, o.id, &h)) {
    set_record_word(h.slot, offsetof(fr_record, duration_ns), duration);
    if (launched) {
      RecTidOp w = o.tid_op;
      w.gpu_state = FR_GPU_ENQUEUED;
      set_record_word(h.slot, offsetof(fr_record, tid), w);
    }
#ifdef FR_TEST_PARK_WRITER
    // Test builds only (tests/agent): park the writer halfway, between the GPU state and the
    // result (two words an exit changes together), so that readers alongside meet half-written
    // records.
    sched_yield();
#endif
    set_record_word(h.slot, offsetof(fr_record, result), RecResultFlags{(int32_t)res, flags});
    record_release(h);
  }
  // Nonblocking: the launch may still fail; wait until the application sees it succeed. Deferred
  // after the exit's own store, so a release on another thread cannot be overwritten by it.
  if (res == ncclInProgress && !(o.flags & (FR_REC_F_IN_GROUP | FR_REC_F_CAPTURED)))
    defer(o.c.slot, o.id, o.stream, o.op_index);
  // Captured: the record goes into the graph's capture table; in a group, the graph's "finished"
  // write follows the group's launch (group_after_launch).
  if (__builtin_expect(o.flags & FR_REC_F_CAPTURED, 0)) capture_exit(o, res, duration, flags);
}

// Inlined into each wrapper whole, so the arguments stay in registers on their way to the record.
template <class Call>
FR_INLINE ncclResult_t run_op(const OpArgs& a, Call call) {
  Scope s;
  if (!s.active) return call();
  OpState o;
  op_enter(a, o);
  ncclResult_t res = call();
  op_exit(o, res);
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

