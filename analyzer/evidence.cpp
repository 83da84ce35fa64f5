// The JSON evidence of the analysis (fr-analysis/1): how an op, a communicator and a stall are
// written, each member's state and last records, the verdict's timeline rows, and which findings
// are consequences of the verdict. Invariant 4 of DESIGN.md: every verdict shows its evidence.
#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <set>

#include "common/parallel.h"
#include "passes.h"

namespace fr::analyzer {

using nlohmann::json;

std::string comm_id_hex(uint64_t id) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%016" PRIx64, id);
  return buf;
}

std::string comm_text(const Comm& c) {
  return c.name.empty() ? comm_id_hex(c.id) : c.name + " (" + comm_id_hex(c.id) + ")";
}

bool comm_matches(const Comm& c, const std::string& filter) {
  if (filter.empty()) return true;
  if (c.name == filter) return true;
  std::string f = filter;
  for (auto& ch : f) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (f.rfind("0x", 0) != 0) f = "0x" + f;
  // Ids are matched by prefix of the printed form ("0x5eed" matches 0x5eed00000000a11c).
  return comm_id_hex(c.id).rfind(f, 0) == 0;
}

json op_json(const Op& o, int64_t clock_offset_ns) {
  json j;
  j["seq"] = o.seq;
  j["kind"] = fr::log::op_is_collective(o.op) ? "coll" : fr::log::op_is_p2p(o.op) ? "p2p" : "api";
  j["op"] = fr::log::op_name(o.op);
  if (fr::log::op_is_collective(o.op) || fr::log::op_is_p2p(o.op)) {
    j["dtype"] = fr::log::dtype_name(o.dtype);
    j["count"] = o.count;
    if (has_redop(o.op)) j["redop"] = fr::log::redop_name(o.redop);
    if (is_rooted(o.op)) j["root"] = o.peer;
    if (fr::log::op_is_p2p(o.op)) j["peer"] = o.peer;
  }
  j["group_id"] = o.group_id;
  std::string state = fr::log::gpu_state_name(o.gpu_state);
  if (o.flags & FR_REC_F_NEVER_LAUNCHED)
    state = "never_launched";
  else if (o.flags & FR_REC_F_IN_CALL)
    state = "in_call";
  else if (o.flags & kOpRaised)
    state = "raised";  // finished without completing (torch_infer.cpp)
  j["state"] = state;
  j["call_ns"] = static_cast<int64_t>(o.call_ns) + clock_offset_ns;
  j["duration_ns"] = o.duration_ns;
  if (o.result != 0 && o.result != FR_RESULT_PENDING) j["result"] = o.result;
  return j;
}

// The replay a graph op ran in, for verdicts and evidence.
json replay_json(const ReplayTag& t, const Op& o) {
  return json{{"graph", t.graph},
              {"replay", t.replay},
              {"captured_op", t.pos},
              {"captured_ops", t.ops},
              {"op", fr::log::op_name(o.op)},
              {"seq", o.seq},
              {"count", o.count},
              {"dtype", fr::log::dtype_name(o.dtype)}};
}

std::string replay_text(const ReplayTag& t) {
  return " (replay " + std::to_string(t.replay) + " of CUDA graph " + std::to_string(t.graph) +
         ", captured op " + std::to_string(t.pos) + " of " + std::to_string(t.ops) + ")";
}

CommRef comm_ref(const Comm& c) { return {comm_id_hex(c.id), c.name, c.size}; }

Communicator communicator_of(const Model& m, const Comm& c) {
  Communicator out;
  out.comm = comm_ref(c);
  out.origin = fr::log::origin_name(c.origin);
  if (c.parent) out.parent = comm_id_hex(c.parent);
  for (const auto& mem : c.members)
    out.members.emplace_back(mem.rank_in_comm, m.procs[mem.proc].rank);
  return out;
}

