// See node_table.h. The nodes: who connects (names, credentials, upload keys), what each
// heartbeat leaves of a node (its ranks, dead ranks, oldest op in flight, processes without a
// flight log), the bounds on what is kept of its report, and when it is lost or forgotten.
#include "daemon/logic/node_table.h"

#include <algorithm>
#include <random>

#include "daemon/base/names.h"
#include "daemon/logic/coordinator_helpers.h"

namespace fr::daemon {

using namespace coordinator_helpers;

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

std::string plural(int n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

}  // namespace

std::string ProcessCounts::summary() const {
  if (total == 0 && ended > 0)
    return "no live process under fr-run or with the agent loaded; " +
           plural(ended, "process", "processes") + " ended, " +
           (ended == 1 ? "its flight log kept" : "their flight logs kept");
  if (total == 0) return "no process under fr-run or with the agent loaded yet";
  std::string s = plural(total, "process", "processes") + " under fr-run on " +
                  plural(nodes, "node", "nodes") + "; ";
  if (recording == 0)
    s += total == 1 ? "it has not called NCCL or NIXL yet" : "none has called NCCL or NIXL yet";
  else if (recording == total)
    s += total == 1 ? "it records NCCL or NIXL calls" : "all record NCCL or NIXL calls";
  else
    s += std::to_string(recording) + " record NCCL or NIXL calls, " +
         std::to_string(total - recording) + " have not called either yet";
  if (torch > 0) s += "; torch's recorder watched in " + plural(torch, "process", "processes");
  return s;
}

NodeTable::NodeTable(const CoordinatorConfig& cfg) : cfg_(cfg) {}

Node* NodeTable::by_session(uint64_t session) {
  auto it = sessions_.find(session);
  if (it == sessions_.end()) return nullptr;
  auto n = nodes_.find(it->second);
  if (n == nodes_.end() || n->second.session != session) return nullptr;
  return &n->second;
}

const Node* NodeTable::find(const std::string& name) const {
  auto it = nodes_.find(name);
  return it == nodes_.end() ? nullptr : &it->second;
}

size_t NodeTable::connected() const {
  size_t c = 0;
  for (const auto& [_, n] : nodes_) c += n.connected;
  return c;
}

std::vector<uint64_t> NodeTable::sessions() const {
  std::vector<uint64_t> out;
  for (const auto& [_, n] : nodes_)
    if (n.connected) out.push_back(n.session);
  return out;
}

uint64_t NodeTable::connect(const std::string& node_name, const std::string& host,
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

std::string NodeTable::upload_key(uint64_t session) const {
  auto it = sessions_.find(session);
  if (it == sessions_.end()) return "";
  auto n = nodes_.find(it->second);
  return n == nodes_.end() || n->second.session != session ? "" : n->second.upload_key;
}

void NodeTable::disconnect(uint64_t session) {
  Node* n = by_session(session);
  sessions_.erase(session);
  if (!n) return;
  // The node stays known; it counts as lost only once it has been silent for the timeout.
  n->connected = false;
}

void NodeTable::clock_sample(uint64_t session, int64_t t1, int64_t t2, int64_t t3, int64_t t4) {
  if (Node* n = by_session(session)) n->clock.add(t1, t2, t3, t4);
}

Node* NodeTable::heard(uint64_t session, int64_t now_mono) {
  Node* n = by_session(session);
  if (!n) return nullptr;
  n->last_heartbeat_mono = now_mono;
  if (n->lost) next_lost_check_mono_ = std::min(next_lost_check_mono_, lost_at(now_mono));
  n->lost = false;
  n->heartbeats++;
  heartbeats_total_++;
  n->oldest.age_ns = 0;
  n->oldest.threshold_ns = 0;
  n->oldest.rank = -1;
  n->oldest.xfer.reset();
  n->alive = 0;
  n->world_size = -1;
  return n;
}

void NodeTable::take_report(Node* n, NodeReport* given, int64_t now_mono, const CommTable& comms,
                            const WatchedLogs& watched) {
  NodeReport& report = *given;
  std::map<std::string, Node::Dead> dead;
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
      take_oldest(*n, p, &worst_margin, comms);
    } else if (!p.exited_cleanly) {
      auto it = n->dead_since.find(p.log);
      dead[p.log] = {it == n->dead_since.end() ? now_mono : it->second.since, p.rank};
    }
  }
  n->dead_since = std::move(dead);
  note_unrecorded(*n, report);
  set_hints(*n, n->oldest.stalled(), !n->dead_since.empty());
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
    std::set<std::string> keep = {n->oldest.log};
    watched(n->name, &keep);
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
}

