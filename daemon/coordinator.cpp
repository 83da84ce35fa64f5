// See coordinator.h.
#include "daemon/coordinator.h"
#include "files/files.h"

#include "log/side_files.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

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

std::string random_key() {
  std::random_device rd;
  std::string k;
  for (int i = 0; i < 4; ++i) k += hex_id((uint64_t(rd()) << 32) ^ rd());
  return k;
}

// Estimated heap bytes of a kept report: what bounds the coordinator's memory per node.
size_t report_bytes(const NodeReport& r) {
  size_t b = 0;  // the report's own struct is part of the node's fixed cost
  for (const auto& p : r.processes) {
    b += sizeof(ProcessReport) + p.log.size() + p.job_id.size() + p.host.size();
    b += p.comms.capacity() * sizeof(CommProgress);
    for (const auto& c : p.comms)
      if (c.name.size() > 15) b += c.name.size() + 1;
  }
  for (const auto& u : r.unreadable) b += sizeof(std::string) + u.size();
  for (const auto& a : r.gpu_alerts) b += sizeof(std::string) + a.size();
  return b;
}

// How an automatic threshold came about, for the incident's reason.
std::string threshold_note(int64_t threshold_ns, const CommModel* m, const StallPolicy& p) {
  if (!p.automatic) return "";
  std::string t = std::to_string(secs(threshold_ns)).substr(0, 5);
  if (!m || !m->warm(p)) return " (threshold " + t + " s: not learned yet)";
  std::string gap = "an op every " + std::to_string(secs(m->gap_ns)).substr(0, 5) + " s";
  if (m->latency.count() == 0)
    return " (threshold " + t + " s: learned p99 under 1 ms, no op seen in flight; " + gap + ")";
  return " (threshold " + t + " s: learned p99 " +
         std::to_string(secs(m->latency.quantile(0.99))).substr(0, 5) + " s; " + gap + ")";
}

uint64_t member_key(uint64_t log_hash, uint64_t comm_id) {
  return log_hash * 0x9E3779B97F4A7C15ull ^ comm_id;
}

bool is_closed(IncidentState s) {
  return s == IncidentState::kClosed || s == IncidentState::kClosedTransient;
}

IncidentKind kind_of(const std::string& s) {
  for (IncidentKind k : {IncidentKind::kStall, IncidentKind::kRankDead, IncidentKind::kNodeLost,
                         IncidentKind::kManual})
    if (s == incident_kind_name(k)) return k;
  return IncidentKind::kManual;
}

bool state_of(const std::string& s, IncidentState* out) {
  for (IncidentState st : {IncidentState::kCollecting, IncidentState::kAnalyzing,
                           IncidentState::kOpen, IncidentState::kClosedTransient,
                           IncidentState::kClosed})
    if (s == incident_state_name(st)) {
      *out = st;
      return true;
    }
  return false;
}

// A small JSON file written by a coordinator (incident.json): a regular file, not a link or a
// FIFO, bounded. Null when it is not there or not readable as such.
nlohmann::json read_small_json(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return nullptr;
  struct stat st;
  std::string text;
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size <= (4 << 20)) {
    text.resize(size_t(st.st_size));
    size_t got = 0;
    while (got < text.size()) {
      ssize_t n = ::read(fd, text.data() + got, text.size() - got);
      if (n <= 0) break;
      got += size_t(n);
    }
    text.resize(got);
  }
  ::close(fd);
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return nullptr;
  return j;
}

std::string jstr(const nlohmann::json& j, const char* k) {
  auto it = j.find(k);
  return it != j.end() && it->is_string() ? printable(it->get<std::string>(), 512) : std::string();
}

std::set<std::string> jnames(const nlohmann::json& j, const char* k) {
  std::set<std::string> out;
  auto it = j.find(k);
  if (it == j.end() || !it->is_array()) return out;
  for (const auto& v : *it)
    if (v.is_string() && is_safe_name(v.get<std::string>(), kMaxNameLen) && out.size() < 65536)
      out.insert(v.get<std::string>());
  return out;
}

