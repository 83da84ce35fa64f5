// The exported NCCL API: every function of NCCL 2.32's nccl.h that can take part in a hang, the
// host calls of its device API (ncclDevCommCreate/Destroy, ncclCommQueryProperties), and the
// 2.29+ functions older headers lack (nccl_extra.h). Every wrapper has the same shape: resolve the
// real function, forward, record behind the per-thread guard, return the real result untouched.
// Without any NCCL loaded the wrappers answer ncclSystemError; when the loaded NCCL lacks the
// function (an older release), ncclInvalidUsage, NCCL's answer to a feature it cannot serve.
// Neither ever crashes. Lookups through dlsym on NCCL's handle reach these wrappers too (dl.cpp).
//
// What a call records (fr/flight_log.h has the fields):
//  - collectives and p2p: one record with the per-communicator sequence number; outside a group
//    the op launches at its call, inside one at the outermost GroupEnd (GPU markers placed then).
//    The *Config collectives are recorded exactly as their plain forms (flag FR_REC_F_COLL_CONFIG);
//    the signal calls are one-sided point-to-point (peer, stream, signal index and context), one
//    WaitSignal record per descriptor;
//  - communicator lifecycle: a record, and the communicator table entry (id, parent, state);
//  - groups, registration, windows, memory, reduction ops, unique ids, device communicators: a
//    record each;
//  - queries (version, count, device, rank, error strings, properties, memory statistics, a
//    window's user pointer) are forwarded only; async errors are recorded once per distinct error.
// Left out on purpose (not exported, so they bind straight to NCCL): the window address queries of
// the device API and its requirement helpers, ncclParam*, ncclSetEncryption (docs/agent.md).
#include <sched.h>
#include <string.h>

#include "agent.h"

using namespace fr::agent;

