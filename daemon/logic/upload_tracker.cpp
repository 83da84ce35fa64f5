// The coordinator's side of uploads (upload_tracker.h): whether a dump comes from the node that
// was asked (its connection's upload key), where its files go, and what its arrival, or its
// failure, does to the incident.
#include "daemon/logic/upload_tracker.h"
#include "daemon/logic/coordinator_helpers.h"

#include "daemon/base/names.h"
#include "log/side_files.h"
#include "log/slow_history.h"

namespace fr::daemon {

using namespace coordinator_helpers;

UploadTracker::UploadTracker(IncidentBook* incidents, const NodeTable* nodes,
                             const Recovery* recovery)
    : incidents_(incidents), nodes_(nodes), recovery_(recovery) {}

bool UploadTracker::check_uploader(const DumpHeader& hdr, const PeerAuth& auth,
                                   std::string* error) const {
  const Node* node = nodes_->find(hdr.node_name);
  if (!node || !node->connected) {
    *error = "node " + printable(hdr.node_name, 64) + " is not connected";
    return false;
  }
  const Node& n = *node;
  if (hdr.upload_key.empty() || !equal_secret(hdr.upload_key, n.upload_key) ||
      auth.authenticated != n.authenticated || auth.principal != n.principal) {
    *error = "this upload does not come from node " + n.name + "'s connection";
    return false;
  }
  // Each node's files carry its name, so one node's dump never lands on another's (its GPU
  // health is <node>.gpu.json, its heartbeats' history <node>.slow_history.json).
  for (const auto& f : hdr.files)
    if (f.name.rfind(n.name + "-", 0) != 0 && f.name != n.name + fr::log::kGpuSuffix &&
        f.name != n.name + fr::log::kSlowHistorySuffix) {
      *error = "file '" + printable(f.name, 80) + "' is not named after node " + n.name;
      return false;
    }
  for (const auto& inc : *incidents_)
    if (inc.id == hdr.incident_id && !inc.asked.empty() && !inc.asked.count(n.name) &&
        !inc.recovered) {
      *error = "node " + n.name + " was not asked to dump for " + inc.id;
      return false;
    }
  return true;
}

bool UploadTracker::begin_upload(const DumpHeader& hdr, const std::string& job_dir_name,
                                 bool job_known, std::string* dir, bool* duplicate,
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
  Incident* inc = incidents_->find(hdr.incident_id);
  if (inc && !hdr.job_id.empty() && hdr.job_id != inc->job_id) {
    // Incident ids repeat across jobs: this is another job's dump that a node kept.
    *error = "dump of job " + hdr.job_id + " for " + hdr.incident_id + " of job " + inc->job_id;
    return false;
  }
  if (!inc && !hdr.job_id.empty() && job_known && hdr.job_id != job_dir_name) {
    *error = "dump of job " + hdr.job_id + ", not of this coordinator's job " + job_dir_name;
    return false;
  }
  if (inc && is_closed(inc->state) && !inc->uploaded.count(hdr.node_name)) {
    *error = inc->id + " is closed";
    return false;
  }
  if (!inc) {
    // A dump for an incident of a previous coordinator run (the node kept it).
    Incident rec;
    if (!recovery_->incident_for_upload(hdr, job_dir_name, job_known, &rec, duplicate, error))
      return false;
    if (*duplicate) return true;
    inc = &incidents_->add(std::move(rec));
  }
  if (inc->uploaded.count(hdr.node_name)) {
    *duplicate = true;
    return true;
  }
  *dir = inc->dir;
  return true;
}

void UploadTracker::upload_done(const DumpHeader& hdr, int64_t now_mono, bool placed) {
  Incident* inc = incidents_->find(hdr.incident_id);
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

void UploadTracker::upload_failed(const std::string& incident_id, const std::string& node,
                                  const std::string& error) {
  failures_++;
  Incident* inc = incidents_->find(incident_id);
  if (!inc || inc->uploaded.count(node)) return;
  // The node keeps its dump and retries; until then this is only noted.
  inc->error = printable(node + ": " + error, 256);
}

void UploadTracker::dump_failed(const std::string& incident_id, const std::string& node,
                                const std::string& error) {
  Incident* inc = incidents_->find(incident_id);
  if (!inc || inc->uploaded.count(node)) return;
  inc->failed[node] = printable(error, 256);
  inc->dirty = true;
  failures_++;
}

}  // namespace fr::daemon
