// What the coordinator tells (coordinator.h): the frd-status/1 document (paged by nodes, built
// as text with a bounded size), the Prometheus metrics, and the slow-rank findings file.
#include "daemon/logic/coordinator.h"
#include "daemon/logic/coordinator_helpers.h"

#include <algorithm>

#include "common/prometheus.h"
#include "daemon/base/names.h"

namespace fr::daemon {

using namespace coordinator_helpers;

std::string CoordinatorState::findings_path() const {
  return cfg_.dump_dir + "/" + job_dir_name() + "/findings.json";
}

std::string CoordinatorState::findings_text() const {
  nlohmann::json j = {{"schema", "frd-findings/1"},
                      {"job_id", job_dir_name()},
                      {"coordinator_id", coordinator_id()},
                      {"findings", comms_.findings_json()}};
  return j.dump(2) + "\n";
}

namespace {

StatusIncident incident_status_of(const Incident& i) {
  StatusIncident v;
  v.id = i.id;
  v.kind = incident_kind_name(i.kind);
  v.state = incident_state_name(i.state);
  v.reason = i.reason;
  v.processes_seen = i.processes_seen;
  v.dir = i.dir;
  v.opened_ns = i.opened_real;
  v.asked = i.asked.size();
  v.uploaded = i.uploaded.size();
  v.failed = i.failed;
  v.verdict = i.verdict_kind;
  v.summary = i.verdict_summary;
  v.culprit_ranks = i.culprits;
  if (i.slow) v.slow = slow_status(*i.slow);
  v.error = i.error;
  return v;
}

// A node's last report, as the status gives its processes (peers' text made printable).
void copy_processes(const CoordinatorState& st, const NodeReport& r, StatusNode* v) {
  std::map<uint64_t, int64_t> thresholds;  // looked up once per communicator
  v->processes.reserve(r.processes.size());
  for (const auto& p : r.processes) {
    StatusProcess sp;
    sp.rank = p.rank;
    sp.world_size = p.world_size;
    sp.pid = p.pid;
    sp.alive = p.alive;
    sp.exited_cleanly = p.exited_cleanly;
    sp.log = printable(p.log, 128);
    sp.records = p.records;
    sp.comms.reserve(p.comms.size());
    for (const auto& c : p.comms) {
      auto t = thresholds.try_emplace(c.comm_id, 0);
      if (t.second) t.first->second = st.stall_threshold_ns(c.comm_id);
      sp.comms.push_back({c.comm_id, printable(c.name, 64), c.size, c.rank, c.coll_seq, c.p2p_seq,
                          c.enqueued, c.started, c.completed, c.oldest_age_ns, t.first->second});
    }
    v->processes.push_back(std::move(sp));
  }
  for (const auto& u : r.unrecorded)
    v->unrecorded.push_back({u.rank, u.world_size, u.pid, u.torch, u.torch_seq, u.torch_idle_ns});
}

StatusProcesses processes_status(const ProcessCounts& pc) {
  return {pc.total, pc.recording, pc.torch, pc.nodes, pc.summary()};
}

}  // namespace

StatusRankFinding coordinator_helpers::finding_status(const Finding& f) {
  StatusRankFinding v;
  v.kind = f.kind;
  v.rank = f.rank;
  v.node = f.node;
  v.comm = f.comm_id;
  v.comm_name = f.comm_name;
  v.rank_waiting = f.rank_waiting;
  v.peers_waiting = f.peers_waiting;
  v.first_ns = f.first_real;
  v.last_ns = f.last_real;
  v.active = f.active;
  return v;
}

std::optional<StatusIncident> CoordinatorState::incident_status(const std::string& id) const {
  const Incident* i = incidents_.find(id);
  return i ? std::optional<StatusIncident>(incident_status_of(*i)) : std::nullopt;
}

// The one place the status is filled from the state.
CoordinatorStatus CoordinatorState::status_snapshot(int64_t now_mono, const StatusQuery& q) const {
  CoordinatorStatus snap;
  snap.query = q;
  // Counts over every node; entries for one page of them, bounded in bytes.
  int known = 0, alive = 0, dead = 0;
  size_t connected = 0, lost = 0;
  for (const auto& [_, n] : nodes_) {
    connected += n.connected;
    lost += n.lost;
    for (const auto& p : n.last.processes) {
      known++;
      if (p.alive)
        alive++;
      else if (!p.exited_cleanly)
        dead++;
    }
  }
  // The page's nodes, copied. The rendered text's size bounds the page (to_json_text); the
  // reports' estimated size bounds the copy, well past it.
  size_t index = 0, bytes = 0;
  for (const auto& [_, n] : nodes_) {
    if (index++ < q.node_offset) continue;
    if (snap.nodes.size() >= q.node_limit || bytes >= 4 * q.max_bytes) {
      snap.more = true;
      break;
    }
    StatusNode v;
    v.name = n.name;
    v.host = n.host;
    v.connected = n.connected;
    v.lost = n.lost;
    v.trimmed = n.trimmed;
    v.heartbeat_age_ns = now_mono - n.last_heartbeat_mono;
    v.heartbeats = n.heartbeats;
    v.clock_offset_ns = n.clock.offset_ns();
    v.clock_rtt_ns = n.clock.delay_ns();
    v.ranks = n.last.processes.size();
    v.alive = n.alive;
    v.gpu_alerts = n.last.gpu_alerts;
    if (!q.summary) copy_processes(*this, n.last, &v);
    bytes += q.summary ? 256 : n.retained;
    snap.nodes.push_back(std::move(v));
  }
  for (const auto& i : incidents_) snap.incidents.push_back(incident_status_of(i));
  for (const auto& f : slow_.findings()) snap.slow.push_back(slow_status(f));
  for (const auto& f : comms_.findings()) snap.findings.push_back(finding_status(f));
  snap.processes = processes_status(process_counts());
  snap.coordinator_id = coordinator_id();
  snap.job_id = known_job();
  snap.ranks = {nodes_.expected_ranks(), known, alive, dead};
  snap.node_counts = {nodes_.size(), connected, lost, nodes_.nodes_forgotten()};
  snap.retained_report_bytes = nodes_.retained_bytes();
  const StallPolicy& policy = stall_policy();
  snap.stall = {policy.automatic ? "auto" : "fixed",
                policy.fixed_ns,
                policy.floor_ns,
                policy.cap_ns,
                policy.factor,
                comms_.size()};
  return snap;
}

nlohmann::json CoordinatorState::status(int64_t now_mono, const StatusQuery& q) const {
  return nlohmann::json::parse(status_text(now_mono, q));
}

std::string CoordinatorState::metrics(int64_t now_mono) const {
  size_t connected = 0, lost = 0, ranks = 0, alive = 0;
  double max_age = 0;
  for (const auto& [_, n] : nodes_) {
    connected += n.connected;
    lost += n.lost;
    ranks += n.last.processes.size();
    alive += n.alive;
    if (n.connected) max_age = std::max(max_age, secs(now_mono - n.last_heartbeat_mono));
  }
  std::map<std::string, int> by_kind;
  int open = 0;
  for (const auto& i : incidents_) {
    by_kind[incident_kind_name(i.kind)]++;
    if (i.state == IncidentState::kCollecting || i.state == IncidentState::kAnalyzing ||
        i.state == IncidentState::kOpen)
      open++;
  }
  size_t slow = 0;
  for (const auto& f : comms_.findings()) slow += f.active;
  PrometheusText o;
  o.family("frd_nodes", "gauge", "Node daemons known to the coordinator.")
      .sample("state", "connected", connected)
      .sample("state", "lost", lost)
      .sample("state", "known", nodes_.size());
  o.family("frd_ranks", "gauge", "Ranks (processes with a flight log) reported by the nodes.")
      .sample("state", "known", ranks)
      .sample("state", "alive", alive)
      .sample("state", "expected", nodes_.expected_ranks());
  o.gauge("frd_heartbeat_age_max_seconds", "Oldest last heartbeat among connected nodes.", max_age);
  o.counter("frd_heartbeats_total", "Heartbeats received.", nodes_.heartbeats_total());
  o.family("frd_incidents_total", "counter", "Incidents opened, by kind.");
  for (const char* k : {"stall", "rank_dead", "node_lost", "manual", "slow"})
    o.sample("kind", k, by_kind[k]);
  o.gauge("frd_incidents_open", "Incidents collecting, analysing or still open.", open);
  o.gauge("frd_dump_duration_seconds", "Last incident: from opening to every dump in.",
          incidents_.last_dump_seconds());
  o.gauge("frd_analysis_duration_seconds", "Last incident: writing and analysing the dump set.",
          incidents_.last_analysis_seconds());
  o.counter("frd_upload_failures_total", "Dumps that failed to arrive or to be written.",
            uploads_.failures());
  o.gauge("frd_retained_report_bytes", "Estimated bytes kept of the nodes' last reports.",
          nodes_.retained_bytes());
  o.counter("frd_reports_trimmed_total", "Reports cut to the memory bounds.",
            nodes_.reports_trimmed());
  o.gauge("frd_slow_ranks", "Ranks their peers keep waiting for, the job still progressing.", slow);
  o.gauge("frd_learned_communicators", "Communicators whose normal op latency is learned.",
          comms_.size());
  o.counter("frd_nodes_forgotten_total", "Lost nodes forgotten (no open incident needed them).",
            nodes_.nodes_forgotten());
  return o.take() + slow_metrics(slow_);
}

}  // namespace fr::daemon