namespace {

constexpr uint32_t kConfigMagic = 0xcafebeef;

// The call path's helpers are inlined into each wrapper whole.
#define FR_INLINE inline __attribute__((always_inline))

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

fr_record new_record(fr_op op, const CommRef& c) {
  fr_record r = {};
  ThreadState& t = thread_state();
  r.comm_id = c.id;
  r.call_ns = now_ns();
  r.tid = current_tid();
  r.op = (uint16_t)op;
  r.redop = -1;
  r.peer = -1;
  r.result = FR_RESULT_PENDING;
  r.flags = FR_REC_F_IN_CALL | (c.nonblocking ? FR_REC_F_NONBLOCKING : 0u);
  if (t.group_depth > 0) {
    r.group_id = t.group_id;
    r.flags |= FR_REC_F_IN_GROUP;
  }
  if (c.entry != nullptr) __atomic_store_n(&c.entry->last_call_ns, r.call_ns, __ATOMIC_RELAXED);
  return r;
}

// Host time since `since`; 0 if the wall clock stepped back meanwhile (NTP, re-anchoring).
uint64_t elapsed_since(uint64_t since) {
  uint64_t now = now_ns();
  return now > since ? now - since : 0;
}

void finish(fr_record& r, ncclResult_t res) {
  r.duration_ns = elapsed_since(r.call_ns);
  r.result = (int32_t)res;
  r.flags &= ~FR_REC_F_IN_CALL;
}

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

bool is_tracked(int mode) { return mode == kGpuMarkers || mode == kGpuEvents; }

// ---- record updates applied in place ---------------------------------------------------------

// Sets `flags` on a record already written (and the GPU state to enqueued when they say it
// launched), and its op index when non-zero: only those words are stored.
void mark(uint64_t rec_id, uint32_t flags, uint64_t op_index) {
  HeldRecord h;
  if (!record_take(rec_id, &h)) return;
  if (op_index != 0) set_record_word(h.slot, offsetof(fr_record, op_index), op_index);
  if (flags & FR_REC_F_LAUNCHED) {
    RecTidOp w = record_word<RecTidOp>(h.slot, offsetof(fr_record, tid));
    w.gpu_state = FR_GPU_ENQUEUED;
    set_record_word(h.slot, offsetof(fr_record, tid), w);
  }
  if (flags != 0) {
    RecResultFlags w = record_word<RecResultFlags>(h.slot, offsetof(fr_record, result));
    w.flags |= flags;
    set_record_word(h.slot, offsetof(fr_record, result), w);
  }
  record_release(h);
}

// ---- nonblocking launches --------------------------------------------------------------------

void priv_lock(CommPriv& p) {
  while (__atomic_exchange_n(&p.lock, 1, __ATOMIC_ACQUIRE) != 0) sched_yield();
}
void priv_unlock(CommPriv& p) { __atomic_store_n(&p.lock, 0, __ATOMIC_RELEASE); }

void defer(int32_t slot, uint64_t rec_id, uint64_t stream, uint64_t op_index) {
  if (slot < 0) return;
  CommPriv& p = g_ctx.priv[slot];
  priv_lock(p);
  bool kept = p.n_deferred < kMaxDeferred;
  if (kept) p.deferred[p.n_deferred++] = Deferred{rec_id, stream, op_index};
  priv_unlock(p);
  if (!kept) mark(rec_id, FR_REC_F_GPU_UNTRACKED, 0);
}

// The application saw its nonblocking launches succeed: place their completion markers now.
void release_deferred(int32_t slot) {
  CommPriv& p = g_ctx.priv[slot];
  Deferred batch[kMaxDeferred];
  priv_lock(p);
  uint32_t n = p.n_deferred;
  memcpy(batch, p.deferred, n * sizeof(Deferred));
  p.n_deferred = 0;
  priv_unlock(p);
  for (uint32_t i = 0; i < n; ++i) {
    uint32_t flags = FR_REC_F_LAUNCHED;
    if (batch[i].op_index == 0 || !gpu_after(slot, batch[i].stream, batch[i].op_index))
      flags |= FR_REC_F_GPU_UNTRACKED;
    mark(batch[i].rec_id, flags, 0);
  }
}

void drop_deferred(int32_t slot) {
  CommPriv& p = g_ctx.priv[slot];
  priv_lock(p);
  p.n_deferred = 0;
  priv_unlock(p);
}

// ---- collectives and point-to-point ----------------------------------------------------------

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

// Capture time (cold): the op's place in its graph, and the graph's position write before it.
__attribute__((noinline, cold)) void capture_enter(const OpArgs& a, OpState& o, uint64_t* aux,
                                                   uint32_t* flags) {
  fr_record r = {};
  r.stream = o.stream;
  r.call_ns = o.call_ns;
  o.capture = graph_capture_op(r, o.c.slot, a.p2p, true);
  if (o.capture.graph >= 0) {
    *aux = r.aux;
    o.op_index = r.op_index;
    *flags = r.flags & FR_REC_F_GPU_POSITION;
  }
}

// The captured op's whole record, as it returned, into the graph's capture table.
__attribute__((noinline, cold)) void capture_exit(OpState& o, ncclResult_t res, uint64_t duration,
                                                  uint32_t flags) {
  o.cap.duration_ns = duration;
  o.cap.result = (int32_t)res;
  o.cap.flags = flags;
  bool ok = res == ncclSuccess || res == ncclInProgress;
  graph_capture_done(o.capture, o.c.slot, o.stream, o.cap, ok, !(o.flags & FR_REC_F_IN_GROUP));
}

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

// ---- groups ------------------------------------------------------------------------------------

// The record of a GroupStart, GroupEnd or GroupSimulateEnd, written in place like an op's.
struct GroupRec {
  uint64_t id;
  fr_record* slot;
  uint64_t call_ns;
  uint32_t flags;
};

void group_rec_enter(fr_op op, uint64_t group_id, GroupRec& r) {
  r.call_ns = now_ns();
  r.flags = FR_REC_F_IN_CALL | (group_id != 0 ? FR_REC_F_IN_GROUP : 0u);
  HeldRecord h;
  r.id = record_take_new(r.call_ns, &h);
  r.slot = h.slot != nullptr ? h.slot : record_slot(r.id);
  if (h.slot != nullptr) {
    store_entry(h.slot, r.id, 0, 0, 0, 0, 0, group_id, r.call_ns, 0, 0,
                RecTidOp{current_tid(), (uint16_t)op, 0, FR_GPU_NONE}, RecRedopPeer{-1, -1},
                r.flags, 0);
    record_release(h);
  }
}

// `end_ns`: when the call returned (0: now).
void group_rec_exit(const GroupRec& r, ncclResult_t res, uint64_t end_ns = 0) {
  if (end_ns == 0) end_ns = now_ns();
  HeldRecord h;
  if (!record_take_in(r.slot, r.id, &h)) return;
  set_record_word(h.slot, offsetof(fr_record, duration_ns),
                  end_ns > r.call_ns ? end_ns - r.call_ns : uint64_t{0});
  set_record_word(h.slot, offsetof(fr_record, result),
                  RecResultFlags{(int32_t)res, r.flags & ~FR_REC_F_IN_CALL});
  record_release(h);
}

void apply_group_flags(fr_record& r, const void* arg) {
  const uint64_t* a = (const uint64_t*)arg;  // {group_id, tid, flags}
  if (r.group_id != a[0] || r.tid != (uint32_t)a[1]) return;
  if (r.op == FR_OP_GROUP_START || r.op == FR_OP_GROUP_END || r.op == FR_OP_GROUP_SIMULATE_END)
    return;
  if (r.flags & (FR_REC_F_LAUNCHED | FR_REC_F_NEVER_LAUNCHED | FR_REC_F_CAPTURED)) return;
  r.flags |= (uint32_t)a[2];
  if (a[2] & FR_REC_F_LAUNCHED) r.gpu_state = FR_GPU_ENQUEUED;
}

// More ops than the thread could remember: find the rest of the group in the ring (rare).
void mark_overflow(uint64_t group_id, uint32_t flags) {
  uint64_t arg[3] = {group_id, current_tid(), flags};
  uint64_t end = __atomic_load_n(&g_ctx.hdr->record_counter, __ATOMIC_ACQUIRE);
  uint64_t begin = end > g_ctx.ring_cap ? end - g_ctx.ring_cap : 0;
  for (uint64_t id = begin; id < end; ++id) record_modify(id, apply_group_flags, arg);
}

struct Pair {
  int32_t slot;
  uint64_t stream;
  uint64_t max_index;
  bool tracked;
};
constexpr uint32_t kMaxPairs = 32;

// Before the outermost GroupEnd: op indices per communicator, "started" markers per stream.
uint32_t group_before_launch(ThreadState& t, Pair* pairs) {
  uint32_t n_pairs = 0;
  bool tracked = false;
  GroupOp* ops = thread_ops();
  for (uint32_t i = 0; i < t.n_ops; ++i) {
    GroupOp& op = ops[i];
    if (op.bits || op.comm_slot < 0) continue;
    if (!tracked && !is_tracked(gpu_prepare())) break;
    tracked = true;
    uint32_t k = 0;
    while (k < n_pairs && (pairs[k].slot != op.comm_slot || pairs[k].stream != op.stream)) ++k;
    if (k == n_pairs) {
      if (n_pairs == kMaxPairs) continue;  // untracked: op_index stays 0
      pairs[n_pairs++] = Pair{op.comm_slot, op.stream, 0, true};
    }
    op.op_index = __atomic_add_fetch(&g_ctx.comms[op.comm_slot].op_index, 1, __ATOMIC_RELAXED);
    if (op.op_index > pairs[k].max_index) pairs[k].max_index = op.op_index;
  }
  for (uint32_t k = 0; k < n_pairs; ++k)
    pairs[k].tracked = gpu_before(pairs[k].slot, pairs[k].stream, pairs[k].max_index);
  return n_pairs;
}

bool pair_tracked(const Pair* pairs, uint32_t n, const GroupOp& op) {
  for (uint32_t k = 0; k < n; ++k)
    if (pairs[k].slot == op.comm_slot && pairs[k].stream == op.stream) return pairs[k].tracked;
  return false;
}

void group_after_launch(ThreadState& t, Pair* pairs, uint32_t n_pairs, ncclResult_t res) {
  if (res == ncclSuccess) {
    for (uint32_t k = 0; k < n_pairs; ++k)
      if (pairs[k].tracked)
        pairs[k].tracked = gpu_after(pairs[k].slot, pairs[k].stream, pairs[k].max_index);
  }
  GroupOp* ops = thread_ops();
  for (uint32_t i = 0; i < t.n_ops; ++i) {
    const GroupOp& op = ops[i];
    if ((op.bits & kOpCaptured) && !(op.bits & kOpFailed))
      graph_capture_finish_in_group(op.capture, op.comm_slot, op.stream, res);
    if (op.bits & (kOpCaptured | kOpFailed)) continue;  // not launched here, or already marked
    bool tracked = op.op_index != 0 && pair_tracked(pairs, n_pairs, op);
    uint64_t index = tracked ? op.op_index : 0;
    if (res == ncclSuccess) {
      mark(op.rec_id, FR_REC_F_LAUNCHED | (tracked ? 0u : FR_REC_F_GPU_UNTRACKED), index);
    } else if (res == ncclInProgress) {
      mark(op.rec_id, 0, index);
      defer(op.comm_slot, op.rec_id, op.stream, index);
    } else {
      mark(op.rec_id, FR_REC_F_NEVER_LAUNCHED, 0);
    }
  }
  if (t.overflow) {
    uint32_t flags = res == ncclSuccess      ? FR_REC_F_LAUNCHED | FR_REC_F_GPU_UNTRACKED
                     : res == ncclInProgress ? 0u
                                             : FR_REC_F_NEVER_LAUNCHED;
    if (flags) mark_overflow(t.group_id, flags);
  }
}

void group_reset(ThreadState& t) {
  t.group_id = 0;
  t.n_ops = 0;
  t.overflow = 0;
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

auto no_before = [](fr_record&, const CommRef&) {};
auto no_after = [](fr_record&, const CommRef&, ncclResult_t) {};

// NCCL_COMM_BLOCKING overrides every config, as in NCCL; then the config's `blocking` field.
bool config_nonblocking(const ncclConfig_t* config, bool inherited) {
  if (g_ctx.env_blocking != 0) return g_ctx.env_blocking == 2;
  if (config == nullptr || config->magic != kConfigMagic ||
      config->size < offsetof(ncclConfig_t, blocking) + sizeof(int))
    return inherited;
  if (config->blocking == NCCL_CONFIG_UNDEF_INT) return inherited;
  return config->blocking == 0;
}

void config_name(const ncclConfig_t* config, char* out) {
  if (config == nullptr || config->magic != kConfigMagic ||
      config->size < offsetof(ncclConfig_t, commName) + sizeof(const char*) ||
      config->commName == nullptr)
    return;
  size_t n = strnlen(config->commName, FR_NAME_LEN - 1);
  memcpy(out, config->commName, n);
  out[n] = '\0';
}

uint64_t unique_id_hash(const ncclUniqueId* ids, int n) {
  uint64_t h = kHashSeed;
  for (int i = 0; i < n; ++i) h = hash_bytes(h, ids[i].internal, NCCL_UNIQUE_ID_BYTES);
  return hash_finish(h);
}

struct NewComm {
  uint64_t id;
  uint64_t parent_id;
  uint64_t derive_index;
  int64_t color;
  int32_t key;
  int32_t nranks;
  int32_t rank;
  fr_comm_origin origin;
  uint32_t id_flags;
  bool nonblocking;
  const ncclConfig_t* config;
  uint64_t excluded[2];  // shrink: bitmap of the excluded parent ranks below 128 (the record's buffers)
};

// After a creating call: a table entry for the new communicator (or a failed one).
void register_comm(const NewComm& n, ncclComm_t handle, ncclResult_t res, uint64_t call_ns) {
  bool made = (res == ncclSuccess || res == ncclInProgress) && handle != nullptr;
  fr_comm_entry e = {};
  e.id = n.id;
  e.parent_id = n.parent_id;
  e.handle = (uint64_t)(uintptr_t)handle;
  e.create_ns = call_ns;
  e.color = n.color;
  e.key = n.key;
  e.size = n.nranks > 0 ? n.nranks : -1;
  e.rank = n.rank;
  e.cuda_dev = -1;
  e.origin = n.origin;
  e.flags = n.id_flags | (n.nonblocking ? FR_COMM_F_NONBLOCKING : 0u);
  e.derive_index = n.derive_index;
  config_name(n.config, e.name);
  uint32_t state = !made                ? FR_COMM_FAILED
                   : res == ncclSuccess ? FR_COMM_LIVE
                                        : FR_COMM_INITIALIZING;
  int32_t slot = comm_register(e, state, made ? handle : nullptr, n.nonblocking);
  if (slot < 0) return;
  if (made && res == ncclSuccess) comm_learn_shape(slot, handle);
}

// A creating call: `prepare` computes the new communicator's identity from its parent's entry
// (inside the guard), then the call runs and the new entry is registered.
template <class Prepare, class Call>
ncclResult_t run_create(fr_op op, const void* parent, Prepare prepare, ncclComm_t* out, Call call) {
  Scope s;
  if (!s.active) return call();
  CommRef c = comm_ref(parent);
  NewComm n = prepare(c);
  fr_record r = new_record(op, c);
  if (parent == nullptr)
    r.comm_id = n.id;
  else
    r.aux = n.id;
  r.count = n.nranks > 0 ? (uint64_t)n.nranks : 0;
  r.sendbuff = n.excluded[0];
  r.recvbuff = n.excluded[1];
  record_begin(r);
  ncclResult_t res = call();
  finish(r, res);
  ncclComm_t made = out != nullptr ? *out : nullptr;
  bool ok = res == ncclSuccess || res == ncclInProgress;
  if (made == nullptr && ok) r.aux = 0;  // e.g. a split with NCCL_SPLIT_NOCOLOR
  if (made != nullptr ? ok : !ok) register_comm(n, made, res, r.call_ns);
  record_update(r);
  return res;
}

template <class Call>
ncclResult_t run_lifecycle(fr_op op, ncclComm_t comm, uint32_t state, Call call) {
  Scope s;
  if (!s.active) return call();
  CommRef c = comm_ref(comm);
  fr_record r = new_record(op, c);
  record_begin(r);
  ncclResult_t res = call();
  finish(r, res);
  if ((res == ncclSuccess || res == ncclInProgress) && c.slot >= 0) {
    comm_set_state(c.slot, state);
    if (state != FR_COMM_LIVE && state != FR_COMM_SUSPENDED) drop_deferred(c.slot);
  }
  record_update(r);
  return res;
}

NewComm parent_derived(const CommRef& p, fr_comm_origin origin, uint64_t* counter) {
  NewComm n = {};
  n.parent_id = p.id;
  n.origin = origin;
  n.id_flags = FR_COMM_F_ID_DERIVED;
  n.nonblocking = p.nonblocking;
  n.rank = -1;
  n.nranks = -1;
  if (p.slot >= 0 && counter != nullptr)
    n.derive_index = __atomic_add_fetch(counter, 1, __ATOMIC_RELAXED);
  return n;
}

const char kNoNccl[] = "fr: no NCCL library is loaded";

// The answer of a wrapper whose real function is not there (rare path: it looks again each time).
ncclResult_t missing_real(const char* fn) {
  if (FR_REAL(ncclGetVersion) == nullptr) {
    debug_log("%s: no NCCL library is loaded", fn);
    return ncclSystemError;
  }
  debug_log("%s: the loaded NCCL does not have it", fn);
  return ncclInvalidUsage;
}

}  // namespace

#define FR_API extern "C" __attribute__((visibility("default")))
#define FR_REAL_OR_FAIL(fn)   \
  auto real = FR_REAL(fn);    \
  if (real == nullptr) {      \
    return missing_real(#fn); \
  }

// ---- collectives -------------------------------------------------------------------------------

FR_API ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                                  ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                  cudaStream_t stream) {
  FR_REAL_OR_FAIL(ncclAllReduce);
  OpArgs a = {FR_OP_ALLREDUCE, false, sendbuff, recvbuff, count, datatype, op, -1, comm, stream};
  return run_op(a, [&] { return real(sendbuff, recvbuff, count, datatype, op, comm, stream); });
}

FR_API ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                                  ncclDataType_t datatype, int root, ncclComm_t comm,
                                  cudaStream_t stream) {
  FR_REAL_OR_FAIL(ncclBroadcast);
  OpArgs a = {FR_OP_BROADCAST, false, sendbuff, recvbuff, count, datatype, -1, root, comm, stream};
  return run_op(a, [&] { return real(sendbuff, recvbuff, count, datatype, root, comm, stream); });
}

