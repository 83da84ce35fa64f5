// What a process keeps when the analysis runs on windows (LoadMode::kWindow, model.h): every
// collective's sequence number, call time and argument signature (its CollHistory, built for every
// process), and of its records only those a verdict reads. A dump set of 16,384 ranks with full
// rings is 33 million records; a verdict reads a few dozen per rank: the frontier (the newest
// records of each family, and the newest started and completed), every op still in flight, every
// blocking call still inside, the newest lifecycle call, and a margin for the recent-ops timeline.
// Point-to-point records left out are all completed: of them the pending-op matching keeps, per
// direction, their count, newest call time and smallest call gap (DroppedP2p).
//
// What the window cannot decide (a mismatch, which compares whole histories; a stalled sequence
// number older than the window; a point-to-point history read whole) is not guessed: the passes
// ask for the full records instead (AnalysisState::needs_history), and processes whose records
// are read whole by some pass (rings that never wrapped, CUDA graphs, signals, point-to-point
// histories that still start at 1) keep every record.
#include <algorithm>
#include <array>
#include <unordered_map>

#include "passes.h"

namespace fr::analyzer {
namespace {

// Records kept per communicator besides those the frontier and the ops in flight need: more than
// the recent-ops timeline shows (evidence.cpp, 8) and than a stall sits behind the frontier.
constexpr uint32_t kMargin = 64;

struct SigHash {
  size_t operator()(const SigKey& k) const {
    uint64_t h = k.count * 0x9e3779b97f4a7c15ull;
    h ^= (uint64_t{k.op} << 40) ^ (uint64_t{k.dtype} << 32) ^ (uint64_t(uint32_t(k.redop)) << 16) ^
         uint32_t(k.root);
    return static_cast<size_t>(h ^ (h >> 29));
  }
};

// A process's signatures as ids: a hash table, and before it a small cache of the ops last
// looked up, compared by their raw fields (a history repeats a few signatures, often in turn).
class SigIds {
 public:
  explicit SigIds(std::vector<SigKey>* sigs) : sigs_(*sigs) {}

  uint32_t id(const Op& o) {
    Cached& c = recent_[(o.count ^ (o.count >> 7) ^ (uint64_t{o.op} * 5)) & 15];
    if (c.id != CollHistory::kNoSig && c.count == o.count && c.op == o.op && c.dtype == o.dtype &&
        c.redop == o.redop && c.peer == o.peer)
      return c.id;
    return miss(o, &c);
  }

 private:
  struct Cached {
    uint64_t count = 0;
    int32_t redop = 0, peer = 0;
    uint16_t op = 0;
    uint8_t dtype = 0;
    uint32_t id = CollHistory::kNoSig;
  };

