// Verdicts that override the ranked stalls: a node whose ranks are all missing or dead
// (node_lost), and ranks whose writers died while the others wait (rank_dead). Both borrow the
// communicator and op of the stall the others wait in, so the evidence still shows where the
// job stands. A rank that destroyed its communicators and left in order is gone, but not dead.
#include <algorithm>

#include "passes.h"

namespace fr::analyzer {
namespace {

// A process that destroyed every communicator it had and was in no call when it went (a rank
// leaving an elastic job) left in order: gone, but no death to blame.
bool left_in_order(const Proc& p) {
  bool any = false;
  for (const auto& pc : p.comms) {
    if (!pc.has_entry) continue;
    if (pc.state != FR_COMM_DESTROYED) return false;
    any = true;
  }
  for (const auto& o : p.ops)
    if ((o.flags & FR_REC_F_IN_CALL) && o.result == FR_RESULT_PENDING) return false;
  return any && !p.alive;
}

// What the others wait in, for an override's summary: the stalled op, or the stalled transfer.
std::string waiting_text(const Model& m, const Stall& st) {
  if (st.comm < 0) return "a NIXL transfer waits: " + st.summary;
  return "the others wait in " + st.op + " #" + std::to_string(st.seq) + " on comm " +
         comm_text(m.comms[st.comm]);
}

// Whether the ranked verdict is a NIXL stall that already names every rank in `ranks` (as the
// remote agent's process or as a process that posted to it): it says more than an override.
bool nixl_names_all(const std::vector<Stall>& ranked, const std::vector<int>& ranks) {
  if (ranked.empty() || ranks.empty()) return false;
  const Stall& top = ranked.front();
  if (top.kind != VerdictKind::kNixlStalled && top.kind != VerdictKind::kNixlDisconnected)
    return false;
  auto named = [&](int r) {
    return std::find(top.culprits.begin(), top.culprits.end(), r) != top.culprits.end() ||
           std::find(top.blocked.begin(), top.blocked.end(), r) != top.blocked.end();
  };
  return std::all_of(ranks.begin(), ranks.end(), named);
}

// The communicator, op and details of `base`, for an override's evidence.
void borrow_place(const Stall& base, Stall& s) {
  s.comm = base.comm, s.seq = base.seq, s.p2p = base.p2p, s.host_call = base.host_call;
  s.op = base.op, s.extra = base.extra;
}

// Hosts a manifest names that sent no dump while ranks are missing, and (when something stalled)
// hosts whose every process was dead at the dump; with their ranks, ascending.
std::pair<std::vector<std::string>, std::vector<int>> lost_hosts(const Model& m,
                                                                 const RankCensus& census,
                                                                 bool any_stall) {
  std::map<std::string, std::pair<std::vector<int>, bool>> hosts;  // host -> (ranks, all dead)
  for (const auto& p : m.procs) {
    auto& h = hosts[p.host];
    h.first.push_back(p.rank);
    if (h.first.size() == 1) h.second = true;
    if (p.alive) h.second = false;
  }
  std::vector<std::string> lost;
  std::vector<int> ranks;
  for (const auto& mh : m.manifest_hosts)
    if (!hosts.count(mh) && !census.missing.empty() &&
        std::find(lost.begin(), lost.end(), mh) == lost.end())
      lost.push_back(mh);
  if (!lost.empty()) ranks = census.missing;
  if (!census.all_dead && hosts.size() >= 2 && any_stall)
    for (const auto& [h, v] : hosts)
      if (v.second) {
        lost.push_back(h);
        ranks.insert(ranks.end(), v.first.begin(), v.first.end());
      }
  std::sort(ranks.begin(), ranks.end());
  return {lost, ranks};
}

Stall node_lost(const Model& m, const std::vector<std::string>& hosts,
                const std::vector<int>& ranks, const std::vector<Stall>& ranked) {
  Stall s;
  s.kind = VerdictKind::kNodeLost;
  s.culprits = ranks;
  std::string names;
  for (const auto& h : hosts) names += (names.empty() ? "" : ", ") + h;
  s.summary = "node" + std::string(hosts.size() > 1 ? "s " : " ") + names +
              " lost: " + ranks_word(ranks.size()) + rank_list_text(ranks) + " " +
              (ranks.size() > 1 ? "are" : "is") + " missing or dead";
  // Borrow the comm and op of the first stall that waits on them, for the evidence.
  for (const auto& st : ranked) {
    bool hit = false;
    for (int r : st.culprits) hit |= std::binary_search(ranks.begin(), ranks.end(), r);
    if (hit || st.kind == VerdictKind::kIncomplete) {
      borrow_place(st, s);
      s.summary += "; " + waiting_text(m, st);
      break;
    }
  }
  return s;
}

Stall rank_dead(const Model& m, const std::vector<int>& died, const std::vector<int>& stale,
                const std::vector<Stall>& ranked) {
  Stall s;
  s.kind = VerdictKind::kRankDead;
  s.culprits = died;
  // The stall a dead rank is a culprit of, else the first one.
  const Stall* base = &ranked.front();
  for (const auto& st : ranked) {
    if (std::any_of(st.culprits.begin(), st.culprits.end(),
                    [&](int r) { return std::find(died.begin(), died.end(), r) != died.end(); })) {
      base = &st;
      break;
    }
  }
  borrow_place(*base, s);
  std::vector<int> gone;
  for (int r : died)
    if (std::find(stale.begin(), stale.end(), r) == stale.end()) gone.push_back(r);
  std::vector<int> old;
  for (int r : stale)
    if (std::find(died.begin(), died.end(), r) != died.end()) old.push_back(r);
  std::string who;
  if (!gone.empty())
    who = ranks_word(gone.size()) + rank_list_text(gone) + " died (" +
          (gone.size() > 1 ? "their writers were" : "its writer was") + " gone at the dump)";
  if (!old.empty())
    who += (who.empty() ? "" : "; ") + ranks_word(old.size()) + rank_list_text(old) +
           " died or stopped: " + (old.size() > 1 ? "their dumps are" : "its dump is") +
           " stale, older than collectives the others "
           "completed with " +
           (old.size() > 1 ? "them" : "it") + ", and " +
           (old.size() > 1 ? "they never dumped" : "it never dumped") + " again";
  s.summary = who + (base->comm >= 0
                         ? "; the others wait in " + base->op + " #" + std::to_string(base->seq) +
                               " on comm " + comm_text(m.comms[base->comm])
                         : " while " + waiting_text(m, *base));
  if (!old.empty()) s.extra["stale_ranks"] = old;
  return s;
}

}  // namespace

RankCensus take_census(const Model& m) {
  RankCensus c;
  std::set<int> found;
  for (const auto& p : m.procs) {
    c.found.push_back(p.rank);
    found.insert(p.rank);
    // A stale dump (torch_infer.cpp): the rank took part in what the others did after it, then
    // never dumped again; it is dead or silent, the same to the ranks waiting for it.
    if (!p.alive || p.stale) c.dead.push_back(p.rank);
    if (((!p.alive && !left_in_order(p)) || p.stale) &&
        std::find(c.died.begin(), c.died.end(), p.rank) == c.died.end())
      c.died.push_back(p.rank);
    if (p.stale) c.stale.push_back(p.rank);
  }
  c.expected =
      std::max(std::min(m.expected_ranks, kMaxRanks), c.found.empty() ? 0 : c.found.back() + 1);
  for (int r = 0; r < c.expected; ++r)
    if (!found.count(r)) c.missing.push_back(r);
  c.all_dead = !m.procs.empty() && c.dead.size() == m.procs.size();
  return c;
}

void apply_overrides(const Model& m, const RankCensus& census, std::vector<Stall>* ranked) {
  const bool any_stall = !ranked->empty();
  const auto [hosts, ranks] = lost_hosts(m, census, any_stall);
  if (!hosts.empty() && (any_stall || ranks.size() == census.missing.size()) &&
      !nixl_names_all(*ranked, ranks))
    ranked->insert(ranked->begin(), node_lost(m, hosts, ranks, *ranked));
  else if (any_stall && !census.died.empty() && !census.all_dead &&
           !nixl_names_all(*ranked, census.died))
    ranked->insert(ranked->begin(), rank_dead(m, census.died, census.stale, *ranked));
}

}  // namespace fr::analyzer
