// NIXL transfers (one-sided, on no communicator): the pass that turns a transfer still in flight
// past Options::nixl_stall_ns when its log was read into a nixl_stalled stall, and one that failed
// because its remote agent went away (NIXL_ERR_REMOTE_DISCONNECT) into nixl_disconnected.
// Transfers are grouped by kind and remote agent: many transfers in flight to one stopped peer
// are one stall, with their count. The remote agent's process is found by name among the dump
// set's processes (the local agent names their own transfers carry); failing that, when exactly
// one other process of the set used NIXL without its log naming its agent (a passive target makes
// no transfer of its own), it is taken as the remote, and the verdict says so. The posting
// processes wait on the remote (AnalysisState::blocked), so the ranking lets a collective stall
// explain a transfer stalled to one of its members, and a stalled transfer explain a rank that
// never came to a collective.
#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <ctime>
#include <map>
#include <set>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "passes.h"

namespace fr::analyzer {
namespace {

using nlohmann::json;

constexpr size_t kMaxNixlStalls = 256;  // remote agents with a stall, per kind
constexpr size_t kTransfersShown = 16;  // per stall, in its JSON
constexpr size_t kRowsShown = 64;       // posting processes per stall, in its evidence

// The time a log was read: the snapshot's, or now for a live log.
int64_t read_ns(const Proc& p) {
  if (p.snapshot_ns) return static_cast<int64_t>(p.snapshot_ns);
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return int64_t(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

std::string seconds_text(int64_t ns) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f s", double(ns) / 1e9);
  return b;
}

std::string bytes_text(const Xfer& x) {
  if (x.flags & FR_XFER_F_BYTES_UNKNOWN) return "an unknown number of bytes";
  const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = double(x.bytes);
  int u = 0;
  while (v >= 1024 && u < 6) v /= 1024, ++u;
  char b[48];
  if (u == 0)
    std::snprintf(b, sizeof b, "%" PRIu64 " bytes", x.bytes);
  else
    std::snprintf(b, sizeof b, "%.1f %s", v, units[u]);
  return b;
}

// "rank 3 (pid 4242 on node-a)", or "pid 4242 on node-a" for a process without a global rank.
std::string who(const Proc& p) {
  std::string where =
      "pid " + std::to_string(p.pid) + " on " + (p.host.empty() ? "?" : nixl_text(p.host));
  return p.rank >= 0 ? "rank " + std::to_string(p.rank) + " (" + where + ")" : where;
}

// Local agent names a process's own transfers carry, in table order, each once: linear in the
// transfers (a table of 2^20 entries, each naming another agent, is one pass).
std::vector<std::string> agents_of(const Proc& p) {
  std::vector<std::string> out;
  std::unordered_set<std::string_view> seen;
  for (const auto& x : p.xfers)
    if (!x.local_agent.empty() && seen.insert(x.local_agent).second) out.push_back(x.local_agent);
  return out;
}

constexpr size_t kAgentsShown = 8;  // local agent names per process, in its evidence row

bool uses_nixl(const Proc& p) {
  return (p.flags & FR_LOG_F_NIXL) || !p.nixl_calls.empty() || !p.xfers.empty();
}

// One transfer as the JSON shows it.
json xfer_json(const Proc& p, const Xfer& x, int64_t age_ns) {
  json j = {{"id", x.id},
            {"local_agent", nixl_text(x.local_agent)},
            {"remote_agent", nixl_text(x.remote_agent)},
            {"op", fr::log::xfer_op_name(x.op)},
            {"bytes", x.bytes},
            {"bytes_known", (x.flags & FR_XFER_F_BYTES_UNKNOWN) == 0},
            {"descs", x.descs},
            {"backend", nixl_text(x.backend)},
            {"state", fr::log::xfer_state_name(x.state)},
            {"status", x.status},
            {"status_name", fr::log::nixl_status_name(x.status)},
            {"posts", x.posts},
            {"post_ns", aligned(p, x.post_ns)},
            {"age_ns", age_ns},
            {"status_calls", x.status_calls},
            {"prepped", (x.flags & FR_XFER_F_PREPPED) != 0}};
  j["last_status_ns"] = x.status_ns ? json(aligned(p, x.status_ns)) : json(nullptr);
  if (x.flags & FR_XFER_F_NOTIF) {
    j["notif"] = nixl_text(x.notif);
    j["notif_cut"] = (x.flags & FR_XFER_F_NOTIF_CUT) != 0;
  }
  if (x.gpu_posted || x.gpu_done) j["gpu"] = {{"posted", x.gpu_posted}, {"done", x.gpu_done}};
  return j;
}

// A process as a row of the evidence: who, alive or dead, how long its log had been quiet at
// the read, its last NIXL call and its stack.
json proc_row(const Proc& p, const std::vector<std::string>& names, const char* role,
              const std::string& state) {
  const int64_t read = read_ns(p);
  json e = {{"role", role},     {"rank", p.rank >= 0 ? json(p.rank) : json(nullptr)},
            {"pid", p.pid},     {"host", p.host},
            {"alive", p.alive}, {"state", state}};
  json agents = json::array();
  for (const auto& a : names)
    if (agents.size() < kAgentsShown) agents.push_back(nixl_text(a));
  e["agents"] = agents;
  if (p.heartbeat_ns && read >= static_cast<int64_t>(p.heartbeat_ns))
    e["silent_ns"] = read - static_cast<int64_t>(p.heartbeat_ns);
  if (!p.nixl_calls.empty()) {
    const NixlCall& c = p.nixl_calls.back();
    e["last_nixl_call"] = {{"op", fr::log::op_name(c.op)},
                           {"call_ns", aligned(p, c.call_ns)},
                           {"result", c.result},
                           {"result_name", fr::log::nixl_status_name(c.result)}};
  }
  e["file"] = p.file;
  json stack = main_stack(p);
  if (!stack.is_null())
    e["stack"] = std::move(stack);
  else if (p.has_stacks && !p.stacks.error.empty())
    e["stack_error"] = p.stacks.error;
  return e;
}

// What a remote process was doing, in a few words for the summary.
std::string remote_state_text(const Proc& p, int64_t threshold_ns) {
  if (!p.alive) return "dead (its writer was gone at the dump)";
  const int64_t read = read_ns(p);
  const int64_t silent = p.heartbeat_ns && read >= static_cast<int64_t>(p.heartbeat_ns)
                             ? read - static_cast<int64_t>(p.heartbeat_ns)
                             : -1;
  if (silent >= threshold_ns)
    return "alive but silent: its log has had no record for " + seconds_text(silent) +
           " (stopped or wedged)";
  return silent >= 0 ? "alive, its last record " + seconds_text(silent) + " before the dump"
                     : "alive";
}

struct Hit {
  const Proc* p;
  const Xfer* x;
  int64_t age_ns;
};

struct Group {
  VerdictKind kind;
  std::string remote;  // raw bytes
  std::vector<Hit> hits;
};

// The stall kind of one transfer, or nullopt.
std::optional<VerdictKind> classify(const Proc& p, const Xfer& x, int64_t threshold_ns,
                                    int64_t* age_ns) {
  const int64_t read = read_ns(p);
  *age_ns = x.post_ns && read >= static_cast<int64_t>(x.post_ns)
                ? read - static_cast<int64_t>(x.post_ns)
                : 0;
  if (x.status == FR_NIXL_ERR_REMOTE_DISCONNECT && x.state != FR_XFER_DONE &&
      x.state != FR_XFER_RELEASED && x.posts > 0)
    return VerdictKind::kNixlDisconnected;
  if (!p.alive) return std::nullopt;  // a dead process waits for nothing
  const bool in_flight = (x.state == FR_XFER_POSTED || x.state == FR_XFER_IN_PROGRESS) &&
                         x.done_ns == 0 && x.posts > 0 && x.post_ns > 0;
  if (in_flight && *age_ns >= threshold_ns) return VerdictKind::kNixlStalled;
  return std::nullopt;
}

// Where the remote agent lives: the processes whose own transfers carry its name; else, when
// exactly one process outside `posters` used NIXL without naming its agent, that one.
struct Remote {
  std::vector<const Proc*> procs;
  std::string found_by;  // "agent_name", "only_unnamed_nixl_process" or "" (not found)
};

class AgentIndex {
 public:
  explicit AgentIndex(const std::vector<const Proc*>& all) {
    for (const Proc* p : all) {
      std::vector<std::string> names = agents_of(*p);
      for (const auto& n : names) by_name_[n].push_back(p);
      if (names.empty() && uses_nixl(*p)) unnamed_.push_back(p);
      if (names.size() > kAgentsShown) names.resize(kAgentsShown);
      shown_[p] = std::move(names);
    }
  }
  // The first local agent names of a process, as its evidence row shows them (computed once
  // here: a stall's rows must not walk each poster's whole table again).
  const std::vector<std::string>& shown(const Proc* p) const { return shown_.at(p); }
  Remote find(const std::string& name, const std::set<const Proc*>& posters) const {
    auto it = by_name_.find(name);
    if (it != by_name_.end()) return {it->second, "agent_name"};
    std::vector<const Proc*> others;
    for (const Proc* p : unnamed_)
      if (!posters.count(p)) others.push_back(p);
    if (others.size() == 1) return {others, "only_unnamed_nixl_process"};
    return {{}, ""};
  }

 private:
  std::unordered_map<std::string, std::vector<const Proc*>> by_name_;
  std::unordered_map<const Proc*, std::vector<std::string>> shown_;
  std::vector<const Proc*> unnamed_;
};

std::string summary_of(const Group& g, const Hit& rep, const Remote& r, size_t posters,
                       int64_t threshold_ns) {
  const Xfer& x = *rep.x;
  const std::string agent = "NIXL agent '" + nixl_text(g.remote) + "'";
  const bool read = x.op == FR_XFER_OP_READ;
  std::string s = who(*rep.p) + " " + fr::log::xfer_op_name(x.op) + " of " + bytes_text(x) +
                  (read ? " from " : " to ") + agent;
  if (g.kind == VerdictKind::kNixlDisconnected)
    s += std::string(" failed: ") + fr::log::nixl_status_name(x.status) + " (the remote went away)";
  else
    s += " in flight for " + seconds_text(rep.age_ns) + " (" + fr::log::xfer_state_name(x.state) +
         ", last status " + fr::log::nixl_status_name(x.status) + ")";
  if (g.hits.size() > 1)
    s += "; " + std::to_string(g.hits.size()) + " transfers to it " +
         (g.kind == VerdictKind::kNixlDisconnected ? "failed" : "stalled") +
         (posters > 1 ? ", from " + std::to_string(posters) + " processes" : "");
  if (r.procs.empty()) return s + "; no process in the dump set hosts " + agent;
  const Proc& q = *r.procs.front();
  if (r.found_by == "only_unnamed_nixl_process")
    return s + "; the agent is probably " + who(q) +
           " (the only other NIXL process in the set; its log does not name its agent), " +
           remote_state_text(q, threshold_ns);
  s += "; the agent is " + who(q) + ", " + remote_state_text(q, threshold_ns);
  if (r.procs.size() > 1)
    s += " (and " + std::to_string(r.procs.size() - 1) + " more processes of that name)";
  return s;
}

Stall stall_of(AnalysisState& state, const AgentIndex& index, Group& g) {
  // The oldest transfer stands for the group; ties by the order the processes were read.
  std::stable_sort(g.hits.begin(), g.hits.end(),
                   [](const Hit& a, const Hit& b) { return a.age_ns > b.age_ns; });
  const Hit& rep = g.hits.front();
  std::vector<const Proc*> posters;  // in the order of their oldest transfer, each once
  std::set<const Proc*> poster_set;
  for (const Hit& h : g.hits)
    if (poster_set.insert(h.p).second) posters.push_back(h.p);
  const Remote r = index.find(g.remote, poster_set);
  const int64_t threshold = state.opts.nixl_stall_ns;

  Stall s;
  s.kind = g.kind;
  s.op = fr::log::xfer_op_name(rep.x->op);
  s.fraction = 1.0;  // a remote that waits elsewhere is explained by that wait (ranking.cpp)
  s.t_start = INT64_MAX;
  for (const Hit& h : g.hits) s.t_start = std::min(s.t_start, aligned(*h.p, h.x->post_ns));
  json evidence = json::array();
  const std::string waiting = g.kind == VerdictKind::kNixlDisconnected ? "failed" : "waiting";
  for (const Proc* p : posters) {
    if (p->rank >= 0) s.blocked.push_back(p->rank);
    if (evidence.size() < kRowsShown)
      evidence.push_back(
          proc_row(*p, index.shown(p), "posting", waiting + (p->alive ? "" : ",dead")));
  }
  std::sort(s.blocked.begin(), s.blocked.end());
  s.blocked.erase(std::unique(s.blocked.begin(), s.blocked.end()), s.blocked.end());
  for (const Proc* q : r.procs) {
    if (q->rank >= 0) s.culprits.push_back(q->rank);
    s.culprit_pids.push_back(q->pid);
    json row = proc_row(*q, index.shown(q), "remote", q->alive ? "alive" : "dead");
    row["culprit"] = true;
    row["found_by"] = r.found_by;
    evidence.push_back(std::move(row));
  }
  std::sort(s.culprits.begin(), s.culprits.end());
  s.culprits.erase(std::unique(s.culprits.begin(), s.culprits.end()), s.culprits.end());

  json nixl = xfer_json(*rep.p, *rep.x, rep.age_ns);
  nixl["threshold_ns"] = threshold;
  nixl["transfers_to_remote"] = g.hits.size();
  nixl["others_to_remote"] = g.hits.size() - 1;
  nixl["posting_processes"] = posters.size();
  nixl["poster"] = {{"rank", rep.p->rank >= 0 ? json(rep.p->rank) : json(nullptr)},
                    {"pid", rep.p->pid},
                    {"host", rep.p->host},
                    {"alive", rep.p->alive}};
  json remote = {{"found", !r.procs.empty()},
                 {"found_by", r.found_by.empty() ? json(nullptr) : json(r.found_by)}};
  if (!r.procs.empty()) {
    const Proc& q = *r.procs.front();
    remote["rank"] = q.rank >= 0 ? json(q.rank) : json(nullptr);
    remote["pid"] = q.pid;
    remote["host"] = q.host;
    remote["alive"] = q.alive;
    remote["state"] = remote_state_text(q, threshold);
  } else {
    remote["note"] = "no process in the dump set hosts this agent";
  }
  nixl["remote"] = std::move(remote);
  json transfers = json::array();
  for (size_t i = 0; i < g.hits.size() && i < kTransfersShown; ++i) {
    json t = xfer_json(*g.hits[i].p, *g.hits[i].x, g.hits[i].age_ns);
    t["pid"] = g.hits[i].p->pid;
    t["rank"] = g.hits[i].p->rank >= 0 ? json(g.hits[i].p->rank) : json(nullptr);
    transfers.push_back(std::move(t));
  }
  nixl["transfers"] = std::move(transfers);
  s.summary = summary_of(g, rep, r, posters.size(), threshold);
  s.extra["nixl"] = std::move(nixl);
  s.extra["evidence"] = std::move(evidence);
  return s;
}

}  // namespace

std::string nixl_text(const std::string& raw) {
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(raw.size());
  for (unsigned char c : raw) {
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out += char(c);
      continue;
    }
    out += "\\x";
    out += kHex[c >> 4];
    out += kHex[c & 0xf];
  }
  return out;
}

void analyze_nixl(AnalysisState& state) {
  const Model& m = state.model;
  std::vector<const Proc*> all;
  for (const auto& p : m.procs) all.push_back(&p);
  for (const auto& p : m.rankless) all.push_back(&p);
  std::map<std::pair<VerdictKind, std::string>, Group> groups;
  for (const Proc* p : all)
    for (const Xfer& x : p->xfers) {
      int64_t age = 0;
      const std::optional<VerdictKind> kind = classify(*p, x, state.opts.nixl_stall_ns, &age);
      if (!kind) continue;
      auto key = std::make_pair(*kind, x.remote_agent);
      auto it = groups.find(key);
      if (it == groups.end()) {
        if (groups.size() >= 2 * kMaxNixlStalls)
          continue;  // bounded: a hostile table of distinct names
        it = groups.emplace(key, Group{*kind, x.remote_agent, {}}).first;
      }
      it->second.hits.push_back({p, &x, age});
    }
  if (groups.empty()) return;
  const AgentIndex index(all);
  for (auto& [key, g] : groups) {
    Stall s = stall_of(state, index, g);
    // The posting processes wait on the remote: where they are blocked, for the ranking.
    if (s.kind == VerdictKind::kNixlStalled)
      for (int r : s.blocked) state.blocked[r].push_back({kNixlWait, s.t_start});
    state.stalls.push_back(std::move(s));
  }
}

}  // namespace fr::analyzer
