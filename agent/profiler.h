// The agent as NCCL's profiler plugin: the version-neutral core that the per-version adapters
// (profiler_v5.cpp, profiler_v6.cpp, profiler_v7.cpp) call. It turns proxy-op, proxy-step and (when
// asked for) kernel-channel events into channel slots of the flight log (fr_chan_entry, version 5
// of the format), so that a dump tells which channel, which peer and which step an all-entered
// collective stopped at.
//
// How NCCL calls it, and what that asks of the core:
// - NCCL passes the same process-wide int (ncclProfilerEventMask) to every init, and reads it for
//   every communicator. So the mask is decided once: the first init the agent serves fixes it,
//   every later init hands back that same mask, and an init the agent cannot serve (recording off,
//   no channel table, no context left, bad arguments) gets a null context, whose events are
//   ignored, while the mask stays as it is for everyone else.
// - init runs where NCCL connects the communicator (at ncclGroupEnd for grouped creation, on
//   NCCL's own thread for nonblocking creation), not inside the agent's wrapper, and it carries
//   NCCL's hash of the communicator. The agent computes the same hash where it can (the unique id
//   of the init family; the parent's hash, split count and color of a split) and registers it
//   with fr's id (claim); context and claim meet on (hash, rank, size) whichever comes first.
//   Where the hash cannot be computed, a non-empty commName is the key instead; else comm_id 0.
// - finalize releases the context for a later communicator; its slots stay for the dump.
//
// Everything here is wait-free and allocation-free: contexts come from a fixed table, event
// handles are tagged integers (NCCL only hands them back and never dereferences them), slots are
// found in a fixed open-addressing index and, once the table is full, events are counted as
// dropped. No failure here ever reaches the job: NCCL always gets ncclSuccess.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "agent.h"
#include "fr/nccl_comm_hash.h"
#include "fr/profiler_abi.h"

namespace fr::agent::prof {

using namespace ::fr::nccl_prof;

// One event, as the adapters translate it from their version's descriptor.
struct Event {
  uint64_t type;  // kEv*
  void* parent;   // the descriptor's parentObj
  int rank;
  uint64_t seq;      // coll: seqNumber
  const char* func;  // coll, p2p: "AllReduce", "Send", ...
  int peer;          // p2p, proxy op
  int pid;           // proxy op: the process that started the parent
  int channel;       // proxy op, kernel channel
  int nsteps;        // proxy op
  int is_send;       // proxy op
  int step;          // proxy step
};

// The event types fr asks for unless told otherwise: the host-side collective and p2p events and
// the proxy's ops and steps, which NCCL reports for work its proxy does anyway. Kernel channels
// (kEvKernelCh) change how NCCL runs every collective (a profiler proxy op on every channel of
// every kernel plan) and come only with FR_PROFILER_KERNEL_CH=1 (docs/agent.md).
inline constexpr int kDefaultMask = int(kEvColl | kEvP2p | kEvProxyOp | kEvProxyStep);

// One communicator as NCCL's profiler sees it. `used` is the allocation flag (0 free, 1 taken):
// finalize gives the entry back, so a job that makes communicators all along never runs out.
struct Ctx {
  uint32_t used;     // (atomic)
  uint32_t ordinal;  // 1-based, never reused (the slots keep the old ones' numbers)
  uint64_t comm_hash;
  uint64_t comm_id;  // fr's id, once a claim matched (atomic)
  int32_t rank;
  int32_t nranks;
  char name[FR_NAME_LEN];
};
inline constexpr uint32_t kMaxContexts = 4096;

// A communicator the agent registered.
struct Claim {
  uint64_t seq;  // index + 1 once complete (atomic)
  uint64_t comm_id;
  uint64_t nccl_hash;
  int32_t rank;
  int32_t nranks;
  char name[FR_NAME_LEN];
};
inline constexpr uint32_t kMaxClaims = 1024;

// The slot index's size: key -> slot, open addressing over a fixed table (never grows).
inline constexpr uint32_t kBuckets = 2 * FR_MAX_CHAN_CAPACITY;
// Per slot, private: the generation of the op in flight (a handle of an older op on the slot is
// stale: its stops and states are ignored), the first step id of the current op (NCCL numbers
// steps per connection) and the states of the last steps, so the oldest unfinished step's state
// is known when an older one finishes.
inline constexpr uint32_t kStepRing = 8;  // NCCL_STEPS: steps in flight per connection
struct SlotPriv {
  int64_t base;  // -1 until the op's first step (atomic)
  uint32_t gen;  // low 16 bits in handles (atomic)
  uint8_t states[kStepRing];
};

// The plugin's state (profiler.cpp); the channel slots themselves are a table of the log (log.h).
// A forked child keeps it as it is (no *_forget_in_child resets it).
struct ProfilerState {
  Ctx ctxs[kMaxContexts];
  uint32_t ordinals;  // (atomic)
  int mask_given;     // the mask the first served init handed out; 0: none yet (atomic)
  int version;        // (atomic)
  int pid;
  // The communicators the agent registered, newest last (a ring: the oldest are overwritten).
  Claim claims[kMaxClaims];
  uint64_t claim_count;     // (atomic)
  uint64_t keys[kBuckets];  // the slot index: 0 = empty (atomic)
  int32_t slots[kBuckets];  // slot + 1; 0 while the key's slot is being made (atomic)
  SlotPriv priv[FR_MAX_CHAN_CAPACITY];
};
FR_HIDDEN extern constinit ProfilerState g_prof;

// init: returns the activation mask to leave in NCCL's process-wide int, which holds `current`
// now (see above: the mask handed out first, or `current` untouched when none was).
FR_HIDDEN int init(void** context, uint64_t comm_hash, const char* name, int nnodes, int nranks,
                   int rank, int current);
FR_HIDDEN void* start(void* context, const Event& e);
FR_HIDDEN void stop(void* handle);
FR_HIDDEN void record(void* handle, int nccl_state, uint64_t trans_size);
FR_HIDDEN void finalize(void* context);
// A communicator was registered: fr's id, NCCL's hash of it when the agent could compute it (0:
// not known), its commName ("" when none), size and rank.
FR_HIDDEN void claim_context(uint64_t comm_id, uint64_t nccl_hash, const char* name, int nranks,
                             int rank);
// Which interface version NCCL took (5, 6, 7); set by the adapter's init, shown in debug output.
FR_HIDDEN void note_version(int version);

}  // namespace fr::agent::prof
