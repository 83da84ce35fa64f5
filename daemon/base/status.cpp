// See status.h. The JSON of each part, and reading it back tolerantly.
#include "daemon/base/status.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <type_traits>

#include "log/json_fields.h"

namespace fr::daemon {

namespace {

using nlohmann::json;

double secs(int64_t ns) { return double(ns) / 1e9; }

int64_t from_secs(double s) {
  if (!std::isfinite(s)) return 0;
  const double ns = s * 1e9;
  if (ns >= 9.2e18) return INT64_MAX;
  if (ns <= -9.2e18) return INT64_MIN;
  return std::llround(ns);
}

// The readers are fr::log's (json_fields.h): *out is left as it is when the key is absent, of
// another type or out of the range of *out's type. Any writer may have sent the document, so an
// integer may come as a whole float (3.0).
using fr::log::read_list;
template <typename T>
bool read_field(const json& j, const char* key, T* out) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>)
    return fr::log::read_field(j, key, out, fr::log::Floats::kWholeTaken);
  else
    return fr::log::read_field(j, key, out);
}

void get_secs(const json& j, const char* key, int64_t* out) {
  double s = 0;
  if (read_field(j, key, &s)) *out = from_secs(s);
}
uint64_t parse_hex(const std::string& s) {
  std::string t = s.rfind("0x", 0) == 0 ? s.substr(2) : s;
  return t.empty() ? 0 : std::strtoull(t.c_str(), nullptr, 16);
}
template <typename T>
void get_list(const json& j, const char* key, std::vector<T>* out) {
  const json* a = fr::log::array_field(j, key);
  if (a == nullptr) return;
  out->clear();
  for (const auto& e : *a)
    if (e.is_object()) out->push_back(e.get<T>());
}
using fr::log::object_or_empty;

// The document but its nodes and its page.
json head_json(const CoordinatorStatus& s) {
  json head = {{"schema", s.schema},
               {"coordinator_id", s.coordinator_id},
               {"job_id", s.job_id},
               {"ranks",
                {{"expected", s.ranks.expected},
                 {"known", s.ranks.known},
                 {"alive", s.ranks.alive},
                 {"dead", s.ranks.dead}}},
               {"node_counts",
                {{"known", s.node_counts.known},
                 {"connected", s.node_counts.connected},
                 {"lost", s.node_counts.lost},
                 {"forgotten", s.node_counts.forgotten}}},
               {"retained_report_bytes", s.retained_report_bytes},
               {"stall",
                {{"mode", s.stall.mode},
                 {"fixed_s", secs(s.stall.fixed_ns)},
                 {"floor_s", secs(s.stall.floor_ns)},
                 {"cap_s", secs(s.stall.cap_ns)},
                 {"factor", s.stall.factor},
                 {"learned_communicators", s.stall.learned_communicators}}},
               {"findings", s.findings},
               {"slow", s.slow},
               {"incidents", s.incidents}};
  if (s.processes) head["processes"] = *s.processes;
  return head;
}

// The nodes that fit in query.max_bytes, as the text of a JSON array; *page says which.
std::string nodes_text(const CoordinatorStatus& s, StatusPage* page) {
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
    nodes += json(n).dump();
  }
  nodes += "]";
  page->offset = q.node_offset;
  page->returned = returned;
  page->next_offset = more ? std::optional<size_t>(q.node_offset + returned) : std::nullopt;
  return nodes;
}

}  // namespace

std::string status_hex_id(uint64_t id) {
  char b[24];
  std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(id));
  return b;
}

const StatusIncident* CoordinatorStatus::incident(const std::string& id) const {
  for (const auto& i : incidents)
    if (i.id == id) return &i;
  return nullptr;
}

void to_json(json& j, const StatusComm& c) {
  j = {{"id", status_hex_id(c.id)},
       {"name", c.name},
       {"size", c.size},
       {"rank", c.rank},
       {"coll_seq", c.coll_seq},
       {"p2p_seq", c.p2p_seq},
       {"enqueued", c.enqueued},
       {"started", c.started},
       {"completed", c.completed},
       {"oldest_in_flight_s", secs(c.oldest_in_flight_ns)},
       {"stall_threshold_s", secs(c.stall_threshold_ns)}};
}

