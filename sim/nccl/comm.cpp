// The life of a communicator in the NCCL emulation once made (init.cpp makes them): the registry
// of handles, the last error, finalize, destroy, abort, revoke, suspend and resume, the error
// queries and the plain accessors. Destroy and finalize wait for the communicator's queued work,
// as NCCL does; abort and revoke end it instead.
#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>

#include <functional>
#include <thread>
#include <unordered_set>

#include "fr_sim_nccl.h"
#include "internal.h"

#define FRSIM_API extern "C" __attribute__((visibility("default")))

namespace frsim {
namespace {

std::mutex g_mu;
std::unordered_set<ncclComm_t>* g_comms = new std::unordered_set<ncclComm_t>();
std::string* g_last_error = new std::string();

void drop_handle(ncclComm_t h) {
  unregister_comm(h);
  h->magic = 0;
  delete h;
}

void wait_pending(CommState* c) {
  unsigned us = 50;
  while (c->pending.load(std::memory_order_acquire) != 0) {
    usleep(us);
    us = us < 5000 ? us * 2 : 5000;
  }
}

}  // namespace

ncclComm_t new_handle(std::shared_ptr<CommState> st) {
  auto* h = new ncclComm{kCommMagic, std::move(st)};
  register_comm(h);
  return h;
}

ncclResult_t run_maybe_async(const std::shared_ptr<CommState>& c, bool blocking,
                             std::function<ncclResult_t()> body) {
  if (blocking) return body();
  c->async_error.store(ncclInProgress);
  std::thread([c, body] {
    ncclResult_t r = body();
    int expected = ncclInProgress;
    c->async_error.compare_exchange_strong(expected, r);
  }).detach();
  return ncclInProgress;
}

std::shared_ptr<CommState> ready_comm(ncclComm_t comm, ncclResult_t* err) {
  auto c = lookup(comm);
  if (!c) {
    set_last_error(nullptr, "invalid communicator");
    *err = ncclInvalidArgument;
    return nullptr;
  }
  if (c->init_state.load(std::memory_order_acquire) != 1) {
    set_last_error(c.get(), "communicator is not initialized (poll ncclCommGetAsyncError)");
    *err = c->init_state.load() == 0 ? ncclInProgress : ncclInvalidUsage;
    return nullptr;
  }
  return c;
}

CommState::~CommState() {
  prof_comm_finalize(this);
  if (seg.base != nullptr) {
    Slot* s = seg.slot(rank);
    uint32_t joined = kSlotJoined;
    s->state.compare_exchange_strong(joined, kSlotDestroyed);
    segment_unmap(&seg);
  }
}

std::shared_ptr<CommState> lookup(ncclComm_t c) {
  if (c == nullptr) return nullptr;
  std::lock_guard<std::mutex> g(g_mu);
  if (g_comms->count(c) == 0 || c->magic != kCommMagic) return nullptr;
  return c->st;
}

void register_comm(ncclComm_t c) {
  std::lock_guard<std::mutex> g(g_mu);
  g_comms->insert(c);
}

void unregister_comm(ncclComm_t c) {
  std::lock_guard<std::mutex> g(g_mu);
  g_comms->erase(c);
}

void set_last_error(CommState* c, const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  if (c != nullptr) {
    std::lock_guard<std::mutex> g(c->mu);
    c->last_error = buf;
  }
  std::lock_guard<std::mutex> g(g_mu);
  *g_last_error = buf;
}

const char* last_error(CommState* c) {
  thread_local std::string copy;
  if (c != nullptr) {
    std::lock_guard<std::mutex> g(c->mu);
    copy = c->last_error;
  } else {
    std::lock_guard<std::mutex> g(g_mu);
    copy = *g_last_error;
  }
  return copy.c_str();
}

}  // namespace frsim

using namespace frsim;

FRSIM_API const char* frsim_shm_prefix(void) { return shm_prefix(); }

FRSIM_API ncclResult_t ncclGetVersion(int* version) {
  if (version == nullptr) return ncclInvalidArgument;
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

FRSIM_API ncclResult_t ncclCommSuspend(ncclComm_t comm, int flags) {
  (void)flags;
  ncclResult_t err;
  auto c = ready_comm(comm, &err);
  if (!c) return err;
  wait_pending(c.get());  // suspending releases resources once the queued work is done
  c->suspended.store(true, std::memory_order_release);
  return ncclSuccess;
}

FRSIM_API ncclResult_t ncclCommResume(ncclComm_t comm) {
  ncclResult_t err;
  auto c = ready_comm(comm, &err);
  if (!c) return err;
  c->suspended.store(false, std::memory_order_release);
  return ncclSuccess;
}

FRSIM_API ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  auto c = lookup(comm);
  if (!c) return ncclInvalidArgument;
  if (c->revoked.load(std::memory_order_acquire)) {  // NCCL 2.30: destroy it instead
    set_last_error(c.get(), "ncclCommFinalize: the communicator was revoked");
    return ncclInvalidUsage;
  }
  CommState* p = c.get();
  return run_maybe_async(c, c->blocking, [p] {
    wait_pending(p);
    return ncclSuccess;
  });
}

