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
// arrived its median lateness sooner: step - lateness. The cause is `host` unless the nodes'
// heartbeat history (slow_history.cpp) shows the straggler's kernels slower than its peers', or
// its GPU in flight as often as theirs while they wait for it, or its GPU reports clock throttling
// in the dump set's NVML health (then `gpu`): a flight log holds when each op was called and how
// far its GPU got, not how long the GPU worked on it. The history also gives findings of its own:
// a GPU whose host is not late, and a slow link (not blamed where a straggler sits on it).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <tuple>

#include "common/slow_rule.h"
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

// Where a GPU finding's times came from, for its text.
const char* gpu_source(const HistoryGpu& g) {
  return g.op_sampled ? "GPU times from the stream's progress markers, sampled by the node: from "
                        "when the last member's GPU reached each collective to when this one "
                        "finished it"
                      : "GPU times from the profiler's kernel channels";
}

// What the heartbeat histories add to a straggler: its GPU times against its peers' (slow:
// `kern`; judged and clearly not slow: `clear`), else its GPU's progress counters; the cause
// they give, in the finding's text and JSON.
bool add_history(const Model& m, const Straggler& s, const HistoryGpu* kern,
                 const HistoryGpu* clear, std::string* text, json* slow) {
  if (kern != nullptr) {
    char b[200];
    std::snprintf(b, sizeof b,
                  "; its GPU takes %.1fx its peers' time for the same %s (median %s vs %s; ",
                  kern->ratio, fr::log::op_name(uint16_t(kern->op)),
                  ms_text(kern->value_ns).c_str(), ms_text(kern->others_ns).c_str());
    *text += b + std::string(gpu_source(*kern)) + ")";
    (*slow)["gpu"] = {{"ratio", std::round(kern->ratio * 100) / 100},
                      {"value_ns", kern->value_ns},
                      {"others_ns", kern->others_ns},
                      {kern->op_sampled ? "sampled_times" : "kernel_times", kern->samples}};
    (*slow)["gpu_sampled"] = kern->op_sampled;
    return true;
  }
  if (clear != nullptr) {
    char b[120];
    std::snprintf(b, sizeof b,
                  "; its host is slow: its GPU's time per collective is as its peers' (%.1fx, ",
                  clear->max_ratio);
    *text += b;
    *text += clear->sampled ? "from the stream's progress markers, sampled by the node)"
                            : "from the profiler's kernel channels)";
    (*slow)["gpu"] = {{"ratio", std::round(clear->max_ratio * 100) / 100}};
    (*slow)["gpu_sampled"] = clear->sampled;
    return false;
  }
  const HistoryBusy busy = history_busy(m, s.rank, m.comms[s.comm].id, s.first_seq);
  if (!busy.judged) return false;
  char b[240];
  std::snprintf(
      b, sizeof b,
      "; its GPU had a collective in flight at %.0f%% of the heartbeats since, its peers' "
      "at %.0f%% (%s)",
      100 * busy.share, 100 * busy.peers,
      busy.gpu ? "they wait for it: its host waits for its GPU"
               : "its GPU is done and waits for its host");
  *text += b;
  (*slow)["busy_share"] = std::round(busy.share * 1000) / 1000;
  (*slow)["peers_busy_share"] = std::round(busy.peers * 1000) / 1000;
  return busy.gpu;
}

