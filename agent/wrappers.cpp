// The out-of-line parts of the wrappers' call path (wrappers.h): the records of the other API calls
// (run_api), updates to a record already written (a group's launch), the launches of nonblocking
// communicators held until the application sees them succeed, an op issued on a capturing stream
// (its place in the CUDA graph), and the answer of a wrapper whose real function is missing. They
// are called, not inlined, so the inlined path of every op wrapper stays short.
#include "spin_lock.h"
#include "wrappers.h"

#include <sched.h>
#include <string.h>

namespace fr::agent {

// ---- records -----------------------------------------------------------------------------------

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

void finish(fr_record& r, ncclResult_t res) {
  r.duration_ns = elapsed_since(r.call_ns);
  r.result = (int32_t)res;
  r.flags &= ~FR_REC_F_IN_CALL;
}

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

void defer(int32_t slot, uint64_t rec_id, uint64_t stream, uint64_t op_index) {
  if (slot < 0) return;
  CommPriv& p = g_comms.priv[slot];
  spin_lock(&p.lock);
  bool kept = p.n_deferred < kMaxDeferred;
  if (kept) p.deferred[p.n_deferred++] = Deferred{rec_id, stream, op_index};
  spin_unlock(&p.lock);
  if (!kept) mark(rec_id, FR_REC_F_GPU_UNTRACKED, 0);
}

void release_deferred(int32_t slot) {
  CommPriv& p = g_comms.priv[slot];
  Deferred batch[kMaxDeferred];
  spin_lock(&p.lock);
  uint32_t n = p.n_deferred;
  memcpy(batch, p.deferred, n * sizeof(Deferred));
  p.n_deferred = 0;
  spin_unlock(&p.lock);
  for (uint32_t i = 0; i < n; ++i) {
    uint32_t flags = FR_REC_F_LAUNCHED;
    if (batch[i].op_index == 0 || !gpu_after(slot, batch[i].stream, batch[i].op_index))
      flags |= FR_REC_F_GPU_UNTRACKED;
    mark(batch[i].rec_id, flags, 0);
  }
}

void drop_deferred(int32_t slot) {
  CommPriv& p = g_comms.priv[slot];
  spin_lock(&p.lock);
  p.n_deferred = 0;
  spin_unlock(&p.lock);
}

// ---- the general op path (the fast lane is inline, wrappers.h) ----------------------------------

void op_enter(const OpArgs& a, OpState& o) {
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
  if (!__atomic_load_n(&g_gpu.cuda_absent, __ATOMIC_RELAXED)) {
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
    seq =
        __atomic_add_fetch(a.p2p ? &o.c.entry->p2p_seq : &o.c.entry->coll_seq, 1, __ATOMIC_RELAXED);
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
                (uint64_t)(uintptr_t)a.recv, o.tid_op, RecRedopPeer{a.redop, a.peer},
                result_word(FR_RESULT_PENDING, o.flags), aux);
    record_release(h);
  }
  if (__builtin_expect(captured, 0)) {
    o.cap = fr_record{};
    store_entry(&o.cap, o.id, o.c.id, 0, o.op_index, (uint64_t)a.count, o.stream,
                in_group ? t.group_id : 0, o.call_ns, (uint64_t)(uintptr_t)a.send,
                (uint64_t)(uintptr_t)a.recv, o.tid_op, RecRedopPeer{a.redop, a.peer},
                result_word(FR_RESULT_PENDING, o.flags), aux);
  }
  if (in_group) {
    if (t.n_ops < kMaxGroupOps) {
      o.group_pos = t.n_ops++;
      thread_ops()[o.group_pos] = GroupOp{
          o.id,     o.stream, 0, o.c.slot, captured ? kOpCaptured : no_markers ? kOpNoMarkers : 0u,
          o.capture};
    } else {
      t.overflow = 1;
    }
  }
}