FR_API ncclResult_t ncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root,
                              ncclComm_t comm, cudaStream_t stream) {
  FR_REAL_OR_FAIL(ncclBcast);
  OpArgs a = {FR_OP_BCAST, false, buff, buff, count, datatype, -1, root, comm, stream};
  return run_op(a, [&] { return real(buff, count, datatype, root, comm, stream); });
}

FR_API ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count,
                               ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm,
                               cudaStream_t stream) {
  FR_REAL_OR_FAIL(ncclReduce);
  OpArgs a = {FR_OP_REDUCE, false, sendbuff, recvbuff, count, datatype, op, root, comm, stream};
  return run_op(a,
                [&] { return real(sendbuff, recvbuff, count, datatype, op, root, comm, stream); });
}

FR_API ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                                  ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  FR_REAL_OR_FAIL(ncclAllGather);
  OpArgs a = {FR_OP_ALLGATHER, false, sendbuff, recvbuff, sendcount,
              datatype,        -1,    -1,       comm,     stream};
  return run_op(a, [&] { return real(sendbuff, recvbuff, sendcount, datatype, comm, stream); });
}

FR_API ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                      ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                      cudaStream_t stream) {
  FR_REAL_OR_FAIL(ncclReduceScatter);
  OpArgs a = {
      FR_OP_REDUCESCATTER, false, sendbuff, recvbuff, recvcount, datatype, op, -1, comm, stream};
  return run_op(a, [&] { return real(sendbuff, recvbuff, recvcount, datatype, op, comm, stream); });
}

