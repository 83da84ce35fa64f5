// CUDA graphs (graphs.cpp): the graphs that hold NCCL work, their captured ops and their launches.
#pragma once

#include <nccl.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "agent.h"
#include "fr/flight_log.h"

namespace fr::agent {

// A CUDA graph that holds NCCL work, as the agent tracks it privately (fr_graph_entry is the
// shared part). Filled while the graph is captured (under g_graphs.lock), read-only once launched.
inline constexpr uint32_t kMaxGraphComms = 16;
struct GraphComm {
  int32_t slot;     // communicator table slot
  uint32_t n_coll;  // collectives of the graph on it
  uint32_t n_p2p;   // point-to-point ops of the graph on it
};
struct GraphPriv {
  uint64_t handle;      // the CUgraph captured into (atomic)
  uint64_t capture_id;  // the driver's capture id
  uint32_t n_comms;     // entries of comms in use (atomic)
  uint32_t next_op;     // captured ops numbered so far
  GraphComm comms[kMaxGraphComms];
};
// CUgraphExec -> graph slot, open addressing (keys written under g_graphs.lock, read lock-free).
inline constexpr uint32_t kExecBuckets = 1024;
struct ExecSlot {
  uint64_t key;   // the CUgraphExec, 0 = empty (atomic)
  int32_t graph;  // graph slot, -1: an exec of a graph without NCCL work (atomic)
  uint32_t pad;
};

// The graphs of the process. priv and execs lie in the log's private mapping (log.h).
struct GraphState {
  GraphPriv* priv;
  ExecSlot* execs;
  uint32_t next_slot;          // under lock
  uint32_t next_capture_slot;  // (atomic)
  pthread_mutex_t lock;        // graph registration (capture and instantiate, never on a launch)
  // The driver's pointers handed out by cuGetProcAddress, behind the agent's own entries (atomic).
  void* proc_launch;
  void* proc_launch_ptsz;
  void* proc_inst_flags;
  void* proc_inst_params;
  void* proc_inst_params_ptsz;
};
FR_HIDDEN extern constinit GraphState g_graphs;

// A captured NCCL op: its position in the graph being captured on `stream`. Fills the record's
// graph id (aux) and position (op_index), places the "started" position write, and returns the
// graph slot (-1 when the graph cannot be tracked).
FR_HIDDEN CaptureRef graph_capture_op(fr_record& r, int32_t comm_slot, bool p2p, bool write_start);
// After the captured call returned: the "completed" position write and the capture-table copy.
FR_HIDDEN void graph_capture_done(const CaptureRef& c, int32_t comm_slot, uint64_t stream,
                                  const fr_record& r, bool ok, bool write_end);
// A captured group's launch returned `res`: the "finished" position write of one of its ops.
FR_HIDDEN void graph_capture_finish_in_group(const CaptureRef& c, int32_t comm_slot,
                                             uint64_t stream, ncclResult_t res);
FR_HIDDEN void graphs_forget_in_child();

}  // namespace fr::agent
