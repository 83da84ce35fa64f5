// Execution of emulated NCCL operations on the caller's emulated stream, and groups.
//
// The host call only validates and queues; the stream's worker thread later runs the operation as
// a state machine over the communicator's shared memory, so "started" and "finished" happen when
// the stream reaches and leaves the operation, as on a GPU. Operations launched together (one
// group, one stream) make progress together, so a grouped send/recv ring cannot deadlock.
//
// Matching. Collectives move through the communicator chunk by chunk; every member posts a chunk
// (its data plus a descriptor: sequence number, kind, count, type, root, reduction) under a
// stamp that counts chunks on the communicator, and reads the others' once all have posted that
// stamp. Two buffers per member alternate by stamp parity: a member can post stamp t+1 only after
// everyone posted t, which means everyone finished reading t-1, so no acknowledgement is needed.
// A member whose descriptor differs makes the collective wait forever (a mismatch hangs). Point-
// to-point uses one channel per ordered pair with the same two-buffer scheme and an explicit
// acknowledgement; a send finishes when the receiver has taken every chunk.
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <functional>

#include "fr_sim.h"
#include "internal.h"

// Exported by libcuda.so.1 for this library only (see cuda/emulation.cpp).
extern "C" CUresult frsim_internal_launch_prepared(CUstream stream,
                                                   std::function<std::function<void()>()> prepare);

