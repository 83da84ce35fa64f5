// See coordinator.h.
#include "daemon/coordinator.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <sstream>

#include "daemon/assembly.h"
#include "daemon/names.h"
#include "log/reader.h"
#include "log/snapshot.h"

namespace fr::daemon {

const char* incident_kind_name(IncidentKind k) {
  switch (k) {
    case IncidentKind::kStall: return "stall";
    case IncidentKind::kRankDead: return "rank_dead";
    case IncidentKind::kNodeLost: return "node_lost";
    case IncidentKind::kManual: return "manual";
  }
  return "unknown";
}

const char* incident_state_name(IncidentState s) {
  switch (s) {
    case IncidentState::kCollecting: return "collecting";
    case IncidentState::kAnalyzing: return "analyzing";
    case IncidentState::kOpen: return "open";
    case IncidentState::kClosedTransient: return "closed_transient";
    case IncidentState::kClosed: return "closed";
  }
  return "unknown";
}

namespace {

bool is_dir(const std::string& p) {
  struct stat st;
  return stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

double secs(int64_t ns) { return double(ns) / 1e9; }

std::string hex_id(uint64_t v) {
  char b[24];
  std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(v));
  return b;
}

}  // namespace

CoordinatorState::CoordinatorState(CoordinatorConfig cfg) : cfg_(std::move(cfg)) {
  std::random_device rd;
  coordinator_id_ = hex_id((uint64_t(rd()) << 32) ^ rd() ^ uint64_t(real_ns()));
  if (!cfg_.job_id.empty()) cfg_.job_id = sanitize_name(cfg_.job_id);
}

std::string CoordinatorState::job_dir_name() const {
  if (!cfg_.job_id.empty()) return cfg_.job_id;
  if (!learned_job_.empty()) return learned_job_;
  return "job";
}

Incident* CoordinatorState::active() {
  for (auto& i : incidents_)
    if (i.state == IncidentState::kCollecting || i.state == IncidentState::kAnalyzing ||
        i.state == IncidentState::kOpen)
      return &i;
  return nullptr;
}

Incident* CoordinatorState::find(const std::string& id) {
  for (auto& i : incidents_)
    if (i.id == id) return &i;
  return nullptr;
}

CoordinatorState::Node* CoordinatorState::by_session(uint64_t session) {
  auto it = sessions_.find(session);
  if (it == sessions_.end()) return nullptr;
  auto n = nodes_.find(it->second);
  if (n == nodes_.end() || n->second.session != session) return nullptr;
  return &n->second;
}

size_t CoordinatorState::connected_nodes() const {
  size_t c = 0;
  for (const auto& [_, n] : nodes_) c += n.connected;
  return c;
}

std::vector<uint64_t> CoordinatorState::sessions() const {
  std::vector<uint64_t> out;
  for (const auto& [_, n] : nodes_)
    if (n.connected) out.push_back(n.session);
  return out;
}

uint64_t CoordinatorState::connect(const std::string& node_name, const std::string& host,
                                   const std::string& job, int64_t now_mono, std::string* error) {
  std::string name = sanitize_name(node_name);
  if (!cfg_.job_id.empty() && !job.empty() && sanitize_name(job) != cfg_.job_id) {
    *error = "node " + name + " belongs to job " + printable(job, 64) + ", not " + cfg_.job_id;
    return 0;
  }
  auto it = nodes_.find(name);
  if (it == nodes_.end()) {
    if (nodes_.size() >= cfg_.max_nodes) {
      *error = "too many nodes (" + std::to_string(cfg_.max_nodes) + ")";
      return 0;
    }
    it = nodes_.emplace(name, Node{}).first;
    it->second.name = name;
  }
  Node& n = it->second;
  if (n.connected) sessions_.erase(n.session);  // the old stream is stale from now on
  n.host = sanitize_name(host);
  n.session = next_session_++;
  n.connected = true;
  n.lost = false;
  n.connected_mono = now_mono;
  n.last_heartbeat_mono = now_mono;
  sessions_[n.session] = name;
  return n.session;
}

void CoordinatorState::resend_requests(uint64_t session, Actions* actions) {
  Node* n = by_session(session);
  if (!n) return;
  for (auto& inc : incidents_) {
    if (inc.state != IncidentState::kCollecting || inc.uploaded.count(n->name)) continue;
    inc.asked.insert(n->name);
    inc.failed.erase(n->name);
    actions->dumps.push_back(
        {session, n->name, inc.id, inc.job_id, inc.reason, cfg_.dump_deadline_ns / 1'000'000});
  }
}

void CoordinatorState::disconnect(uint64_t session, int64_t now_mono) {
  (void)now_mono;
  Node* n = by_session(session);
  sessions_.erase(session);
  if (!n) return;
  // The node stays known; it counts as lost only once it has been silent for the timeout.
  n->connected = false;
}

bool CoordinatorState::heartbeat(uint64_t session, NodeReport report, int64_t now_mono) {
  Node* n = by_session(session);
  if (!n) return false;
  n->last_heartbeat_mono = now_mono;
  n->lost = false;
  n->heartbeats++;
  heartbeats_total_++;
  n->last = std::move(report);
  n->max_age_ns = 0;
  n->alive = 0;
  std::map<std::string, int64_t> dead;
  for (const auto& p : n->last.processes) {
    if (learned_job_.empty() && !p.job_id.empty()) learned_job_ = sanitize_name(p.job_id);
    if (p.alive) {
      n->alive++;
      for (const auto& c : p.comms) {
        if (c.oldest_age_ns > n->max_age_ns) {
          n->max_age_ns = c.oldest_age_ns;
          n->max_age_log = p.log;
          n->max_age_comm = c.comm_id;
          n->max_age_comm_name = printable(c.name, 64);
          n->max_age_op = c.oldest_op;
          n->max_age_seq = c.oldest_seq;
          n->max_age_completed = c.completed;
        }
      }
    } else if (!p.exited_cleanly) {
      auto it = n->dead_since.find(p.log);
      dead[p.log] = it == n->dead_since.end() ? now_mono : it->second;
    }
  }
  n->dead_since = std::move(dead);
  return true;
}

void CoordinatorState::clock_sample(uint64_t session, int64_t t1, int64_t t2, int64_t t3,
                                    int64_t t4) {
  if (Node* n = by_session(session)) n->clock.add(t1, t2, t3, t4);
}

int CoordinatorState::expected_ranks() const {
  if (cfg_.expect_ranks > 0) return cfg_.expect_ranks;
  int ws = -1;
  for (const auto& [_, n] : nodes_)
    for (const auto& p : n.last.processes) ws = std::max(ws, p.world_size);
  return ws;
}

int CoordinatorState::total_alive() const {
  int a = 0;
  for (const auto& [_, n] : nodes_)
    if (!n.lost) a += n.alive;
  return a;
}

void CoordinatorState::open(IncidentKind kind, const std::string& reason, int64_t now_mono,
                            Actions* actions, const Node* trigger) {
  Incident inc;
  inc.kind = kind;
  inc.reason = printable(reason, 512);
  inc.job_id = job_dir_name();
  std::string job_dir = cfg_.dump_dir + "/" + inc.job_id;
  // Never reuse an id that a previous coordinator run left on disk.
  do {
    char b[32];
    std::snprintf(b, sizeof b, "incident-%04d", next_incident_++);
    inc.id = b;
    inc.dir = job_dir + "/" + inc.id;
  } while (is_dir(inc.dir));
  // The directory exists from the start, so that a restarted coordinator still accepts the dumps
  // nodes took for this incident.
  std::string mkerr;
  if (!make_dirs(inc.dir, &mkerr)) inc.error = mkerr;
  inc.opened_mono = now_mono;
  inc.opened_real = real_ns();
  inc.deadline_mono = now_mono + cfg_.dump_deadline_ns;
  if (trigger) {
    inc.trigger_node = trigger->name;
    inc.trigger_log = trigger->max_age_log;
    inc.trigger_comm = trigger->max_age_comm;
    inc.trigger_completed = trigger->max_age_completed;
  }
  for (auto& [name, n] : nodes_) {
    if (!n.connected || n.lost) continue;
    inc.asked.insert(name);
    actions->dumps.push_back({n.session, name, inc.id, inc.job_id, inc.reason,
                              cfg_.dump_deadline_ns / 1'000'000});
  }
  actions->log.push_back("frd coordinator: " + inc.id + " opened (" + incident_kind_name(kind) +
                         "): " + inc.reason + "; asking " + std::to_string(inc.asked.size()) +
                         " node(s) to dump");
  incidents_.push_back(std::move(inc));
  check_collected(incidents_.back(), now_mono, actions);
}

void CoordinatorState::check_collected(Incident& inc, int64_t now_mono, Actions* actions) {
  if (inc.state != IncidentState::kCollecting) return;
  bool all = true;
  for (const auto& name : inc.asked) {
    if (inc.uploaded.count(name) || inc.failed.count(name)) continue;
    auto n = nodes_.find(name);
    if (n != nodes_.end() && n->second.lost) continue;  // it will not answer
    all = false;
  }
  if (!all && now_mono < inc.deadline_mono) return;
  if (!all) {
    for (const auto& name : inc.asked)
      if (!inc.uploaded.count(name) && !inc.failed.count(name))
        inc.failed[name] = "no dump before the deadline";
  }
  inc.state = IncidentState::kAnalyzing;
  inc.collected_mono = now_mono;
  last_dump_seconds_ = secs(now_mono - inc.opened_mono);
  actions->assemble.push_back(make_job(inc));
}

AssemblyJob CoordinatorState::make_job(const Incident& inc) const {
  AssemblyJob j;
  j.incident_id = inc.id;
  j.dir = inc.dir;
  j.job_id = inc.job_id;
  j.reason = inc.reason;
  j.kind = incident_kind_name(inc.kind);
  j.time_ns = inc.opened_real;
  j.expected_ranks = expected_ranks();
  j.processes = inc.processes;
  j.skipped = inc.skipped;
  // Nodes name their dumps' host after themselves (node.cpp), so offsets go by node name.
  for (const auto& [name, n] : nodes_)
    if (inc.asked.count(name) || inc.uploaded.count(name))
      j.nodes.push_back({name, n.clock.offset_ns(), n.clock.has_offset()});
  nlohmann::json asked = nlohmann::json::array(), failed = nlohmann::json::object();
  for (const auto& a : inc.asked) asked.push_back(a);
  for (const auto& [k, v] : inc.failed) failed[k] = v;
  nlohmann::json uploaded = nlohmann::json::array(), placed = nlohmann::json::array();
  for (const auto& u : inc.uploaded) uploaded.push_back(u);
  for (const auto& u : inc.placed) placed.push_back(u);
  j.incident = {{"schema", "frd-incident/1"},
                {"id", inc.id},
                {"job_id", inc.job_id},
                {"kind", incident_kind_name(inc.kind)},
                {"reason", inc.reason},
                {"opened_ns", inc.opened_real},
                {"coordinator_id", coordinator_id_},
                {"nodes_asked", asked},
                {"nodes_uploaded", uploaded},
                {"nodes_placed", placed},
                {"nodes_failed", failed},
                {"collect_seconds", secs(inc.collected_mono - inc.opened_mono)}};
  return j;
}

Actions CoordinatorState::tick(int64_t now_mono) {
  Actions a;
  // Nodes gone silent.
  std::vector<const Node*> newly_lost;
  for (auto& [name, n] : nodes_) {
    if (n.lost || now_mono - n.last_heartbeat_mono < cfg_.heartbeat_timeout_ns) continue;
    n.lost = true;
    a.log.push_back("frd coordinator: node " + name + " lost (silent for " +
                    std::to_string(secs(now_mono - n.last_heartbeat_mono)) + " s)");
    if (n.alive > 0) newly_lost.push_back(&n);
  }
  for (auto& inc : incidents_) check_collected(inc, now_mono, &a);

  // Close incidents whose condition cleared.
  for (auto& inc : incidents_) {
    if (inc.state != IncidentState::kOpen) continue;
    bool any_alive = false, any_stall = false, trigger_progressed = false, any_dead = false;
    bool any_lost = false;
    for (const auto& [_, n] : nodes_) {
      any_lost |= n.lost;
      if (n.lost) continue;
      if (n.alive) any_alive = true;
      if (!n.dead_since.empty()) any_dead = true;
      if (n.max_age_ns >= cfg_.stall_after_ns) any_stall = true;
      if (n.name == inc.trigger_node)
        for (const auto& p : n.last.processes)
          if (p.log == inc.trigger_log)
            for (const auto& c : p.comms)
              if (c.comm_id == inc.trigger_comm && c.completed > inc.trigger_completed)
                trigger_progressed = true;
    }
    if (!any_alive) {
      inc.state = IncidentState::kClosed;
      a.log.push_back("frd coordinator: " + inc.id + " closed: the job has no live rank left");
    } else if (inc.kind == IncidentKind::kStall && trigger_progressed && !any_stall && !any_dead) {
      inc.state = IncidentState::kClosedTransient;
      a.log.push_back("frd coordinator: " + inc.id +
                      " closed as transient: the stalled operations completed");
    } else if (inc.kind == IncidentKind::kNodeLost && !any_lost && !any_stall && !any_dead) {
      inc.state = IncidentState::kClosedTransient;
      a.log.push_back("frd coordinator: " + inc.id + " closed as transient: every node is back");
    }
  }

  if (active()) return a;
  // Detection, most specific first.
  for (const Node* n : newly_lost) {
    open(IncidentKind::kNodeLost,
         "node " + n->name + " silent for " +
             std::to_string(int(secs(now_mono - n->last_heartbeat_mono))) + " s with " +
             std::to_string(n->alive) + " live rank(s)",
         now_mono, &a, nullptr);
    return a;
  }
  int alive = total_alive();
  for (const auto& [name, n] : nodes_) {
    if (n.lost || alive == 0) continue;
    for (const auto& [log, since] : n.dead_since) {
      if (now_mono - since < cfg_.dead_grace_ns) continue;
      int rank = -1;
      for (const auto& p : n.last.processes)
        if (p.log == log) rank = p.rank;
      open(IncidentKind::kRankDead,
           "rank " + std::to_string(rank) + " on node " + name + " died while " +
               std::to_string(alive) + " rank(s) still run",
           now_mono, &a, nullptr);
      return a;
    }
  }
  for (const auto& [name, n] : nodes_) {
    // The age as last reported, not extrapolated: a node that stopped reporting (frozen) must
    // count as lost, not make its last ops look stalled. Nodes report a crossing at once.
    if (n.lost || n.max_age_ns <= 0) continue;
    int64_t age = n.max_age_ns;
    if (age < cfg_.stall_after_ns) continue;
    int rank = -1;
    for (const auto& p : n.last.processes)
      if (p.log == n.max_age_log) rank = p.rank;
    std::string op = n.max_age_op ? std::string(fr::log::op_name(uint16_t(n.max_age_op))) : "an op";
    if (n.max_age_op && n.max_age_seq) op += " #" + std::to_string(n.max_age_seq);
    std::string comm = n.max_age_comm_name.empty()
                           ? hex_id(n.max_age_comm)
                           : n.max_age_comm_name + " (" + hex_id(n.max_age_comm) + ")";
    open(IncidentKind::kStall,
         "rank " + std::to_string(rank) + " on node " + name + ": " + op + " on communicator " +
             comm + " in flight for " + std::to_string(secs(age)).substr(0, 5) + " s",
         now_mono, &a, &n);
    return a;
  }
  return a;
}

std::string CoordinatorState::trigger(const std::string& reason, int64_t now_mono,
                                      Actions* actions) {
  for (auto& i : incidents_)
    if (i.state == IncidentState::kCollecting || i.state == IncidentState::kAnalyzing) return i.id;
  open(IncidentKind::kManual, reason.empty() ? "manual dump" : reason, now_mono, actions, nullptr);
  return incidents_.back().id;
}

void CoordinatorState::dump_status(uint64_t session, const std::string& incident_id, bool ok,
                                   const std::string& error, int64_t now_mono) {
  Node* n = by_session(session);
  Incident* inc = find(incident_id);
  if (!n || !inc || ok) return;
  inc->failed[n->name] = printable(error, 256);
  upload_failures_++;
  (void)now_mono;
}

bool CoordinatorState::begin_upload(const DumpHeader& hdr, std::string* dir, bool* duplicate,
                                    std::string* error) {
  *duplicate = false;
  if (!is_safe_name(hdr.incident_id, kMaxNameLen) || !is_safe_name(hdr.node_name, kMaxNameLen)) {
    *error = "bad incident id or node name";
    return false;
  }
  if (!hdr.job_id.empty() && !is_safe_name(hdr.job_id, kMaxNameLen)) {
    *error = "bad job id";
    return false;
  }
  Incident* inc = find(hdr.incident_id);
  if (inc && !hdr.job_id.empty() && hdr.job_id != inc->job_id) {
    // Incident ids repeat across jobs: this is another job's dump that a node kept.
    *error = "dump of job " + hdr.job_id + " for " + hdr.incident_id + " of job " + inc->job_id;
    return false;
  }
  bool job_known = !cfg_.job_id.empty() || !learned_job_.empty();
  if (!inc && !hdr.job_id.empty() && job_known && hdr.job_id != job_dir_name()) {
    *error = "dump of job " + hdr.job_id + ", not of this coordinator's job " + job_dir_name();
    return false;
  }
  if (!inc) {
    // A dump for an incident of a previous coordinator run (the node kept it): accept it into
    // that incident's directory if it is there, and write the dump set again.
    std::string job = hdr.job_id.empty() ? job_dir_name() : hdr.job_id;
    auto dir_of = [&](const std::string& j) {
      return cfg_.dump_dir + "/" + j + "/" + hdr.incident_id;
    };
    if (!is_dir(dir_of(job)) && !job_known && hdr.job_id.empty()) {
      // The job is not known yet (no heartbeat since the restart): the incident's directory
      // under exactly one job will do.
      std::vector<std::string> found;
      if (DIR* dd = opendir(cfg_.dump_dir.c_str())) {
        while (dirent* e = readdir(dd)) {
          std::string j = e->d_name;
          if (is_safe_name(j) && is_dir(dir_of(j))) found.push_back(j);
        }
        closedir(dd);
      }
      if (found.size() == 1) job = found[0];
    }
    std::string d = dir_of(job);
    if (!is_dir(d)) {
      *error = "unknown incident " + hdr.incident_id;
      return false;
    }
    Incident rec;
    rec.id = hdr.incident_id;
    rec.kind = IncidentKind::kManual;
    rec.state = IncidentState::kClosed;
    rec.reason = "recovered after a coordinator restart";
    rec.job_id = job;
    rec.dir = d;
    rec.opened_mono = rec.collected_mono = mono_ns();
    rec.opened_real = real_ns();
    fr::log::Manifest m;
    std::string merr;
    if (fr::log::read_manifest(d, &m, &merr)) {
      rec.opened_real = int64_t(m.time_ns);
      for (const auto& p : m.processes)
        rec.processes.push_back({p.rank, p.world_size, p.pid, p.host, p.job_id, p.file, p.source,
                                 p.alive, p.records, p.overwritten, p.torn});
      for (const auto& s : m.skipped) rec.skipped.push_back({s.file, s.error});
    }
    incidents_.push_back(std::move(rec));
    inc = &incidents_.back();
  }
  if (inc->uploaded.count(hdr.node_name)) {
    *duplicate = true;
    return true;
  }
  *dir = inc->dir;
  return true;
}

void CoordinatorState::upload_done(const DumpHeader& hdr, int64_t now_mono, bool placed) {
  Incident* inc = find(hdr.incident_id);
  if (!inc || inc->uploaded.count(hdr.node_name)) return;
  inc->uploaded.insert(hdr.node_name);
  if (placed) inc->placed.insert(hdr.node_name);
  inc->failed.erase(hdr.node_name);
  for (const auto& p : hdr.processes) {
    bool dup = false;
    for (const auto& q : inc->processes) dup |= q.file == p.file;
    if (!dup) inc->processes.push_back(p);
  }
  for (const auto& s : hdr.skipped) inc->skipped.push_back(s);
  if (inc->state == IncidentState::kAnalyzing) {
    inc->reassemble = true;
  } else if (inc->state != IncidentState::kCollecting) {
    // Late (after the deadline) or after a restart: write the dump set again with it.
    inc->state = IncidentState::kCollecting;
    inc->asked.insert(hdr.node_name);
    inc->deadline_mono = now_mono;
  }
}

void CoordinatorState::upload_failed(const std::string& incident_id, const std::string& node,
                                     const std::string& error, int64_t now_mono) {
  (void)now_mono;
  upload_failures_++;
  Incident* inc = find(incident_id);
  if (!inc || inc->uploaded.count(node)) return;
  // The node keeps its dump and retries; until then this is only noted.
  inc->error = printable(node + ": " + error, 256);
}

void CoordinatorState::assembled(const std::string& incident_id, const AssemblyResult& r,
                                 int64_t now_mono, Actions* actions) {
  Incident* inc = find(incident_id);
  if (!inc) return;
  inc->analyzed_mono = now_mono;
  last_analysis_seconds_ = secs(now_mono - inc->collected_mono);
  // An upload error (a full disk) stays visible after a dump set written without that dump.
  if (!r.ok) inc->error = r.error;
  inc->verdict_kind = r.verdict_kind;
  inc->verdict_summary = r.verdict_summary;
  inc->culprits = r.culprits;
  if (inc->reassemble) {
    inc->reassemble = false;
    actions->assemble.push_back(make_job(*inc));
    return;
  }
  inc->state = inc->kind == IncidentKind::kManual ? IncidentState::kClosed : IncidentState::kOpen;
  std::string culprits;
  for (int c : r.culprits) culprits += (culprits.empty() ? "" : ",") + std::to_string(c);
  if (r.ok)
    actions->log.push_back("frd coordinator: " + inc->id + " verdict " + r.verdict_kind +
                           " culprits [" + culprits + "]: " + r.verdict_summary + " -> " +
                           inc->dir);
  else
    actions->log.push_back("frd coordinator: " + inc->id + " dump set not written: " + r.error);
}

nlohmann::json CoordinatorState::status(int64_t now_mono) const {
  nlohmann::json nodes = nlohmann::json::array();
  int known = 0, alive = 0, dead = 0;
  for (const auto& [name, n] : nodes_) {
    nlohmann::json procs = nlohmann::json::array();
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
                         {"oldest_in_flight_s", secs(c.oldest_age_ns)}});
      known++;
      if (p.alive) alive++;
      else if (!p.exited_cleanly) dead++;
      procs.push_back({{"rank", p.rank},
                       {"world_size", p.world_size},
                       {"pid", p.pid},
                       {"alive", p.alive},
                       {"exited_cleanly", p.exited_cleanly},
                       {"log", printable(p.log, 128)},
                       {"records", p.records},
                       {"comms", comms}});
    }
    nodes.push_back({{"name", name},
                     {"host", n.host},
                     {"connected", n.connected},
                     {"lost", n.lost},
                     {"heartbeat_age_s", secs(now_mono - n.last_heartbeat_mono)},
                     {"heartbeats", n.heartbeats},
                     {"clock_offset_ns", n.clock.offset_ns()},
                     {"clock_rtt_ns", n.clock.delay_ns()},
                     {"processes", procs}});
  }
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
  return {{"schema", "frd-status/1"},
          {"coordinator_id", coordinator_id_},
          {"job_id", job_dir_name()},
          {"ranks",
           {{"expected", expected_ranks()}, {"known", known}, {"alive", alive}, {"dead", dead}}},
          {"nodes", nodes},
          {"incidents", incs}};
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
    << "\n";
  return o.str();
}

}  // namespace fr::daemon
