// The cross-rank analysis: lines up every communicator's members by sequence number, finds each
// one's frontier, and turns what does not line up into stalls (mismatch, not_entered,
// p2p_unmatched, stuck_in_collective, incomplete). The stall that explains the others becomes the
// verdict, the rest findings; dead writers and lost nodes override it. Culprits always come from
// the whole group (the minority, the members that never came), never from read order.
#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <map>
#include <numeric>
#include <set>
#include <tuple>
#include <unordered_map>

#include "analyzer/html.h"
#include "analyzer/model.h"

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

namespace {

bool is_rooted(uint16_t op) {
  return op == FR_OP_BROADCAST || op == FR_OP_BCAST || op == FR_OP_REDUCE || op == FR_OP_GATHER ||
         op == FR_OP_SCATTER;
}
bool has_redop(uint16_t op) {
  return op == FR_OP_ALLREDUCE || op == FR_OP_REDUCE || op == FR_OP_REDUCESCATTER;
}
bool counts(const Op& o) { return !(o.flags & (FR_REC_F_CAPTURED | FR_REC_F_NEVER_LAUNCHED)); }

// Compact ranges: "0-3,7,9-10" (the same text as the incident page's).
std::string ranks_text(const std::vector<int>& ranks) { return rank_list_text(ranks); }

std::string plural(size_t n, const char* one, const char* many) { return n == 1 ? one : many; }

}  // namespace

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
  if (o.flags & FR_REC_F_NEVER_LAUNCHED) state = "never_launched";
  else if (o.flags & FR_REC_F_IN_CALL) state = "in_call";
  j["state"] = state;
  j["call_ns"] = static_cast<int64_t>(o.call_ns) + clock_offset_ns;
  j["duration_ns"] = o.duration_ns;
  if (o.result != 0 && o.result != FR_RESULT_PENDING) j["result"] = o.result;
  return j;
}