void op_exit(OpState& o, ncclResult_t res) {
  // In a group the call only queues the op: its duration is not measured (as on the fast lane).
  const bool queued = (o.flags & (FR_REC_F_IN_GROUP | FR_REC_F_CAPTURED)) == FR_REC_F_IN_GROUP;
  uint64_t duration = queued ? 0 : elapsed_since(o.call_ns);
  uint32_t flags = o.flags & ~FR_REC_F_IN_CALL;
  bool launched = false;
  if (__builtin_expect(res == ncclSuccess && !(o.flags & (FR_REC_F_IN_GROUP | FR_REC_F_CAPTURED)),
                       1)) {
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

// ---- the GPU side of an op's entry (the fast lane, wrappers.h) ---------------------------------

GpuEnter op_gpu_enter(int32_t slot, uint64_t stream, bool in_group) {
  GpuEnter g = {gpu_stream_capture(stream), 0};
  if (g.capture == kNotCapturing && !in_group && is_tracked(gpu_prepare())) {
    uint64_t index = __atomic_add_fetch(&g_log.comms[slot].op_index, 1, __ATOMIC_RELAXED);
    if (gpu_before(slot, stream, index)) g.op_index = index;
  }
  return g;
}

void op_fast_exit_rare(FastOp f, ncclResult_t res, uint64_t duration, uint32_t op_flags) {
  ThreadState& t = thread_state();
  const bool in_group = (f.rare & kFastInGroup) != 0;
  const bool tracked = (f.rare & kFastTracked) != 0;
  uint32_t flags = t.cache_flags | op_flags | (in_group ? FR_REC_F_IN_GROUP : 0u);
  const bool launched = res == ncclSuccess && !in_group;
  if (launched) {
    flags |= FR_REC_F_LAUNCHED;
    if (!tracked || !gpu_after(t.op_comm_slot, t.op_stream, t.op_index))
      flags |= FR_REC_F_GPU_UNTRACKED;
  } else if (res != ncclSuccess && res != ncclInProgress) {
    flags |= FR_REC_F_NEVER_LAUNCHED;  // and the outermost GroupEnd must not launch it either
    if (in_group && t.op_group_pos < kMaxGroupOps) thread_ops()[t.op_group_pos].bits |= kOpFailed;
  }
  HeldRecord h;
  if (record_retake(f.slot, f.lock, f.id, &h)) {
    set_record_word(h.slot, offsetof(fr_record, duration_ns), duration);
    if (launched) {
      RecTidOp w = record_word<RecTidOp>(h.slot, offsetof(fr_record, tid));
      w.gpu_state = FR_GPU_ENQUEUED;
      set_record_word(h.slot, offsetof(fr_record, tid), w);
    }
#ifdef FR_TEST_PARK_WRITER
    sched_yield();  // as in op_exit
#endif
    set_record_word(h.slot, offsetof(fr_record, result), RecResultFlags{(int32_t)res, flags});
    record_release(h);
  }
  // Nonblocking: launched once the application sees it succeed (after the exit's own store, as
  // op_exit does). The stream matters only with an op index.
  if (res == ncclInProgress && !in_group)
    defer(t.cache_slot, f.id, tracked ? t.op_stream : 0, tracked ? t.op_index : 0);
}

// ---- ops issued on a capturing stream --------------------------------------------------------

void capture_enter(const OpArgs& a, OpState& o, uint64_t* aux, uint32_t* flags) {
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

void capture_exit(OpState& o, ncclResult_t res, uint64_t duration, uint32_t flags) {
  o.cap.duration_ns = duration;
  o.cap.result = (int32_t)res;
  o.cap.flags = flags;
  bool ok = res == ncclSuccess || res == ncclInProgress;
  graph_capture_done(o.capture, o.c.slot, o.stream, o.cap, ok, !(o.flags & FR_REC_F_IN_GROUP));
}

// ---- missing functions -------------------------------------------------------------------------

ncclResult_t missing_real(const char* fn) {
  if (FR_REAL(ncclGetVersion) == nullptr) {
    debug_log("%s: no NCCL library is loaded", fn);
    return ncclSystemError;
  }
  debug_log("%s: the loaded NCCL does not have it", fn);
  return ncclInvalidUsage;
}

// ---- one wrapper per function of the list --------------------------------------------------

namespace {
// Every function of the NCCL API list (fr/nccl_api.def) has its wrapper: these references make a
// missing one an undefined symbol, which the link refuses (-z defs). (Deprecated ones included.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
__attribute__((used)) const void* const kWrapped[] = {
#define FR_NCCL_FN(base, ...) (const void*)&::nccl##base,
#include "fr/nccl_api.def"
};
#pragma GCC diagnostic pop
}  // namespace

}  // namespace fr::agent
