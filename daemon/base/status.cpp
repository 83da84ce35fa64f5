// See status.h. The JSON of each part, and reading it back tolerantly.
#include "daemon/base/status.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

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

// Readers that leave *out as it is when the key is absent or of another type.
void get(const json& j, const char* key, std::string* out) {
  auto it = j.find(key);
  if (it != j.end() && it->is_string()) *out = it->get<std::string>();
}
void get(const json& j, const char* key, bool* out) {
  auto it = j.find(key);
  if (it != j.end() && it->is_boolean()) *out = it->get<bool>();
}
void get(const json& j, const char* key, double* out) {
  auto it = j.find(key);
  if (it != j.end() && it->is_number()) *out = it->get<double>();
}
template <typename Int>
void get(const json& j, const char* key, Int* out) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return;
  if (it->is_number_float()) {
    const double d = it->get<double>();  // kept only when it fits (a cast past the range is UB)
    if (d >= double(std::numeric_limits<Int>::lowest()) &&
        d < double(std::numeric_limits<Int>::max()))
      *out = Int(d);
  } else if (it->is_number_unsigned()) {
    *out = Int(it->get<uint64_t>());
  } else {
    *out = Int(it->get<int64_t>());
  }
}
void get_secs(const json& j, const char* key, int64_t* out) {
  double s = 0;
  auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return;
  get(j, key, &s);
  *out = from_secs(s);
}
uint64_t parse_hex(const std::string& s) {
  std::string t = s.rfind("0x", 0) == 0 ? s.substr(2) : s;
  return t.empty() ? 0 : std::strtoull(t.c_str(), nullptr, 16);
}
template <typename T>
void get_list(const json& j, const char* key, std::vector<T>* out) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_array()) return;
  out->clear();
  for (const auto& e : *it)
    if (e.is_object()) out->push_back(e.get<T>());
}
void get_ints(const json& j, const char* key, std::vector<int>* out) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_array()) return;
  out->clear();
  for (const auto& e : *it)
    if (e.is_number()) out->push_back(e.get<int>());
}
void get_strings(const json& j, const char* key, std::vector<std::string>* out) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_array()) return;
  out->clear();
  for (const auto& e : *it)
    if (e.is_string()) out->push_back(e.get<std::string>());
}
const json& member(const json& j, const char* key) {
  static const json empty = json::object();
  auto it = j.find(key);
  return it != j.end() && it->is_object() ? *it : empty;
}

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
  get(j, "id", &id);
  c.id = parse_hex(id);
  get(j, "name", &c.name);
  get(j, "size", &c.size);
  get(j, "rank", &c.rank);
  get(j, "coll_seq", &c.coll_seq);
  get(j, "p2p_seq", &c.p2p_seq);
  get(j, "enqueued", &c.enqueued);
  get(j, "started", &c.started);
  get(j, "completed", &c.completed);
  get_secs(j, "oldest_in_flight_s", &c.oldest_in_flight_ns);
  get_secs(j, "stall_threshold_s", &c.stall_threshold_ns);
}

void from_json(const json& j, StatusProcess& p) {
  get(j, "rank", &p.rank);
  get(j, "world_size", &p.world_size);
  get(j, "pid", &p.pid);
  get(j, "alive", &p.alive);
  get(j, "exited_cleanly", &p.exited_cleanly);
  get(j, "log", &p.log);
  get(j, "records", &p.records);
  get_list(j, "comms", &p.comms);
}

void from_json(const json& j, StatusUnrecorded& u) {
  get(j, "rank", &u.rank);
  get(j, "world_size", &u.world_size);
  get(j, "pid", &u.pid);
  get(j, "torch", &u.torch);
  get(j, "torch_seq", &u.torch_seq);
  get_secs(j, "torch_idle_s", &u.torch_idle_ns);
}

void from_json(const json& j, StatusNode& n) {
  get(j, "name", &n.name);
  get(j, "host", &n.host);
  get(j, "connected", &n.connected);
  get(j, "lost", &n.lost);
  get(j, "trimmed", &n.trimmed);
  get_secs(j, "heartbeat_age_s", &n.heartbeat_age_ns);
  get(j, "heartbeats", &n.heartbeats);
  get(j, "clock_offset_ns", &n.clock_offset_ns);
  get(j, "clock_rtt_ns", &n.clock_rtt_ns);
  get(j, "alive", &n.alive);
  get_strings(j, "gpu_alerts", &n.gpu_alerts);
  get_list(j, "unrecorded", &n.unrecorded);
  get_list(j, "processes", &n.processes);
  n.ranks = n.processes.size();
  get(j, "ranks", &n.ranks);
}