FRSIM_API ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  auto c = lookup(comm);
  if (!c) {
    set_last_error(nullptr, "ncclCommDestroy: invalid communicator");
    return ncclInvalidArgument;
  }
  // As NCCL, destroy completes the communicator's outstanding work first (a hung operation
  // therefore hangs destroy; ncclCommAbort is the way out).
  if (!c->stopped() && c->init_state.load() == 1) wait_pending(c.get());
  drop_handle(comm);
  return ncclSuccess;
}

FRSIM_API ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  auto c = lookup(comm);
  if (!c) return ncclInvalidArgument;
  c->aborted.store(true, std::memory_order_release);
  if (c->seg.base != nullptr && c->init_state.load() == 1) {
    c->seg.slot(c->rank)->state.store(kSlotAborted);
    c->wake_self();
  }
  drop_handle(comm);  // queued operations keep the state alive until they have ended
  return ncclSuccess;
}

FRSIM_API ncclResult_t ncclCommRevoke(ncclComm_t comm, int flags) {
  auto c = lookup(comm);
  if (!c) return ncclInvalidArgument;
  if (flags != NCCL_REVOKE_DEFAULT) {
    set_last_error(c.get(), "ncclCommRevoke: flags must be NCCL_REVOKE_DEFAULT");
    return ncclInvalidArgument;
  }
  c->revoked.store(true, std::memory_order_release);
  if (c->init_state.load() == 1) c->wake_self();
  return ncclSuccess;
}

FRSIM_API ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* out) {
  if (out == nullptr) return ncclInvalidArgument;
  auto c = lookup(comm);
  if (!c) return ncclInvalidArgument;
  int state = c->init_state.load(std::memory_order_acquire);
  if (state == 0) {
    *out = ncclInProgress;
    return ncclSuccess;
  }
  if (state == 2) {
    *out = static_cast<ncclResult_t>(c->init_error.load());
    return ncclSuccess;
  }
  *out = static_cast<ncclResult_t>(c->async_error.load());
  // Revoked: in progress until the operations it stopped have all ended (NCCL 2.30).
  if (*out == ncclSuccess && c->revoked.load(std::memory_order_acquire) &&
      c->pending.load(std::memory_order_acquire) > 0)
    *out = ncclInProgress;
  if (*out == ncclSuccess) {
    for (int r = 0; r < c->nranks; ++r)
      if (r != c->rank && c->seg.slot(r)->state.load() == kSlotAborted) {
        *out = ncclRemoteError;  // a peer aborted: its part of any collective will never come
        set_last_error(c.get(), "rank %d of the communicator aborted", r);
        break;
      }
  }
  return ncclSuccess;
}

FRSIM_API ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  ncclResult_t err;
  auto c = ready_comm(comm, &err);
  if (!c) return err;
  if (count == nullptr) return ncclInvalidArgument;
  *count = c->nranks;
  return ncclSuccess;
}

FRSIM_API ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device) {
  ncclResult_t err;
  auto c = ready_comm(comm, &err);
  if (!c) return err;
  if (device == nullptr) return ncclInvalidArgument;
  *device = c->cuda_dev;
  return ncclSuccess;
}

FRSIM_API ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  ncclResult_t err;
  auto c = ready_comm(comm, &err);
  if (!c) return err;
  if (rank == nullptr) return ncclInvalidArgument;
  *rank = c->rank;
  return ncclSuccess;
}

FRSIM_API const char* ncclGetErrorString(ncclResult_t r) {
  switch (r) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError:
      return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError:
      return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
  }
}

FRSIM_API const char* ncclGetLastError(ncclComm_t comm) {
  auto c = lookup(comm);
  return last_error(c.get());
}

FRSIM_API void ncclResetDebugInit() {}

// pncclX: the profiling names, aliases of the functions above (the list's rows marked COMM).
#define FRSIM_ALIASES_OF_COMM
#include "aliases.h"
