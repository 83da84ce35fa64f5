// The agent's one spin lock: a plain int in zero-initialised (constinit) state, so it needs no
// constructor and works before and after the C++ runtime (the agent takes its locks from inside
// NCCL and NIXL calls, at load and at fork). Taken with an atomic exchange, released with a store.
// For short critical sections off an op's hot path only (a communicator's deferred list, the NIXL
// tables, the transfer table's allocation); a waiter yields its CPU, since the holder may have
// been descheduled.
#pragma once

#include <sched.h>

namespace fr::agent {

inline void spin_lock(int* word) {
  while (__atomic_exchange_n(word, 1, __ATOMIC_ACQUIRE) != 0) sched_yield();
}

inline void spin_unlock(int* word) { __atomic_store_n(word, 0, __ATOMIC_RELEASE); }

}  // namespace fr::agent