void from_json(const json& j, StatusRankFinding& f) {
  get(j, "kind", &f.kind);
  get(j, "rank", &f.rank);
  get(j, "node", &f.node);
  std::string comm;
  get(j, "comm", &comm);
  f.comm = parse_hex(comm);
  get(j, "comm_name", &f.comm_name);
  get(j, "rank_waiting", &f.rank_waiting);
  get(j, "peers_waiting", &f.peers_waiting);
  get(j, "first_ns", &f.first_ns);
  get(j, "last_ns", &f.last_ns);
  get(j, "active", &f.active);
}

void from_json(const json& j, StatusSlow& s) {
  get(j, "cause", &s.cause);
  get(j, "factor", &s.factor);
  get_ints(j, "culprit_ranks", &s.culprit_ranks);
  get(j, "comm", &s.comm);
  get(j, "comm_name", &s.comm_name);
  get(j, "evidence", &s.evidence);
  get(j, "value_ns", &s.value_ns);
  get(j, "others_ns", &s.others_ns);
  get(j, "step_ns", &s.step_ns);
  get(j, "step_without_ns", &s.step_without_ns);
  get(j, "loss_percent", &s.loss_percent);
  if (j.contains("late_share") && j["late_share"].is_number())
    s.late_share = j["late_share"].get<double>();
  get(j, "share", &s.share);
  get(j, "kernel_timed", &s.kernel_timed);
  get(j, "gpu_sampled", &s.gpu_sampled);
  if (j.contains("busy_share") && j["busy_share"].is_number())
    s.busy_share = j["busy_share"].get<double>();
  if (j.contains("peers_busy_share") && j["peers_busy_share"].is_number())
    s.peers_busy_share = j["peers_busy_share"].get<double>();
  if (j.contains("where") && j["where"].is_object()) {
    StatusSlow::Where w;
    get(j["where"], "waiting_rank", &w.waiting_rank);
    get(j["where"], "peer_rank", &w.peer_rank);
    get(j["where"], "channel", &w.channel);
    s.where = w;
  }
}

void from_json(const json& j, StatusIncident& i) {
  get(j, "id", &i.id);
  get(j, "kind", &i.kind);
  get(j, "state", &i.state);
  get(j, "reason", &i.reason);
  get(j, "processes_seen", &i.processes_seen);
  get(j, "dir", &i.dir);
  get(j, "opened_ns", &i.opened_ns);
  get(j, "asked", &i.asked);
  get(j, "uploaded", &i.uploaded);
  for (const auto& [k, v] : member(j, "failed").items())
    if (v.is_string()) i.failed[k] = v.get<std::string>();
  get(j, "verdict", &i.verdict);
  get(j, "summary", &i.summary);
  get_ints(j, "culprit_ranks", &i.culprit_ranks);
  if (j.contains("slow") && j["slow"].is_object()) i.slow = j["slow"].get<StatusSlow>();
  get(j, "error", &i.error);
}

void from_json(const json& j, StatusProcesses& p) {
  get(j, "total", &p.total);
  get(j, "recording", &p.recording);
  get(j, "torch", &p.torch);
  get(j, "nodes", &p.nodes);
  get(j, "summary", &p.summary);
}

void from_json(const json& j, StatusPage& p) {
  get(j, "offset", &p.offset);
  get(j, "returned", &p.returned);
  if (j.contains("next_offset") && j["next_offset"].is_number())
    p.next_offset = j["next_offset"].get<size_t>();
}

void from_json(const json& j, CoordinatorStatus& s) {
  if (!j.is_object()) return;
  get(j, "schema", &s.schema);
  if (j.contains("processes") && j["processes"].is_object())
    s.processes = j["processes"].get<StatusProcesses>();
  get(j, "coordinator_id", &s.coordinator_id);
  get(j, "job_id", &s.job_id);
  const json& r = member(j, "ranks");
  get(r, "expected", &s.ranks.expected);
  get(r, "known", &s.ranks.known);
  get(r, "alive", &s.ranks.alive);
  get(r, "dead", &s.ranks.dead);
  const json& nc = member(j, "node_counts");
  get(nc, "known", &s.node_counts.known);
  get(nc, "connected", &s.node_counts.connected);
  get(nc, "lost", &s.node_counts.lost);
  get(nc, "forgotten", &s.node_counts.forgotten);
  get(j, "retained_report_bytes", &s.retained_report_bytes);
  const json& st = member(j, "stall");
  get(st, "mode", &s.stall.mode);
  get_secs(st, "fixed_s", &s.stall.fixed_ns);
  get_secs(st, "floor_s", &s.stall.floor_ns);
  get_secs(st, "cap_s", &s.stall.cap_ns);
  get(st, "factor", &s.stall.factor);
  get(st, "learned_communicators", &s.stall.learned_communicators);
  get_list(j, "findings", &s.findings);
  get_list(j, "slow", &s.slow);
  get_list(j, "incidents", &s.incidents);
  get_list(j, "nodes", &s.nodes);
  s.page = member(j, "page").get<StatusPage>();
  s.query.node_offset = s.page.offset;
  s.more = s.page.next_offset.has_value();
}

}  // namespace fr::daemon
