// The coordinator's incidents (coordinator.h): tick()'s passes (nodes gone silent, incidents
// whose condition cleared, slow-rank findings, detection of a new incident), opening one and
// asking the nodes to dump, its deadline, the dump set to assemble, and incident.json.
#include "daemon/logic/coordinator.h"
#include "daemon/logic/coordinator_helpers.h"
#include "common/files.h"

#include <algorithm>

#include "log/manifest.h"
#include "daemon/base/names.h"
#include "log/reader.h"

namespace fr::daemon {

using namespace coordinator_helpers;

namespace {

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

}  // namespace

void CoordinatorState::open(IncidentKind kind, const std::string& reason, int64_t now_mono,
                            Actions* actions, const Node* trigger, const SlowFinding* slow) {
  Incident inc;
  inc.kind = kind;
  if (slow) {
    inc.slow = *slow;
    inc.culprits = slow_culprits(*slow);
  }
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
  inc.processes_seen = process_counts().summary();
  if (trigger) {
    inc.trigger_node = trigger->name;
    inc.trigger_log = trigger->max_age_log;
    inc.trigger_comm = trigger->max_age_comm;
    inc.trigger_completed = trigger->max_age_completed;
  }
  for (auto& [name, n] : nodes_) {
    if (!n.connected || n.lost) continue;
    inc.asked.insert(name);
    actions->dumps.push_back(
        {n.session, name, inc.id, inc.job_id, inc.reason, cfg_.dump_deadline_ns / 1'000'000});
  }
  actions->log.push_back(
      "frd coordinator: " + inc.id + " opened (" + incident_kind_name(kind) + "): " + inc.reason +
      "; asking " + std::to_string(inc.asked.size()) + " node(s) to dump" +
      (inc.reason.find(inc.processes_seen) != std::string::npos ? ""
                                                                : " (" + inc.processes_seen + ")"));
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
  for (const auto& p : inc.processes) procs.push_back(p);
  return {
      {"schema", "frd-incident/1"},
      {"id", inc.id},
      {"job_id", inc.job_id},
      {"kind", incident_kind_name(inc.kind)},
      {"state", incident_state_name(inc.state)},
      {"reason", inc.reason},
      {"processes_seen", inc.processes_seen},
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
      {"slow", inc.slow ? slow_json(*inc.slow) : nlohmann::json(nullptr)},
      {"hook_fired", inc.hook_fired},
      {"error", inc.error},
      {"collect_seconds", inc.collected_mono ? secs(inc.collected_mono - inc.opened_mono) : 0.0}};
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
    if (it->second.waiting_members == 0 &&
        now_mono - it->second.last_seen_mono > cfg_.forget_after_ns)
      it = models_.erase(it);
    else
      ++it;
  }
  // Closed incidents stay on disk; memory keeps the latest few.
  size_t closed = 0;
  for (const auto& i : incidents_) closed += is_closed(i.state);
  for (auto it = incidents_.begin();
       closed > cfg_.max_closed_incidents && it != incidents_.end();) {
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
    break;  // one is enough: this runs on every tick while thousands of nodes answer
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
  std::vector<const Node*> newly_lost = mark_lost(now_mono, &a);
  for (auto& inc : incidents_) check_collected(inc, now_mono, &a);
  // While dumps come in, each one (in or failed) rewrites the whole incident.json: at 16k nodes a
  // rewrite per tick took most of a core. Then it is written at most once a second; a change of
  // state (check_collected) is written at once.
  constexpr int64_t kProgressGapNs = 1'000'000'000;
  for (auto& inc : incidents_)
    if (inc.dirty && (inc.state != IncidentState::kCollecting ||
                      now_mono - inc.progress_written_mono >= kProgressGapNs ||
                      now_mono < inc.progress_written_mono)) {
      inc.dirty = false;
      inc.progress_written_mono = now_mono;
      persist(inc, &a);
    }
  for (auto& inc : incidents_) close_if_cleared(inc, &a);
  age_findings(now_mono, &a);
  if (!blocking()) detect(newly_lost, now_mono, &a);
  slow_pass(now_mono, &a);
  // After detection: newly_lost points into nodes_, and a node lost just now is the news, not
  // something to forget (with --forget-after below the heartbeat timeout it would qualify).
  forget(now_mono);
  return a;
}

std::vector<const CoordinatorState::Node*> CoordinatorState::mark_lost(int64_t now_mono,
                                                                       Actions* a) {
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
    drop_members(n);
    a->log.push_back("frd coordinator: node " + name + " lost (silent for " +
                     std::to_string(secs(now_mono - n.last_heartbeat_mono)) + " s)");
    if (n.alive > 0) newly_lost.push_back(&n);
  }
  return newly_lost;
}

