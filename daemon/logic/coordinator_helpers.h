// Small helpers the coordinator's units share (its parts: node_table.cpp, comm_table.cpp,
// incident_book.cpp, upload_tracker.cpp, recovery.cpp; and the coordinator_*.cpp that compose
// them); nothing outside them includes this file.
#pragma once

#include <optional>

#include <sys/stat.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "daemon/base/status.h"
#include "daemon/logic/coordinator_types.h"
#include "daemon/logic/slow_detector.h"

namespace fr::daemon::coordinator_helpers {

inline bool is_dir(const std::string& p) {
  struct stat st;
  return stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

inline double secs(int64_t ns) { return double(ns) / 1e9; }

inline std::string hex_id(uint64_t v) {
  char b[24];
  std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(v));
  return b;
}

inline bool is_closed(IncidentState s) {
  return s == IncidentState::kClosed || s == IncidentState::kClosedTransient;
}

// A slow finding as incidents and the status give it (coordinator_slow.cpp): cause, factor,
// culprit ranks, for a link `where` (waiting_rank, peer_rank, channel), the evidence and the loss.
nlohmann::json slow_json(const SlowFinding& f);
StatusSlow slow_status(const SlowFinding& f);
// A slow-rank finding as the status and findings.json give it (coordinator_status.cpp).
StatusRankFinding finding_status(const Finding& f);
// Whom a slow finding names: the rank; for a link its sender, then its receiver.
std::vector<int> slow_culprits(const SlowFinding& f);
// A slow finding read back from slow_json (a recovered incident.json, untrusted: bounded, names
// checked); nullopt when it is not one.
std::optional<SlowFinding> slow_from_json(const nlohmann::json& j);
// The fail-slow series in Prometheus text: findings by cause, lateness and GPU time ratio per
// rank, step time and ratio per link (at most kMaxSlowSeries of each, the worst first).
inline constexpr size_t kMaxSlowSeries = 4096;
std::string slow_metrics(const SlowDetector& d);

}  // namespace fr::daemon::coordinator_helpers
