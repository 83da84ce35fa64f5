// What PyTorch's dumps leave unsaid, inferred across every dump of the set before the analysis
// (model.h infer_torch). Each PyTorch rank's dump is read alone (analyzer/torch); some facts only
// show when they are laid side by side:
//   - an empty dump (a rank that hung before its first collective: no entries, empty pg_status),
//     or a whole one with ops of other groups only, names no default group, yet the rank is a
//     member of it (it is the world): it is given that group, having entered none of its
//     collectives;
//   - a dump older than what the others did with it (it stops at collective #k while other
//     members completed collectives after #k, which none can complete without it) is stale:
//     the rank dumped early and died or stopped dumping since (Proc::stale);
//   - a collective that one member's dump shows finished (retired) while a member that is not
//     stale never entered it cannot have completed: it raised or timed out (kOpRaised);
//   - a group whose members no dump lists (PyTorch 2.15 on gloo writes one nameless pg_config
//     entry) where some members wait and none finished any of its collectives (one that did
//     needed every member, and a rank that recorded none of them took part in none): when
//     exactly one other rank has nothing pending at all, that rank is the member that never
//     came (the others are busy elsewhere), and the group's
//     members are the ranks seen in it plus that one, numbered in global rank order as
//     new_group numbers them.
// And one matching pass over what the dumps count but do not record: analyze_unrecorded_p2p.
// Only PyTorch processes are looked at; our own logs say all of this themselves.
#include <algorithm>
#include <array>
#include <map>

#include "passes.h"

