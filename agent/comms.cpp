// The communicator table: the shared entries readers see (fr_comm_entry) and the private map from
// an ncclComm_t handle to its entry. Lookups on the call path are lock-free (open addressing over
// fixed arrays); registration is rare and takes a mutex. Communicator ids are hashes (DESIGN.md
// "Identity"), computed here.
#include <string.h>

#include "comms.h"
#include "log.h"
#include "fr/hash.h"

namespace fr::agent {

constinit CommState g_comms = {};

uint64_t hash_bytes(uint64_t h, const void* p, size_t n) {
  const uint8_t* b = (const uint8_t*)p;
  for (size_t i = 0; i < n; ++i) {
    h ^= b[i];
    h *= 0x100000001b3ull;  // FNV-1a 64
  }
  return h;
}

uint64_t hash_u64(uint64_t h, uint64_t v) { return hash_bytes(h, &v, sizeof v); }

// FNV-1a followed by a 64-bit finalizer, so that close inputs land far apart; never 0.
uint64_t hash_finish(uint64_t h) {
  h = fr_mix64(h);
  return h == 0 ? 1 : h;
}

// Fibonacci hashing: handles are heap addresses, so mix the high bits down cheaply.
static uint32_t bucket_of(uint64_t key) {
  return (uint32_t)((key * 0x9e3779b97f4a7c15ull) >> 40) & g_comms.handle_mask;
}

int32_t comm_lookup(const void* handle) {
  uint64_t key = (uint64_t)(uintptr_t)handle;
  if (key == 0) return -1;
  uint32_t i = bucket_of(key);
  for (uint32_t probes = 0; probes <= g_comms.handle_mask;
       ++probes, i = (i + 1) & g_comms.handle_mask) {
    uint64_t k = __atomic_load_n(&g_comms.handle_keys[i], __ATOMIC_ACQUIRE);
    if (k == key) return __atomic_load_n(&g_comms.handle_slots[i], __ATOMIC_ACQUIRE);
    if (k == 0) return -1;
  }
  return -1;
}

// Under g_comms.lock. A handle may come back after its communicator was destroyed (the allocator
// reuses addresses): it then maps to the newest entry.
static bool map_handle(uint64_t key, int32_t slot) {
  uint32_t i = bucket_of(key);
  for (uint32_t probes = 0; probes <= g_comms.handle_mask;
       ++probes, i = (i + 1) & g_comms.handle_mask) {
    uint64_t k = __atomic_load_n(&g_comms.handle_keys[i], __ATOMIC_RELAXED);
    if (k == key) {
      __atomic_store_n(&g_comms.handle_slots[i], slot, __ATOMIC_RELEASE);
      __atomic_add_fetch(&g_comms.gen, 1, __ATOMIC_RELEASE);  // threads' cached slots go stale
      return true;
    }
    if (k == 0) {
      __atomic_store_n(&g_comms.handle_slots[i], slot, __ATOMIC_RELAXED);
      __atomic_store_n(&g_comms.handle_keys[i], key, __ATOMIC_RELEASE);
      __atomic_add_fetch(&g_comms.gen, 1, __ATOMIC_RELEASE);
      return true;
    }
  }
  return false;
}

int32_t comm_register(const fr_comm_entry& e, uint32_t state, const void* handle,
                      bool nonblocking) {
  pthread_mutex_lock(&g_comms.lock);
  int32_t slot = -1;
  if (g_comms.next_slot < g_log.comm_cap) {
    slot = (int32_t)g_comms.next_slot++;
    fr_comm_entry* s = &g_log.comms[slot];
    fr_comm_publish_fixed(s, &e);  // a fresh slot: no other writer can hold it
    __atomic_store_n(&s->state, state, __ATOMIC_RELAXED);
    __atomic_store_n(&s->last_call_ns, e.create_ns, __ATOMIC_RELAXED);
    __atomic_fetch_add(&g_log.sections[FR_SECTION_COMMS].count, 1, __ATOMIC_RELEASE);
    __atomic_store_n(&g_comms.priv[slot].nonblocking, nonblocking ? 1u : 0u, __ATOMIC_RELEASE);
    if (handle != nullptr && !map_handle((uint64_t)(uintptr_t)handle, slot))
      debug_log("communicator map full; calls on comm %p go unattributed", handle);
  } else {
    __atomic_fetch_add(&g_log.sections[FR_SECTION_COMMS].dropped, 1, __ATOMIC_RELAXED);
    debug_log("communicator table full (%u); comm %p not tracked", g_log.comm_cap, handle);
  }
  pthread_mutex_unlock(&g_comms.lock);
  return slot;
}

void comm_set_state(int32_t slot, uint32_t state) {
  if (slot < 0) return;
  __atomic_store_n(&g_log.comms[slot].state, state, __ATOMIC_RELEASE);
}

void comm_learn_shape(int32_t slot, ncclComm_t comm) {
  if (slot < 0 || comm == nullptr) return;
  auto count_fn = FR_REAL(ncclCommCount);
  auto rank_fn = FR_REAL(ncclCommUserRank);
  auto dev_fn = FR_REAL(ncclCommCuDevice);
  int size = -1, rank = -1, dev = -1;
  if (count_fn == nullptr || count_fn(comm, &size) != ncclSuccess) size = -1;
  if (rank_fn == nullptr || rank_fn(comm, &rank) != ncclSuccess) rank = -1;
  if (dev_fn == nullptr || dev_fn(comm, &dev) != ncclSuccess) dev = -1;

  pthread_mutex_lock(&g_comms.lock);
  fr_comm_entry* s = &g_log.comms[slot];
  fr_comm_entry e;
  if (fr_comm_read(s, &e)) {
    e.size = size;
    e.rank = rank;
    e.cuda_dev = dev;
    fr_comm_publish_fixed(s, &e);  // the fixed part has one writer: registration holds g_comms.lock
  }
  __atomic_store_n(&g_comms.priv[slot].ready, 1u, __ATOMIC_RELEASE);
  // Without a launcher-given rank, the rank in the largest communicator stands in for it.
  if (!g_comms.rank_from_env && size > 0 && rank >= 0 && size > g_comms.largest_comm) {
    g_comms.largest_comm = size;
    __atomic_store_n(&g_log.hdr->global_rank, rank, __ATOMIC_RELEASE);
    __atomic_store_n(&g_log.hdr->world_size, size, __ATOMIC_RELEASE);
    set_log_flags(FR_LOG_F_RANK_FROM_COMM, 0);
  }
  pthread_mutex_unlock(&g_comms.lock);
}

// The child has no communicator (its log is new when it records); the lock was made anew.
void comms_forget_in_child() {
  pthread_mutex_t lock = g_comms.lock;
  g_comms = CommState{};
  g_comms.lock = lock;
}

}  // namespace fr::agent
