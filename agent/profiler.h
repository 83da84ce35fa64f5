// The agent as NCCL's profiler plugin: the version-neutral core that the per-version adapters
// (profiler_v5.cpp, profiler_v6.cpp) call. It turns kernel-channel, proxy-op and proxy-step
// events into channel slots of the flight log (fr_chan_entry, version 5 of the format), so that
// a dump tells which channel, which peer and which step an all-entered collective stopped at.
//
// Everything here is wait-free and allocation-free: contexts come from a fixed table, event
// handles are tagged integers (NCCL only hands them back and never dereferences them), slots are
// found in a fixed open-addressing index and, once the table is full, events are counted as
// dropped. Any failure turns the feature off (the activation mask 0), never the job.
#pragma once

#include <stdint.h>

#include "agent.h"

namespace fr::agent::prof {

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

// init: returns the activation mask to give NCCL (0: the feature is off for this communicator).
FR_HIDDEN int init(void** context, uint64_t comm_hash, const char* name, int nnodes, int nranks,
                   int rank);
FR_HIDDEN void* start(void* context, const Event& e);
FR_HIDDEN void stop(void* handle);
FR_HIDDEN void record(void* handle, int nccl_state, uint64_t trans_size);
FR_HIDDEN void finalize(void* context);
// A communicator was registered (after its init call, during which NCCL called init): the newest
// profiler context of the same rank and size with no communicator yet is its, and the slots it
// makes from now on carry the id.
FR_HIDDEN void claim_context(uint64_t comm_id, int nranks, int rank);
// Which interface version NCCL took (5, 6); set by the adapter's init, shown in debug output.
FR_HIDDEN void note_version(int version);

}  // namespace fr::agent::prof
