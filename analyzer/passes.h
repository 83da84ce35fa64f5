// What the analysis passes share (internal to the analyzer library). The analysis runs in passes,
// one per unit:
//   - frontier.cpp: where each member of a communicator stands (its frontier), and who is missing;
//   - match_collectives.cpp, mismatch.cpp, match_joining.cpp, match_p2p.cpp: cross-rank matching
//     per kind of op, each turning what does not line up into Stalls;
//   - ranking.cpp: orders the stalls (the one that explains the others first);
//   - overrides.cpp: dead ranks and lost nodes, which override the ranked verdict;
//   - evidence.cpp and skew.cpp: each stall as a Finding with its evidence rows, and the per-rank
//     lateness at collectives;
//   - context.cpp: stacks and GPU health joined in after the verdict;
//   - torch_join.cpp: torch's process groups joined to fr's communicators, and the Python call
//     site of the op a verdict names, from torch's dumps;
//   - analyze.cpp: runs the passes in order and assembles the Analysis (result.h).
// The passes read the Model and add to one AnalysisState; nothing here is global.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "analyzer/html.h"
#include "analyzer/model.h"
#include "analyzer/result.h"
#include "analyzer/verdicts.h"
#include "fr/nccl_api.h"

namespace fr::analyzer {

// More ranks than any job has: sizes beyond this come from damaged input.
inline constexpr int kMaxRanks = 1 << 20;

// Whether members must agree on an op's root and on its reduction: the rooted and reducing
// columns of the NCCL API list (fr/nccl_api.def), so that matching compares the right fields.
inline bool is_rooted(uint16_t op) { return fr::nccl_op(op).rooted; }
inline bool has_redop(uint16_t op) { return fr::nccl_op(op).reducing; }
// An op's kind from the format's list (fr::log::op_is_collective, op_is_p2p and op_is_nixl,
// inline: the passes and the loading ask it for every record). NIXL calls belong to no
// communicator: the loading keeps them apart (Proc::nixl_calls).
enum class OpClass : uint8_t { API, COLL, P2P, NIXL };
inline OpClass op_class(uint16_t op) {
  switch (op) {
#define FR_X(e, v, s, kind) \
  case v: return OpClass::kind;
    FR_OP_LIST(FR_X)
#undef FR_X
  }
  return OpClass::API;
}

// Captured ops (run by graph replays instead) and ops that never launched take no sequence number
// of their own in the matching.
inline bool counts(const Op& o) {
  return !(o.flags & (FR_REC_F_CAPTURED | FR_REC_F_NEVER_LAUNCHED));
}

// The two sequence-number families NCCL counts per communicator.
enum class Family { kCollective, kP2p };

inline bool in_family(const Op& o, Family family) {
  return counts(o) && op_class(o.op) == (family == Family::kP2p ? OpClass::P2P : OpClass::COLL);
}

// What a collective's arguments are compared by (SigKey): a PyTorch all_to_all's count is no
// part of it (kOpUnevenCounts).
inline SigKey sig_of(const Op& o) {
  return SigKey{o.op, o.dtype, has_redop(o.op) ? o.redop : -1, is_rooted(o.op) ? o.peer : -1,
                (o.flags & kOpUnevenCounts) ? 0 : o.count};
}

// Calls f(op) for every counted op of `family` a member recorded on one communicator, in record order.
template <class F>
void for_each_op(const Proc& p, const ProcComm& pc, Family family, F&& f) {
  for (uint32_t i = pc.ops_begin; i < pc.ops_end; ++i)
    if (in_family(p.ops[i], family)) f(p.ops[i]);
}

// Calls f(member, proc, op) for every counted op of `family` on communicator `c`, member by member.
template <class F>
void for_each_member_op(const Model& m, const Comm& c, Family family, F&& f) {
  for (const auto& mem : c.members) {
    const Proc& p = m.procs[mem.proc];
    for_each_op(p, p.comms[mem.pc], family, [&](const Op& o) { f(mem, p, o); });
  }
}

inline int64_t aligned(const Proc& p, uint64_t t) {
  return static_cast<int64_t>(t) + p.clock_offset_ns;
}

// "rank 3" or "ranks 3-5": the word agrees with the list.
inline std::string ranks_word(size_t n) { return n > 1 ? "ranks " : "rank "; }

// One member's frontier on one communicator, for one family: the highest sequence numbers it
// enqueued, its GPU started and its GPU completed, with their records when still in the ring.
struct Frontier {
  uint64_t enq = 0, started = 0, completed = 0;
  const Op* last_enq = nullptr;
  const Op* last_started = nullptr;
  const Op* last_completed = nullptr;
  bool tracked = true;  // false: this member's GPU progress cannot be told
};

Frontier frontier(const Proc& p, const ProcComm& pc, Family family);
// The member's record of sequence number `seq`, or nullptr when it is not in the ring.
const Op* find_seq(const Proc& p, const ProcComm& pc, uint64_t seq, Family family);
// Whether find_seq(seq) answers the same from the window as from every record (window.cpp).
bool window_reaches(const Proc& p, const ProcComm& pc, uint64_t seq, Family family);

// A member of a communicator without a dump: its rank in the communicator, and its global rank
// when it can be told (-1 otherwise).
struct Missing {
  int rank_in_comm;
  int global;
};
std::vector<Missing> missing_members(const Model& m, const Comm& c,
                                     const std::set<int>& job_missing);
nlohmann::json missing_json(const std::vector<Missing>& missing);

// A problem found on one communicator: what the matching passes produce and the ranking orders.
//
// How stalls are ranked (ranks_before in ranking.cpp, in this order):
//   1. tier: whether the culprits are the root of the hang. 0 when no culprit is explained by
//      waiting in another communicator, 1 when some are, 2 when all are (or nobody is blamed).
//      A culprit that waits elsewhere is a victim, not a cause; `explained` decides, and uses
//      `fraction` and `t_start` to tell "never came because it was stuck elsewhere first".
//   2. kind: the order of FR_VERDICT_KINDS (verdicts.h): a mismatch explains more than a member
//      that never entered, which explains more than unmatched point-to-point, and so on.
//   3. fraction: the share of the communicator's members blamed; fewer is more specific.
//   4. t_start: the earliest, as the first thing to go wrong usually explains the rest.
//   5. the communicator id, for a stable order.
// `p2p` and `host_call` say which counter `seq` belongs to; they are no part of the ranking
// (a stall in a blocking host call has no sequence number: seq_kind "api" in the JSON).
struct Stall {
  VerdictKind kind = VerdictKind::kStuckInCollective;
  int comm = -1;  // index into Model::comms; -1 for the NIXL kinds
  uint64_t seq = 0;
  bool p2p = false;        // seq counts point-to-point ops, not collectives
  bool host_call = false;  // a blocking host call (communicator creation), no seq
  std::string op;
  std::vector<int> culprits;      // global ranks
  std::vector<int> culprit_pids;  // NIXL kinds: the remote agent's processes (ranked or not)
  std::vector<int> blocked;       // global ranks waiting in it
  std::string summary;
  std::optional<Mismatch> mismatch;
  nlohmann::json extra = nlohmann::json::object();  // group, missing members, graph replay...
  int64_t t_start = INT64_MAX;                      // earliest aligned call time of the stalled op
  int tier = 2;
  double fraction = 1.0;
};

// The analysis state the passes share.
struct AnalysisState {
  const Model& model;
  const Options& opts;
  std::vector<Stall> stalls;
  // Per global rank: where it waits (comm index, or kNixlWait for a stalled NIXL transfer; since
  // aligned time).
  std::map<int, std::vector<std::pair<int, int64_t>>> blocked;
  std::set<int> rank_filter;
  std::set<int> job_missing;  // global ranks expected but without a dump
  // Per communicator, each member's frontier (in Comm::members order), per family.
  std::vector<std::vector<Frontier>> coll_frontiers, p2p_frontiers;
  // Set by a pass when the windowed records (LoadMode::kWindow) cannot decide its case exactly:
  // the analysis is then made again from every record.
  bool needs_history = false;
};

// Inside an all-entered collective (channels.cpp): from the members' channel slots, the channel
// and step that stopped, the waiting rank, its peer, the transport and the direction. Fills
// s.extra["where"] and s.extra["channel_progress"], names the culprits and extends the summary;
// leaves `s` as it is when the dumps hold no channel progress for the op.
// `not_started` (global ranks): members whose GPU never started the op. When there are some, only
// a stopped connection that blames one of them localizes the stall: such a GPU holds its ring
// neighbours back, and their waits (over NCCL's many steps) would otherwise point at whoever sits
// next to a connection without proxy events.
void localize_in_channels(const Model& m, const Comm& c, const std::string& where,
                          const std::vector<int>& not_started, Stall& s);

// --- The matching passes, one communicator at a time (ci: index into Model::comms) ----------

// Collectives: frontiers, the stalled sequence number, and its stall. *spread gets how far the
// members got (left empty when the communicator has no member).
void analyze_collectives(AnalysisState& state, int ci, std::optional<Spread>* spread);
// Point-to-point: sends against receives, signals against waits.
void analyze_p2p(AnalysisState& state, int ci, std::optional<Spread>* spread);
// PyTorch groups of two whose members counted a different number of unrecorded ops (gloo's
// send and recv, seen only in op_id) between the same two collectives (torch_infer.cpp).
void analyze_unrecorded_p2p(AnalysisState& state, int ci);
// PyTorch all_to_all whose totals over the group cannot match: a mismatch (torch_args.cpp).
void analyze_alltoall_totals(AnalysisState& state, int ci);
// Outputs unlike their inputs and mixed recorder versions in PyTorch dumps: findings of kind
// `inconsistent`, which cannot hang a job (torch_args.cpp); on the communicators `comm_filter`
// keeps (--comm), and job-wide.
std::vector<Finding> torch_arg_findings(const Model& m, const std::string& comm_filter);
// Blocking host calls every member must make (communicator creation, split, shrink, grow).
void analyze_joining(AnalysisState& state, int ci);

// The earliest sequence number where members called different things; 0 when none.
uint64_t earliest_mismatch(const Model& m, const Comm& c);
// The mismatch stall at `seq`: the field, the values with their ranks, the minority.
Stall mismatch_stall(const Model& m, int ci, uint64_t seq);

// NIXL transfers (nixl.cpp): a stall per remote agent with transfers in flight past
// Options::nixl_stall_ns (nixl_stalled) or failed by a remote disconnect (nixl_disconnected).
// Their posting processes are blocked at kNixlWait (AnalysisState::blocked).
inline constexpr int kNixlWait = -2;
void analyze_nixl(AnalysisState& state);
// Bytes from a log's NIXL fields (agent names, backend, notification) as text: printable ASCII
// as it is, a backslash and every other byte as \xNN.
std::string nixl_text(const std::string& raw);

// --- Ranking and overrides ----------------------------------------------------------------

// Sorts state.stalls, the one that explains the others first (see Stall).
void rank_stalls(AnalysisState& state);

// The job's ranks, as the overrides and the document need them.
struct RankCensus {
  std::vector<int> found, missing, dead;
  std::vector<int> died;   // dead without leaving in order (stale dumps too)
  std::vector<int> stale;  // whose dump is stale (Proc::stale)
  int expected = 0;
  bool all_dead = false;
};
RankCensus take_census(const Model& m);

// Puts a node_lost or rank_dead stall in front of the ranked ones when nodes were lost or ranks
// died while others wait.
void apply_overrides(const Model& m, const RankCensus& census, std::vector<Stall>* ranked);

// --- Evidence -----------------------------------------------------------------------------

CommRef comm_ref(const Comm& c);
Communicator communicator_of(const Model& m, const Comm& c);
nlohmann::json replay_json(const ReplayTag& t, const Op& o);
std::string replay_text(const ReplayTag& t);
// A stall as a verdict or finding: kind, summary, comm, culprits and per-member evidence.
Finding finding_of(const AnalysisState& state, const Stall& s);
// Adds each member's last records on the verdict's communicator to its evidence.
void add_recent_ops(const Model& m, Finding* verdict);
// Marks findings the verdict already accounts for (consequence_of).
void mark_consequences(const Finding& verdict, std::vector<Finding>* findings);

// --- Skew ---------------------------------------------------------------------------------

// Per rank, how late it arrives at collectives (filtered by state.rank_filter), and when some
// ranks are much later than the rest, the straggler finding (null otherwise).
struct SkewResult {
  std::vector<SkewRow> table;
  std::optional<Finding> straggler;
};
SkewResult measure_skew(const AnalysisState& state);

// --- Fail-slow (slow.cpp) -------------------------------------------------------------------

// One finding of kind slow per rank that consistently keeps the others waiting at collectives,
// with its cause (host, or gpu from the heartbeat history or its GPU's throttling) and what it
// costs the job; and from the heartbeat history, slow GPUs whose hosts are not late and slow links.
std::vector<Finding> find_slow(const AnalysisState& state);

// --- The heartbeats' history (node_files.cpp, slow_history.cpp) ------------------------------

// Reads a dump set directory's <node>.gpu.json and <node>.slow_history.json into the model.
void load_node_files(const std::string& dir, Model* model);

// What the nodes' heartbeat histories say, judged by the live detector's rules (common/slow_rule.h).
struct HistoryGpu {  // a rank whose GPU takes longer than its peers' for the same op
  int rank = -1;
  uint64_t comm = 0;
  uint32_t op = 0;
  double ratio = 0, bar = 0;  // its worst op's ratio and the bar it was judged against
  int64_t value_ns = 0, others_ns = 0;
  uint32_t samples = 0;     // its GPU times of that op
  bool op_sampled = false;  // that op's times (some members') from the sampled markers
  // Over every op it was judged at: whether some times were sampled, and the highest bar
  // (fr::slow::gpu_clear's inputs).
  bool sampled = false;
  double max_bar = 0, max_ratio = 0;
};
struct HistoryLink {  // a link whose steps are slow: `src` sends to `dst` (global ranks)
  int src = -1, dst = -1, channel = -1;
  uint64_t comm = 0;
  double factor = 0, share = 0, others_share = 0;  // shares on the wire (0: by step times)
  int64_t value_ns = 0, others_ns = 0;
  uint32_t sampled = 0;
};
struct HistoryBusy {  // a rank's GPU in flight against its peers' since it turned late
  bool judged = false, gpu = false;
  double share = 0, peers = 0;
  uint32_t samples = 0;
};
// The slow GPUs; `judged` (when given) gets every member judged, slow or not.
std::vector<HistoryGpu> history_gpus(const Model& m, std::vector<HistoryGpu>* judged = nullptr);
std::vector<HistoryLink> history_links(const Model& m);
// For a rank late on communicator `comm` since its collective `since_seq`.
HistoryBusy history_busy(const Model& m, int rank, uint64_t comm, uint64_t since_seq);

}  // namespace fr::analyzer
