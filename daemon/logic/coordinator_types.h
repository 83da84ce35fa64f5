// The coordinator's vocabulary, shared by its parts (node_table.h, comm_table.h, incident_book.h,
// upload_tracker.h, recovery.h) and by CoordinatorState that composes them (coordinator.h): its
// configuration, a peer's credentials, incidents and slow-rank findings, and the Actions a call
// leaves for the adapter to carry out.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "daemon/base/model.h"
#include "daemon/logic/slow_detector.h"

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
  std::vector<fr::log::SnapshotProcess> processes;
  std::vector<fr::log::SnapshotSkip> skipped;
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
  int ended = 0;  // processes whose flight log outlived them (dead or exited), not in total
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
  std::vector<fr::log::SnapshotProcess> processes;
  std::vector<fr::log::SnapshotSkip> skipped;
  std::vector<fr::log::ManifestNode> nodes;  // each node's host and clock offset
  nlohmann::json incident;                   // incident.json contents
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

}  // namespace fr::daemon
