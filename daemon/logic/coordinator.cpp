// See coordinator.h. The composition: the parts built from the configuration (an incident a
// previous run left open is taken up at once), what the job is called, and what a node's
// connection and heartbeat do across the parts. Incidents are in coordinator_incidents.cpp, the
// stall of processes without a flight log in coordinator_processes.cpp, the fail-slow pass in
// coordinator_slow.cpp, status and metrics in coordinator_status.cpp.
#include "daemon/logic/coordinator.h"
#include "daemon/logic/coordinator_helpers.h"

#include <random>

#include "daemon/base/names.h"

namespace fr::daemon {

using namespace coordinator_helpers;

namespace {

CoordinatorConfig sanitized(CoordinatorConfig cfg) {
  if (!cfg.job_id.empty()) cfg.job_id = sanitize_name(cfg.job_id);
  return cfg;
}

std::string new_coordinator_id() {
  std::random_device rd;
  return hex_id((uint64_t(rd()) << 32) ^ rd() ^ uint64_t(real_ns()));
}

}  // namespace

CoordinatorState::CoordinatorState(CoordinatorConfig cfg)
    : cfg_(sanitized(std::move(cfg))),
      comms_(cfg_),
      nodes_(cfg_),
      incidents_(cfg_.dump_dir, new_coordinator_id()),
      recovery_(cfg_),
      uploads_(&incidents_, &nodes_, &recovery_) {
  for (Incident& inc : recovery_.open_incidents()) incidents_.add(std::move(inc));
}

std::string CoordinatorState::known_job() const {
  return !cfg_.job_id.empty() ? cfg_.job_id : nodes_.learned_job();
}

std::string CoordinatorState::job_dir_name() const {
  const std::string job = known_job();
  return job.empty() ? "job" : job;
}

void CoordinatorState::resend_requests(uint64_t session, Actions* actions) {
  Node* n = nodes_.by_session(session);
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
  nodes_.disconnect(session);
}

bool CoordinatorState::begin_upload(const DumpHeader& hdr, std::string* dir, bool* duplicate,
                                    std::string* error) {
  const bool job_known = !cfg_.job_id.empty() || !nodes_.learned_job().empty();
  return uploads_.begin_upload(hdr, job_dir_name(), job_known, dir, duplicate, error);
}

bool CoordinatorState::heartbeat(uint64_t session, NodeReport report, int64_t now_mono) {
  return heartbeat(session, &report, now_mono);
}

bool CoordinatorState::heartbeat(uint64_t session, NodeReport* given, int64_t now_mono) {
  NodeReport& report = *given;
  Node* n = nodes_.heard(session, now_mono);
  if (!n) return false;
  // The detection summary comes from the whole report, before anything is cut from it. The op
  // that counts is the one furthest past (or nearest to) its communicator's threshold.
  comms_.learn(n->name, &n->members, report, now_mono);
  learn_slow(*n, report, now_mono);
  // The detector keeps what it needs of the timing summaries; the report kept for status does
  // not (their memory stays, for the next heartbeat to be decoded into).
  for (auto& p : report.processes) {
    p.links.clear();
    for (auto& c : p.comms) c.recent.clear();
  }
  nodes_.take_report(n, &report, now_mono, comms_,
                     [this](const std::string& node, std::set<std::string>* logs) {
                       incidents_.watched_logs(node, logs);
                     });
  return true;
}

}  // namespace fr::daemon
