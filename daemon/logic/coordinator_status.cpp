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

void node_json(const StatusSnapshot::NodeView& n, bool summary, std::string* out) {
  nlohmann::json procs = nlohmann::json::array();
  if (!summary)
    for (const auto& p : n.last.processes) {
      nlohmann::json comms = nlohmann::json::array();
      for (const auto& c : p.comms) {
        auto t = n.thresholds.find(c.comm_id);
        comms.push_back({{"id", hex_id(c.comm_id)},
                         {"name", printable(c.name, 64)},
                         {"size", c.size},
                         {"rank", c.rank},
                         {"coll_seq", c.coll_seq},
                         {"p2p_seq", c.p2p_seq},
                         {"enqueued", c.enqueued},
                         {"started", c.started},
                         {"completed", c.completed},
                         {"oldest_in_flight_s", secs(c.oldest_age_ns)},
                         {"stall_threshold_s", secs(t == n.thresholds.end() ? 0 : t->second)}});
      }
      procs.push_back({{"rank", p.rank},
                       {"world_size", p.world_size},
                       {"pid", p.pid},
                       {"alive", p.alive},
                       {"exited_cleanly", p.exited_cleanly},
                       {"log", printable(p.log, 128)},
                       {"records", p.records},
                       {"comms", comms}});
    }
  // Processes under fr-run without a flight log (daemon/base/proc_file.h).
  nlohmann::json unrecorded = nlohmann::json::array();
  if (!summary)
    for (const auto& u : n.last.unrecorded) {
      nlohmann::json e = {
          {"rank", u.rank}, {"world_size", u.world_size}, {"pid", u.pid}, {"torch", u.torch}};
      if (u.torch) {
        e["torch_seq"] = u.torch_seq;
        e["torch_idle_s"] = secs(u.torch_idle_ns);
      }
      unrecorded.push_back(std::move(e));
    }
  nlohmann::json j = {{"name", n.name},
                      {"host", n.host},
                      {"connected", n.connected},
                      {"lost", n.lost},
                      {"heartbeat_age_s", secs(n.heartbeat_age_ns)},
                      {"heartbeats", n.heartbeats},
                      {"clock_offset_ns", n.clock_offset_ns},
                      {"clock_rtt_ns", n.clock_rtt_ns},
                      {"ranks", n.last.processes.size()},
                      {"alive", n.alive},
                      {"trimmed", n.trimmed},
                      {"gpu_alerts", n.last.gpu_alerts},
                      {"unrecorded", unrecorded},
                      {"processes", procs}};
  *out += j.dump();
}

}  // namespace

std::string render_status(const StatusSnapshot& s) {
  const StatusQuery& q = s.query;
  std::string nodes = "[";
  size_t returned = 0;
  bool more = s.more;
  for (const auto& n : s.nodes) {
    if (nodes.size() >= q.max_bytes) {
      more = true;
      break;
    }
    if (returned++) nodes += ",";
    node_json(n, q.summary, &nodes);
  }
  nodes += "]";
  nlohmann::json head = s.head;
  head["page"] = {
      {"offset", q.node_offset},
      {"returned", returned},
      {"next_offset", more ? nlohmann::json(q.node_offset + returned) : nlohmann::json()}};
  std::string out = head.dump();
  out.pop_back();  // the closing brace: the nodes go in as already rendered text
  out += ",\"nodes\":" + nodes + "}";
  return out;
}

// `processes` of frd-status/1.
static nlohmann::json processes_json(const ProcessCounts& pc) {
  return {{"total", pc.total},
          {"recording", pc.recording},
          {"torch", pc.torch},
          {"nodes", pc.nodes},
          {"summary", pc.summary()}};
}

StatusSnapshot CoordinatorState::status_snapshot(int64_t now_mono, const StatusQuery& q) const {
  StatusSnapshot snap;
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
  // The page's nodes, copied. The rendered text's size bounds the page (render_status); the
  // reports' estimated size bounds the copy, well past it.
  size_t index = 0, bytes = 0;
  for (const auto& [_, n] : nodes_) {
    if (index++ < q.node_offset) continue;
    if (snap.nodes.size() >= q.node_limit || bytes >= 4 * q.max_bytes) {
      snap.more = true;
      break;
    }
    StatusSnapshot::NodeView v;
    v.name = n.name;
    v.host = n.host;
    v.connected = n.connected;
    v.lost = n.lost;
    v.trimmed = n.trimmed;
    v.heartbeat_age_ns = now_mono - n.last_heartbeat_mono;
    v.heartbeats = n.heartbeats;
    v.clock_offset_ns = n.clock.offset_ns();
    v.clock_rtt_ns = n.clock.delay_ns();
    v.alive = n.alive;
    v.last.gpu_alerts = n.last.gpu_alerts;
    if (q.summary) {
      v.last.processes.resize(n.last.processes.size());  // counted, not shown
    } else {
      v.last.processes = n.last.processes;
      v.last.unrecorded = n.last.unrecorded;
      for (const auto& p : n.last.processes)
        for (const auto& c : p.comms)
          v.thresholds.try_emplace(c.comm_id, stall_threshold_ns(c.comm_id));
    }
    bytes += q.summary ? 256 : n.retained;
    snap.nodes.push_back(std::move(v));
  }
  nlohmann::json incs = nlohmann::json::array();
  for (const auto& i : incidents_) {
    nlohmann::json failed = nlohmann::json::object();
    for (const auto& [k, v] : i.failed) failed[k] = v;
    incs.push_back({{"id", i.id},
                    {"kind", incident_kind_name(i.kind)},
                    {"state", incident_state_name(i.state)},
                    {"reason", i.reason},
                    {"processes_seen", i.processes_seen},
                    {"dir", i.dir},
                    {"opened_ns", i.opened_real},
                    {"asked", i.asked.size()},
                    {"uploaded", i.uploaded.size()},
                    {"failed", failed},
                    {"verdict", i.verdict_kind},
                    {"summary", i.verdict_summary},
                    {"culprit_ranks", i.culprits},
                    {"slow", i.slow ? slow_json(*i.slow) : nlohmann::json(nullptr)},
                    {"error", i.error}});
  }
  nlohmann::json slow = nlohmann::json::array();
  for (const auto& f : slow_.findings()) slow.push_back(slow_json(f));
  nlohmann::json head = {
      {"schema", "frd-status/1"},
      {"processes", processes_json(process_counts())},
      {"coordinator_id", coordinator_id()},
      {"job_id", known_job()},
      {"ranks",
       {{"expected", nodes_.expected_ranks()}, {"known", known}, {"alive", alive}, {"dead", dead}}},
      {"node_counts",
       {{"known", nodes_.size()},
        {"connected", connected},
        {"lost", lost},
        {"forgotten", nodes_.nodes_forgotten()}}},
      {"retained_report_bytes", nodes_.retained_bytes()},
      {"stall",
       {{"mode", stall_policy().automatic ? "auto" : "fixed"},
        {"fixed_s", secs(stall_policy().fixed_ns)},
        {"floor_s", secs(stall_policy().floor_ns)},
        {"cap_s", secs(stall_policy().cap_ns)},
        {"factor", stall_policy().factor},
        {"learned_communicators", comms_.size()}}},
      {"findings", comms_.findings_json()},
      {"slow", slow},
      {"incidents", incs}};
  snap.head = std::move(head);
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
