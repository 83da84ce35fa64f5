// Fail-slow after the fact from the nodes' heartbeat histories (<node>.slow_history.json,
// log/slow_history.h): what frd's live detector (daemon/logic/slow_detector.h) judged while the
// job ran, judged again over the samples the dump set keeps, with the same rules
// (common/slow_rule.h):
//   - gpu: per (communicator, op) each member's decaying log average of its kernel times, over
//     the median of the members'; at least kMinGpuSamples kernel times per member and three
//     members; a third of the members at most stand out. Without kernel times, its GPU times
//     from the sampled progress markers: at each collective every member's markers timed, from
//     when the last member's GPU reached it to when its own finished (fr::slow::GpuAvg,
//     sampled_gpu_times: the same rule, floor and averages as the live detector's).
//   - link: per (sender, receiver) pair of a communicator, the share of samples that caught the
//     sender on the wire (SEND_WAIT) against the other pairs' (a ring's steps wait for its slow
//     link, so its sender alone is on the wire most of each op); where fewer than two pairs have
//     kMinWireSamples states, the links' decaying mean step times against their median.
//   - a late rank without kernel times: how often its GPU had a collective in flight at the
//     samples since it turned late, against its peers' on its node (sampled at the same
//     instants): as often as they, who wait for it in flight, means its host waits for its GPU.
// The live detector also asks a candidate to hold at several judgements in a row; a dump set is
// judged once, over its whole history.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <set>
#include <tuple>

#include "common/slow_rule.h"
#include "common/time_ns.h"
#include "fr/flight_log.h"
#include "passes.h"