void to_json(json& j, const StatusProcess& p) {
  j = {{"rank", p.rank},
       {"world_size", p.world_size},
       {"pid", p.pid},
       {"alive", p.alive},
       {"exited_cleanly", p.exited_cleanly},
       {"log", p.log},
       {"records", p.records},
       {"comms", p.comms}};
}

void to_json(json& j, const StatusUnrecorded& u) {
  j = {{"rank", u.rank}, {"world_size", u.world_size}, {"pid", u.pid}, {"torch", u.torch}};
  if (u.torch) {
    j["torch_seq"] = u.torch_seq;
    j["torch_idle_s"] = secs(u.torch_idle_ns);
  }
}

void to_json(json& j, const StatusNode& n) {
  j = {{"name", n.name},
       {"host", n.host},
       {"connected", n.connected},
       {"lost", n.lost},
       {"heartbeat_age_s", secs(n.heartbeat_age_ns)},
       {"heartbeats", n.heartbeats},
       {"clock_offset_ns", n.clock_offset_ns},
       {"clock_rtt_ns", n.clock_rtt_ns},
       {"ranks", n.ranks},
       {"alive", n.alive},
       {"trimmed", n.trimmed},
       {"gpu_alerts", n.gpu_alerts},
       {"unrecorded", n.unrecorded},
       {"processes", n.processes}};
}

void to_json(json& j, const StatusRankFinding& f) {
  j = {{"kind", f.kind},
       {"rank", f.rank},
       {"node", f.node},
       {"comm", status_hex_id(f.comm)},
       {"comm_name", f.comm_name},
       {"rank_waiting", f.rank_waiting},
       {"peers_waiting", f.peers_waiting},
       {"first_ns", f.first_ns},
       {"last_ns", f.last_ns},
       {"active", f.active}};
}

void to_json(json& j, const StatusSlow& s) {
  j = {{"cause", s.cause},
       {"factor", s.factor},
       {"culprit_ranks", s.culprit_ranks},
       {"comm", s.comm},
       {"comm_name", s.comm_name},
       {"evidence", s.evidence},
       {"value_ns", s.value_ns},
       {"others_ns", s.others_ns},
       {"step_ns", s.step_ns},
       {"step_without_ns", s.step_without_ns},
       {"loss_percent", s.loss_percent}};
  if (s.late_share) j["late_share"] = *s.late_share;
  j["share"] = s.share;
  j["kernel_timed"] = s.kernel_timed;
  if (s.gpu_sampled) j["gpu_sampled"] = true;
  if (s.busy_share) j["busy_share"] = *s.busy_share;
  if (s.peers_busy_share) j["peers_busy_share"] = *s.peers_busy_share;
  if (!s.nvml_throttle.empty()) j["nvml_throttle"] = s.nvml_throttle;
  if (s.where)
    j["where"] = {{"waiting_rank", s.where->waiting_rank},
                  {"peer_rank", s.where->peer_rank},
                  {"channel", s.where->channel}};
}

void to_json(json& j, const StatusIncident& i) {
  json failed = json::object();
  for (const auto& [k, v] : i.failed) failed[k] = v;
  j = {{"id", i.id},
       {"kind", i.kind},
       {"state", i.state},
       {"reason", i.reason},
       {"processes_seen", i.processes_seen},
       {"dir", i.dir},
       {"opened_ns", i.opened_ns},
       {"asked", i.asked},
       {"uploaded", i.uploaded},
       {"failed", failed},
       {"verdict", i.verdict},
       {"summary", i.summary},
       {"culprit_ranks", i.culprit_ranks},
       {"slow", i.slow ? json(*i.slow) : json(nullptr)},
       {"error", i.error}};
}

void to_json(json& j, const StatusProcesses& p) {
  j = {{"total", p.total},
       {"recording", p.recording},
       {"torch", p.torch},
       {"nodes", p.nodes},
       {"summary", p.summary}};
}

void to_json(json& j, const StatusPage& p) {
  j = {{"offset", p.offset},
       {"returned", p.returned},
       {"next_offset", p.next_offset ? json(*p.next_offset) : json()}};
}

void to_json(json& j, const CoordinatorStatus& s) { j = json::parse(to_json_text(s)); }