FR_API ncclResult_t ncclAlltoAll(const void* sendbuff, void* recvbuff, size_t count,
                                 ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  FR_REAL_OR_FAIL(ncclAlltoAll);
  OpArgs a = {FR_OP_ALLTOALL, false, sendbuff, recvbuff, count, datatype, -1, -1, comm, stream};
  return run_op(a, [&] { return real(sendbuff, recvbuff, count, datatype, comm, stream); });
}

FR_API ncclResult_t ncclGather(const void* sendbuff, void* recvbuff, size_t count,
                               ncclDataType_t datatype, int root, ncclComm_t comm,
                               cudaStream_t stream) {
  FR_REAL_OR_FAIL(ncclGather);
  OpArgs a = {FR_OP_GATHER, false, sendbuff, recvbuff, count, datatype, -1, root, comm, stream};
  return run_op(a, [&] { return real(sendbuff, recvbuff, count, datatype, root, comm, stream); });
}

FR_API ncclResult_t ncclScatter(const void* sendbuff, void* recvbuff, size_t count,
                                ncclDataType_t datatype, int root, ncclComm_t comm,
                                cudaStream_t stream) {
  FR_REAL_OR_FAIL(ncclScatter);
  OpArgs a = {FR_OP_SCATTER, false, sendbuff, recvbuff, count, datatype, -1, root, comm, stream};
  return run_op(a, [&] { return real(sendbuff, recvbuff, count, datatype, root, comm, stream); });
}

FR_API ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer,
                             ncclComm_t comm, cudaStream_t stream) {
  FR_REAL_OR_FAIL(ncclSend);
  OpArgs a = {FR_OP_SEND, true, sendbuff, nullptr, count, datatype, -1, peer, comm, stream};
  return run_op(a, [&] { return real(sendbuff, count, datatype, peer, comm, stream); });
}

FR_API ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer,
                             ncclComm_t comm, cudaStream_t stream) {
  FR_REAL_OR_FAIL(ncclRecv);
  OpArgs a = {FR_OP_RECV, true, nullptr, recvbuff, count, datatype, -1, peer, comm, stream};
  return run_op(a, [&] { return real(recvbuff, count, datatype, peer, comm, stream); });
}

// ---- collectives with a per-call config (NCCL 2.31+): recorded exactly as their plain forms --------

FR_API ncclResult_t ncclAllReduceConfig(const void* sendbuff, void* recvbuff, size_t count,
                                        ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                        cudaStream_t stream, const ncclCollConfig_t* config) {
  FR_REAL_OR_FAIL(ncclAllReduceConfig);
  OpArgs a = {FR_OP_ALLREDUCE, false, sendbuff, recvbuff, count, datatype, op, -1, comm, stream,
              0,               FR_REC_F_COLL_CONFIG};
  return run_op(
      a, [&] { return real(sendbuff, recvbuff, count, datatype, op, comm, stream, config); });
}

FR_API ncclResult_t ncclBroadcastConfig(const void* sendbuff, void* recvbuff, size_t count,
                                        ncclDataType_t datatype, int root, ncclComm_t comm,
                                        cudaStream_t stream, const ncclCollConfig_t* config) {
  FR_REAL_OR_FAIL(ncclBroadcastConfig);
  OpArgs a = {FR_OP_BROADCAST, false, sendbuff, recvbuff, count, datatype, -1, root, comm, stream,
              0,               FR_REC_F_COLL_CONFIG};
  return run_op(
      a, [&] { return real(sendbuff, recvbuff, count, datatype, root, comm, stream, config); });
}

FR_API ncclResult_t ncclReduceConfig(const void* sendbuff, void* recvbuff, size_t count,
                                     ncclDataType_t datatype, ncclRedOp_t op, int root,
                                     ncclComm_t comm, cudaStream_t stream,
                                     const ncclCollConfig_t* config) {
  FR_REAL_OR_FAIL(ncclReduceConfig);
  OpArgs a = {FR_OP_REDUCE, false, sendbuff, recvbuff, count, datatype, op, root, comm, stream,
              0,            FR_REC_F_COLL_CONFIG};
  return run_op(
      a, [&] { return real(sendbuff, recvbuff, count, datatype, op, root, comm, stream, config); });
}

FR_API ncclResult_t ncclAllGatherConfig(const void* sendbuff, void* recvbuff, size_t sendcount,
                                        ncclDataType_t datatype, ncclComm_t comm,
                                        cudaStream_t stream, const ncclCollConfig_t* config) {
  FR_REAL_OR_FAIL(ncclAllGatherConfig);
  OpArgs a = {FR_OP_ALLGATHER, false, sendbuff, recvbuff, sendcount, datatype, -1, -1, comm, stream,
              0,               FR_REC_F_COLL_CONFIG};
  return run_op(a,
                [&] { return real(sendbuff, recvbuff, sendcount, datatype, comm, stream, config); });
}

FR_API ncclResult_t ncclReduceScatterConfig(const void* sendbuff, void* recvbuff, size_t recvcount,
                                            ncclDataType_t datatype, ncclRedOp_t op,
                                            ncclComm_t comm, cudaStream_t stream,
                                            const ncclCollConfig_t* config) {
  FR_REAL_OR_FAIL(ncclReduceScatterConfig);
  OpArgs a = {FR_OP_REDUCESCATTER, false, sendbuff, recvbuff, recvcount, datatype, op, -1, comm,
              stream,              0,     FR_REC_F_COLL_CONFIG};
  return run_op(
      a, [&] { return real(sendbuff, recvbuff, recvcount, datatype, op, comm, stream, config); });
}

