// Fail-slow: a rank that keeps the others waiting at collectives, though nothing hangs. Where the
// skew pass (skew.cpp) averages lateness over the whole dump, this pass asks whether one rank is
// consistently the late one, recently, and says what it costs the job; the finding (kind "slow")
// carries `slow.cause`, `slow.factor` and the numbers behind them (DESIGN.md, docs/fr-analyze.md).
//
// The statistics, per communicator, over its latest kWindow collectives that every member has on
// record (arrival = the call's time, clock offsets applied), and within them over the longest
// run of the latest ones in which a member is late consistently (a straggler since then):
//   - lateness of a member at one collective: its arrival minus the first member's;
//   - a member is late at a collective when its lateness is at least kMinLateNs and at least half
//     of the latest member's (so two stragglers are both late, and a quiet job has no one late);
//   - a straggler is late at kMinFraction of the run's collectives or more (kMinCollectives at
//     least), with a median lateness there of kMinLateNs or more and kMinRatio times the median
//     of the others'.
// Jitter makes different ranks late at different steps; a checkpoint pause delays every rank
// together; neither makes anyone consistently late. The job's step on that communicator is the
// median time between consecutive collectives with the straggler's most frequent signature (the
// same op every step), measured at the straggler's arrivals; without it, the others would have
// arrived its median lateness sooner: step - lateness. The cause is `host` unless the
// straggler's GPU reports clock throttling in the dump set's NVML health (then `gpu`): a flight
// log holds when each op was called and how far its GPU got, not how long the GPU worked on it.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <tuple>

#include "passes.h"

