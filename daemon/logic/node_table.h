// The coordinator's nodes (a part of CoordinatorState, coordinator.h): membership (who connected
// under which name and credentials, their sessions and upload keys), liveness (heartbeats, a node
// gone silent is lost, one lost for long and needed by no incident is forgotten), and what each
// node's last report shows: its live and dead ranks, its oldest op in flight (OldestOp), its
// processes without a flight log, and the report itself, kept within the bounds on memory.
//
// The detection summary of a node is derived at each heartbeat, so that tick() need not walk
// every process, and the table counts the nodes tick() must look at (stalled, with dead ranks).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "daemon/base/model.h"
#include "daemon/logic/clock.h"
#include "daemon/logic/comm_table.h"
#include "daemon/logic/coordinator_types.h"
#include "daemon/logic/stall.h"

namespace fr::daemon {

// A node's oldest op in flight among its live processes: the one furthest past (or nearest to)
// its communicator's stall threshold, as of its last report. A heartbeat resets age_ns,
// threshold_ns, rank and xfer; the rest stays as the last op found set it.
struct OldestOp {
  int64_t age_ns = 0;
  std::string log;
  uint64_t comm = 0;
  std::string comm_name;
  uint32_t op = 0;  // fr_op of that oldest op, and its sequence number
  uint64_t seq = 0;
  uint64_t completed = 0;
  int rank = -1;
  int pid = 0;
  std::optional<XferProgress> xfer;  // set when that oldest op is a NIXL transfer
  int64_t threshold_ns = 0;          // the threshold of that op's communicator

  // Past its threshold: the node is stalled.
  bool stalled() const { return age_ns > 0 && age_ns >= threshold_ns; }
};

struct Node {
  std::string name;
  std::string host;
  std::string principal;
  std::string upload_key;
  bool authenticated = false;
  uint64_t session = 0;
  bool connected = false;
  bool lost = false;
  int64_t connected_mono = 0;
  int64_t last_heartbeat_mono = 0;
  uint64_t heartbeats = 0;
  NodeReport last;
  ClockEstimator clock;
  // Derived at each heartbeat, so tick() does not walk every process.
  OldestOp oldest;
  int alive = 0;
  int world_size = -1;               // largest world size reported
  std::vector<MemberTrack> members;  // by key: what each (process, comm) showed last
  size_t retained = 0;               // estimated bytes of `last`
  bool trimmed = false;              // `last` lost detail to the bounds
  struct Dead {
    int64_t since = 0;  // mono time first seen dead (unclean)
    int rank = -1;
  };
  std::map<std::string, Dead> dead_since;  // log -> when it was first seen dead
  bool over_threshold = false;             // its oldest op is past its threshold (last report)
  bool has_dead = false;                   // dead_since is not empty
  int unrecorded = 0;                      // processes under fr-run without a flight log
  int torch_watched = 0;                   // of them, those torch's progress comes from
  int64_t torch_min_idle_ns = -1;          // the least idle of those; -1: none
};

class NodeTable {
 public:
  using Map = std::map<std::string, Node>;
  // Adds to *logs the flight logs of node `node` that an incident watches (kept whole when a
  // report is cut to the bounds).
  using WatchedLogs = std::function<void(const std::string& node, std::set<std::string>* logs)>;

  // Uses cfg's job_id (already sanitised), max_nodes, heartbeat_*, max_*_bytes, forget_after_ns
  // and expect_ranks.
  explicit NodeTable(const CoordinatorConfig& cfg);

  // Membership (CoordinatorState::connect says the rules).
  uint64_t connect(const std::string& node_name, const std::string& host, const std::string& job,
                   const PeerAuth& auth, int64_t now_mono, std::string* error);
  void disconnect(uint64_t session);
  Node* by_session(uint64_t session);
  const Node* find(const std::string& name) const;
  std::string upload_key(uint64_t session) const;
  std::vector<uint64_t> sessions() const;
  size_t connected() const;
  void clock_sample(uint64_t session, int64_t t1, int64_t t2, int64_t t3, int64_t t4);

