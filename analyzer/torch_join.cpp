// torch's view joined into a finished analysis: for the op a verdict or finding names, the process
// group that issued it (torch's name and description) and the program's line that called it (the
// innermost frame outside torch of the Python stack torch recorded with the entry).
//
// Where the op is on a communicator read from torch's own dumps (a gloo job), the group is that
// communicator. Where it is on fr's communicator (a NCCL job, whose ranks have both fr's flight
// log and torch's dump: Proc::torch_view), torch's process groups are first joined to fr's
// communicators: a group and a communicator join when every member with both views agrees on
// them (same size, the same rank in them where torch records it) and their collectives line up
// one to one, op and count, under one shift of sequence numbers (fr seq = torch seq + shift:
// NCCL counts from where its communicator was made, torch from its group's first op). The shift
// that lines up the most collectives without a disagreement wins (among equals, the one that
// lines up the members' last collectives: torch records each op right before its NCCL call); a
// tie between groups joins none. A rank whose torch recorder shows the op issued while its flight
// log shows no NCCL call for it is stuck between torch and NCCL, and the finding says so
// (`issued_in_torch_only`).
//
// The stacks are read from the dumps here, for the entries named (read_torch_call_site): at most
// kMaxSiteReads files per finding, the ranks that entered the op first.
#include <algorithm>
#include <cstdlib>
#include <map>
#include <optional>
#include <set>
#include <tuple>

#include "passes.h"