namespace fr::analyzer {
namespace {

using nlohmann::json;

constexpr size_t kWindow = 256;          // the latest collectives looked at, per communicator
constexpr size_t kMinCollectives = 12;   // fewer says nothing about consistency
constexpr double kMinFraction = 0.75;    // late at three collectives in four, or more
constexpr int64_t kMinLateNs = 1000000;  // 1 ms: below, scheduling noise
constexpr double kMinRatio = 4;          // times the other members' median lateness

int64_t median_of(std::vector<int64_t> v) {
  if (v.empty()) return 0;
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

// One straggler on one communicator, with its numbers.
struct Straggler {
  int comm = -1;  // index into Model::comms
  int member = -1;
  int rank = -1;
  size_t collectives = 0, late = 0;
  int64_t median_late = 0, others_late = 0;
  int64_t step = 0;                      // 0: unknown
  uint64_t first_seq = 0, last_seq = 0;  // the run of collectives it is late in
  uint16_t op = 0;
  std::vector<std::pair<int, double>> member_fraction;  // (global rank, late fraction)
};

// The arrivals of each member at the window's collectives: rows by collective, oldest first.
struct Arrivals {
  std::vector<uint64_t> seqs;
  std::vector<std::vector<int64_t>> t;  // [collective][member]
  std::vector<std::vector<uint32_t>> sig;
};

Arrivals arrivals_of(const Model& m, const Comm& c) {
  Arrivals a;
  const size_t n = c.members.size();
  std::map<uint64_t, std::pair<std::vector<int64_t>, size_t>> by_seq;
  std::map<uint64_t, std::vector<uint32_t>> sigs;
  for (size_t i = 0; i < n; ++i) {
    const CommMember& mem = c.members[i];
    const Proc& p = m.procs[mem.proc];
    const CollHistory& h = p.comms[mem.pc].history;
    uint64_t lo, hi;
    size_t count;
    if (!h.range(&lo, &hi, &count)) return a;
    // The window and a margin for collectives some member has not on record.
    const uint64_t from = hi >= 2 * kWindow ? hi - 2 * kWindow : 0;
    h.for_each([&](uint64_t seq, uint64_t call_ns, uint32_t sig) {
      if (seq < from) return;
      auto& e = by_seq[seq];
      if (e.first.empty()) e.first.assign(n, INT64_MIN), sigs[seq].assign(n, 0);
      if (e.first[i] == INT64_MIN) ++e.second;
      e.first[i] = aligned(p, call_ns);
      sigs[seq][i] = sig;
    });
  }
  for (auto it = by_seq.rbegin(); it != by_seq.rend() && a.seqs.size() < kWindow; ++it)
    if (it->second.second == n) {
      a.seqs.push_back(it->first);
      a.t.push_back(it->second.first);
      a.sig.push_back(sigs[it->first]);
    }
  std::reverse(a.seqs.begin(), a.seqs.end());
  std::reverse(a.t.begin(), a.t.end());
  std::reverse(a.sig.begin(), a.sig.end());
  return a;
}

// The median time between consecutive collectives of the member's most frequent signature.
int64_t step_of(const Arrivals& a, size_t member) {
  std::map<uint32_t, size_t> freq;
  for (const auto& s : a.sig) ++freq[s[member]];
  uint32_t top = 0;
  size_t best = 0;
  for (auto [sig, k] : freq)
    if (k > best) top = sig, best = k;
  std::vector<int64_t> gaps;
  int64_t prev = INT64_MIN;
  for (size_t i = 0; i < a.t.size(); ++i) {
    if (a.sig[i][member] != top) continue;
    if (prev != INT64_MIN) gaps.push_back(a.t[i][member] - prev);
    prev = a.t[i][member];
  }
  return gaps.size() >= 2 ? median_of(gaps) : 0;
}

// The longest run of latest collectives in which member i is late at kMinFraction of them or
// more (0: none of kMinCollectives or more): a straggler since then.
size_t late_run(const std::vector<std::vector<uint8_t>>& is_late, size_t i) {
  size_t run = 0, late = 0;
  for (size_t len = 1; len <= is_late.size(); ++len) {
    late += is_late[is_late.size() - len][i];
    if (len >= kMinCollectives && double(late) >= kMinFraction * double(len)) run = len;
  }
  return run;
}

std::vector<Straggler> stragglers_on(const Model& m, int ci) {
  const Comm& c = m.comms[ci];
  std::vector<Straggler> out;
  const size_t n = c.members.size();
  if (n < 2) return out;
  Arrivals a = arrivals_of(m, c);
  if (a.seqs.size() < kMinCollectives) return out;
  std::vector<std::vector<int64_t>> late(a.t.size(), std::vector<int64_t>(n));
  std::vector<std::vector<uint8_t>> is_late(a.t.size(), std::vector<uint8_t>(n));
  for (size_t k = 0; k < a.t.size(); ++k) {
    const auto& row = a.t[k];
    const int64_t first = *std::min_element(row.begin(), row.end());
    const int64_t spread = *std::max_element(row.begin(), row.end()) - first;
    for (size_t i = 0; i < n; ++i) {
      late[k][i] = row[i] - first;
      is_late[k][i] = late[k][i] >= kMinLateNs && 2 * late[k][i] >= spread;
    }
  }
  std::vector<size_t> runs(n);
  size_t candidates = 0;
  for (size_t i = 0; i < n; ++i) candidates += (runs[i] = late_run(is_late, i)) > 0;
  // More than a third of the members late at once is the whole job shifting, not a straggler
  // (and bounds the work below on a large communicator).
  if (3 * candidates > n + 2) return out;
  for (size_t i = 0; i < n; ++i) {
    const size_t run = runs[i];
    if (run == 0) continue;
    const size_t from = a.t.size() - run;
    // Each member's median lateness over the run, and how often it was late there.
    std::vector<int64_t> medians(n);
    std::vector<std::pair<int, double>> fractions;
    size_t late_here = 0;
    for (size_t j = 0; j < n; ++j) {
      std::vector<int64_t> v;
      size_t cnt = 0;
      for (size_t k = from; k < a.t.size(); ++k) v.push_back(late[k][j]), cnt += is_late[k][j];
      medians[j] = median_of(std::move(v));
      fractions.push_back({m.procs[c.members[j].proc].rank, double(cnt) / double(run)});
      if (j == i) late_here = cnt;
    }
    std::vector<int64_t> others;
    for (size_t j = 0; j < n; ++j)
      if (j != i) others.push_back(medians[j]);
    const int64_t typical = median_of(others);
    if (medians[i] < kMinLateNs ||
        double(medians[i]) < kMinRatio * double(std::max<int64_t>(typical, 1)))
      continue;
    Straggler s;
    s.comm = ci;
    s.member = int(i);
    s.rank = m.procs[c.members[i].proc].rank;
    s.collectives = run;
    s.late = late_here;
    s.median_late = medians[i];
    s.others_late = typical;
    s.first_seq = a.seqs[from];
    s.last_seq = a.seqs.back();
    Arrivals tail;
    tail.t.assign(a.t.begin() + long(from), a.t.end());
    tail.sig.assign(a.sig.begin() + long(from), a.sig.end());
    s.step = step_of(tail, i);
    const Proc& p = m.procs[c.members[i].proc];
    const uint32_t sig = a.sig.back()[i];
    if (sig < p.sigs.size()) s.op = p.sigs[sig].op;
    s.member_fraction = std::move(fractions);
    out.push_back(std::move(s));
  }
  return out;
}

// The straggler's GPU's throttle reasons that slow its clocks, from the dump set's NVML health.
std::vector<std::string> throttling(const Model& m, int rank) {
  static const char* const kSlowing[] = {"HwSlowdown", "HwThermalSlowdown", "HwPowerBrakeSlowdown",
                                         "SwThermalSlowdown", "SwPowerCap"};
  std::vector<std::string> out;
  auto it =
      std::find_if(m.procs.begin(), m.procs.end(), [&](const Proc& p) { return p.rank == rank; });
  if (it == m.procs.end()) return out;
  for (const auto& node : m.gpus) {
    if (node.node != it->host) continue;
    for (const auto& g : node.gpus) {
      if (std::find(g.pids.begin(), g.pids.end(), it->pid) == g.pids.end()) continue;
      for (const auto& t : g.throttle_names)
        if (std::find(std::begin(kSlowing), std::end(kSlowing), t) != std::end(kSlowing))
          out.push_back(t);
    }
  }
  return out;
}

std::string ms_text(int64_t ns) {
  char b[32];
  const double ms = double(ns) / 1e6;
  std::snprintf(b, sizeof b, ms >= 10 ? "%.0f ms" : ms >= 1 ? "%.1f ms" : "%.2f ms", ms);
  return b;
}

Finding finding_of(const Model& m, const Straggler& s) {
  const Comm& c = m.comms[s.comm];
  const CommRef ref = comm_ref(c);
  const std::string comm_word = ref.name.empty() ? "communicator " + ref.id : ref.name;
  const double fraction = double(s.late) / double(s.collectives);
  const std::vector<std::string> throttle = throttling(m, s.rank);
  const bool gpu = !throttle.empty();
  std::string text =
      "slow " + std::string(gpu ? "GPU" : "host") + ": rank " + std::to_string(s.rank) +
      " arrives last at " + std::to_string(int(std::lround(100 * fraction))) + "% of " + comm_word +
      " collectives (" + std::to_string(s.late) + " of the latest " +
      std::to_string(s.collectives) + ", since #" + std::to_string(s.first_seq) + "), " +
      ms_text(s.median_late) + " late on median (others " + ms_text(s.others_late) + ")";
  json slow = {{"cause", gpu ? "gpu" : "host"}, {"late_share", fraction},
               {"collectives", s.collectives},  {"since_seq", s.first_seq},
               {"value_ns", s.median_late},     {"others_ns", s.others_late}};
  double factor = 0;
  if (s.step > 0) {
    // Without the straggler the others would not wait: its lateness comes off every step.
    const int64_t without = std::max<int64_t>(s.step - s.median_late, s.step / 100 + 1);
    factor = double(s.step) / double(without);
    const double loss = 100.0 * double(s.step - without) / double(s.step);
    char b[96];
    std::snprintf(b, sizeof b, "; a step takes %s with it and about %s without (%.0f%% lost)",
                  ms_text(s.step).c_str(), ms_text(without).c_str(), loss);
    text += b;
    slow["step_ns"] = s.step;
    slow["step_without_ns"] = without;
    slow["loss_percent"] = std::round(loss * 10) / 10;
  }
  slow["factor"] = std::round(factor * 100) / 100;
  if (gpu) {
    std::string names;
    for (const auto& t : throttle) names += (names.empty() ? "" : ", ") + t;
    text += "; NVML: its GPU's clocks are throttled (" + names + ")";
    slow["nvml_throttle"] = throttle;
  }
  Finding f;
  f.kind = VerdictKind::kSlow;
  f.summary = text;
  f.comm = ref;
  f.seq = s.last_seq;
  f.seq_kind = "coll";
  f.op = fr::log::op_name(s.op);
  f.culprit_ranks = {s.rank};
  f.details["slow"] = slow;
  f.evidence = json::array();
  for (const auto& [rank, frac] : s.member_fraction)
    f.evidence.push_back({{"rank", rank}, {"late_share", std::round(frac * 1000) / 1000}});
  return f;
}

}  // namespace

std::vector<Finding> find_slow(const AnalysisState& state) {
  const Model& m = state.model;
  // Per straggler rank one finding, on the communicator that shows it best: a named one (the
  // sentence reads "of dp collectives"), then the one with the most collectives measured, then
  // the most consistent.
  auto rank_of = [&](const Straggler& s) {
    return std::make_tuple(!m.comms[s.comm].name.empty(), s.collectives, s.late);
  };
  std::map<int, Straggler> best;
  for (size_t ci = 0; ci < m.comms.size(); ++ci) {
    if (!state.opts.comm.empty() && !comm_matches(m.comms[ci], state.opts.comm)) continue;
    for (Straggler& s : stragglers_on(m, int(ci))) {
      auto it = best.find(s.rank);
      if (it == best.end() || rank_of(s) > rank_of(it->second)) best[s.rank] = std::move(s);
    }
  }
  std::vector<Finding> out;
  for (const auto& [rank, s] : best)
    if (state.rank_filter.empty() || state.rank_filter.count(rank)) out.push_back(finding_of(m, s));
  return out;
}

}  // namespace fr::analyzer
