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
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "daemon/logic/clock.h"
#include "daemon/base/model.h"
#include "daemon/logic/slow_detector.h"
#include "daemon/logic/stall.h"

namespace fr::daemon {

struct CoordinatorConfig {
  std::string dump_dir;
  std::string job_id;  // empty: learned from the logs
  int expect_ranks = -1;
  // Fixed threshold (stall_auto false): an op in flight this long opens an incident. Automatic:
  // max(stall_floor_ns, stall_factor x the communicator's learned p99), capped (stall.h).
  int64_t stall_after_ns = 30'000'000'000;
  bool stall_auto = false;
  int64_t stall_floor_ns = 3'000'000'000;
  int64_t stall_cap_ns = 30'000'000'000;
  double stall_factor = 5;
  uint32_t stall_warmup = 8;
  size_t max_comm_models = 65536;      // communicators learned; past it: the cap
  size_t max_members_per_node = 4096;  // (process, communicator) pairs tracked per node
  size_t max_findings = 256;
  int64_t heartbeat_timeout_ns = 10'000'000'000;
  int64_t dump_deadline_ns = 20'000'000'000;  // how long to wait for every node's dump
  int64_t dead_grace_ns = 1'000'000'000;      // a dead rank while others still run, for this long
  int64_t heartbeat_interval_ns = 1'000'000'000;
  size_t max_nodes = 65536;
  // What is kept of the nodes' last reports (estimated bytes), per node and over all nodes. Past
  // either bound a report keeps its processes' summary and loses its per-communicator detail.
  size_t max_node_bytes = 1 << 20;
  size_t max_retained_bytes = 128 << 20;
  int64_t forget_after_ns = 600'000'000'000;  // a lost node no incident needs is forgotten then
  size_t max_closed_incidents = 256;          // kept in memory; all stay on disk
};

// Who is speaking: the credentials a connection presented. `authenticated` when a token or a
// client certificate was checked; `principal` names them (equal for every holder of one token).
struct PeerAuth {
  bool authenticated = true;
  std::string principal;
};

// Which part of the status document to build (one page of nodes).
struct StatusQuery {
  size_t node_offset = 0;
  size_t node_limit = 256;
  bool summary = false;        // no per-process detail
  size_t max_bytes = 4 << 20;  // stop adding nodes past this much text
};

// The status document's parts, copied out of the state under the caller's lock, and rendered
// into text (render_status) with no access to the state, so that a big page never holds the lock
// while it is built: a node's last report is copied, not rendered (a few ms at 256 nodes x 8
// processes x 32 communicators, against half a second to render).
struct StatusSnapshot {
  struct NodeView {
    std::string name, host;
    bool connected = false, lost = false, trimmed = false;
    int64_t heartbeat_age_ns = 0, clock_offset_ns = 0, clock_rtt_ns = 0;
    uint64_t heartbeats = 0;
    int alive = 0;
    NodeReport last;                         // its processes left out for a summary
    std::map<uint64_t, int64_t> thresholds;  // stall threshold by communicator
  };
  StatusQuery query;
  nlohmann::json head;          // the document but its page and its nodes
  std::vector<NodeView> nodes;  // from query.node_offset, at most query.node_limit
  bool more = false;            // nodes left after these
};
std::string render_status(const StatusSnapshot& s);

// A problem seen from the heartbeats that is not an incident: a slow rank (its peers keep
// waiting for it while the communicator still progresses).
struct Finding {
  std::string kind = "slow_rank";
  int rank = -1;
  std::string node;
  uint64_t comm_id = 0;
  std::string comm_name;
  double rank_waiting = 0;   // share of heartbeats with an op in flight, this rank
  double peers_waiting = 0;  // ... and its peers on the communicator
  int64_t first_real = 0;
  int64_t last_real = 0;
  int64_t last_mono = 0;
  bool active = true;
};

// kSlow: a rank, GPU or link keeps the job slow (slow_detector.h). Its dump takes nothing from the
// job (as every dump) and it never holds back the detection of a hang: only while its dumps are
// collected and analysed does it count as the active incident.
enum class IncidentKind { kStall, kRankDead, kNodeLost, kManual, kSlow };
const char* incident_kind_name(IncidentKind k);

enum class IncidentState {
  kCollecting,       // dumps requested, waiting for the nodes
  kAnalyzing,        // dump set being written and analysed
  kOpen,             // analysed; its condition persists (the job is still hung)
  kClosedTransient,  // the stalled ops completed after all
  kClosed,           // manual incidents once analysed; any incident once the job ended
};
const char* incident_state_name(IncidentState s);

struct Incident {
  std::string id;
  IncidentKind kind = IncidentKind::kManual;
  IncidentState state = IncidentState::kCollecting;
  std::string reason;
  std::string job_id;
  std::string dir;  // dump_dir/<job>/<id>
  int64_t opened_mono = 0;
  int64_t opened_real = 0;
  int64_t deadline_mono = 0;
  int64_t collected_mono = 0;  // when the last dump arrived or the deadline passed
  int64_t analyzed_mono = 0;
  std::set<std::string> asked;  // node names asked to dump
  std::set<std::string> uploaded;
  std::set<std::string> placed;               // of those, written by the node into a shared dir
  std::map<std::string, std::string> failed;  // node -> why
  std::vector<DumpProcess> processes;
  std::vector<DumpSkip> skipped;
  // What triggered it (stall): the communicator and its completed counter at that time.
  std::string trigger_node;
  std::string trigger_log;
  uint64_t trigger_comm = 0;
  uint64_t trigger_completed = 0;
  bool reassemble = false;            // a dump arrived while being analysed
  bool hook_fired = false;            // --on-verdict ran for it (at most once)
  bool recovered = false;             // read back from disk after a restart
  bool dirty = false;                 // changed since incident.json was last written
  int64_t progress_written_mono = 0;  // when tick last wrote it for a dirty change
  std::string verdict_kind;
  std::string verdict_summary;
  std::vector<int> culprits;
  std::string error;                // the dump set could not be written
  std::optional<SlowFinding> slow;  // kSlow: what was found (its key names the incident's cause)
  int64_t slow_cleared_mono = 0;    // kSlow: when it closed because the finding cleared
  int64_t slow_grace_mono = 0;      // kSlow recovered: open without its finding until then
  // A stall of a job whose processes record nothing of fr's own, seen through torch's recorder
  // (coordinator_processes.cpp): transient once torch's process groups move again.
  bool unrecorded = false;
  // What the nodes saw when it opened (ProcessCounts::summary): "4 processes under fr-run on 1
  // node; none has called NCCL or NIXL yet".
  std::string processes_seen;
};

// How many processes the nodes see (`processes` of frd-status/1): those under fr-run or with the
// agent loaded, and of them those that record NCCL or NIXL calls (have a flight log).
struct ProcessCounts {
  int total = 0;
  int recording = 0;
  int torch = 0;  // without a flight log, watched through torch's recorder (fr-run's hook)
  int nodes = 0;  // nodes with at least one
  // "4 processes under fr-run on 1 node; none has called NCCL or NIXL yet", ...
  std::string summary() const;
};

// One dump set to write: everything the assembler needs, copied out of the state.
struct AssemblyJob {
  std::string incident_id;
  std::string dir;
  std::string job_id;
  std::string reason;
  std::string kind;
  int64_t time_ns = 0;
  int expected_ranks = -1;
  std::vector<DumpProcess> processes;
  std::vector<DumpSkip> skipped;
  struct NodeOffset {
    std::string host;
    int64_t offset_ns = 0;
    bool has_offset = false;
  };
  std::vector<NodeOffset> nodes;
  nlohmann::json incident;  // incident.json contents
  // Nodes connected but whose dump did not arrive, with why: not lost, and said so.
  std::map<std::string, std::string> undelivered;
};

struct AssemblyResult {
  bool ok = false;
  std::string error;
  std::string verdict_kind;
  std::string verdict_summary;
  std::vector<int> culprits;
};

// What the adapter must do after a call.
struct Actions {
  struct Dump {
    uint64_t session = 0;
    std::string node;
    std::string incident_id;
    std::string job_id;
    std::string reason;
    int64_t deadline_ms = 0;
  };
  std::vector<Dump> dumps;
  std::vector<AssemblyJob> assemble;
  std::vector<std::string> log;  // lines for stderr
  // Files to write (incident.json as the incident changes): path -> contents.
  std::vector<std::pair<std::string, std::string>> persist;
  bool empty() const { return dumps.empty() && assemble.empty() && log.empty() && persist.empty(); }
};

class CoordinatorState {
 public:
  explicit CoordinatorState(CoordinatorConfig cfg);

