// The coordinator's status (frd-status/1) as one typed structure: the coordinator copies it out of
// its state under its lock (daemon/logic/coordinator_status.cpp), and every reader renders from
// it: `/api/v1/status` and the gRPC status call as JSON (to_json_text, built from the one to_json
// per part below), the live and incident pages (daemon/http/web.h), and `frd status`, which reads
// the JSON back with from_json (daemon/rpc/client.h). Times are kept in nanoseconds; the JSON
// gives seconds where its field names say so (`_s`). from_json takes what a document has and
// leaves the rest at its default, so documents of older coordinators, and partial ones, read.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace fr::daemon {

// Which part of the status document to build (one page of nodes).
struct StatusQuery {
  size_t node_offset = 0;
  size_t node_limit = 256;
  bool summary = false;        // no per-process detail
  size_t max_bytes = 4 << 20;  // stop adding nodes past this much text
};

// One communicator of one process, as its node reported it last.
struct StatusComm {
  uint64_t id = 0;
  std::string name;  // printable (names.h), as every peer's text in the status
  int size = -1;
  int rank = -1;
  uint64_t coll_seq = 0, p2p_seq = 0, enqueued = 0, started = 0, completed = 0;
  int64_t oldest_in_flight_ns = 0;
  int64_t stall_threshold_ns = 0;  // the coordinator's threshold for this communicator now
};

struct StatusProcess {
  int rank = -1;
  int world_size = -1;
  int pid = 0;
  bool alive = false;
  bool exited_cleanly = false;
  std::string log;
  uint64_t records = 0;
  std::vector<StatusComm> comms;
};

// A process under fr-run without a flight log (daemon/base/proc_file.h).
struct StatusUnrecorded {
  int rank = -1;
  int world_size = -1;
  int pid = 0;
  bool torch = false;  // torch_seq and torch_idle are given only then
  uint64_t torch_seq = 0;
  int64_t torch_idle_ns = 0;
};

struct StatusNode {
  std::string name, host;
  bool connected = false, lost = false, trimmed = false;
  int64_t heartbeat_age_ns = 0, clock_offset_ns = 0, clock_rtt_ns = 0;
  uint64_t heartbeats = 0;
  size_t ranks = 0;  // processes with a flight log (counted also in a summary)
  int alive = 0;
  std::vector<std::string> gpu_alerts;
  std::vector<StatusUnrecorded> unrecorded;  // empty in a summary
  std::vector<StatusProcess> processes;      // empty in a summary
};

// A rank its peers keep waiting for while the communicator still progresses (findings.json too).
struct StatusRankFinding {
  std::string kind = "slow_rank";
  int rank = -1;
  std::string node;
  uint64_t comm = 0;
  std::string comm_name;
  double rank_waiting = 0;
  double peers_waiting = 0;
  int64_t first_ns = 0;
  int64_t last_ns = 0;
  bool active = true;
};

// A rank, GPU or link the fail-slow detector finds slow (daemon/logic/slow_detector.h), as the
// status, incidents and incident.json give it.
struct StatusSlow {
  std::string cause;  // host, gpu, link
  double factor = 0;
  std::vector<int> culprit_ranks;
  uint64_t comm = 0;
  std::string comm_name;
  std::string evidence;
  int64_t value_ns = 0, others_ns = 0, step_ns = 0, step_without_ns = 0;
  double loss_percent = 0;
  std::optional<double> late_share;  // host
  // What the evidence is built from beyond the above (a restarted coordinator reads it back).
  double share = 0;
  bool kernel_timed = false;
  bool gpu_sampled = false;  // GPU times from the sampled progress markers, not kernel channels
  std::optional<double> busy_share, peers_busy_share;  // both or neither
  struct Where {
    int waiting_rank = -1, peer_rank = -1, channel = -1;
  };
  std::optional<Where> where;              // link
  std::vector<std::string> nvml_throttle;  // host or gpu: its GPU's slowing throttle reasons
};

