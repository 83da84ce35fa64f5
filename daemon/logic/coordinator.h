// The coordinator's state machine, free of any protocol: nodes connect, heartbeat and upload
// dumps through these calls; time passes through tick(). It decides when to open an incident
// (an op in flight past the stall threshold, a rank dead while others run, a node gone silent, a
// manual trigger), whom to ask for a dump, when the dump set is complete (or its deadline is
// over), and when an incident closes (as transient when the stalled ops complete). The gRPC
// service (server.h) is a thin adapter that locks a mutex around it and carries out the Actions.
//
// One incident is active at a time: while one is collecting, being analysed or still open (its
// condition persists), no new automatic incident is opened, so a hang gives one dump set, not a
// storm of them.
//
// Peers are not trusted: what a node's heartbeat leaves behind is bounded per node and in total
// (the detection summary is computed from the whole report first), nodes gone for a while and
// not part of an open incident are forgotten, status is paged, a name held by a live connection
// is not handed to a peer with other credentials, and a dump is taken only from the connection
// of the node that was asked (its upload key). Incidents are written to incident.json when they
// change, so a restarted coordinator recovers them as they were.
//
// It is composed of parts, each owning its data, with its own tests: the nodes (node_table.h:
// membership, liveness, what each node's last report shows), the communicators (comm_table.h:
// learned thresholds, slow-rank findings), the incidents (incident_book.h), the uploads
// (upload_tracker.h) and what a restart recovers (recovery.h). What crosses parts is here and in
// the coordinator_*.cpp beside it: a heartbeat feeds the nodes, the communicators and the
// fail-slow detector (slow_detector.h, coordinator_slow.cpp); opening an incident asks the nodes;
// detection and closing read them; status and metrics gather them all.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "daemon/base/model.h"
#include "daemon/base/status.h"
#include "daemon/logic/comm_table.h"
#include "daemon/logic/coordinator_types.h"
#include "daemon/logic/incident_book.h"
#include "daemon/logic/node_table.h"
#include "daemon/logic/recovery.h"
#include "daemon/logic/slow_detector.h"
#include "daemon/logic/stall.h"
#include "daemon/logic/upload_tracker.h"

namespace fr::daemon {

class CoordinatorState {
 public:
  explicit CoordinatorState(CoordinatorConfig cfg);
  // Its parts refer to each other (the uploads to the incidents and the nodes).
  CoordinatorState(const CoordinatorState&) = delete;
  CoordinatorState& operator=(const CoordinatorState&) = delete;

  const CoordinatorConfig& config() const { return cfg_; }
  const StallPolicy& stall_policy() const { return comms_.policy(); }
  // What was learned of a communicator (null: nothing yet), and its threshold now.
  const CommModel* comm_model(uint64_t comm_id) const { return comms_.model(comm_id); }
  int64_t stall_threshold_ns(uint64_t comm_id) const { return comms_.stall_threshold_ns(comm_id); }
  const std::vector<Finding>& findings() const { return comms_.findings(); }
  const std::string& coordinator_id() const { return incidents_.coordinator_id(); }

  // A node said Hello. Returns its session id (never 0), or 0 with *error set when refused.
  // A node that reconnects under the same name takes over its entry; the old session is stale.
  // A name held by a live connection (one that heartbeated lately) is taken over only by a peer
  // with the same credentials; never without credentials.
  uint64_t connect(const std::string& node_name, const std::string& host, const std::string& job,
                   int64_t now_mono, std::string* error) {
    return connect(node_name, host, job, PeerAuth{}, now_mono, error);
  }
  uint64_t connect(const std::string& node_name, const std::string& host, const std::string& job,
                   const PeerAuth& auth, int64_t now_mono, std::string* error) {
    return nodes_.connect(node_name, host, job, auth, now_mono, error);
  }
  // The secret the node must put in its uploads while this session lasts.
  std::string upload_key(uint64_t session) const { return nodes_.upload_key(session); }
  // Whether an upload (or placed dump) with this header comes from the node it names: that node
  // is connected now, its upload key matches and it was asked for the incident. False: *error.
  bool check_uploader(const DumpHeader& hdr, const PeerAuth& auth, std::string* error) const {
    return uploads_.check_uploader(hdr, auth, error);
  }
  // After connect: dump requests the node missed (it was away, or restarted, while an incident
  // was collecting and its dump is not in yet).
  void resend_requests(uint64_t session, Actions* actions);
  void disconnect(uint64_t session, int64_t now_mono);
  // Heartbeat from a session; false when the session is unknown or stale. The second form keeps
  // *report and leaves the node's previous report in its place, for the caller to decode the
  // next heartbeat into (no allocation once the reports have grown to size).
  bool heartbeat(uint64_t session, NodeReport report, int64_t now_mono);
  bool heartbeat(uint64_t session, NodeReport* report, int64_t now_mono);
  void clock_sample(uint64_t session, int64_t t1, int64_t t2, int64_t t3, int64_t t4) {
    nodes_.clock_sample(session, t1, t2, t3, t4);
  }
  void dump_status(uint64_t session, const std::string& incident_id, bool ok,
                   const std::string& error, int64_t now_mono);

