// The profiler plugin's core (see profiler.h): contexts, tagged event handles and the channel
// slots of the flight log.
#include "comms.h"
#include "log.h"
#include "profiler.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

namespace fr::agent::prof {

constinit ProfilerState g_prof = {};

namespace {

// Handles: the type in the top byte, never 0. Slot handles carry (slot, generation, step).
enum : uint64_t { kHColl = 1, kHProxyOp = 2, kHStep = 3, kHKernel = 4, kHOther = 5 };
inline void* make_handle(uint64_t type, uint64_t payload) {
  return reinterpret_cast<void*>((type << 56) | (payload & ((1ull << 56) - 1)));
}
inline uint64_t handle_type(void* h) { return reinterpret_cast<uint64_t>(h) >> 56; }
inline uint64_t handle_payload(void* h) {
  return reinterpret_cast<uint64_t>(h) & ((1ull << 56) - 1);
}
inline void* slot_handle(uint64_t type, uint32_t slot, uint32_t gen, uint32_t rel) {
  return make_handle(
      type, (uint64_t(slot & 0xffff) << 40) | (uint64_t(gen & 0xffff) << 24) | (rel & 0xffffff));
}
struct SlotRef {
  uint32_t slot, gen, rel;
};
inline SlotRef slot_ref(void* h) {
  const uint64_t p = handle_payload(h);
  return {uint32_t(p >> 40) & 0xffff, uint32_t(p >> 24) & 0xffff, uint32_t(p) & 0xffffff};
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
  return __atomic_load_n(&g_agent.mode, __ATOMIC_ACQUIRE) == kRecording && g_log.chans != nullptr &&
         g_log.chan_cap != 0;
}

void dropped() {
  __atomic_fetch_add(&g_log.sections[FR_SECTION_CHANS].dropped, 1u, __ATOMIC_RELAXED);
}

uint64_t slot_key(const Ctx& c, int channel, int kind, int peer) {
  return (uint64_t{c.ordinal} << 40) | (uint64_t(channel & 0xff) << 32) | (uint64_t(kind) << 28) |
         (uint64_t(uint32_t(peer + 1)) & 0x0fffffff);
}

// A new slot's fixed part; -1 when the table is full.
int32_t make_slot(const Ctx& c, int channel, int kind, int peer) {
  // Taken only while there is room: a reader never sees the count past the capacity.
  uint64_t* count = &g_log.sections[FR_SECTION_CHANS].count;
  uint64_t taken = __atomic_load_n(count, __ATOMIC_RELAXED);
  do {
    if (taken >= g_log.chan_cap) return -1;
  } while (!__atomic_compare_exchange_n(count, &taken, taken + 1, true, __ATOMIC_RELAXED,
                                        __ATOMIC_RELAXED));
  const uint32_t i = (uint32_t)taken;
  fr_chan_entry e = {};
  e.comm_hash = c.comm_hash;
  e.comm_id = __atomic_load_n(&c.comm_id, __ATOMIC_ACQUIRE);
  e.rank = c.rank;
  e.nranks = c.nranks;
  e.peer = kind == FR_CHAN_KERNEL ? -1 : peer;
  e.channel = uint16_t(channel);
  e.kind = uint8_t(kind);
  e.ctx_ordinal = c.ordinal;
  __atomic_store_n(&g_prof.priv[i].base, int64_t{-1}, __ATOMIC_RELAXED);
  if (!fr_chan_publish_fixed(&g_log.chans[i], &e)) return -1;
  return int32_t(i);
}

// The slot of (context, channel, kind, peer), made on first use; -1 when there is none.
int32_t find_slot(const Ctx& c, int channel, int kind, int peer) {
  if (channel < 0 || channel >= int(FR_MAX_CHANNELS)) return -1;
  const uint64_t key = slot_key(c, channel, kind, peer);
  const uint32_t mask = kBuckets - 1;
  uint32_t b = uint32_t(hash_finish(hash_u64(0x9e3779b97f4a7c15ull, key))) & mask;
  for (uint32_t probe = 0; probe < 64; ++probe, b = (b + 1) & mask) {
    uint64_t k = __atomic_load_n(&g_prof.keys[b], __ATOMIC_ACQUIRE);
    if (k == 0) {
      uint64_t expected = 0;
      if (__atomic_compare_exchange_n(&g_prof.keys[b], &expected, key, false, __ATOMIC_ACQ_REL,
                                      __ATOMIC_ACQUIRE)) {
        int32_t s = make_slot(c, channel, kind, peer);
        __atomic_store_n(&g_prof.slots[b], s + 1 > 0 ? s + 1 : -1, __ATOMIC_RELEASE);
        return s;
      }
      k = expected;
    }
    if (k == key) {
      int32_t v = __atomic_load_n(&g_prof.slots[b], __ATOMIC_ACQUIRE);
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

// The slot's generation for a new op; a handle whose generation differs is stale.
uint32_t next_gen(uint32_t s) {
  return __atomic_add_fetch(&g_prof.priv[s].gen, 1u, __ATOMIC_RELAXED) & 0xffff;
}
bool current(const SlotRef& r) {
  return r.slot < g_log.chan_cap &&
         (__atomic_load_n(&g_prof.priv[r.slot].gen, __ATOMIC_RELAXED) & 0xffff) == r.gen;
}

// The slot's step view from its private states: `done` is the finished prefix of the op's
// steps, `state` the state of the oldest unfinished one (DONE when none is).
void settle(uint32_t s) {
  fr_chan_entry& ch = g_log.chans[s];
  uint32_t done = load32(&ch.done);
  const uint32_t posted = load32(&ch.posted);
  while (done < posted && __atomic_load_n(&g_prof.priv[s].states[done % kStepRing],
                                          __ATOMIC_RELAXED) == FR_CHANST_DONE)
    ++done;
  store32(&ch.done, done);
  store32(&ch.state_step, done);
  store32(&ch.state, done < posted ? __atomic_load_n(&g_prof.priv[s].states[done % kStepRing],
                                                     __ATOMIC_RELAXED)
                                   : uint32_t(FR_CHANST_DONE));
  store64(&ch.last_ns, now_ns());
}

void* start_proxy_op(Ctx& c, const Event& e) {
  const int kind = e.is_send ? FR_CHAN_SEND : FR_CHAN_RECV;
  if (e.peer < 0 || e.peer >= c.nranks) return nullptr;
  int32_t s = find_slot(c, e.channel, kind, e.peer);
  if (s < 0) {
    dropped();
    return nullptr;
  }
  fr_chan_entry& ch = g_log.chans[s];
  uint64_t seq;
  uint32_t op;
  // A parent from another process (a proxy serving several) is not ours to decode.
  parent_op(e.pid == g_prof.pid ? e.parent : nullptr, &seq, &op);
  const uint64_t now = now_ns();
  // The slot now shows this op: steps of the previous op on the connection still in flight
  // carry the old generation and no longer count (they would read as a stuck step).
  const uint32_t gen = next_gen(uint32_t(s));
  __atomic_store_n(&g_prof.priv[s].base, int64_t{-1}, __ATOMIC_RELAXED);
  for (uint8_t& st : g_prof.priv[s].states)
    __atomic_store_n(&st, uint8_t(FR_CHANST_IDLE), __ATOMIC_RELAXED);
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
  return slot_handle(kHProxyOp, uint32_t(s), gen, 0);
}

void* start_step(const Event& e) {
  if (e.parent == nullptr || handle_type(e.parent) != kHProxyOp || e.step < 0) return nullptr;
  const SlotRef op = slot_ref(e.parent);
  if (!current(op)) return nullptr;  // a step of an op the slot no longer shows
  const uint32_t s = op.slot;
  fr_chan_entry& ch = g_log.chans[s];
  int64_t base = __atomic_load_n(&g_prof.priv[s].base, __ATOMIC_RELAXED);
  if (base < 0) {
    base = e.step;
    __atomic_store_n(&g_prof.priv[s].base, base, __ATOMIC_RELAXED);
  }
  const int64_t rel64 = int64_t(e.step) - base;
  if (rel64 < 0 || rel64 >= (1 << 24)) return nullptr;
  const uint32_t rel = uint32_t(rel64);
  // NCCL keeps at most kStepRing steps in flight per connection: a step further back that never
  // stopped (NCCL reports more starts than stops at times) is over, not stuck.
  if (rel >= load32(&ch.done) + kStepRing) store32(&ch.done, rel - kStepRing + 1);
  if (rel + 1 > load32(&ch.posted)) store32(&ch.posted, rel + 1);
  if (rel >= load32(&ch.done))
    __atomic_store_n(&g_prof.priv[s].states[rel % kStepRing], uint8_t(FR_CHANST_POSTED),
                     __ATOMIC_RELAXED);
  settle(s);
  return slot_handle(kHStep, s, op.gen, rel);
}

void* start_kernel(Ctx& c, const Event& e) {
  int32_t s = find_slot(c, e.channel, FR_CHAN_KERNEL, -1);
  if (s < 0) {
    dropped();
    return nullptr;
  }
  fr_chan_entry& ch = g_log.chans[s];
  uint64_t seq;
  uint32_t op;
  parent_op(e.parent, &seq, &op);
  const uint64_t now = now_ns();
  const uint32_t gen = next_gen(uint32_t(s));
  store64(&ch.op_seq, seq);
  store32(&ch.op, op);
  store32(&ch.state, FR_CHANST_RUNNING);
  store64(&ch.op_start_ns, now);
  store64(&ch.last_ns, now);
  __atomic_fetch_add(&ch.ops_started, 1, __ATOMIC_RELEASE);
  return slot_handle(kHKernel, uint32_t(s), gen, 0);
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

bool claim_matches(const Claim& k, const Ctx& c) {
  if (k.rank != c.rank || k.nranks != c.nranks) return false;
  if (k.nccl_hash != 0) return k.nccl_hash == c.comm_hash;
  return k.name[0] != '\0' && strcmp(k.name, c.name) == 0;
}

// The newest registered communicator that matches the context, if any.
void claim_for(Ctx& c) {
  const uint64_t n = __atomic_load_n(&g_prof.claim_count, __ATOMIC_ACQUIRE);
  const uint64_t oldest = n > kMaxClaims ? n - kMaxClaims : 0;
  for (uint64_t i = n; i-- > oldest;) {
    const Claim& k = g_prof.claims[i % kMaxClaims];
    if (__atomic_load_n(&k.seq, __ATOMIC_ACQUIRE) != i + 1 || !claim_matches(k, c)) continue;
    uint64_t zero = 0;
    __atomic_compare_exchange_n(&c.comm_id, &zero, k.comm_id, false, __ATOMIC_ACQ_REL,
                                __ATOMIC_RELAXED);
    return;
  }
}

// A free context, taken; null when all are in use.
Ctx* take_context() {
  for (uint32_t i = 0; i < kMaxContexts; ++i) {
    uint32_t zero = 0;
    if (__atomic_load_n(&g_prof.ctxs[i].used, __ATOMIC_RELAXED) == 0 &&
        __atomic_compare_exchange_n(&g_prof.ctxs[i].used, &zero, 1u, false, __ATOMIC_ACQ_REL,
                                    __ATOMIC_RELAXED))
      return &g_prof.ctxs[i];
  }
  return nullptr;
}

bool serving(int nranks, int rank) {
  const char* off = getenv("FR_PROFILER");
  if (off != nullptr && strcmp(off, "0") == 0) return false;  // the kill switch
  return recording() && table_ready() && nranks > 0 && rank >= 0 && rank < nranks;
}

int wanted_mask() {
  const char* k = getenv("FR_PROFILER_KERNEL_CH");
  return kDefaultMask | (k != nullptr && strcmp(k, "1") == 0 ? int(kEvKernelCh) : 0);
}

}  // namespace

void claim_context(uint64_t comm_id, uint64_t nccl_hash, const char* name, int nranks, int rank) {
  const uint64_t i = __atomic_fetch_add(&g_prof.claim_count, 1u, __ATOMIC_ACQ_REL);
  Claim& k = g_prof.claims[i % kMaxClaims];
  __atomic_store_n(&k.seq, uint64_t{0}, __ATOMIC_RELEASE);
  k.comm_id = comm_id;
  k.nccl_hash = nccl_hash;
  k.rank = rank;
  k.nranks = nranks;
  size_t n = name != nullptr ? strnlen(name, FR_NAME_LEN - 1) : 0;
  memcpy(k.name, name != nullptr ? name : "", n);
  k.name[n] = '\0';
  __atomic_store_n(&k.seq, i + 1, __ATOMIC_RELEASE);
  for (Ctx& c : g_prof.ctxs) {
    if (__atomic_load_n(&c.used, __ATOMIC_ACQUIRE) == 0 || !claim_matches(k, c)) continue;
    uint64_t zero = 0;
    __atomic_compare_exchange_n(&c.comm_id, &zero, comm_id, false, __ATOMIC_ACQ_REL,
                                __ATOMIC_RELAXED);
  }
}

void note_version(int version) {
  if (__atomic_exchange_n(&g_prof.version, version, __ATOMIC_RELAXED) != version)
    debug_log("NCCL loaded the profiler plugin interface v%d", version);
}

int init(void** context, uint64_t comm_hash, const char* name, int nnodes, int nranks, int rank,
         int current_mask) {
  (void)nnodes;
  *context = nullptr;
  int given = __atomic_load_n(&g_prof.mask_given, __ATOMIC_ACQUIRE);
  Ctx* c = serving(nranks, rank) ? take_context() : nullptr;
  // Not served: a null context (NCCL still calls with it; its events are ignored) and the mask
  // left as it is, so the communicators already served keep their events.
  if (c == nullptr) return given != 0 ? given : current_mask;
  if (given == 0) {
    int want = wanted_mask();
    if (__atomic_compare_exchange_n(&g_prof.mask_given, &given, want, false, __ATOMIC_ACQ_REL,
                                    __ATOMIC_ACQUIRE))
      given = want;
  }
  g_prof.pid = int(getpid());
  c->comm_hash = comm_hash;
  c->rank = rank;
  c->nranks = nranks;
  size_t n = name != nullptr ? strnlen(name, FR_NAME_LEN - 1) : 0;
  memcpy(c->name, name != nullptr ? name : "", n);
  c->name[n] = '\0';
  __atomic_store_n(&c->comm_id, uint64_t{0}, __ATOMIC_RELAXED);
  __atomic_store_n(&c->ordinal, __atomic_add_fetch(&g_prof.ordinals, 1u, __ATOMIC_RELAXED),
                   __ATOMIC_RELEASE);
  claim_for(*c);
  *context = c;
  set_log_flags(FR_LOG_F_PROFILER, 0);
  return given;
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
  const uint64_t t = handle_type(handle);
  if (t != kHStep && t != kHProxyOp && t != kHKernel) return;
  const SlotRef r = slot_ref(handle);
  if (r.slot >= g_log.chan_cap) return;
  fr_chan_entry& ch = g_log.chans[r.slot];
  if (t == kHStep) {
    if (!current(r) || r.rel < load32(&ch.done) || r.rel >= load32(&ch.posted)) return;
    __atomic_store_n(&g_prof.priv[r.slot].states[r.rel % kStepRing], uint8_t(FR_CHANST_DONE),
                     __ATOMIC_RELAXED);
    settle(r.slot);
    return;
  }
  if (current(r)) {
    if (t == kHKernel) {
      store32(&ch.state, FR_CHANST_STOPPED);
    } else {  // the op is over: a step it started and never stopped is not waiting
      store32(&ch.done, load32(&ch.posted));
      settle(r.slot);
    }
  }
  store64(&ch.last_ns, now_ns());
  __atomic_fetch_add(&ch.ops_done, 1, __ATOMIC_RELEASE);
}

void record(void* handle, int nccl_state, uint64_t trans_size) {
  if (handle == nullptr || !table_ready()) return;
  const uint64_t t = handle_type(handle);
  if (t != kHStep && t != kHKernel) return;
  const SlotRef r = slot_ref(handle);
  if (!current(r)) return;
  fr_chan_entry& ch = g_log.chans[r.slot];
  if (t == kHKernel) {
    if (nccl_state == kStKernelChStop) store32(&ch.state, FR_CHANST_STOPPED);
    return;
  }
  const uint32_t st = chan_state_of(nccl_state);
  if (st == FR_CHANST_IDLE || r.rel < load32(&ch.done) || r.rel >= load32(&ch.posted)) return;
  __atomic_store_n(&g_prof.priv[r.slot].states[r.rel % kStepRing], uint8_t(st), __ATOMIC_RELAXED);
  if (trans_size != 0 && (st == FR_CHANST_SEND_WAIT || st == FR_CHANST_RECV_GPU_WAIT))
    __atomic_fetch_add(&ch.bytes, trans_size, __ATOMIC_RELAXED);
  settle(r.slot);
}

// The context goes back for a later communicator; its slots stay, so a dump still shows them.
void finalize(void* context) {
  if (context == nullptr) return;
  const uintptr_t p = reinterpret_cast<uintptr_t>(context),
                  lo = reinterpret_cast<uintptr_t>(&g_prof.ctxs[0]);
  if (p < lo || p >= lo + sizeof g_prof.ctxs || (p - lo) % sizeof(Ctx) != 0) return;  // not ours
  Ctx& c = *static_cast<Ctx*>(context);
  __atomic_store_n(&c.ordinal, 0u, __ATOMIC_RELAXED);
  __atomic_store_n(&c.used, 0u, __ATOMIC_RELEASE);
}

}  // namespace fr::agent::prof