namespace fr::analyzer {

using fr::analyzer::torch::TorchGroup;
using nlohmann::json;

namespace {

constexpr int kMaxSiteReads = 4;
constexpr size_t kMaxFindingsJoined = 4;
constexpr size_t kFramesShown = 8;

// torch's process group joined to one of fr's communicators.
struct PgJoin {
  uint64_t pg_id = 0;  // the communicator id the torch reader gave the group
  int64_t shift = 0;   // fr seq = torch seq + shift
  size_t matched = 0;
};

// (op, count) per collective sequence number of one member's history.
using CollOps = std::map<uint64_t, std::pair<uint16_t, uint64_t>>;

CollOps coll_ops(const Proc& p, const ProcComm& pc) {
  CollOps out;
  pc.history.for_each([&](uint64_t seq, uint64_t, uint32_t sig) {
    if (sig < p.sigs.size()) out[seq] = {p.sigs[sig].op, p.sigs[sig].count};
  });
  return out;
}

// How many collectives line up under `shift`; -1 when one disagrees.
long line_up(const CollOps& fr, const CollOps& tv, int64_t shift) {
  long n = 0;
  for (const auto& [seq, v] : tv) {
    auto it = fr.find(uint64_t(int64_t(seq) + shift));
    if (it == fr.end()) continue;
    if (it->second != v) return -1;
    ++n;
  }
  return n;
}

// One member's two views of the communicator: fr's collectives, and each torch group's that may
// be the same (its size and the member's rank in it agree where torch records them).
struct MemberViews {
  CollOps fr;
  std::vector<std::pair<uint64_t, CollOps>> groups;  // (group id, collectives)
};

// The torch group joined to fr's communicator `c`, if one is. Every shift a member suggests
// (its first collectives lined up, or its last ones, give or take two) is tried on every member.
std::optional<PgJoin> join_comm(const Model& m, const Comm& c) {
  std::vector<MemberViews> views;
  std::map<uint64_t, std::set<int64_t>> shifts;  // group id -> shifts to try
  for (const CommMember& mem : c.members) {
    if (mem.proc < 0 || mem.pc < 0) continue;
    const Proc& p = m.procs[size_t(mem.proc)];
    if (!p.torch_view) continue;
    MemberViews mv{coll_ops(p, p.comms[size_t(mem.pc)]), {}};
    if (mv.fr.empty()) continue;
    for (const ProcComm& tc : p.torch_view->comms) {
      if ((tc.size >= 0 && tc.size != c.size) || (tc.rank >= 0 && tc.rank != mem.rank_in_comm))
        continue;
      CollOps tops = coll_ops(*p.torch_view, tc);
      if (tops.empty()) continue;
      const int64_t ends = int64_t(mv.fr.rbegin()->first) - int64_t(tops.rbegin()->first);
      shifts[tc.id].insert(int64_t(mv.fr.begin()->first) - int64_t(tops.begin()->first));
      for (int64_t d = -2; d <= 2; ++d) shifts[tc.id].insert(ends + d);
      mv.groups.emplace_back(tc.id, std::move(tops));
    }
    views.push_back(std::move(mv));
  }
  // The most collectives lined up wins; among as many (a run of identical ops lines up under
  // several shifts), the shift that lines up the members' last ones, as torch records each op
  // right before its NCCL call.
  std::optional<PgJoin> best;
  int64_t best_gap = 0;
  bool tie = false;
  for (const auto& [id, tried] : shifts) {
    for (int64_t shift : tried) {
      long total = 0;
      int64_t gap = 0;  // how far the members' last collectives lie apart under `shift`
      for (const MemberViews& mv : views) {
        for (const auto& [gid, tops] : mv.groups) {
          if (gid != id) continue;
          const long n = line_up(mv.fr, tops, shift);
          total = n < 0 || total < 0 ? -1 : total + n;
          gap += std::abs(int64_t(mv.fr.rbegin()->first) - int64_t(tops.rbegin()->first) - shift);
        }
      }
      if (total <= 0) continue;
      const bool more = !best || size_t(total) > best->matched ||
                        (size_t(total) == best->matched && gap < best_gap);
      if (more) {
        best = PgJoin{id, shift, size_t(total)}, best_gap = gap, tie = false;
      } else if (size_t(total) == best->matched && gap == best_gap && id != best->pg_id) {
        tie = true;  // two groups line up as well: join neither
      }
    }
  }
  if (tie) return std::nullopt;
  return best;
}

const TorchGroup* group_named(const Proc& tp, uint64_t id) {
  for (const auto& g : tp.torch_groups)
    if (g.comm_id == id) return &g;
  return nullptr;
}

const Proc* proc_of_rank(const Model& m, int rank) {
  auto it = std::lower_bound(m.procs.begin(), m.procs.end(), rank,
                             [](const Proc& p, int r) { return p.rank < r; });
  return it != m.procs.end() && it->rank == rank ? &*it : nullptr;
}

// The highest collective sequence number a member's view of a communicator holds; -1 for none.
int64_t last_coll(const Proc& p, uint64_t comm_id) {
  for (const ProcComm& pc : p.comms) {
    if (pc.id != comm_id) continue;
    uint64_t lo, hi;
    size_t n;
    int64_t last = pc.history.range(&lo, &hi, &n) ? int64_t(hi) : -1;
    return std::max<int64_t>(last, pc.coll_seq > 0 ? int64_t(pc.coll_seq) : -1);
  }
  return -1;
}

// What is known of the finding's op on torch's side, before the stacks are read.
struct TorchOp {
  const Comm* comm = nullptr;
  uint64_t pg_id = 0;
  int64_t seq = 0;  // torch's sequence number of the op
  bool joined = false;
  bool p2p = false;
  const TorchGroup* group = nullptr;
  std::vector<int> torch_only;  // ranks torch shows issuing it and fr shows no NCCL call for
};

// The first member with a dump; nullptr when none has one.
const Proc* first_proc(const Model& m, const Comm& c) {
  for (const CommMember& mem : c.members)
    if (mem.proc >= 0) return &m.procs[size_t(mem.proc)];
  return nullptr;
}

// The torch view of a member (its own Proc on a torch communicator, else fr's log's torch_view).
const Proc* torch_side(const Proc& p, bool joined) {
  if (!joined) return p.source_kind == "torch" ? &p : nullptr;
  return p.torch_view.get();
}

// Stacks already read, by (file, group, seq, p2p): the verdict and its findings often name one op.
using SiteCache = std::map<std::tuple<std::string, std::string, int64_t, bool>,
                           std::optional<fr::analyzer::torch::TorchCallSite>>;

// Reads the call site from the dumps of `ranks`, in order, at most kMaxSiteReads of them.
json read_site(const Model& m, const TorchOp& t, const std::vector<int>& ranks, SiteCache* cache) {
  int tries = 0;
  std::set<int> seen;
  for (int r : ranks) {
    const Proc* p = proc_of_rank(m, r);
    const Proc* tp = p ? torch_side(*p, t.joined) : nullptr;
    if (!tp || !seen.insert(r).second) continue;
    if (tries++ == kMaxSiteReads) break;
    auto key = std::make_tuple(tp->file, t.group->name, t.seq, t.p2p);
    auto found = cache->find(key);
    if (found == cache->end()) {
      fr::analyzer::torch::TorchCallSite read;
      std::string err;
      found = cache->emplace(key, std::nullopt).first;
      if (fr::analyzer::torch::read_torch_call_site(tp->file, tp->file_id, t.group->name, t.seq,
                                                    t.p2p, &read, &err))
        found->second = std::move(read);
    }
    if (!found->second) continue;
    const fr::analyzer::torch::TorchCallSite& site = *found->second;
    json frames = json::array();
    for (size_t i = 0; i < site.frames.size() && i < kFramesShown; ++i)
      frames.push_back({{"function", site.frames[i].function},
                        {"file", site.frames[i].file},
                        {"line", site.frames[i].line}});
    json out = {{"rank", r}, {"frames", std::move(frames)}};
    if (site.user >= 0) {
      const auto& f = site.frames[size_t(site.user)];
      out["call_site"] = {{"function", f.function}, {"file", f.file}, {"line", f.line}};
    }
    return out;
  }
  return nullptr;
}

// "train.py:42 in step".
std::string site_text(const json& cs) {
  std::string file = cs.value("file", std::string());
  file = file.substr(file.find_last_of('/') + 1);
  const int64_t line = cs.value("line", int64_t(-1));
  return file + (line > 0 ? ":" + std::to_string(line) : "") + " in " +
         cs.value("function", std::string());
}

std::optional<TorchOp> torch_op(const Model& m, const std::map<int, PgJoin>& joins,
                                const Finding& f) {
  if (!f.comm || (f.seq_kind != "coll" && f.seq_kind != "p2p")) return std::nullopt;
  TorchOp t;
  for (size_t i = 0; i < m.comms.size() && !t.comm; ++i)
    if (comm_id_hex(m.comms[i].id) == f.comm->id) t.comm = &m.comms[i];
  const Proc* first = t.comm ? first_proc(m, *t.comm) : nullptr;
  if (!first) return std::nullopt;
  t.p2p = f.seq_kind == "p2p";
  t.joined = first->source_kind != "torch";
  if (!t.joined) {
    t.pg_id = t.comm->id, t.seq = int64_t(f.seq);
  } else {
    auto it = joins.find(int(t.comm - m.comms.data()));
    if (t.p2p || it == joins.end()) return std::nullopt;
    t.pg_id = it->second.pg_id, t.seq = int64_t(f.seq) - it->second.shift;
  }
  for (const CommMember& mem : t.comm->members) {
    const Proc* tp = mem.proc >= 0 ? torch_side(m.procs[size_t(mem.proc)], t.joined) : nullptr;
    if (tp && !t.group) t.group = group_named(*tp, t.pg_id);
    // Torch issued it on this rank; NCCL never saw the call.
    if (tp && t.joined && !t.p2p && last_coll(*tp, t.pg_id) >= t.seq &&
        last_coll(m.procs[size_t(mem.proc)], t.comm->id) < int64_t(f.seq))
      t.torch_only.push_back(m.procs[size_t(mem.proc)].rank);
  }
  if (!t.group) return std::nullopt;
  return t;
}

// The finding's `torch` object and the words its summary gains.
void annotate(const Model& m, const std::map<int, PgJoin>& joins, SiteCache* cache, Finding* f) {
  std::optional<TorchOp> t = torch_op(m, joins, *f);
  if (!t) return;
  json tj = {{"pg_name", t->group->name},
             {"pg_desc", t->group->desc},
             {"seq", t->seq},
             {"joined", t->joined}};
  // The ranks that issued the op first: torch_only ones (their own line), then those blocked in
  // it, then the other members.
  std::vector<int> order = t->torch_only;
  for (int r : f->blocked_ranks) order.push_back(r);
  for (const CommMember& mem : t->comm->members)
    if (mem.proc >= 0) order.push_back(m.procs[size_t(mem.proc)].rank);
  json site = read_site(m, *t, order, cache);
  std::string words;
  if (t->joined)
    words += "torch process group " + (t->group->desc.empty() ? t->group->name : t->group->desc);
  if (site.is_object()) {
    tj["site_rank"] = site["rank"];
    tj["frames"] = site["frames"];
    if (site.contains("call_site")) {
      tj["call_site"] = site["call_site"];
      words += std::string(words.empty() ? "" : ", ") + "called at " + site_text(site["call_site"]);
    }
  }
  if (!t->torch_only.empty()) {
    tj["issued_in_torch_only"] = t->torch_only;
    words += std::string(words.empty() ? "" : "; ") + "torch shows rank" +
             (t->torch_only.size() > 1 ? "s " : " ") + rank_list_text(t->torch_only) +
             " issued it but no NCCL call came (stuck between torch and NCCL)";
  }
  if (!words.empty()) f->summary += " (" + words + ")";
  f->details["torch"] = std::move(tj);
}

}  // namespace

std::vector<std::string> torch_lines(const Finding& f) {
  const json& t = f.details.value("torch", json());
  if (!t.is_object()) return {};
  const std::string name = t.value("pg_name", std::string());
  const std::string desc = t.value("pg_desc", std::string());
  std::string line =
      "torch: process group " + (desc.empty() ? name : desc + " (name " + name + ")");
  const int64_t seq = t.value("seq", int64_t(0));
  line += (f.seq_kind == "p2p" ? ", point-to-point #" : ", collective #") + std::to_string(seq);
  if (t.value("joined", false) && uint64_t(seq) != f.seq)
    line += " (fr's #" + std::to_string(f.seq) + ")";
  if (t.contains("call_site"))
    line += ", called at " + site_text(t["call_site"]) + " (rank " +
            std::to_string(t.value("site_rank", -1)) + "'s stack)";
  else
    line += ", call site not recorded";
  std::vector<std::string> out{line};
  const json& only = t.value("issued_in_torch_only", json::array());
  if (only.is_array() && !only.empty()) {
    std::vector<int> ranks;
    for (const auto& r : only)
      if (r.is_number_integer()) ranks.push_back(r.get<int>());
    out.push_back("torch: rank" + std::string(ranks.size() > 1 ? "s " : " ") +
                  rank_list_text(ranks) +
                  " issued it in torch, but no NCCL call for it came: stuck between torch and "
                  "NCCL");
  }
  return out;
}

void add_torch_context(const Model& m, Analysis* a) {
  bool any_view = false, any_torch = false;
  for (const Proc& p : m.procs)
    any_view |= bool(p.torch_view), any_torch |= !p.torch_groups.empty();
  if (!any_view && !any_torch) return;
  std::map<int, PgJoin> joins;  // Model::comms index -> the group joined to it
  if (any_view) {
    json listed = json::array();
    for (size_t i = 0; i < m.comms.size(); ++i) {
      const Comm& c = m.comms[i];
      const Proc* first = first_proc(m, c);
      if (!first || first->source_kind == "torch") continue;
      if (auto j = join_comm(m, c)) joins[int(i)] = *j;
    }
    for (const auto& [ci, j] : joins) {
      const TorchGroup* g = nullptr;
      for (const CommMember& mem : m.comms[size_t(ci)].members)
        if (!g && mem.proc >= 0 && m.procs[size_t(mem.proc)].torch_view)
          g = group_named(*m.procs[size_t(mem.proc)].torch_view, j.pg_id);
      if (!g) continue;
      listed.push_back({{"comm", comm_id_hex(m.comms[size_t(ci)].id)},
                        {"pg_name", g->name},
                        {"pg_desc", g->desc},
                        {"seq_shift", j.shift},
                        {"collectives_matched", j.matched}});
    }
    a->context["torch_joins"] = std::move(listed);
  }
  SiteCache cache;
  annotate(m, joins, &cache, &a->verdict);
  for (size_t i = 0; i < a->findings.size() && i < kMaxFindingsJoined; ++i)
    annotate(m, joins, &cache, &a->findings[i]);
}

}  // namespace fr::analyzer