struct StatusIncident {
  std::string id;
  // Names as incident_kind_name and incident_state_name give them; kept as text, so that a
  // document of another version reads whole.
  std::string kind;
  std::string state;
  std::string reason;
  std::string processes_seen;
  std::string dir;
  int64_t opened_ns = 0;
  size_t asked = 0;
  size_t uploaded = 0;
  std::map<std::string, std::string> failed;  // node -> why
  std::string verdict;
  std::string summary;
  std::vector<int> culprit_ranks;
  std::optional<StatusSlow> slow;
  std::string error;
  // Collecting, analysing, or open (its condition persists).
  bool is_open() const { return state == "collecting" || state == "analyzing" || state == "open"; }
  // Its analysis.json is written (not collecting, not analysing).
  bool analysed() const { return state != "collecting" && state != "analyzing"; }
};

// `processes`: what the nodes see (ProcessCounts in daemon/logic/coordinator.h).
struct StatusProcesses {
  int total = 0, recording = 0, torch = 0, nodes = 0;
  std::string summary;
};

struct StatusRanks {
  int expected = -1, known = 0, alive = 0, dead = 0;
};

struct StatusNodeCounts {
  size_t known = 0, connected = 0, lost = 0;
  uint64_t forgotten = 0;
};

struct StatusStall {
  std::string mode = "fixed";  // fixed, auto
  int64_t fixed_ns = 0, floor_ns = 0, cap_ns = 0;
  double factor = 0;
  size_t learned_communicators = 0;
};

// Which nodes a document holds: from `offset`, `returned` of them; `next_offset` when more follow.
struct StatusPage {
  size_t offset = 0;
  size_t returned = 0;
  std::optional<size_t> next_offset;
};

struct CoordinatorStatus {
  std::string schema = "frd-status/1";
  std::optional<StatusProcesses> processes;  // absent from older coordinators
  std::string coordinator_id;
  std::string job_id;
  StatusRanks ranks;
  StatusNodeCounts node_counts;
  size_t retained_report_bytes = 0;
  StatusStall stall;
  std::vector<StatusRankFinding> findings;
  std::vector<StatusSlow> slow;
  std::vector<StatusIncident> incidents;
  // The nodes: as copied, from query.node_offset, at most query.node_limit of them (`more`: some
  // are left after them); the JSON holds those that fit in query.max_bytes (fit_page, `page`).
  StatusQuery query;
  bool more = false;
  std::vector<StatusNode> nodes;
  StatusPage page;  // set by fit_page and by from_json; to_json works it out itself

  const StatusIncident* incident(const std::string& id) const;
};

// Communicator ids are 16 hex digits in the JSON.
std::string status_hex_id(uint64_t id);

// One to_json per part; a CoordinatorStatus's is to_json_text, parsed.
void to_json(nlohmann::json& j, const StatusComm& c);
void to_json(nlohmann::json& j, const StatusProcess& p);
void to_json(nlohmann::json& j, const StatusUnrecorded& u);
void to_json(nlohmann::json& j, const StatusNode& n);
void to_json(nlohmann::json& j, const StatusRankFinding& f);
void to_json(nlohmann::json& j, const StatusSlow& s);
void to_json(nlohmann::json& j, const StatusIncident& i);
void to_json(nlohmann::json& j, const StatusProcesses& p);
void to_json(nlohmann::json& j, const StatusPage& p);
void to_json(nlohmann::json& j, const CoordinatorStatus& s);

// The frd-status/1 document as text, built node by node: the nodes that fit in query.max_bytes
// (plus one node's entry), and `page` saying which. Its cost is linear in the nodes it holds.
std::string to_json_text(const CoordinatorStatus& s);
// Keeps the nodes to_json_text would hold and sets `page` as it would (the live page).
void fit_page(CoordinatorStatus* s);

// Reads a document (or a part) back; what it lacks, or gives with the wrong type, keeps its
// default: a page is drawn from a peer's document whatever it holds.
void from_json(const nlohmann::json& j, StatusComm& c);
void from_json(const nlohmann::json& j, StatusProcess& p);
void from_json(const nlohmann::json& j, StatusUnrecorded& u);
void from_json(const nlohmann::json& j, StatusNode& n);
void from_json(const nlohmann::json& j, StatusRankFinding& f);
void from_json(const nlohmann::json& j, StatusSlow& s);
void from_json(const nlohmann::json& j, StatusIncident& i);
void from_json(const nlohmann::json& j, StatusProcesses& p);
void from_json(const nlohmann::json& j, StatusPage& p);
void from_json(const nlohmann::json& j, CoordinatorStatus& s);

}  // namespace fr::daemon
