// Cross-rank matching of point-to-point ops on one communicator. Per (source, destination) pair
// the sends are lined up against the receives, in order: an excess send waits for a receive the
// destination never posted, and the reverse. Paired ops still pending are stuck, the side whose
// GPU never started them the suspect. Signals are one-sided and counted per channel instead.
// With full histories (no ring wrap on either side) every op is paired; otherwise only the ops
// still pending, which is where a hang shows.
#include <algorithm>
#include <tuple>
#include <unordered_map>

#include "passes.h"

namespace fr::analyzer {
namespace {

// The ops of one direction of one pair, in order, and the member that issued them.
struct Side {
  std::vector<const Op*> ops;
  size_t member = 0;
};

// One communicator's point-to-point ops, sorted for matching.
struct Book {
  std::unordered_map<int, size_t> by_rank;  // rank in comm -> member index
  // (src, dst) in communicator ranks -> (sends, receives).
  std::map<std::pair<int, int>, std::pair<Side, Side>> pairs;
  // A member's whole point-to-point history on this communicator is at hand when nothing was
  // overwritten or its first p2p op (seq 1) is still in the ring.
  std::vector<char> full;
  std::vector<std::pair<size_t, const Op*>> signal_ops;  // (member, op): one-sided, counted apart

  const Proc* member_proc(const Model& m, const Comm& c, int rank_in_comm) const {
    auto it = by_rank.find(rank_in_comm);
    return it == by_rank.end() ? nullptr : &m.procs[c.members[it->second].proc];
  }
};

Book sort_ops(const Model& m, const Comm& c) {
  Book b;
  b.full.assign(c.members.size(), 0);
  for (size_t i = 0; i < c.members.size(); ++i) {
    const Proc& p = m.procs[c.members[i].proc];
    const ProcComm& pc = p.comms[c.members[i].pc];
    const int me = c.members[i].rank_in_comm;
    b.by_rank[me] = i;
    uint64_t lo = UINT64_MAX;
    for (uint32_t k = pc.ops_begin; k < pc.ops_end; ++k)
      if (fr::log::op_is_p2p(p.ops[k].op)) lo = std::min(lo, p.ops[k].seq);
    b.full[i] = p.overwritten == 0 || lo == 1;
    for_each_op(p, pc, Family::kP2p, [&](const Op& o) {
      if (o.op == FR_OP_PUT_SIGNAL || o.op == FR_OP_SIGNAL || o.op == FR_OP_WAIT_SIGNAL) {
        b.signal_ops.push_back({i, &o});
      } else if (o.op == FR_OP_SEND) {
        Side& sends = b.pairs[{me, o.peer}].first;
        sends.ops.push_back(&o);
        sends.member = i;
      } else {
        Side& recvs = b.pairs[{o.peer, me}].second;
        recvs.ops.push_back(&o);
        recvs.member = i;
      }
    });
  }
  return b;
}

// What the matching found so far on the communicator.
struct Findings {
  Stall stall;
  std::set<int> culprits, blocked, not_started;
  std::vector<std::string> notes;  // one sentence per unmatched op
  const Op* first_unmatched = nullptr;
  std::vector<int> missing_peers;  // comm ranks waited on that have no dump
  bool pending = false;
  std::map<int, int64_t> since;  // per blocked rank: its oldest pending p2p op here
  bool needs_history = false;    // the loaded window cannot decide a pair

