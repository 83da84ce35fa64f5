// The coordinator's incidents across its parts (coordinator.h): tick()'s passes (nodes gone
// silent, incidents whose condition cleared, slow-rank findings, detection of a new incident),
// opening one and asking the nodes to dump, its deadline, the dump set to assemble, and what is
// forgotten. The incidents themselves are in incident_book.h.
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
  Incident& inc = incidents_.open(kind, reason, job_dir_name(), now_mono, cfg_.dump_deadline_ns);
  if (slow) {
    inc.slow = *slow;
    inc.culprits = slow_culprits(*slow);
  }
  inc.processes_seen = process_counts().summary();
  if (trigger) {
    inc.trigger_node = trigger->name;
    inc.trigger_log = trigger->oldest.log;
    inc.trigger_comm = trigger->oldest.comm;
    inc.trigger_completed = trigger->oldest.completed;
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
  persist(inc, actions);
  check_collected(inc, now_mono, actions);
}

void CoordinatorState::forget(int64_t now_mono) {
  // The nodes are walked at most once a second, and so are the communicators.
  const bool walked = nodes_.forget(
      now_mono, &comms_, [this](const std::string& node) { return incidents_.needs_node(node); });
  if (walked) comms_.forget(now_mono);
  incidents_.trim_closed(cfg_.max_closed_incidents);
}

void CoordinatorState::check_collected(Incident& inc, int64_t now_mono, Actions* actions) {
  if (inc.state != IncidentState::kCollecting) return;
  bool all = true;
  for (const auto& name : inc.asked) {
    if (inc.uploaded.count(name) || inc.failed.count(name)) continue;
    const Node* n = nodes_.find(name);
    if (n && n->lost) continue;  // it will not answer
    all = false;
    break;  // one is enough: this runs on every tick while thousands of nodes answer
  }
  if (!all && now_mono < inc.deadline_mono) return;
  if (!all) {
    for (const auto& name : inc.asked)
      if (!inc.uploaded.count(name) && !inc.failed.count(name)) {
        const Node* n = nodes_.find(name);
        inc.failed[name] = n && n->connected
                               ? "connected, but its dump did not arrive before the deadline"
                               : "no dump before the deadline";
      }
  }
  incidents_.mark_collected(inc, now_mono);
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
  j.expected_ranks = nodes_.expected_ranks();
  j.processes = inc.processes;
  j.skipped = inc.skipped;
  // Nodes name their dumps' host after themselves (node.cpp), so offsets go by node name.
  for (const auto& [name, n] : nodes_)
    if (inc.asked.count(name) || inc.uploaded.count(name))
      j.nodes.push_back({name, n.clock.offset_ns(), n.clock.has_offset()});
  for (const auto& [name, why] : inc.failed) {
    const Node* n = nodes_.find(name);
    if (n && n->connected && !n->lost) j.undelivered[name] = why;
  }
  j.incident = incidents_.to_json(inc);
  return j;
}

Actions CoordinatorState::tick(int64_t now_mono) {
  Actions a;
  std::vector<const Node*> newly_lost = nodes_.mark_lost(now_mono, &comms_, &a.log);
  for (auto& inc : incidents_) check_collected(inc, now_mono, &a);
  // A change of state (check_collected) is written at once; progress while dumps come in at
  // most once a second.
  incidents_.persist_changed(now_mono, &a);
  for (auto& inc : incidents_) close_if_cleared(inc, &a);
  age_findings(now_mono, &a);
  if (!incidents_.blocking()) detect(newly_lost, now_mono, &a);
  slow_pass(now_mono, &a);
  // After detection: newly_lost points into nodes_, and a node lost just now is the news, not
  // something to forget (with --forget-after below the heartbeat timeout it would qualify).
  forget(now_mono);
  return a;
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
    if (n.oldest.stalled()) any_stall = true;
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
  comms_.age_findings(now_mono, &a->log);
  if (!cfg_.dump_dir.empty() && comms_.take_findings_dirty()) {
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
  if (nodes_.dead_nodes() == 0 && nodes_.over_threshold_nodes() == 0) return;
  int alive = nodes_.dead_nodes() ? nodes_.total_alive() : 0;
  for (const auto& [name, n] : nodes_) {
    if (nodes_.dead_nodes() == 0) break;
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
    if (n.lost || !n.oldest.stalled()) continue;
    open(IncidentKind::kStall, stall_reason(n), now_mono, a, &n);
    return;
  }
}

std::string CoordinatorState::stall_reason(const Node& n) const {
  if (n.oldest.xfer) {
    const XferProgress& x = *n.oldest.xfer;
    const std::string who = n.oldest.rank >= 0 ? "rank " + std::to_string(n.oldest.rank)
                                               : "pid " + std::to_string(n.oldest.pid);
    return who + " on node " + n.name + ": NIXL " + fr::log::xfer_op_name(x.oldest_op) + " of " +
           std::to_string(x.oldest_bytes) + " bytes from agent '" + x.local_agent + "' to agent '" +
           x.remote_agent +
           (x.oldest_status == FR_NIXL_ERR_REMOTE_DISCONNECT
                ? "' failed (its remote went away), posted "
                : "' in flight for ") +
           std::to_string(secs(n.oldest.age_ns)).substr(0, 5) + " s" +
           (x.oldest_status == FR_NIXL_ERR_REMOTE_DISCONNECT ? " ago (" : " (") +
           fr::log::nixl_status_name(x.oldest_status) + "; " + std::to_string(x.in_flight) +
           " in flight to it)" +
           threshold_note(n.oldest.threshold_ns, comm_model(n.oldest.comm), comms_.policy());
  }
  std::string op = n.oldest.op ? std::string(fr::log::op_name(uint16_t(n.oldest.op))) : "an op";
  if (n.oldest.op && n.oldest.seq) op += " #" + std::to_string(n.oldest.seq);
  std::string comm = n.oldest.comm_name.empty()
                         ? "0x" + hex_id(n.oldest.comm)
                         : n.oldest.comm_name + " (0x" + hex_id(n.oldest.comm) + ")";
  return "rank " + std::to_string(n.oldest.rank) + " on node " + n.name + ": " + op +
         " on communicator " + comm + " in flight for " +
         std::to_string(secs(n.oldest.age_ns)).substr(0, 5) + " s" +
         threshold_note(n.oldest.threshold_ns, comm_model(n.oldest.comm), comms_.policy());
}

std::string CoordinatorState::trigger(const std::string& reason, int64_t now_mono,
                                      Actions* actions) {
  if (const Incident* busy = incidents_.collecting()) return busy->id;
  open(IncidentKind::kManual, reason.empty() ? "manual dump" : reason, now_mono, actions, nullptr);
  return incidents_.back().id;
}

void CoordinatorState::dump_status(uint64_t session, const std::string& incident_id, bool ok,
                                   const std::string& error, int64_t now_mono) {
  (void)now_mono;
  Node* n = nodes_.by_session(session);
  if (!n || ok) return;
  uploads_.dump_failed(incident_id, n->name, error);
}

void CoordinatorState::assembled(const std::string& incident_id, const AssemblyResult& r,
                                 int64_t now_mono, Actions* actions) {
  Incident* inc = incidents_.find(incident_id);
  if (!inc) return;
  if (!incidents_.mark_analysed(*inc, r, now_mono)) {
    actions->assemble.push_back(make_job(*inc));
    persist(*inc, actions);
    return;
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