// Partial uploads a killed coordinator left behind (.upload-NODE-N/ inside an incident).
void remove_staging(const std::string& incident_dir) {
  DIR* d = opendir(incident_dir.c_str());
  if (!d) return;
  std::vector<std::string> stale;
  while (dirent* e = readdir(d)) {
    std::string n = e->d_name;
    if (n.rfind(".upload-", 0) == 0) stale.push_back(incident_dir + "/" + n);
  }
  closedir(d);
  for (const auto& s : stale) {
    if (DIR* sd = opendir(s.c_str())) {
      while (dirent* e = readdir(sd)) {
        std::string n = e->d_name;
        if (n != "." && n != "..") ::unlink((s + "/" + n).c_str());
      }
      closedir(sd);
    }
    ::rmdir(s.c_str());
  }
}

}  // namespace

CoordinatorState::CoordinatorState(CoordinatorConfig cfg) : cfg_(std::move(cfg)) {
  policy_.automatic = cfg_.stall_auto;
  policy_.fixed_ns = cfg_.stall_after_ns;
  policy_.floor_ns = cfg_.stall_floor_ns;
  policy_.cap_ns = std::max(cfg_.stall_cap_ns, cfg_.stall_floor_ns);
  policy_.factor = cfg_.stall_factor;
  policy_.warmup = cfg_.stall_warmup;
  std::random_device rd;
  coordinator_id_ = hex_id((uint64_t(rd()) << 32) ^ rd() ^ uint64_t(real_ns()));
  if (!cfg_.job_id.empty()) cfg_.job_id = sanitize_name(cfg_.job_id);
  recover();
}