FR_API ncclResult_t ncclAlltoAllConfig(const void* sendbuff, void* recvbuff, size_t count,
                                       ncclDataType_t datatype, ncclComm_t comm,
                                       cudaStream_t stream, const ncclCollConfig_t* config) {
  FR_REAL_OR_FAIL(ncclAlltoAllConfig);
  OpArgs a = {FR_OP_ALLTOALL, false, sendbuff, recvbuff, count, datatype, -1, -1, comm, stream,
              0,              FR_REC_F_COLL_CONFIG};
  return run_op(a, [&] { return real(sendbuff, recvbuff, count, datatype, comm, stream, config); });
}

FR_API ncclResult_t ncclGatherConfig(const void* sendbuff, void* recvbuff, size_t count,
                                     ncclDataType_t datatype, int root, ncclComm_t comm,
                                     cudaStream_t stream, const ncclCollConfig_t* config) {
  FR_REAL_OR_FAIL(ncclGatherConfig);
  OpArgs a = {FR_OP_GATHER, false, sendbuff, recvbuff, count, datatype, -1, root, comm, stream,
              0,            FR_REC_F_COLL_CONFIG};
  return run_op(
      a, [&] { return real(sendbuff, recvbuff, count, datatype, root, comm, stream, config); });
}

FR_API ncclResult_t ncclScatterConfig(const void* sendbuff, void* recvbuff, size_t count,
                                      ncclDataType_t datatype, int root, ncclComm_t comm,
                                      cudaStream_t stream, const ncclCollConfig_t* config) {
  FR_REAL_OR_FAIL(ncclScatterConfig);
  OpArgs a = {FR_OP_SCATTER, false, sendbuff, recvbuff, count, datatype, -1, root, comm, stream,
              0,             FR_REC_F_COLL_CONFIG};
  return run_op(
      a, [&] { return real(sendbuff, recvbuff, count, datatype, root, comm, stream, config); });
}

// ---- signals: one-sided point-to-point ------------------------------------------------------------

FR_API ncclResult_t ncclPutSignal(const void* localbuff, size_t count, ncclDataType_t datatype,
                                  int peer, ncclWindow_t peerWin, size_t peerWinOffset, int sigIdx,
                                  int ctx, unsigned int flags, ncclComm_t comm,
                                  cudaStream_t stream) {
  FR_REAL_OR_FAIL(ncclPutSignal);
  OpArgs a = {FR_OP_PUT_SIGNAL, true, localbuff, (const void*)peerWin, count, datatype, -1, peer,
              comm,             stream, FR_SIGNAL_AUX(sigIdx, ctx)};
  return run_op(a, [&] {
    return real(localbuff, count, datatype, peer, peerWin, peerWinOffset, sigIdx, ctx, flags, comm,
                stream);
  });
}

FR_API ncclResult_t ncclSignal(int peer, int sigIdx, int ctx, unsigned int flags, ncclComm_t comm,
                               cudaStream_t stream) {
  FR_REAL_OR_FAIL(ncclSignal);
  OpArgs a = {FR_OP_SIGNAL, true, nullptr, nullptr, 0, -1, -1, peer, comm, stream,
              FR_SIGNAL_AUX(sigIdx, ctx)};
  return run_op(a, [&] { return real(peer, sigIdx, ctx, flags, comm, stream); });
}

// One record per descriptor (the first kMaxWaitDescs), so each awaited peer is named; they share
// the call's launch and each has its own op index on the stream.
constexpr int kMaxWaitDescs = 16;

FR_API ncclResult_t ncclWaitSignal(int nDesc, ncclWaitSignalDesc_t* signalDescs, ncclComm_t comm,
                                   cudaStream_t stream) {
  FR_REAL_OR_FAIL(ncclWaitSignal);
  Scope s;
  if (!s.active) return real(nDesc, signalDescs, comm, stream);
  int n = signalDescs == nullptr || nDesc <= 0 ? 0 : nDesc < kMaxWaitDescs ? nDesc : kMaxWaitDescs;
  OpState o[kMaxWaitDescs];
  for (int i = 0; i < (n > 0 ? n : 1); ++i) {
    const ncclWaitSignalDesc_t* d = n > 0 ? &signalDescs[i] : nullptr;
    OpArgs a = {FR_OP_WAIT_SIGNAL,
                true,
                nullptr,
                nullptr,
                d != nullptr && d->opCnt > 0 ? (size_t)d->opCnt : 0,
                -1,
                -1,
                d != nullptr ? d->peer : -1,
                comm,
                stream,
                d != nullptr ? FR_SIGNAL_AUX(d->sigIdx, d->ctx) : 0};
    op_enter(a, o[i]);
  }
  ncclResult_t res = real(nDesc, signalDescs, comm, stream);
  for (int i = 0; i < (n > 0 ? n : 1); ++i) op_exit(o[i], res);
  return res;
}

// ---- groups ------------------------------------------------------------------------------------

FR_API ncclResult_t ncclGroupStart() {
  FR_REAL_OR_FAIL(ncclGroupStart);
  Scope s;
  if (!s.active) return real();
  ThreadState& t = s.t;
  if (t.group_depth == 0) {
    group_reset(t);
    t.group_id = __atomic_add_fetch(&g_ctx.next_group_id, 1, __ATOMIC_RELAXED);
  }
  GroupRec r;
  group_rec_enter(FR_OP_GROUP_START, t.group_id, r);
  ncclResult_t res = real();
  if (res == ncclSuccess) ++t.group_depth;
  group_rec_exit(r, res);
  return res;
}

// GroupEnd and GroupSimulateEnd: only the outermost one launches (or simulates) the group.
template <class Call>
ncclResult_t run_group_end(fr_op op, Call call) {
  Scope s;
  if (!s.active) return call();
  ThreadState& t = s.t;
  GroupRec r;
  group_rec_enter(op, t.group_depth > 0 ? t.group_id : 0, r);
  bool outermost = t.group_depth == 1;
  Pair pairs[kMaxPairs];
  uint32_t n_pairs = 0;
  if (outermost && op == FR_OP_GROUP_END) n_pairs = group_before_launch(t, pairs);
  ncclResult_t res = call();
  uint64_t end_ns = now_ns();
  if (t.group_depth > 0) --t.group_depth;  // NCCL ends the group level even when the call fails
  if (outermost) {
    if (op == FR_OP_GROUP_END) {
      group_after_launch(t, pairs, n_pairs, res);
    } else {
      GroupOp* ops = thread_ops();
      for (uint32_t i = 0; i < t.n_ops; ++i)
        if (!(ops[i].bits & kOpCaptured)) mark(ops[i].rec_id, FR_REC_F_NEVER_LAUNCHED, 0);
      if (t.overflow) mark_overflow(t.group_id, FR_REC_F_NEVER_LAUNCHED);
    }
    group_reset(t);
  }
  group_rec_exit(r, res, end_ns);
  return res;
}

FR_API ncclResult_t ncclGroupEnd() {
  FR_REAL_OR_FAIL(ncclGroupEnd);
  return run_group_end(FR_OP_GROUP_END, [&] { return real(); });
}

