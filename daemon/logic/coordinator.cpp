// See coordinator.h. The nodes: who connects (names, credentials, upload keys), what each
// heartbeat teaches (progress per communicator, the oldest op in flight, dead ranks, slow ranks),
// and the bounds on what is kept of them. Incidents are in coordinator_incidents.cpp, uploads in
// coordinator_uploads.cpp, what a restart recovers in coordinator_recovery.cpp, status and metrics
// in coordinator_status.cpp.
#include "daemon/logic/coordinator.h"
#include "daemon/logic/coordinator_helpers.h"
#include "common/files.h"

#include <algorithm>
#include <random>

#include "daemon/base/names.h"

namespace fr::daemon {

using namespace coordinator_helpers;

const char* incident_kind_name(IncidentKind k) {
  switch (k) {
    case IncidentKind::kStall: return "stall";
    case IncidentKind::kRankDead: return "rank_dead";
    case IncidentKind::kNodeLost: return "node_lost";
    case IncidentKind::kManual: return "manual";
    case IncidentKind::kSlow: return "slow";
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
    b += p.xfers.capacity() * sizeof(XferProgress);
    for (const auto& x : p.xfers) b += x.local_agent.size() + x.remote_agent.size() + 2;
  }
  for (const auto& u : r.unrecorded)
    b += sizeof(UnrecordedProcess) + u.job_id.size() + u.file.size();
  for (const auto& u : r.unreadable) b += sizeof(std::string) + u.size();
  for (const auto& a : r.gpu_alerts) b += sizeof(std::string) + a.size();
  return b;
}

uint64_t member_key(uint64_t log_hash, uint64_t comm_id) {
  return log_hash * 0x9E3779B97F4A7C15ull ^ comm_id;
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

std::string CoordinatorState::known_job() const {
  return !cfg_.job_id.empty() ? cfg_.job_id : learned_job_;
}

std::string CoordinatorState::job_dir_name() const {
  const std::string job = known_job();
  return job.empty() ? "job" : job;
}

Incident* CoordinatorState::active() {
  for (auto& i : incidents_)
    if (i.state == IncidentState::kCollecting || i.state == IncidentState::kAnalyzing ||
        i.state == IncidentState::kOpen)
      return &i;
  return nullptr;
}

Incident* CoordinatorState::blocking() {
  for (auto& i : incidents_)
    if (i.state == IncidentState::kCollecting || i.state == IncidentState::kAnalyzing ||
        (i.state == IncidentState::kOpen && i.kind != IncidentKind::kSlow))
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
                                   const std::string& job, const PeerAuth& auth, int64_t now_mono,
                                   std::string* error) {
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
  next_lost_check_mono_ = std::min(next_lost_check_mono_, lost_at(now_mono));
  sessions_[n.session] = name;
  return n.session;
}

std::string CoordinatorState::upload_key(uint64_t session) const {
  auto it = sessions_.find(session);
  if (it == sessions_.end()) return "";
  auto n = nodes_.find(it->second);
  return n == nodes_.end() || n->second.session != session ? "" : n->second.upload_key;
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
  return heartbeat(session, &report, now_mono);
}

bool CoordinatorState::heartbeat(uint64_t session, NodeReport* given, int64_t now_mono) {
  NodeReport& report = *given;
  Node* n = by_session(session);
  if (!n) return false;
  n->last_heartbeat_mono = now_mono;
  if (n->lost) next_lost_check_mono_ = std::min(next_lost_check_mono_, lost_at(now_mono));
  n->lost = false;
  n->heartbeats++;
  heartbeats_total_++;
  n->max_age_ns = 0;
  n->max_age_threshold_ns = 0;
  n->max_age_rank = -1;
  n->max_age_xfer.reset();
  n->alive = 0;
  n->world_size = -1;
  std::map<std::string, Node::Dead> dead;
  // The detection summary comes from the whole report, before anything is cut from it. The op
  // that counts is the one furthest past (or nearest to) its communicator's threshold.
  learn(*n, report, now_mono);
  learn_slow(*n, report, now_mono);
  // The detector keeps what it needs of the timing summaries; the report kept for status does
  // not (their memory stays, for the next heartbeat to be decoded into).
  for (auto& p : report.processes) {
    p.links.clear();
    for (auto& c : p.comms) c.recent.clear();
  }
  int64_t worst_margin = INT64_MIN;
  for (const auto& p : report.processes) {
    // Only an authenticated node may name the job (an anonymous first speaker could not), and
    // only from a live process: a log directory may still hold an earlier job's logs.
    if (learned_job_.empty() && !p.job_id.empty() && n->authenticated && p.alive)
      learned_job_ = sanitize_name(p.job_id);
    if (p.world_size > 0 && p.world_size <= (1 << 24))
      n->world_size = std::max(n->world_size, p.world_size);
    if (p.alive) {
      n->alive++;
      take_oldest(*n, p, &worst_margin);
    } else if (!p.exited_cleanly) {
      auto it = n->dead_since.find(p.log);
      dead[p.log] = {it == n->dead_since.end() ? now_mono : it->second.since, p.rank};
    }
  }
  n->dead_since = std::move(dead);
  note_unrecorded(*n, report);
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
      if (!keep.count(p.log))
        std::vector<CommProgress>().swap(p.comms), std::vector<XferProgress>().swap(p.xfers);
    std::vector<std::string>().swap(report.unreadable);
    bytes = report_bytes(report);
    while (over() && !report.processes.empty()) {
      report.processes.pop_back();
      bytes = report_bytes(report);
    }
    report.processes.shrink_to_fit();
  }
  std::swap(n->last, report);
  n->retained = bytes;
  retained_bytes_ += bytes;
  return true;
}

void CoordinatorState::take_oldest(Node& n, const ProcessReport& p, int64_t* worst_margin) const {
  for (const auto& c : p.comms) {
    if (c.oldest_age_ns <= 0) continue;
    int64_t threshold = stall_threshold_ns(c.comm_id);
    if (c.oldest_age_ns - threshold > *worst_margin) {
      *worst_margin = c.oldest_age_ns - threshold;
      n.max_age_threshold_ns = threshold;
      n.max_age_ns = c.oldest_age_ns;
      n.max_age_log = p.log;
      n.max_age_rank = p.rank;
      n.max_age_pid = p.pid;
      n.max_age_comm = c.comm_id;
      n.max_age_comm_name = printable(c.name, 64);
      n.max_age_op = c.oldest_op;
      n.max_age_seq = c.oldest_seq;
      n.max_age_completed = c.completed;
      n.max_age_xfer.reset();
    }
  }
  // NIXL agent pairs count as communicators do: learned and judged under their own id.
  for (const auto& x : p.xfers) {
    if (x.oldest_age_ns <= 0) continue;
    const uint64_t id = nixl_model_id(x.local_agent, x.remote_agent);
    int64_t threshold = stall_threshold_ns(id);
    if (x.oldest_age_ns - threshold > *worst_margin) {
      *worst_margin = x.oldest_age_ns - threshold;
      n.max_age_threshold_ns = threshold;
      n.max_age_ns = x.oldest_age_ns;
      n.max_age_log = p.log;
      n.max_age_rank = p.rank;
      n.max_age_pid = p.pid;
      n.max_age_comm = id;
      n.max_age_comm_name = "NIXL " + x.local_agent + " -> " + x.remote_agent;
      n.max_age_op = 0;
      n.max_age_seq = 0;
      n.max_age_completed = x.completed;
      n.max_age_xfer = x;
    }
  }
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
  std::vector<MemberTrack>& next = next_members_;
  next.clear();
  std::vector<char>& kept = members_kept_;  // old members that report again
  kept.assign(n.members.size(), 0);
  for (const auto& p : report.processes) {
    if (!p.alive) continue;
    const uint64_t log_hash = std::hash<std::string>()(p.log);
    // NIXL agent pairs as members of their own model (nixl_model_id), beside the communicators.
    auto nixl_progress = [](const XferProgress& x) {
      CommProgress c;
      c.comm_id = nixl_model_id(x.local_agent, x.remote_agent);
      c.oldest_age_ns = x.oldest_age_ns;
      c.oldest_seq = x.oldest_key;
      c.completed = x.completed;
      c.name = "NIXL " + x.local_agent + " -> " + x.remote_agent;
      return c;
    };
    std::vector<CommProgress> pairs;
    for (const auto& x : p.xfers) pairs.push_back(nixl_progress(x));
    for (size_t ci = 0; ci < p.comms.size() + pairs.size(); ++ci) {
      const CommProgress& c = ci < p.comms.size() ? p.comms[ci] : pairs[ci - p.comms.size()];
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
  std::swap(n.members, next);  // the old tracks' memory is the next heartbeat's scratch
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
      if (!f.active)
        pending_log_.push_back("frd coordinator: rank " + std::to_string(m.rank) +
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
  f.comm_name =
      model.name.empty() ? "0x" + hex_id(m.comm_id) : model.name + " (0x" + hex_id(m.comm_id) + ")";
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

}  // namespace fr::daemon
