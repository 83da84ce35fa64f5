// SlowFinding's names and the evidence an operator reads (slow_detector.h).
#include <cstdio>
#include <string>

#include "daemon/logic/slow_detector.h"

namespace fr::daemon {

namespace {

std::string ms(int64_t ns) {
  char b[32];
  std::snprintf(b, sizeof b, ns >= 10'000'000 || ns <= -10'000'000 ? "%.0f ms" : "%.1f ms",
                double(ns) / 1e6);
  return b;
}

std::string times(double f) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1fx", f);
  return b;
}

std::string percent(double share) {
  char b[16];
  std::snprintf(b, sizeof b, "%.0f%%", 100 * share);
  return b;
}

}  // namespace

const char* slow_cause_name(SlowCause c) {
  switch (c) {
    case SlowCause::kHost: return "host";
    case SlowCause::kGpu: return "gpu";
    case SlowCause::kLink: return "link";
  }
  return "host";
}

std::string SlowFinding::key() const {
  std::string k = std::string(slow_cause_name(cause)) + ":";
  if (cause == SlowCause::kLink) return k + std::to_string(peer_rank) + "->" + std::to_string(rank);
  return k + std::to_string(rank);
}

std::string SlowFinding::subject() const {
  return cause == SlowCause::kLink ? key() : "rank:" + std::to_string(rank);
}

double SlowFinding::loss_percent() const {
  if (step_ns <= 0 || step_without_ns <= 0 || step_without_ns >= step_ns) return 0;
  return 100.0 * double(step_ns - step_without_ns) / double(step_ns);
}

std::string SlowFinding::evidence() const {
  char hex[40];
  std::snprintf(hex, sizeof hex, "communicator 0x%llx", static_cast<unsigned long long>(comm_id));
  const std::string comm = comm_name.empty() ? std::string(hex) : comm_name;
  std::string e;
  char pct[48];
  std::snprintf(pct, sizeof pct, "%.0f%%", 100 * share);
  switch (cause) {
    case SlowCause::kHost:
      e = "rank " + std::to_string(rank) + " arrives late at " + pct + " of " + comm +
          " collectives, " + ms(value_ns) + " late on median (others " + ms(others_ns) + ")";
      if (gpu_timed && gpu_sampled)
        e += ": its host is slow (its GPU's time per collective, from the stream's progress "
             "markers the node samples, is as its peers')";
      else if (gpu_timed)
        e += ": its host is slow";
      else if (peers_busy_share > 0)
        e += ": its host is slow (its GPU has a collective of it in flight at " +
             percent(busy_share) + " of the heartbeats, its peers' at " +
             percent(peers_busy_share) + ": its GPU is done and waits for its host)";
      else
        e += ": its host calls late (no kernel times here: a slower GPU that its host waits for "
             "would look the same)";
      break;
    case SlowCause::kGpu:
      if (peers_busy_share > 0) {
        e = "rank " + std::to_string(rank) + "'s GPU holds up its host: it arrives late at " + pct +
            " of " + comm + " collectives, " + ms(value_ns) + " late on median (others " +
            ms(others_ns) + "), yet a collective of it is still in flight on its GPU at " +
            percent(busy_share) + " of the heartbeats, as often as its peers' are at " +
            percent(peers_busy_share) + ", who wait for it (no kernel times here: the " +
            "GPU's progress counters say it is behind, not how much slower it runs)";
        break;
      }
      e = "rank " + std::to_string(rank) + "'s GPU takes " + times(factor) +
          " the others' time for the same collectives on " + comm + " (median " + ms(value_ns) +
          " vs " + ms(others_ns) + ")";
      if (gpu_sampled)
        e += "; GPU times from the stream's progress markers, sampled by the node: from when the "
             "last member's GPU reached each collective to when this one finished it";
      else
        e += "; GPU times from the profiler's kernel channels";
      break;
    case SlowCause::kLink:
      e = "channel " + std::to_string(channel) + "'s rank " + std::to_string(peer_rank) +
          " -> rank " + std::to_string(rank) + " steps take " + times(factor) + " the others on " +
          comm + " (" + ms(value_ns) + " per step vs " + ms(others_ns) + ")";
      if (share > 0)
        e += std::string(", its sender on the wire at ") + pct +
             " of the heartbeats (the other links wait for it)";
      break;
  }
  if (!nvml_throttle.empty())
    e += "; NVML: clocks throttled (" + throttle_words(nvml_throttle) + ")";
  if (step_ns > 0 && step_without_ns > 0 && step_without_ns < step_ns) {
    char b[160];
    std::snprintf(b, sizeof b,
                  "; the job loses %.0f%% of its time: %s between collectives with it, about "
                  "%s without",
                  loss_percent(), ms(step_ns).c_str(), ms(step_without_ns).c_str());
    e += b;
  }
  return e;
}

}  // namespace fr::daemon
