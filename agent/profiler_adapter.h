// What the profiler plugin's adapters (profiler_v5.cpp, profiler_v6.cpp, profiler_v7.cpp) share:
// the callbacks of a plugin table, as templates over the version's descriptor. The versions NCCL
// 2.28 to 2.32 accept differ in the events their descriptors can hold and in where the union's
// members end, not in the fields the core reads, so each adapter file names its version's types
// and exports its table; what one version adds (v6's copy-engine events, v7's kernel phases)
// falls to the default case and is not recorded (fr never asks for those events).
#pragma once

#include "profiler.h"

namespace fr::agent::prof {

template <int Version>
Result init_v(void** context, uint64_t comm_hash, int* mask, const char* name, int nnodes,
              int nranks, int rank, Logger) {
  note_version(Version);
  if (context == nullptr) return 0;
  if (mask == nullptr) {  // nowhere to say what to report: nothing is
    *context = nullptr;
    return 0;
  }
  *mask = init(context, comm_hash, name, nnodes, nranks, rank, *mask);
  return 0;  // ncclSuccess always: a null context profiles nothing, the job runs on
}

template <class Descr>
Result start_v(void* context, void** handle, Descr* d) {
  if (handle == nullptr) return 0;
  *handle = nullptr;
  if (d == nullptr) return 0;
  Event e = {};
  e.type = d->type;
  e.parent = d->parentObj;
  e.rank = d->rank;
  e.peer = -1;
  e.channel = -1;
  switch (d->type) {
    case kEvColl:
      e.seq = d->coll.seqNumber;
      e.func = d->coll.func;
      break;
    case kEvP2p:
      e.func = d->p2p.func;
      e.peer = d->p2p.peer;
      break;
    case kEvProxyOp:
      e.pid = d->proxyOp.pid;
      e.channel = d->proxyOp.channelId;
      e.peer = d->proxyOp.peer;
      e.nsteps = d->proxyOp.nSteps;
      e.is_send = d->proxyOp.isSend;
      break;
    case kEvProxyStep: e.step = d->proxyStep.step; break;
    case kEvKernelCh: e.channel = d->kernelCh.channelId; break;
    default: break;
  }
  *handle = start(context, e);
  return 0;
}

inline Result stop_v(void* handle) {
  stop(handle);
  return 0;
}

inline Result record_v(void* handle, int state, StateArgs* args) {
  record(handle, state,
         args != nullptr && state != kStKernelChStop ? args->proxyStep.transSize : 0);
  return 0;
}

inline Result finalize_v(void* context) {
  finalize(context);
  return 0;
}

template <int Version, class Descr>
constexpr PluginTable<Descr> plugin_table() {
  return {"fr", init_v<Version>, start_v<Descr>, stop_v, record_v, finalize_v};
}

}  // namespace fr::agent::prof