std::string to_json_text(const CoordinatorStatus& s) {
  StatusPage page;
  const std::string nodes = nodes_text(s, &page);
  json head = head_json(s);
  head["page"] = page;
  std::string out = head.dump();
  out.pop_back();  // the closing brace: the nodes go in as already rendered text
  out += ",\"nodes\":" + nodes + "}";
  return out;
}

void fit_page(CoordinatorStatus* s) {
  nodes_text(*s, &s->page);
  s->nodes.resize(s->page.returned);
}

void from_json(const json& j, StatusComm& c) {
  std::string id;
  read_field(j, "id", &id);
  c.id = parse_hex(id);
  read_field(j, "name", &c.name);
  read_field(j, "size", &c.size);
  read_field(j, "rank", &c.rank);
  read_field(j, "coll_seq", &c.coll_seq);
  read_field(j, "p2p_seq", &c.p2p_seq);
  read_field(j, "enqueued", &c.enqueued);
  read_field(j, "started", &c.started);
  read_field(j, "completed", &c.completed);
  get_secs(j, "oldest_in_flight_s", &c.oldest_in_flight_ns);
  get_secs(j, "stall_threshold_s", &c.stall_threshold_ns);
}

void from_json(const json& j, StatusProcess& p) {
  read_field(j, "rank", &p.rank);
  read_field(j, "world_size", &p.world_size);
  read_field(j, "pid", &p.pid);
  read_field(j, "alive", &p.alive);
  read_field(j, "exited_cleanly", &p.exited_cleanly);
  read_field(j, "log", &p.log);
  read_field(j, "records", &p.records);
  get_list(j, "comms", &p.comms);
}

void from_json(const json& j, StatusUnrecorded& u) {
  read_field(j, "rank", &u.rank);
  read_field(j, "world_size", &u.world_size);
  read_field(j, "pid", &u.pid);
  read_field(j, "torch", &u.torch);
  read_field(j, "torch_seq", &u.torch_seq);
  get_secs(j, "torch_idle_s", &u.torch_idle_ns);
}

void from_json(const json& j, StatusNode& n) {
  read_field(j, "name", &n.name);
  read_field(j, "host", &n.host);
  read_field(j, "connected", &n.connected);
  read_field(j, "lost", &n.lost);
  read_field(j, "trimmed", &n.trimmed);
  get_secs(j, "heartbeat_age_s", &n.heartbeat_age_ns);
  read_field(j, "heartbeats", &n.heartbeats);
  read_field(j, "clock_offset_ns", &n.clock_offset_ns);
  read_field(j, "clock_rtt_ns", &n.clock_rtt_ns);
  read_field(j, "alive", &n.alive);
  read_list(j, "gpu_alerts", &n.gpu_alerts, fr::log::kNoBound);
  get_list(j, "unrecorded", &n.unrecorded);
  get_list(j, "processes", &n.processes);
  n.ranks = n.processes.size();
  read_field(j, "ranks", &n.ranks);
}

void from_json(const json& j, StatusRankFinding& f) {
  read_field(j, "kind", &f.kind);
  read_field(j, "rank", &f.rank);
  read_field(j, "node", &f.node);
  std::string comm;
  read_field(j, "comm", &comm);
  f.comm = parse_hex(comm);
  read_field(j, "comm_name", &f.comm_name);
  read_field(j, "rank_waiting", &f.rank_waiting);
  read_field(j, "peers_waiting", &f.peers_waiting);
  read_field(j, "first_ns", &f.first_ns);
  read_field(j, "last_ns", &f.last_ns);
  read_field(j, "active", &f.active);
}

