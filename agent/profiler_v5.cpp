// The profiler plugin interface version 5: the exported table ncclProfiler_v5, translating the
// version's descriptors into the core's events (profiler.h).
// NCCL 2.28 looks this one up first (it knows no v6); 2.29 on take v6 when it is there.
#include "profiler.h"
#include "profiler_abi.h"

namespace fr::agent::prof {
namespace {

Result init_v5(void** context, uint64_t comm_hash, int* mask, const char* name, int nnodes,
               int nranks, int rank, Logger) {
  note_version(5);
  *mask = init(context, comm_hash, name, nnodes, nranks, rank);
  return 0;  // ncclSuccess: with a mask of 0 NCCL reports nothing, the job runs on
}

Result start_v5(void* context, void** handle, DescrV5* d) {
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
    case kEvProxyStep:
      e.step = d->proxyStep.step;
      break;
    case kEvKernelCh:
      e.channel = d->kernelCh.channelId;
      break;
    default:
      break;
  }
  *handle = start(context, e);
  return 0;
}

Result stop_v5(void* handle) {
  stop(handle);
  return 0;
}

Result record_v5(void* handle, int state, StateArgs* args) {
  record(handle, state, args != nullptr && state != kStKernelChStop ? args->proxyStep.transSize : 0);
  return 0;
}

Result finalize_v5(void* context) {
  finalize(context);
  return 0;
}

}  // namespace
}  // namespace fr::agent::prof

extern "C" __attribute__((visibility("default")))
const fr::agent::prof::PluginV5 ncclProfiler_v5 = {
    "fr", fr::agent::prof::init_v5, fr::agent::prof::start_v5, fr::agent::prof::stop_v5,
    fr::agent::prof::record_v5, fr::agent::prof::finalize_v5};