void CoordinatorState::close_if_cleared(Incident& inc, Actions* a) {
  if (inc.state != IncidentState::kOpen) return;
  // Recovered after a restart: judged once the nodes report again, not before. A node that said
  // hello has not reported yet: its ranks are unknown, not dead.
  if (inc.recovered && nodes_.empty()) return;
  if (inc.recovered)
    for (const auto& [_, n] : nodes_)
      if (n.connected && n.heartbeats == 0) return;
  IncidentState before = inc.state;
  bool any_alive = false, any_stall = false, trigger_progressed = false, any_dead = false;
  bool any_lost = false;
  for (const auto& [_, n] : nodes_) {
    any_lost |= n.lost;
    if (n.lost) continue;
    if (n.alive || n.unrecorded) any_alive = true;
    if (!n.dead_since.empty()) any_dead = true;
    if (n.max_age_ns > 0 && n.max_age_ns >= n.max_age_threshold_ns) any_stall = true;
    if (n.name == inc.trigger_node)
      for (const auto& p : n.last.processes)
        if (p.log == inc.trigger_log) {
          for (const auto& c : p.comms)
            if (c.comm_id == inc.trigger_comm && c.completed > inc.trigger_completed)
              trigger_progressed = true;
          for (const auto& x : p.xfers)
            if (nixl_model_id(x.local_agent, x.remote_agent) == inc.trigger_comm &&
                (x.completed > inc.trigger_completed || x.in_flight == 0))
              trigger_progressed = true;
        }
  }
  if (!any_alive) {
    inc.state = IncidentState::kClosed;
    a->log.push_back("frd coordinator: " + inc.id + " closed: the job has no live rank left");
  } else if (inc.unrecorded && unrecorded_stall().empty() && process_counts().torch > 0) {
    inc.state = IncidentState::kClosedTransient;
    a->log.push_back("frd coordinator: " + inc.id +
                     " closed as transient: torch's process groups move again");
  } else if (inc.kind == IncidentKind::kStall && trigger_progressed && !any_stall && !any_dead) {
    inc.state = IncidentState::kClosedTransient;
    a->log.push_back("frd coordinator: " + inc.id +
                     " closed as transient: the stalled operations completed");
  } else if (inc.kind == IncidentKind::kNodeLost && !any_lost && !any_stall && !any_dead) {
    inc.state = IncidentState::kClosedTransient;
    a->log.push_back("frd coordinator: " + inc.id + " closed as transient: every node is back");
  }
  if (inc.state != before) persist(inc, a);
}

void CoordinatorState::age_findings(int64_t now_mono, Actions* a) {
  // Slow-rank findings: inactive once not seen for a while; written when they change.
  for (auto& f : findings_)
    if (f.active && now_mono - f.last_mono > 10 * cfg_.heartbeat_interval_ns) {
      f.active = false;
      findings_dirty_ = true;
      a->log.push_back("frd coordinator: rank " + std::to_string(f.rank) + " on " + f.comm_name +
                       " no longer slow");
    }
  for (auto& line : pending_log_) a->log.push_back(std::move(line));
  pending_log_.clear();
  if (findings_dirty_ && !cfg_.dump_dir.empty()) {
    findings_dirty_ = false;
    std::string mkerr;
    if (fr::files::make_dirs(cfg_.dump_dir + "/" + job_dir_name(), &mkerr))
      a->persist.emplace_back(findings_path(), findings_text());
  }
}

