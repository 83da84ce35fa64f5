// What a restarted coordinator recovers (recovery.h): the incidents a previous run left open
// on disk (incident.json, read as untrusted input: bounded, names checked), and an incident of a
// previous run that a node delivers a kept dump for. Partial uploads left behind are removed.
#include "daemon/logic/recovery.h"
#include "daemon/logic/coordinator_helpers.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>

#include "daemon/base/names.h"
#include "log/json_fields.h"
#include "log/snapshot.h"

namespace fr::daemon {

using namespace coordinator_helpers;

namespace {

IncidentKind kind_of(const std::string& s) {
  for (IncidentKind k : {IncidentKind::kStall, IncidentKind::kRankDead, IncidentKind::kNodeLost,
                         IncidentKind::kManual, IncidentKind::kSlow})
    if (s == incident_kind_name(k)) return k;
  return IncidentKind::kManual;
}

bool state_of(const std::string& s, IncidentState* out) {
  for (IncidentState st :
       {IncidentState::kCollecting, IncidentState::kAnalyzing, IncidentState::kOpen,
        IncidentState::kClosedTransient, IncidentState::kClosed})
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
  std::string s;
  return fr::log::read_field(j, k, &s) ? printable(s, 512) : std::string();
}

std::set<std::string> jnames(const nlohmann::json& j, const char* k) {
  std::set<std::string> out;
  const nlohmann::json* names = fr::log::array_field(j, k);
  if (names == nullptr) return out;
  for (const auto& v : *names)
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

// A slow incident's finding (cause, factor, evidence) and the ranks it names, from its
// incident.json: the status, the page and the hook's environment say what they said before.
void restore_slow(const nlohmann::json& saved, Incident* inc) {
  const nlohmann::json* s = fr::log::field_of(saved, "slow");
  if (s == nullptr) return;
  inc->slow = slow_from_json(*s);
  if (inc->slow) inc->culprits = slow_culprits(*inc->slow);
}

}  // namespace

Recovery::Recovery(const CoordinatorConfig& cfg) : cfg_(cfg) {}

std::vector<Incident> Recovery::open_incidents() const {
  std::vector<Incident> out;
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
      inc.opened_real = fr::log::field_or<int64_t>(j, "opened_ns", 0);
      inc.opened_mono = inc.collected_mono = now;
      inc.asked = jnames(j, "nodes_asked");
      inc.uploaded = jnames(j, "nodes_uploaded");
      inc.placed = jnames(j, "nodes_placed");
      inc.hook_fired = fr::log::field_or(j, "hook_fired", false);
      if (const nlohmann::json* f = fr::log::object_field(j, "nodes_failed"))
        for (const auto& [k, v] : f->items())
          if (is_safe_name(k, kMaxNameLen) && v.is_string())
            inc.failed[k] = printable(v.get<std::string>(), 256);
      if (const nlohmann::json* t = fr::log::object_field(j, "trigger")) {
        inc.trigger_node = jstr(*t, "node");
        inc.trigger_log = jstr(*t, "log");
        inc.trigger_comm = fr::log::field_or<uint64_t>(*t, "comm", 0);
        inc.trigger_completed = fr::log::field_or<uint64_t>(*t, "completed", 0);
      }
      if (const nlohmann::json* ps = fr::log::array_field(j, "processes"))
        for (const auto& p : *ps) {
          if (!p.is_object() || inc.processes.size() >= 65536) break;
          fr::log::SnapshotProcess sp;
          fr::log::from_json(p, &sp);  // what is there: a file of an older coordinator too
          if (!is_safe_name(sp.file, 200)) continue;
          for (std::string* text : {&sp.host, &sp.job_id, &sp.source})
            *text = printable(*text, 512);
          inc.processes.push_back(std::move(sp));
        }
      inc.verdict_kind = jstr(j, "verdict");
      inc.verdict_summary = jstr(j, "summary");
      if (inc.kind == IncidentKind::kSlow) restore_slow(j, &inc);
      // Collecting: the nodes reconnect and are asked again; analysing: written again now;
      // open: stays the active incident, so the same hang does not open a second one.
      inc.state = state == IncidentState::kAnalyzing ? IncidentState::kCollecting : state;
      inc.deadline_mono = state == IncidentState::kAnalyzing ? now : now + cfg_.dump_deadline_ns;
      out.push_back(std::move(inc));
    }
  }
  return out;
}

// A dump for an incident of a previous coordinator run (the node kept it): accepted into that
// incident's directory if it is there and not closed, and the dump set is written again.
bool Recovery::incident_for_upload(const DumpHeader& hdr, const std::string& job_dir_name,
                                   bool job_known, Incident* out, bool* duplicate,
                                   std::string* error) const {
  std::string job = hdr.job_id.empty() ? job_dir_name : hdr.job_id;
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
  if (!saved.is_null() && state_of(jstr(saved, "state"), &saved_state) && is_closed(saved_state)) {
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
    rec.hook_fired = fr::log::field_or(saved, "hook_fired", false);
    if (rec.kind == IncidentKind::kSlow) restore_slow(saved, &rec);
  }
  rec.job_id = job;
  rec.dir = d;
  rec.opened_mono = rec.collected_mono = mono_ns();
  rec.opened_real = real_ns();
  fr::log::Manifest m;
  std::string merr;
  if (fr::log::read_manifest(d, &m, &merr)) {
    rec.opened_real = int64_t(m.time_ns);
    rec.processes = std::move(m.processes);
    rec.skipped = std::move(m.skipped);
  }
  *out = std::move(rec);
  return true;
}

}  // namespace fr::daemon