namespace frsim {
namespace {

thread_local int tl_depth = 0;
thread_local std::vector<Op> tl_ops;
thread_local std::vector<std::shared_ptr<CommState>> tl_inits;

bool is_coll(OpKind k) { return k != kSend && k != kRecv; }

// Elements each member posts for one collective (its whole input, split into chunks).
uint64_t posted_len(const Op& op) {
  switch (op.kind) {
    case kReduceScatter:
    case kAlltoAll:
    case kScatter: return static_cast<uint64_t>(op.comm->nranks) * op.count;
    default: return op.count;
  }
}

bool posts_data(const Op& op) {
  if (op.kind == kBroadcast || op.kind == kScatter) return op.comm->rank == op.root;
  return true;
}

CollDesc desc_of(const Op& op) {
  CollDesc d{};
  d.seq = op.seq;
  d.kind = op.kind;
  d.dtype = op.dtype;
  d.count = op.count;
  d.root =
      (op.kind == kBroadcast || op.kind == kReduce || op.kind == kGather || op.kind == kScatter)
          ? op.root
          : -1;
  d.redop =
      (op.kind == kAllReduce || op.kind == kReduce || op.kind == kReduceScatter) ? op.redop : 0;
  return d;
}

void set_turn_done(std::atomic<uint64_t>& counter, uint64_t seq) {
  uint64_t cur = counter.load(std::memory_order_acquire);
  while (cur < seq + 1 && !counter.compare_exchange_weak(cur, seq + 1, std::memory_order_acq_rel)) {
  }
}

void finish(Op& op) {
  CommState& c = *op.comm;
  if (op.kind == kSend)
    set_turn_done(c.send_done[op.root], op.seq);
  else if (op.kind == kRecv)
    set_turn_done(c.recv_done[op.root], op.seq);
  else
    set_turn_done(c.coll_done, op.seq);
  xport_finish(op);
  op.done = true;
  c.wake_self();  // an op of this process on another stream may wait for this turn
}

void notify_others(CommState& c) {
  for (int r = 0; r < c.nranks; ++r)
    if (r != c.rank) ring(c.seg.slot(r));
}

void prepare(Op& op) {
  size_t esz = dtype_size(op.dtype);
  uint64_t len = posted_len(op);
  uint64_t per =
      (is_coll(op.kind) ? op.comm->seg.hdr()->coll_chunk : op.comm->seg.hdr()->p2p_chunk) / esz;
  op.nchunks = len == 0 ? 1 : (len + per - 1) / per;
  if (op.premul_ptr != nullptr) op.premul = scalar_to_double(op.premul_ptr, op.premul_dtype);
  if (op.kind == kAlltoAll && op.sendbuff != nullptr && op.recvbuff != nullptr) {
    auto s = reinterpret_cast<uintptr_t>(op.sendbuff);
    auto r = reinterpret_cast<uintptr_t>(op.recvbuff);
    uint64_t bytes = len * esz;
    if (s < r + bytes &&
        r < s + bytes) {  // in place: keep the input before the output overwrites it
      op.staged.assign(static_cast<const char*>(op.sendbuff),
                       static_cast<const char*>(op.sendbuff) + bytes);
      op.sendbuff = op.staged.data();
    }
  }
}

// The output of one collective chunk [a, b) (element range of the posted space), parity p.
void compute(Op& op, uint64_t a, uint64_t b, int p) {
  CommState& c = *op.comm;
  size_t esz = dtype_size(op.dtype);
  int n = c.nranks, me = c.rank;
  uint64_t len = b - a;
  if (len == 0) return;  // an empty collective only synchronizes
  const void* bufs[1024];
  std::vector<const void*> big;
  const void** in = bufs;
  if (n > 1024) {
    big.resize(n);
    in = big.data();
  }
  for (int r = 0; r < n; ++r) in[r] = c.seg.coll_buf(r, p);
  char* out = static_cast<char*>(op.recvbuff);
  uint64_t cnt = op.count;
  uint64_t lo = std::max<uint64_t>(a, me * cnt), hi = std::min<uint64_t>(b, (me + 1) * cnt);
  switch (op.kind) {
    case kAllReduce: reduce(out + a * esz, in, n, len, op.dtype, op.redop, n); break;
    case kReduce:
      if (me == op.root) reduce(out + a * esz, in, n, len, op.dtype, op.redop, n);
      break;
    case kBroadcast:
      if (out + a * esz != in[op.root]) memcpy(out + a * esz, in[op.root], len * esz);
      break;
    case kAllGather:
      for (int r = 0; r < n; ++r) memcpy(out + (r * cnt + a) * esz, in[r], len * esz);
      break;
    case kGather:
      if (me == op.root)
        for (int r = 0; r < n; ++r) memcpy(out + (r * cnt + a) * esz, in[r], len * esz);
      break;
    case kReduceScatter:
      if (lo < hi) {
        std::vector<const void*> part(n);
        for (int r = 0; r < n; ++r) part[r] = static_cast<const char*>(in[r]) + (lo - a) * esz;
        reduce(out + (lo - me * cnt) * esz, part.data(), n, hi - lo, op.dtype, op.redop, n);
      }
      break;
    case kAlltoAll:
      if (lo < hi)
        for (int r = 0; r < n; ++r)
          memcpy(out + (r * cnt + lo - me * cnt) * esz,
                 static_cast<const char*>(in[r]) + (lo - a) * esz, (hi - lo) * esz);
      break;
    case kScatter:
      if (lo < hi)
        memcpy(out + (lo - me * cnt) * esz, static_cast<const char*>(in[op.root]) + (lo - a) * esz,
               (hi - lo) * esz);
      break;
    default: break;
  }
}

// After its data moved, a collective's kernel does its own work (FRSIM_KERNEL_US, slowed by
// frsim_gpu_slow) before it ends; the peers' next collective waits for this GPU. True once done.
bool kernel_work(Op& op) {
  if (op.kernel_due_ns == 0) {
    uint64_t t = pace_kernel_ns();
    op.kernel_due_ns = t > 0 ? pace_now_ns() + t : 1;
  }
  if (op.kernel_due_ns > 1 && pace_now_ns() < op.kernel_due_ns) {
    pace_wait_until(op.kernel_due_ns);
    return false;
  }
  finish(op);
  return true;
}

// One step of a collective; true when its state changed.
bool step_coll(Op& op) {
  CommState& c = *op.comm;
  if (c.coll_done.load(std::memory_order_acquire) != op.seq) return false;  // not its turn yet
  if (op.phase == 2) return kernel_work(op);
  size_t esz = dtype_size(op.dtype);
  uint64_t per = c.seg.hdr()->coll_chunk / esz;
  uint64_t len = posted_len(op);
  uint64_t a = std::min(len, op.chunk * per), b = std::min(len, a + per);
  Slot* me = c.me();
  if (op.phase == 0) {
    // The chunk's channel steps first (transport.cpp): a stopped channel, proxy or link stops it.
    if (XportResult x = xport_step(op); x != kXportDone) return x == kXportProgressed;
    uint64_t t = c.coll_stamp + 1;
    int p = static_cast<int>(t & 1);
    me->coll_desc[p] = desc_of(op);
    if (posts_data(op) && b > a) {
      char* dst = c.seg.coll_buf(c.rank, p);
      const char* src = static_cast<const char*>(op.sendbuff) + a * esz;
      if (op.redop == kPreMulSum && desc_of(op).redop == kPreMulSum)
        premul(dst, src, b - a, op.dtype, op.premul);
      else
        memcpy(dst, src, (b - a) * esz);
    }
    me->coll_posted.store(t, std::memory_order_release);
    notify_others(c);
    op.stamp = t;
    op.phase = 1;
    return true;
  }
  uint64_t t = op.stamp;
  int p = static_cast<int>(t & 1);
  CollDesc mine = desc_of(op);
  for (int r = 0; r < c.nranks; ++r) {
    if (r == c.rank) continue;
    Slot* s = c.seg.slot(r);
    if (s->coll_posted.load(std::memory_order_acquire) < t) return false;
    if (!(s->coll_desc[p] == mine)) {
      if (!op.mismatch && getenv("FRSIM_DEBUG") != nullptr)
        fprintf(
            stderr,
            "frsim: rank %d: collective #%llu does not match rank %d's; it will never complete\n",
            c.rank, static_cast<unsigned long long>(op.seq), r);
      op.mismatch = true;
      return false;
    }
  }
  compute(op, a, b, p);
  c.coll_stamp = t;
  ++op.chunk;
  op.phase = 0;
  if (op.chunk >= op.nchunks) {
    op.phase = 2;  // the kernel's own work (pace.cpp) before it ends
    kernel_work(op);
  }
  return true;
}

bool step_send(Op& op) {
  CommState& c = *op.comm;
  int peer = op.root;
  if (c.send_done[peer].load(std::memory_order_acquire) != op.seq) return false;
  if (!op.xport) xport_step(op);  // its profiler events
  Channel* ch = c.seg.chan(c.rank, peer);
  if (op.phase == 1) {  // everything posted: done once the receiver has taken the last chunk
    if (ch->acked.load(std::memory_order_acquire) < op.stamp) return false;
    finish(op);
    return true;
  }
  uint64_t t = c.send_stamp[peer] + 1;
  if (t >= 3 && ch->acked.load(std::memory_order_acquire) < t - 2)
    return false;  // buffer still in use
  int p = static_cast<int>(t & 1);
  size_t esz = dtype_size(op.dtype);
  uint64_t per = c.seg.hdr()->p2p_chunk / esz;
  uint64_t a = std::min<uint64_t>(op.count, op.chunk * per),
           b = std::min<uint64_t>(op.count, a + per);
  ch->desc[p] = P2PDesc{op.seq, static_cast<uint32_t>(op.dtype), 0, op.count};
  if (b > a)
    memcpy(c.seg.p2p_buf(c.rank, peer, p), static_cast<const char*>(op.sendbuff) + a * esz,
           (b - a) * esz);
  ch->posted.store(t, std::memory_order_release);
  ring(c.seg.slot(peer));
  c.send_stamp[peer] = t;
  op.stamp = t;
  if (++op.chunk >= op.nchunks) op.phase = 1;
  return true;
}

bool step_recv(Op& op) {
  CommState& c = *op.comm;
  int peer = op.root;
  if (c.recv_done[peer].load(std::memory_order_acquire) != op.seq) return false;
  if (!op.xport) xport_step(op);
  Channel* ch = c.seg.chan(peer, c.rank);
  uint64_t t = c.recv_stamp[peer] + 1;
  if (ch->posted.load(std::memory_order_acquire) < t) return false;
  int p = static_cast<int>(t & 1);
  P2PDesc want{op.seq, static_cast<uint32_t>(op.dtype), 0, op.count};
  if (!(ch->desc[p] == want)) {
    op.mismatch = true;  // a different count or type than the matching send: never completes
    return false;
  }
  size_t esz = dtype_size(op.dtype);
  uint64_t per = c.seg.hdr()->p2p_chunk / esz;
  uint64_t a = std::min<uint64_t>(op.count, op.chunk * per),
           b = std::min<uint64_t>(op.count, a + per);
  if (b > a)
    memcpy(static_cast<char*>(op.recvbuff) + a * esz, c.seg.p2p_buf(peer, c.rank, p),
           (b - a) * esz);
  ch->acked.store(t, std::memory_order_release);
  ring(c.seg.slot(peer));
  c.recv_stamp[peer] = t;
  if (++op.chunk >= op.nchunks) finish(op);
  return true;
}

bool step(Op& op) {
  CommState& c = *op.comm;
  if (c.stopped()) {  // aborted or revoked: the operation ends (with an error) right away
    finish(op);
    return true;
  }
  if (c.init_state.load(std::memory_order_acquire) != 1) return false;
  switch (op.kind) {
    case kSend: return step_send(op);
    case kRecv: return step_recv(op);
    default: return step_coll(op);
  }
}

void execute(std::vector<Op>& ops) {
  for (auto& op : ops) prepare(op);
  for (;;) {
    // The bell is read before checking, so a change made after the check cannot be missed.
    CommState* watch = nullptr;
    bool several = false;
    for (auto& op : ops) {
      if (op.done) continue;
      if (watch == nullptr)
        watch = op.comm.get();
      else if (watch != op.comm.get())
        several = true;
    }
    if (watch == nullptr) return;
    Slot* bell_slot =
        watch->init_state.load(std::memory_order_acquire) == 1 ? watch->me() : nullptr;
    uint32_t bell = bell_slot ? bell_slot->bell.load(std::memory_order_seq_cst) : 0;
    bool progressed = false;
    pace_take_wait();  // due times are gathered afresh by this pass
    for (auto& op : ops)
      while (!op.done && step(op)) progressed = true;
    if (progressed) continue;
    if (bell_slot == nullptr) {
      usleep(1000);
      continue;
    }
    int timeout_ms = several ? 2 : 200;
    if (uint64_t due = pace_take_wait(); due > 0) {  // a timed gate: wake when it is due
      uint64_t now = pace_now_ns();
      int until = due > now ? static_cast<int>((due - now + 999999) / 1000000) : 0;
      if (until == 0) continue;
      timeout_ms = std::min(timeout_ms, until);
    }
    bell_slot->sleepers.fetch_add(1, std::memory_order_seq_cst);
    if (bell_slot->bell.load(std::memory_order_seq_cst) == bell)
      futex_wait(&bell_slot->bell, bell, timeout_ms);
    bell_slot->sleepers.fetch_sub(1, std::memory_order_seq_cst);
  }
}

void assign_seq(Op& op) {
  CommState& c = *op.comm;
  if (op.kind == kSend)
    op.seq = c.send_issued[op.root].fetch_add(1);
  else if (op.kind == kRecv)
    op.seq = c.recv_issued[op.root].fetch_add(1);
  else
    op.seq = c.coll_issued.fetch_add(1);
}

// The work of one launch on its stream: run the ops, then let go of their communicators.
std::function<void()> make_work(std::vector<Op> ops) {
  auto shared = std::make_shared<std::vector<Op>>(std::move(ops));
  return [shared] {
    execute(*shared);
    for (auto& op : *shared) op.comm->pending.fetch_sub(1);
    shared->clear();
  };
}

ncclResult_t launch(std::vector<Op> ops) {
  std::vector<std::pair<CUstream, std::vector<Op>>> parts;
  for (auto& op : ops) {
    auto it =
        std::find_if(parts.begin(), parts.end(), [&](auto& p) { return p.first == op.stream; });
    if (it == parts.end()) {
      parts.emplace_back(op.stream, std::vector<Op>{});
      it = parts.end() - 1;
    }
    it->second.push_back(std::move(op));
  }
  ncclResult_t res = ncclSuccess;
  for (auto& [stream, part] : parts) {
    // Numbers are given on the host, in call order: now, or at each launch of a captured graph
    // (every replay of a captured collective is a new collective).
    auto tmpl = std::make_shared<const std::vector<Op>>(std::move(part));
    auto prepare = [tmpl]() -> std::function<void()> {
      std::vector<Op> ops = *tmpl;
      for (auto& op : ops) {
        assign_seq(op);
        op.comm->pending.fetch_add(1);
      }
      return make_work(std::move(ops));
    };
    if (frsim_internal_launch_prepared(stream, prepare) != CUDA_SUCCESS)
      res = ncclUnhandledCudaError;
  }
  return res;
}

}  // namespace

ncclResult_t submit(Op op) {
  if (tl_depth > 0) {
    tl_ops.push_back(std::move(op));
    return ncclSuccess;
  }
  std::vector<Op> v;
  v.push_back(std::move(op));
  return launch(std::move(v));
}

ncclResult_t group_start() {
  ++tl_depth;
  return ncclSuccess;
}

int group_depth() { return tl_depth; }

void group_defer_init(std::shared_ptr<CommState> c) { tl_inits.push_back(std::move(c)); }

ncclResult_t group_end(bool simulate) {
  if (tl_depth == 0) return ncclInvalidUsage;
  if (--tl_depth > 0) return ncclSuccess;
  std::vector<Op> ops = std::move(tl_ops);
  std::vector<std::shared_ptr<CommState>> inits = std::move(tl_inits);
  tl_ops.clear();
  tl_inits.clear();
  ncclResult_t res = ncclSuccess;
  for (auto& c : inits) {
    ncclResult_t r = comm_wait_joined(c.get());
    if (r != ncclSuccess) res = r;
  }
  if (simulate) return res;  // nothing is launched
  ncclResult_t r = launch(std::move(ops));
  return res != ncclSuccess ? res : r;
}

}  // namespace frsim
