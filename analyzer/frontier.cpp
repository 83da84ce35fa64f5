// Where each member of a communicator stands: its frontier (how far it enqueued, and how far its
// GPU started and completed, per sequence-number family), its record of a given sequence number,
// and the members that have no dump at all. Every matching pass starts from these.
#include <algorithm>

#include "passes.h"

namespace fr::analyzer {

Frontier frontier(const Proc& p, const ProcComm& pc, Family family) {
  Frontier f;
  for_each_op(p, pc, family, [&](const Op& o) {
    if (o.seq >= f.enq) f.enq = o.seq, f.last_enq = &o;
    if (o.gpu_state >= FR_GPU_STARTED && o.seq >= f.started) f.started = o.seq, f.last_started = &o;
    if (o.gpu_state == FR_GPU_COMPLETED && o.seq >= f.completed)
      f.completed = o.seq, f.last_completed = &o;
  });
  const uint64_t counter = family == Family::kP2p ? pc.p2p_seq : pc.coll_seq;
  f.tracked = p.gpu_tracked;
  if (f.last_enq && (f.last_enq->flags & FR_REC_F_GPU_UNTRACKED)) f.tracked = false;
  if (f.last_enq && f.last_enq->gpu_state == FR_GPU_NONE && !(f.last_enq->flags & FR_REC_F_IN_CALL))
    f.tracked = false;
  if (counter > f.enq) {
    // The newest op on this communicator fell out of the ring (or was torn): the counters still
    // say how far it went, and the GPU counters whether everything handed over has finished.
    f.enq = counter;
    f.last_enq = nullptr;
    if (pc.has_entry && pc.op_index > 0 && pc.gpu_completed >= pc.op_index) {
      f.completed = f.started = f.enq;
    } else {
      // Something is still running, but which seq the GPU counters stand at cannot be told
      // without the records: treat this member's GPU state as unknown.
      f.tracked = false;
    }
  }
  if (f.started < f.completed) f.started = f.completed;
  return f;
}

const Op* find_seq(const Proc& p, const ProcComm& pc, uint64_t seq, Family family) {
  // Records are in id order, so seqs ascend within a family: the ops of one communicator are few
  // enough in practice to scan from the end, stopping below `seq`.
  for (uint32_t i = pc.ops_end; i-- > pc.ops_begin;) {
    const Op& o = p.ops[i];
    if (!in_family(o, family)) continue;
    if (o.seq == seq) return &o;
    if (o.seq < seq) break;
  }
  return nullptr;
}

// When every member found sits at the same offset (global = rank in comm + d, as in a world
// communicator or a block of consecutive ranks) and the job lacks exactly those global ranks,
// the missing members are those ranks.
std::vector<Missing> missing_members(const Model& m, const Comm& c,
                                     const std::set<int>& job_missing) {
  std::vector<Missing> out;
  // A size far beyond the job (a corrupt or hostile entry) is not worth listing rank by rank.
  const int plausible =
      std::max({1024, 2 * static_cast<int>(m.procs.size()), std::min(m.expected_ranks, kMaxRanks)});
  if (c.size <= 0 || c.size > plausible) return out;
  std::vector<char> present(c.size, 0);
  bool constant = !c.members.empty();
  const int d = c.members.empty() ? 0 : m.procs[c.members[0].proc].rank - c.members[0].rank_in_comm;
  for (const auto& mem : c.members) {
    if (mem.rank_in_comm >= 0 && mem.rank_in_comm < c.size) present[mem.rank_in_comm] = 1;
    if (m.procs[mem.proc].rank - mem.rank_in_comm != d) constant = false;
  }
  for (int r = 0; r < c.size; ++r)
    if (!present[r]) out.push_back({r, constant && job_missing.count(r + d) ? r + d : -1});
  return out;
}

nlohmann::json missing_json(const std::vector<Missing>& missing) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& x : missing)
    out.push_back(
        {{"rank_in_comm", x.rank_in_comm},
         {"global_rank", x.global >= 0 ? nlohmann::json(x.global) : nlohmann::json(nullptr)}});
  return out;
}

}  // namespace fr::analyzer
