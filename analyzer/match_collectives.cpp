// Cross-rank matching of collectives on one communicator. Every member counts collectives the
// same way, so the members' frontiers give the stalled sequence number: the first one a member
// never completed (or never enqueued). The members are then sorted by what they did with it,
// and that decides the stall: a mismatch (mismatch.cpp) at or before it, members that never
// entered it, members without a dump who would decide it, or all in and the GPUs that never
// started or finished it.
#include <algorithm>

#include "passes.h"

namespace fr::analyzer {
namespace {

std::string plural(size_t n, const char* one, const char* many) { return n == 1 ? one : many; }

// Whether some member's records on `c` were left out of the loaded window.
bool windowed(const Model& m, const Comm& c) {
  for (const auto& mem : c.members)
    if (m.procs[mem.proc].comms[mem.pc].dropped) return true;
  return false;
}

// The members' frontiers, their spread, and the stalled sequence number (UINT64_MAX: none).
struct Measure {
  uint64_t min_enq = UINT64_MAX, max_enq = 0, min_completed = UINT64_MAX, max_completed = 0;
  uint64_t stalled = UINT64_MAX;
};

Measure measure(const Model& m, const Comm& c, std::vector<Frontier>& frontiers) {
  Measure s;
  frontiers.resize(c.members.size());
  for (size_t i = 0; i < c.members.size(); ++i) {
    const Proc& p = m.procs[c.members[i].proc];
    const Frontier& f = frontiers[i] = frontier(p, p.comms[c.members[i].pc], Family::kCollective);
    // A stale dump (torch_infer.cpp) says where its rank was long ago: the stall is where the
    // others are, and the stale rank is judged there.
    if (p.stale) continue;
    s.min_enq = std::min(s.min_enq, f.enq);
    s.max_enq = std::max(s.max_enq, f.enq);
    s.min_completed = std::min(s.min_completed, f.completed);
    s.max_completed = std::max(s.max_completed, f.completed);
    if (f.tracked && f.enq > f.completed) s.stalled = std::min(s.stalled, f.completed + 1);
  }
  if (s.max_enq > s.min_enq) s.stalled = std::min(s.stalled, s.min_enq + 1);
  return s;
}

// The mismatch is at or before the stall point: it is the stall. Records who waits there.
void wait_in_mismatch(AnalysisState& state, int ci, uint64_t t, Stall& s) {
  const Model& m = state.model;
  const Comm& c = m.comms[ci];
  const std::vector<Frontier>& frontiers = state.coll_frontiers[ci];
  for (size_t i = 0; i < c.members.size(); ++i) {
    const Proc& p = m.procs[c.members[i].proc];
    if (frontiers[i].enq < t || frontiers[i].completed >= t) continue;
    if (std::find(s.blocked.begin(), s.blocked.end(), p.rank) == s.blocked.end())
      s.blocked.push_back(p.rank);
    const Op* o = find_seq(p, p.comms[c.members[i].pc], t, Family::kCollective);
    state.blocked[p.rank].push_back({ci, o ? aligned(p, o->call_ns) : INT64_MAX});
  }
}

// The members sorted by what they did with the stalled sequence number.
struct Members {
  std::vector<int> not_entered, not_started, not_completed, unknown;  // global ranks
  std::vector<int> raised;     // its dump shows it finished, yet a member never came (kOpRaised)
  std::vector<const Op*> at;   // each member's record of it, when in the ring
  const Op* sample = nullptr;  // the first such record
  const ReplayTag* replay = nullptr;
};

Members sort_members(AnalysisState& state, int ci, uint64_t t, Stall& s) {
  const Model& m = state.model;
  const Comm& c = m.comms[ci];
  const std::vector<Frontier>& frontiers = state.coll_frontiers[ci];
  Members out;
  out.at.assign(c.members.size(), nullptr);
  for (size_t i = 0; i < c.members.size(); ++i) {
    const Proc& p = m.procs[c.members[i].proc];
    const Frontier& f = frontiers[i];
    if (f.enq < t) {
      out.not_entered.push_back(p.rank);
      continue;
    }
    const Op* at = out.at[i] = find_seq(p, p.comms[c.members[i].pc], t, Family::kCollective);
    if (at && !out.replay) out.replay = replay_of(p, at);
    if (at) {
      if (!out.sample) out.sample = at;
      s.t_start = std::min(s.t_start, aligned(p, at->call_ns));
    }
    if (f.completed >= t) {
      if (at && (at->flags & kOpRaised)) out.raised.push_back(p.rank);
      continue;
    }
    s.blocked.push_back(p.rank);
    state.blocked[p.rank].push_back({ci, at ? aligned(p, at->call_ns) : INT64_MAX});
    if (!f.tracked)
      out.unknown.push_back(p.rank);
    else if (f.started < t)
      out.not_started.push_back(p.rank);
    else
      out.not_completed.push_back(p.rank);
  }
  return out;
}

// A grouped launch is one unit: every op of the group, on the first member that has it. Group ids
// grow, so a group newer than every record left out of the window is whole in it.
nlohmann::json group_json(const Model& m, const Comm& c, const Members& mb, bool* needs_history) {
  for (size_t i = 0; i < c.members.size(); ++i) {
    if (!mb.at[i]) continue;
    const Proc& p = m.procs[c.members[i].proc];
    const ProcComm& pc = p.comms[c.members[i].pc];
    if (pc.dropped && mb.at[i]->group_id <= pc.dropped_max_group) *needs_history = true;
    nlohmann::json ops = nlohmann::json::array();
    const ReplayTag* own = replay_of(p, mb.at[i]);
    auto same_launch = [&](const Op& o) {  // a graph's group runs again at every replay
      const ReplayTag* t = replay_of(p, &o);
      return own == nullptr ? t == nullptr
                            : t != nullptr && t->replay == own->replay && t->graph == own->graph;
    };
    for (uint32_t k = pc.ops_begin; k < pc.ops_end; ++k)
      if (p.ops[k].group_id == mb.at[i]->group_id && counts(p.ops[k]) && same_launch(p.ops[k]))
        ops.push_back(nlohmann::json{{"op", fr::log::op_name(p.ops[k].op)},
                                     {"seq", p.ops[k].seq},
                                     {"kind", fr::log::op_is_p2p(p.ops[k].op) ? "p2p" : "coll"}});
    return {{"group_id", mb.at[i]->group_id}, {"ops", ops}};
  }
  return nullptr;
}

// A rooted collective whose records hold no root (PyTorch's entries never do): members that
// disagree on the root would leave some finished and others waiting, and nothing shows it.
bool root_unrecorded(const Members& mb, const Stall& s) {
  if (!mb.sample || !is_rooted(mb.sample->op)) return false;
  for (const Op* o : mb.at)
    if (o && o->peer >= 0) return false;
  (void)s;
  return true;
}

// Ops a PyTorch group counted (op_id) beyond its collectives and its recorded point-to-point
// ops: on gloo, send and recv leave no entry. A member that never entered the collective may then
// be blocked in such an op rather than idle, and which rank never sent or received cannot be
// told. Says so in the summary (and in extra.unrecorded_ops, per rank).
void unrecorded_ops_note(const Model& m, const Comm& c, const Members& mb, Stall& s) {
  nlohmann::json per_rank = nlohmann::json::object();
  std::vector<int> ranks;
  uint64_t total = 0;
  for (const auto& mem : c.members) {
    const Proc& p = m.procs[mem.proc];
    const ProcComm& pc = p.comms[mem.pc];
    if (p.source_kind != "torch" || pc.op_index <= pc.coll_seq + pc.p2p_seq) continue;
    const uint64_t n = pc.op_index - pc.coll_seq - pc.p2p_seq;
    per_rank[std::to_string(p.rank)] = n;
    ranks.push_back(p.rank);
    total = std::max(total, n);
  }
  if (ranks.empty()) return;
  s.extra["unrecorded_ops"] = per_rank;
  s.extra["undecided"] = "p2p_not_recorded";
  const bool many = ranks.size() > 1;
  s.summary += ". The group ran ops no entry records (" + ranks_word(ranks.size()) +
               rank_list_text(ranks) + " counted " + (many ? "up to " : "") +
               std::to_string(total) + " more ops than " + (many ? "their" : "its") +
               " collectives: point-to-point on gloo, or other uncounted ops), so " +
               ranks_word(mb.not_entered.size()) + rank_list_text(mb.not_entered) +
               (mb.not_entered.size() > 1 ? " may each" : " may") +
               " be blocked in a send or recv rather than "
               "on the host: which rank never sent or received cannot be told from the dumps";
}

// All members entered: the GPUs that never started or never finished it are the suspects.
void decide_stuck(const Members& mb, const std::string& where, uint64_t t, uint64_t max_completed,
                  Stall& s) {
  s.kind = VerdictKind::kStuckInCollective;
  if (!mb.not_started.empty()) {
    s.culprits = mb.not_started;
    s.summary = "all members entered " + where + "; the GPU of " +
                ranks_word(mb.not_started.size()) + rank_list_text(mb.not_started) +
                " never started it";
  } else if (!mb.not_completed.empty() && max_completed >= t && root_unrecorded(mb, s)) {
    s.summary =
        "all members entered " + where + "; " + ranks_word(mb.not_completed.size()) +
        rank_list_text(mb.not_completed) +
        " never finished it while the others did. The dumps "
        "record no root for it (gloo's Flight Recorder entries hold none), so a root mismatch, "
        "which leaves just this pattern, cannot be seen: no rank is blamed";
    s.extra["undecided"] = "root_not_recorded";
  } else if (!mb.not_completed.empty() && max_completed >= t) {
    s.culprits = mb.not_completed;
    s.summary = "all members entered " + where + "; " + ranks_word(mb.not_completed.size()) +
                rank_list_text(mb.not_completed) + " never finished it while the others did";
  } else if (!mb.unknown.empty() && mb.not_completed.empty()) {
    s.summary = "all members entered " + where +
                " and none returned; GPU progress is not tracked, "
                "so the stalled GPU cannot be named";
  } else {
    s.summary = "all members entered " + where + " and their GPUs started it, but none finished";
  }
}

// The stall's kind, culprits and sentence, from how the members are sorted.
void decide(const Model& m, const Comm& c, const Members& mb, const std::vector<Missing>& missing,
            const std::string& where, uint64_t t, uint64_t max_completed, Stall& s) {
  std::vector<int> missing_global;
  for (const auto& x : missing)
    if (x.global >= 0) missing_global.push_back(x.global);
  const size_t present = c.members.size();
  if (!mb.not_entered.empty()) {
    s.kind = VerdictKind::kNotEntered;
    s.culprits = mb.not_entered;
    const std::string members = std::to_string(c.size > 0 ? c.size : static_cast<int>(present));
    s.summary = ranks_word(mb.not_entered.size()) + rank_list_text(mb.not_entered) +
                " never entered " + where + "; " +
                (s.blocked.empty()
                     ? "no member waits in it"
                     : std::to_string(s.blocked.size()) + " of " + members + " members wait in it");
    if (!mb.raised.empty())
      s.summary += "; on " + ranks_word(mb.raised.size()) + rank_list_text(mb.raised) +
                   " it ended with an error (raised or timed out: it cannot complete without " +
                   ranks_word(mb.not_entered.size()) + rank_list_text(mb.not_entered) +
                   "), not completed";
    unrecorded_ops_note(m, c, mb, s);
  } else if (c.size < 0 && mb.not_started.empty() && !s.blocked.empty()) {
    // Nobody knows the communicator's members (a PyTorch group its dumps do not describe): a
    // member that never came leaves no trace, so nobody can be blamed.
    s.kind = VerdictKind::kIncomplete;
    s.summary = ranks_word(s.blocked.size()) + rank_list_text(s.blocked) + " wait in " + where +
                ", whose members no dump lists; a member that never entered it cannot be named";
  } else if (!missing.empty()) {
    // A member without a dump never counts as having entered. Only a GPU that never started the
    // op while another member's did is told without it: that stream is held before the op.
    const std::string absent = std::to_string(missing.size()) +
                               plural(missing.size(), " member has", " members have") + " no dump" +
                               (missing_global.empty() ? ""
                                                       : " (" + ranks_word(missing_global.size()) +
                                                             rank_list_text(missing_global) + ")");
    const bool some_started = !mb.not_completed.empty() || max_completed >= t;
    if (!mb.not_started.empty() && some_started) {
      s.kind = VerdictKind::kStuckInCollective;
      s.culprits = mb.not_started;
      s.summary = "every member with a dump entered " + where + ", and " + absent +
                  "; the GPU of " + ranks_word(mb.not_started.size()) +
                  rank_list_text(mb.not_started) +
                  " never started it while other members' did: that stream is held before it, "
                  "whatever the members without a dump did";
    } else {
      s.kind = VerdictKind::kIncomplete;
      s.culprits = missing_global;
      s.summary =
          "every member with a dump is in " + where + "; " + absent + " and would decide it" +
          (mb.not_started.empty()
               ? std::string()
               : std::string(mb.not_started.size() > 1 ? " (the GPUs of " : " (the GPU of ") +
                     ranks_word(mb.not_started.size()) + rank_list_text(mb.not_started) +
                     (mb.not_started.size() > 1 ? " have" : " has") + " not started it)");
    }
  } else {
    decide_stuck(mb, where, t, max_completed, s);
  }
}

}  // namespace

void analyze_collectives(AnalysisState& state, int ci, std::optional<Spread>* spread) {
  const Model& m = state.model;
  const Comm& c = m.comms[ci];
  const Measure got = measure(m, c, state.coll_frontiers[ci]);
  if (c.members.empty()) return;
  *spread = Spread{got.min_enq, got.max_enq, got.min_completed, got.max_completed, std::nullopt};
  const uint64_t t = got.stalled;

  // Mismatched arguments explain a hang better than anything else on the communicator. Which
  // value was expected is told from the records around it: every one of them is needed.
  bool mismatch_found = false;
  if (uint64_t seq = earliest_mismatch(m, c)) {
    if (windowed(m, c)) state.needs_history = true;
    state.stalls.push_back(mismatch_stall(m, ci, seq));
    mismatch_found = true;
  }
  // Everyone completed everything (or nothing can be told without GPU tracking).
  if (t == UINT64_MAX || t > got.max_enq) return;
  (*spread)->stalled_seq = t;
  for (size_t i = 0; i < c.members.size(); ++i) {
    const Proc& p = m.procs[c.members[i].proc];
    if (state.coll_frontiers[ci][i].enq >= t &&
        !window_reaches(p, p.comms[c.members[i].pc], t, Family::kCollective))
      state.needs_history = true;
  }
  if (mismatch_found && state.stalls.back().seq <= t) {
    wait_in_mismatch(state, ci, t, state.stalls.back());
    return;
  }

  Stall s;
  s.comm = ci;
  s.seq = t;
  const Members mb = sort_members(state, ci, t, s);
  s.op = mb.sample ? fr::log::op_name(mb.sample->op) : "collective";
  // An op of a CUDA graph is named with the replay it ran in and its place in the graph.
  if (mb.replay && mb.sample) s.extra["graph_replay"] = replay_json(*mb.replay, *mb.sample);
  const std::string where = s.op + " #" + std::to_string(t) + " on comm " + comm_text(c) +
                            (mb.replay ? replay_text(*mb.replay) : std::string());
  if (mb.sample && mb.sample->group_id != 0) {
    nlohmann::json group = group_json(m, c, mb, &state.needs_history);
    if (!group.is_null()) s.extra["group"] = std::move(group);
  }
  const auto missing = missing_members(m, c, state.job_missing);
  if (!missing.empty()) s.extra["missing_members"] = missing_json(missing);
  decide(m, c, mb, missing, where, t, got.max_completed, s);
  if (s.kind == VerdictKind::kStuckInCollective)
    localize_in_channels(m, c, where, mb.not_started, s);
  s.fraction = static_cast<double>(s.culprits.size()) / static_cast<double>(c.members.size());
  state.stalls.push_back(std::move(s));
}

}  // namespace fr::analyzer
