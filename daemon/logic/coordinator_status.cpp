// What the coordinator tells (coordinator.h): the frd-status/1 document (paged by nodes, built
// as text with a bounded size), the Prometheus metrics, and the slow-rank findings file.
#include "daemon/logic/coordinator.h"
#include "daemon/logic/coordinator_helpers.h"

#include <algorithm>
#include <sstream>

#include "daemon/base/names.h"

namespace fr::daemon {

using namespace coordinator_helpers;

std::string CoordinatorState::findings_path() const {
  return cfg_.dump_dir + "/" + job_dir_name() + "/findings.json";
}

nlohmann::json CoordinatorState::findings_json() const {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& f : findings_)
    list.push_back({{"kind", f.kind},
                    {"rank", f.rank},
                    {"node", f.node},
                    {"comm", hex_id(f.comm_id)},
                    {"comm_name", f.comm_name},
                    {"rank_waiting", f.rank_waiting},
                    {"peers_waiting", f.peers_waiting},
                    {"first_ns", f.first_real},
                    {"last_ns", f.last_real},
                    {"active", f.active}});
  return list;
}

std::string CoordinatorState::findings_text() const {
  nlohmann::json j = {{"schema", "frd-findings/1"},
                      {"job_id", job_dir_name()},
                      {"coordinator_id", coordinator_id_},
                      {"findings", findings_json()}};
  return j.dump(2) + "\n";
}

void CoordinatorState::node_json(const Node& n, int64_t now_mono, bool summary,
                                 std::string* out) const {
  nlohmann::json procs = nlohmann::json::array();
  if (!summary)
    for (const auto& p : n.last.processes) {
      nlohmann::json comms = nlohmann::json::array();
      for (const auto& c : p.comms)
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
                         {"stall_threshold_s", secs(stall_threshold_ns(c.comm_id))}});
      procs.push_back({{"rank", p.rank},
                       {"world_size", p.world_size},
                       {"pid", p.pid},
                       {"alive", p.alive},
                       {"exited_cleanly", p.exited_cleanly},
                       {"log", printable(p.log, 128)},
                       {"records", p.records},
                       {"comms", comms}});
    }
  nlohmann::json j = {{"name", n.name},
                      {"host", n.host},
                      {"connected", n.connected},
                      {"lost", n.lost},
                      {"heartbeat_age_s", secs(now_mono - n.last_heartbeat_mono)},
                      {"heartbeats", n.heartbeats},
                      {"clock_offset_ns", n.clock.offset_ns()},
                      {"clock_rtt_ns", n.clock.delay_ns()},
                      {"ranks", n.last.processes.size()},
                      {"alive", n.alive},
                      {"trimmed", n.trimmed},
                      {"gpu_alerts", n.last.gpu_alerts},
                      {"processes", procs}};
  *out += j.dump();
}