namespace {

// One member's row: who it is, its communicator state, and its frontier's records.
json member_evidence(const Model& m, const CommMember& mem, const Frontier& f,
                     const std::string& state) {
  const Proc& p = m.procs[mem.proc];
  json e;
  e["rank"] = p.rank;
  e["rank_in_comm"] = mem.rank_in_comm;
  e["host"] = p.host;
  e["alive"] = p.alive;
  auto record = [&](const Op* o, uint64_t seq) -> json {
    if (o) {
      json j = op_json(*o, p.clock_offset_ns);
      if (const ReplayTag* t = replay_of(p, o)) j["graph_replay"] = replay_json(*t, *o);
      return j;
    }
    if (seq == 0) return nullptr;
    return json{{"seq", seq}, {"op", "unknown"}, {"note", "record no longer in the ring"}};
  };
  // Revoke, suspend, resume and abort change what a member can still do: shown with its state.
  const ProcComm& pc = p.comms[mem.pc];
  if (pc.has_entry && pc.state != FR_COMM_LIVE)
    e["comm_state"] = fr::log::comm_state_name(pc.state);
  for (uint32_t k = pc.ops_end; k-- > pc.ops_begin;) {
    const uint16_t op = p.ops[k].op;
    if (op == FR_OP_COMM_REVOKE || op == FR_OP_COMM_SUSPEND || op == FR_OP_COMM_RESUME ||
        op == FR_OP_COMM_ABORT) {
      e["last_lifecycle_call"] = op_json(p.ops[k], p.clock_offset_ns);
      break;
    }
  }
  e["last_enqueued"] = record(f.last_enq, f.enq);
  e["last_started"] = record(f.last_started, f.started);
  e["last_completed"] = record(f.last_completed, f.completed);
  e["state"] = state;
  return e;
}

// What a member did with the stall's op: in_call, not_entered, completed, started, enqueued,
// entered (GPU untracked) or dead, with ",dead" when its writer was gone at the dump. `blocked`:
// the stall's blocked ranks.
std::string member_state(const Stall& s, const std::set<int>& blocked, const Proc& p,
                         const Frontier& f) {
  std::string state;
  if (s.host_call)
    state = blocked.count(p.rank) ? "in_call" : "not_entered";
  else if (!p.alive && p.snapshot && s.kind == VerdictKind::kRankDead)
    state = "dead";
  else if (f.enq < s.seq && !s.p2p)
    state = "not_entered";
  // Point-to-point ops no entry records (gloo, analyze_unrecorded_p2p): the member that issued
  // the unmatched one is in it, the other never issued its side.
  else if (s.p2p && !f.last_enq && f.enq == 0 && p.source_kind == "torch")
    state = blocked.count(p.rank) ? "entered" : "not_entered";
  else if (f.completed >= s.seq && !s.p2p)
    state = "completed";
  else if (!f.tracked)
    state = "entered";
  else if (s.p2p)
    state = f.completed >= f.enq ? "completed" : f.started >= f.enq ? "started" : "enqueued";
  else if (f.started >= s.seq)
    state = "started";
  else
    state = "enqueued";
  if (!p.alive && p.snapshot) state += ",dead";
  if (p.stale) state += ",stale";
  return state;
}

// Members from which the evidence rows are made on two threads.
constexpr size_t kRowsPerThread = 2048;

// Per member of the stall's communicator (filtered by --rank), and the members without a dump.
json evidence_rows(const AnalysisState& state, const Stall& s) {
  const Model& m = state.model;
  const Comm& c = m.comms[s.comm];
  const auto& frontiers = s.p2p ? state.p2p_frontiers[s.comm] : state.coll_frontiers[s.comm];
  const std::set<int> culprits(s.culprits.begin(), s.culprits.end());
  const std::set<int> blocked(s.blocked.begin(), s.blocked.end());
  auto add_rows = [&](size_t begin, size_t end, json* rows) {
    for (size_t i = begin; i < end; ++i) {
      const Proc& p = m.procs[c.members[i].proc];
      if (!state.rank_filter.empty() && !state.rank_filter.count(p.rank)) continue;
      // Point-to-point involves few members of a large communicator: show those.
      if (s.p2p && !culprits.count(p.rank) && !blocked.count(p.rank)) continue;
      std::string st = member_state(s, blocked, p, frontiers[i]);
      if (st == "completed" && !s.p2p && !s.host_call) {
        // Finished, yet a member never came: it raised (torch_infer.cpp).
        const Op* o = find_seq(p, p.comms[c.members[i].pc], s.seq, Family::kCollective);
        if (o && (o->flags & kOpRaised)) st = "raised";
      }
      json e = member_evidence(m, c.members[i], frontiers[i], st);
      if (culprits.count(p.rank)) e["culprit"] = true;
      rows->push_back(std::move(e));
    }
  };
  const size_t n = std::min(c.members.size(), frontiers.size());
  json rows = json::array();
  if (n < kRowsPerThread * 2) {
    add_rows(0, n, &rows);
  } else {
    // A large communicator's rows in two halves, on two threads.
    json upper = json::array();
    fr::parallel::for_each_index(2, 2, [&](size_t half) {
      if (half == 0)
        add_rows(0, n / 2, &rows);
      else
        add_rows(n / 2, n, &upper);
    });
    for (auto& e : upper) rows.push_back(std::move(e));
  }
  if (s.extra.contains("missing_members"))
    for (const auto& x : s.extra["missing_members"])
      if (state.rank_filter.empty() ||
          (x["global_rank"].is_number() && state.rank_filter.count(x["global_rank"].get<int>())))
        rows.push_back({{"rank", x["global_rank"]},
                        {"rank_in_comm", x["rank_in_comm"]},
                        {"state", "missing"}});
  return rows;
}

}  // namespace

