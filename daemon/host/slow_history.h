// The node's memory of what its heartbeats said for fail-slow judging (#38): per watched process,
// the last NodeSlowHistory::kMaxSamples heartbeats' summaries (the collectives each reported new,
// with their kernel times where known, whether an op was in flight on the GPU, and the proxy-step
// timings with the senders' states). The coordinator judges these live; a node dump writes them
// as <node>.slow_history.json (log/slow_history.h) so that fr-analyze judges the same after the
// fact. Bounded: samples per process, processes (the longest unheard of is forgotten first),
// communicators, collectives and links per sample. Safe to call from any thread.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "daemon/base/model.h"
#include "log/slow_history.h"

namespace fr::daemon {

class SlowHistory {
 public:
  explicit SlowHistory(size_t max_samples = fr::log::NodeSlowHistory::kMaxSamples,
                       size_t max_processes = fr::log::NodeSlowHistory::kMaxProcesses);

  // One heartbeat's processes, at the node's CLOCK_REALTIME. Processes no longer alive add
  // nothing (their summaries stand still).
  void add(const std::vector<ProcessReport>& procs, int64_t real_ns);
  // What it holds, for a dump.
  fr::log::NodeSlowHistory snapshot(const std::string& node, int64_t real_ns) const;
  // The snapshot as the dump's file (log/slow_history.h), within `max_bytes` (what a reader
  // takes): past it, each process's older half of the samples is left out until it fits. Empty
  // while no process has a sample (nothing heard yet: no file).
  std::string text(const std::string& node, int64_t real_ns,
                   size_t max_bytes = fr::log::NodeSlowHistory::kMaxFileBytes) const;

 private:
  struct Proc {
    int rank = -1, pid = 0;
    uint64_t last_turn = 0;
    std::map<uint64_t, uint64_t> last_seq;   // per communicator: the newest collective kept
    std::map<uint64_t, uint64_t> last_mark;  // ... and the newest one whose GPU times are kept
    std::deque<fr::log::HistorySample> samples;
  };
  fr::log::HistorySample sample_of(const ProcessReport& p, int64_t real_ns, Proc* proc) const;

  size_t max_samples_, max_processes_;
  mutable std::mutex mu_;
  uint64_t turn_ = 0;
  std::map<std::string, Proc> procs_;  // by flight-log file name
};

}  // namespace fr::daemon
