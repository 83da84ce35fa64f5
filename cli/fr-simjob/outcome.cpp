// What a job left, once its ranks are stopped or done: the dump set (a snapshot of every node's
// flight logs with every live rank's stacks, unless the coordinator took one), its analysis (the
// coordinator's analysis.json, or the analyzer run here), result.json, and the lines that tell the
// user how the job ended.
#include <sys/wait.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "analyzer/analyze.h"
#include "daemon/host/stacks.h"
#include "common/files.h"
#include "launch.h"
#include "log/reader.h"
#include "log/snapshot.h"

namespace fr::simjob {

namespace fs = std::filesystem;

std::string dump_summary(const std::string& dir, int max_ranks) {
  log::Manifest m;
  std::string error;
  if (!log::read_manifest(dir, &m, &error)) return "  (cannot read the manifest: " + error + ")\n";
  std::vector<const log::SnapshotProcess*> procs;
  for (const auto& p : m.processes) procs.push_back(&p);
  std::sort(procs.begin(), procs.end(), [](auto* a, auto* b) { return a->rank < b->rank; });
  std::ostringstream out;
  int shown = 0;
  for (const auto* p : procs) {
    if (shown++ == max_ranks) {
      out << "  ... " << procs.size() - max_ranks << " more rank(s)\n";
      break;
    }
    log::ReadResult rr = log::read_log(dir + "/" + p->file);
    char head[96];
    std::snprintf(head, sizeof head, "  rank %-3d %-6s %-5s", p->rank, p->host.c_str(),
                  p->alive ? "alive" : "dead");
    out << head;
    if (!rr.ok()) {
      out << " unreadable: " << rr.message << "\n";
      continue;
    }
    const log::LogFile& lf = *rr.log;
    std::vector<std::pair<std::string, uint64_t>> roles;
    std::vector<const fr_comm_entry*> splits;
    for (const auto& c : lf.comms) {
      if (c.origin == FR_ORIGIN_INIT_RANK) roles.push_back({"world", c.id});
      if (c.origin == FR_ORIGIN_SPLIT) splits.push_back(&c);
    }
    std::stable_sort(splits.begin(), splits.end(),
                     [](auto* a, auto* b) { return a->create_ns < b->create_ns; });
    const char* names[] = {"tp", "pp", "dp"};
    for (size_t i = 0; i < splits.size() && i < 3; ++i) roles.push_back({names[i], splits[i]->id});
    for (const auto& [role, id] : roles) {
      const log::Record* last = nullptr;
      for (const auto& rec : lf.records)
        if (rec.raw.comm_id == id &&
            (log::op_is_collective(rec.raw.op) || log::op_is_p2p(rec.raw.op)))
          last = &rec;
      out << " | " << role << " ";
      if (!last) {
        out << "-";
        continue;
      }
      out << log::op_name(last->raw.op) << " #" << last->raw.seq << " "
          << log::gpu_state_name(last->gpu_state);
    }
    out << "\n";
  }
  return out.str();
}

// Every live rank's stacks beside its dump, as the node daemon takes them (the `frd stacks`
// helper, under one budget for the whole job: --stack-budget, else frd's 5 s); the ranks are
// still stuck where the stall left them.
json Job::take_stacks(const std::string& dir, const std::vector<log::SnapshotProcess>& procs) {
  daemon::StackOptions so =
      daemon::stack_options("", o.stack_budget_s > 0 ? o.stack_budget_s : 5, false);
  so.frd_binary = frd_exe;
  std::vector<daemon::StackTarget> targets;
  for (const auto& p : procs) targets.push_back({p.pid, p.rank, p.file, p.alive, p.source});
  daemon::StacksTaken st = daemon::take_stacks(so, targets, dir);
  return {{"taken", st.taken}, {"took_s", double(st.took_ns) / 1e9}, {"notes", st.notes}};
}

bool Job::snapshot() {
  if (!o.agent) return false;  // no agent, no flight logs
  std::string dir = out + "/dumps";
  std::vector<log::SnapshotProcess> procs;
  std::vector<log::SnapshotSkip> skipped;
  std::vector<log::ManifestNode> nodes;
  uint64_t t = realtime_ns();
  for (int n = 0; n < o.shape.nodes; ++n) {
    log::SnapshotOptions so;
    so.log_dir = node_log_dir(n);
    so.out_dir = dir;
    so.host = "node" + std::to_string(n);
    so.job_id = job_id;
    so.file_prefix = "node" + std::to_string(n) + "-";
    so.write_manifest = false;
    log::SnapshotResult res = log::snapshot_dir(so);
    if (!res.ok()) {
      err("snapshot of " + so.log_dir + " failed: " + res.error);
      return false;
    }
    procs.insert(procs.end(), res.processes.begin(), res.processes.end());
    skipped.insert(skipped.end(), res.skipped.begin(), res.skipped.end());
    log::ManifestNode mn;
    mn.host = so.host;
    mn.clock_offset_ns = 0;  // every simulated node runs on this machine's clock
    mn.has_offset = true;
    nodes.push_back(mn);
  }
  if (procs.empty()) {
    // No rank ever wrote a flight log (they died before their first NCCL call): nothing to keep.
    err("no flight log to snapshot in " + out + "/node*/shm");
    std::error_code ec;
    fs::remove_all(dir, ec);
    return false;
  }
  json stacks = take_stacks(dir, procs);
  std::string error;
  if (!log::write_manifest(dir, job_id, t, procs, skipped, nodes, "fr-simjob", o.shape.world(),
                           &error)) {
    err("cannot write the manifest of " + dir + ": " + error);
    return false;
  }
  dump_set = dir;
  snapshot_info = {{"processes", procs.size()}, {"skipped", json::array()}, {"stacks", stacks}};
  for (const auto& s : skipped)
    snapshot_info["skipped"].push_back({{"file", s.file}, {"error", s.error}});
  return true;
}

void Job::analyze() {
  if (dump_set.empty()) return;
  if (o.daemons && stop_reason == "incident") {
    std::string text = read_small_file(dump_set + "/analysis.json");
    try {
      analysis = analyzer::Analysis::from_json(json::parse(text));
    } catch (const std::exception& e) {
      analysis_error = "cannot parse " + dump_set + "/analysis.json: " + e.what();
    }
    return;
  }
  try {
    std::string fatal;
    analyzer::Options ao;
    ao.threads = 2;
    analysis = analyzer::analyze({dump_set}, ao, &fatal);
    if (!analysis) analysis_error = fatal.empty() ? "the analyzer returned nothing" : fatal;
  } catch (const std::exception& e) {
    analysis_error = std::string("analysis failed: ") + e.what();
  }
}

// result.json: the job's shape and faults, how each rank (and daemon) ended, the dump set, and the
// analysis as the analyzer or the coordinator wrote it.
json Job::result_json() const {
  json r;
  r["completed"] = stop_reason == "completed";
  r["stop_reason"] = stop_reason;
  r["job_id"] = job_id;
  r["nodes"] = o.shape.nodes;
  r["ranks_per_node"] = o.shape.ranks_per_node;
  r["world_size"] = o.shape.world();
  r["tp"] = o.shape.tp;
  r["pp"] = o.shape.pp;
  r["dp"] = o.shape.dp();
  r["steps"] = o.shape.steps;
  r["step_ms"] = o.shape.step_ms;
  r["step_jitter"] = o.shape.jitter;
  r["seed"] = o.shape.seed;
  r["gpu_us"] = effective_gpu_us(o.shape, o.faults);
  r["pause"] = o.shape.pause_step >= 0 ? json{{"step", o.shape.pause_step},
                                              {"ms", o.shape.pause_ms},
                                              {"every", o.shape.pause_every}}
                                       : json(nullptr);
  r["graphs"] = o.graphs;
  r["elastic"] = o.shape.elastic >= 0 ? json(o.shape.elastic) : json(nullptr);
  r["agent"] = o.agent;
  r["daemons"] = o.daemons;
  json faults = json::array();
  for (const Fault& f : o.faults) {
    json jf = {{"spec", f.to_spec()},
               {"rank", f.rank},
               {"step", f.step},
               {"kind", fault_kind_name(f.kind)}};
    if (f.to_spec().find("comm=") != std::string::npos) jf["comm"] = comm_kind_name(f.comm);
    if (f.ms >= 0) jf["ms"] = f.ms;
    if (f.peer >= 0) jf["peer"] = f.peer;
    if (f.factor > 0) jf["factor"] = f.factor;
    faults.push_back(jf);
  }
  r["faults"] = faults;
  r["ranks"] = rank_entries();
  if (o.daemons) add_daemon_entries(r);
  r["dump_set"] = dump_set.empty() ? json(nullptr) : json(dump_set);
  if (!snapshot_info.is_null()) r["snapshot"] = snapshot_info;
  if (stalled_for_s > 0) r["stalled_for_s"] = stalled_for_s;
  r["duration_s"] = seconds_since(start);
  if (ranks_cpu_s >= 0) r["ranks_cpu_s"] = ranks_cpu_s;
  if (ranks_ended > ranks_started && ranks_started != Clock::time_point{})
    r["job_s"] = std::chrono::duration<double>(ranks_ended - ranks_started).count();
  if (analysis) r["analysis"] = analysis->to_json();
  if (!analysis_error.empty()) r["analysis_error"] = analysis_error;
  if (!daemon_error.empty()) r["daemon_error"] = daemon_error;
  return r;
}

// One entry per rank: how its process ended and how far it got (the progress board).
json Job::rank_entries() const {
  json rs = json::array();
  for (int i = 0; i < o.shape.world(); ++i) {
    const ChildState& k = ranks.size() > static_cast<size_t>(i) ? ranks[i] : ChildState{};
    const RankSlot& slot = board->slots[i];
    json jr = {{"rank", i}, {"node", position_of(o.shape, i).node}, {"pid", k.pid}};
    jr["exit_code"] = k.exited && WIFEXITED(k.status) ? json(WEXITSTATUS(k.status)) : json(nullptr);
    jr["signal"] = k.exited && WIFSIGNALED(k.status) ? json(WTERMSIG(k.status)) : json(nullptr);
    jr["stopped"] = k.stopped;
    jr["steps_done"] = slot.steps_done.load();
    jr["check_failures"] = slot.check_failures.load();
    static const char* phases[] = {"starting", "init", "running", "finished", "failed"};
    uint32_t ph = slot.phase.load();
    jr["phase"] = ph < 5 ? phases[ph] : "unknown";
    if (left.pid > 0 && i == o.shape.world() - 1) {
      // --elastic: the process that left; the entry above is its successor.
      jr["joined"] = true;
      jr["left"] = {{"pid", left.pid}, {"exit_code", WEXITSTATUS(left.status)}};
    }
    rs.push_back(jr);
  }
  return rs;
}

// --daemons: the daemon processes, and what the coordinator opened and found, from its files.
void Job::add_daemon_entries(json& r) const {
  json ds = json::array();
  for (const ChildState& k : daemons) {
    json jd = {{"role", k.role}, {"pid", k.pid}, {"log", k.log}, {"stopped", k.stopped}};
    jd["exit_code"] = k.exited && WIFEXITED(k.status) ? json(WEXITSTATUS(k.status)) : json(nullptr);
    jd["signal"] = k.exited && WIFSIGNALED(k.status) ? json(WTERMSIG(k.status)) : json(nullptr);
    ds.push_back(jd);
  }
  r["daemon_processes"] = ds;
  r["stall_after"] = o.stall_after;
  // What the coordinator opened and found, from its files: every incident (also those that
  // closed as transient) and its findings (slow ranks).
  json opened = json::array(), findings = json::array();
  std::error_code ec;
  fs::path job_dir = fs::path(incidents_dir()) / job_id;
  std::vector<fs::path> dirs;
  for (const auto& e : fs::directory_iterator(job_dir, ec))
    if (e.is_directory(ec) && e.path().filename().string().rfind("incident-", 0) == 0)
      dirs.push_back(e.path());
  std::sort(dirs.begin(), dirs.end());
  for (const auto& d : dirs) {
    json inc = {{"id", d.filename().string()}};
    std::ifstream f(d / "incident.json");
    json j = json::parse(f, nullptr, false);
    if (j.is_object())
      for (const char* k : {"kind", "state", "reason", "verdict"})
        if (j.contains(k)) inc[k] = j[k];
    opened.push_back(inc);
  }
  std::ifstream ff(job_dir / "findings.json");
  json fj = json::parse(ff, nullptr, false);
  if (fj.is_object() && fj.contains("findings") && fj["findings"].is_array())
    findings = fj["findings"];
  r["incidents_opened"] = opened;
  r["findings"] = findings;
}

// result.json written, and the lines that tell the user how the job ended, where its dump set is,
// and the verdict.
void Job::report() {
  std::string error;
  try {
    json r = result_json();
    if (!fr::files::write_atomic(out + "/result.json", r.dump(2) + "\n", &error)) err(error);
  } catch (const std::exception& e) {
    err(std::string("cannot write result.json: ") + e.what());
  }

  std::string summary = stop_reason;
  if (stop_reason == "stalled" || stop_reason == "incident") {
    char b[64];
    std::snprintf(b, sizeof b, " (no progress for %.1f s)", stalled_for_s);
    summary += b;
  }
  say("job " + job_id + " " + summary + " after " +
      std::to_string(seconds_since(start)).substr(0, 5) + " s");
  if (!dump_set.empty()) {
    say("dump set: " + dump_set);
    if (!o.quiet)
      std::printf("last op per rank and communicator (op #seq, GPU state):\n%s",
                  dump_summary(dump_set, 64).c_str());
  }
  if (analysis)
    say("verdict: " + std::string(analyzer::verdict_name(analysis->verdict.kind)) + ": " +
        analysis->verdict.summary);
  if (!analysis_error.empty()) err("analysis: " + analysis_error);
  say("result: " + out + "/result.json");
}

}  // namespace fr::simjob