  const CoordinatorConfig& config() const { return cfg_; }
  const StallPolicy& stall_policy() const { return policy_; }
  // What was learned of a communicator (null: nothing yet), and its threshold now.
  const CommModel* comm_model(uint64_t comm_id) const;
  int64_t stall_threshold_ns(uint64_t comm_id) const;
  const std::vector<Finding>& findings() const { return findings_; }
  const std::string& coordinator_id() const { return coordinator_id_; }

  // A node said Hello. Returns its session id (never 0), or 0 with *error set when refused.
  // A node that reconnects under the same name takes over its entry; the old session is stale.
  // A name held by a live connection (one that heartbeated lately) is taken over only by a peer
  // with the same credentials; never without credentials.
  uint64_t connect(const std::string& node_name, const std::string& host, const std::string& job,
                   int64_t now_mono, std::string* error) {
    return connect(node_name, host, job, PeerAuth{}, now_mono, error);
  }
  uint64_t connect(const std::string& node_name, const std::string& host, const std::string& job,
                   const PeerAuth& auth, int64_t now_mono, std::string* error);
  // The secret the node must put in its uploads while this session lasts.
  std::string upload_key(uint64_t session) const;
  // Whether an upload (or placed dump) with this header comes from the node it names: that node
  // is connected now, its upload key matches and it was asked for the incident. False: *error.
  bool check_uploader(const DumpHeader& hdr, const PeerAuth& auth, std::string* error) const;
  // After connect: dump requests the node missed (it was away, or restarted, while an incident
  // was collecting and its dump is not in yet).
  void resend_requests(uint64_t session, Actions* actions);
  void disconnect(uint64_t session, int64_t now_mono);
  // Heartbeat from a session; false when the session is unknown or stale. The second form keeps
  // *report and leaves the node's previous report in its place, for the caller to decode the
  // next heartbeat into (no allocation once the reports have grown to size).
  bool heartbeat(uint64_t session, NodeReport report, int64_t now_mono);
  bool heartbeat(uint64_t session, NodeReport* report, int64_t now_mono);
  void clock_sample(uint64_t session, int64_t t1, int64_t t2, int64_t t3, int64_t t4);
  void dump_status(uint64_t session, const std::string& incident_id, bool ok,
                   const std::string& error, int64_t now_mono);