void NodeTable::take_oldest(Node& n, const ProcessReport& p, int64_t* worst_margin,
                            const CommTable& comms) const {
  for (const auto& c : p.comms) {
    if (c.oldest_age_ns <= 0) continue;
    int64_t threshold = comms.stall_threshold_ns(c.comm_id);
    if (c.oldest_age_ns - threshold > *worst_margin) {
      *worst_margin = c.oldest_age_ns - threshold;
      n.oldest.threshold_ns = threshold;
      n.oldest.age_ns = c.oldest_age_ns;
      n.oldest.log = p.log;
      n.oldest.rank = p.rank;
      n.oldest.pid = p.pid;
      n.oldest.comm = c.comm_id;
      n.oldest.comm_name = printable(c.name, 64);
      n.oldest.op = c.oldest_op;
      n.oldest.seq = c.oldest_seq;
      n.oldest.completed = c.completed;
      n.oldest.xfer.reset();
    }
  }
  // NIXL agent pairs count as communicators do: learned and judged under their own id.
  for (const auto& x : p.xfers) {
    if (x.oldest_age_ns <= 0) continue;
    const uint64_t id = nixl_model_id(x.local_agent, x.remote_agent);
    int64_t threshold = comms.stall_threshold_ns(id);
    if (x.oldest_age_ns - threshold > *worst_margin) {
      *worst_margin = x.oldest_age_ns - threshold;
      n.oldest.threshold_ns = threshold;
      n.oldest.age_ns = x.oldest_age_ns;
      n.oldest.log = p.log;
      n.oldest.rank = p.rank;
      n.oldest.pid = p.pid;
      n.oldest.comm = id;
      n.oldest.comm_name = "NIXL " + x.local_agent + " -> " + x.remote_agent;
      n.oldest.op = 0;
      n.oldest.seq = 0;
      n.oldest.completed = x.completed;
      n.oldest.xfer = x;
    }
  }
}

void NodeTable::set_hints(Node& n, bool over_threshold, bool has_dead) {
  over_threshold_nodes_ = over_threshold_nodes_ + size_t(over_threshold) - size_t(n.over_threshold);
  dead_nodes_ = dead_nodes_ + size_t(has_dead) - size_t(n.has_dead);
  n.over_threshold = over_threshold;
  n.has_dead = has_dead;
}

void NodeTable::note_unrecorded(Node& n, const NodeReport& report) {
  n.unrecorded = int(report.unrecorded.size());
  n.torch_watched = 0;
  n.torch_min_idle_ns = -1;
  for (const auto& u : report.unrecorded) {
    if (!u.torch) continue;
    n.torch_watched++;
    if (n.torch_min_idle_ns < 0 || u.torch_idle_ns < n.torch_min_idle_ns)
      n.torch_min_idle_ns = u.torch_idle_ns;
  }
  if (n.unrecorded > 0) any_unrecorded_ = true;
}

std::vector<const Node*> NodeTable::mark_lost(int64_t now_mono, CommTable* comms,
                                              std::vector<std::string>* log) {
  std::vector<const Node*> newly_lost;
  // No node can be past the timeout before the earliest time one could (a walk over 16k nodes
  // at every tick cost more than the heartbeats' bookkeeping).
  if (now_mono < next_lost_check_mono_) return newly_lost;
  next_lost_check_mono_ = INT64_MAX;
  for (auto& [name, n] : nodes_) {
    if (n.lost) continue;
    if (now_mono - n.last_heartbeat_mono < cfg_.heartbeat_timeout_ns) {
      next_lost_check_mono_ = std::min(next_lost_check_mono_, lost_at(n.last_heartbeat_mono));
      continue;
    }
    n.lost = true;
    comms->drop_members(&n.members);
    log->push_back("frd coordinator: node " + name + " lost (silent for " +
                   std::to_string(secs(now_mono - n.last_heartbeat_mono)) + " s)");
    if (n.alive > 0) newly_lost.push_back(&n);
  }
  return newly_lost;
}

bool NodeTable::forget(int64_t now_mono, CommTable* comms,
                       const std::function<bool(const std::string& node)>& needed) {
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
        !needed(n.name)) {
      retained_bytes_ -= n.retained;
      comms->drop_members(&it->second.members);
      set_hints(it->second, false, false);
      sessions_.erase(n.session);
      nodes_forgotten_++;
      it = nodes_.erase(it);
    } else {
      ++it;
    }
  }
  return walk;
}

int NodeTable::expected_ranks() const {
  if (cfg_.expect_ranks > 0) return cfg_.expect_ranks;
  int ws = -1;
  for (const auto& [_, n] : nodes_) ws = std::max(ws, n.world_size);
  return ws;
}

int NodeTable::total_alive() const {
  int a = 0;
  for (const auto& [_, n] : nodes_)
    if (!n.lost) a += n.alive;
  return a;
}

ProcessCounts NodeTable::process_counts() const {
  ProcessCounts c;
  for (const auto& [_, n] : nodes_) {
    if (n.lost) continue;
    int here = n.alive + n.unrecorded;
    c.recording += n.alive;
    c.total += here;
    c.torch += n.torch_watched;
    c.nodes += here > 0;
    for (const auto& p : n.last.processes) c.ended += !p.alive;
  }
  return c;
}

std::string NodeTable::unrecorded_stall(int64_t threshold_ns) const {
  if (!any_unrecorded_) return "";
  const ProcessCounts c = process_counts();
  if (c.recording > 0 || c.torch == 0) return "";
  int64_t least_idle = -1;
  for (const auto& [_, n] : nodes_) {
    if (n.lost || n.torch_min_idle_ns < 0) continue;
    if (least_idle < 0 || n.torch_min_idle_ns < least_idle) least_idle = n.torch_min_idle_ns;
  }
  if (least_idle < 0 || least_idle < threshold_ns) return "";
  return "no progress in torch's process groups for " + std::to_string(int(secs(least_idle))) +
         " s (--stall-after " + std::to_string(int(secs(threshold_ns))) + " s): " + c.summary();
}

}  // namespace fr::daemon
