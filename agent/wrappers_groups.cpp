// The wrappers of NCCL's groups: GroupStart, GroupEnd and GroupSimulateEnd, each with a record
// of its own. Ops issued inside a group are remembered per thread (run_op, wrappers.h); the
// outermost GroupEnd launches them all, so its wrapper places their GPU markers (one "started"
// and one "completed" marker per communicator and stream), marks each op launched, failed or
// deferred (nonblocking), and finishes the graph positions of captured ones.
#include "wrappers.h"

using namespace fr::agent;

namespace {

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
                result_word(FR_RESULT_PENDING, r.flags), 0);
    record_release(h);
  }
}

// A record written once, whole, after its call returned: its call time, no duration (0).
void group_rec_whole(fr_op op, uint64_t group_id, uint64_t call_ns, ncclResult_t res) {
  const uint32_t flags = group_id != 0 ? FR_REC_F_IN_GROUP : 0u;
  HeldRecord h;
  const uint64_t id = record_take_new(call_ns, &h);
  if (h.slot == nullptr) return;
  store_entry(h.slot, id, 0, 0, 0, 0, 0, group_id, call_ns, 0, 0,
              RecTidOp{current_tid(), (uint16_t)op, 0, FR_GPU_NONE}, RecRedopPeer{-1, -1},
              result_word(res, flags), 0);
  record_release(h);
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
  uint64_t end = __atomic_load_n(&g_log.hdr->record_counter, __ATOMIC_ACQUIRE);
  uint64_t begin = end > g_log.ring_cap ? end - g_log.ring_cap : 0;
  for (uint64_t id = begin; id < end; ++id) record_modify(id, apply_group_flags, arg);
}

// Group ids a thread takes at once (ThreadState::group_ids_next).
constexpr uint64_t kGroupIdBlock = 4096;

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
    op.op_index = __atomic_add_fetch(&g_log.comms[op.comm_slot].op_index, 1, __ATOMIC_RELAXED);
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

}  // namespace

// ---- groups ------------------------------------------------------------------------------------

FR_API ncclResult_t ncclGroupStart() {
  FR_REAL_OR_FAIL(ncclGroupStart);
  Scope s;
  if (!s.active) return real();
  ThreadState& t = s.t;
  if (t.group_depth == 0) {
    group_reset(t);
    if (__builtin_expect(t.group_ids_next == t.group_ids_end, 0)) {
      t.group_ids_next =
          __atomic_fetch_add(&g_agent.next_group_id, kGroupIdBlock, __ATOMIC_RELAXED) + 1;
      t.group_ids_end = t.group_ids_next + kGroupIdBlock;
    }
    t.group_id = t.group_ids_next++;
  }
  // NCCL's GroupStart only opens a group level on this thread, so its record is written once,
  // whole, when it returns (one record lock instead of two, one clock read): it is never seen in
  // its call, and its duration is not measured.
  const uint64_t call_ns = now_ns();
  ncclResult_t res = real();
  if (res == ncclSuccess) ++t.group_depth;
  group_rec_whole(FR_OP_GROUP_START, t.group_id, call_ns, res);
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