void from_json(const json& j, StatusSlow& s) {
  read_field(j, "cause", &s.cause);
  read_field(j, "factor", &s.factor);
  read_list(j, "culprit_ranks", &s.culprit_ranks, fr::log::kNoBound, fr::log::Floats::kWholeTaken);
  read_field(j, "comm", &s.comm);
  read_field(j, "comm_name", &s.comm_name);
  read_field(j, "evidence", &s.evidence);
  read_field(j, "value_ns", &s.value_ns);
  read_field(j, "others_ns", &s.others_ns);
  read_field(j, "step_ns", &s.step_ns);
  read_field(j, "step_without_ns", &s.step_without_ns);
  read_field(j, "loss_percent", &s.loss_percent);
  read_field(j, "late_share", &s.late_share);
  read_field(j, "share", &s.share);
  read_field(j, "kernel_timed", &s.kernel_timed);
  read_field(j, "gpu_sampled", &s.gpu_sampled);
  read_field(j, "busy_share", &s.busy_share);
  read_field(j, "peers_busy_share", &s.peers_busy_share);
  read_list(j, "nvml_throttle", &s.nvml_throttle, 8);
  if (const json* where = fr::log::object_field(j, "where")) {
    StatusSlow::Where w;
    read_field(*where, "waiting_rank", &w.waiting_rank);
    read_field(*where, "peer_rank", &w.peer_rank);
    read_field(*where, "channel", &w.channel);
    s.where = w;
  }
}

void from_json(const json& j, StatusIncident& i) {
  read_field(j, "id", &i.id);
  read_field(j, "kind", &i.kind);
  read_field(j, "state", &i.state);
  read_field(j, "reason", &i.reason);
  read_field(j, "processes_seen", &i.processes_seen);
  read_field(j, "dir", &i.dir);
  read_field(j, "opened_ns", &i.opened_ns);
  read_field(j, "asked", &i.asked);
  read_field(j, "uploaded", &i.uploaded);
  for (const auto& [k, v] : object_or_empty(j, "failed").items())
    if (v.is_string()) i.failed[k] = v.get<std::string>();
  read_field(j, "verdict", &i.verdict);
  read_field(j, "summary", &i.summary);
  read_list(j, "culprit_ranks", &i.culprit_ranks, fr::log::kNoBound, fr::log::Floats::kWholeTaken);
  if (const json* slow = fr::log::object_field(j, "slow")) i.slow = slow->get<StatusSlow>();
  read_field(j, "error", &i.error);
}

void from_json(const json& j, StatusProcesses& p) {
  read_field(j, "total", &p.total);
  read_field(j, "recording", &p.recording);
  read_field(j, "torch", &p.torch);
  read_field(j, "nodes", &p.nodes);
  read_field(j, "summary", &p.summary);
}

void from_json(const json& j, StatusPage& p) {
  read_field(j, "offset", &p.offset);
  read_field(j, "returned", &p.returned);
  read_field(j, "next_offset", &p.next_offset);
}

void from_json(const json& j, CoordinatorStatus& s) {
  if (!j.is_object()) return;
  read_field(j, "schema", &s.schema);
  if (const json* processes = fr::log::object_field(j, "processes"))
    s.processes = processes->get<StatusProcesses>();
  read_field(j, "coordinator_id", &s.coordinator_id);
  read_field(j, "job_id", &s.job_id);
  const json& r = object_or_empty(j, "ranks");
  read_field(r, "expected", &s.ranks.expected);
  read_field(r, "known", &s.ranks.known);
  read_field(r, "alive", &s.ranks.alive);
  read_field(r, "dead", &s.ranks.dead);
  const json& nc = object_or_empty(j, "node_counts");
  read_field(nc, "known", &s.node_counts.known);
  read_field(nc, "connected", &s.node_counts.connected);
  read_field(nc, "lost", &s.node_counts.lost);
  read_field(nc, "forgotten", &s.node_counts.forgotten);
  read_field(j, "retained_report_bytes", &s.retained_report_bytes);
  const json& st = object_or_empty(j, "stall");
  read_field(st, "mode", &s.stall.mode);
  get_secs(st, "fixed_s", &s.stall.fixed_ns);
  get_secs(st, "floor_s", &s.stall.floor_ns);
  get_secs(st, "cap_s", &s.stall.cap_ns);
  read_field(st, "factor", &s.stall.factor);
  read_field(st, "learned_communicators", &s.stall.learned_communicators);
  get_list(j, "findings", &s.findings);
  get_list(j, "slow", &s.slow);
  get_list(j, "incidents", &s.incidents);
  get_list(j, "nodes", &s.nodes);
  s.page = object_or_empty(j, "page").get<StatusPage>();
  s.query.node_offset = s.page.offset;
  s.more = s.page.next_offset.has_value();
}

}  // namespace fr::daemon
