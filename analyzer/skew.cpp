// Skew: how late each rank arrives at the collectives every member of a communicator has on
// record, measured against the first member to arrive. The per-rank table goes into the
// document as `skew`; ranks that arrive much later than the typical rank are reported as a
// straggler finding (kind "skew"), which stands on its own and is never the verdict.
#include <algorithm>
#include <cstdio>

#include "passes.h"

namespace fr::analyzer {
namespace {

using nlohmann::json;

struct Lateness {
  double sum = 0;
  int64_t max = 0;
  uint64_t n = 0;
};

// From the members' collective histories (kept whole when old records are left out); `acc` is
// indexed like Model::procs, one process per rank.
void accumulate(const Model& m, const Comm& c, std::vector<Lateness>* acc) {
  if (c.members.size() < 2) return;
  auto history = [&](const CommMember& mem) -> const CollHistory& {
    return m.procs[mem.proc].comms[mem.pc].history;
  };
  uint64_t lo = UINT64_MAX, hi = 0;
  size_t total = 0;
  for (const auto& mem : c.members) {
    uint64_t l, h;
    size_t n;
    if (history(mem).range(&l, &h, &n)) lo = std::min(lo, l), hi = std::max(hi, h);
    total += m.procs[mem.proc].comms[mem.pc].ops_total;
  }
  if (lo > hi) return;
  const uint64_t cap = std::max<uint64_t>(4 * total + 1024, 1 << 16);
  if (hi - lo + 1 > cap) lo = hi - cap + 1;
  std::vector<int64_t> first(hi - lo + 1, INT64_MAX);
  std::vector<uint32_t> seen(hi - lo + 1, 0);
  for (const auto& mem : c.members) {
    const Proc& p = m.procs[mem.proc];
    history(mem).for_each([&](uint64_t seq, uint64_t call_ns, uint32_t) {
      if (seq < lo) return;
      first[seq - lo] = std::min(first[seq - lo], aligned(p, call_ns));
      ++seen[seq - lo];
    });
  }
  const uint32_t all = static_cast<uint32_t>(c.members.size());
  for (const auto& mem : c.members) {
    const Proc& p = m.procs[mem.proc];
    Lateness& a = (*acc)[mem.proc];
    history(mem).for_each([&](uint64_t seq, uint64_t call_ns, uint32_t) {
      // Only collectives every member has on record.
      if (seq < lo || seen[seq - lo] != all) return;
      const int64_t late = aligned(p, call_ns) - first[seq - lo];
      a.sum += static_cast<double>(late);
      a.max = std::max(a.max, late);
      ++a.n;
    });
  }
}

struct Row {
  int rank;
  double mean;
  int64_t max;
  uint64_t n;
};

SkewRow row_of(const Row& r) { return {r.rank, static_cast<int64_t>(r.mean), r.max, r.n}; }

json row_json(const Row& r) {
  return {{"rank", r.rank},
          {"mean_late_ns", static_cast<int64_t>(r.mean)},
          {"max_late_ns", r.max},
          {"collectives", r.n}};
}

// A straggler: arrives late by a millisecond or more on average, and several times later than
// the typical rank. None when there is none.
std::optional<Finding> straggler(const std::vector<Row>& rows, bool clock_aligned) {
  if (rows.size() < 2) return std::nullopt;
  std::vector<double> means;
  for (const auto& r : rows) means.push_back(r.mean);
  std::nth_element(means.begin(), means.begin() + means.size() / 2, means.end());
  const double median = means[means.size() / 2];
  const double top = rows.front().mean;
  if (top < 1e6 || top < 3 * median) return std::nullopt;
  std::vector<int> slow;
  for (const auto& r : rows)
    if (r.mean >= top / 2 && r.mean >= 3 * median) slow.push_back(r.rank);
  char buf[96];
  std::snprintf(buf, sizeof buf, "%.1f ms late on average (max %.1f ms; typical rank %.2f ms)",
                top / 1e6, static_cast<double>(rows.front().max) / 1e6, median / 1e6);
  Finding f;
  f.kind = VerdictKind::kSkew;
  f.summary = "straggler: " + ranks_word(slow.size()) + rank_list_text(slow) + " arrive" +
              (slow.size() > 1 ? "" : "s") + " last at collectives, " + buf +
              (clock_aligned ? "" : " (times per host)");
  f.culprit_ranks = slow;
  f.evidence = json::array();
  for (const auto& r : rows)
    if (std::find(slow.begin(), slow.end(), r.rank) != slow.end())
      f.evidence.push_back(row_json(r));
  return f;
}

}  // namespace

SkewResult measure_skew(const AnalysisState& state) {
  const Model& m = state.model;
  std::vector<Lateness> acc(m.procs.size());
  for (const auto& c : m.comms) accumulate(m, c, &acc);
  std::vector<Row> rows;
  for (size_t i = 0; i < acc.size(); ++i)
    if (acc[i].n)
      rows.push_back(
          {m.procs[i].rank, acc[i].sum / static_cast<double>(acc[i].n), acc[i].max, acc[i].n});
  std::sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) {
    return a.mean != b.mean ? a.mean > b.mean : a.rank < b.rank;
  });
  SkewResult out;
  for (const auto& r : rows)
    if (state.rank_filter.empty() || state.rank_filter.count(r.rank))
      out.table.push_back(row_of(r));
  out.straggler = straggler(rows, m.clock_aligned);
  return out;
}

}  // namespace fr::analyzer
