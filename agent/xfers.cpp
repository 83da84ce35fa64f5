// The NIXL transfer table of the log (fr_xfer_entry, flight_log.h) and the ring records of NIXL
// calls. An entry is taken per transfer request and found again by the request's handle through
// a private open-addressing map whose buckets are checked against the entry they name (a bucket
// naming an entry since reused or released is free), so nothing is ever deleted from it.
// Taking an entry is under a spin lock (once per request); finding one is lock-free (every post
// and status call).
#include <string.h>

#include "spin_lock.h"
#include "nixl.h"
#include "wrappers.h"

namespace fr::agent {

constinit XferState g_xfers = {};

namespace {

inline constexpr uint32_t kProbes = 32;

// A bucket's key while map_insert rewrites it: readers probe past it (never a request handle).
inline constexpr uint64_t kChanging = ~uint64_t{0};

void lock() { spin_lock(&g_xfers.lock); }
void unlock() { spin_unlock(&g_xfers.lock); }

uint32_t bucket_of(uint64_t handle) {
  return (uint32_t)(hash_finish(hash_u64(kHashSeed, handle)) & (kXferBuckets - 1));
}

// Whether entry `slot` is the live entry of `handle`.
bool holds(uint32_t slot, uint64_t handle) {
  if (slot >= g_log.xfer_cap) return false;
  const fr_xfer_entry& e = g_log.xfers[slot];
  return __atomic_load_n(&e.handle, __ATOMIC_ACQUIRE) == handle &&
         __atomic_load_n(&e.state, __ATOMIC_ACQUIRE) != FR_XFER_RELEASED;
}

// A free entry (never used, or released), searched from the cursor; -1 when none.
int64_t free_entry() {
  const uint32_t cap = g_log.xfer_cap;
  for (uint32_t n = 0; n < cap; ++n) {
    uint32_t i = (g_xfers.cursor + n) % cap;
    const fr_xfer_entry& e = g_log.xfers[i];
    if (__atomic_load_n(&e.lock, __ATOMIC_ACQUIRE) == 0 ||
        __atomic_load_n(&e.state, __ATOMIC_ACQUIRE) == FR_XFER_RELEASED) {
      g_xfers.cursor = (i + 1) % cap;
      return i;
    }
  }
  return -1;
}

void map_insert(uint64_t handle, uint32_t slot) {
  uint32_t b = bucket_of(handle);
  for (uint32_t n = 0; n < kProbes; ++n, b = (b + 1) & (kXferBuckets - 1)) {
    XferBucket& k = g_xfers.buckets[b];
    uint64_t key = __atomic_load_n(&k.key, __ATOMIC_ACQUIRE);
    if (key == 0 || key == handle || !holds(__atomic_load_n(&k.slot, __ATOMIC_RELAXED), key)) {
      // Readers probe past it while it changes: an empty key would end their probe here and
      // hide a live handle further along the chain.
      __atomic_store_n(&k.key, kChanging, __ATOMIC_RELEASE);
      __atomic_store_n(&k.slot, slot, __ATOMIC_RELAXED);
      __atomic_store_n(&k.key, handle, __ATOMIC_RELEASE);
      return;
    }
  }
  // No bucket near: the entry is recorded but its later calls are not found (rare; the map is
  // 16 times the default table).
}

}  // namespace

fr_xfer_entry* xfer_open(uint64_t handle, fr_xfer_entry& fixed) {
  if (g_log.xfers == nullptr || g_log.xfer_cap == 0) return nullptr;
  lock();
  int64_t slot = free_entry();
  if (slot < 0) {
    unlock();
    __atomic_fetch_add(&g_log.sections[FR_SECTION_XFERS].dropped, 1, __ATOMIC_RELAXED);
    return nullptr;
  }
  fr_xfer_entry* e = &g_log.xfers[slot];
  fixed.id = ++g_xfers.next_id;
  fixed.handle = handle;
  __atomic_store_n(&e->state, (uint32_t)FR_XFER_CREATED, __ATOMIC_RELAXED);
  __atomic_store_n(&e->status, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&e->posts, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&e->post_ns, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&e->status_ns, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&e->done_ns, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&e->status_calls, 0, __ATOMIC_RELAXED);
  // Under the lock, and no other thread of the writer takes this entry's lock: it cannot be busy.
  fr_xfer_publish_fixed(e, &fixed);
  uint32_t used = (uint32_t)slot + 1;
  uint64_t count = __atomic_load_n(&g_log.sections[FR_SECTION_XFERS].count, __ATOMIC_RELAXED);
  if (used > count)
    __atomic_store_n(&g_log.sections[FR_SECTION_XFERS].count, used, __ATOMIC_RELEASE);
  map_insert(handle, (uint32_t)slot);
  unlock();
  return e;
}

fr_xfer_entry* xfer_find(uint64_t handle) {
  if (g_log.xfers == nullptr || handle == 0) return nullptr;
  uint32_t b = bucket_of(handle);
  for (uint32_t n = 0; n < kProbes; ++n, b = (b + 1) & (kXferBuckets - 1)) {
    const XferBucket& k = g_xfers.buckets[b];
    uint64_t key = __atomic_load_n(&k.key, __ATOMIC_ACQUIRE);
    if (key == 0) return nullptr;
    if (key != handle) continue;
    uint32_t slot = __atomic_load_n(&k.slot, __ATOMIC_RELAXED);
    return holds(slot, handle) ? &g_log.xfers[slot] : nullptr;
  }
  return nullptr;
}

void xfer_republish(fr_xfer_entry* e, const fr_xfer_entry& fixed) {
  lock();  // the only other writer of fixed parts is xfer_open
  fr_xfer_publish_fixed(e, &fixed);
  unlock();
}

void nixl_record(fr_op op, uint64_t call_ns, uint64_t aux, uint64_t count, uint64_t seq,
                 int32_t status) {
  fr_record r = {};
  r.call_ns = call_ns;
  r.duration_ns = elapsed_since(call_ns);
  r.tid = current_tid();
  r.op = (uint16_t)op;
  r.redop = -1;
  r.peer = -1;
  r.count = count;
  r.seq = seq;
  r.aux = aux;
  r.result = status;
  record_begin(r);
}

void xfers_forget_in_child() {
  memset(g_xfers.buckets, 0, sizeof g_xfers.buckets);
  g_xfers.lock = 0;
  g_xfers.cursor = 0;
  g_xfers.next_id = 0;
}

}  // namespace fr::agent
