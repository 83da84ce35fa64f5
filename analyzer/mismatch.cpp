// Mismatched collectives: members that called the same sequence number of a communicator with a
// different op, dtype, count, root or reduction. Finds the earliest such sequence number, which
// field differs, the value the members were expected to call (the majority, else the
// communicator's own rhythm) and so the culprits: everyone who called something else.
#include <algorithm>

#include "passes.h"

namespace fr::analyzer {
namespace {

// One member's record of the mismatched sequence number.
struct Row {
  int rank;
  const Op* op;
  const Proc* p;
  const ProcComm* pc;
};

// A compared field: its name in the JSON and its value as text.
struct Field {
  const char* name;
  std::string (*get)(const Op&);
};

const Field kFields[] = {
    {"op", [](const Op& o) { return std::string(fr::log::op_name(o.op)); }},
    {"dtype", [](const Op& o) { return std::string(fr::log::dtype_name(o.dtype)); }},
    {"count",
     [](const Op& o) {
       return (o.flags & kOpUnevenCounts) ? std::string("-") : std::to_string(o.count);
     }},
    {"root",
     [](const Op& o) { return is_rooted(o.op) ? std::to_string(o.peer) : std::string("-"); }},
    {"redop",
     [](const Op& o) {
       return has_redop(o.op) ? std::string(fr::log::redop_name(o.redop)) : std::string("-");
     }},
};

using Groups = std::map<std::string, std::vector<int>>;  // value -> ranks that called it

// One member's history entries for one sequence number: h->sig[at, at + n).
struct Run {
  const Proc* p = nullptr;
  const CollHistory* h = nullptr;
  size_t at = 0, n = 0;
};

bool same_calls(const Run& a, const Run& b) {
  if (a.n != b.n) return false;
  for (size_t k = 0; k < a.n; ++k)
    if (!(a.p->sigs[a.h->sig[a.at + k]] == b.p->sigs[b.h->sig[b.at + k]])) return false;
  return true;
}

// A member's ops of collective number `seq`, in record order (several in a coalesced group).
std::vector<const Op*> ops_at(const Proc& p, const ProcComm& pc, uint64_t seq) {
  std::vector<const Op*> out;
  for_each_op(p, pc, Family::kCollective, [&](const Op& o) {
    if (o.seq == seq) out.push_back(&o);
  });
  return out;
}

// The first field whose values differ among the rows, with the ranks per value.
const Field* differing_field(const std::vector<Row>& rows, Groups* groups) {
  for (const Field& f : kFields) {
    groups->clear();
    for (const Row& r : rows) (*groups)[f.get(*r.op)].push_back(r.rank);
    if (groups->size() > 1) return &f;
  }
  return &kFields[0];  // nothing differs here (the groups are the last field's)
}

// The value everyone was expected to call. The majority value, when there is one. On a tie
// (typically two members, one each), the communicator's own rhythm decides: training loops
// repeat, so the value all members agreed on one period earlier is the expected one. Empty when
// neither tells.
std::string expected_value(const std::vector<Row>& rows, const Field& field, const Groups& groups,
                           uint64_t seq) {
  size_t best = 0, best_n = 0;
  for (const auto& [v, ranks] : groups) best = std::max(best, ranks.size());
  for (const auto& [v, ranks] : groups) best_n += ranks.size() == best;
  if (best_n == 1) {
    for (const auto& [v, ranks] : groups)
      if (ranks.size() == best) return v;
  }
  auto agreed = [&](uint64_t q, std::string* v) {
    bool first = true;
    for (const Row& r : rows) {
      const Op* o = find_seq(*r.p, *r.pc, q, Family::kCollective);
      if (!o) return false;
      std::string x = field.get(*o);
      if (first)
        *v = x, first = false;
      else if (x != *v)
        return false;
    }
    return !first;
  };
  for (uint64_t period = 1; period <= 32 && 2 * period < seq; ++period) {
    bool periodic = true;
    for (uint64_t j = 1; j <= period && periodic; ++j) {
      std::string a, b;
      periodic = agreed(seq - j, &a) && agreed(seq - j - period, &b) && a == b;
    }
    std::string e;
    if (periodic && agreed(seq - period, &e) && groups.count(e)) return e;
  }
  return std::string();
}

// Everyone who called another value than the expected one. Without an expected value, the
// members whose value changed from their own previous call of the same op; failing that, all.
std::set<int> mismatch_culprits(const std::vector<Row>& rows, const Field& field,
                                const Groups& groups, const std::string& expected, uint64_t seq) {
  std::set<int> culprits;
  if (!expected.empty()) {
    for (const auto& [v, ranks] : groups)
      if (v != expected) culprits.insert(ranks.begin(), ranks.end());
    return culprits;
  }
  for (const Row& r : rows) {
    const Op* prev = nullptr;
    for_each_op(*r.p, *r.pc, Family::kCollective, [&](const Op& o) {
      if (o.seq < seq && o.op == r.op->op) prev = &o;
    });
    if (prev && field.get(*prev) != field.get(*r.op)) culprits.insert(r.rank);
  }
  if (culprits.empty() || culprits.size() == rows.size()) {
    culprits.clear();
    for (const Row& r : rows) culprits.insert(r.rank);
  }
  return culprits;
}

}  // namespace

uint64_t earliest_mismatch(const Model& m, const Comm& c) {
  // From the members' collective histories, which loading keeps whole even when it leaves old
  // records out: the signatures of each sequence number, compared across members. A number
  // holds several ops where PyTorch coalesced them (they share one): compared as a list.
  uint64_t lo = UINT64_MAX, hi = 0;
  size_t total = 0;
  for (const auto& mem : c.members) {
    uint64_t l, h;
    size_t n;
    if (!m.procs[mem.proc].comms[mem.pc].history.range(&l, &h, &n)) continue;
    lo = std::min(lo, l);
    hi = std::max(hi, h);
    total += n;
  }
  if (total == 0) return 0;
  // Rings wrapped far apart would make the table huge; the recent end is what matters.
  const uint64_t cap = std::max<uint64_t>(4 * total + 1024, 1 << 20);
  if (hi - lo + 1 > cap) lo = hi - cap + 1;
  struct Slot {
    Run first;  // what the first member to call it called
    bool differs = false;
  };
  std::vector<Slot> slots(hi - lo + 1);
  uint64_t first = 0;
  for (const auto& mem : c.members) {
    const Proc& p = m.procs[mem.proc];
    const CollHistory& h = p.comms[mem.pc].history;
    for (size_t i = 0; i < h.size();) {
      if (h.sig[i] == CollHistory::kNoSig) {
        ++i;
        continue;
      }
      const uint64_t seq = h.seq_at(i);
      size_t j = i + 1;  // the entries with this number
      while (j < h.size() && h.sig[j] != CollHistory::kNoSig && h.seq_at(j) == seq) ++j;
      const Run run{&p, &h, i, j - i};
      i = j;
      if (seq < lo || seq > hi) continue;
      Slot& s = slots[seq - lo];
      if (!s.first.p) {
        s.first = run;
      } else if (!s.differs && !same_calls(s.first, run)) {
        s.differs = true;
        if (first == 0 || seq < first) first = seq;
      }
    }
  }
  return first;
}

namespace {

// Each member's op at the first place where the members' calls of `seq` differ (the first op,
// unless a coalesced group differs further on); members without an op there go to *none.
std::vector<Row> rows_at(const Model& m, const Comm& c, uint64_t seq, std::vector<int>* none) {
  std::vector<std::vector<const Op*>> calls;
  std::vector<std::pair<const Proc*, const ProcComm*>> who;
  for (const auto& mem : c.members) {
    const Proc& p = m.procs[mem.proc];
    const ProcComm& pc = p.comms[mem.pc];
    std::vector<const Op*> ops = ops_at(p, pc, seq);
    if (ops.empty()) continue;
    calls.push_back(std::move(ops));
    who.push_back({&p, &pc});
  }
  size_t k = 0;
  for (bool same = !calls.empty(); same; ++k) {  // no op of it in the window: nothing to compare
    for (const auto& ops : calls)
      same =
          same && k < ops.size() && k < calls[0].size() && sig_of(*ops[k]) == sig_of(*calls[0][k]);
    if (!same) break;
  }
  std::vector<Row> rows;
  for (size_t i = 0; i < calls.size(); ++i) {
    if (k < calls[i].size())
      rows.push_back({who[i].first->rank, calls[i][k], who[i].first, who[i].second});
    else
      none->push_back(who[i].first->rank);
  }
  return rows;
}

}  // namespace

Stall mismatch_stall(const Model& m, int ci, uint64_t seq) {
  const Comm& c = m.comms[ci];
  std::vector<int> none;
  std::vector<Row> rows = rows_at(m, c, seq, &none);
  Groups groups;
  const Field& field = none.empty() ? *differing_field(rows, &groups) : kFields[0];
  if (!none.empty()) {  // some members' group ends before the others': "none" there
    groups.clear();
    for (const Row& r : rows) groups[kFields[0].get(*r.op)].push_back(r.rank);
    groups["none"] = none;
  }
  const std::string expected = expected_value(rows, field, groups, seq);
  const std::set<int> culprits = mismatch_culprits(rows, field, groups, expected, seq);

  Stall s;
  s.kind = VerdictKind::kMismatch;
  s.comm = ci;
  s.seq = seq;
  s.culprits.assign(culprits.begin(), culprits.end());
  s.mismatch = Mismatch{field.name, {}, expected};
  for (const auto& [v, ranks] : groups) s.mismatch->values.push_back({v, ranks});
  // The op as the majority called it.
  for (const Row& r : rows) {
    if (!culprits.count(r.rank) || s.op.empty()) s.op = fr::log::op_name(r.op->op);
    s.t_start = std::min(s.t_start, aligned(*r.p, r.op->call_ns));
  }
  for (const Row& r : rows)
    if (!culprits.count(r.rank) && (r.op->gpu_state != FR_GPU_COMPLETED))
      s.blocked.push_back(r.rank);
  std::string odd;
  for (const auto& [v, ranks] : groups)
    if (v != expected)
      odd +=
          (odd.empty() ? "" : ", ") + v + " on " + ranks_word(ranks.size()) + rank_list_text(ranks);
  std::string replay;
  for (const Row& r : rows)
    if (const ReplayTag* t = replay_of(*r.p, r.op);
        t && replay.empty() && !culprits.count(r.rank)) {
      replay = replay_text(*t);
      s.extra["graph_replay"] = replay_json(*t, *r.op);
    }
  s.summary = "mismatch in " + s.op + " #" + std::to_string(seq) + " on comm " + comm_text(c) +
              replay + ": " + field.name + " differs (" +
              (expected.empty() ? "" : "expected " + expected + "; ") + odd + ")";
  return s;
}

}  // namespace fr::analyzer