void CoordinatorState::recover() {
  // Every job's directory when the job is not given: its incidents are ours to finish.
  std::vector<std::string> jobs;
  if (!cfg_.job_id.empty()) {
    jobs.push_back(cfg_.job_id);
  } else if (DIR* d = opendir(cfg_.dump_dir.c_str())) {
    while (dirent* e = readdir(d))
      if (is_safe_name(e->d_name) && jobs.size() < 1024) jobs.push_back(e->d_name);
    closedir(d);
  }
  int64_t now = mono_ns();
  for (const auto& job : jobs) {
    std::string jd = cfg_.dump_dir + "/" + job;
    std::vector<std::string> ids;
    if (DIR* d = opendir(jd.c_str())) {
      while (dirent* e = readdir(d)) {
        std::string n = e->d_name;
        if (n.rfind("incident-", 0) == 0 && is_safe_name(n, kMaxNameLen)) ids.push_back(n);
      }
      closedir(d);
    }
    std::sort(ids.begin(), ids.end());
    for (const auto& id : ids) {
      std::string dir = jd + "/" + id;
      if (!is_dir(dir)) continue;
      remove_staging(dir);
      nlohmann::json j = read_small_json(dir + "/incident.json");
      if (j.is_null()) continue;
      IncidentState state;
      if (!state_of(jstr(j, "state"), &state) || is_closed(state)) continue;
      Incident inc;
      inc.id = id;
      inc.recovered = true;
      inc.kind = kind_of(jstr(j, "kind"));
      inc.reason = jstr(j, "reason");
      inc.job_id = job;
      inc.dir = dir;
      inc.opened_real = j.value("opened_ns", int64_t(0));
      inc.opened_mono = inc.collected_mono = now;
      inc.asked = jnames(j, "nodes_asked");
      inc.uploaded = jnames(j, "nodes_uploaded");
      inc.placed = jnames(j, "nodes_placed");
      inc.hook_fired = j.value("hook_fired", false);
      if (auto f = j.find("nodes_failed"); f != j.end() && f->is_object())
        for (const auto& [k, v] : f->items())
          if (is_safe_name(k, kMaxNameLen) && v.is_string()) inc.failed[k] = printable(v.get<std::string>(), 256);
      if (auto t = j.find("trigger"); t != j.end() && t->is_object()) {
        inc.trigger_node = jstr(*t, "node");
        inc.trigger_log = jstr(*t, "log");
        inc.trigger_comm = t->value("comm", uint64_t(0));
        inc.trigger_completed = t->value("completed", uint64_t(0));
      }
      if (auto ps = j.find("processes"); ps != j.end() && ps->is_array())
        for (const auto& p : *ps) {
          if (!p.is_object() || inc.processes.size() >= 65536) break;
          std::string file = jstr(p, "file");
          if (!is_safe_name(file, 200)) continue;
          inc.processes.push_back({p.value("rank", -1), p.value("world_size", -1),
                                   p.value("pid", 0), jstr(p, "host"), jstr(p, "job_id"), file,
                                   jstr(p, "source"), p.value("alive", false),
                                   p.value("records", uint64_t(0)),
                                   p.value("overwritten", uint64_t(0)),
                                   p.value("torn", uint64_t(0))});
        }
      inc.verdict_kind = jstr(j, "verdict");
      inc.verdict_summary = jstr(j, "summary");
      // Collecting: the nodes reconnect and are asked again; analysing: written again now;
      // open: stays the active incident, so the same hang does not open a second one.
      inc.state = state == IncidentState::kAnalyzing ? IncidentState::kCollecting : state;
      inc.deadline_mono = state == IncidentState::kAnalyzing ? now : now + cfg_.dump_deadline_ns;
      incidents_.push_back(std::move(inc));
    }
  }
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
                                   const std::string& job, const PeerAuth& auth,
                                   int64_t now_mono, std::string* error) {
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
  // A live holder (it heartbeated within a few intervals) keeps its name against a peer with
  // other credentials, or none: two peers must not knock each other off.
  const int64_t live_for = std::max<int64_t>(3 * cfg_.heartbeat_interval_ns, 1'000'000'000);
  if (n.connected && now_mono - n.last_heartbeat_mono < live_for &&
      (!auth.authenticated || !n.authenticated || auth.principal != n.principal)) {
    *error = "node name " + name + " is held by a live connection";
    return 0;
  }
  if (n.connected) sessions_.erase(n.session);  // the old stream is stale from now on
  n.authenticated = auth.authenticated;
  n.principal = auth.principal;
  n.upload_key = random_key();
  n.host = sanitize_name(host);
  n.session = next_session_++;
  n.connected = true;
  n.lost = false;
  n.connected_mono = now_mono;
  n.last_heartbeat_mono = now_mono;
  sessions_[n.session] = name;
  return n.session;
}

std::string CoordinatorState::upload_key(uint64_t session) const {
  auto it = sessions_.find(session);
  if (it == sessions_.end()) return "";
  auto n = nodes_.find(it->second);
  return n == nodes_.end() || n->second.session != session ? "" : n->second.upload_key;
}

bool CoordinatorState::check_uploader(const DumpHeader& hdr, const PeerAuth& auth,
                                      std::string* error) const {
  auto it = nodes_.find(hdr.node_name);
  if (it == nodes_.end() || !it->second.connected) {
    *error = "node " + printable(hdr.node_name, 64) + " is not connected";
    return false;
  }
  const Node& n = it->second;
  if (hdr.upload_key.empty() || !equal_secret(hdr.upload_key, n.upload_key) ||
      auth.authenticated != n.authenticated || auth.principal != n.principal) {
    *error = "this upload does not come from node " + n.name + "'s connection";
    return false;
  }
  // Each node's files carry its name, so one node's dump never lands on another's (its GPU
  // health is <node>.gpu.json).
  for (const auto& f : hdr.files)
    if (f.name.rfind(n.name + "-", 0) != 0 && f.name != n.name + fr::log::kGpuSuffix) {
      *error = "file '" + printable(f.name, 80) + "' is not named after node " + n.name;
      return false;
    }
  for (const auto& inc : incidents_)
    if (inc.id == hdr.incident_id && !inc.asked.empty() && !inc.asked.count(n.name) &&
        !inc.recovered) {
      *error = "node " + n.name + " was not asked to dump for " + inc.id;
      return false;
    }
  return true;
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
  n->max_age_ns = 0;
  n->max_age_threshold_ns = 0;
  n->max_age_rank = -1;
  n->alive = 0;
  n->world_size = -1;
  std::map<std::string, Node::Dead> dead;
  // The detection summary comes from the whole report, before anything is cut from it. The op
  // that counts is the one furthest past (or nearest to) its communicator's threshold.
  learn(*n, report, now_mono);
  int64_t worst_margin = INT64_MIN;
  for (const auto& p : report.processes) {
    // Only an authenticated node may name the job (an anonymous first speaker could not).
    if (learned_job_.empty() && !p.job_id.empty() && n->authenticated)
      learned_job_ = sanitize_name(p.job_id);
    if (p.world_size > 0 && p.world_size <= (1 << 24)) n->world_size = std::max(n->world_size, p.world_size);
    if (p.alive) {
      n->alive++;
      for (const auto& c : p.comms) {
        if (c.oldest_age_ns <= 0) continue;
        int64_t threshold = stall_threshold_ns(c.comm_id);
        if (c.oldest_age_ns - threshold > worst_margin) {
          worst_margin = c.oldest_age_ns - threshold;
          n->max_age_threshold_ns = threshold;
          n->max_age_ns = c.oldest_age_ns;
          n->max_age_log = p.log;
          n->max_age_rank = p.rank;
          n->max_age_comm = c.comm_id;
          n->max_age_comm_name = printable(c.name, 64);
          n->max_age_op = c.oldest_op;
          n->max_age_seq = c.oldest_seq;
          n->max_age_completed = c.completed;
        }
      }
    } else if (!p.exited_cleanly) {
      auto it = n->dead_since.find(p.log);
      dead[p.log] = {it == n->dead_since.end() ? now_mono : it->second.since, p.rank};
    }
  }
  n->dead_since = std::move(dead);
  set_hints(*n, n->max_age_ns > 0 && n->max_age_ns >= n->max_age_threshold_ns,
            !n->dead_since.empty());
  // Keep what the bounds allow: per node, and over all nodes. Past them the per-communicator
  // detail goes, except for the process whose op is oldest and the one an incident watches.
  retained_bytes_ -= n->retained;
  size_t bytes = report_bytes(report);
  auto over = [&] {
    return bytes > cfg_.max_node_bytes || retained_bytes_ + bytes > cfg_.max_retained_bytes;
  };
  n->trimmed = false;
  if (over()) {
    n->trimmed = true;
    reports_trimmed_++;
    std::set<std::string> keep = {n->max_age_log};
    for (const auto& inc : incidents_)
      if (!is_closed(inc.state) && inc.trigger_node == n->name) keep.insert(inc.trigger_log);
    for (auto& p : report.processes)
      if (!keep.count(p.log)) std::vector<CommProgress>().swap(p.comms);
    std::vector<std::string>().swap(report.unreadable);
    bytes = report_bytes(report);
    while (over() && !report.processes.empty()) {
      report.processes.pop_back();
      bytes = report_bytes(report);
    }
    report.processes.shrink_to_fit();
  }
  n->last = std::move(report);
  n->retained = bytes;
  retained_bytes_ += bytes;
  return true;
}

const CommModel* CoordinatorState::comm_model(uint64_t comm_id) const {
  auto it = models_.find(comm_id);
  return it == models_.end() ? nullptr : &it->second;
}

int64_t CoordinatorState::stall_threshold_ns(uint64_t comm_id) const {
  const CommModel* m = comm_model(comm_id);
  return m ? m->threshold_ns(policy_) : unlearned_threshold_ns(policy_);
}

void CoordinatorState::learn(Node& n, const NodeReport& report, int64_t now_mono) {
  std::vector<MemberTrack> next;
  std::vector<char> kept(n.members.size(), 0);  // old members that report again
  for (const auto& p : report.processes) {
    if (!p.alive) continue;
    const uint64_t log_hash = std::hash<std::string>()(p.log);
    for (const auto& c : p.comms) {
      if (next.size() >= cfg_.max_members_per_node) break;
      auto model = models_.find(c.comm_id);
      if (model == models_.end()) {
        if (models_.size() >= cfg_.max_comm_models) continue;
        model = models_.emplace(c.comm_id, CommModel{}).first;
      }
      if (model->second.name.empty() && !c.name.empty()) model->second.name = printable(c.name, 64);
      uint64_t key = member_key(log_hash, c.comm_id);
      auto prev = std::lower_bound(n.members.begin(), n.members.end(), key,
                                   [](const MemberTrack& m, uint64_t k) { return m.key < k; });
      const MemberTrack* before = prev != n.members.end() && prev->key == key ? &*prev : nullptr;
      // A process listing one communicator twice: its first entry counts.
      if (before && kept[size_t(prev - n.members.begin())]) continue;
      next.push_back(observe(model->second, before, key, p.rank, c.comm_id, c.oldest_seq,
                             c.oldest_age_ns, c.completed, now_mono));
      if (before) kept[size_t(prev - n.members.begin())] = 1;
      // Reported once it held for a while: ranks slow in turn (random jitter) look slow briefly.
      MemberTrack& m = next.back();
      if (is_slow_member(model->second, m, now_mono, 5 * cfg_.heartbeat_interval_ns))
        m.slow_streak++;
      else
        m.slow_streak = 0;
      if (m.slow_streak >= MemberTrack::kSlowStreak) note_slow(n, m, model->second, now_mono);
    }
  }
  for (size_t i = 0; i < n.members.size(); ++i)
    if (!kept[i])
      if (auto model = models_.find(n.members[i].comm_id); model != models_.end())
        leave(model->second, n.members[i]);
  std::sort(next.begin(), next.end(),
            [](const MemberTrack& a, const MemberTrack& b) { return a.key < b.key; });
  // ... and so for a new member listed twice: the second one leaves again.
  next.erase(std::unique(next.begin(), next.end(),
                         [&](const MemberTrack& a, const MemberTrack& b) {
                           if (a.key != b.key) return false;
                           if (auto model = models_.find(b.comm_id); model != models_.end())
                             leave(model->second, b);
                           return true;
                         }),
             next.end());
  n.members = std::move(next);
}

void CoordinatorState::set_hints(Node& n, bool over_threshold, bool has_dead) {
  over_threshold_nodes_ = over_threshold_nodes_ + size_t(over_threshold) - size_t(n.over_threshold);
  dead_nodes_ = dead_nodes_ + size_t(has_dead) - size_t(n.has_dead);
  n.over_threshold = over_threshold;
  n.has_dead = has_dead;
}

void CoordinatorState::drop_members(Node& n) {
  for (const auto& m : n.members)
    if (auto model = models_.find(m.comm_id); model != models_.end()) leave(model->second, m);
  n.members.clear();
}

void CoordinatorState::note_slow(const Node& n, const MemberTrack& m, const CommModel& model,
                                 int64_t now_mono) {
  double peers = peers_waiting(model, m);
  for (auto& f : findings_)
    if (f.node == n.name && f.rank == m.rank && f.comm_id == m.comm_id) {
      if (!f.active) pending_log_.push_back("frd coordinator: rank " + std::to_string(m.rank) +
                                            " is slow again on " + f.comm_name);
      findings_dirty_ |= !f.active;
      f.active = true;
      f.last_real = real_ns();
      f.last_mono = now_mono;
      f.rank_waiting = m.waiting;
      f.peers_waiting = peers;
      return;
    }
  if (findings_.size() >= cfg_.max_findings) return;
  Finding f;
  f.rank = m.rank;
  f.node = n.name;
  f.comm_id = m.comm_id;
  f.comm_name = model.name.empty() ? hex_id(m.comm_id) : model.name + " (" + hex_id(m.comm_id) + ")";
  f.rank_waiting = m.waiting;
  f.peers_waiting = peers;
  f.first_real = f.last_real = real_ns();
  f.last_mono = now_mono;
  char line[160];
  std::snprintf(line, sizeof line, "its peers wait at %.0f%% of heartbeats, it at %.0f%%",
                100 * peers, 100 * double(m.waiting));
  pending_log_.push_back("frd coordinator: slow rank " + std::to_string(m.rank) + " on node " +
                         n.name + " (communicator " + f.comm_name + "): " + line +
                         "; the job still progresses");
  findings_.push_back(std::move(f));
  findings_dirty_ = true;
}

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

void CoordinatorState::clock_sample(uint64_t session, int64_t t1, int64_t t2, int64_t t3,
                                    int64_t t4) {
  if (Node* n = by_session(session)) n->clock.add(t1, t2, t3, t4);
}

int CoordinatorState::expected_ranks() const {
  if (cfg_.expect_ranks > 0) return cfg_.expect_ranks;
  int ws = -1;
  for (const auto& [_, n] : nodes_) ws = std::max(ws, n.world_size);
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
  if (!fr::files::make_dirs(inc.dir, &mkerr)) inc.error = mkerr;
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
  persist(incidents_.back(), actions);
  check_collected(incidents_.back(), now_mono, actions);
}

nlohmann::json CoordinatorState::incident_json(const Incident& inc) const {
  nlohmann::json asked = nlohmann::json::array(), failed = nlohmann::json::object();
  for (const auto& a : inc.asked) asked.push_back(a);
  for (const auto& [k, v] : inc.failed) failed[k] = v;
  nlohmann::json uploaded = nlohmann::json::array(), placed = nlohmann::json::array();
  for (const auto& u : inc.uploaded) uploaded.push_back(u);
  for (const auto& u : inc.placed) placed.push_back(u);
  nlohmann::json procs = nlohmann::json::array();
  for (const auto& p : inc.processes)
    procs.push_back({{"rank", p.rank}, {"world_size", p.world_size}, {"pid", p.pid},
                     {"host", p.host}, {"job_id", p.job_id}, {"file", p.file},
                     {"source", p.source}, {"alive", p.alive}, {"records", p.records},
                     {"overwritten", p.overwritten}, {"torn", p.torn}});
  return {{"schema", "frd-incident/1"},
          {"id", inc.id},
          {"job_id", inc.job_id},
          {"kind", incident_kind_name(inc.kind)},
          {"state", incident_state_name(inc.state)},
          {"reason", inc.reason},
          {"opened_ns", inc.opened_real},
          {"coordinator_id", coordinator_id_},
          {"nodes_asked", asked},
          {"nodes_uploaded", uploaded},
          {"nodes_placed", placed},
          {"nodes_failed", failed},
          {"trigger",
           {{"node", inc.trigger_node},
            {"log", inc.trigger_log},
            {"comm", inc.trigger_comm},
            {"completed", inc.trigger_completed}}},
          {"processes", procs},
          {"verdict", inc.verdict_kind},
          {"summary", inc.verdict_summary},
          {"culprit_ranks", inc.culprits},
          {"hook_fired", inc.hook_fired},
          {"error", inc.error},
          {"collect_seconds",
           inc.collected_mono ? secs(inc.collected_mono - inc.opened_mono) : 0.0}};
}

void CoordinatorState::persist(const Incident& inc, Actions* actions) const {
  if (inc.dir.empty()) return;
  actions->persist.emplace_back(inc.dir + "/incident.json", incident_json(inc).dump(2) + "\n");
}

bool CoordinatorState::take_hook(const std::string& incident_id, Actions* actions) {
  Incident* inc = find(incident_id);
  if (!inc || inc->hook_fired) return false;
  inc->hook_fired = true;
  persist(*inc, actions);
  return true;
}

bool CoordinatorState::needed_by_incident(const std::string& node) const {
  for (const auto& inc : incidents_)
    if (!is_closed(inc.state) && (inc.asked.count(node) || inc.trigger_node == node)) return true;
  return false;
}

void CoordinatorState::forget(int64_t now_mono) {
  // Forgetting is measured in minutes: a walk over the nodes once a second is plenty.
  const bool walk = !forget_walked_ || now_mono - last_forget_mono_ >= 1'000'000'000 ||
                    now_mono < last_forget_mono_;
  if (walk) {
    forget_walked_ = true;
    last_forget_mono_ = now_mono;
  }
  for (auto it = nodes_.begin(); walk && it != nodes_.end();) {
    const Node& n = it->second;
    if (!n.connected && n.lost && now_mono - n.last_heartbeat_mono > cfg_.forget_after_ns &&
        !needed_by_incident(n.name)) {
      retained_bytes_ -= n.retained;
      drop_members(it->second);
      set_hints(it->second, false, false);
      sessions_.erase(n.session);
      nodes_forgotten_++;
      it = nodes_.erase(it);
    } else {
      ++it;
    }
  }
  // Communicators no member reported for as long as a lost node is kept.
  for (auto it = models_.begin(); walk && it != models_.end();) {
    if (it->second.waiting_members == 0 && now_mono - it->second.last_seen_mono > cfg_.forget_after_ns)
      it = models_.erase(it);
    else
      ++it;
  }
  // Closed incidents stay on disk; memory keeps the latest few.
  size_t closed = 0;
  for (const auto& i : incidents_) closed += is_closed(i.state);
  for (auto it = incidents_.begin(); closed > cfg_.max_closed_incidents && it != incidents_.end();) {
    if (is_closed(it->state)) {
      it = incidents_.erase(it);
      closed--;
    } else {
      ++it;
    }
  }
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
      if (!inc.uploaded.count(name) && !inc.failed.count(name)) {
        auto n = nodes_.find(name);
        inc.failed[name] = n != nodes_.end() && n->second.connected
                               ? "connected, but its dump did not arrive before the deadline"
                               : "no dump before the deadline";
      }
  }
  inc.state = IncidentState::kAnalyzing;
  inc.collected_mono = now_mono;
  last_dump_seconds_ = secs(now_mono - inc.opened_mono);
  actions->assemble.push_back(make_job(inc));
  persist(inc, actions);
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
  for (const auto& [name, why] : inc.failed) {
    auto n = nodes_.find(name);
    if (n != nodes_.end() && n->second.connected && !n->second.lost) j.undelivered[name] = why;
  }
  j.incident = incident_json(inc);
  return j;
}

