// Ranking the stalls: which one is the verdict and which are findings. A hang usually shows on
// several communicators at once (a rank stuck in one never arrives in the next), so the stall
// whose culprits wait nowhere else is the root; the ranking order is explained on Stall
// (passes.h) and implemented in ranks_before below.
#include <algorithm>

#include "passes.h"

namespace fr::analyzer {
namespace {

// Whether culprit `k` of stall `s` is explained by waiting in another communicator.
bool explained(const AnalysisState& state, const Stall& s, size_t k) {
  if (s.kind == VerdictKind::kMismatch) return false;
  auto it = state.blocked.find(s.culprits[k]);
  if (it == state.blocked.end()) return false;
  // Where the rank really waits: its oldest pending op, which holds its stream (or its host);
  // everything it issued later only queues behind that one.
  std::pair<int, int64_t> head{-1, INT64_MAX};
  for (const auto& b : it->second)
    if (head.first < 0 || b.second < head.second) head = b;
  if (head.first == s.comm) return false;
  if (s.fraction > 0.5) return true;  // most members "missing" here are stuck elsewhere
  if (s.kind == VerdictKind::kStuckInCollective)
    return true;  // stream order: the older op holds the GPU
  // Never came: explained only if it was already stuck elsewhere when the others arrived.
  return head.second < s.t_start;
}

// 0: no culprit explained elsewhere (a root); 1: some are; 2: all are, or nobody is blamed.
int tier(const AnalysisState& state, const Stall& s) {
  // A NIXL remote without a global rank waits in no communicator: a root when it is found.
  if (s.culprits.empty() && !s.culprit_pids.empty()) return 0;
  size_t count = 0;
  for (size_t k = 0; k < s.culprits.size(); ++k) count += explained(state, s, k);
  return s.culprits.empty() ? 2 : count == 0 ? 0 : count < s.culprits.size() ? 1 : 2;
}

}  // namespace

void rank_stalls(AnalysisState& state) {
  for (auto& s : state.stalls) s.tier = tier(state, s);
  const Model& m = state.model;
  auto ranks_before = [&](const Stall& a, const Stall& b) {
    if (a.tier != b.tier) return a.tier < b.tier;
    if (a.kind != b.kind) return a.kind < b.kind;  // the order of FR_VERDICT_KINDS
    if (a.fraction != b.fraction) return a.fraction < b.fraction;
    if (a.t_start != b.t_start) return a.t_start < b.t_start;
    if (a.comm < 0 || b.comm < 0) return a.comm > b.comm;  // NIXL stalls (no communicator) last
    return m.comms[a.comm].id < m.comms[b.comm].id;
  };
  std::stable_sort(state.stalls.begin(), state.stalls.end(), ranks_before);
}

}  // namespace fr::analyzer
