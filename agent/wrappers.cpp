// The out-of-line parts of the wrappers' call path (wrappers.h): the records of the other API calls
// (run_api), updates to a record already written (a group's launch), the launches of nonblocking
// communicators held until the application sees them succeed, an op issued on a capturing stream
// (its place in the CUDA graph), and the answer of a wrapper whose real function is missing. They
// are called, not inlined, so the inlined path of every op wrapper stays short.
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

namespace {

void priv_lock(CommPriv& p) {
  while (__atomic_exchange_n(&p.lock, 1, __ATOMIC_ACQUIRE) != 0) sched_yield();
}
void priv_unlock(CommPriv& p) { __atomic_store_n(&p.lock, 0, __ATOMIC_RELEASE); }

}  // namespace

void defer(int32_t slot, uint64_t rec_id, uint64_t stream, uint64_t op_index) {
  if (slot < 0) return;
  CommPriv& p = g_ctx.priv[slot];
  priv_lock(p);
  bool kept = p.n_deferred < kMaxDeferred;
  if (kept) p.deferred[p.n_deferred++] = Deferred{rec_id, stream, op_index};
  priv_unlock(p);
  if (!kept) mark(rec_id, FR_REC_F_GPU_UNTRACKED, 0);
}

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

}  // namespace fr::agent
