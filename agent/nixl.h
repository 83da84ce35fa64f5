// NIXL transfers: the wrappers of nixlAgent's methods (wrappers_nixl.cpp) and the log's transfer
// table they write (xfers.cpp), with the state of each.
#pragma once

#include <stdint.h>

#include "agent.h"
#include "fr/flight_log.h"

namespace fr::agent {

// The map from request handles to transfer entries (xfers.cpp), open addressing.
inline constexpr uint32_t kXferBuckets = 1u << 14;  // power of two, well above the table's capacity
struct XferBucket {
  uint64_t key;   // the request handle, 0 = empty, kChanging while rewritten (atomic)
  uint32_t slot;  // entry index (atomic)
  uint32_t pad;
};
// The transfers (xfers.cpp): how entries of the log's transfer table (log.h) are taken and found.
struct XferState {
  int lock;
  uint32_t cursor;   // where the next search for a free entry starts (under lock)
  uint64_t next_id;  // (under lock)
  XferBucket buckets[kXferBuckets];
};
FR_HIDDEN extern constinit XferState g_xfers;

// The methods the agent reaches, one per row of the list (nixl_api.def), and their symbols.
enum NixlFn : int {
#define FR_NIXL_FN(fn, ...) fn,
#include "nixl_api.def"
  kNixlFns
};
enum NixlMode : int { kNixlUnresolved = 0, kNixlResolving = 1, kNixlOn = 2, kNixlOff = 3 };

// Small private tables, filled as agents, backends and descriptor lists are made.
inline constexpr int kMaxAgents = 64, kMaxBackends = 64, kMaxDlists = 256;
struct AgentName {
  uint64_t agent;  // nixlAgent* (atomic; 0 = free)
  char name[FR_NAME_LEN];
};
struct BackendName {
  uint64_t handle;  // nixlBackendH*
  char name[16];
};
struct Dlist {
  uint64_t handle;          // nixlDlistH* (0 = free)
  char agent[FR_NAME_LEN];  // remote agent, empty for a local list
  uint32_t n;
  uint64_t* lens;  // n lengths (an anonymous mapping), nullptr when unknown
  uint64_t map_bytes;
};
// The NIXL wrappers (wrappers_nixl.cpp): the real functions, resolved at the first call, and what
// the agent learns of agents, backends and descriptor lists.
struct NixlState {
  void* real[kNixlFns];
  int mode;  // NixlMode (atomic)
  int lock;  // over the tables
  AgentName agents[kMaxAgents];
  BackendName backends[kMaxBackends];
  Dlist dlists[kMaxDlists];
};
FR_HIDDEN extern constinit NixlState g_nixl;

// Takes a free transfer entry for request `handle` and publishes `fixed` into it (its id, lock and
// live words are set here). Returns the entry, or nullptr when the table is full (counted).
FR_HIDDEN fr_xfer_entry* xfer_open(uint64_t handle, fr_xfer_entry& fixed);
// The live entry of request `handle`, or nullptr.
FR_HIDDEN fr_xfer_entry* xfer_find(uint64_t handle);
// Republishes the fixed part of entry `e` from `fixed` (a post changed its notification).
FR_HIDDEN void xfer_republish(fr_xfer_entry* e, const fr_xfer_entry& fixed);
// One ring record of a NIXL call (op kind NIXL): `aux` the transfer id or 0, `count` bytes.
FR_HIDDEN void nixl_record(fr_op op, uint64_t call_ns, uint64_t aux, uint64_t count, uint64_t seq,
                           int32_t status);
FR_HIDDEN void xfers_forget_in_child();

}  // namespace fr::agent