namespace {

// One member's frontier on one communicator, for one kind (collective or point-to-point).
struct Frontier {
  uint64_t enq = 0, started = 0, completed = 0;
  const Op* last_enq = nullptr;
  const Op* last_started = nullptr;
  const Op* last_completed = nullptr;
  bool tracked = true;
};

// More ranks than any job has: sizes beyond this come from damaged input.
constexpr int kMaxRanks = 1 << 20;

enum Prio { kMismatch = 0, kNotEntered = 1, kP2p = 2, kStuck = 3, kIncomplete = 4 };

struct Stall {
  std::string kind;
  int prio = kStuck;
  int comm = -1;
  uint64_t seq = 0;
  bool p2p = false;
  bool api = false;                 // a blocking host call (communicator creation), not a seq
  std::string op;
  std::vector<int> culprits;        // global ranks
  std::vector<int> blocked;         // global ranks waiting in it
  std::string summary;
  json mismatch;                    // kind == mismatch
  json extra = json::object();      // group, missing members
  int64_t t_start = INT64_MAX;      // earliest aligned call time of the stalled op
  std::vector<int64_t> culprit_own_call;  // stuck: each culprit's own call time of the op
  int tier = 2;
  double fraction = 1.0;
};

// The analysis state shared by the passes.
struct Ctx {
  const Model& m;
  const Options& opts;
  std::vector<Stall> stalls;
  // Per global rank: where it waits (comm index, since aligned time).
  std::map<int, std::vector<std::pair<int, int64_t>>> blocked;
  json communicators = json::array();
  std::set<int> rank_filter;
  std::set<int> job_missing;  // global ranks expected but without a dump
};

int64_t aligned(const Proc& p, uint64_t t) { return static_cast<int64_t>(t) + p.clock_offset_ns; }

Frontier frontier(const Proc& p, const ProcComm& pc, bool p2p) {
  Frontier f;
  for (uint32_t i = pc.ops_begin; i < pc.ops_end; ++i) {
    const Op& o = p.ops[i];
    if (!counts(o)) continue;
    if (p2p ? !fr::log::op_is_p2p(o.op) : !fr::log::op_is_collective(o.op)) continue;
    if (o.seq >= f.enq) f.enq = o.seq, f.last_enq = &o;
    if (o.gpu_state >= FR_GPU_STARTED && o.seq >= f.started) f.started = o.seq, f.last_started = &o;
    if (o.gpu_state == FR_GPU_COMPLETED && o.seq >= f.completed) f.completed = o.seq, f.last_completed = &o;
  }
  uint64_t counter = p2p ? pc.p2p_seq : pc.coll_seq;
  f.tracked = p.gpu_tracked;
  if (f.last_enq && (f.last_enq->flags & FR_REC_F_GPU_UNTRACKED)) f.tracked = false;
  if (f.last_enq && f.last_enq->gpu_state == FR_GPU_NONE && !(f.last_enq->flags & FR_REC_F_IN_CALL))
    f.tracked = false;
  if (counter > f.enq) {
    // The newest op on this communicator fell out of the ring (or was torn): the counters still
    // say how far it went, and the GPU counters whether everything handed over has finished.
    f.enq = counter;
    f.last_enq = nullptr;
    if (pc.has_entry && pc.op_index > 0 && pc.gpu_completed >= pc.op_index) {
      f.completed = f.started = f.enq;
    } else {
      // Something is still running, but which seq the GPU counters stand at cannot be told
      // without the records: treat this member's GPU state as unknown.
      f.tracked = false;
    }
  }
  if (f.started < f.completed) f.started = f.completed;
  return f;
}

const Op* find_seq(const Proc& p, const ProcComm& pc, uint64_t seq, bool p2p) {
  // Records are in id order, so seqs ascend within a kind: binary search would need a kind
  // filter; the ops of one communicator are few enough in practice to scan from the end.
  for (uint32_t i = pc.ops_end; i-- > pc.ops_begin;) {
    const Op& o = p.ops[i];
    if (!counts(o)) continue;
    if (p2p ? !fr::log::op_is_p2p(o.op) : !fr::log::op_is_collective(o.op)) continue;
    if (o.seq == seq) return &o;
    if (o.seq < seq) break;
  }
  return nullptr;
}

// Missing members of a communicator (no dump): rank in comm, and the global rank when it can be
// told (the members found all have rank in comm == global rank, as in a world communicator).
struct Missing {
  int rank_in_comm;
  int global;  // -1 when unknown
};

// When every member found sits at the same offset (global = rank in comm + d, as in a world
// communicator or a block of consecutive ranks) and the job lacks exactly those global ranks,
// the missing members are those ranks.
std::vector<Missing> missing_members(const Model& m, const Comm& c, const std::set<int>& job_missing) {
  std::vector<Missing> out;
  // A size far beyond the job (a corrupt or hostile entry) is not worth listing rank by rank.
  const int plausible = std::max({1024, 2 * static_cast<int>(m.procs.size()), std::min(m.expected_ranks, kMaxRanks)});
  if (c.size <= 0 || c.size > plausible) return out;
  std::vector<char> present(c.size, 0);
  bool constant = !c.members.empty();
  const int d = c.members.empty() ? 0 : m.procs[c.members[0].proc].rank - c.members[0].rank_in_comm;
  for (const auto& mem : c.members) {
    if (mem.rank_in_comm >= 0 && mem.rank_in_comm < c.size) present[mem.rank_in_comm] = 1;
    if (m.procs[mem.proc].rank - mem.rank_in_comm != d) constant = false;
  }
  for (int r = 0; r < c.size; ++r)
    if (!present[r]) out.push_back({r, constant && job_missing.count(r + d) ? r + d : -1});
  return out;
}

// The replay a graph op ran in, for verdicts and evidence.
json replay_json(const ReplayTag& t, const Op& o) {
  return json{{"graph", t.graph},   {"replay", t.replay},
              {"captured_op", t.pos}, {"captured_ops", t.ops},
              {"op", fr::log::op_name(o.op)}, {"seq", o.seq},
              {"count", o.count},  {"dtype", fr::log::dtype_name(o.dtype)}};
}

std::string replay_text(const ReplayTag& t) {
  return " (replay " + std::to_string(t.replay) + " of CUDA graph " + std::to_string(t.graph) +
         ", captured op " + std::to_string(t.pos) + " of " + std::to_string(t.ops) + ")";
}

json member_evidence(const Model& m, const CommMember& mem, const Frontier& f, const std::string& state) {
  const Proc& p = m.procs[mem.proc];
  json e;
  e["rank"] = p.rank;
  e["rank_in_comm"] = mem.rank_in_comm;
  e["host"] = p.host;
  e["alive"] = p.alive;
  auto opj = [&](const Op* o, uint64_t seq) -> json {
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
  if (pc.has_entry && pc.state != FR_COMM_LIVE) e["comm_state"] = fr::log::comm_state_name(pc.state);
  for (uint32_t k = pc.ops_end; k-- > pc.ops_begin;) {
    const uint16_t op = p.ops[k].op;
    if (op == FR_OP_COMM_REVOKE || op == FR_OP_COMM_SUSPEND || op == FR_OP_COMM_RESUME ||
        op == FR_OP_COMM_ABORT) {
      e["last_lifecycle_call"] = op_json(p.ops[k], p.clock_offset_ns);
      break;
    }
  }
  e["last_enqueued"] = opj(f.last_enq, f.enq);
  e["last_started"] = opj(f.last_started, f.started);
  e["last_completed"] = opj(f.last_completed, f.completed);
  e["state"] = state;
  return e;
}

// The verdict's timeline: each member's last records on the verdict's communicator (what the
// incident page draws), with the time its log was read, so a page needs the JSON alone. Culprits
// first; a few hundred rows are more than a person reads.
void add_recent_ops(const Model& m, json* verdict) {
  constexpr size_t kOpsPerRank = 8, kMaxRanks = 256;
  if (!verdict->contains("comm") || !verdict->contains("evidence")) return;
  const std::string id = (*verdict)["comm"].value("id", std::string());
  const Comm* comm = nullptr;
  for (const auto& c : m.comms)
    if (comm_id_hex(c.id) == id) comm = &c;
  if (!comm) return;
  std::map<int, const CommMember*> by_rank;
  for (const auto& mem : comm->members) by_rank[m.procs[mem.proc].rank] = &mem;
  json& ev = (*verdict)["evidence"];
  std::vector<size_t> order(ev.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_partition(order.begin(), order.end(), [&](size_t i) { return ev[i].value("culprit", false); });
  if (order.size() > kMaxRanks) order.resize(kMaxRanks);
  for (size_t i : order) {
    json& e = ev[i];
    if (!e.contains("rank") || !e["rank"].is_number_integer()) continue;
    auto it = by_rank.find(e["rank"].get<int>());
    if (it == by_rank.end()) continue;
    const Proc& p = m.procs[it->second->proc];
    const ProcComm& pc = p.comms[it->second->pc];
    json ops = json::array();
    const uint32_t first = pc.ops_end - std::min<uint32_t>(pc.ops_end - pc.ops_begin, kOpsPerRank);
    for (uint32_t k = first; k < pc.ops_end; ++k) ops.push_back(op_json(p.ops[k], p.clock_offset_ns));
    e["recent_ops"] = std::move(ops);
    const uint64_t read_ns = p.snapshot_ns ? p.snapshot_ns : p.heartbeat_ns;
    if (read_ns) e["read_ns"] = static_cast<int64_t>(read_ns) + p.clock_offset_ns;
  }
}

// A finding is a consequence of the verdict when every rank it blames is one the verdict already
// accounts for: a culprit of the verdict, or a member blocked in the verdict's op (a rank waiting
// there can do nothing elsewhere). Stragglers (skew) stand on their own. Marked with
// "consequence": true and "consequence_of": the verdict's kind.
void mark_consequences(const json& verdict, std::vector<json>* findings) {
  const std::string kind = verdict.value("kind", std::string());
  if (kind == "no_hang" || kind == "incomplete") return;
  std::set<int> held;
  for (const auto& r : verdict.value("culprit_ranks", json::array()))
    if (r.is_number_integer()) held.insert(r.get<int>());
  for (const auto& e : verdict.value("evidence", json::array())) {
    const std::string st = e.value("state", std::string());
    if (e.contains("rank") && e["rank"].is_number_integer() && st.rfind("completed", 0) != 0 && st != "missing")
      held.insert(e["rank"].get<int>());
  }
  for (auto& f : *findings) {
    if (f.value("kind", std::string()) == "skew") continue;
    const json& blamed = f.value("culprit_ranks", json::array());
    bool all = !blamed.empty();
    for (const auto& r : blamed) all = all && r.is_number_integer() && held.count(r.get<int>());
    if (all) {
      f["consequence"] = true;
      f["consequence_of"] = kind;
    }
  }
}

json comm_json(const Comm& c) {
  return json{{"id", comm_id_hex(c.id)}, {"name", c.name}, {"size", c.size}};
}

// --- Collectives ------------------------------------------------------------------------------

struct Sig {
  uint16_t op = 0;
  uint8_t dtype = 0;
  bool set = false;
  bool differs = false;
  int32_t redop = -1;
  int32_t root = -1;
  uint64_t count = 0;
};

bool same_sig(const Sig& s, const Op& o) {
  if (s.op != o.op || s.dtype != o.dtype || s.count != o.count) return false;
  if (has_redop(o.op) && s.redop != o.redop) return false;
  if (is_rooted(o.op) && s.root != o.peer) return false;
  return true;
}

// The earliest sequence number where members called different things; 0 when none.
uint64_t earliest_mismatch(const Model& m, const Comm& c) {
  uint64_t lo = UINT64_MAX, hi = 0;
  size_t total = 0;
  for (const auto& mem : c.members) {
    const Proc& p = m.procs[mem.proc];
    const ProcComm& pc = p.comms[mem.pc];
    for (uint32_t i = pc.ops_begin; i < pc.ops_end; ++i) {
      const Op& o = p.ops[i];
      if (!counts(o) || !fr::log::op_is_collective(o.op) || o.seq == 0) continue;
      lo = std::min(lo, o.seq);
      hi = std::max(hi, o.seq);
      ++total;
    }
  }
  if (total == 0) return 0;
  // Rings wrapped far apart would make the table huge; the recent end is what matters.
  const uint64_t cap = std::max<uint64_t>(4 * total + 1024, 1 << 20);
  if (hi - lo + 1 > cap) lo = hi - cap + 1;
  std::vector<Sig> sig(hi - lo + 1);
  uint64_t first = 0;
  for (const auto& mem : c.members) {
    const Proc& p = m.procs[mem.proc];
    const ProcComm& pc = p.comms[mem.pc];
    for (uint32_t i = pc.ops_begin; i < pc.ops_end; ++i) {
      const Op& o = p.ops[i];
      if (!counts(o) || !fr::log::op_is_collective(o.op) || o.seq < lo || o.seq > hi) continue;
      Sig& s = sig[o.seq - lo];
      if (!s.set) {
        s = Sig{o.op, o.dtype, true, false, o.redop, o.peer, o.count};
      } else if (!s.differs && !same_sig(s, o)) {
        s.differs = true;
        if (first == 0 || o.seq < first) first = o.seq;
      }
    }
  }
  return first;
}

// Builds the mismatch stall at `seq`: the field, the values with their ranks, the minority.
Stall mismatch_stall(const Model& m, int ci, uint64_t seq) {
  const Comm& c = m.comms[ci];
  struct Row {
    int rank;
    const Op* op;
    const Proc* p;
    const ProcComm* pc;
  };
  std::vector<Row> rows;
  for (const auto& mem : c.members) {
    const Proc& p = m.procs[mem.proc];
    const ProcComm& pc = p.comms[mem.pc];
    if (const Op* o = find_seq(p, pc, seq, false)) rows.push_back({p.rank, o, &p, &pc});
  }
  using Getter = std::string (*)(const Op&);
  struct Field {
    const char* name;
    Getter get;
  };
  static const Field fields[] = {
      {"op", [](const Op& o) { return std::string(fr::log::op_name(o.op)); }},
      {"dtype", [](const Op& o) { return std::string(fr::log::dtype_name(o.dtype)); }},
      {"count", [](const Op& o) { return std::to_string(o.count); }},
      {"root", [](const Op& o) { return is_rooted(o.op) ? std::to_string(o.peer) : std::string("-"); }},
      {"redop", [](const Op& o) { return has_redop(o.op) ? std::string(fr::log::redop_name(o.redop)) : std::string("-"); }},
  };
  const Field* field = &fields[0];
  std::map<std::string, std::vector<int>> groups;
  for (const Field& f : fields) {
    groups.clear();
    for (const Row& r : rows) groups[f.get(*r.op)].push_back(r.rank);
    if (groups.size() > 1) {
      field = &f;
      break;
    }
  }
  // The majority value is the expected one; everyone else is a culprit. On a tie (typically two
  // members, one each), the communicator's own rhythm decides: training loops repeat, so the
  // value all members agreed on one period earlier is the expected one. Failing that, the members
  // whose value changed from their own previous call of the same op are the odd ones.
  size_t best = 0, best_n = 0;
  for (const auto& [v, ranks] : groups) best = std::max(best, ranks.size());
  for (const auto& [v, ranks] : groups) best_n += ranks.size() == best;
  std::string expected;
  if (best_n == 1) {
    for (const auto& [v, ranks] : groups)
      if (ranks.size() == best) expected = v;
  } else {
    auto agreed = [&](uint64_t q, std::string* v) {
      bool first = true;
      for (const Row& r : rows) {
        const Op* o = find_seq(*r.p, *r.pc, q, false);
        if (!o) return false;
        std::string x = field->get(*o);
        if (first) *v = x, first = false;
        else if (x != *v) return false;
      }
      return !first;
    };
    for (uint64_t period = 1; period <= 32 && expected.empty() && 2 * period < seq; ++period) {
      bool periodic = true;
      for (uint64_t j = 1; j <= period && periodic; ++j) {
        std::string a, b;
        periodic = agreed(seq - j, &a) && agreed(seq - j - period, &b) && a == b;
      }
      std::string e;
      if (periodic && agreed(seq - period, &e) && groups.count(e)) expected = e;
    }
  }
  std::set<int> culprits;
  if (!expected.empty()) {
    for (const auto& [v, ranks] : groups)
      if (v != expected) culprits.insert(ranks.begin(), ranks.end());
  } else {
    for (const Row& r : rows) {
      const Op* prev = nullptr;
      for (uint32_t i = r.pc->ops_begin; i < r.pc->ops_end; ++i) {
        const Op& o = r.p->ops[i];
        if (counts(o) && fr::log::op_is_collective(o.op) && o.seq < seq && o.op == r.op->op) prev = &o;
      }
      if (prev && field->get(*prev) != field->get(*r.op)) culprits.insert(r.rank);
    }
    if (culprits.empty() || culprits.size() == rows.size()) {
      culprits.clear();
      for (const Row& r : rows) culprits.insert(r.rank);
    }
  }
  Stall s;
  s.kind = "mismatch";
  s.prio = kMismatch;
  s.comm = ci;
  s.seq = seq;
  s.culprits.assign(culprits.begin(), culprits.end());
  json values = json::array();
  for (const auto& [v, ranks] : groups) values.push_back({{"value", v}, {"ranks", ranks}});
  s.mismatch = {{"field", field->name}, {"values", values}};
  if (!expected.empty()) s.mismatch["expected"] = expected;
  // The op as the majority called it.
  for (const Row& r : rows) {
    if (!culprits.count(r.rank) || s.op.empty()) s.op = fr::log::op_name(r.op->op);
    s.t_start = std::min(s.t_start, aligned(*r.p, r.op->call_ns));
  }
  for (const Row& r : rows)
    if (!culprits.count(r.rank) && (r.op->gpu_state != FR_GPU_COMPLETED)) s.blocked.push_back(r.rank);
  std::string odd;
  for (const auto& [v, ranks] : groups)
    if (v != expected) odd += (odd.empty() ? "" : ", ") + v + " on rank" + (ranks.size() > 1 ? "s " : " ") +
                              ranks_text(ranks);
  std::string replay;
  for (const Row& r : rows)
    if (const ReplayTag* t = replay_of(*r.p, r.op); t && replay.empty() && !culprits.count(r.rank)) {
      replay = replay_text(*t);
      s.extra["graph_replay"] = replay_json(*t, *r.op);
    }
  s.summary = "mismatch in " + s.op + " #" + std::to_string(seq) + " on comm " +
              comm_text(c) + replay + ": " + field->name + " differs (" +
              (expected.empty() ? "" : "expected " + expected + "; ") + odd + ")";
  return s;
}

void analyze_collectives(Ctx& ctx, int ci, std::vector<Frontier>& fr, json* frontier_json) {
  const Model& m = ctx.m;
  const Comm& c = m.comms[ci];
  const size_t n = c.members.size();
  fr.resize(n);
  uint64_t min_e = UINT64_MAX, max_e = 0, min_c = UINT64_MAX, max_c = 0;
  uint64_t t = UINT64_MAX;  // stall seq
  for (size_t i = 0; i < n; ++i) {
    const Proc& p = m.procs[c.members[i].proc];
    fr[i] = frontier(p, p.comms[c.members[i].pc], false);
    min_e = std::min(min_e, fr[i].enq);
    max_e = std::max(max_e, fr[i].enq);
    min_c = std::min(min_c, fr[i].completed);
    max_c = std::max(max_c, fr[i].completed);
    if (fr[i].tracked && fr[i].enq > fr[i].completed) t = std::min(t, fr[i].completed + 1);
  }
  if (n == 0) return;
  *frontier_json = {{"min_enqueued", min_e}, {"max_enqueued", max_e},
                    {"min_completed", min_c}, {"max_completed", max_c}};
  if (max_e > min_e) t = std::min(t, min_e + 1);

  // Mismatched arguments explain a hang better than anything else on the communicator.
  bool mismatch_found = false;
  if (uint64_t ms = earliest_mismatch(m, c)) {
    ctx.stalls.push_back(mismatch_stall(m, ci, ms));
    mismatch_found = true;
  }
  const auto missing = missing_members(m, c, ctx.job_missing);
  if (t == UINT64_MAX || t > max_e) {
    // Everyone completed everything (or nothing can be told without GPU tracking).
    return;
  }
  if (mismatch_found && ctx.stalls.back().seq <= t) {
    // The mismatch is at or before the stall point: it is the stall. Record who waits there.
    Stall& s = ctx.stalls.back();
    for (size_t i = 0; i < n; ++i) {
      const Proc& p = m.procs[c.members[i].proc];
      if (fr[i].enq >= t && fr[i].completed < t) {
        if (std::find(s.blocked.begin(), s.blocked.end(), p.rank) == s.blocked.end())
          s.blocked.push_back(p.rank);
        const Op* o = find_seq(p, p.comms[c.members[i].pc], t, false);
        ctx.blocked[p.rank].push_back({ci, o ? aligned(p, o->call_ns) : INT64_MAX});
      }
    }
    (*frontier_json)["stalled_seq"] = t;
    return;
  }
  (*frontier_json)["stalled_seq"] = t;

  Stall s;
  s.comm = ci;
  s.seq = t;
  std::vector<int> not_entered, not_started, not_completed, started, unknown;
  const Op* sample = nullptr;
  const ReplayTag* replay = nullptr;
  std::vector<const Op*> at(n, nullptr);
  for (size_t i = 0; i < n; ++i) {
    const Proc& p = m.procs[c.members[i].proc];
    const Frontier& f = fr[i];
    if (f.enq < t) {
      not_entered.push_back(p.rank);
      continue;
    }
    at[i] = find_seq(p, p.comms[c.members[i].pc], t, false);
    if (at[i] && !replay) replay = replay_of(p, at[i]);
    if (at[i]) {
      if (!sample) sample = at[i];
      s.t_start = std::min(s.t_start, aligned(p, at[i]->call_ns));
    }
    if (f.completed >= t) continue;
    s.blocked.push_back(p.rank);
    ctx.blocked[p.rank].push_back({ci, at[i] ? aligned(p, at[i]->call_ns) : INT64_MAX});
    if (!f.tracked) unknown.push_back(p.rank);
    else if (f.started < t) not_started.push_back(p.rank);
    else { not_completed.push_back(p.rank); started.push_back(p.rank); }
  }
  s.op = sample ? fr::log::op_name(sample->op) : "collective";
  // An op of a CUDA graph is named with the replay it ran in and its place in the graph.
  if (replay && sample) s.extra["graph_replay"] = replay_json(*replay, *sample);
  const std::string where = s.op + " #" + std::to_string(t) + " on comm " +
                            comm_text(c) + (replay ? replay_text(*replay) : std::string());
  if (sample && sample->group_id != 0) {
    // A grouped launch is one unit: name every op of the group on the first member that has it.
    for (size_t i = 0; i < n; ++i) {
      if (!at[i]) continue;
      const Proc& p = m.procs[c.members[i].proc];
      const ProcComm& pc = p.comms[c.members[i].pc];
      json ops = json::array();
      const ReplayTag* own = replay_of(p, at[i]);
      auto same_launch = [&](const Op& o) {  // a graph's group runs again at every replay
        const ReplayTag* t = replay_of(p, &o);
        return own == nullptr ? t == nullptr : t != nullptr && t->replay == own->replay && t->graph == own->graph;
      };
      for (uint32_t k = pc.ops_begin; k < pc.ops_end; ++k)
        if (p.ops[k].group_id == at[i]->group_id && counts(p.ops[k]) && same_launch(p.ops[k]))
          ops.push_back(json{{"op", fr::log::op_name(p.ops[k].op)}, {"seq", p.ops[k].seq},
                             {"kind", fr::log::op_is_p2p(p.ops[k].op) ? "p2p" : "coll"}});
      s.extra["group"] = {{"group_id", at[i]->group_id}, {"ops", ops}};
      break;
    }
  }
  std::vector<int> missing_global;
  for (const auto& mm : missing)
    if (mm.global >= 0) missing_global.push_back(mm.global);
  if (!missing.empty()) {
    json mj = json::array();
    for (const auto& mm : missing)
      mj.push_back({{"rank_in_comm", mm.rank_in_comm}, {"global_rank", mm.global >= 0 ? json(mm.global) : json(nullptr)}});
    s.extra["missing_members"] = mj;
  }
  const size_t present = n;
  if (!not_entered.empty()) {
    s.kind = "not_entered";
    s.prio = kNotEntered;
    s.culprits = not_entered;
    s.summary = "rank" + std::string(not_entered.size() > 1 ? "s " : " ") + ranks_text(not_entered) +
                " never entered " + where + "; " + std::to_string(s.blocked.size()) + " of " +
                std::to_string(c.size > 0 ? c.size : static_cast<int>(present)) + " members wait in it";
  } else if (c.size < 0 && not_started.empty() && !s.blocked.empty()) {
    // Nobody knows the communicator's members (a PyTorch group its dumps do not describe): a
    // member that never came leaves no trace, so nobody can be blamed.
    s.kind = "incomplete";
    s.prio = kIncomplete;
    s.summary = "rank" + std::string(s.blocked.size() > 1 ? "s " : " ") + ranks_text(s.blocked) + " wait in " +
                where + ", whose members no dump lists; a member that never entered it cannot be named";
  } else if (!missing.empty() && not_started.empty()) {
    s.kind = "incomplete";
    s.prio = kIncomplete;
    s.culprits = missing_global;
    s.summary = "every member with a dump is in " + where + "; " + std::to_string(missing.size()) +
                plural(missing.size(), " member has", " members have") + " no dump" +
                (missing_global.empty() ? "" : " (rank" + std::string(missing_global.size() > 1 ? "s " : " ") +
                                                   ranks_text(missing_global) + ")") +
                " and would decide it";
  } else {
    s.kind = "stuck_in_collective";
    s.prio = kStuck;
    if (!not_started.empty()) {
      s.culprits = not_started;
      s.summary = "all members entered " + where + "; the GPU of rank" +
                  (not_started.size() > 1 ? "s " : " ") + ranks_text(not_started) + " never started it";
      // Each culprit's own call of the op, to tell whether an older op on its stream holds it.
      for (int r : not_started) {
        int64_t own = INT64_MAX;
        for (size_t i = 0; i < n; ++i)
          if (m.procs[c.members[i].proc].rank == r && at[i]) own = aligned(m.procs[c.members[i].proc], at[i]->call_ns);
        s.culprit_own_call.push_back(own);
      }
    } else if (!not_completed.empty() && max_c >= t) {
      s.culprits = not_completed;
      s.summary = "all members entered " + where + "; rank" + (not_completed.size() > 1 ? "s " : " ") +
                  ranks_text(not_completed) + " never finished it while the others did";
    } else if (!unknown.empty() && not_completed.empty()) {
      s.summary = "all members entered " + where + " and none returned; GPU progress is not tracked, "
                  "so the stalled GPU cannot be named";
    } else {
      s.summary = "all members entered " + where + " and their GPUs started it, but none finished";
    }
  }
  s.fraction = present ? static_cast<double>(s.culprits.size()) / static_cast<double>(present) : 1.0;
  ctx.stalls.push_back(std::move(s));
}

// --- Blocking host calls (init, split, shrink, grow) ----------------------------------------

// A process that destroyed every communicator it had and was in no call when it went (a rank
// leaving an elastic job) left in order: gone, but no death to blame.
bool left_in_order(const Proc& p) {
  bool any = false;
  for (const auto& pc : p.comms) {
    if (!pc.has_entry) continue;
    if (pc.state != FR_COMM_DESTROYED) return false;
    any = true;
  }
  for (const auto& o : p.ops)
    if ((o.flags & FR_REC_F_IN_CALL) && o.result == FR_RESULT_PENDING) return false;
  return any && !p.alive;
}

// The parent ranks a CommShrink record of `p` excludes (zero: none known).
std::array<uint64_t, 2> shrink_excluded(const Proc& p, const Op* o) {
  if (o == nullptr || o->op != FR_OP_COMM_SHRINK) return {0, 0};
  const uint32_t at = static_cast<uint32_t>(o - p.ops.data());
  auto it = std::lower_bound(p.shrinks.begin(), p.shrinks.end(), at,
                             [](const auto& e, uint32_t i) { return e.first < i; });
  return it != p.shrinks.end() && it->first == at ? it->second : std::array<uint64_t, 2>{0, 0};
}

bool is_joining_call(uint16_t op) {
  return op == FR_OP_COMM_INIT_RANK || op == FR_OP_COMM_INIT_RANK_CONFIG ||
         op == FR_OP_COMM_INIT_RANK_SCALABLE || op == FR_OP_COMM_SPLIT || op == FR_OP_COMM_SHRINK ||
         op == FR_OP_COMM_GROW;
}

// Members still inside a call that every member must make (communicator creation) wait for the
// members that never made it: a hang before the first collective, which sequence numbers miss.
void analyze_joining(Ctx& ctx, int ci) {
  const Model& m = ctx.m;
  const Comm& c = m.comms[ci];
  std::vector<int> waiting;
  std::vector<std::pair<int, int>> absent_members;  // (global rank, rank in comm)
  const Op* sample = nullptr;
  const Proc* sample_proc = nullptr;
  int64_t t0 = INT64_MAX;
  for (const auto& mem : c.members) {
    const Proc& p = m.procs[mem.proc];
    const ProcComm& pc = p.comms[mem.pc];
    const Op* in_call = nullptr;
    for (uint32_t i = pc.ops_begin; i < pc.ops_end; ++i) {
      const Op& o = p.ops[i];
      if (is_joining_call(o.op) && (o.flags & FR_REC_F_IN_CALL) && o.result == FR_RESULT_PENDING) in_call = &o;
    }
    if (in_call) {
      waiting.push_back(p.rank);
      if (!sample) sample = in_call, sample_proc = &p;
      const int64_t t = aligned(p, in_call->call_ns);
      t0 = std::min(t0, t);
      ctx.blocked[p.rank].push_back({ci, t});
    } else {
      absent_members.emplace_back(p.rank, mem.rank_in_comm);
    }
  }
  if (waiting.empty()) return;
  // A shrink waits only for the members it keeps: the ones its record excludes are not expected.
  const std::array<uint64_t, 2> excluded = shrink_excluded(*sample_proc, sample);
  auto is_excluded = [&](int rank_in_comm) {
    return rank_in_comm >= 0 && rank_in_comm < 128 && (excluded[rank_in_comm / 64] >> (rank_in_comm % 64) & 1u);
  };
  std::vector<int> absent, excluded_global;
  for (const auto& [global, in_comm] : absent_members)
    (is_excluded(in_comm) ? excluded_global : absent).push_back(global);
  std::vector<int> missing_global;
  size_t missing_n = 0;
  for (const auto& mm : missing_members(m, c, ctx.job_missing)) {
    if (is_excluded(mm.rank_in_comm)) continue;
    ++missing_n;
    if (mm.global >= 0) missing_global.push_back(mm.global);
  }
  // A grow waits for ranks that are no members of the parent: the joiners. Its members know how
  // many (nRanks, the record's count); the job's ranks that are in no dump, or members of no
  // communicator of this lineage, are who they would be.
  if (sample->op == FR_OP_COMM_GROW && c.size > 0 && sample->count > static_cast<uint64_t>(c.size) &&
      absent.empty()) {
    const size_t joiners = static_cast<size_t>(sample->count) - static_cast<size_t>(c.size);
    std::set<int> members;
    for (const auto& mem : c.members) members.insert(m.procs[mem.proc].rank);
    std::vector<int> candidates(ctx.job_missing.begin(), ctx.job_missing.end());
    for (const auto& p : m.procs)
      if (!members.count(p.rank) && !p.alive && std::find(candidates.begin(), candidates.end(), p.rank) == candidates.end())
        candidates.push_back(p.rank);  // an earlier process of a rank that left
    std::sort(candidates.begin(), candidates.end());
    missing_n += joiners;
    for (size_t i = 0; i < candidates.size() && i < joiners; ++i) missing_global.push_back(candidates[i]);
  }
  if (absent.empty() && missing_n == 0) return;  // everyone is in it: it is about to return
  Stall s;
  s.comm = ci;
  s.seq = 0;
  s.api = true;
  s.op = fr::log::op_name(sample->op);
  s.t_start = t0;
  s.blocked = waiting;
  const std::string where = s.op + " on comm " + comm_text(c);
  if (!absent.empty()) {
    s.kind = "not_entered";
    s.prio = kNotEntered;
    s.culprits = absent;
    s.culprits.insert(s.culprits.end(), missing_global.begin(), missing_global.end());
    s.summary = "rank" + std::string(s.culprits.size() > 1 ? "s " : " ") + ranks_text(s.culprits) +
                " never called " + where + "; " + std::to_string(waiting.size()) + " wait in it";
  } else {
    s.kind = missing_global.size() == missing_n ? "not_entered" : "incomplete";
    s.prio = s.kind == "not_entered" ? kNotEntered : kIncomplete;
    s.culprits = missing_global;
    s.summary = std::to_string(waiting.size()) + " member" + (waiting.size() > 1 ? "s wait" : " waits") +
                " in " + where + " for " + std::to_string(missing_n) + " that never joined" +
                (missing_global.empty() ? "" : " (rank" + std::string(missing_global.size() > 1 ? "s " : " ") +
                                                  ranks_text(missing_global) + ", no dump)");
  }
  if (excluded[0] | excluded[1]) {
    json ex = json::array();
    for (int r = 0; r < 128; ++r)
      if (is_excluded(r)) ex.push_back(r);
    s.extra["shrink_excluded"] = ex;  // ranks in the parent communicator
    if (!excluded_global.empty())
      s.summary += " (rank" + std::string(excluded_global.size() > 1 ? "s " : " ") + ranks_text(excluded_global) +
                   " excluded by the shrink)";
  }
  s.fraction = static_cast<double>(s.culprits.size()) / static_cast<double>(std::max<size_t>(1, c.members.size()));
  ctx.stalls.push_back(std::move(s));
}

// --- Point-to-point ---------------------------------------------------------------------------

void analyze_p2p(Ctx& ctx, int ci, std::vector<Frontier>& fr, json* frontier_json) {
  const Model& m = ctx.m;
  const Comm& c = m.comms[ci];
  const size_t n = c.members.size();
  fr.resize(n);
  bool any = false;
  uint64_t min_e = UINT64_MAX, max_e = 0, min_c = UINT64_MAX, max_c = 0;
  std::unordered_map<int, size_t> by_rank;  // rank in comm -> member index
  for (size_t i = 0; i < n; ++i) {
    const Proc& p = m.procs[c.members[i].proc];
    fr[i] = frontier(p, p.comms[c.members[i].pc], true);
    by_rank[c.members[i].rank_in_comm] = i;
    if (fr[i].enq) any = true;
    min_e = std::min(min_e, fr[i].enq);
    max_e = std::max(max_e, fr[i].enq);
    min_c = std::min(min_c, fr[i].completed);
    max_c = std::max(max_c, fr[i].completed);
  }
  if (!any) return;
  *frontier_json = {{"min_enqueued", min_e}, {"max_enqueued", max_e},
                    {"min_completed", min_c}, {"max_completed", max_c}};

  // Per (source, destination) in communicator ranks: the sends and the receives, in order. With
  // full histories (no ring wrap on either side) every op is paired; otherwise only the ops still
  // pending, which is where a hang shows.
  struct Side {
    std::vector<const Op*> ops;
    size_t member = 0;
  };
  std::map<std::pair<int, int>, std::pair<Side, Side>> pairs;  // (src,dst) -> (sends, recvs)
  // A member's whole point-to-point history on this communicator is at hand when nothing was
  // overwritten or its first p2p op (seq 1) is still in the ring.
  std::vector<char> p2p_full(n, 0);
  std::vector<std::pair<size_t, const Op*>> signal_ops;  // (member, op): one-sided, paired below
  for (size_t i = 0; i < n; ++i) {
    const Proc& p = m.procs[c.members[i].proc];
    const ProcComm& pc = p.comms[c.members[i].pc];
    uint64_t lo = UINT64_MAX;
    for (uint32_t k = pc.ops_begin; k < pc.ops_end; ++k)
      if (fr::log::op_is_p2p(p.ops[k].op)) lo = std::min(lo, p.ops[k].seq);
    p2p_full[i] = p.overwritten == 0 || lo == 1;
    for (uint32_t k = pc.ops_begin; k < pc.ops_end; ++k) {
      const Op& o = p.ops[k];
      if (!counts(o) || !fr::log::op_is_p2p(o.op)) continue;
      const int me = c.members[i].rank_in_comm;
      if (o.op == FR_OP_PUT_SIGNAL || o.op == FR_OP_SIGNAL || o.op == FR_OP_WAIT_SIGNAL) {
        signal_ops.push_back({i, &o});
        continue;
      }
      if (o.op == FR_OP_SEND) {
        auto& sd = pairs[{me, o.peer}].first;
        sd.ops.push_back(&o);
        sd.member = i;
      } else {
        auto& rv = pairs[{o.peer, me}].second;
        rv.ops.push_back(&o);
        rv.member = i;
      }
    }
  }
  Stall s;
  s.comm = ci;
  s.p2p = true;
  std::set<int> culprits, blocked, not_started;
  std::vector<std::string> notes;
  const Op* first_unmatched = nullptr;
  std::vector<int> missing_peers;
  bool pending_any = false;
  std::map<int, int64_t> since;  // per blocked rank: its oldest pending p2p op here
  auto note_since = [&](const Proc* p, const Op* o) {
    auto [it, fresh] = since.emplace(p->rank, aligned(*p, o->call_ns));
    if (!fresh) it->second = std::min(it->second, aligned(*p, o->call_ns));
  };
  for (auto& [key, sides] : pairs) {
    auto& [sends, recvs] = sides;
    auto member_of = [&](int r) -> const Proc* {
      auto it = by_rank.find(r);
      return it == by_rank.end() ? nullptr : &m.procs[c.members[it->second].proc];
    };
    const Proc* src = member_of(key.first);
    const Proc* dst = member_of(key.second);
    // Pending-only counting on one side and full on the other would not line up: drop to the
    // pending ops on both sides whenever either wrapped.
    const bool full = src && dst && p2p_full[by_rank[key.first]] && p2p_full[by_rank[key.second]];
    std::vector<const Op*> sends_done, recvs_done;
    auto pending = [&](std::vector<const Op*>& v, std::vector<const Op*>& done) {
      if (full) return;
      for (const Op* o : v)
        if (o->gpu_state == FR_GPU_COMPLETED) done.push_back(o);
      v.erase(std::remove_if(v.begin(), v.end(), [](const Op* o) { return o->gpu_state == FR_GPU_COMPLETED; }), v.end());
    };
    pending(sends.ops, sends_done);
    pending(recvs.ops, recvs_done);
    size_t ns = sends.ops.size(), nr = recvs.ops.size();
    // Counting pending ops only: a grouped op stays pending until its whole group finishes, while
    // its counterpart may already be done. Counterparts completed within half the pair's usual
    // spacing of the first excess op are taken as its match.
    auto absorbed = [&](const std::vector<const Op*>& excess, size_t from, const Proc* pe,
                        const std::vector<const Op*>& done, const Proc* pd) -> size_t {
      if (full || from >= excess.size() || done.empty() || !pe || !pd) return 0;
      int64_t gap = INT64_MAX;
      for (size_t k = 1; k < done.size(); ++k)
        gap = std::min<int64_t>(gap, static_cast<int64_t>(done[k]->call_ns - done[k - 1]->call_ns));
      const int64_t first = aligned(*pe, excess[from]->call_ns);
      const int64_t slack = gap == INT64_MAX ? 0 : gap / 2;
      size_t n = 0;
      for (const Op* o : done)
        if (aligned(*pd, o->call_ns) >= first - slack) ++n;
      return std::min(n, excess.size() - from);
    };
    if (ns > nr) nr += absorbed(sends.ops, nr, src, recvs_done, dst);
    else if (nr > ns) ns += absorbed(recvs.ops, ns, dst, sends_done, src);
    auto note_unmatched = [&](const Op* o, const Proc* p) {
      pending_any = true;
      blocked.insert(p->rank);
      int64_t t = aligned(*p, o->call_ns);
      note_since(p, o);
      if (t < s.t_start || !first_unmatched) {
        s.t_start = std::min(s.t_start, t);
        first_unmatched = o;
      }
    };
    if (ns > nr) {
      // Sends nobody receives: the destination never posted the receive.
      if (!dst) { missing_peers.push_back(key.second); note_unmatched(sends.ops[nr], src); continue; }
      if (sends.ops[nr]->gpu_state == FR_GPU_COMPLETED) continue;  // eager send, done
      culprits.insert(dst->rank);
      note_unmatched(sends.ops[nr], src);
      notes.push_back("rank " + std::to_string(src->rank) + " sends to rank " + std::to_string(dst->rank) +
                      " (Send #" + std::to_string(sends.ops[nr]->seq) + "), which never posted the receive");
    } else if (nr > ns) {
      if (!src) { missing_peers.push_back(key.first); note_unmatched(recvs.ops[ns], dst); continue; }
      if (recvs.ops[ns]->gpu_state == FR_GPU_COMPLETED) continue;
      culprits.insert(src->rank);
      note_unmatched(recvs.ops[ns], dst);
      notes.push_back("rank " + std::to_string(dst->rank) + " waits to receive from rank " +
                      std::to_string(src->rank) + " (Recv #" + std::to_string(recvs.ops[ns]->seq) +
                      "), which never posted the send");
    }
    // Paired ops still pending: stuck, and the side whose GPU never started is the suspect.
    for (size_t k = 0; k < std::min(sends.ops.size(), recvs.ops.size()); ++k) {
      const Op* a = sends.ops[k];
      const Op* b = recvs.ops[k];
      if (a->gpu_state == FR_GPU_COMPLETED && b->gpu_state == FR_GPU_COMPLETED) continue;
      pending_any = true;
      if (src) blocked.insert(src->rank), note_since(src, a);
      if (dst) blocked.insert(dst->rank), note_since(dst, b);
      const bool a_started = a->gpu_state >= FR_GPU_STARTED, b_started = b->gpu_state >= FR_GPU_STARTED;
      if (a_started != b_started) not_started.insert(a_started ? dst->rank : src->rank);
      if (!first_unmatched && src) {
        first_unmatched = a;
        s.t_start = std::min(s.t_start, aligned(*src, a->call_ns));
      }
    }
  }
  // Signals are one-sided: a WaitSignal on (peer, signal index, context) needs as many signals
  // from that peer as the waits before it and itself ask for. A pending wait that needs more than
  // the peer ever sent waits on that peer. Only decided on whole histories of both ranks: with a
  // wrapped ring the signals already sent cannot be counted.
  struct Channel {
    uint64_t sent = 0;
    std::vector<const Op*> waits;
  };
  // (signaller, waiter, signal index, context); load.cpp keeps the index in redop, the context
  // in dtype.
  std::map<std::tuple<int, int, int32_t, uint8_t>, Channel> channels;
  for (const auto& [i, o] : signal_ops) {
    const int me = c.members[i].rank_in_comm;
    if (o->op == FR_OP_WAIT_SIGNAL)
      channels[{o->peer, me, o->redop, o->dtype}].waits.push_back(o);
    else
      ++channels[{me, o->peer, o->redop, o->dtype}].sent;
  }
  auto note_wait = [&](const Op* o, const Proc* p) {
    pending_any = true;
    blocked.insert(p->rank);
    note_since(p, o);
    const int64_t t = aligned(*p, o->call_ns);
    if (t < s.t_start || !first_unmatched) {
      s.t_start = std::min(s.t_start, t);
      first_unmatched = o;
    }
  };
  for (const auto& [key, ch] : channels) {
    const auto [from, to, sig_idx, sig_ctx] = key;
    auto waiter = by_rank.find(to);
    if (waiter == by_rank.end() || !p2p_full[waiter->second]) continue;
    auto signaller = by_rank.find(from);
    const bool from_full = signaller != by_rank.end() && p2p_full[signaller->second];
    const Proc* wp = &m.procs[c.members[waiter->second].proc];
    uint64_t need = 0;
    for (const Op* w : ch.waits) {
      need += w->count;
      if (w->gpu_state == FR_GPU_COMPLETED || need <= ch.sent) continue;
      if (signaller == by_rank.end()) {
        missing_peers.push_back(from);
        note_wait(w, wp);
        break;
      }
      if (!from_full) break;
      const Proc* sp = &m.procs[c.members[signaller->second].proc];
      culprits.insert(sp->rank);
      note_wait(w, wp);
      notes.push_back("rank " + std::to_string(wp->rank) + " waits for " + std::to_string(need) +
                      " signal(s) from rank " + std::to_string(sp->rank) + " (WaitSignal #" +
                      std::to_string(w->seq) + ", signal " + std::to_string(sig_idx) +
                      ", context " + std::to_string(sig_ctx) + "), which sent " +
                      std::to_string(ch.sent) + " and owes the rest");
      break;
    }
  }
  if (!pending_any) return;
  for (size_t i = 0; i < n; ++i) {
    const Proc& p = m.procs[c.members[i].proc];
    if (!blocked.count(p.rank)) continue;
    s.blocked.push_back(p.rank);
    ctx.blocked[p.rank].push_back({ci, since.count(p.rank) ? since[p.rank] : s.t_start});
  }
  std::string replay;
  if (first_unmatched) {
    s.seq = first_unmatched->seq;
    s.op = fr::log::op_name(first_unmatched->op);
    for (size_t i = 0; i < n && replay.empty(); ++i)
      if (const ReplayTag* t = replay_of(m.procs[c.members[i].proc], first_unmatched)) {
        s.extra["graph_replay"] = replay_json(*t, *first_unmatched);
        replay = replay_text(*t);
      }
  }
  const std::string cname = comm_text(c) + replay;
  if (!culprits.empty()) {
    s.kind = "p2p_unmatched";
    s.prio = kP2p;
    s.culprits.assign(culprits.begin(), culprits.end());
    s.summary = "unmatched point-to-point on comm " + cname + ": " + notes.front() +
                (notes.size() > 1 ? " (+" + std::to_string(notes.size() - 1) + " more)" : "");
    json nj = notes;
    s.extra["pairs"] = nj;
  } else if (!missing_peers.empty()) {
    s.kind = "incomplete";
    s.prio = kIncomplete;
    for (const auto& mm : missing_members(m, c, ctx.job_missing))
      if (mm.global >= 0 && std::count(missing_peers.begin(), missing_peers.end(), mm.rank_in_comm))
        s.culprits.push_back(mm.global);
    s.summary = "point-to-point on comm " + cname + " waits on comm rank" +
                (missing_peers.size() > 1 ? "s " : " ") + ranks_text(missing_peers) + ", which " +
                (missing_peers.size() > 1 ? "have" : "has") + " no dump";
  } else {
    s.kind = "stuck_in_collective";
    s.prio = kStuck;
    s.culprits.assign(not_started.begin(), not_started.end());
    s.summary = "point-to-point ops on comm " + cname + " are paired but stuck" +
                (not_started.empty() ? std::string("; every GPU started them")
                                     : "; the GPU of rank" + std::string(not_started.size() > 1 ? "s " : " ") +
                                           ranks_text(s.culprits) + " never started its side");
  }
  s.fraction = n ? static_cast<double>(s.culprits.size()) / static_cast<double>(n) : 1.0;
  ctx.stalls.push_back(std::move(s));
}

// --- Lineage and skew -------------------------------------------------------------------------

json communicator_json(const Model& m, const Comm& c) {
  json j = comm_json(c);
  j["origin"] = fr::log::origin_name(c.origin);
  j["parent"] = c.parent ? json(comm_id_hex(c.parent)) : json(nullptr);
  json members = json::array();
  for (const auto& mem : c.members)
    members.push_back({{"rank_in_comm", mem.rank_in_comm}, {"global_rank", m.procs[mem.proc].rank}});
  j["members"] = members;
  return j;
}

struct SkewAcc {
  double sum = 0;
  int64_t max = 0;
  uint64_t n = 0;
};

void accumulate_skew(const Model& m, const Comm& c, std::map<int, SkewAcc>* acc) {
  if (c.members.size() < 2) return;
  uint64_t lo = UINT64_MAX, hi = 0;
  for (const auto& mem : c.members) {
    const Proc& p = m.procs[mem.proc];
    const ProcComm& pc = p.comms[mem.pc];
    for (uint32_t i = pc.ops_begin; i < pc.ops_end; ++i) {
      const Op& o = p.ops[i];
      if (!counts(o) || !fr::log::op_is_collective(o.op) || o.seq == 0) continue;
      lo = std::min(lo, o.seq);
      hi = std::max(hi, o.seq);
    }
  }
  if (lo > hi) return;
  size_t total = 0;
  for (const auto& mem : c.members) total += m.procs[mem.proc].comms[mem.pc].ops_end - m.procs[mem.proc].comms[mem.pc].ops_begin;
  const uint64_t cap = std::max<uint64_t>(4 * total + 1024, 1 << 16);
  if (hi - lo + 1 > cap) lo = hi - cap + 1;
  std::vector<int64_t> first(hi - lo + 1, INT64_MAX);
  std::vector<uint32_t> seen(hi - lo + 1, 0);
  for (const auto& mem : c.members) {
    const Proc& p = m.procs[mem.proc];
    const ProcComm& pc = p.comms[mem.pc];
    for (uint32_t i = pc.ops_begin; i < pc.ops_end; ++i) {
      const Op& o = p.ops[i];
      if (!counts(o) || !fr::log::op_is_collective(o.op) || o.seq < lo || o.seq > hi) continue;
      first[o.seq - lo] = std::min(first[o.seq - lo], aligned(p, o.call_ns));
      ++seen[o.seq - lo];
    }
  }
  const uint32_t all = static_cast<uint32_t>(c.members.size());
  for (const auto& mem : c.members) {
    const Proc& p = m.procs[mem.proc];
    const ProcComm& pc = p.comms[mem.pc];
    SkewAcc& a = (*acc)[p.rank];
    for (uint32_t i = pc.ops_begin; i < pc.ops_end; ++i) {
      const Op& o = p.ops[i];
      if (!counts(o) || !fr::log::op_is_collective(o.op) || o.seq < lo || o.seq > hi) continue;
      if (seen[o.seq - lo] != all) continue;  // only collectives every member has on record
      int64_t late = aligned(p, o.call_ns) - first[o.seq - lo];
      a.sum += static_cast<double>(late);
      a.max = std::max(a.max, late);
      ++a.n;
    }
  }
}

// --- Choosing the verdict ---------------------------------------------------------------------

// Whether culprit `r` of stall `s` is explained by waiting in another communicator.
bool explained(const Ctx& ctx, const Stall& s, size_t k) {
  if (s.kind == "mismatch") return false;
  const int r = s.culprits[k];
  auto it = ctx.blocked.find(r);
  if (it == ctx.blocked.end()) return false;
  // Where the rank really waits: its oldest pending op, which holds its stream (or its host);
  // everything it issued later only queues behind that one.
  std::pair<int, int64_t> head{-1, INT64_MAX};
  for (const auto& b : it->second)
    if (head.first < 0 || b.second < head.second) head = b;
  if (head.first == s.comm) return false;
  if (s.fraction > 0.5) return true;  // most members "missing" here are stuck elsewhere
  if (s.kind == "stuck_in_collective") return true;  // stream order: the older op holds the GPU
  // Never came: explained only if it was already stuck elsewhere when the others arrived.
  return head.second < s.t_start;
}

json stall_json(const Ctx& ctx, const Stall& s, const std::vector<std::vector<Frontier>>& coll_fr,
                const std::vector<std::vector<Frontier>>& p2p_fr) {
  const Model& m = ctx.m;
  json j;
  j["kind"] = s.kind;
  j["summary"] = s.summary;
  if (s.comm >= 0) {
    const Comm& c = m.comms[s.comm];
    j["comm"] = comm_json(c);
    j["seq"] = s.seq;
    j["seq_kind"] = s.api ? "api" : s.p2p ? "p2p" : "coll";
    j["op"] = s.op;
  }
  j["culprit_ranks"] = s.culprits;
  if (!s.blocked.empty()) j["blocked_ranks"] = s.blocked;
  if (!s.mismatch.is_null()) j["mismatch"] = s.mismatch;
  for (auto& [k, v] : s.extra.items()) j[k] = v;
  json ev = json::array();
  if (s.comm >= 0) {
    const Comm& c = m.comms[s.comm];
    const auto& fr = s.p2p ? p2p_fr[s.comm] : coll_fr[s.comm];
    std::set<int> culprits(s.culprits.begin(), s.culprits.end());
    for (size_t i = 0; i < c.members.size() && i < fr.size(); ++i) {
      const Proc& p = m.procs[c.members[i].proc];
      if (!ctx.rank_filter.empty() && !ctx.rank_filter.count(p.rank)) continue;
      // Point-to-point involves few members of a large communicator: show those.
      if (s.p2p && !culprits.count(p.rank) &&
          std::find(s.blocked.begin(), s.blocked.end(), p.rank) == s.blocked.end())
        continue;
      const Frontier& f = fr[i];
      std::string state;
      if (s.api) state = std::find(s.blocked.begin(), s.blocked.end(), p.rank) != s.blocked.end() ? "in_call" : "not_entered";
      else if (!p.alive && p.snapshot && s.kind == "rank_dead") state = "dead";
      else if (f.enq < s.seq && !s.p2p) state = "not_entered";
      else if (f.completed >= s.seq && !s.p2p) state = "completed";
      else if (!f.tracked) state = "entered";
      else if (s.p2p) state = f.completed >= f.enq ? "completed" : f.started >= f.enq ? "started" : "enqueued";
      else if (f.started >= s.seq) state = "started";
      else state = "enqueued";
      if (!p.alive && p.snapshot) state += ",dead";
      json e = member_evidence(m, c.members[i], f, state);
      if (culprits.count(p.rank)) e["culprit"] = true;
      ev.push_back(std::move(e));
    }
    if (s.extra.contains("missing_members"))
      for (const auto& mm : s.extra["missing_members"])
        if (ctx.rank_filter.empty() || (mm["global_rank"].is_number() && ctx.rank_filter.count(mm["global_rank"].get<int>())))
          ev.push_back({{"rank", mm["global_rank"]}, {"rank_in_comm", mm["rank_in_comm"]}, {"state", "missing"}});
  }
  j["evidence"] = ev;
  return j;
}

}  // namespace

nlohmann::json analyze_model(const Model& m, const Options& opts) {
  Ctx ctx{m, opts, {}, {}, json::array(), {}, {}};
  ctx.rank_filter.insert(opts.ranks.begin(), opts.ranks.end());

  json doc;
  doc["schema"] = "fr-analysis/1";
  json skipped = json::array();
  for (const auto& s : m.skipped) skipped.push_back({{"file", s.file}, {"error", s.error}});
  json warnings = json::array();  // files that were read: remarks, not failures
  for (const auto& w : m.warnings) warnings.push_back({{"file", w.file}, {"warning", w.error}});
  doc["inputs"] = {{"paths", m.paths},
                   {"files_read", m.files_read},
                   {"skipped", skipped},
                   {"warnings", warnings},
                   {"clock", m.clock_aligned ? "aligned" : "per_host"}};
  if (!m.job_id.empty()) doc["inputs"]["job_id"] = m.job_id;
  if (!opts.ranks.empty() || !opts.comm.empty())
    doc["inputs"]["filters"] = {{"ranks", opts.ranks}, {"comm", opts.comm}};

  // Ranks: expected, found, missing, dead.
  std::vector<int> found, missing, dead, died;  // died: dead without leaving in order
  std::set<int> found_set;
  for (const auto& p : m.procs) {
    found.push_back(p.rank);
    found_set.insert(p.rank);
    if (!p.alive) dead.push_back(p.rank);
    if (!p.alive && !left_in_order(p) && std::find(died.begin(), died.end(), p.rank) == died.end())
      died.push_back(p.rank);
  }
  int expected = std::max(std::min(m.expected_ranks, kMaxRanks), found.empty() ? 0 : found.back() + 1);
  for (int r = 0; r < expected; ++r)
    if (!found_set.count(r)) missing.push_back(r);
  ctx.job_missing.insert(missing.begin(), missing.end());

  // Per communicator: frontiers and stalls.
  std::vector<std::vector<Frontier>> coll_fr(m.comms.size()), p2p_fr(m.comms.size());
  json comms = json::array();
  for (int ci = 0; ci < static_cast<int>(m.comms.size()); ++ci) {
    json cf = nullptr, pf = nullptr;
    size_t before = ctx.stalls.size();
    analyze_collectives(ctx, ci, coll_fr[ci], &cf);
    analyze_p2p(ctx, ci, p2p_fr[ci], &pf);
    analyze_joining(ctx, ci);
    if (!comm_matches(m.comms[ci], opts.comm)) continue;
    json cj = communicator_json(m, m.comms[ci]);
    cj["frontier"] = {{"coll", cf}, {"p2p", pf}, {"stalled", ctx.stalls.size() > before}};
    auto mm = missing_members(m, m.comms[ci], ctx.job_missing);
    if (!mm.empty()) {
      json mj = json::array();
      for (const auto& x : mm) mj.push_back({{"rank_in_comm", x.rank_in_comm}, {"global_rank", x.global >= 0 ? json(x.global) : json(nullptr)}});
      cj["missing_members"] = mj;
    }
    comms.push_back(std::move(cj));
  }

  // Rank the stalls: roots first (culprits blocked nowhere else), then the kind that explains
  // the most (mismatch, never entered, unmatched p2p, stuck), then the smallest share of culprits,
  // then the earliest, then the id for a stable order.
  for (auto& s : ctx.stalls) {
    size_t ex = 0;
    for (size_t k = 0; k < s.culprits.size(); ++k) ex += explained(ctx, s, k);
    s.tier = s.culprits.empty() ? 2 : ex == 0 ? 0 : ex < s.culprits.size() ? 1 : 2;
  }
  std::stable_sort(ctx.stalls.begin(), ctx.stalls.end(), [&](const Stall& a, const Stall& b) {
    if (a.tier != b.tier) return a.tier < b.tier;
    if (a.prio != b.prio) return a.prio < b.prio;
    if (a.fraction != b.fraction) return a.fraction < b.fraction;
    if (a.t_start != b.t_start) return a.t_start < b.t_start;
    return m.comms[a.comm].id < m.comms[b.comm].id;
  });

  // A stall is a hang only while someone waits; a mismatch that every member got through is
  // still a finding but not by itself a hang... unless nothing else is wrong, where it is the
  // best explanation of what the user saw.
  std::vector<json> findings;
  json verdict;
  const bool any_stall = !ctx.stalls.empty();
  std::set<int> dead_set(died.begin(), died.end());
  const bool all_dead = !m.procs.empty() && dead.size() == m.procs.size();

  // Hosts wholly missing or dead.
  std::map<std::string, std::pair<std::vector<int>, bool>> hosts;  // host -> (ranks, all dead)
  for (const auto& p : m.procs) {
    auto& h = hosts[p.host];
    h.first.push_back(p.rank);
    if (h.first.size() == 1) h.second = true;
    if (p.alive) h.second = false;
  }
  std::vector<std::string> lost_hosts;
  std::vector<int> lost_ranks;
  for (const auto& mh : m.manifest_hosts)
    if (!hosts.count(mh) && !missing.empty()) {
      if (std::find(lost_hosts.begin(), lost_hosts.end(), mh) == lost_hosts.end()) lost_hosts.push_back(mh);
    }
  if (!lost_hosts.empty()) lost_ranks = missing;
  if (!all_dead && hosts.size() >= 2 && any_stall)
    for (const auto& [h, v] : hosts)
      if (v.second) {
        lost_hosts.push_back(h);
        lost_ranks.insert(lost_ranks.end(), v.first.begin(), v.first.end());
      }
  std::sort(lost_ranks.begin(), lost_ranks.end());

  std::vector<Stall> ordered = std::move(ctx.stalls);
  if (!lost_hosts.empty() && (any_stall || lost_ranks.size() == missing.size())) {
    Stall s;
    s.kind = "node_lost";
    s.culprits = lost_ranks;
    std::string hl;
    for (const auto& h : lost_hosts) hl += (hl.empty() ? "" : ", ") + h;
    s.summary = "node" + std::string(lost_hosts.size() > 1 ? "s " : " ") + hl + " lost: rank" +
                (lost_ranks.size() > 1 ? "s " : " ") + ranks_text(lost_ranks) + " " +
                (lost_ranks.size() > 1 ? "are" : "is") + " missing or dead";
    // Borrow the comm and op of the first stall that waits on them, for the evidence.
    for (const auto& st : ordered) {
      bool hit = false;
      for (int r : st.culprits) hit |= std::binary_search(lost_ranks.begin(), lost_ranks.end(), r);
      if (hit || st.kind == "incomplete") {
        s.comm = st.comm, s.seq = st.seq, s.p2p = st.p2p, s.api = st.api, s.op = st.op, s.extra = st.extra;
        s.summary += "; the others wait in " + st.op + " #" + std::to_string(st.seq) + " on comm " +
                     comm_text(m.comms[st.comm]);
        break;
      }
    }
    ordered.insert(ordered.begin(), std::move(s));
  } else if (any_stall && !died.empty() && !all_dead) {
    Stall s;
    s.kind = "rank_dead";
    s.culprits = died;
    // The stall a dead rank is a culprit of, else the first one.
    const Stall* base = &ordered.front();
    for (const auto& st : ordered) {
      if (std::any_of(st.culprits.begin(), st.culprits.end(), [&](int r) { return dead_set.count(r) > 0; })) {
        base = &st;
        break;
      }
    }
    s.comm = base->comm, s.seq = base->seq, s.p2p = base->p2p, s.api = base->api, s.op = base->op, s.extra = base->extra;
    s.summary = "rank" + std::string(died.size() > 1 ? "s " : " ") + ranks_text(died) + " died (" +
                (died.size() > 1 ? "their writers were" : "its writer was") + " gone at the dump) while " +
                "others wait in " + base->op + " #" + std::to_string(base->seq) + " on comm " +
                comm_text(m.comms[base->comm]);
    ordered.insert(ordered.begin(), std::move(s));
  }

  for (size_t i = 0; i < ordered.size(); ++i) {
    const Stall& s = ordered[i];
    if (!opts.comm.empty() && s.comm >= 0 && i > 0 && !comm_matches(m.comms[s.comm], opts.comm)) continue;
    json sj = stall_json(ctx, s, coll_fr, p2p_fr);
    if (i == 0) verdict = std::move(sj);
    else findings.push_back(std::move(sj));
  }

  // Skew of arrival at collectives, per rank.
  std::map<int, SkewAcc> acc;
  for (const auto& c : m.comms) accumulate_skew(m, c, &acc);
  struct SkewRow {
    int rank;
    double mean;
    int64_t max;
    uint64_t n;
  };
  std::vector<SkewRow> rows;
  for (const auto& [r, a] : acc)
    if (a.n) rows.push_back({r, a.sum / static_cast<double>(a.n), a.max, a.n});
  std::sort(rows.begin(), rows.end(), [](const SkewRow& a, const SkewRow& b) {
    return a.mean != b.mean ? a.mean > b.mean : a.rank < b.rank;
  });
  json skew = json::array();
  for (const auto& r : rows) {
    if (!ctx.rank_filter.empty() && !ctx.rank_filter.count(r.rank)) continue;
    skew.push_back({{"rank", r.rank}, {"mean_late_ns", static_cast<int64_t>(r.mean)},
                    {"max_late_ns", r.max}, {"collectives", r.n}});
  }
  // A straggler: arrives late by a millisecond or more on average, and several times later than
  // the typical rank. Reported as a finding (kind "skew") with every such rank.
  if (rows.size() >= 2) {
    std::vector<double> means;
    for (const auto& r : rows) means.push_back(r.mean);
    std::nth_element(means.begin(), means.begin() + means.size() / 2, means.end());
    const double median = means[means.size() / 2];
    const double top = rows.front().mean;
    if (top >= 1e6 && top >= 3 * median) {
      std::vector<int> slow;
      for (const auto& r : rows)
        if (r.mean >= top / 2 && r.mean >= 3 * median) slow.push_back(r.rank);
      char buf[96];
      std::snprintf(buf, sizeof buf, "%.1f ms late on average (max %.1f ms; typical rank %.2f ms)",
                    top / 1e6, static_cast<double>(rows.front().max) / 1e6, median / 1e6);
      json f = {{"kind", "skew"},
                {"summary", "straggler: rank" + std::string(slow.size() > 1 ? "s " : " ") + ranks_text(slow) +
                                " arrive" + (slow.size() > 1 ? "" : "s") + " last at collectives, " + buf +
                                (m.clock_aligned ? "" : " (times per host)")},
                {"culprit_ranks", slow},
                {"evidence", json::array()}};
      for (const auto& r : rows)
        if (std::find(slow.begin(), slow.end(), r.rank) != slow.end())
          f["evidence"].push_back({{"rank", r.rank}, {"mean_late_ns", static_cast<int64_t>(r.mean)},
                                   {"max_late_ns", r.max}, {"collectives", r.n}});
      findings.push_back(std::move(f));
    }
  }

  if (verdict.is_null()) {
    if (!missing.empty()) {
      verdict = {{"kind", "incomplete"},
                 {"summary", "no hang among the " + std::to_string(found.size()) + " ranks found, but rank" +
                                 (missing.size() > 1 ? "s " : " ") + ranks_text(missing) +
                                 (missing.size() > 1 ? " have" : " has") + " no dump"},
                 {"culprit_ranks", missing},
                 {"evidence", json::array()}};
    } else {
      std::string extra;
      for (const auto& f : findings)
        if (f["kind"] == "skew") extra = "; " + f["summary"].get<std::string>();
      verdict = {{"kind", "no_hang"},
                 {"summary", "no hang: every communicator's members agree and nothing is left waiting" + extra},
                 {"culprit_ranks", json::array()},
                 {"evidence", json::array()}};
    }
  }

  doc["ranks"] = {{"expected", expected}, {"found", found}, {"missing", missing},
                  {"dead", all_dead && !any_stall ? std::vector<int>{} : dead}};
  if (all_dead && !any_stall) doc["ranks"]["exited"] = dead;
  add_recent_ops(m, &verdict);
  mark_consequences(verdict, &findings);
  doc["verdict"] = verdict;
  doc["findings"] = findings;
  doc["communicators"] = comms;
  doc["skew"] = skew;
  add_context(m, &doc);
  return doc;
}

nlohmann::json analyze_paths(const std::vector<std::string>& paths, const Options& opts,
                             std::string* fatal_error) {
  if (paths.empty()) {
    if (fatal_error) *fatal_error = "no input: give a dump-set directory, a dump file or a PyTorch dump";
    return nullptr;
  }
  Model m = load_model(paths, opts.threads);
  if (m.procs.empty()) {
    if (fatal_error) {
      std::string why = m.skipped.empty() ? "no dump files found"
                                          : m.skipped.front().file + ": " + m.skipped.front().error;
      if (m.skipped.size() > 1) why += " (and " + std::to_string(m.skipped.size() - 1) + " more)";
      *fatal_error = "nothing readable in the input: " + why;
    }
    return nullptr;
  }
  return analyze_model(m, opts);
}

}  // namespace fr::analyzer
