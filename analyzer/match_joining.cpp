// Matching of the blocking host calls every member of a communicator must make: creation (init),
// split, shrink and grow. Members still inside one wait for the members that never made it: a
// hang before the first collective, which sequence numbers cannot show. A shrink waits only for
// the members it keeps; a grow also waits for the ranks joining it.
#include <algorithm>

#include "passes.h"

namespace fr::analyzer {
namespace {

// The parent ranks a CommShrink record of `p` excludes, ascending (empty: none known).
const std::vector<int32_t>& shrink_excluded(const Proc& p, const Op* o) {
  static const std::vector<int32_t> kNone;
  if (o == nullptr || o->op != FR_OP_COMM_SHRINK) return kNone;
  const uint32_t at = static_cast<uint32_t>(o - p.ops.data());
  auto it = std::lower_bound(p.shrinks.begin(), p.shrinks.end(), at,
                             [](const auto& e, uint32_t i) { return e.first < i; });
  return it != p.shrinks.end() && it->first == at ? it->second : kNone;
}

bool is_joining_call(uint16_t op) {
  return op == FR_OP_COMM_INIT_RANK || op == FR_OP_COMM_INIT_RANK_CONFIG ||
         op == FR_OP_COMM_INIT_RANK_SCALABLE || op == FR_OP_COMM_SPLIT || op == FR_OP_COMM_SHRINK ||
         op == FR_OP_COMM_GROW;
}

// Who is in the call and who is not.
struct Attendance {
  std::vector<int> waiting;                         // global ranks inside the call
  std::vector<std::pair<int, int>> absent_members;  // (global rank, rank in comm) of the others
  const Op* sample = nullptr;                       // the first waiting member's record
  const Proc* sample_proc = nullptr;
  int64_t since = INT64_MAX;  // earliest aligned call time
};

Attendance take_attendance(AnalysisState& state, int ci) {
  const Model& m = state.model;
  Attendance a;
  for (const auto& mem : m.comms[ci].members) {
    const Proc& p = m.procs[mem.proc];
    const ProcComm& pc = p.comms[mem.pc];
    const Op* in_call = nullptr;
    for (uint32_t i = pc.ops_begin; i < pc.ops_end; ++i) {
      const Op& o = p.ops[i];
      if (is_joining_call(o.op) && (o.flags & FR_REC_F_IN_CALL) && o.result == FR_RESULT_PENDING)
        in_call = &o;
    }
    if (!in_call) {
      a.absent_members.emplace_back(p.rank, mem.rank_in_comm);
      continue;
    }
    a.waiting.push_back(p.rank);
    if (!a.sample) a.sample = in_call, a.sample_proc = &p;
    const int64_t t = aligned(p, in_call->call_ns);
    a.since = std::min(a.since, t);
    state.blocked[p.rank].push_back({ci, t});
  }
  return a;
}

// The ranks a grow waits for that are no members of the parent: the joiners. Its members know how
// many (nRanks, the record's count); the job's ranks that are in no dump, or members of no
// communicator of this lineage, are who they would be. Returns how many joiners there are.
size_t grow_joiners(const AnalysisState& state, const Comm& c, const Op& grow,
                    std::vector<int>* named) {
  const Model& m = state.model;
  const size_t joiners = static_cast<size_t>(grow.count) - static_cast<size_t>(c.size);
  std::set<int> members;
  for (const auto& mem : c.members) members.insert(m.procs[mem.proc].rank);
  std::vector<int> candidates(state.job_missing.begin(), state.job_missing.end());
  for (const auto& p : m.procs)
    if (!members.count(p.rank) && !p.alive &&
        std::find(candidates.begin(), candidates.end(), p.rank) == candidates.end())
      candidates.push_back(p.rank);  // an earlier process of a rank that left
  std::sort(candidates.begin(), candidates.end());
  for (size_t i = 0; i < candidates.size() && i < joiners; ++i) named->push_back(candidates[i]);
  return joiners;
}

}  // namespace

void analyze_joining(AnalysisState& state, int ci) {
  const Model& m = state.model;
  const Comm& c = m.comms[ci];
  const Attendance a = take_attendance(state, ci);
  if (a.waiting.empty()) return;
  // A shrink waits only for the members it keeps: the ones its record excludes are not expected.
  const std::vector<int32_t>& excluded = shrink_excluded(*a.sample_proc, a.sample);
  auto is_excluded = [&](int rank_in_comm) {
    return std::binary_search(excluded.begin(), excluded.end(), rank_in_comm);
  };
  std::vector<int> absent, excluded_global;
  for (const auto& [global, in_comm] : a.absent_members)
    (is_excluded(in_comm) ? excluded_global : absent).push_back(global);
  std::vector<int> missing_global;
  size_t missing_n = 0;
  for (const auto& x : missing_members(m, c, state.job_missing)) {
    if (is_excluded(x.rank_in_comm)) continue;
    ++missing_n;
    if (x.global >= 0) missing_global.push_back(x.global);
  }
  if (a.sample->op == FR_OP_COMM_GROW && c.size > 0 &&
      a.sample->count > static_cast<uint64_t>(c.size) && absent.empty())
    missing_n += grow_joiners(state, c, *a.sample, &missing_global);
  if (absent.empty() && missing_n == 0) return;  // everyone is in it: it is about to return

  Stall s;
  s.comm = ci;
  s.seq = 0;
  s.host_call = true;
  s.op = fr::log::op_name(a.sample->op);
  s.t_start = a.since;
  s.blocked = a.waiting;
  const std::string where = s.op + " on comm " + comm_text(c);
  if (!absent.empty()) {
    s.kind = VerdictKind::kNotEntered;
    s.culprits = absent;
    s.culprits.insert(s.culprits.end(), missing_global.begin(), missing_global.end());
    s.summary = ranks_word(s.culprits.size()) + rank_list_text(s.culprits) + " never called " +
                where + "; " + std::to_string(a.waiting.size()) + " wait in it";
  } else {
    s.kind =
        missing_global.size() == missing_n ? VerdictKind::kNotEntered : VerdictKind::kIncomplete;
    s.culprits = missing_global;
    s.summary = std::to_string(a.waiting.size()) + " member" +
                (a.waiting.size() > 1 ? "s wait" : " waits") + " in " + where + " for " +
                std::to_string(missing_n) + " that never joined" +
                (missing_global.empty() ? ""
                                        : " (" + ranks_word(missing_global.size()) +
                                              rank_list_text(missing_global) + ", no dump)");
  }
  if (!excluded.empty()) {
    s.extra["shrink_excluded"] = excluded;  // ranks in the parent communicator
    if (!excluded_global.empty())
      s.summary += " (" + ranks_word(excluded_global.size()) + rank_list_text(excluded_global) +
                   " excluded by the shrink)";
  }
  s.fraction = static_cast<double>(s.culprits.size()) /
               static_cast<double>(std::max<size_t>(1, c.members.size()));
  state.stalls.push_back(std::move(s));
}

}  // namespace fr::analyzer