Finding finding_of(const AnalysisState& state, const Stall& s) {
  Finding f;
  f.kind = s.kind;
  f.summary = s.summary;
  if (s.comm >= 0) {
    f.comm = comm_ref(state.model.comms[s.comm]);
    f.seq = s.seq;
    f.seq_kind = s.host_call ? "api" : s.p2p ? "p2p" : "coll";
    f.op = s.op;
  }
  f.culprit_ranks = s.culprits;
  f.culprit_pids = s.culprit_pids;
  f.blocked_ranks = s.blocked;
  f.mismatch = s.mismatch;
  f.details = s.extra;
  // The NIXL kinds bring their rows (nixl.cpp): the posting and the remote processes.
  f.evidence = s.comm >= 0 ? evidence_rows(state, s) : s.extra.value("evidence", json::array());
  f.details.erase("evidence");
  return f;
}

// The verdict's timeline: each member's last records on the verdict's communicator (what the
// incident page draws), with the time its log was read, so a page needs the JSON alone. Culprits
// first; a few hundred rows are more than a person reads.
void add_recent_ops(const Model& m, Finding* verdict) {
  constexpr size_t kOpsPerRank = 8, kMaxRows = 256;
  if (!verdict->comm || !verdict->evidence.is_array()) return;
  const std::string& id = verdict->comm->id;
  const Comm* comm = nullptr;
  for (const auto& c : m.comms)
    if (comm_id_hex(c.id) == id) comm = &c;
  if (!comm) return;
  std::map<int, const CommMember*> by_rank;
  for (const auto& mem : comm->members) by_rank[m.procs[mem.proc].rank] = &mem;
  json& ev = verdict->evidence;
  std::vector<size_t> order(ev.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_partition(order.begin(), order.end(),
                        [&](size_t i) { return ev[i].value("culprit", false); });
  if (order.size() > kMaxRows) order.resize(kMaxRows);
  for (size_t i : order) {
    json& e = ev[i];
    if (!e.contains("rank") || !e["rank"].is_number_integer()) continue;
    auto it = by_rank.find(e["rank"].get<int>());
    if (it == by_rank.end()) continue;
    const Proc& p = m.procs[it->second->proc];
    const ProcComm& pc = p.comms[it->second->pc];
    json ops = json::array();
    const uint32_t first = pc.ops_end - std::min<uint32_t>(pc.ops_end - pc.ops_begin, kOpsPerRank);
    for (uint32_t k = first; k < pc.ops_end; ++k)
      ops.push_back(op_json(p.ops[k], p.clock_offset_ns));
    e["recent_ops"] = std::move(ops);
    const uint64_t read_ns = p.snapshot_ns ? p.snapshot_ns : p.heartbeat_ns;
    if (read_ns) e["read_ns"] = static_cast<int64_t>(read_ns) + p.clock_offset_ns;
  }
}

// A finding is a consequence of the verdict when every rank it blames is one the verdict already
// accounts for: a culprit of the verdict, or a member blocked in the verdict's op (a rank waiting
// there can do nothing elsewhere). Stragglers (skew) stand on their own. Marked with
// "consequence": true and "consequence_of": the verdict's kind. Findings only ever findings
// (stragglers, inconsistencies) stand on their own.
void mark_consequences(const Finding& verdict, std::vector<Finding>* findings) {
  if (verdict.kind == VerdictKind::kNoHang) return;
  if (verdict.kind == VerdictKind::kIncomplete && verdict.culprit_ranks.empty()) return;
  std::set<int> held(verdict.culprit_ranks.begin(), verdict.culprit_ranks.end());
  if (verdict.evidence.is_array())
    for (const auto& e : verdict.evidence) {
      const std::string st = e.value("state", std::string());
      if (e.contains("rank") && e["rank"].is_number_integer() && st.rfind("completed", 0) != 0 &&
          st != "missing")
        held.insert(e["rank"].get<int>());
    }
  for (auto& f : *findings) {
    if (finding_only(f.kind)) continue;
    // An undecided finding (incomplete, nobody blamed: a group no dump lists, say) follows from
    // the verdict when every rank it shows waiting is held by it.
    std::vector<int> ranks = f.culprit_ranks;
    if (ranks.empty() && f.kind == VerdictKind::kIncomplete && f.evidence.is_array())
      for (const auto& e : f.evidence) {
        const std::string st = e.value("state", std::string());
        if (e.contains("rank") && e["rank"].is_number_integer() && st.rfind("completed", 0) != 0 &&
            st != "missing" && st.rfind("not_entered", 0) != 0)
          ranks.push_back(e["rank"].get<int>());
      }
    bool all = !ranks.empty();
    for (int r : ranks) all = all && held.count(r);
    if (all) f.consequence = true, f.consequence_of = verdict.kind;
  }
}

}  // namespace fr::analyzer
