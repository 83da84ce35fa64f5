// The profiler plugin's core (see profiler.h): contexts, tagged event handles and the channel
// slots of the flight log.
#include "profiler.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "profiler_abi.h"

namespace fr::agent::prof {
namespace {

// One communicator as NCCL's profiler sees it.
struct Ctx {
  uint64_t comm_hash;
  uint64_t comm_id;  // fr's id, once claim_context found it (atomic)
  int32_t rank;
  int32_t nranks;
  uint32_t ordinal;  // 1-based
};
constexpr uint32_t kMaxContexts = 4096;
Ctx g_ctxs[kMaxContexts];
uint32_t g_next_ctx;  // (atomic)
int g_version;        // (atomic)
int g_pid;

// Slot index: key -> slot, open addressing over a fixed table (never grows).
constexpr uint32_t kBuckets = 2 * FR_MAX_CHAN_CAPACITY;
uint64_t g_keys[kBuckets];  // 0 = empty (atomic)
int32_t g_slots[kBuckets];  // slot + 1; 0 while the key's slot is being made (atomic)
// Per slot, private: the first step id of the current op (NCCL numbers steps per connection)
// and the states of the last steps, so the oldest unfinished step's state is known when an
// older one finishes.
constexpr uint32_t kStepRing = 8;  // NCCL_STEPS: steps in flight per connection
struct SlotPriv {
  int64_t base;  // -1 until the op's first step (atomic)
  uint8_t states[kStepRing];
};
SlotPriv g_priv[FR_MAX_CHAN_CAPACITY];

// Handles: the type in the top byte, never 0.
enum : uint64_t { kHColl = 1, kHProxyOp = 2, kHStep = 3, kHKernel = 4, kHOther = 5 };
inline void* make_handle(uint64_t type, uint64_t payload) {
  return reinterpret_cast<void*>((type << 56) | (payload & ((1ull << 56) - 1)));
}
inline uint64_t handle_type(void* h) { return reinterpret_cast<uint64_t>(h) >> 56; }
inline uint64_t handle_payload(void* h) {
  return reinterpret_cast<uint64_t>(h) & ((1ull << 56) - 1);
}

uint16_t op_of(const char* func) {
  if (func == nullptr) return FR_OP_NONE;
#define FR_X(e, v, s, k) \
  if (strcmp(func, s) == 0) return FR_OP_##e;
  FR_OP_LIST(FR_X)
#undef FR_X
  return FR_OP_NONE;
}

bool table_ready() {
  return __atomic_load_n(&g_ctx.mode, __ATOMIC_ACQUIRE) == kRecording && g_ctx.chans != nullptr &&
         g_ctx.chan_cap != 0;
}

void dropped() { __atomic_fetch_add(&g_ctx.hdr->chan_dropped, 1u, __ATOMIC_RELAXED); }

uint64_t slot_key(const Ctx& c, int channel, int kind, int peer) {
  return (uint64_t{c.ordinal} << 40) | (uint64_t(channel & 0xff) << 32) | (uint64_t(kind) << 28) |
         (uint64_t(uint32_t(peer + 1)) & 0x0fffffff);
}

// A new slot's fixed part; -1 when the table is full.
int32_t make_slot(const Ctx& c, int channel, int kind, int peer) {
  uint32_t i = __atomic_fetch_add(&g_ctx.hdr->chan_count, 1u, __ATOMIC_RELAXED);
  if (i >= g_ctx.chan_cap) {
    __atomic_store_n(&g_ctx.hdr->chan_count, g_ctx.chan_cap, __ATOMIC_RELAXED);
    return -1;
  }
  fr_chan_entry e = {};
  e.comm_hash = c.comm_hash;
  e.comm_id = __atomic_load_n(&c.comm_id, __ATOMIC_ACQUIRE);
  e.rank = c.rank;
  e.nranks = c.nranks;
  e.peer = kind == FR_CHAN_KERNEL ? -1 : peer;
  e.channel = uint16_t(channel);
  e.kind = uint8_t(kind);
  e.ctx_ordinal = c.ordinal;
  __atomic_store_n(&g_priv[i].base, int64_t{-1}, __ATOMIC_RELAXED);
  if (!fr_chan_publish_fixed(&g_ctx.chans[i], &e)) return -1;
  return int32_t(i);
}

// The slot of (context, channel, kind, peer), made on first use; -1 when there is none.
int32_t find_slot(const Ctx& c, int channel, int kind, int peer) {
  if (channel < 0 || channel >= int(FR_MAX_CHANNELS)) return -1;
  const uint64_t key = slot_key(c, channel, kind, peer);
  const uint32_t mask = kBuckets - 1;
  uint32_t b = uint32_t(hash_finish(hash_u64(0x9e3779b97f4a7c15ull, key))) & mask;
  for (uint32_t probe = 0; probe < 64; ++probe, b = (b + 1) & mask) {
    uint64_t k = __atomic_load_n(&g_keys[b], __ATOMIC_ACQUIRE);
    if (k == 0) {
      uint64_t expected = 0;
      if (__atomic_compare_exchange_n(&g_keys[b], &expected, key, false, __ATOMIC_ACQ_REL,
                                      __ATOMIC_ACQUIRE)) {
        int32_t s = make_slot(c, channel, kind, peer);
        __atomic_store_n(&g_slots[b], s + 1 > 0 ? s + 1 : -1, __ATOMIC_RELEASE);
        return s;
      }
      k = expected;
    }
    if (k == key) {
      int32_t v = __atomic_load_n(&g_slots[b], __ATOMIC_ACQUIRE);
      return v > 0 ? v - 1 : -1;  // still being made by another thread, or the table was full
    }
  }
  return -1;
}

inline void store32(uint32_t* p, uint32_t v) { __atomic_store_n(p, v, __ATOMIC_RELAXED); }
inline void store64(uint64_t* p, uint64_t v) { __atomic_store_n(p, v, __ATOMIC_RELAXED); }
inline uint32_t load32(const uint32_t* p) { return __atomic_load_n(p, __ATOMIC_RELAXED); }

// The parent collective or p2p of a proxy op or kernel channel, when its handle is ours.
void parent_op(void* parent, uint64_t* seq, uint32_t* op) {
  *seq = 0;
  *op = FR_OP_NONE;
  if (parent == nullptr || handle_type(parent) != kHColl) return;
  uint64_t p = handle_payload(parent);
  *op = uint32_t(p >> 40) & 0xffff;
  *seq = p & ((1ull << 40) - 1);
}

void* start_proxy_op(Ctx& c, const Event& e) {
  const int kind = e.is_send ? FR_CHAN_SEND : FR_CHAN_RECV;
  if (e.peer < 0 || e.peer >= c.nranks) return nullptr;
  int32_t s = find_slot(c, e.channel, kind, e.peer);
  if (s < 0) {
    dropped();
    return nullptr;
  }
  fr_chan_entry& ch = g_ctx.chans[s];
  uint64_t seq;
  uint32_t op;
  // A parent from another process (a proxy serving several) is not ours to decode.
  parent_op(e.pid == g_pid ? e.parent : nullptr, &seq, &op);
  const uint64_t now = now_ns();
  __atomic_store_n(&g_priv[s].base, int64_t{-1}, __ATOMIC_RELAXED);
  store32(&ch.posted, 0);
  store32(&ch.done, 0);
  store32(&ch.state_step, 0);
  store32(&ch.state, FR_CHANST_IDLE);
  store64(&ch.bytes, 0);
  store64(&ch.op_seq, seq);
  store32(&ch.op, op);
  store32(&ch.nsteps, e.nsteps > 0 ? uint32_t(e.nsteps) : 0);
  store64(&ch.op_start_ns, now);
  store64(&ch.last_ns, now);
  __atomic_fetch_add(&ch.ops_started, 1, __ATOMIC_RELEASE);
  return make_handle(kHProxyOp, uint64_t(s));
}

void* start_step(const Event& e) {
  if (e.parent == nullptr || handle_type(e.parent) != kHProxyOp || e.step < 0) return nullptr;
  const uint32_t s = uint32_t(handle_payload(e.parent));
  if (s >= g_ctx.chan_cap) return nullptr;
  fr_chan_entry& ch = g_ctx.chans[s];
  int64_t base = __atomic_load_n(&g_priv[s].base, __ATOMIC_RELAXED);
  if (base < 0) {
    base = e.step;
    __atomic_store_n(&g_priv[s].base, base, __ATOMIC_RELAXED);
  }
  const int64_t rel64 = int64_t(e.step) - base;
  if (rel64 < 0 || rel64 >= (1 << 24)) return nullptr;
  const uint32_t rel = uint32_t(rel64);
  __atomic_store_n(&g_priv[s].states[rel % kStepRing], uint8_t(FR_CHANST_POSTED), __ATOMIC_RELAXED);
  if (rel + 1 > load32(&ch.posted)) store32(&ch.posted, rel + 1);
  if (rel == load32(&ch.done)) {
    store32(&ch.state_step, rel);
    store32(&ch.state, FR_CHANST_POSTED);
  }
  store64(&ch.last_ns, now_ns());
  return make_handle(kHStep, (uint64_t(s) << 24) | rel);
}

void* start_kernel(Ctx& c, const Event& e) {
  int32_t s = find_slot(c, e.channel, FR_CHAN_KERNEL, -1);
  if (s < 0) {
    dropped();
    return nullptr;
  }
  fr_chan_entry& ch = g_ctx.chans[s];
  uint64_t seq;
  uint32_t op;
  parent_op(e.parent, &seq, &op);
  const uint64_t now = now_ns();
  store64(&ch.op_seq, seq);
  store32(&ch.op, op);
  store32(&ch.state, FR_CHANST_RUNNING);
  store64(&ch.op_start_ns, now);
  store64(&ch.last_ns, now);
  __atomic_fetch_add(&ch.ops_started, 1, __ATOMIC_RELEASE);
  return make_handle(kHKernel, uint64_t(s));
}

uint32_t chan_state_of(int nccl_state) {
  switch (nccl_state) {
    case kStSendGpuWait: return FR_CHANST_SEND_GPU_WAIT;
    case kStSendPeerWait: return FR_CHANST_SEND_PEER_WAIT;
    case kStSendWait: return FR_CHANST_SEND_WAIT;
    case kStRecvWait: return FR_CHANST_RECV_WAIT;
    case kStRecvFlushWait: return FR_CHANST_RECV_FLUSH_WAIT;
    case kStRecvGpuWait: return FR_CHANST_RECV_GPU_WAIT;
    default: return FR_CHANST_IDLE;
  }
}

}  // namespace

void claim_context(uint64_t comm_id, int nranks, int rank) {
  uint32_t n = __atomic_load_n(&g_next_ctx, __ATOMIC_ACQUIRE);
  if (n > kMaxContexts) n = kMaxContexts;
  for (uint32_t i = n; i-- > 0;) {
    Ctx& c = g_ctxs[i];
    if (c.ordinal == 0 || c.rank != rank || c.nranks != nranks) continue;
    uint64_t zero = 0;
    if (__atomic_compare_exchange_n(&c.comm_id, &zero, comm_id, false, __ATOMIC_ACQ_REL,
                                    __ATOMIC_RELAXED))
      return;
  }
}

void note_version(int version) {
  if (__atomic_exchange_n(&g_version, version, __ATOMIC_RELAXED) != version)
    debug_log("NCCL loaded the profiler plugin interface v%d", version);
}

int init(void** context, uint64_t comm_hash, const char* name, int nnodes, int nranks, int rank) {
  (void)nnodes;
  (void)name;
  *context = nullptr;
  const char* off = getenv("FR_PROFILER");
  if (off != nullptr && strcmp(off, "0") == 0) return 0;  // the kill switch
  if (!recording() || !table_ready()) return 0;
  if (nranks <= 0 || rank < 0 || rank >= nranks) return 0;
  uint32_t i = __atomic_fetch_add(&g_next_ctx, 1u, __ATOMIC_RELAXED);
  if (i >= kMaxContexts) return 0;
  g_pid = int(getpid());
  Ctx& c = g_ctxs[i];
  c.comm_hash = comm_hash;
  c.rank = rank;
  c.nranks = nranks;
  __atomic_store_n(&c.ordinal, i + 1, __ATOMIC_RELEASE);
  *context = &c;
  set_log_flags(FR_LOG_F_PROFILER, 0);
  return int(kEvColl | kEvP2p | kEvProxyOp | kEvProxyStep | kEvKernelCh);
}

void* start(void* context, const Event& e) {
  if (context == nullptr || !table_ready()) return nullptr;
  Ctx& c = *static_cast<Ctx*>(context);
  switch (e.type) {
    case kEvColl:
    case kEvP2p:
      return make_handle(kHColl, (uint64_t(op_of(e.func)) << 40) | (e.seq & ((1ull << 40) - 1)));
    case kEvProxyOp: return start_proxy_op(c, e);
    case kEvProxyStep: return start_step(e);
    case kEvKernelCh: return start_kernel(c, e);
    default: return make_handle(kHOther, 0);
  }
}

void stop(void* handle) {
  if (handle == nullptr || !table_ready()) return;
  const uint64_t t = handle_type(handle), p = handle_payload(handle);
  if (t == kHStep) {
    const uint32_t s = uint32_t(p >> 24);
    if (s >= g_ctx.chan_cap) return;
    fr_chan_entry& ch = g_ctx.chans[s];
    uint32_t done = __atomic_add_fetch(&ch.done, 1u, __ATOMIC_RELAXED);
    uint32_t posted = load32(&ch.posted);
    uint32_t next = done < posted
                        ? __atomic_load_n(&g_priv[s].states[done % kStepRing], __ATOMIC_RELAXED)
                        : uint32_t(FR_CHANST_DONE);
    store32(&ch.state_step, done);
    store32(&ch.state, next);
    store64(&ch.last_ns, now_ns());
  } else if (t == kHProxyOp || t == kHKernel) {
    if (p >= g_ctx.chan_cap) return;
    fr_chan_entry& ch = g_ctx.chans[p];
    if (t == kHKernel) store32(&ch.state, FR_CHANST_STOPPED);
    store64(&ch.last_ns, now_ns());
    __atomic_fetch_add(&ch.ops_done, 1, __ATOMIC_RELEASE);
  }
}

void record(void* handle, int nccl_state, uint64_t trans_size) {
  if (handle == nullptr || !table_ready()) return;
  const uint64_t t = handle_type(handle), p = handle_payload(handle);
  if (t == kHKernel && nccl_state == kStKernelChStop && p < g_ctx.chan_cap) {
    store32(&g_ctx.chans[p].state, FR_CHANST_STOPPED);
    return;
  }
  if (t != kHStep) return;
  const uint32_t s = uint32_t(p >> 24), rel = uint32_t(p & 0xffffff);
  const uint32_t st = chan_state_of(nccl_state);
  if (s >= g_ctx.chan_cap || st == FR_CHANST_IDLE) return;
  fr_chan_entry& ch = g_ctx.chans[s];
  __atomic_store_n(&g_priv[s].states[rel % kStepRing], uint8_t(st), __ATOMIC_RELAXED);
  if (rel == load32(&ch.done)) {
    store32(&ch.state_step, rel);
    store32(&ch.state, st);
  }
  if (trans_size != 0 && (st == FR_CHANST_SEND_WAIT || st == FR_CHANST_RECV_GPU_WAIT))
    __atomic_fetch_add(&ch.bytes, trans_size, __ATOMIC_RELAXED);
  store64(&ch.last_ns, now_ns());
}

void finalize(void* context) { (void)context; }  // slots stay: a dump still shows them

}  // namespace fr::agent::prof