FR_API ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t* simInfo) {
  FR_REAL_OR_FAIL(ncclGroupSimulateEnd);
  return run_group_end(FR_OP_GROUP_SIMULATE_END, [&] { return real(simInfo); });
}

// ---- communicator creation ---------------------------------------------------------------------

FR_API ncclResult_t ncclGetUniqueId(ncclUniqueId* uniqueId) {
  FR_REAL_OR_FAIL(ncclGetUniqueId);
  return run_api(
      FR_OP_GET_UNIQUE_ID, nullptr, [&] { return real(uniqueId); }, no_before,
      [&](fr_record& r, const CommRef&, ncclResult_t res) {
        // The id of the communicator an init with this unique id will make.
        if (res == ncclSuccess && uniqueId != nullptr) r.comm_id = unique_id_hash(uniqueId, 1);
      });
}

FR_API ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) {
  FR_REAL_OR_FAIL(ncclCommInitRank);
  NewComm n = {};
  n.id = unique_id_hash(&commId, 1);
  n.nranks = nranks;
  n.rank = rank;
  n.origin = FR_ORIGIN_INIT_RANK;
  n.id_flags = FR_COMM_F_ID_FROM_UNIQUE_ID;
  auto prepare = [&](const CommRef&) {
    n.nonblocking = config_nonblocking(nullptr, false);
    return n;
  };
  return run_create(
      FR_OP_COMM_INIT_RANK, nullptr, prepare, comm,
      [&] { return real(comm, nranks, commId, rank); });
}

FR_API ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId,
                                           int rank, ncclConfig_t* config) {
  FR_REAL_OR_FAIL(ncclCommInitRankConfig);
  NewComm n = {};
  n.id = unique_id_hash(&commId, 1);
  n.nranks = nranks;
  n.rank = rank;
  n.origin = FR_ORIGIN_INIT_RANK_CONFIG;
  n.id_flags = FR_COMM_F_ID_FROM_UNIQUE_ID;
  n.config = config;
  auto prepare = [&](const CommRef&) {
    n.nonblocking = config_nonblocking(config, false);
    return n;
  };
  return run_create(
      FR_OP_COMM_INIT_RANK_CONFIG, nullptr, prepare, comm,
      [&] { return real(comm, nranks, commId, rank, config); });
}

FR_API ncclResult_t ncclCommInitRankScalable(ncclComm_t* newcomm, int nranks, int myrank, int nId,
                                             ncclUniqueId* commIds, ncclConfig_t* config) {
  FR_REAL_OR_FAIL(ncclCommInitRankScalable);
  NewComm n = {};
  n.id = (commIds != nullptr && nId > 0 && nId <= 4096) ? unique_id_hash(commIds, nId) : 1;
  n.nranks = nranks;
  n.rank = myrank;
  n.origin = FR_ORIGIN_INIT_RANK_SCALABLE;
  n.id_flags = FR_COMM_F_ID_FROM_UNIQUE_ID;
  n.config = config;
  auto prepare = [&](const CommRef&) {
    n.nonblocking = config_nonblocking(config, false);
    return n;
  };
  return run_create(
      FR_OP_COMM_INIT_RANK_SCALABLE, nullptr, prepare, newcomm,
      [&] { return real(newcomm, nranks, myrank, nId, commIds, config); });
}

// ncclCommInitAll makes ndev communicators of one clique inside this process; no unique id is
// visible, so the id is a hash of a per-process call counter and the device list.
FR_API ncclResult_t ncclCommInitAll(ncclComm_t* comm, int ndev, const int* devlist) {
  FR_REAL_OR_FAIL(ncclCommInitAll);
  Scope s;
  if (!s.active) return real(comm, ndev, devlist);
  uint64_t call = __atomic_add_fetch(&g_ctx.init_all_calls, 1, __ATOMIC_RELAXED);
  uint64_t h = hash_u64(hash_bytes(kHashSeed, "InitAll", 7), call);
  h = hash_u64(h, (uint64_t)(int64_t)ndev);
  if (devlist != nullptr && ndev > 0 && ndev <= 65536)
    h = hash_bytes(h, devlist, (size_t)ndev * sizeof(int));
  NewComm n = {};
  n.id = hash_finish(h);
  n.nranks = ndev;
  n.origin = FR_ORIGIN_INIT_ALL;
  n.nonblocking = config_nonblocking(nullptr, false);
  fr_record r = new_record(FR_OP_COMM_INIT_ALL, CommRef{-1, n.id, nullptr, false});
  r.count = ndev > 0 ? (uint64_t)ndev : 0;
  record_begin(r);
  ncclResult_t res = real(comm, ndev, devlist);
  finish(r, res);
  if (res == ncclSuccess && comm != nullptr) {
    for (int i = 0; i < ndev; ++i) {
      n.rank = i;
      register_comm(n, comm[i], res, r.call_ns);
    }
  } else if (res != ncclSuccess) {
    n.rank = -1;
    register_comm(n, nullptr, res, r.call_ns);
  }
  record_update(r);
  return res;
}

FR_API ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                                  ncclConfig_t* config) {
  FR_REAL_OR_FAIL(ncclCommSplit);
  auto prepare = [&](const CommRef& p) {
    NewComm n =
        parent_derived(p, FR_ORIGIN_SPLIT, p.slot >= 0 ? &g_ctx.priv[p.slot].split_calls : nullptr);
    n.color = color;
    n.key = key;
    n.nonblocking = config_nonblocking(config, p.nonblocking);
    n.config = config;
    n.id = color == NCCL_SPLIT_NOCOLOR
               ? 0
               : hash_finish(hash_u64(hash_u64(hash_u64(kHashSeed, p.id), n.derive_index),
                                      (uint64_t)(int64_t)color));
    return n;
  };
  return run_create(FR_OP_COMM_SPLIT, comm, prepare, newcomm,
                    [&] { return real(comm, color, key, newcomm, config); });
}