  // Uploads. begin_upload says where the files of `hdr` go (the incident's directory) or why
  // not; *duplicate when this node's dump is already in. A dump of another job is refused, and
  // so is one for a closed incident.
  bool begin_upload(const DumpHeader& hdr, std::string* dir, bool* duplicate, std::string* error);
  // `placed`: the node wrote the files into the incident's directory itself (shared dump dir).
  void upload_done(const DumpHeader& hdr, int64_t now_mono, bool placed = false);
  void upload_failed(const std::string& incident_id, const std::string& node,
                     const std::string& error, int64_t now_mono);

  // Detection, deadlines, closing. Call often (the adapter ticks every 100 ms and on events).
  Actions tick(int64_t now_mono);
  // A manual dump. Returns the incident id (an already collecting one is reused).
  std::string trigger(const std::string& reason, int64_t now_mono, Actions* actions);
  void assembled(const std::string& incident_id, const AssemblyResult& r, int64_t now_mono,
                 Actions* actions);

  nlohmann::json status(int64_t now_mono) const { return status(now_mono, StatusQuery{}); }
  nlohmann::json status(int64_t now_mono, const StatusQuery& q) const;
  ProcessCounts process_counts() const;
  // The same document as text, built node by node: its size is bounded by q.max_bytes plus one
  // node's entry, and its cost is linear in what is kept.
  std::string status_text(int64_t now_mono, const StatusQuery& q) const {
    return render_status(status_snapshot(now_mono, q));
  }
  // What status_text renders, copied (StatusSnapshot): take it under the lock, render outside.
  StatusSnapshot status_snapshot(int64_t now_mono, const StatusQuery& q) const;
  // What the fail-slow detector holds now (status, metrics, the live page).
  const SlowDetector& slow_detector() const { return slow_; }
  // The verdict hook may run for this incident (once per incident, also across restarts).
  bool take_hook(const std::string& incident_id, Actions* actions);
  // Estimated bytes kept of the nodes' reports, and the nodes known.
  size_t retained_bytes() const { return retained_bytes_; }
  size_t known_nodes() const { return nodes_.size(); }
  std::string metrics(int64_t now_mono) const;