  // Out of line, so that the cache's test above is inlined where it is called.
  [[gnu::noinline]] uint32_t miss(const Op& o, Cached* c) {
    auto [it, fresh] = ids_.try_emplace(sig_of(o), static_cast<uint32_t>(sigs_.size()));
    if (fresh) sigs_.push_back(it->first);
    *c = Cached{o.count, o.redop, o.peer, o.op, o.dtype, it->second};
    return c->id;
  }
  std::vector<SigKey>& sigs_;
  std::unordered_map<SigKey, uint32_t, SigHash> ids_;
  Cached recent_[16];
};

bool in_history(const Op& o) { return o.seq != 0 && in_family(o, Family::kCollective); }

void build_history(const Proc& p, const ProcComm& pc, SigIds& ids, CollHistory* h) {
  *h = CollHistory{};
  // First how many, from which number to which, and whether they ascend.
  uint64_t lo = 0, last = 0;
  size_t n = 0;
  bool ascending = true;
  for (uint32_t i = pc.ops_begin; i < pc.ops_end; ++i) {
    const Op& o = p.ops[i];
    if (!in_history(o)) continue;
    if (n++ == 0)
      lo = o.seq;
    else if (o.seq <= last)
      ascending = false;
    last = o.seq;
  }
  if (n == 0) return;
  if (ascending && last - lo + 1 <= 2 * n + 16) {  // dense: indexed by sequence number
    h->base = lo;
    h->call_ns.assign(last - lo + 1, 0);
    h->sig.assign(last - lo + 1, CollHistory::kNoSig);
    for (uint32_t i = pc.ops_begin; i < pc.ops_end; ++i) {
      const Op& o = p.ops[i];
      if (!in_history(o)) continue;
      h->call_ns[o.seq - lo] = o.call_ns;
      h->sig[o.seq - lo] = ids.id(o);
    }
    return;
  }
  h->seqs.reserve(n);
  h->call_ns.reserve(n);
  h->sig.reserve(n);
  for (uint32_t i = pc.ops_begin; i < pc.ops_end; ++i) {
    const Op& o = p.ops[i];
    if (!in_history(o)) continue;
    h->seqs.push_back(o.seq);
    h->call_ns.push_back(o.call_ns);
    h->sig.push_back(ids.id(o));
  }
}

bool is_lifecycle(uint16_t op) {
  return op == FR_OP_COMM_REVOKE || op == FR_OP_COMM_SUSPEND || op == FR_OP_COMM_RESUME ||
         op == FR_OP_COMM_ABORT;
}
bool is_signal(uint16_t op) {
  return op == FR_OP_PUT_SIGNAL || op == FR_OP_SIGNAL || op == FR_OP_WAIT_SIGNAL;
}

// The first record of `pc` the window keeps (an index into p.ops), in one pass over its records.
// pc.ops_begin when some pass reads the communicator's point-to-point records whole: signals are
// counted over whole histories, and a history that still starts at sequence number 1 is matched
// whole.
uint32_t window_start(const Proc& p, const ProcComm& pc) {
  uint32_t start = pc.ops_end - std::min(pc.ops_end - pc.ops_begin, kMargin);
  // Per family, the records frontier() picks: the last of the highest sequence number, per state.
  struct Pick {
    uint64_t seq = 0;
    uint32_t at = UINT32_MAX;
    void see(uint64_t s, uint32_t i) {
      if (s >= seq) seq = s, at = i;
    }
  } picks[2][3];
  uint32_t lifecycle = UINT32_MAX;
  for (uint32_t i = pc.ops_begin; i < pc.ops_end; ++i) {
    const Op& o = p.ops[i];
    if ((o.flags & FR_REC_F_IN_CALL) && o.result == FR_RESULT_PENDING)
      start = std::min(start, i);  // inside a call
    const OpClass kind = op_class(o.op);
    if (kind == OpClass::API || kind == OpClass::NIXL) {
      if (is_lifecycle(o.op)) lifecycle = i;
      continue;
    }
    if (kind == OpClass::P2P && (is_signal(o.op) || o.seq <= 1)) return pc.ops_begin;  // read whole
    if (!counts(o)) continue;
    Pick* f = picks[kind == OpClass::P2P];
    f[0].see(o.seq, i);
    if (o.gpu_state >= FR_GPU_STARTED) f[1].see(o.seq, i);
    if (o.gpu_state == FR_GPU_COMPLETED)
      f[2].see(o.seq, i);
    else if (kind == OpClass::P2P)
      start = std::min(start, i);  // still pending
  }
  for (const auto& family : picks)
    for (const Pick& pick : family) start = std::min(start, pick.at);
  return std::min(start, lifecycle);
}

// The dropped records' point-to-point digest, per direction and peer (all of them completed).
void digest_dropped_p2p(const Proc& p, ProcComm* pc, uint32_t start) {
  std::unordered_map<uint64_t, size_t> index;  // (send, peer) -> entry
  std::vector<const Op*> newest;               // per entry: its newest dropped op
  auto key = [](const Op& o) { return (uint64_t{o.op == FR_OP_SEND} << 32) | uint32_t(o.peer); };
  for (uint32_t i = pc->ops_begin; i < start; ++i) {
    const Op& o = p.ops[i];
    pc->dropped_max_group = std::max(pc->dropped_max_group, o.group_id);
    if (!in_family(o, Family::kP2p)) continue;
    auto [it, fresh] = index.try_emplace(key(o), pc->dropped_p2p.size());
    if (fresh) {
      pc->dropped_p2p.push_back(DroppedP2p{o.peer, o.op == FR_OP_SEND, 0, INT64_MAX, 0});
      newest.push_back(nullptr);
    }
    DroppedP2p& d = pc->dropped_p2p[it->second];
    const Op*& prev = newest[it->second];
    if (prev)
      d.min_gap = std::min<int64_t>(d.min_gap, static_cast<int64_t>(o.call_ns - prev->call_ns));
    prev = &o;
    ++d.count;
    d.max_call_ns = std::max(d.max_call_ns, o.call_ns);
  }
  // The gap to the first completed op of the same direction inside the window.
  for (uint32_t i = start; i < pc->ops_end && !index.empty(); ++i) {
    const Op& o = p.ops[i];
    if (!in_family(o, Family::kP2p) || o.gpu_state != FR_GPU_COMPLETED) continue;
    auto it = index.find(key(o));
    if (it == index.end()) continue;
    DroppedP2p& d = pc->dropped_p2p[it->second];
    d.min_gap =
        std::min<int64_t>(d.min_gap, static_cast<int64_t>(o.call_ns - newest[it->second]->call_ns));
    index.erase(it);
  }
}

}  // namespace

void build_histories(Proc* p) {
  p->sigs.clear();
  SigIds ids(&p->sigs);
  for (ProcComm& pc : p->comms) {
    pc.ops_total = pc.ops_end - pc.ops_begin;
    build_history(*p, pc, ids, &pc.history);
  }
}

bool window_proc(Proc* p) {
  // A ring that never wrapped is read whole by the point-to-point matching; graph replays are
  // placed by their neighbours.
  if (p->overwritten == 0 || p->graphs > 0 || p->graph_replays > 0 || !p->replays.empty())
    return false;
  std::vector<uint32_t> starts(p->comms.size());
  bool any = false;
  for (size_t c = 0; c < p->comms.size(); ++c) {
    ProcComm& pc = p->comms[c];
    starts[c] = pc.ops_begin;
    if (pc.ops_end - pc.ops_begin <= kMargin) continue;
    starts[c] = window_start(*p, pc);
    if (starts[c] > pc.ops_begin) any = true;
  }
  if (!any) return false;
  std::vector<Op> kept;
  size_t n = 0;
  for (size_t c = 0; c < p->comms.size(); ++c) n += p->comms[c].ops_end - starts[c];
  kept.reserve(n);
  // Old index -> new index, per communicator: shrinks name their records by index.
  decltype(p->shrinks) shrinks;
  for (size_t c = 0; c < p->comms.size(); ++c) {
    ProcComm& pc = p->comms[c];
    pc.dropped = starts[c] - pc.ops_begin;
    if (pc.dropped) digest_dropped_p2p(*p, &pc, starts[c]);
    const uint32_t begin = static_cast<uint32_t>(kept.size());
    for (const auto& [at, excluded] : p->shrinks)
      if (at >= starts[c] && at < pc.ops_end) shrinks.push_back({at - starts[c] + begin, excluded});
    kept.insert(kept.end(), p->ops.begin() + starts[c], p->ops.begin() + pc.ops_end);
    pc.ops_begin = begin;
    pc.ops_end = static_cast<uint32_t>(kept.size());
  }
  std::sort(shrinks.begin(), shrinks.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  p->shrinks = std::move(shrinks);
  p->ops = std::move(kept);
  return true;
}

bool window_reaches(const Proc& p, const ProcComm& pc, uint64_t seq, Family family) {
  if (pc.dropped == 0) return true;
  for (uint32_t i = pc.ops_begin; i < pc.ops_end; ++i)
    if (in_family(p.ops[i], family) && p.ops[i].seq <= seq) return true;
  return false;
}

}  // namespace fr::analyzer
