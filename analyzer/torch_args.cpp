// What PyTorch's entries say of their inputs and outputs (Proc::torch_io) and of the recorder
// that wrote them (Proc::torch_version), checked within and across ranks:
//   - all_to_all and all_to_all_single: torch runs them as grouped sends and receives, so each
//     member's counts may differ (kOpUnevenCounts), but what the members send in all is what
//     they receive in all. Totals that cannot match are a mismatch (some receive waits for data
//     no send carries: the hang's cause). The ranks whose own input and output differ are named
//     when every other member's agree; otherwise which rank is wrong cannot be told;
//   - an output unlike its input where the op keeps it (all_reduce: its count; every op but
//     gather, scatter and broadcast: its dtype): NCCL moves the input's count and dtype, so this
//     cannot hang the job. A finding of kind `inconsistent` naming the ranks, never the verdict;
//   - dumps written by recorders of different versions: a finding of the same kind.
#include <algorithm>
#include <map>
#include <set>
#include <tuple>
#include <unordered_map>

#include "passes.h"

namespace fr::analyzer {
namespace {

using fr::analyzer::torch::TorchIo;

// A member's all_to_all entries on communicator `id`, by collective number.
std::unordered_map<uint64_t, const TorchIo*> alltoalls(const Proc& p, uint64_t id) {
  std::unordered_map<uint64_t, const TorchIo*> out;
  for (const auto& io : p.torch_io)
    if (io.comm_id == id && io.op == FR_OP_ALLTOALL) out.emplace(io.seq, &io);
  return out;
}

bool torch_only(const Model& m, const Comm& c) {
  if (c.members.empty()) return false;
  for (const auto& mem : c.members)
    if (m.procs[mem.proc].source_kind != "torch") return false;
  return true;
}

std::string io_text(const TorchIo& io) {
  return std::to_string(io.in_count) + " in, " + std::to_string(io.out_count) + " out";
}

}  // namespace

void analyze_alltoall_totals(AnalysisState& state, int ci) {
  const Model& m = state.model;
  const Comm& c = m.comms[ci];
  // Every member's dump is needed: the totals are over the whole group.
  if (!torch_only(m, c) || c.size <= 0 || static_cast<int>(c.members.size()) != c.size) return;
  std::vector<std::unordered_map<uint64_t, const TorchIo*>> by_member;
  for (const auto& mem : c.members) by_member.push_back(alltoalls(m.procs[mem.proc], c.id));
  std::vector<uint64_t> seqs;
  for (const auto& [seq, io] : by_member.front()) seqs.push_back(seq);
  std::sort(seqs.begin(), seqs.end());
  for (uint64_t seq : seqs) {
    std::vector<const TorchIo*> ios;
    uint64_t in = 0, out = 0;
    for (const auto& member : by_member) {
      auto it = member.find(seq);
      if (it == member.end()) break;
      ios.push_back(it->second);
      in += it->second->in_count, out += it->second->out_count;
    }
    if (ios.size() != c.members.size() || in == out) continue;
    Stall s;
    s.kind = VerdictKind::kMismatch;
    s.comm = ci;
    s.seq = seq;
    s.op = fr::log::op_name(FR_OP_ALLTOALL);
    std::vector<int> uneven;
    std::map<std::string, std::vector<int>> values;
    for (size_t i = 0; i < ios.size(); ++i) {
      const Proc& p = m.procs[c.members[i].proc];
      if (ios[i]->in_count != ios[i]->out_count) uneven.push_back(p.rank);
      values[io_text(*ios[i])].push_back(p.rank);
      const Op* o = find_seq(p, p.comms[c.members[i].pc], seq, Family::kCollective);
      if (o) s.t_start = std::min(s.t_start, aligned(p, o->call_ns));
      if (o && o->gpu_state != FR_GPU_COMPLETED) {
        s.blocked.push_back(p.rank);
        state.blocked[p.rank].push_back({ci, aligned(p, o->call_ns)});
      }
    }
    s.mismatch = Mismatch{"count", {}, std::string()};
    for (const auto& [v, ranks] : values) s.mismatch->values.push_back({v, ranks});
    const bool told = !uneven.empty() && uneven.size() < ios.size();
    if (told) s.culprits = uneven;
    s.summary =
        "mismatch in " + s.op + " #" + std::to_string(seq) + " on comm " + comm_text(c) +
        ": the members send " + std::to_string(in) + " elements in all and receive " +
        std::to_string(out) + ", so some receive waits for data no send carries; " +
        (told ? ranks_word(uneven.size()) + rank_list_text(uneven) +
                    (uneven.size() > 1 ? " receive" : " receives") + " another count than " +
                    (uneven.size() > 1 ? "they send" : "it sends") +
                    " where every other member's agree"
              : std::string("which rank's counts are wrong cannot be told"));
    s.extra["totals"] = {{"in", in}, {"out", out}};
    s.fraction = static_cast<double>(s.culprits.size()) / static_cast<double>(c.members.size());
    state.stalls.push_back(std::move(s));
    return;  // the earliest is the one that hangs the group
  }
}

std::vector<Finding> torch_arg_findings(const Model& m, const std::string& comm_filter) {
  std::vector<Finding> out;
  std::map<uint64_t, int> comm_of;
  for (int ci = 0; ci < static_cast<int>(m.comms.size()); ++ci) comm_of.emplace(m.comms[ci].id, ci);
  // Per (communicator, op, what differs): the first number it was seen at, how often, and the
  // ranks with their values there.
  struct Seen {
    std::set<uint64_t> seqs;
    std::map<int, std::string> ranks;
  };
  std::map<std::tuple<int, uint16_t, std::string>, Seen> seen;
  for (const Proc& p : m.procs) {
    for (const auto& io : p.torch_io) {
      auto c = comm_of.find(io.comm_id);
      if (c == comm_of.end() || !comm_matches(m.comms[c->second], comm_filter)) continue;
      const bool keeps_dtype =
          io.op != FR_OP_GATHER && io.op != FR_OP_SCATTER && io.op != FR_OP_BROADCAST;
      std::string what, text;
      if (io.op == FR_OP_ALLREDUCE && io.in_count != io.out_count)
        what = "count", text = io_text(io);
      else if (keeps_dtype && !io.in_dtype.empty() && !io.out_dtype.empty() &&
               io.in_dtype != io.out_dtype)
        what = "dtype", text = io.in_dtype + " in, " + io.out_dtype + " out";
      if (what.empty()) continue;
      Seen& s = seen[{c->second, io.op, what}];
      s.seqs.insert(io.seq);
      s.ranks.emplace(p.rank, text);
    }
  }
  for (const auto& [key, s] : seen) {
    const auto& [ci, op, what] = key;
    const Comm& c = m.comms[ci];
    Finding f;
    f.kind = VerdictKind::kInconsistent;
    f.comm = comm_ref(c);
    f.seq = *s.seqs.begin();
    f.seq_kind = "coll";
    f.op = fr::log::op_name(op);
    nlohmann::json io = nlohmann::json::object();
    for (const auto& [rank, text] : s.ranks) {
      f.culprit_ranks.push_back(rank);
      io[std::to_string(rank)] = text;
    }
    f.details["field"] = what == "count" ? "output_count" : "output_dtype";
    f.details["io"] = io;
    const size_t n = f.culprit_ranks.size();
    f.summary = "the output of " + f.op + " #" + std::to_string(f.seq) + " on comm " +
                comm_text(c) + " has another " + what + " than its input on " + ranks_word(n) +
                rank_list_text(f.culprit_ranks) + " (" + s.ranks.begin()->second +
                (n > 1 ? ", ..." : "") + ")" +
                (s.seqs.size() > 1 ? " (and at " + std::to_string(s.seqs.size() - 1) + " more)"
                                   : std::string()) +
                ": NCCL moves the input's " + what + ", so this cannot hang the job";
    out.push_back(std::move(f));
  }
  // Recorder versions: every dump of a set is expected from one PyTorch.
  std::map<std::string, std::vector<int>> versions;
  for (const Proc& p : m.procs)
    if (p.source_kind == "torch" && !p.torch_version.empty())
      versions[p.torch_version].push_back(p.rank);
  if (versions.size() > 1) {
    Finding f;
    f.kind = VerdictKind::kInconsistent;
    size_t most = 0;
    for (const auto& [v, ranks] : versions) most = std::max(most, ranks.size());
    std::string list;
    nlohmann::json by = nlohmann::json::object();
    for (const auto& [v, ranks] : versions) {
      list += (list.empty() ? "" : ", ") + v + " on " + ranks_word(ranks.size()) +
              rank_list_text(ranks);
      by[v] = ranks;
      if (ranks.size() < most)
        f.culprit_ranks.insert(f.culprit_ranks.end(), ranks.begin(), ranks.end());
    }
    std::sort(f.culprit_ranks.begin(), f.culprit_ranks.end());
    f.details["field"] = "version";
    f.details["versions"] = by;
    f.summary = "the dumps come from Flight Recorders of different versions (" + list +
                "): read each by its own version; a job runs one PyTorch, so some dumps may be "
                "from another job or an older run";
    out.push_back(std::move(f));
  }
  return out;
}

}  // namespace fr::analyzer