Finding finding_of(const Model& m, const Straggler& s, const HistoryGpu* kern,
                   const HistoryGpu* clear) {
  const Comm& c = m.comms[s.comm];
  const CommRef ref = comm_ref(c);
  const std::string comm_word = ref.name.empty() ? "communicator " + ref.id : ref.name;
  const double fraction = double(s.late) / double(s.collectives);
  const std::vector<std::string> throttle = throttling(m, s.rank);
  std::string evidence;
  json slow_extra = json::object();
  const bool history_gpu = add_history(m, s, kern, clear, &evidence, &slow_extra);
  const bool gpu = history_gpu || !throttle.empty();
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
  text += evidence;
  slow.update(slow_extra);
  if (kern != nullptr) factor = kern->ratio;  // as the live finding: its kernels against its peers'
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

const Comm* comm_by_id(const Model& m, uint64_t id) {
  for (const auto& c : m.comms)
    if (c.id == id) return &c;
  return nullptr;
}

// A finding of the heartbeat history alone (a GPU whose host is not late, or a link).
Finding history_finding(const Model& m, uint64_t comm, const std::string& text, json slow) {
  Finding f;
  f.kind = VerdictKind::kSlow;
  const Comm* c = comm_by_id(m, comm);
  if (c != nullptr) f.comm = comm_ref(*c);
  f.summary = text + " (from the nodes' heartbeat history)";
  slow["source"] = "heartbeat_history";
  f.details["slow"] = std::move(slow);
  return f;
}

std::string comm_word(const Model& m, uint64_t id) {
  const Comm* c = comm_by_id(m, id);
  if (c != nullptr && !c->name.empty()) return c->name;
  char b[40];
  std::snprintf(b, sizeof b, "communicator 0x%llx", static_cast<unsigned long long>(id));
  return b;
}

Finding gpu_finding(const Model& m, const HistoryGpu& g) {
  char b[256];
  std::snprintf(
      b, sizeof b,
      "slow GPU: rank %d's GPU takes %.1fx its peers' time for the same %s on %s (median %s vs %s)",
      g.rank, g.ratio, fr::log::op_name(uint16_t(g.op)), comm_word(m, g.comm).c_str(),
      ms_text(g.value_ns).c_str(), ms_text(g.others_ns).c_str());
  Finding f = history_finding(m, g.comm, b + std::string("; ") + gpu_source(g),
                              {{"cause", "gpu"},
                               {"factor", std::round(g.ratio * 100) / 100},
                               {"value_ns", g.value_ns},
                               {"others_ns", g.others_ns},
                               {"gpu_sampled", g.op_sampled},
                               {g.op_sampled ? "sampled_times" : "kernel_times", g.samples}});
  f.op = fr::log::op_name(uint16_t(g.op));
  f.culprit_ranks = {g.rank};
  const std::vector<std::string> throttle = throttling(m, g.rank);
  if (!throttle.empty()) {
    std::string names;
    for (const auto& t : throttle) names += (names.empty() ? "" : ", ") + t;
    f.summary += "; NVML: its GPU's clocks are throttled (" + names + ")";
    f.details["slow"]["nvml_throttle"] = throttle;
  }
  return f;
}

Finding link_finding(const Model& m, const HistoryLink& l) {
  char b[320];
  int n = std::snprintf(
      b, sizeof b,
      "slow link: channel %d's rank %d -> rank %d steps take %.1fx the others on %s (%s per step vs %s)",
      l.channel, l.src, l.dst, l.factor, comm_word(m, l.comm).c_str(), ms_text(l.value_ns).c_str(),
      ms_text(l.others_ns).c_str());
  if (l.share > 0 && n > 0 && size_t(n) < sizeof b)
    std::snprintf(
        b + n, sizeof b - size_t(n),
        ", its sender on the wire at %.0f%% of the heartbeats, the other senders at %.0f%% (they wait for it)",
        100 * l.share, 100 * l.others_share);
  json slow = {{"cause", "link"},
               {"factor", std::round(l.factor * 100) / 100},
               {"value_ns", l.value_ns},
               {"others_ns", l.others_ns},
               {"samples", l.sampled}};
  if (l.share > 0) slow["share"] = std::round(l.share * 1000) / 1000;
  Finding f = history_finding(m, l.comm, b, std::move(slow));
  f.culprit_ranks = {l.src, l.dst};
  f.details["where"] = {{"channel", l.channel}, {"waiting_rank", l.dst}, {"peer_rank", l.src}};
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
  // The heartbeat histories (when the dump set has them): kernel times and link samples.
  auto wanted = [&](uint64_t comm, std::initializer_list<int> ranks) {
    if (!state.opts.comm.empty()) {
      const Comm* c = comm_by_id(m, comm);
      if (c == nullptr || !comm_matches(*c, state.opts.comm)) return false;
    }
    if (state.rank_filter.empty()) return true;
    return std::any_of(ranks.begin(), ranks.end(),
                       [&](int r) { return state.rank_filter.count(r) > 0; });
  };
  std::map<int, HistoryGpu> kernels;  // per rank, its slowest
  std::vector<HistoryGpu> judged;
  for (const HistoryGpu& g : history_gpus(m, &judged))
    if (wanted(g.comm, {g.rank}) && (!kernels.count(g.rank) || g.ratio > kernels[g.rank].ratio))
      kernels[g.rank] = g;
  // A straggler whose GPU times were judged on its communicator and are clearly not slow: its
  // host (as the live detector's gpu_clear).
  auto clear_on = [&](const Straggler& s) -> const HistoryGpu* {
    for (const HistoryGpu& g : judged)
      if (g.rank == s.rank && g.comm == m.comms[s.comm].id &&
          fr::slow::gpu_clear(g.max_ratio, g.max_bar, g.sampled))
        return &g;
    return nullptr;
  };
  std::vector<Finding> out;
  std::set<int> blamed;
  for (const auto& [rank, s] : best) {
    if (!state.rank_filter.empty() && !state.rank_filter.count(rank)) continue;
    auto k = kernels.find(rank);
    out.push_back(finding_of(m, s, k == kernels.end() ? nullptr : &k->second,
                             k == kernels.end() ? clear_on(s) : nullptr));
    blamed.insert(rank);
  }
  for (const auto& [rank, g] : kernels)
    if (blamed.insert(rank).second) out.push_back(gpu_finding(m, g));
  // A rank slow on its host or GPU slows every link it is on: those are not blamed. One finding
  // per link (sender, receiver), on the communicator that shows it best: a named one, then the
  // largest factor (the live detector names a link once too).
  auto named = [&](const HistoryLink& l) {
    const Comm* c = comm_by_id(m, l.comm);
    return std::make_pair(c != nullptr && !c->name.empty(), l.factor);
  };
  // As the live detector, the links into and out of a blamed rank's node are not blamed either
  // (its node's ranks fall behind forwarding to it), nor a link into the node of a slow link's
  // sender that was on the wire at most half as often (it waits for the slow link).
  auto node_of = [&](int rank) -> int {
    for (size_t i = 0; i < m.histories.size(); ++i)
      for (const auto& p : m.histories[i].processes)
        if (p.rank == rank) return int(i);
    return -1;
  };
  std::set<int> blamed_nodes;
  for (int r : blamed)
    if (int n = node_of(r); n >= 0) blamed_nodes.insert(n);
  const std::vector<HistoryLink> all = history_links(m);
  std::map<int, double> fed;  // node of a slow link's sender -> its highest share on the wire
  for (const HistoryLink& l : all)
    if (int n = node_of(l.src); n >= 0 && l.share > 0) fed[n] = std::max(fed[n], l.share);
  std::map<std::pair<int, int>, HistoryLink> links;
  for (const HistoryLink& l : all) {
    if (blamed.count(l.src) || blamed.count(l.dst) || !wanted(l.comm, {l.src, l.dst})) continue;
    const int from = node_of(l.src), to = node_of(l.dst);
    if (blamed_nodes.count(from) || blamed_nodes.count(to)) continue;
    if (auto f = fed.find(to);
        l.share > 0 && f != fed.end() && fr::slow::waits_for_slow_link(l.share, f->second))
      continue;
    auto it = links.find({l.src, l.dst});
    if (it == links.end() || named(l) > named(it->second)) links[{l.src, l.dst}] = l;
  }
  for (const auto& [_, l] : links) out.push_back(link_finding(m, l));
  return out;
}

}  // namespace fr::analyzer