  void note_since(const Proc* p, const Op* o) {
    auto [it, fresh] = since.emplace(p->rank, aligned(*p, o->call_ns));
    if (!fresh) it->second = std::min(it->second, aligned(*p, o->call_ns));
  }
  // `p` waits in `o` for a counterpart that never came.
  void note_waiting(const Op* o, const Proc* p) {
    pending = true;
    blocked.insert(p->rank);
    note_since(p, o);
    const int64_t t = aligned(*p, o->call_ns);
    if (t < stall.t_start || !first_unmatched) {
      stall.t_start = std::min(stall.t_start, t);
      first_unmatched = o;
    }
  }
};

// Counting pending ops only: a grouped op stays pending until its whole group finishes, while
// its counterpart may already be done. Counterparts completed within half the pair's usual
// spacing of the first excess op are taken as its match. `dropped`: the completed counterparts
// older than the loaded window (model.h), which count when the window's own are too few; when
// they might, the whole history is asked for (*needs_history).
size_t absorbed(const std::vector<const Op*>& excess, size_t from, const Proc* pe,
                const std::vector<const Op*>& done, const Proc* pd, const DroppedP2p* dropped,
                bool* needs_history) {
  const bool older = dropped && dropped->count > 0;
  if (from >= excess.size() || (done.empty() && !older) || !pe || !pd) return 0;
  int64_t gap = older ? dropped->min_gap : INT64_MAX;
  for (size_t k = 1; k < done.size(); ++k)
    gap = std::min<int64_t>(gap, static_cast<int64_t>(done[k]->call_ns - done[k - 1]->call_ns));
  const int64_t first = aligned(*pe, excess[from]->call_ns);
  const int64_t slack = gap == INT64_MAX ? 0 : gap / 2;
  size_t n = 0;
  for (const Op* o : done)
    if (aligned(*pd, o->call_ns) >= first - slack) ++n;
  const size_t wanted = excess.size() - from;
  if (older && n < wanted && aligned(*pd, dropped->max_call_ns) >= first - slack)
    *needs_history = true;
  return std::min(n, wanted);
}

// Moves the completed ops of `ops` to `done`.
void keep_pending(std::vector<const Op*>& ops, std::vector<const Op*>& done) {
  for (const Op* o : ops)
    if (o->gpu_state == FR_GPU_COMPLETED) done.push_back(o);
  ops.erase(std::remove_if(ops.begin(), ops.end(),
                           [](const Op* o) { return o->gpu_state == FR_GPU_COMPLETED; }),
            ops.end());
}

// The sends (or receives) of one pair that were left out of the loaded window, when any were.
const DroppedP2p* dropped_of(const Model& m, const Comm& c, const Book& b, int member_rank,
                             bool send, int peer) {
  auto it = b.by_rank.find(member_rank);
  if (it == b.by_rank.end()) return nullptr;
  const CommMember& mem = c.members[it->second];
  for (const DroppedP2p& d : m.procs[mem.proc].comms[mem.pc].dropped_p2p)
    if (d.send == send && d.peer == peer) return &d;
  return nullptr;
}

// The excess sends (or receives) of one pair: their counterpart was never posted.
// `key` is the pair (source, destination) in communicator ranks; `sends_dropped` and
// `recvs_dropped` what of each side the window left out.
void match_counts(std::pair<int, int> key, std::vector<const Op*>& sends,
                  std::vector<const Op*>& recvs, const Proc* src, const Proc* dst, bool full,
                  const DroppedP2p* sends_dropped, const DroppedP2p* recvs_dropped, Findings& out) {
  std::vector<const Op*> sends_done, recvs_done;
  if (!full) {
    keep_pending(sends, sends_done);
    keep_pending(recvs, recvs_done);
  }
  size_t ns = sends.size(), nr = recvs.size();
  if (!full && ns > nr)
    nr += absorbed(sends, nr, src, recvs_done, dst, recvs_dropped, &out.needs_history);
  else if (!full && nr > ns)
    ns += absorbed(recvs, ns, dst, sends_done, src, sends_dropped, &out.needs_history);
  if (ns > nr) {
    // Sends nobody receives: the destination never posted the receive.
    if (!dst) {
      out.missing_peers.push_back(key.second);
      out.note_waiting(sends[nr], src);
      return;
    }
    if (sends[nr]->gpu_state == FR_GPU_COMPLETED) return;  // eager send, done
    out.culprits.insert(dst->rank);
    out.note_waiting(sends[nr], src);
    out.notes.push_back("rank " + std::to_string(src->rank) + " sends to rank " +
                        std::to_string(dst->rank) + " (Send #" + std::to_string(sends[nr]->seq) +
                        "), which never posted the receive");
  } else if (nr > ns) {
    if (!src) {
      out.missing_peers.push_back(key.first);
      out.note_waiting(recvs[ns], dst);
      return;
    }
    if (recvs[ns]->gpu_state == FR_GPU_COMPLETED) return;
    out.culprits.insert(src->rank);
    out.note_waiting(recvs[ns], dst);
    out.notes.push_back("rank " + std::to_string(dst->rank) + " waits to receive from rank " +
                        std::to_string(src->rank) + " (Recv #" + std::to_string(recvs[ns]->seq) +
                        "), which never posted the send");
  }
}

// Paired ops still pending: stuck, and the side whose GPU never started is the suspect.
void match_pending_pairs(const std::vector<const Op*>& sends, const std::vector<const Op*>& recvs,
                         const Proc* src, const Proc* dst, Findings& out) {
  for (size_t k = 0; k < std::min(sends.size(), recvs.size()); ++k) {
    const Op* a = sends[k];
    const Op* b = recvs[k];
    if (a->gpu_state == FR_GPU_COMPLETED && b->gpu_state == FR_GPU_COMPLETED) continue;
    out.pending = true;
    if (src) out.blocked.insert(src->rank), out.note_since(src, a);
    if (dst) out.blocked.insert(dst->rank), out.note_since(dst, b);
    const bool a_started = a->gpu_state >= FR_GPU_STARTED,
               b_started = b->gpu_state >= FR_GPU_STARTED;
    if (a_started != b_started) out.not_started.insert(a_started ? dst->rank : src->rank);
    if (!out.first_unmatched && src) {
      out.first_unmatched = a;
      out.stall.t_start = std::min(out.stall.t_start, aligned(*src, a->call_ns));
    }
  }
}

void match_pairs(const Model& m, const Comm& c, Book& book, Findings& out) {
  for (auto& [key, sides] : book.pairs) {
    auto& [sends, recvs] = sides;
    const Proc* src = book.member_proc(m, c, key.first);
    const Proc* dst = book.member_proc(m, c, key.second);
    // Pending-only counting on one side and full on the other would not line up: drop to the
    // pending ops on both sides whenever either wrapped.
    const bool full =
        src && dst && book.full[book.by_rank[key.first]] && book.full[book.by_rank[key.second]];
    const size_t missing_before = out.missing_peers.size();
    match_counts(key, sends.ops, recvs.ops, src, dst, full,
                 dropped_of(m, c, book, key.first, true, key.second),
                 dropped_of(m, c, book, key.second, false, key.first), out);
    if (out.missing_peers.size() > missing_before) continue;  // the peer has no dump
    match_pending_pairs(sends.ops, recvs.ops, src, dst, out);
  }
}

// Signals are one-sided: a WaitSignal on (peer, signal index, context) needs as many signals
// from that peer as the waits before it and itself ask for. A pending wait that needs more than
// the peer ever sent waits on that peer. Only decided on whole histories of both ranks: with a
// wrapped ring the signals already sent cannot be counted.
void match_signals(const Model& m, const Comm& c, const Book& book, Findings& out) {
  struct Channel {
    uint64_t sent = 0;
    std::vector<const Op*> waits;
  };
  // (signaller, waiter, signal index, context); load.cpp keeps the index in redop, the context
  // in dtype.
  std::map<std::tuple<int, int, int32_t, uint8_t>, Channel> channels;
  for (const auto& [i, o] : book.signal_ops) {
    const int me = c.members[i].rank_in_comm;
    if (o->op == FR_OP_WAIT_SIGNAL)
      channels[{o->peer, me, o->redop, o->dtype}].waits.push_back(o);
    else
      ++channels[{me, o->peer, o->redop, o->dtype}].sent;
  }
  for (const auto& [key, channel] : channels) {
    const auto [from, to, sig_idx, sig_ctx] = key;
    auto waiter = book.by_rank.find(to);
    if (waiter == book.by_rank.end() || !book.full[waiter->second]) continue;
    auto signaller = book.by_rank.find(from);
    const bool from_full = signaller != book.by_rank.end() && book.full[signaller->second];
    const Proc* wp = &m.procs[c.members[waiter->second].proc];
    uint64_t need = 0;
    for (const Op* w : channel.waits) {
      need += w->count;
      if (w->gpu_state == FR_GPU_COMPLETED || need <= channel.sent) continue;
      if (signaller == book.by_rank.end()) {
        out.missing_peers.push_back(from);
        out.note_waiting(w, wp);
        break;
      }
      if (!from_full) break;
      const Proc* sp = &m.procs[c.members[signaller->second].proc];
      out.culprits.insert(sp->rank);
      out.note_waiting(w, wp);
      out.notes.push_back("rank " + std::to_string(wp->rank) + " waits for " +
                          std::to_string(need) + " signal(s) from rank " +
                          std::to_string(sp->rank) + " (WaitSignal #" + std::to_string(w->seq) +
                          ", signal " + std::to_string(sig_idx) + ", context " +
                          std::to_string(sig_ctx) + "), which sent " +
                          std::to_string(channel.sent) + " and owes the rest");
      break;
    }
  }
}

// The stall's kind, culprits and sentence from what the matching found.
void decide(const AnalysisState& state, const Comm& c, const std::string& cname, Findings& out) {
  Stall& s = out.stall;
  if (!out.culprits.empty()) {
    s.kind = VerdictKind::kP2pUnmatched;
    s.culprits.assign(out.culprits.begin(), out.culprits.end());
    s.summary =
        "unmatched point-to-point on comm " + cname + ": " + out.notes.front() +
        (out.notes.size() > 1 ? " (+" + std::to_string(out.notes.size() - 1) + " more)" : "");
    s.extra["pairs"] = out.notes;
  } else if (!out.missing_peers.empty()) {
    s.kind = VerdictKind::kIncomplete;
    const auto& peers = out.missing_peers;
    for (const auto& x : missing_members(state.model, c, state.job_missing))
      if (x.global >= 0 && std::count(peers.begin(), peers.end(), x.rank_in_comm))
        s.culprits.push_back(x.global);
    s.summary = "point-to-point on comm " + cname + " waits on comm " + ranks_word(peers.size()) +
                rank_list_text(peers) + ", which " + (peers.size() > 1 ? "have" : "has") +
                " no dump";
  } else {
    s.kind = VerdictKind::kStuckInCollective;
    s.culprits.assign(out.not_started.begin(), out.not_started.end());
    s.summary =
        "point-to-point ops on comm " + cname + " are paired but stuck" +
        (out.not_started.empty() ? std::string("; every GPU started them")
                                 : "; the GPU of " + ranks_word(out.not_started.size()) +
                                       rank_list_text(s.culprits) + " never started its side");
  }
}

}  // namespace

void analyze_p2p(AnalysisState& state, int ci, std::optional<Spread>* spread) {
  const Model& m = state.model;
  const Comm& c = m.comms[ci];
  const size_t n = c.members.size();
  std::vector<Frontier>& frontiers = state.p2p_frontiers[ci];
  frontiers.resize(n);
  bool any = false;
  uint64_t min_e = UINT64_MAX, max_e = 0, min_c = UINT64_MAX, max_c = 0;
  for (size_t i = 0; i < n; ++i) {
    const Proc& p = m.procs[c.members[i].proc];
    frontiers[i] = frontier(p, p.comms[c.members[i].pc], Family::kP2p);
    any = any || frontiers[i].enq;
    min_e = std::min(min_e, frontiers[i].enq);
    max_e = std::max(max_e, frontiers[i].enq);
    min_c = std::min(min_c, frontiers[i].completed);
    max_c = std::max(max_c, frontiers[i].completed);
  }
  if (!any) return;
  *spread = Spread{min_e, max_e, min_c, max_c, std::nullopt};

  Book book = sort_ops(m, c);
  Findings out;
  out.stall.comm = ci;
  out.stall.p2p = true;
  match_pairs(m, c, book, out);
  match_signals(m, c, book, out);
  if (out.needs_history) state.needs_history = true;
  if (!out.pending) return;
  Stall& s = out.stall;
  for (size_t i = 0; i < n; ++i) {
    const Proc& p = m.procs[c.members[i].proc];
    if (!out.blocked.count(p.rank)) continue;
    s.blocked.push_back(p.rank);
    state.blocked[p.rank].push_back({ci, out.since.count(p.rank) ? out.since[p.rank] : s.t_start});
  }
  std::string replay;
  if (out.first_unmatched) {
    s.seq = out.first_unmatched->seq;
    s.op = fr::log::op_name(out.first_unmatched->op);
    for (size_t i = 0; i < n && replay.empty(); ++i)
      if (const ReplayTag* t = replay_of(m.procs[c.members[i].proc], out.first_unmatched)) {
        s.extra["graph_replay"] = replay_json(*t, *out.first_unmatched);
        replay = replay_text(*t);
      }
  }
  decide(state, c, comm_text(c) + replay, out);
  s.fraction = n ? static_cast<double>(s.culprits.size()) / static_cast<double>(n) : 1.0;
  state.stalls.push_back(std::move(s));
}

}  // namespace fr::analyzer