// The record carries what the analysis needs to tell a member that never came from one that was
// excluded: count = the shrunk size (when the parent's is known), sendbuff and recvbuff = the
// excluded parent ranks below 128 as a bitmap (bit r of sendbuff, bit r-64 of recvbuff).
FR_API ncclResult_t ncclCommShrink(ncclComm_t comm, int* excludeRanksList, int excludeRanksCount,
                                   ncclComm_t* newcomm, ncclConfig_t* config, int shrinkFlags) {
  FR_REAL_OR_FAIL(ncclCommShrink);
  auto prepare = [&](const CommRef& p) {
    NewComm n = parent_derived(p, FR_ORIGIN_SHRINK,
                               p.slot >= 0 ? &g_ctx.priv[p.slot].shrink_calls : nullptr);
    // The exclusion list, order-independent: every member passes the same set.
    uint64_t excl = 0;
    int32_t parent_size = p.entry != nullptr ? __atomic_load_n(&p.entry->size, __ATOMIC_RELAXED) : -1;
    int32_t distinct = 0;
    bool countable = excludeRanksCount <= 4096;  // a longer list is not worth counting here
    if (excludeRanksList != nullptr && excludeRanksCount > 0)
      for (int i = 0; i < excludeRanksCount; ++i) {
        int x = excludeRanksList[i];
        excl += hash_finish(hash_u64(kHashSeed, (uint64_t)(int64_t)x));
        if (x >= 0 && x < 128) n.excluded[x / 64] |= 1ull << (x % 64);
        bool repeated = false;
        for (int j = 0; countable && j < i && !repeated; ++j) repeated = excludeRanksList[j] == x;
        distinct += repeated ? 0 : 1;
      }
    if (countable && parent_size > distinct) n.nranks = parent_size - distinct;
    n.color = (int64_t)excl;
    n.nonblocking = config_nonblocking(config, p.nonblocking);
    n.config = config;
    n.id = hash_finish(hash_u64(hash_u64(hash_u64(kHashSeed, p.id), n.derive_index), excl));
    return n;
  };
  return run_create(FR_OP_COMM_SHRINK, comm, prepare, newcomm, [&] {
    return real(comm, excludeRanksList, excludeRanksCount, newcomm, config, shrinkFlags);
  });
}

// Grow: members of `comm` derive the id from (parent, grow counter, new size); joining ranks
// (comm == NULL) only have the unique id, so theirs is its hash (see docs/agent.md).
FR_API ncclResult_t ncclCommGrow(ncclComm_t comm, int nRanks, const ncclUniqueId* uniqueId,
                                 int rank, ncclComm_t* newcomm, ncclConfig_t* config) {
  FR_REAL_OR_FAIL(ncclCommGrow);
  auto prepare = [&](const CommRef& p) {
    NewComm n = {};
    if (comm != nullptr) {
      n = parent_derived(p, FR_ORIGIN_GROW, p.slot >= 0 ? &g_ctx.priv[p.slot].grow_calls : nullptr);
      n.id = hash_finish(
          hash_u64(hash_u64(hash_u64(kHashSeed, p.id), n.derive_index), (uint64_t)(int64_t)nRanks));
    } else {
      n.origin = FR_ORIGIN_GROW;
      n.id = uniqueId != nullptr ? unique_id_hash(uniqueId, 1) : 1;
      n.id_flags = FR_COMM_F_ID_FROM_UNIQUE_ID;
      n.rank = rank;
    }
    n.nranks = nRanks;
    n.nonblocking = config_nonblocking(config, p.nonblocking);
    n.config = config;
    return n;
  };
  return run_create(FR_OP_COMM_GROW, comm, prepare, newcomm,
                    [&] { return real(comm, nRanks, uniqueId, rank, newcomm, config); });
}

FR_API ncclResult_t ncclCommGetUniqueId(ncclComm_t comm, ncclUniqueId* uniqueId) {
  FR_REAL_OR_FAIL(ncclCommGetUniqueId);
  return run_api(
      FR_OP_COMM_GET_UNIQUE_ID, comm, [&] { return real(comm, uniqueId); }, no_before,
      [&](fr_record& r, const CommRef&, ncclResult_t res) {
        if (res == ncclSuccess && uniqueId != nullptr) r.aux = unique_id_hash(uniqueId, 1);
      });
}

// ---- communicator lifecycle --------------------------------------------------------------------

FR_API ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  FR_REAL_OR_FAIL(ncclCommFinalize);
  return run_lifecycle(FR_OP_COMM_FINALIZE, comm, FR_COMM_FINALIZED, [&] { return real(comm); });
}

FR_API ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  FR_REAL_OR_FAIL(ncclCommDestroy);
  return run_lifecycle(FR_OP_COMM_DESTROY, comm, FR_COMM_DESTROYED, [&] { return real(comm); });
}

FR_API ncclResult_t ncclCommAbort(ncclComm_t comm) {
  FR_REAL_OR_FAIL(ncclCommAbort);
  return run_lifecycle(FR_OP_COMM_ABORT, comm, FR_COMM_ABORTED, [&] { return real(comm); });
}

FR_API ncclResult_t ncclCommRevoke(ncclComm_t comm, int revokeFlags) {
  FR_REAL_OR_FAIL(ncclCommRevoke);
  return run_lifecycle(FR_OP_COMM_REVOKE, comm, FR_COMM_REVOKED,
                       [&] { return real(comm, revokeFlags); });
}

FR_API ncclResult_t ncclCommSuspend(ncclComm_t comm, int flags) {
  FR_REAL_OR_FAIL(ncclCommSuspend);
  return run_lifecycle(FR_OP_COMM_SUSPEND, comm, FR_COMM_SUSPENDED,
                       [&] { return real(comm, flags); });
}

FR_API ncclResult_t ncclCommResume(ncclComm_t comm) {
  FR_REAL_OR_FAIL(ncclCommResume);
  return run_lifecycle(FR_OP_COMM_RESUME, comm, FR_COMM_LIVE, [&] { return real(comm); });
}

// Not recorded unless it reports an error. Its success is also the moment a nonblocking
// communicator's pending work is known to be launched (the agent never asks on its own).
FR_API ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
  FR_REAL_OR_FAIL(ncclCommGetAsyncError);
  Scope s;
  if (!s.active) return real(comm, asyncError);
  uint64_t call_ns = now_ns();
  ncclResult_t res = real(comm, asyncError);
  if (res != ncclSuccess || asyncError == nullptr) return res;
  CommRef c = comm_ref(comm);
  if (c.slot < 0) return res;
  ncclResult_t err = *asyncError;
  if (err == ncclSuccess) {
    if (!__atomic_load_n(&g_ctx.priv[c.slot].ready, __ATOMIC_ACQUIRE)) {
      comm_learn_shape(c.slot, comm);
      uint32_t expected = FR_COMM_INITIALIZING;
      __atomic_compare_exchange_n(&c.entry->state, &expected, (uint32_t)FR_COMM_LIVE, false,
                                  __ATOMIC_RELEASE, __ATOMIC_RELAXED);
    }
    release_deferred(c.slot);
  } else if (err != ncclInProgress) {
    int32_t prev = __atomic_exchange_n(&c.entry->async_error, (int32_t)err, __ATOMIC_ACQ_REL);
    drop_deferred(c.slot);
    if (prev != (int32_t)err) {
      // Recorded once per distinct error; `result` holds the asynchronous error.
      fr_record r = new_record(FR_OP_COMM_GET_ASYNC_ERROR, c);
      r.call_ns = call_ns;
      r.duration_ns = elapsed_since(call_ns);
      r.result = (int32_t)err;
      r.flags &= ~FR_REC_F_IN_CALL;
      record_begin(r);
    }
  }
  return res;
}

// ---- registration, windows, memory, reduction ops
// ------------------------------------------------