  const std::vector<Incident>& incidents() const { return incidents_; }
  size_t connected_nodes() const;
  // Sessions to send a ping to (every connected node).
  std::vector<uint64_t> sessions() const;

 private:
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
    int64_t max_age_ns = 0;  // oldest op in flight among live processes
    std::string max_age_log;
    uint64_t max_age_comm = 0;
    std::string max_age_comm_name;
    uint32_t max_age_op = 0;  // fr_op of that oldest op, and its sequence number
    uint64_t max_age_seq = 0;
    uint64_t max_age_completed = 0;
    int alive = 0;
    int max_age_rank = -1;
    int max_age_pid = 0;
    std::optional<XferProgress> max_age_xfer;  // set when that oldest op is a NIXL transfer
    int64_t max_age_threshold_ns = 0;          // the threshold of that op's communicator
    int world_size = -1;                       // largest world size reported
    std::vector<MemberTrack> members;          // by key: what each (process, comm) showed last
    size_t retained = 0;                       // estimated bytes of `last`
    bool trimmed = false;                      // `last` lost detail to the bounds
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

  Incident* active();
  // The incident that holds back automatic detection: any incident collecting or analysing, and
  // any open one but a slow one (a hang while the job is slow is still found).
  Incident* blocking();
  // Fail-slow: feeds one heartbeat to the detector; judges once an interval, opens a slow
  // incident for a new finding and closes those whose finding cleared.
  void learn_slow(const Node& n, const NodeReport& report, int64_t now_mono);
  void slow_pass(int64_t now_mono, Actions* actions);
  Incident* find(const std::string& id);
  Node* by_session(uint64_t session);
  // The job's id when known (given, or learned from an authenticated node); empty otherwise,
  // where job_dir_name() says "job" for the directory's sake.
  std::string known_job() const;
  std::string job_dir_name() const;
  void open(IncidentKind kind, const std::string& reason, int64_t now_mono, Actions* actions,
            const Node* trigger, const SlowFinding* slow = nullptr);
  void check_collected(Incident& inc, int64_t now_mono, Actions* actions);
  // tick()'s passes, in order: nodes gone silent, incidents whose condition cleared, slow-rank
  // findings not seen lately, and (when no incident is active) detection of a new one.
  std::vector<const Node*> mark_lost(int64_t now_mono, Actions* actions);
  void close_if_cleared(Incident& inc, Actions* actions);
  void age_findings(int64_t now_mono, Actions* actions);
  void detect(const std::vector<const Node*>& newly_lost, int64_t now_mono, Actions* actions);
  std::string stall_reason(const Node& n) const;
  // The unrecorded job's stall (coordinator_processes.cpp): every process of it without a flight
  // log, torch's process groups still for the threshold; the reason, or "" when not stalled.
  std::string unrecorded_stall() const;
  int64_t unrecorded_threshold_ns() const;
  // Sets n's unrecorded counts from its report, at each heartbeat.
  void note_unrecorded(Node& n, const NodeReport& report);
  AssemblyJob make_job(const Incident& inc) const;
  nlohmann::json incident_json(const Incident& inc) const;
  void persist(const Incident& inc, Actions* actions) const;
  void recover();
  // begin_upload for an incident this run does not know: one a previous run left on disk.
  // False: refused (*error); *duplicate: this node's dump is already in.
  bool recover_incident(const DumpHeader& hdr, bool job_known, Incident** inc, bool* duplicate,
                        std::string* error);
  bool needed_by_incident(const std::string& node) const;
  void forget(int64_t now_mono);
  int expected_ranks() const;
  int total_alive() const;
  // Learning from one heartbeat of a node (before its report is cut to the bounds).
  void learn(Node& n, const NodeReport& report, int64_t now_mono);
  void note_slow(const Node& n, const MemberTrack& m, const CommModel& model, int64_t now_mono);
  void drop_members(Node& n);
  // Keeps the counts of nodes that tick() must look at (stalled, with dead ranks) in step.
  void set_hints(Node& n, bool over_threshold, bool has_dead);
  // Makes p's oldest op or NIXL transfer n's oldest when it is further past its threshold than
  // *worst_margin (the furthest so far), which it then updates.
  void take_oldest(Node& n, const ProcessReport& p, int64_t* worst_margin) const;
  std::string findings_path() const;
  nlohmann::json findings_json() const;
  std::string findings_text() const;

