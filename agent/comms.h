// Communicators (comms.cpp): the table of the log's communicators, the map from NCCL's handles to
// its slots, and what the agent keeps per communicator beside it.
#pragma once

#include <nccl.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "agent.h"
#include "fr/flight_log.h"

namespace fr::agent {

// Completion markers of a nonblocking launch, held until the application sees it succeed.
inline constexpr uint32_t kMaxDeferred = 64;
struct Deferred {
  uint64_t rec_id;
  uint64_t stream;
  uint64_t op_index;  // 0 when the op has no GPU tracking
};

// Per-communicator state that readers do not need (kept out of the shared file).
struct CommPriv {
  uint64_t split_calls;  // per-kind call counters for derived ids (atomic)
  uint64_t shrink_calls;
  uint64_t grow_calls;
  uint64_t nccl_hash;      // NCCL's hash of the communicator (profiler.h); 0: not known (atomic)
  uint32_t nccl_children;  // splits and grows made from it, as NCCL counts them (atomic)
  uint32_t nonblocking;    // set before the handle is mapped, read-only after (atomic)
  uint32_t ready;          // size/rank/device known (atomic)
  int lock;                // spin lock over deferred (short critical sections only)
  uint32_t n_deferred;
  Deferred deferred[kMaxDeferred];
};

// The communicators of the process. The handle map and priv lie in the log's private mapping
// (log.h); a forked child starts with none.
struct CommState {
  uint64_t* handle_keys;  // open addressing: ncclComm_t value, 0 = empty (atomic)
  int32_t* handle_slots;  // comm table slot for the key (atomic)
  uint32_t handle_mask;
  uint64_t gen;  // bumped whenever a handle is (re)mapped: per-thread caches see it (atomic)
  CommPriv* priv;
  uint32_t next_slot;       // allocation counter of the comm table (atomic)
  uint64_t init_all_calls;  // (atomic) per-process counter for ncclCommInitAll ids
  int32_t largest_comm;     // size of the communicator global_rank was taken from (under lock)
  int rank_from_env;
  int env_blocking;      // NCCL_COMM_BLOCKING (overrides every config): 0 unset, 1 blocking, 2 not
  pthread_mutex_t lock;  // communicator registration (rare, never on the op path)
};
FR_HIDDEN extern constinit CommState g_comms;

// Slot of the communicator with this handle, or -1.
FR_HIDDEN int32_t comm_lookup(const void* handle);
// Registers a new communicator entry (fixed part from `e`); maps `handle` to it when non-null.
FR_HIDDEN int32_t comm_register(const fr_comm_entry& e, uint32_t state, const void* handle,
                                bool nonblocking);
FR_HIDDEN void comm_set_state(int32_t slot, uint32_t state);
// Fills size, rank and device from the real NCCL queries; learns the global rank if needed.
FR_HIDDEN void comm_learn_shape(int32_t slot, ncclComm_t comm);
FR_HIDDEN uint64_t hash_bytes(uint64_t h, const void* p, size_t n);
FR_HIDDEN uint64_t hash_u64(uint64_t h, uint64_t v);
FR_HIDDEN uint64_t hash_finish(uint64_t h);
inline constexpr uint64_t kHashSeed = 0xcbf29ce484222325ull;
FR_HIDDEN void comms_forget_in_child();

}  // namespace fr::agent