  // A heartbeat in two steps: heard() marks the session's node alive and resets what the report
  // derives (null: unknown or stale session); take_report() derives it from *report (ranks,
  // dead ranks, the oldest op by comms' thresholds, the job's name), then keeps the report
  // within the bounds, swapping it with the node's previous one.
  Node* heard(uint64_t session, int64_t now_mono);
  void take_report(Node* n, NodeReport* report, int64_t now_mono, const CommTable& comms,
                   const WatchedLogs& watched);

  // Nodes silent for the heartbeat timeout are lost (their members leave comms); returns those
  // of them with live ranks. Cheap when no node can have timed out yet.
  std::vector<const Node*> mark_lost(int64_t now_mono, CommTable* comms,
                                     std::vector<std::string>* log);
  // Forgets nodes lost for forget_after_ns that `needed` does not hold. Walks at most once a
  // second; returns whether it walked.
  bool forget(int64_t now_mono, CommTable* comms,
              const std::function<bool(const std::string& node)>& needed);

  // What the nodes' last reports add up to.
  int expected_ranks() const;  // the configured count, else the largest world size seen
  int total_alive() const;     // live ranks on nodes not lost
  ProcessCounts process_counts() const;
  // The stall of a job whose processes all run without a flight log, torch's process groups
  // still for threshold_ns: the reason, or "" when not stalled (coordinator.h).
  std::string unrecorded_stall(int64_t threshold_ns) const;
  // Nodes whose last report shows an op past its threshold, or a dead rank.
  size_t over_threshold_nodes() const { return over_threshold_nodes_; }
  size_t dead_nodes() const { return dead_nodes_; }
  // The job's id as an authenticated node's live process named it; empty until then.
  const std::string& learned_job() const { return learned_job_; }

  size_t size() const { return nodes_.size(); }
  bool empty() const { return nodes_.empty(); }
  Map::const_iterator begin() const { return nodes_.begin(); }
  Map::const_iterator end() const { return nodes_.end(); }
  uint64_t heartbeats_total() const { return heartbeats_total_; }
  size_t retained_bytes() const { return retained_bytes_; }
  uint64_t reports_trimmed() const { return reports_trimmed_; }
  uint64_t nodes_forgotten() const { return nodes_forgotten_; }

 private:
  // Makes p's oldest op or NIXL transfer n's oldest when it is further past its threshold than
  // *worst_margin (the furthest so far), which it then updates.
  void take_oldest(Node& n, const ProcessReport& p, int64_t* worst_margin,
                   const CommTable& comms) const;
  // Sets n's unrecorded counts from its report, at each heartbeat.
  void note_unrecorded(Node& n, const NodeReport& report);
  // Keeps the counts of nodes that tick() must look at (stalled, with dead ranks) in step.
  void set_hints(Node& n, bool over_threshold, bool has_dead);
  // When a node last heard from at `heartbeat_mono` times out (saturated: a huge timeout is never).
  int64_t lost_at(int64_t heartbeat_mono) const {
    return heartbeat_mono > INT64_MAX - cfg_.heartbeat_timeout_ns
               ? INT64_MAX
               : heartbeat_mono + cfg_.heartbeat_timeout_ns;
  }

  CoordinatorConfig cfg_;
  Map nodes_;
  std::map<uint64_t, std::string> sessions_;
  uint64_t next_session_ = 1;
  std::string learned_job_;
  // Nodes whose last report shows an op past its threshold, or a dead rank: tick() walks the
  // nodes for detection only when there are some (a walk over 16k nodes costs milliseconds).
  size_t over_threshold_nodes_ = 0;
  size_t dead_nodes_ = 0;
  // A node ever reported processes without a flight log: tick() then looks for their stall.
  bool any_unrecorded_ = false;
  // No connected node can be past the heartbeat timeout before this (mark_lost walks then): the
  // earliest a node not lost times out, lowered by every connect and every node found again.
  int64_t next_lost_check_mono_ = INT64_MAX;
  int64_t last_forget_mono_ = 0;
  bool forget_walked_ = false;
  uint64_t heartbeats_total_ = 0;
  size_t retained_bytes_ = 0;
  uint64_t nodes_forgotten_ = 0;
  uint64_t reports_trimmed_ = 0;
};

}  // namespace fr::daemon