namespace fr::analyzer {

namespace {

using fr::log::HistorySample;
using fr::log::ProcessHistory;
using fr::slow::median_of;

constexpr size_t kMaxComms = 4096;    // communicators judged
constexpr size_t kMaxLinks = 4096;    // links per communicator
constexpr size_t kMaxOps = 8;         // ops timed per member
constexpr size_t kMaxSeqs = 1 << 16;  // collectives per communicator whose op and marks are kept

// Every sample of every process, oldest first over the nodes (as the heartbeats arrived).
struct Visit {
  int64_t t = 0;
  const ProcessHistory* p = nullptr;
  const HistorySample* s = nullptr;
};
std::vector<Visit> visits(const Model& m) {
  std::vector<Visit> v;
  for (const auto& h : m.histories)
    for (const auto& p : h.processes)
      for (const auto& s : p.samples) v.push_back({s.time_ns, &p, &s});
  std::stable_sort(v.begin(), v.end(), [](const Visit& a, const Visit& b) { return a.t < b.t; });
  return v;
}

struct Avg {
  double log_avg = 0;
  uint32_t n = 0;
};

}  // namespace

namespace {

struct GpuMember {
  int rank = -1;  // global
  std::map<uint32_t, fr::slow::GpuAvg> ops;
  fr::slow::GpuAvg* op(uint32_t o) {
    if (!ops.count(o) && ops.size() >= kMaxOps) return nullptr;
    fr::slow::GpuAvg& a = ops[o];
    a.op = o;
    return &a;
  }
};
struct GpuComm {
  int size = -1;
  std::map<int, GpuMember> members;  // by comm rank
  std::map<uint64_t, uint32_t> ops;  // seq -> op
  // seq -> per comm rank its sampled (start, end) on the common clock
  std::map<uint64_t, std::map<int, std::pair<int64_t, int64_t>>> marks;
};

// A process's dump's clock offset (the dump set's manifest), which puts its node's clock on the
// common one: the sampled times of members on different nodes are compared.
int64_t clock_offset(const Model& m, const ProcessHistory& p) {
  for (const auto& q : m.procs)
    if (q.rank == p.rank && q.pid == p.pid)
      return std::llabs(q.clock_offset_ns) < fr::kMaxTimeNs / 2 ? q.clock_offset_ns : 0;
  return 0;
}

// Learns one process's sample: its kernel times (as SlowDetector::member does) and its sampled
// markers, kept until every member's are known.
void learn_gpu(const Visit& v, int64_t offset, std::map<uint64_t, GpuComm>* comms) {
  for (const auto& c : v.s->comms) {
    if (c.rank < 0 || (!comms->count(c.id) && comms->size() >= kMaxComms)) continue;
    GpuComm& gc = (*comms)[c.id];
    if (c.size > 0) gc.size = c.size;
    GpuMember& mem = gc.members[c.rank];
    mem.rank = v.p->rank;
    for (const auto& k : c.colls) {
      if (gc.ops.size() < kMaxSeqs) gc.ops.emplace(k.seq, k.op);
      if (k.gpu_ns <= 0) continue;
      if (fr::slow::GpuAvg* a = mem.op(k.op)) a->add_kernel(k.gpu_ns);
    }
    for (const auto& k : c.marks) {
      // Not a collective's start and end: not timed (the reader made times past 2^62 ns 0, so
      // with the bounded offset nothing overflows).
      if (!fr::slow::marks_timed(k.gpu_start_ns, k.gpu_end_ns)) continue;
      if (!gc.marks.count(k.seq) && gc.marks.size() >= kMaxSeqs) continue;
      gc.marks[k.seq].emplace(c.rank,
                              std::make_pair(k.gpu_start_ns + offset, k.gpu_end_ns + offset));
    }
  }
}

// Each member's own GPU time at each collective every member's markers timed (as
// SlowDetector::join_markers does; communicators of 3 members at least, as it joins).
void join_marks(GpuComm* gc) {
  if (gc->size < 3) return;
  for (const auto& [seq, by_rank] : gc->marks) {
    auto op = gc->ops.find(seq);
    if (op == gc->ops.end() || by_rank.size() != size_t(gc->size)) continue;
    std::vector<std::pair<int64_t, int64_t>> marks;
    for (const auto& [_, se] : by_rank) marks.push_back(se);
    const std::vector<int64_t> own = fr::slow::sampled_gpu_times(marks);
    size_t i = 0;
    for (const auto& [r, _] : by_rank) {
      auto mem = gc->members.find(r);
      if (mem != gc->members.end() && i < own.size())
        if (fr::slow::GpuAvg* a = mem->second.op(op->second)) a->add_sampled(own[i]);
      ++i;
    }
  }
}

}  // namespace

std::vector<HistoryGpu> history_gpus(const Model& m, std::vector<HistoryGpu>* judged) {
  std::map<uint64_t, GpuComm> comms;
  std::map<const ProcessHistory*, int64_t> offsets;
  for (const Visit& v : visits(m)) {
    auto o = offsets.find(v.p);
    if (o == offsets.end()) o = offsets.emplace(v.p, clock_offset(m, *v.p)).first;
    learn_gpu(v, o->second, &comms);
  }
  std::vector<HistoryGpu> out;
  for (auto& [id, gc] : comms) {
    join_marks(&gc);
    const auto& members = gc.members;
    std::set<uint32_t> ops;
    for (const auto& [_, mem] : members)
      for (const auto& [op, a] : mem.ops) ops.insert(op);
    std::map<int, HistoryGpu> worst;  // comm rank -> its worst op (by ratio over its bar)
    for (uint32_t op : ops) {
      std::vector<std::pair<int, const fr::slow::GpuAvg*>> avg;
      bool sampled = false;  // some of them from the markers
      for (const auto& [r, mem] : members)
        if (auto a = mem.ops.find(op);
            a != mem.ops.end() && a->second.n >= fr::slow::kMinGpuSamples) {
          avg.emplace_back(r, &a->second);
          sampled |= a->second.sampled;
        }
      if (avg.size() < 3) continue;
      std::vector<double> logs;
      for (const auto& [_, a] : avg) logs.push_back(a->log_avg);
      const fr::slow::Spread sp =
          fr::slow::spread_of(logs, fr::slow::kGpuFloor, fr::slow::kRatioNoiseFactor);
      for (const auto& [r, a] : avg) {
        const double ratio = std::exp(a->log_avg - sp.median_log);
        HistoryGpu& w = worst[r];
        w.max_bar = std::max(w.max_bar, sp.bar);
        w.max_ratio = std::max(w.max_ratio, ratio);
        w.sampled |= sampled;
        if (w.bar > 0 && ratio / sp.bar <= w.ratio / w.bar) continue;
        w.rank = members.at(r).rank;
        w.comm = id;
        w.op = op;
        w.ratio = ratio;
        w.bar = sp.bar;
        w.value_ns = fr::slow::ns_of_log(a->log_avg);
        w.others_ns = fr::slow::ns_of_log(sp.median_log);
        w.samples = a->n;
        w.op_sampled = sampled;
      }
    }
    std::vector<HistoryGpu> found;
    for (const auto& [_, w] : worst) {
      if (judged != nullptr && w.rank >= 0) judged->push_back(w);
      if (w.ratio >= w.bar && w.rank >= 0 && w.value_ns - w.others_ns >= fr::slow::kMinExcessNs)
        found.push_back(w);
    }
    if (found.size() * 3 <= worst.size()) out.insert(out.end(), found.begin(), found.end());
  }
  return out;
}

namespace {

struct Link : fr::slow::LinkStats {
  int src = -1, dst = -1, channel = -1;  // comm ranks
};
struct LinkComm {
  std::map<int, int> global;                        // comm rank -> global rank
  std::map<std::tuple<int, int, int>, Link> links;  // (src, dst, channel)
};

// Learns one process's sample of its links (as SlowDetector::links does a heartbeat's).
void learn_links(const Visit& v, std::map<uint64_t, LinkComm>* comms) {
  for (const auto& l : v.s->links) {
    const auto c = std::find_if(v.s->comms.begin(), v.s->comms.end(),
                                [&](const fr::log::HistoryComm& x) { return x.id == l.comm_id; });
    if (c == v.s->comms.end() || l.step_ns <= 0 || l.steps == 0) continue;
    const int self = c->rank;
    if (self < 0 || l.peer < 0 || l.peer == self || (c->size > 0 && l.peer >= c->size)) continue;
    if (!comms->count(l.comm_id) && comms->size() >= kMaxComms) continue;
    LinkComm& lc = (*comms)[l.comm_id];
    const int src = l.send ? self : l.peer, dst = l.send ? l.peer : self;
    auto key = std::make_tuple(src, dst, int(l.channel));
    auto k = lc.links.find(key);
    if (k == lc.links.end()) {
      if (lc.links.size() >= kMaxLinks) continue;
      k = lc.links.emplace(key, Link{{}, src, dst, int(l.channel)}).first;
    }
    k->second.sample_state(l.send, l.state);
    k->second.learn_op(l.op_seq, l.step_ns, l.steps);
  }
  for (const auto& c : v.s->comms)
    if (auto it = comms->find(c.id); it != comms->end() && c.rank >= 0)
      it->second.global[c.rank] = v.p->rank;
}

int global_of(const LinkComm& c, int r) {
  auto it = c.global.find(r);
  return it == c.global.end() ? -1 : it->second;
}

// The senders' shares on the wire decide where at least two pairs have enough of them.
bool by_wire(uint64_t id, const LinkComm& c, std::vector<HistoryLink>* out) {
  std::vector<std::pair<std::pair<int, int>, double>> shares;
  auto pairs = fr::slow::wire_pairs<Link>(c.links, fr::slow::kMinWireSamples, &shares);
  if (shares.size() < 2) return false;
  std::vector<HistoryLink> found;
  for (const auto& [key, share] : shares) {
    const double other = fr::slow::wire_other_than(shares, key);
    const auto& p = pairs[key];
    HistoryLink f;
    f.src = global_of(c, key.first);
    f.dst = global_of(c, key.second);
    f.channel = p.top->channel;
    f.comm = id;
    f.factor = std::min(share / other, 1000.0);
    f.share = share;
    f.others_share = other;
    f.value_ns = fr::slow::ns_of_log(p.top->log_avg);
    f.others_ns = int64_t(double(f.value_ns) / std::max(f.factor, 1.0));
    f.sampled = p.sampled;
    const int64_t excess = fr::slow::link_excess_ns(f.value_ns, f.others_ns, p.top->steps);
    if (fr::slow::wire_stands_out(share, other, p.wire) && f.src >= 0 && f.dst >= 0 &&
        excess >= fr::slow::kMinExcessNs)
      found.push_back(f);
  }
  if (found.size() * 2 <= shares.size()) out->insert(out->end(), found.begin(), found.end());
  return true;
}

void by_step_times(uint64_t id, const LinkComm& c, std::vector<HistoryLink>* out) {
  std::vector<double> logs;
  for (const auto& [_, k] : c.links)
    if (k.n >= fr::slow::kMinLinkSamples) logs.push_back(k.log_avg);
  if (logs.size() < 3) return;
  const fr::slow::Spread sp =
      fr::slow::spread_of(logs, fr::slow::kLinkFloor, fr::slow::kRatioNoiseFactor);
  std::vector<HistoryLink> found;
  for (const auto& [_, k] : c.links) {
    if (k.n < fr::slow::kMinLinkSamples) continue;
    HistoryLink f;
    f.src = global_of(c, k.src);
    f.dst = global_of(c, k.dst);
    f.channel = k.channel;
    f.comm = id;
    f.factor = std::exp(k.log_avg - sp.median_log);
    f.value_ns = fr::slow::ns_of_log(k.log_avg);
    f.others_ns = fr::slow::ns_of_log(sp.median_log);
    f.sampled = k.n;
    const int64_t excess = fr::slow::link_excess_ns(f.value_ns, f.others_ns, k.steps);
    if (f.factor >= sp.bar && f.src >= 0 && f.dst >= 0 && excess >= fr::slow::kMinExcessNs)
      found.push_back(f);
  }
  if (found.size() * 3 <= logs.size()) out->insert(out->end(), found.begin(), found.end());
}

}  // namespace

std::vector<HistoryLink> history_links(const Model& m) {
  std::map<uint64_t, LinkComm> comms;
  for (const Visit& v : visits(m)) learn_links(v, &comms);
  std::vector<HistoryLink> out;
  for (const auto& [id, c] : comms)
    if (!by_wire(id, c, &out)) by_step_times(id, c, &out);
  return out;
}

HistoryBusy history_busy(const Model& m, int rank, uint64_t comm, uint64_t since_seq) {
  HistoryBusy b;
  // Its node's history and the first sample that reported the collective it turned late at.
  const fr::log::NodeSlowHistory* node = nullptr;
  int64_t from = INT64_MAX;
  for (const auto& h : m.histories)
    for (const auto& p : h.processes) {
      if (p.rank != rank) continue;
      for (const auto& s : p.samples)
        for (const auto& c : s.comms)
          if (c.id == comm && !c.colls.empty() && c.colls.back().seq >= since_seq &&
              s.time_ns < from)
            from = s.time_ns, node = &h;
    }
  if (node == nullptr) return b;
  // (samples, in flight) of a process on the communicator since then.
  auto count = [&](const ProcessHistory& p) {
    std::pair<uint32_t, uint32_t> n{0, 0};
    for (const auto& s : p.samples) {
      if (s.time_ns < from) continue;
      for (const auto& c : s.comms)
        if (c.id == comm) n.first++, n.second += c.busy;
    }
    return n;
  };
  std::vector<double> mates, all;
  for (const auto& h : m.histories)
    for (const auto& p : h.processes) {
      const auto [n, busy] = count(p);
      if (n < fr::slow::kMinBusySamples) continue;
      const double share = double(busy) / double(n);
      if (p.rank == rank) {
        b.share = share;
        b.samples = n;
        continue;
      }
      all.push_back(share);
      if (&h == node) mates.push_back(share);
    }
  if (b.samples == 0 || all.empty()) return b;
  b.peers = median_of(mates.empty() ? all : mates);
  b.gpu = fr::slow::busy_means_gpu(b.share, b.peers, &b.judged);
  return b;
}

}  // namespace fr::analyzer
