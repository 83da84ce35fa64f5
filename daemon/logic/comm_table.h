// The coordinator's communicators (a part of CoordinatorState, coordinator.h): what the
// heartbeats teach of each communicator and NIXL agent pair (stall.h's CommModel: latency, gap,
// who waits), the stall threshold that follows, and the slow-rank findings its members show.
// A node's members (one track per process and communicator) live with the node (node_table.h)
// and are handed in at each heartbeat; the models they feed live here.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "daemon/base/model.h"
#include "daemon/logic/coordinator_types.h"
#include "daemon/logic/stall.h"

namespace fr::daemon {

class CommTable {
 public:
  // The stall policy comes from cfg's stall_* fields; the bounds from max_comm_models,
  // max_members_per_node and max_findings.
  explicit CommTable(const CoordinatorConfig& cfg);

  const StallPolicy& policy() const { return policy_; }
  // What was learned of a communicator (null: nothing yet), and its threshold now.
  const CommModel* model(uint64_t comm_id) const;
  int64_t stall_threshold_ns(uint64_t comm_id) const;
  size_t size() const { return models_.size(); }

  // Learns from one heartbeat of node `node` (its whole report, before anything is cut from it):
  // *members are that node's tracks, replaced by the new ones. A member that looks slow for a
  // while becomes a finding.
  void learn(const std::string& node, std::vector<MemberTrack>* members, const NodeReport& report,
             int64_t now_mono);
  // The node's members leave their communicators (the node is lost or forgotten).
  void drop_members(std::vector<MemberTrack>* members);
  // Communicators no member reported for forget_after_ns are forgotten.
  void forget(int64_t now_mono);

  // Slow-rank findings: inactive once not seen for ten heartbeat intervals. age_findings appends
  // the lines to log (those about findings that changed since the last call too).
  const std::vector<Finding>& findings() const { return findings_; }
  void age_findings(int64_t now_mono, std::vector<std::string>* log);
  // Whether the findings changed since the last call (findings.json is to be written again).
  bool take_findings_dirty();
  nlohmann::json findings_json() const;

 private:
  void note_slow(const std::string& node, const MemberTrack& m, const CommModel& model,
                 int64_t now_mono);

  CoordinatorConfig cfg_;
  StallPolicy policy_;
  std::unordered_map<uint64_t, CommModel> models_;
  // learn()'s scratch space, kept between heartbeats.
  std::vector<MemberTrack> next_members_;
  std::vector<char> members_kept_;
  std::vector<Finding> findings_;
  bool findings_dirty_ = false;
  std::vector<std::string> pending_log_;
};

}  // namespace fr::daemon