Actions CoordinatorState::tick(int64_t now_mono) {
  Actions a;
  // Nodes gone silent.
  std::vector<const Node*> newly_lost;
  for (auto& [name, n] : nodes_) {
    if (n.lost || now_mono - n.last_heartbeat_mono < cfg_.heartbeat_timeout_ns) continue;
    n.lost = true;
    drop_members(n);
    a.log.push_back("frd coordinator: node " + name + " lost (silent for " +
                    std::to_string(secs(now_mono - n.last_heartbeat_mono)) + " s)");
    if (n.alive > 0) newly_lost.push_back(&n);
  }
  for (auto& inc : incidents_) check_collected(inc, now_mono, &a);
  for (auto& inc : incidents_)
    if (inc.dirty) {
      inc.dirty = false;
      persist(inc, &a);
    }

  // Close incidents whose condition cleared.
  for (auto& inc : incidents_) {
    if (inc.state != IncidentState::kOpen) continue;
    // Recovered after a restart: judged once the nodes report again, not before.
    if (inc.recovered && nodes_.empty()) continue;
    IncidentState before = inc.state;
    bool any_alive = false, any_stall = false, trigger_progressed = false, any_dead = false;
    bool any_lost = false;
    for (const auto& [_, n] : nodes_) {
      any_lost |= n.lost;
      if (n.lost) continue;
      if (n.alive) any_alive = true;
      if (!n.dead_since.empty()) any_dead = true;
      if (n.max_age_ns > 0 && n.max_age_ns >= n.max_age_threshold_ns) any_stall = true;
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
    if (inc.state != before) persist(inc, &a);
  }
  forget(now_mono);
  // Slow-rank findings: inactive once not seen for a while; written when they change.
  for (auto& f : findings_)
    if (f.active && now_mono - f.last_mono > 10 * cfg_.heartbeat_interval_ns) {
      f.active = false;
      findings_dirty_ = true;
      a.log.push_back("frd coordinator: rank " + std::to_string(f.rank) + " on " + f.comm_name +
                      " no longer slow");
    }
  for (auto& line : pending_log_) a.log.push_back(std::move(line));
  pending_log_.clear();
  if (findings_dirty_ && !cfg_.dump_dir.empty()) {
    findings_dirty_ = false;
    std::string mkerr;
    if (fr::files::make_dirs(cfg_.dump_dir + "/" + job_dir_name(), &mkerr))
      a.persist.emplace_back(findings_path(), findings_text());
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
  if (dead_nodes_ == 0 && over_threshold_nodes_ == 0) return a;
  int alive = dead_nodes_ ? total_alive() : 0;
  for (const auto& [name, n] : nodes_) {
    if (dead_nodes_ == 0) break;
    if (n.lost || alive == 0) continue;
    for (const auto& [log, dead] : n.dead_since) {
      if (now_mono - dead.since < cfg_.dead_grace_ns) continue;
      int rank = dead.rank;
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
    if (age < n.max_age_threshold_ns) continue;
    int rank = n.max_age_rank;
    std::string op = n.max_age_op ? std::string(fr::log::op_name(uint16_t(n.max_age_op))) : "an op";
    if (n.max_age_op && n.max_age_seq) op += " #" + std::to_string(n.max_age_seq);
    std::string comm = n.max_age_comm_name.empty()
                           ? hex_id(n.max_age_comm)
                           : n.max_age_comm_name + " (" + hex_id(n.max_age_comm) + ")";
    open(IncidentKind::kStall,
         "rank " + std::to_string(rank) + " on node " + name + ": " + op + " on communicator " +
             comm + " in flight for " + std::to_string(secs(age)).substr(0, 5) + " s" +
             threshold_note(n.max_age_threshold_ns, comm_model(n.max_age_comm), policy_),
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
  if (!n || !inc || ok || inc->uploaded.count(n->name)) return;
  inc->failed[n->name] = printable(error, 256);
  inc->dirty = true;
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
  if (inc && is_closed(inc->state) && !inc->uploaded.count(hdr.node_name)) {
    *error = inc->id + " is closed";
    return false;
  }
  if (!inc) {
    // A dump for an incident of a previous coordinator run (the node kept it): accept it into
    // that incident's directory if it is there and not closed, and write the dump set again.
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
    nlohmann::json saved = read_small_json(d + "/incident.json");
    IncidentState saved_state;
    if (!saved.is_null() && state_of(jstr(saved, "state"), &saved_state) &&
        is_closed(saved_state)) {
      if (jnames(saved, "nodes_uploaded").count(hdr.node_name)) {
        *duplicate = true;
        return true;
      }
      *error = hdr.incident_id + " is closed";
      return false;
    }
    Incident rec;
    rec.id = hdr.incident_id;
    rec.recovered = true;
    rec.kind = IncidentKind::kManual;
    rec.state = IncidentState::kOpen;
    rec.reason = "recovered after a coordinator restart";
    if (!saved.is_null()) {
      rec.kind = kind_of(jstr(saved, "kind"));
      if (!jstr(saved, "reason").empty()) rec.reason = jstr(saved, "reason");
      rec.asked = jnames(saved, "nodes_asked");
      rec.uploaded = jnames(saved, "nodes_uploaded");
      rec.hook_fired = saved.value("hook_fired", false);
    }
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
  inc->dirty = true;
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
  } else if (is_closed(inc->state)) {
    // It closed while this upload ran: the file stays with the set, the verdict stands.
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
    persist(*inc, actions);
    return;
  }
  inc->state = inc->kind == IncidentKind::kManual ? IncidentState::kClosed : IncidentState::kOpen;
  persist(*inc, actions);
  std::string culprits;
  for (int c : r.culprits) culprits += (culprits.empty() ? "" : ",") + std::to_string(c);
  if (r.ok)
    actions->log.push_back("frd coordinator: " + inc->id + " verdict " + r.verdict_kind +
                           " culprits [" + culprits + "]: " + r.verdict_summary + " -> " +
                           inc->dir);
  else
    actions->log.push_back("frd coordinator: " + inc->id + " dump set not written: " + r.error);
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
      if (p.alive) alive++;
      else if (!p.exited_cleanly) dead++;
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
      {"job_id", job_dir_name()},
      {"ranks", {{"expected", expected_ranks()}, {"known", known}, {"alive", alive}, {"dead", dead}}},
      {"node_counts",
       {{"known", nodes_.size()}, {"connected", connected}, {"lost", lost},
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
