// See slow_history.h.
#include "daemon/host/slow_history.h"

#include <algorithm>

#include "common/slow_rule.h"

namespace fr::daemon {

SlowHistory::SlowHistory(size_t max_samples, size_t max_processes)
    : max_samples_(max_samples), max_processes_(max_processes) {}

fr::log::HistorySample SlowHistory::sample_of(const ProcessReport& p, int64_t real_ns,
                                              Proc* proc) const {
  using fr::log::NodeSlowHistory;
  fr::log::HistorySample s;
  s.time_ns = real_ns;
  for (const CommProgress& c : p.comms) {
    if (s.comms.size() >= NodeSlowHistory::kMaxComms) break;
    fr::log::HistoryComm hc;
    hc.id = c.comm_id;
    hc.rank = c.rank;
    hc.size = c.size;
    hc.busy = c.enqueued > c.completed;
    // Only what is new since the previous sample, as the coordinator learns it: each collective
    // once, with the kernel time the summary gave it when first seen.
    uint64_t& last = proc->last_seq[c.comm_id];
    for (const CollTiming& t : c.recent)
      if (t.seq > last && hc.colls.size() < NodeSlowHistory::kMaxColls)
        hc.colls.push_back({t.seq, t.op, t.call_ns, t.gpu_ns});
    if (!hc.colls.empty()) last = hc.colls.back().seq;
    // Sampled GPU times, once each, when first known: a collective's often in a later heartbeat
    // than the collective (its GPU had not finished it). A stream finishes its collectives in
    // order, so the newest timed one marks what is kept.
    uint64_t& marked = proc->last_mark[c.comm_id];
    for (const CollTiming& t : c.recent)
      if (t.seq > marked && fr::slow::marks_timed(t.gpu_start_ns, t.gpu_end_ns) &&
          hc.marks.size() < NodeSlowHistory::kMaxColls)
        hc.marks.push_back({t.seq, t.gpu_start_ns, t.gpu_end_ns});
    if (!hc.marks.empty()) marked = hc.marks.back().seq;
    s.comms.push_back(std::move(hc));
  }
  for (const LinkTiming& l : p.links) {
    if (s.links.size() >= NodeSlowHistory::kMaxLinks) break;
    s.links.push_back(
        {l.comm_id, l.channel, l.peer, l.send, l.op_seq, l.steps, l.step_ns, l.state});
  }
  return s;
}

void SlowHistory::add(const std::vector<ProcessReport>& procs, int64_t real_ns) {
  std::lock_guard<std::mutex> lk(mu_);
  ++turn_;
  for (const ProcessReport& p : procs) {
    if (!p.alive || p.comms.empty()) continue;
    auto it = procs_.find(p.log);
    if (it == procs_.end()) {
      if (procs_.size() >= max_processes_) {
        auto oldest = std::min_element(
            procs_.begin(), procs_.end(),
            [](const auto& a, const auto& b) { return a.second.last_turn < b.second.last_turn; });
        procs_.erase(oldest);
      }
      it = procs_.emplace(p.log, Proc{}).first;
    }
    Proc& proc = it->second;
    proc.rank = p.rank;
    proc.pid = p.pid;
    proc.last_turn = turn_;
    proc.samples.push_back(sample_of(p, real_ns, &proc));
    while (proc.samples.size() > max_samples_) proc.samples.pop_front();
  }
}

fr::log::NodeSlowHistory SlowHistory::snapshot(const std::string& node, int64_t real_ns) const {
  std::lock_guard<std::mutex> lk(mu_);
  fr::log::NodeSlowHistory h;
  h.node = node;
  h.time_ns = real_ns;
  for (const auto& [log, proc] : procs_) {
    fr::log::ProcessHistory p;
    p.rank = proc.rank;
    p.pid = proc.pid;
    p.log = log;
    p.samples.assign(proc.samples.begin(), proc.samples.end());
    h.processes.push_back(std::move(p));
  }
  return h;
}

std::string SlowHistory::text(const std::string& node, int64_t real_ns, size_t max_bytes) const {
  fr::log::NodeSlowHistory h = snapshot(node, real_ns);
  if (h.processes.empty()) return "";
  for (;;) {
    std::string t = fr::log::slow_history_to_text(h);
    bool any = false;
    for (auto& p : h.processes) {
      any |= !p.samples.empty();
      p.samples.erase(p.samples.begin(), p.samples.begin() + long((p.samples.size() + 1) / 2));
    }
    if (t.size() <= max_bytes || !any) return t;
  }
}

}  // namespace fr::daemon