void CoordinatorState::detect(const std::vector<const Node*>& newly_lost, int64_t now_mono,
                              Actions* a) {
  // Most specific first.
  for (const Node* n : newly_lost) {
    open(IncidentKind::kNodeLost,
         "node " + n->name + " silent for " +
             std::to_string(int(secs(now_mono - n->last_heartbeat_mono))) + " s with " +
             std::to_string(n->alive) + " live rank(s)",
         now_mono, a, nullptr);
    return;
  }
  if (std::string why = unrecorded_stall(); !why.empty()) {
    open(IncidentKind::kStall, why, now_mono, a, nullptr);
    incidents_.back().unrecorded = true;
    return;
  }
  if (dead_nodes_ == 0 && over_threshold_nodes_ == 0) return;
  int alive = dead_nodes_ ? total_alive() : 0;
  for (const auto& [name, n] : nodes_) {
    if (dead_nodes_ == 0) break;
    if (n.lost || alive == 0) continue;
    for (const auto& [log, dead] : n.dead_since) {
      if (now_mono - dead.since < cfg_.dead_grace_ns) continue;
      open(IncidentKind::kRankDead,
           "rank " + std::to_string(dead.rank) + " on node " + name + " died while " +
               std::to_string(alive) + " rank(s) still run",
           now_mono, a, nullptr);
      return;
    }
  }
  for (const auto& [name, n] : nodes_) {
    // The age as last reported, not extrapolated: a node that stopped reporting (frozen) must
    // count as lost, not make its last ops look stalled. Nodes report a crossing at once.
    if (n.lost || n.max_age_ns <= 0 || n.max_age_ns < n.max_age_threshold_ns) continue;
    open(IncidentKind::kStall, stall_reason(n), now_mono, a, &n);
    return;
  }
}

std::string CoordinatorState::stall_reason(const Node& n) const {
  if (n.max_age_xfer) {
    const XferProgress& x = *n.max_age_xfer;
    const std::string who = n.max_age_rank >= 0 ? "rank " + std::to_string(n.max_age_rank)
                                                : "pid " + std::to_string(n.max_age_pid);
    return who + " on node " + n.name + ": NIXL " + fr::log::xfer_op_name(x.oldest_op) + " of " +
           std::to_string(x.oldest_bytes) + " bytes from agent '" + x.local_agent + "' to agent '" +
           x.remote_agent +
           (x.oldest_status == FR_NIXL_ERR_REMOTE_DISCONNECT
                ? "' failed (its remote went away), posted "
                : "' in flight for ") +
           std::to_string(secs(n.max_age_ns)).substr(0, 5) + " s" +
           (x.oldest_status == FR_NIXL_ERR_REMOTE_DISCONNECT ? " ago (" : " (") +
           fr::log::nixl_status_name(x.oldest_status) + "; " + std::to_string(x.in_flight) +
           " in flight to it)" +
           threshold_note(n.max_age_threshold_ns, comm_model(n.max_age_comm), policy_);
  }
  std::string op = n.max_age_op ? std::string(fr::log::op_name(uint16_t(n.max_age_op))) : "an op";
  if (n.max_age_op && n.max_age_seq) op += " #" + std::to_string(n.max_age_seq);
  std::string comm = n.max_age_comm_name.empty()
                         ? "0x" + hex_id(n.max_age_comm)
                         : n.max_age_comm_name + " (0x" + hex_id(n.max_age_comm) + ")";
  return "rank " + std::to_string(n.max_age_rank) + " on node " + n.name + ": " + op +
         " on communicator " + comm + " in flight for " +
         std::to_string(secs(n.max_age_ns)).substr(0, 5) + " s" +
         threshold_note(n.max_age_threshold_ns, comm_model(n.max_age_comm), policy_);
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
  // A slow incident's verdict is the detector's: the dump set shows no hang, and the operator's
  // hook must know whom to drain.
  if (inc->kind == IncidentKind::kSlow && inc->slow) {
    inc->verdict_kind = "slow";
    inc->verdict_summary = inc->slow->evidence();
    inc->culprits = slow_culprits(*inc->slow);
  }
  persist(*inc, actions);
  std::string culprits;
  for (int c : inc->culprits) culprits += (culprits.empty() ? "" : ",") + std::to_string(c);
  if (r.ok)
    actions->log.push_back("frd coordinator: " + inc->id + " verdict " + inc->verdict_kind +
                           " culprits [" + culprits + "]: " + inc->verdict_summary + " -> " +
                           inc->dir);
  else
    actions->log.push_back("frd coordinator: " + inc->id + " dump set not written: " + r.error);
}

}  // namespace fr::daemon