FR_API ncclResult_t ncclCommRegister(const ncclComm_t comm, void* buff, size_t size,
                                     void** handle) {
  FR_REAL_OR_FAIL(ncclCommRegister);
  return run_api(
      FR_OP_COMM_REGISTER, comm, [&] { return real(comm, buff, size, handle); },
      [&](fr_record& r, const CommRef&) {
        r.sendbuff = (uint64_t)(uintptr_t)buff;
        r.count = size;
      },
      [&](fr_record& r, const CommRef&, ncclResult_t res) {
        if (res == ncclSuccess && handle != nullptr) r.recvbuff = (uint64_t)(uintptr_t)*handle;
      });
}

FR_API ncclResult_t ncclCommDeregister(const ncclComm_t comm, void* handle) {
  FR_REAL_OR_FAIL(ncclCommDeregister);
  return run_api(
      FR_OP_COMM_DEREGISTER, comm, [&] { return real(comm, handle); },
      [&](fr_record& r, const CommRef&) { r.recvbuff = (uint64_t)(uintptr_t)handle; }, no_after);
}

FR_API ncclResult_t ncclCommWindowRegister(ncclComm_t comm, void* buff, size_t size,
                                           ncclWindow_t* win, int winFlags) {
  FR_REAL_OR_FAIL(ncclCommWindowRegister);
  return run_api(
      FR_OP_COMM_WINDOW_REGISTER, comm, [&] { return real(comm, buff, size, win, winFlags); },
      [&](fr_record& r, const CommRef&) {
        r.sendbuff = (uint64_t)(uintptr_t)buff;
        r.count = size;
      },
      [&](fr_record& r, const CommRef&, ncclResult_t res) {
        if (res == ncclSuccess && win != nullptr) r.recvbuff = (uint64_t)(uintptr_t)*win;
      });
}

FR_API ncclResult_t ncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win) {
  FR_REAL_OR_FAIL(ncclCommWindowDeregister);
  return run_api(
      FR_OP_COMM_WINDOW_DEREGISTER, comm, [&] { return real(comm, win); },
      [&](fr_record& r, const CommRef&) { r.recvbuff = (uint64_t)(uintptr_t)win; }, no_after);
}

FR_API ncclResult_t ncclMemAlloc(void** ptr, size_t size) {
  FR_REAL_OR_FAIL(ncclMemAlloc);
  return run_api(
      FR_OP_MEM_ALLOC, nullptr, [&] { return real(ptr, size); },
      [&](fr_record& r, const CommRef&) { r.count = size; },
      [&](fr_record& r, const CommRef&, ncclResult_t res) {
        if (res == ncclSuccess && ptr != nullptr) r.recvbuff = (uint64_t)(uintptr_t)*ptr;
      });
}

FR_API ncclResult_t ncclMemFree(void* ptr) {
  FR_REAL_OR_FAIL(ncclMemFree);
  return run_api(
      FR_OP_MEM_FREE, nullptr, [&] { return real(ptr); },
      [&](fr_record& r, const CommRef&) { r.recvbuff = (uint64_t)(uintptr_t)ptr; }, no_after);
}

FR_API ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar, ncclDataType_t datatype,
                                             ncclScalarResidence_t residence, ncclComm_t comm) {
  FR_REAL_OR_FAIL(ncclRedOpCreatePreMulSum);
  return run_api(
      FR_OP_REDOP_CREATE_PREMULSUM, comm,
      [&] { return real(op, scalar, datatype, residence, comm); },
      [&](fr_record& r, const CommRef&) {
        r.sendbuff = (uint64_t)(uintptr_t)scalar;
        r.dtype = (uint8_t)datatype;
        r.count = (uint64_t)residence;
      },
      [&](fr_record& r, const CommRef&, ncclResult_t res) {
        if (res == ncclSuccess && op != nullptr) r.redop = (int32_t)*op;
      });
}

FR_API ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm) {
  FR_REAL_OR_FAIL(ncclRedOpDestroy);
  return run_api(
      FR_OP_REDOP_DESTROY, comm, [&] { return real(op, comm); },
      [&](fr_record& r, const CommRef&) { r.redop = (int32_t)op; }, no_after);
}

// ---- device communicators (NCCL's device API): communicator-level calls ------------------------

FR_API ncclResult_t ncclDevCommCreate(ncclComm_t comm, const struct ncclDevCommRequirements* reqs,
                                      struct ncclDevComm* outDevComm) {
  FR_REAL_OR_FAIL(ncclDevCommCreate);
  return run_api(
      FR_OP_DEV_COMM_CREATE, comm, [&] { return real(comm, reqs, outDevComm); },
      [&](fr_record& r, const CommRef&) {
        r.sendbuff = (uint64_t)(uintptr_t)reqs;
        r.recvbuff = (uint64_t)(uintptr_t)outDevComm;
      },
      no_after);
}

FR_API ncclResult_t ncclDevCommDestroy(ncclComm_t comm, const struct ncclDevComm* devComm) {
  FR_REAL_OR_FAIL(ncclDevCommDestroy);
  return run_api(
      FR_OP_DEV_COMM_DESTROY, comm, [&] { return real(comm, devComm); },
      [&](fr_record& r, const CommRef&) { r.recvbuff = (uint64_t)(uintptr_t)devComm; }, no_after);
}

// ---- queries: forwarded, not recorded
// ------------------------------------------------------------

FR_API ncclResult_t ncclGetVersion(int* version) {
  FR_REAL_OR_FAIL(ncclGetVersion);
  return real(version);
}

FR_API ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  FR_REAL_OR_FAIL(ncclCommCount);
  return real(comm, count);
}

FR_API ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device) {
  FR_REAL_OR_FAIL(ncclCommCuDevice);
  return real(comm, device);
}

FR_API ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  FR_REAL_OR_FAIL(ncclCommUserRank);
  return real(comm, rank);
}

FR_API ncclResult_t ncclCommQueryProperties(ncclComm_t comm, struct ncclCommProperties* props) {
  FR_REAL_OR_FAIL(ncclCommQueryProperties);
  return real(comm, props);
}

FR_API ncclResult_t ncclCommMemStats(ncclComm_t comm, ncclCommMemStat_t stat, uint64_t* value) {
  FR_REAL_OR_FAIL(ncclCommMemStats);
  return real(comm, stat, value);
}

FR_API ncclResult_t ncclWinGetUserPtr(ncclComm_t comm, ncclWindow_t win, void** outUserPtr) {
  FR_REAL_OR_FAIL(ncclWinGetUserPtr);
  return real(comm, win, outUserPtr);
}

FR_API const char* ncclGetErrorString(ncclResult_t result) {
  auto real = FR_REAL(ncclGetErrorString);
  return real != nullptr ? real(result) : kNoNccl;
}

FR_API const char* ncclGetLastError(ncclComm_t comm) {
  auto real = FR_REAL(ncclGetLastError);
  return real != nullptr ? real(comm) : kNoNccl;
}

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
FR_API void ncclResetDebugInit() {
  auto real = FR_REAL(ncclResetDebugInit);
  if (real != nullptr) real();
}
#pragma GCC diagnostic pop