  // Uploads. begin_upload says where the files of `hdr` go (the incident's directory) or why
  // not; *duplicate when this node's dump is already in. A dump of another job is refused, and
  // so is one for a closed incident.
  bool begin_upload(const DumpHeader& hdr, std::string* dir, bool* duplicate, std::string* error);
  // `placed`: the node wrote the files into the incident's directory itself (shared dump dir).
  void upload_done(const DumpHeader& hdr, int64_t now_mono, bool placed = false) {
    uploads_.upload_done(hdr, now_mono, placed);
  }
  void upload_failed(const std::string& incident_id, const std::string& node,
                     const std::string& error, int64_t now_mono) {
    (void)now_mono;
    uploads_.upload_failed(incident_id, node, error);
  }

  // Detection, deadlines, closing. Call often (the adapter ticks every 100 ms and on events).
  Actions tick(int64_t now_mono);
  // A manual dump. Returns the incident id (an already collecting one is reused).
  std::string trigger(const std::string& reason, int64_t now_mono, Actions* actions);
  void assembled(const std::string& incident_id, const AssemblyResult& r, int64_t now_mono,
                 Actions* actions);

  nlohmann::json status(int64_t now_mono) const { return status(now_mono, StatusQuery{}); }
  nlohmann::json status(int64_t now_mono, const StatusQuery& q) const;
  ProcessCounts process_counts() const { return nodes_.process_counts(); }
  // The status (daemon/base/status.h), copied out of the state: take it under the lock, render it
  // outside (a node's last report is copied, not rendered: a few ms at 256 nodes x 8 processes x
  // 32 communicators, against half a second to render), so a big page never holds the lock.
  CoordinatorStatus status_snapshot(int64_t now_mono, const StatusQuery& q) const;
  // The same document as text, built node by node: its size is bounded by q.max_bytes plus one
  // node's entry, and its cost is linear in what is kept.
  std::string status_text(int64_t now_mono, const StatusQuery& q) const {
    return to_json_text(status_snapshot(now_mono, q));
  }
  // One incident's entry in the status, found by its id without building the rest; none when no
  // incident has that id.
  std::optional<StatusIncident> incident_status(const std::string& id) const;
  // What the fail-slow detector holds now (status, metrics, the live page).
  const SlowDetector& slow_detector() const { return slow_; }
  // The verdict hook may run for this incident (once per incident, also across restarts).
  bool take_hook(const std::string& incident_id, Actions* actions) {
    return incidents_.take_hook(incident_id, actions);
  }
  // Estimated bytes kept of the nodes' reports, and the nodes known.
  size_t retained_bytes() const { return nodes_.retained_bytes(); }
  size_t known_nodes() const { return nodes_.size(); }
  std::string metrics(int64_t now_mono) const;

  const std::vector<Incident>& incidents() const { return incidents_.list(); }
  size_t connected_nodes() const { return nodes_.connected(); }
  // Sessions to send a ping to (every connected node).
  std::vector<uint64_t> sessions() const { return nodes_.sessions(); }

 private:
  // Fail-slow: feeds one heartbeat to the detector; judges once an interval, opens a slow
  // incident for a new finding and closes those whose finding cleared.
  void learn_slow(const Node& n, const NodeReport& report, int64_t now_mono);
  void slow_pass(int64_t now_mono, Actions* actions);
  // The job's id when known (given, or learned from an authenticated node); empty otherwise,
  // where job_dir_name() says "job" for the directory's sake.
  std::string known_job() const;
  std::string job_dir_name() const;
  // Opens an incident and asks every connected node not lost for its dump.
  void open(IncidentKind kind, const std::string& reason, int64_t now_mono, Actions* actions,
            const Node* trigger, const SlowFinding* slow = nullptr);
  void check_collected(Incident& inc, int64_t now_mono, Actions* actions);
  // tick()'s passes, in order: nodes gone silent (NodeTable::mark_lost), incidents whose
  // condition cleared, slow-rank findings not seen lately, and (when no incident is active)
  // detection of a new one.
  void close_if_cleared(Incident& inc, Actions* actions);
  void age_findings(int64_t now_mono, Actions* actions);
  void detect(const std::vector<const Node*>& newly_lost, int64_t now_mono, Actions* actions);
  std::string stall_reason(const Node& n) const;
  // The unrecorded job's stall (coordinator_processes.cpp): every process of it without a flight
  // log, torch's process groups still for the threshold; the reason, or "" when not stalled.
  std::string unrecorded_stall() const;
  int64_t unrecorded_threshold_ns() const;
  AssemblyJob make_job(const Incident& inc) const;
  void persist(const Incident& inc, Actions* actions) const { incidents_.persist(inc, actions); }
  // Lost nodes no incident needs, communicators no member reported, closed incidents past the
  // bound: forgotten.
  void forget(int64_t now_mono);
  std::string findings_path() const;
  std::string findings_text() const;

  CoordinatorConfig cfg_;  // first: the parts are built from it
  CommTable comms_;
  NodeTable nodes_;
  IncidentBook incidents_;
  Recovery recovery_;
  UploadTracker uploads_;
  SlowDetector slow_;
  int64_t next_slow_judge_mono_ = 0;
};

}  // namespace fr::daemon
