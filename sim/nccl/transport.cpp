// The transport model under the emulated collectives: channels, their proxies and the links
// between ranks, with the profiler events NCCL emits for them and faults that stop one channel,
// one peer pair's proxy or one direction of one link.
//
// Every collective runs on sim_channels() channels (FRSIM_NCHANNELS, default 2). On each channel
// a rank has out-edges and in-edges: a ring for AllReduce, AllGather and ReduceScatter (even
// channels send to rank+1, odd channels to rank-1, as NCCL's rings alternate direction), a binary
// tree rooted at the root for Broadcast (down) and Reduce (up). AlltoAll, Gather and Scatter have
// no channel model (their data moves as before).
//
// Each channel runs as many steps as NCCL's proxy runs for the op with the SIMPLE protocol
// (nccl_steps below, from NCCL's computeColl: a ring all-reduce 2(n-1) chunk steps per loop, an
// all-gather or reduce-scatter n-1, a pipeline 1; loops by size over nChannels x chunks per loop x
// chunkSize; each ring chunk sent as 2 slices, and a step is a slice, as in NCCL's ProxyStep
// numbers). The emulation's data chunks are spread over those steps: a rank posts data chunk i
// only once every channel finished the steps up to i's share, so a stopped step stops the
// collective on every member, and the step at which it stopped is the one the fault named.
//
// A step on an in-edge: the receiver posts a buffer (credit: `ready`), waits for data (`tx`),
// then its kernel consumes it. On an out-edge: the kernel produces the data (on trees, once the
// step's receives are consumed), the proxy waits for the receiver's credit, then transmits.
// Proxy events (ProxyOp, ProxyStep with the v5/v6 states) are emitted only for edges to ranks of
// another node (FRSIM_NODE): NCCL's proxy serves NET connections; P2P and SHM ones have none.
// KernelCh events are another matter: with KernelCh in the process-wide mask NCCL adds a
// profiler proxy op on every channel of every kernel (ncclProfilerNeedsProxy, SaveProxyProfiler),
// whatever the transport, and the proxy reports the kernel's start and end on that channel.
#include <stdlib.h>

#include <algorithm>

#include "fr_sim_nccl.h"
#include "internal.h"
#include "fr/profiler_abi.h"