namespace fr::analyzer {
namespace {

bool is_torch(const Proc& p) { return p.source_kind == "torch"; }

// Collectives a member must have taken part in before its dump is called stale: one could be a
// collective that raised on the others while this rank never came.
constexpr uint64_t kStaleBeyond = 2;

bool torch_comm(const Model& m, const Comm& c) {
  if (c.members.empty()) return false;
  for (const auto& mem : c.members)
    if (!is_torch(m.procs[mem.proc])) return false;
  return true;
}

// Gives `p` a view of communicator `ci` with nothing on it (rank `rank` in it), as member.
void add_member(Model* m, int pi, int ci, int rank) {
  Proc& p = m->procs[pi];
  Comm& c = m->comms[ci];
  ProcComm pc;
  const Proc& other = m->procs[c.members.front().proc];
  const ProcComm& like = other.comms[c.members.front().pc];
  pc.id = c.id;
  pc.parent = like.parent;
  pc.name = like.name;
  pc.size = c.size;
  pc.rank = rank;
  pc.origin = like.origin;
  pc.state = like.state;
  pc.has_entry = true;
  pc.ops_begin = pc.ops_end = static_cast<uint32_t>(p.ops.size());
  pc.comm = ci;
  p.comms.push_back(std::move(pc));
  c.members.push_back({rank, pi, static_cast<int>(p.comms.size() - 1)});
  std::stable_sort(
      c.members.begin(), c.members.end(),
      [](const CommMember& a, const CommMember& b) { return a.rank_in_comm < b.rank_in_comm; });
}

// The world: the largest PyTorch group whose members' ranks in it are their global ranks.
int world_comm(const Model& m) {
  int best = -1;
  for (int ci = 0; ci < static_cast<int>(m.comms.size()); ++ci) {
    const Comm& c = m.comms[ci];
    if (!torch_comm(m, c) || c.size <= 0) continue;
    bool world = true;
    for (const auto& mem : c.members) world = world && mem.rank_in_comm == m.procs[mem.proc].rank;
    if (world && (best < 0 || c.size > m.comms[best].size)) best = ci;
  }
  return best;
}

void adopt_empty_dumps(Model* m) {
  const int w = world_comm(*m);
  if (w < 0) return;
  const uint64_t id = m->comms[w].id;
  for (int pi = 0; pi < static_cast<int>(m->procs.size()); ++pi) {
    Proc& p = m->procs[pi];
    if (!is_torch(p) || p.rank >= m->comms[w].size) continue;
    if (std::any_of(p.comms.begin(), p.comms.end(),
                    [&](const ProcComm& pc) { return pc.id == id; }))
      continue;
    // A dump whose oldest entries were overwritten may have lost the default group's: only a
    // whole one tells that the rank never issued a collective on it.
    if (p.overwritten != 0) continue;
    const bool empty = p.ops.empty() && p.comms.empty();
    add_member(m, pi, w, p.rank);
    m->warnings.push_back(
        {p.file, std::string(empty ? "the dump is empty (no entries, no pg_status)"
                                   : "the dump holds no op of the default group") +
                     ": the rank is taken as a member of the default group " + m->comms[w].name +
                     " that entered none of its collectives"});
  }
}

std::string op_at(const Proc& p, const ProcComm& pc, uint64_t seq) {
  const Op* o = find_seq(p, pc, seq, Family::kCollective);
  return (o ? std::string(fr::log::op_name(o->op)) : std::string("collective")) + " #" +
         std::to_string(seq);
}

void mark_stale(Model* m) {
  for (const Comm& c : m->comms) {
    if (!torch_comm(*m, c) || c.members.size() < 2) continue;
    std::vector<Frontier> f;
    for (const auto& mem : c.members) {
      const Proc& p = m->procs[mem.proc];
      f.push_back(frontier(p, p.comms[mem.pc], Family::kCollective));
    }
    for (size_t i = 0; i < c.members.size(); ++i) {
      Proc& p = m->procs[c.members[i].proc];
      if (p.stale || p.ops.empty()) continue;
      size_t best = i;
      for (size_t j = 0; j < f.size(); ++j)
        if (f[j].completed > f[best].completed) best = j;
      if (f[best].completed < f[i].enq + kStaleBeyond) continue;
      p.stale = true;
      const Proc& q = m->procs[c.members[best].proc];
      m->warnings.push_back(
          {p.file,
           "stale dump: it ends at " + op_at(p, p.comms[c.members[i].pc], f[i].enq) + " on comm " +
               comm_text(c) + ", while rank " + std::to_string(q.rank) + " completed " +
               op_at(q, q.comms[c.members[best].pc], f[best].completed) +
               ", which needs every member: the rank dumped earlier and has not dumped since"});
    }
  }
}

// Collectives finished on some members that a member (not stale) never entered.
void mark_raised(Model* m) {
  for (const Comm& c : m->comms) {
    if (!torch_comm(*m, c)) continue;
    uint64_t min_enq = UINT64_MAX;
    for (const auto& mem : c.members) {
      const Proc& p = m->procs[mem.proc];
      if (!p.stale)
        min_enq = std::min(min_enq, frontier(p, p.comms[mem.pc], Family::kCollective).enq);
    }
    if (min_enq == UINT64_MAX) continue;
    for (const auto& mem : c.members) {
      Proc& p = m->procs[mem.proc];
      const ProcComm& pc = p.comms[mem.pc];
      for (uint32_t k = pc.ops_begin; k < pc.ops_end; ++k) {
        Op& o = p.ops[k];
        if (in_family(o, Family::kCollective) && o.seq > min_enq && o.gpu_state == FR_GPU_COMPLETED)
          o.flags |= kOpRaised;
      }
    }
  }
}

// Whether every op of `p` finished: nothing pending anywhere (an empty dump too).
bool idle(const Proc& p) {
  if (p.stale) return false;
  for (const auto& o : p.ops)
    if (counts(o) && o.gpu_state != FR_GPU_COMPLETED) return false;
  return true;
}

void infer_members(Model* m) {
  for (int ci = 0; ci < static_cast<int>(m->comms.size()); ++ci) {
    Comm& c = m->comms[ci];
    if (c.size >= 0 || !torch_comm(*m, c)) continue;
    bool waits = false, finished = false;
    std::vector<char> in(m->procs.size(), 0);
    for (const auto& mem : c.members) {
      const Proc& p = m->procs[mem.proc];
      in[mem.proc] = 1;
      const Frontier f = frontier(p, p.comms[mem.pc], Family::kCollective);
      waits = waits || f.enq > f.completed;
      finished = finished || f.completed > 0;
    }
    // A collective some member finished needed every member: a rank that recorded none of the
    // group's ops is no member of it (its whole dump would show them).
    if (!waits || finished) continue;
    std::vector<int> idle_ranks;
    for (int pi = 0; pi < static_cast<int>(m->procs.size()); ++pi)
      if (!in[pi] && is_torch(m->procs[pi]) && idle(m->procs[pi])) idle_ranks.push_back(pi);
    if (idle_ranks.size() != 1) continue;
    const int pi = idle_ranks.front();
    add_member(m, pi, ci, -1);
    // new_group numbers its members by global rank.
    std::vector<CommMember>& mems = m->comms[ci].members;
    std::sort(mems.begin(), mems.end(), [&](const CommMember& a, const CommMember& b) {
      return m->procs[a.proc].rank < m->procs[b.proc].rank;
    });
    std::vector<int> ranks;
    for (size_t k = 0; k < mems.size(); ++k) {
      mems[k].rank_in_comm = static_cast<int>(k);
      ProcComm& pc = m->procs[mems[k].proc].comms[mems[k].pc];
      pc.rank = static_cast<int32_t>(k);
      pc.size = static_cast<int32_t>(mems.size());
      ranks.push_back(m->procs[mems[k].proc].rank);
    }
    m->comms[ci].size = static_cast<int>(mems.size());
    m->warnings.push_back({m->procs[pi].file, "comm " + comm_text(m->comms[ci]) +
                                                  ", whose members no dump lists: its members are "
                                                  "taken to be ranks " +
                                                  rank_list_text(ranks) +
                                                  ", those whose dumps show it and rank " +
                                                  std::to_string(m->procs[pi].rank) +
                                                  ", the one rank with nothing pending anywhere"});
  }
}

// A member's op_id per collective seq on communicator `id`.
std::map<uint64_t, uint64_t> op_ids_of(const Proc& p, uint64_t id) {
  std::map<uint64_t, uint64_t> out;
  for (const auto& [comm, seq, op_id] : p.torch_op_ids)
    if (comm == id && seq > 0) out.emplace(seq, op_id);
  return out;
}

// The first collective before which the two members counted a different number of unrecorded
// ops since the previous one: {seq, ops of member 0, ops of member 1}; seq 0 when none.
std::array<uint64_t, 3> first_imbalance(const std::map<uint64_t, uint64_t>& a,
                                        const std::map<uint64_t, uint64_t>& b) {
  for (const auto& [seq, id_a] : a) {
    auto it_b = b.find(seq);
    if (it_b == b.end()) continue;
    uint64_t prev_a = 0, prev_b = 0;  // before collective #1, the group's count starts at 0
    if (seq > 1) {
      auto pa = a.find(seq - 1), pb = b.find(seq - 1);
      if (pa == a.end() || pb == b.end()) continue;
      prev_a = pa->second, prev_b = pb->second;
    }
    if (id_a <= prev_a || it_b->second <= prev_b) continue;  // damaged numbering
    const uint64_t da = id_a - prev_a - 1, db = it_b->second - prev_b - 1;
    if (da != db) return {seq, da, db};
  }
  return {0, 0, 0};
}

}  // namespace

// In a group of two every send has its recv on the other member, between the same two
// collectives (gloo's send and recv block until matched, so neither member gets past the
// next collective without it). A member that counted more ops there issued one that the other
// never matched: the other is the rank that never sent or received it. Only the counts are
// known (no entry, no peer, no direction), so this is told for groups of two only.
void analyze_unrecorded_p2p(AnalysisState& state, int ci) {
  const Model& m = state.model;
  const Comm& c = m.comms[ci];
  if (c.size != 2 || c.members.size() != 2 || !torch_comm(m, c)) return;
  const Proc& p0 = m.procs[c.members[0].proc];
  const Proc& p1 = m.procs[c.members[1].proc];
  if (p0.stale || p1.stale) return;
  const auto [seq, d0, d1] = first_imbalance(op_ids_of(p0, c.id), op_ids_of(p1, c.id));
  if (seq == 0) return;
  const bool first_more = d0 > d1;
  const Proc& more = first_more ? p0 : p1;
  const Proc& fewer = first_more ? p1 : p0;
  const ProcComm& pc = more.comms[c.members[first_more ? 0 : 1].pc];
  const uint64_t hi = std::max(d0, d1), lo = std::min(d0, d1);
  // Its number among the member's point-to-point ops: those before the previous collective,
  // then the matched ones of this stretch, then it.
  const auto ids = op_ids_of(more, c.id);
  const uint64_t before = seq > 1 && ids.at(seq - 1) >= seq - 1 ? ids.at(seq - 1) - (seq - 1) : 0;
  Stall s;
  s.kind = VerdictKind::kP2pUnmatched;
  s.comm = ci;
  s.p2p = true;
  s.seq = before + lo + 1;
  s.op = "Send/Recv";
  s.culprits = {fewer.rank};
  s.blocked = {more.rank};
  const Op* next = find_seq(more, pc, seq, Family::kCollective);
  s.t_start = next ? aligned(more, next->call_ns) : INT64_MAX;
  state.blocked[more.rank].push_back({ci, s.t_start});
  const std::string stretch =
      (seq > 1 ? op_at(more, pc, seq - 1) + " and " : std::string("before ")) +
      op_at(more, pc, seq);
  s.summary = "rank " + std::to_string(more.rank) + " issued " + std::to_string(hi) +
              " point-to-point ops on comm " + comm_text(c) + " between " + stretch +
              " (gloo records no entry for them; the group's op count shows them), rank " +
              std::to_string(fewer.rank) + " only " + std::to_string(lo) + ": rank " +
              std::to_string(more.rank) + "'s op #" + std::to_string(lo + 1) +
              " there has no partner, rank " + std::to_string(fewer.rank) +
              " never sent or received it";
  s.extra["unrecorded_ops"] = {{std::to_string(p0.rank), d0}, {std::to_string(p1.rank), d1}};
  s.extra["before_collective"] = seq;
  s.fraction = 0.5;
  state.stalls.push_back(std::move(s));
}

void infer_torch(Model* model) {
  if (std::none_of(model->procs.begin(), model->procs.end(), is_torch)) return;
  adopt_empty_dumps(model);
  mark_stale(model);
  mark_raised(model);
  infer_members(model);
}

}  // namespace fr::analyzer