std::string CoordinatorState::status_text(int64_t now_mono, const StatusQuery& q) const {
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
  std::string nodes = "[";
  size_t index = 0, returned = 0;
  bool more = false;
  for (const auto& [_, n] : nodes_) {
    if (index++ < q.node_offset) continue;
    if (returned >= q.node_limit || nodes.size() >= q.max_bytes) {
      more = true;
      break;
    }
    if (returned++) nodes += ",";
    node_json(n, now_mono, q.summary, &nodes);
  }
  nodes += "]";
  nlohmann::json incs = nlohmann::json::array();
  for (const auto& i : incidents_) {
    nlohmann::json failed = nlohmann::json::object();
    for (const auto& [k, v] : i.failed) failed[k] = v;
    incs.push_back({{"id", i.id},
                    {"kind", incident_kind_name(i.kind)},
                    {"state", incident_state_name(i.state)},
                    {"reason", i.reason},
                    {"dir", i.dir},
                    {"opened_ns", i.opened_real},
                    {"asked", i.asked.size()},
                    {"uploaded", i.uploaded.size()},
                    {"failed", failed},
                    {"verdict", i.verdict_kind},
                    {"summary", i.verdict_summary},
                    {"culprit_ranks", i.culprits},
                    {"error", i.error}});
  }
  nlohmann::json head = {
      {"schema", "frd-status/1"},
      {"coordinator_id", coordinator_id_},
      {"job_id", known_job()},
      {"ranks",
       {{"expected", expected_ranks()}, {"known", known}, {"alive", alive}, {"dead", dead}}},
      {"node_counts",
       {{"known", nodes_.size()},
        {"connected", connected},
        {"lost", lost},
        {"forgotten", nodes_forgotten_}}},
      {"retained_report_bytes", retained_bytes_},
      {"stall",
       {{"mode", policy_.automatic ? "auto" : "fixed"},
        {"fixed_s", secs(policy_.fixed_ns)},
        {"floor_s", secs(policy_.floor_ns)},
        {"cap_s", secs(policy_.cap_ns)},
        {"factor", policy_.factor},
        {"learned_communicators", models_.size()}}},
      {"findings", findings_json()},
      {"page",
       {{"offset", q.node_offset},
        {"returned", returned},
        {"next_offset", more ? nlohmann::json(q.node_offset + returned) : nlohmann::json()}}},
      {"incidents", incs}};
  std::string out = head.dump();
  out.pop_back();  // the closing brace: the nodes go in as already rendered text
  out += ",\"nodes\":" + nodes + "}";
  return out;
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
  for (const auto& f : findings_) slow += f.active;
  std::ostringstream o;
  o << "# HELP frd_nodes Node daemons known to the coordinator.\n# TYPE frd_nodes gauge\n"
    << "frd_nodes{state=\"connected\"} " << connected << "\n"
    << "frd_nodes{state=\"lost\"} " << lost << "\n"
    << "frd_nodes{state=\"known\"} " << nodes_.size() << "\n"
    << "# HELP frd_ranks Ranks (processes with a flight log) reported by the nodes.\n"
    << "# TYPE frd_ranks gauge\n"
    << "frd_ranks{state=\"known\"} " << ranks << "\n"
    << "frd_ranks{state=\"alive\"} " << alive << "\n"
    << "frd_ranks{state=\"expected\"} " << expected_ranks() << "\n"
    << "# HELP frd_heartbeat_age_max_seconds Oldest last heartbeat among connected nodes.\n"
    << "# TYPE frd_heartbeat_age_max_seconds gauge\n"
    << "frd_heartbeat_age_max_seconds " << max_age << "\n"
    << "# HELP frd_heartbeats_total Heartbeats received.\n# TYPE frd_heartbeats_total counter\n"
    << "frd_heartbeats_total " << heartbeats_total_ << "\n"
    << "# HELP frd_incidents_total Incidents opened, by kind.\n"
    << "# TYPE frd_incidents_total counter\n";
  for (const char* k : {"stall", "rank_dead", "node_lost", "manual"})
    o << "frd_incidents_total{kind=\"" << k << "\"} " << by_kind[k] << "\n";
  o << "# HELP frd_incidents_open Incidents collecting, analysing or still open.\n"
    << "# TYPE frd_incidents_open gauge\nfrd_incidents_open " << open << "\n"
    << "# HELP frd_dump_duration_seconds Last incident: from opening to every dump in.\n"
    << "# TYPE frd_dump_duration_seconds gauge\nfrd_dump_duration_seconds " << last_dump_seconds_
    << "\n"
    << "# HELP frd_analysis_duration_seconds Last incident: writing and analysing the dump set.\n"
    << "# TYPE frd_analysis_duration_seconds gauge\nfrd_analysis_duration_seconds "
    << last_analysis_seconds_ << "\n"
    << "# HELP frd_upload_failures_total Dumps that failed to arrive or to be written.\n"
    << "# TYPE frd_upload_failures_total counter\nfrd_upload_failures_total " << upload_failures_
    << "\n"
    << "# HELP frd_retained_report_bytes Estimated bytes kept of the nodes' last reports.\n"
    << "# TYPE frd_retained_report_bytes gauge\nfrd_retained_report_bytes " << retained_bytes_
    << "\n"
    << "# HELP frd_reports_trimmed_total Reports cut to the memory bounds.\n"
    << "# TYPE frd_reports_trimmed_total counter\nfrd_reports_trimmed_total " << reports_trimmed_
    << "\n"
    << "# HELP frd_slow_ranks Ranks their peers keep waiting for, the job still progressing.\n"
    << "# TYPE frd_slow_ranks gauge\nfrd_slow_ranks " << slow << "\n"
    << "# HELP frd_learned_communicators Communicators whose normal op latency is learned.\n"
    << "# TYPE frd_learned_communicators gauge\nfrd_learned_communicators " << models_.size()
    << "\n"
    << "# HELP frd_nodes_forgotten_total Lost nodes forgotten (no open incident needed them).\n"
    << "# TYPE frd_nodes_forgotten_total counter\nfrd_nodes_forgotten_total " << nodes_forgotten_
    << "\n";
  return o.str();
}

}  // namespace fr::daemon
