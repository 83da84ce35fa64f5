// See incident_book.h.
#include "daemon/logic/incident_book.h"

#include <cstdio>

#include "common/files.h"
#include "log/manifest.h"
#include "daemon/base/names.h"
#include "daemon/logic/coordinator_helpers.h"

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

IncidentBook::IncidentBook(std::string dump_dir, std::string coordinator_id)
    : dump_dir_(std::move(dump_dir)), coordinator_id_(std::move(coordinator_id)) {}

Incident* IncidentBook::find(const std::string& id) {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &incidents_[it->second];
}

const Incident* IncidentBook::find(const std::string& id) const {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &incidents_[it->second];
}

void IncidentBook::reindex() {
  by_id_.clear();
  for (size_t i = 0; i < incidents_.size(); ++i) by_id_.try_emplace(incidents_[i].id, i);
}

Incident* IncidentBook::active() {
  for (auto& i : incidents_)
    if (i.state == IncidentState::kCollecting || i.state == IncidentState::kAnalyzing ||
        i.state == IncidentState::kOpen)
      return &i;
  return nullptr;
}

Incident* IncidentBook::blocking() {
  for (auto& i : incidents_)
    if (i.state == IncidentState::kCollecting || i.state == IncidentState::kAnalyzing ||
        (i.state == IncidentState::kOpen && i.kind != IncidentKind::kSlow))
      return &i;
  return nullptr;
}

Incident* IncidentBook::collecting() {
  for (auto& i : incidents_)
    if (i.state == IncidentState::kCollecting || i.state == IncidentState::kAnalyzing) return &i;
  return nullptr;
}

Incident& IncidentBook::open(IncidentKind kind, const std::string& reason,
                             const std::string& job_id, int64_t now_mono, int64_t deadline_ns) {
  Incident inc;
  inc.kind = kind;
  inc.reason = printable(reason, 512);
  inc.job_id = job_id;
  std::string job_dir = dump_dir_ + "/" + inc.job_id;
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
  inc.deadline_mono = now_mono + deadline_ns;
  incidents_.push_back(std::move(inc));
  by_id_.try_emplace(incidents_.back().id, incidents_.size() - 1);
  return incidents_.back();
}

Incident& IncidentBook::add(Incident inc) {
  incidents_.push_back(std::move(inc));
  by_id_.try_emplace(incidents_.back().id, incidents_.size() - 1);
  return incidents_.back();
}

nlohmann::json IncidentBook::to_json(const Incident& inc) const {
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

void IncidentBook::persist(const Incident& inc, Actions* actions) const {
  if (inc.dir.empty()) return;
  actions->persist.emplace_back(inc.dir + "/incident.json", to_json(inc).dump(2) + "\n");
}

void IncidentBook::persist_changed(int64_t now_mono, Actions* a) {
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
      persist(inc, a);
    }
}

bool IncidentBook::take_hook(const std::string& incident_id, Actions* actions) {
  Incident* inc = find(incident_id);
  if (!inc || inc->hook_fired) return false;
  inc->hook_fired = true;
  persist(*inc, actions);
  return true;
}

bool IncidentBook::needs_node(const std::string& node) const {
  for (const auto& inc : incidents_)
    if (!is_closed(inc.state) && (inc.asked.count(node) || inc.trigger_node == node)) return true;
  return false;
}

void IncidentBook::watched_logs(const std::string& node, std::set<std::string>* logs) const {
  for (const auto& inc : incidents_)
    if (!is_closed(inc.state) && inc.trigger_node == node) logs->insert(inc.trigger_log);
}

void IncidentBook::trim_closed(size_t max_closed) {
  // Closed incidents stay on disk; memory keeps the latest few.
  size_t closed = 0;
  for (const auto& i : incidents_) closed += is_closed(i.state);
  if (closed <= max_closed) return;
  for (auto it = incidents_.begin(); closed > max_closed && it != incidents_.end();) {
    if (is_closed(it->state)) {
      it = incidents_.erase(it);
      closed--;
    } else {
      ++it;
    }
  }
  reindex();
}

void IncidentBook::mark_collected(Incident& inc, int64_t now_mono) {
  inc.state = IncidentState::kAnalyzing;
  inc.collected_mono = now_mono;
  last_dump_seconds_ = secs(now_mono - inc.opened_mono);
}

bool IncidentBook::mark_analysed(Incident& inc, const AssemblyResult& r, int64_t now_mono) {
  inc.analyzed_mono = now_mono;
  last_analysis_seconds_ = secs(now_mono - inc.collected_mono);
  // An upload error (a full disk) stays visible after a dump set written without that dump.
  if (!r.ok) inc.error = r.error;
  inc.verdict_kind = r.verdict_kind;
  inc.verdict_summary = r.verdict_summary;
  inc.culprits = r.culprits;
  if (inc.reassemble) {
    inc.reassemble = false;
    return false;
  }
  inc.state = inc.kind == IncidentKind::kManual ? IncidentState::kClosed : IncidentState::kOpen;
  // A slow incident's verdict is the detector's: the dump set shows no hang, and the operator's
  // hook must know whom to drain.
  if (inc.kind == IncidentKind::kSlow && inc.slow) {
    inc.verdict_kind = "slow";
    inc.verdict_summary = inc.slow->evidence();
    inc.culprits = slow_culprits(*inc.slow);
  }
  return true;
}

}  // namespace fr::daemon
