// The coordinator's fail-slow pass (#38): every heartbeat's timing summaries go to the detector
// (slow_detector.h); once a heartbeat interval it judges, and a new finding opens an incident of
// kind slow, one per finding (cause and rank or link) until it clears, which closes it. Its dump
// is the usual one (a copy of every log, every rank's stacks): nothing in the job stops.
#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <set>
#include <string>

#include "common/prometheus.h"
#include "daemon/base/names.h"
#include "daemon/logic/coordinator.h"
#include "daemon/logic/coordinator_helpers.h"
#include "log/json_fields.h"

namespace fr::daemon {

namespace coordinator_helpers {

StatusSlow slow_status(const SlowFinding& f) {
  StatusSlow s;
  s.cause = slow_cause_name(f.cause);
  s.factor = std::round(f.factor * 100) / 100;
  s.culprit_ranks = slow_culprits(f);
  s.comm = f.comm_id;
  s.comm_name = f.comm_name;
  s.evidence = f.evidence();
  s.value_ns = f.value_ns;
  s.others_ns = f.others_ns;
  s.step_ns = f.step_ns;
  s.step_without_ns = f.step_without_ns;
  s.loss_percent = std::round(f.loss_percent() * 10) / 10;
  if (f.cause == SlowCause::kHost) s.late_share = std::round(f.share * 1000) / 1000;
  // What the evidence is built from beyond the above, so a restarted coordinator says the same.
  s.share = f.share;
  s.kernel_timed = f.gpu_timed;
  s.gpu_sampled = f.gpu_sampled;
  if (f.peers_busy_share > 0) {
    s.busy_share = std::round(f.busy_share * 1000) / 1000;
    s.peers_busy_share = std::round(f.peers_busy_share * 1000) / 1000;
  }
  if (f.cause == SlowCause::kLink) s.where = StatusSlow::Where{f.rank, f.peer_rank, f.channel};
  s.nvml_throttle = f.nvml_throttle;
  return s;
}

nlohmann::json slow_json(const SlowFinding& f) { return slow_status(f); }

std::vector<int> slow_culprits(const SlowFinding& f) {
  if (f.cause == SlowCause::kLink) return {f.peer_rank, f.rank};
  return {f.rank};
}

std::optional<SlowFinding> slow_from_json(const nlohmann::json& j) {
  if (!j.is_object()) return std::nullopt;
  // A rank out of range is unknown (-1), never clamped into another rank.
  auto as_rank = [](const nlohmann::json& v) {
    int r = -1;
    return fr::log::read_value(v, &r, -1, 1 << 24) ? r : -1;
  };
  SlowFinding f;
  std::string cause;
  if (!fr::log::read_field(j, "cause", &cause)) return std::nullopt;
  bool known = false;
  for (SlowCause c : {SlowCause::kHost, SlowCause::kGpu, SlowCause::kLink})
    if (cause == slow_cause_name(c)) {
      f.cause = c;
      known = true;
    }
  if (!known) return std::nullopt;
  const nlohmann::json* culprits = fr::log::array_field(j, "culprit_ranks");
  if (culprits == nullptr || culprits->empty()) return std::nullopt;
  f.rank = as_rank(culprits->back());  // the rank; a link: its receiver, after its sender
  if (f.cause == SlowCause::kLink) {
    f.peer_rank = as_rank(culprits->front());
    if (const nlohmann::json* w = fr::log::object_field(j, "where"); w && w->contains("channel"))
      f.channel = as_rank((*w)["channel"]);
  }
  if (f.rank < 0) return std::nullopt;
  fr::log::read_field(j, "comm", &f.comm_id);
  if (std::string name; fr::log::read_field(j, "comm_name", &name))
    f.comm_name = printable(name, 256);
  constexpr double kMaxNs = 1e15;
  f.factor = fr::log::number_in(j, "factor", 0, 1e6, 1);
  f.share = fr::log::number_in(j, "share", 0, 1, 0);
  f.value_ns = int64_t(fr::log::number_in(j, "value_ns", -kMaxNs, kMaxNs, 0));
  f.others_ns = int64_t(fr::log::number_in(j, "others_ns", -kMaxNs, kMaxNs, 0));
  f.step_ns = int64_t(fr::log::number_in(j, "step_ns", 0, kMaxNs, 0));
  f.step_without_ns = int64_t(fr::log::number_in(j, "step_without_ns", 0, kMaxNs, 0));
  f.busy_share = fr::log::number_in(j, "busy_share", 0, 1, 0);
  f.peers_busy_share = fr::log::number_in(j, "peers_busy_share", 0, 1, 0);
  fr::log::read_field(j, "kernel_timed", &f.gpu_timed);
  fr::log::read_field(j, "gpu_sampled", &f.gpu_sampled);
  if (std::vector<std::string> names; fr::log::read_list(j, "nvml_throttle", &names, 8))
    for (const auto& n : names) f.nvml_throttle.push_back(printable(n, 32));
  return f;
}

std::string slow_metrics(const SlowDetector& d) {
  PrometheusText o;
  std::map<std::string, int> by_cause = {{"host", 0}, {"gpu", 0}, {"link", 0}};
  for (const auto& f : d.findings()) by_cause[slow_cause_name(f.cause)]++;
  o.family("frd_slow_findings", "gauge", "Ranks, GPUs and links found slow now, by cause.");
  for (const auto& [cause, n] : by_cause) o.sample("cause", cause, n);
  std::vector<SlowRankStat> ranks = d.rank_stats();
  std::sort(ranks.begin(), ranks.end(),
            [](const SlowRankStat& a, const SlowRankStat& b) { return a.late_ns > b.late_ns; });
  if (ranks.size() > kMaxSlowSeries) ranks.resize(kMaxSlowSeries);
  o.family("frd_rank_lateness_seconds", "gauge",
           "Median time a rank calls its collectives after the median rank.");
  for (const auto& r : ranks) o.sample("rank", std::to_string(r.rank), secs(r.late_ns));
  o.family("frd_rank_gpu_time_ratio", "gauge",
           "A rank's kernel time over its peers' median, same op.");
  for (const auto& r : ranks)
    if (r.gpu_ratio > 0) o.sample("rank", std::to_string(r.rank), r.gpu_ratio);
  std::vector<SlowLinkStat> links = d.link_stats();
  std::sort(links.begin(), links.end(),
            [](const SlowLinkStat& a, const SlowLinkStat& b) { return a.ratio > b.ratio; });
  if (links.size() > kMaxSlowSeries) links.resize(kMaxSlowSeries);
  auto sample = [&o](const SlowLinkStat& l, double value) {
    const std::string src = std::to_string(l.src), dst = std::to_string(l.dst),
                      ch = std::to_string(l.channel);
    o.sample({{"src", src}, {"dst", dst}, {"channel", ch}}, value);
  };
  o.family("frd_link_step_seconds", "gauge", "Mean proxy step time from one rank to another.");
  for (const auto& l : links) sample(l, secs(l.step_ns));
  o.family("frd_link_step_ratio", "gauge",
           "A link's step time over its communicator's median link.");
  for (const auto& l : links) sample(l, l.ratio);
  return o.take();
}

}  // namespace coordinator_helpers

using namespace coordinator_helpers;

void CoordinatorState::learn_slow(const Node& n, const NodeReport& report, int64_t now_mono) {
  const int64_t offset = n.clock.has_offset() ? n.clock.offset_ns() : 0;
  const uint64_t node = std::hash<std::string>{}(n.name) | 1;  // nonzero: known
  for (const auto& p : report.processes) {
    if (!p.alive || p.rank < 0) continue;
    for (const auto& c : p.comms)
      if (!c.recent.empty()) slow_.member(c, p.rank, offset, now_mono, node);
    if (!p.links.empty()) slow_.links(p, now_mono);
    slow_.throttle(p.rank, p.gpu_throttle);
  }
}

// How long a slow incident that cleared keeps its key from opening another.
constexpr int64_t kSlowReopenNs = 60'000'000'000;
// How long a slow incident recovered after a restart stays open without the detector finding it
// again, in heartbeat intervals: a host finding needs 8 collectives joined, half its window of 16,
// and 3 judgements in a row.
constexpr int64_t kSlowRecoveredHeartbeats = 30;

void CoordinatorState::slow_pass(int64_t now_mono, Actions* a) {
  if (now_mono < next_slow_judge_mono_) return;
  next_slow_judge_mono_ = now_mono + cfg_.heartbeat_interval_ns;
  slow_.judge(now_mono);
  const auto& found = slow_.findings();
  // An incident follows its finding, also when the GPU's progress counters revise its cause.
  auto finding = [&](const SlowFinding& of) -> const SlowFinding* {
    for (const auto& f : found)
      if (f.key() == of.key()) return &f;
    for (const auto& f : found)
      if (f.subject() == of.subject()) return &f;
    return nullptr;
  };
  // Open slow incidents: their evidence follows the finding; cleared, they close.
  for (auto& inc : incidents_) {
    if (inc.kind != IncidentKind::kSlow || !inc.slow || is_closed(inc.state)) continue;
    if (const SlowFinding* f = finding(*inc.slow)) {
      inc.slow = *f;
      continue;
    }
    if (inc.state != IncidentState::kOpen) continue;  // closed once its dump set stands
    // Recovered after a restart: the detector starts empty and needs its window to find it again.
    if (inc.recovered && inc.slow_grace_mono == 0)
      inc.slow_grace_mono = now_mono + kSlowRecoveredHeartbeats * cfg_.heartbeat_interval_ns;
    if (now_mono < inc.slow_grace_mono) continue;
    inc.state = IncidentState::kClosedTransient;
    inc.slow_cleared_mono = now_mono;
    a->log.push_back("frd coordinator: " + inc.id + " closed as transient: " + inc.slow->key() +
                     " no longer slow");
    persist(inc, a);
  }
  // One new slow incident at a time, and none while another incident collects or is analysed.
  for (const auto& inc : incidents_)
    if (inc.state == IncidentState::kCollecting || inc.state == IncidentState::kAnalyzing) return;
  // A finding is covered by a slow incident still open that names any of its ranks (a slow GPU
  // may also make its rank's links look slow: one straggler, one incident), and by one of its
  // own key that cleared less than kSlowReopenNs ago (a straggler at the edge of the threshold
  // flaps; the live finding shows meanwhile, the incident does not reopen).
  auto ranks_of = [](const SlowFinding& f) {
    std::set<int> r = {f.rank};
    if (f.cause == SlowCause::kLink) r.insert(f.peer_rank);
    return r;
  };
  for (const auto& f : found) {
    const std::set<int> ranks = ranks_of(f);
    const bool covered = std::any_of(incidents_.begin(), incidents_.end(), [&](const Incident& i) {
      if (i.kind != IncidentKind::kSlow || !i.slow) return false;
      if (!is_closed(i.state)) {
        for (int r : ranks_of(*i.slow))
          if (ranks.count(r)) return true;
        return false;
      }
      return i.slow->subject() == f.subject() && i.slow_cleared_mono != 0 &&
             now_mono - i.slow_cleared_mono < kSlowReopenNs;
    });
    if (covered) continue;
    open(IncidentKind::kSlow, f.evidence(), now_mono, a, nullptr, &f);
    return;
  }
}

}  // namespace fr::daemon