  CoordinatorConfig cfg_;
  StallPolicy policy_;
  std::string coordinator_id_;
  std::unordered_map<uint64_t, CommModel> models_;
  // learn()'s scratch space, kept between heartbeats.
  std::vector<MemberTrack> next_members_;
  std::vector<char> members_kept_;
  std::vector<Finding> findings_;
  bool findings_dirty_ = false;
  SlowDetector slow_;
  int64_t next_slow_judge_mono_ = 0;
  // Nodes whose last report shows an op past its threshold, or a dead rank: tick() walks the
  // nodes for detection only when there are some (a walk over 16k nodes costs milliseconds).
  size_t over_threshold_nodes_ = 0;
  size_t dead_nodes_ = 0;
  // A node ever reported processes without a flight log: tick() then looks for their stall.
  bool any_unrecorded_ = false;
  int64_t last_forget_mono_ = 0;
  // No connected node can be past the heartbeat timeout before this (mark_lost walks then): the
  // earliest a node not lost times out, lowered by every connect and every node found again.
  int64_t next_lost_check_mono_ = INT64_MAX;
  // When a node last heard from at `heartbeat_mono` times out (saturated: a huge timeout is never).
  int64_t lost_at(int64_t heartbeat_mono) const {
    return heartbeat_mono > INT64_MAX - cfg_.heartbeat_timeout_ns
               ? INT64_MAX
               : heartbeat_mono + cfg_.heartbeat_timeout_ns;
  }
  bool forget_walked_ = false;
  std::vector<std::string> pending_log_;
  std::map<std::string, Node> nodes_;
  std::map<uint64_t, std::string> sessions_;
  uint64_t next_session_ = 1;
  int next_incident_ = 1;
  std::vector<Incident> incidents_;
  std::string learned_job_;
  uint64_t heartbeats_total_ = 0;
  uint64_t upload_failures_ = 0;
  double last_dump_seconds_ = 0;
  double last_analysis_seconds_ = 0;
  size_t retained_bytes_ = 0;
  uint64_t nodes_forgotten_ = 0;
  uint64_t reports_trimmed_ = 0;
};

}  // namespace fr::daemon