namespace frsim {

namespace ap = fr::nccl_prof;

// One edge of this rank on one channel, and its progress for the current step.
struct Link {
  int peer = 0;
  int edge = 0;         // index of the edge in the sender's out-edges
  bool net = false;     // across nodes: the proxy serves it
  int stage = 0;        // 0 not started; recv: 1 credit posted, 2 received, 3 consumed;
                        // send: 1 waiting for the GPU, 2 waiting for credit, 3 transmitted
  uint64_t due_ns = 0;  // send: the step's transmission ends then (pace.cpp); 0: not begun
  void* op_h = nullptr;
  void* step_h = nullptr;
};
struct ChannelState {
  std::vector<Link> ins, outs;
  uint64_t step = 0;  // the step in progress on this channel
  void* kernel_h = nullptr;
};
struct Xport {
  bool modeled = false;
  bool tree = false;
  uint64_t nsteps = 1;  // steps every channel runs for the op
  std::vector<ChannelState> chans;
  void* coll_h = nullptr;
  XportFault fault;
};

int sim_channels() {
  static int n = [] {
    const char* e = getenv("FRSIM_NCHANNELS");
    int v = e != nullptr ? atoi(e) : 2;
    return std::clamp(v, 1, kMaxSimChannels);
  }();
  return n;
}

namespace {

uint64_t pack(uint64_t seq, uint64_t steps) { return ((seq + 1) << 24) | (steps & 0xffffff); }

// Out-edges of rank r on channel c, in order; trees over root-relative indices.
std::vector<int> outs_of(OpKind kind, int n, int root, int c, int r) {
  std::vector<int> v;
  if (n < 2) return v;
  if (kind == kAllReduce || kind == kAllGather || kind == kReduceScatter) {
    v.push_back(c % 2 == 0 ? (r + 1) % n : (r + n - 1) % n);
    return v;
  }
  int i = (r - root + n) % n;
  auto abs = [&](int j) { return (j + root) % n; };
  if (kind == kBroadcast) {
    for (int ch = 2 * i + 1; ch <= 2 * i + 2; ++ch)
      if (ch < n) v.push_back(abs(ch));
  } else if (kind == kReduce && i > 0) {
    v.push_back(abs((i - 1) / 2));
  }
  return v;
}

bool ring_kind(OpKind k) { return k == kAllReduce || k == kAllGather || k == kReduceScatter; }

// NCCL's proxy step count for one channel of a collective (computeColl, SIMPLE protocol, default
// NCCL_BUFFSIZE of 4 MiB in NCCL_STEPS = 8 buffer steps): rings send chunks of chunkSteps = 4
// buffer steps, as sliceSteps = 2 slices each (NCCL's ProxyOp nSteps and ProxyStep numbers count
// slices); the Broadcast and Reduce pipelines send one buffer step per chunk.
uint64_t nccl_steps(const Op& op, int n, int nch) {
  constexpr uint64_t kStepBytes = (4u << 20) / 8;
  const bool ring = ring_kind(op.kind);
  const bool per_rank_count = op.kind == kAllGather || op.kind == kReduceScatter;
  const uint64_t bytes = op.count * dtype_size(op.dtype) * (per_rank_count ? n : 1);
  const uint64_t chunk = ring ? kStepBytes * 4 : kStepBytes;
  const uint64_t chunks_per_loop = ring ? n : 1;
  const uint64_t steps_per_loop = op.kind == kAllReduce ? 2 * (n - 1) : ring ? n - 1 : 1;
  const uint64_t slices = ring ? 2 : 1;
  const uint64_t loop = static_cast<uint64_t>(nch) * chunks_per_loop * chunk;
  const uint64_t loops = std::max<uint64_t>(1, (bytes + loop - 1) / loop);
  return std::min<uint64_t>(steps_per_loop * loops * slices, 0xffffff);
}

bool modeled_kind(OpKind k) {
  return k == kAllReduce || k == kAllGather || k == kReduceScatter || k == kBroadcast ||
         k == kReduce;
}

const char* func_name(OpKind k) {
  switch (k) {
    case kAllReduce: return "AllReduce";
    case kBroadcast: return "Broadcast";
    case kReduce: return "Reduce";
    case kAllGather: return "AllGather";
    case kReduceScatter: return "ReduceScatter";
    case kAlltoAll: return "AlltoAll";
    case kGather: return "Gather";
    case kScatter: return "Scatter";
    case kSend: return "Send";
    case kRecv: return "Recv";
  }
  return "";
}

void start_op(Op& op) {
  CommState& c = *op.comm;
  auto x = std::make_shared<Xport>();
  op.xport = x;
  x->modeled = modeled_kind(op.kind) && c.nranks > 1;
  x->tree = op.kind == kBroadcast || op.kind == kReduce;
  {
    std::lock_guard<std::mutex> g(c.mu);
    if (c.fault.kind != 0 && c.fault.seq == op.seq) x->fault = c.fault;
  }
  ProfDescr d;
  d.func = func_name(op.kind);
  d.seq = c.func_seq[op.kind % 16]++;
  d.count = op.count;
  d.peer = op.root;
  const bool p2p = op.kind == kSend || op.kind == kRecv;
  if (p2p) d.seq = 0;  // NCCL's p2p descriptor has no sequence number
  x->coll_h = prof_start(&c, p2p ? ap::kEvP2p : ap::kEvColl, nullptr, d);
  prof_stop(x->coll_h);  // NCCL stops the task event once the plan is launched; children keep it
  ProfDescr k0;
  k0.channel = 0;
  if (!x->modeled) {  // one kernel channel: the ops without a channel model run on channel 0
    x->chans.resize(1);
    // A one-rank communicator launches no NCCL kernel (NCCL copies locally): no kernel channel.
    if (c.nranks > 1) x->chans[0].kernel_h = prof_start(&c, ap::kEvKernelCh, x->coll_h, k0);
    return;
  }
  const int n = c.nranks, me = c.rank;
  x->nsteps = nccl_steps(op, n, sim_channels());
  const int my_node = c.seg.slot(me)->node.load();
  x->chans.resize(sim_channels());
  for (int ch = 0; ch < sim_channels(); ++ch) {
    ChannelState& cs = x->chans[ch];
    for (int p : outs_of(op.kind, n, op.root, ch, me)) {
      Link l;
      l.peer = p;
      l.edge = static_cast<int>(cs.outs.size());
      l.net = c.seg.slot(p)->node.load() != my_node;
      cs.outs.push_back(l);
    }
    for (int s = 0; s < n; ++s) {
      if (s == me) continue;
      auto o = outs_of(op.kind, n, op.root, ch, s);
      for (size_t e = 0; e < o.size(); ++e)
        if (o[e] == me) {
          Link l;
          l.peer = s;
          l.edge = static_cast<int>(e);
          l.net = c.seg.slot(s)->node.load() != my_node;
          cs.ins.push_back(l);
        }
    }
    ProfDescr k;
    k.channel = ch;
    for (auto* v : {&cs.ins, &cs.outs})
      for (Link& l : *v) {
        if (!l.net) continue;
        ProfDescr pd;
        pd.channel = ch;
        pd.peer = l.peer;
        pd.nsteps = static_cast<int>(x->nsteps);
        pd.is_send = v == &cs.outs;
        l.op_h = prof_start(&c, ap::kEvProxyOp, x->coll_h, pd);
      }
    // The profiler proxy op of every channel (only when KernelCh is in the mask: prof_start).
    cs.kernel_h = prof_start(&c, ap::kEvKernelCh, x->coll_h, k);
  }
}

bool strikes(const Xport& x, int kind, int ch, int peer, uint64_t step, uint64_t nsteps) {
  const XportFault& f = x.fault;
  if (f.kind != kind) return false;
  if (f.channel >= 0 && f.channel != ch) return false;
  if (kind != FRSIM_FAULT_CHANNEL_STALL && f.peer != peer) return false;
  uint64_t at =
      std::min<uint64_t>(static_cast<uint64_t>(std::max(f.step, 0)), nsteps ? nsteps - 1 : 0);
  return step >= at;
}

void step_event(CommState& c, Link& l, uint64_t step, int state) {
  if (!l.net) return;
  if (l.step_h == nullptr) {
    ProfDescr d;
    d.step = static_cast<int>(step);
    l.step_h = prof_start(&c, ap::kEvProxyStep, l.op_h, d);
  }
  if (state != 0) prof_state(l.step_h, state, 0);
}

void step_done(Link& l) {
  prof_stop(l.step_h);
  l.step_h = nullptr;
}

// One pass over an in-edge; true when it changed.
bool advance_in(Op& op, Xport& x, int ch, Link& l) {
  CommState& c = *op.comm;
  EdgeWord* w = c.seg.edge(ch, l.peer, l.edge);
  const uint64_t k = x.chans[ch].step, want = pack(op.seq, k + 1);
  if (l.stage == 0) {
    step_event(c, l, k, ap::kStRecvWait);
    if (!strikes(x, FRSIM_FAULT_PROXY_RECV_STALL, ch, l.peer, k, x.nsteps)) {
      w->ready.store(want, std::memory_order_release);
      ring(c.seg.slot(l.peer));
    }
    l.stage = 1;
    return true;
  }
  if (l.stage == 1) {
    if (strikes(x, FRSIM_FAULT_PROXY_RECV_STALL, ch, l.peer, k, x.nsteps)) return false;
    if (w->tx.load(std::memory_order_acquire) < want) return false;
    step_event(c, l, k, ap::kStRecvGpuWait);
    l.stage = 2;
    return true;
  }
  if (l.stage == 2) {
    if (strikes(x, FRSIM_FAULT_CHANNEL_STALL, ch, -1, k, x.nsteps)) return false;
    step_done(l);
    l.stage = 3;
    return true;
  }
  return false;
}

bool advance_out(Op& op, Xport& x, int ch, Link& l) {
  CommState& c = *op.comm;
  EdgeWord* w = c.seg.edge(ch, c.rank, l.edge);
  const uint64_t k = x.chans[ch].step, want = pack(op.seq, k + 1);
  if (l.stage == 0) {
    step_event(c, l, k, ap::kStSendGpuWait);
    l.stage = 1;
    return true;
  }
  if (l.stage == 1) {
    if (strikes(x, FRSIM_FAULT_CHANNEL_STALL, ch, -1, k, x.nsteps)) return false;
    if (strikes(x, FRSIM_FAULT_PROXY_SEND_STALL, ch, l.peer, k, x.nsteps)) return false;
    if (x.tree)  // a tree forwards what it received this step
      for (const Link& in : x.chans[ch].ins)
        if (in.stage < 3) return false;
    if (w->ready.load(std::memory_order_acquire) < want) step_event(c, l, k, ap::kStSendPeerWait);
    l.stage = 2;
    return true;
  }
  if (l.stage == 2) {
    if (w->ready.load(std::memory_order_acquire) < want) return false;
    if (l.due_ns == 0) {  // on the wire: the transmission takes the pace's time (pace.cpp)
      step_event(c, l, k, ap::kStSendWait);
      l.due_ns = pace_now_ns() + pace_step_ns(c, l.peer);
    }
    if (pace_now_ns() < l.due_ns) {
      pace_wait_until(l.due_ns);
      return false;
    }
    l.stage = 3;
    if (strikes(x, FRSIM_FAULT_LINK_DOWN, ch, l.peer, k, x.nsteps))
      return true;  // lost on the wire
    w->tx.store(want, std::memory_order_release);
    ring(c.seg.slot(l.peer));
    step_done(l);
    return true;
  }
  return false;
}

// Runs one channel's steps up to `target` as far as they can go now; true when it changed.
bool advance_channel(Op& op, Xport& x, int ch, uint64_t target) {
  ChannelState& cs = x.chans[ch];
  bool changed = false;
  while (cs.step < target) {
    bool all = true;
    for (Link& l : cs.ins) {
      while (advance_in(op, x, ch, l)) changed = true;
      if (l.stage < 3) all = false;
    }
    for (Link& l : cs.outs) {
      while (advance_out(op, x, ch, l)) changed = true;
      if (l.stage < 3 || l.step_h != nullptr) all = false;
    }
    if (!all) break;
    ++cs.step;  // the step is over on every edge: the next one begins
    for (auto* v : {&cs.ins, &cs.outs})
      for (Link& l : *v) {
        l.stage = 0;
        l.due_ns = 0;  // the next step is paced afresh (pace.cpp)
      }
    changed = true;
  }
  return changed;
}

}  // namespace

XportResult xport_step(Op& op) {
  if (!op.xport) start_op(op);
  Xport& x = *op.xport;
  if (!x.modeled) return kXportDone;
  // The steps data chunk op.chunk needs done: its share of the op's steps, all of them for the last.
  const uint64_t target =
      op.chunk + 1 >= op.nchunks ? x.nsteps : (op.chunk + 1) * x.nsteps / op.nchunks;
  bool changed = false, done = true;
  for (int ch = 0; ch < static_cast<int>(x.chans.size()); ++ch) {
    if (advance_channel(op, x, ch, target)) changed = true;
    if (x.chans[ch].step < target) done = false;
  }
  if (done) return kXportDone;
  return changed ? kXportProgressed : kXportWaiting;
}

void xport_finish(Op& op) {
  if (!op.xport) return;
  Xport& x = *op.xport;
  for (auto& cs : x.chans) {
    for (auto* v : {&cs.ins, &cs.outs})
      for (Link& l : *v) {
        if (l.step_h != nullptr) step_done(l);
        prof_stop(l.op_h);
        l.op_h = nullptr;
      }
    if (cs.kernel_h != nullptr) {
      prof_state(cs.kernel_h, ap::kStKernelChStop, 0);
      prof_stop(cs.kernel_h);
      cs.kernel_h = nullptr;
    }
  }
}

}  // namespace frsim

extern "C" __attribute__((visibility("default"))) ncclResult_t frsim_nccl_fault(
    ncclComm_t comm, int kind, int channel, int peer, int step, int nth) {
  ncclResult_t err = ncclSuccess;
  auto c = frsim::ready_comm(comm, &err);
  if (!c) return err;
  if (kind < FRSIM_FAULT_CHANNEL_STALL || kind > FRSIM_FAULT_LINK_DOWN ||
      channel >= frsim::sim_channels() || channel < -1 || step < 0 || nth < 0)
    return ncclInvalidArgument;
  if (kind != FRSIM_FAULT_CHANNEL_STALL && (peer < 0 || peer >= c->nranks || peer == c->rank))
    return ncclInvalidArgument;
  std::lock_guard<std::mutex> g(c->mu);
  c->fault.kind = kind;
  c->fault.channel = channel;
  c->fault.peer = peer;
  c->fault.step = step;
  c->fault.seq = c->coll_issued.load() + static_cast<uint64_t>(nth);
  return ncclSuccess;
}
