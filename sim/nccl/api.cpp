// The exported collective, point-to-point, group, registration and reduction-operator API of the
// NCCL emulation, plus the pncclX names (aliases of ncclX, as in the real library). Each call
// validates its arguments like NCCL, then hands an Op to exec.cpp, which queues it on the stream.
// ncclBcast calls ncclBroadcast through the exported symbol, as the real library does, so an
// interposed wrapper of ncclBroadcast sees that inner call.
#include <stdlib.h>
#include <string.h>

#include <unordered_map>
#include <unordered_set>

#include "fr_sim.h"
#include "fr_sim_nccl.h"
#include "internal.h"

#define FRSIM_API extern "C" __attribute__((visibility("default")))

namespace frsim {
namespace {

std::mutex g_handles_mu;
std::unordered_set<void*>* g_handles = new std::unordered_set<void*>();  // registrations

// A registered window: its communicator and the user's buffer (the window pointer queries).
struct Window {
  ncclComm_t comm;
  char* buff;
  size_t size;
};
std::unordered_map<void*, Window>* g_windows = new std::unordered_map<void*, Window>();

// The window's registration and its communicator's state; false when either is gone.
bool find_window(ncclWindow_t win, Window* w, std::shared_ptr<CommState>* c) {
  {
    std::lock_guard<std::mutex> g(g_handles_mu);
    auto it = g_windows->find(win);
    if (it == g_windows->end()) return false;
    *w = it->second;
  }
  *c = lookup(w->comm);
  return *c != nullptr;
}

ncclResult_t check_comm(ncclComm_t comm, std::shared_ptr<CommState>* out) {
  auto c = lookup(comm);
  if (!c) {
    set_last_error(nullptr, "invalid communicator");
    return ncclInvalidArgument;
  }
  if (c->init_state.load(std::memory_order_acquire) != 1) {
    set_last_error(c.get(), "communicator is not initialized (poll ncclCommGetAsyncError)");
    return ncclInvalidUsage;
  }
  if (c->stopped()) {
    set_last_error(c.get(), "communicator was aborted or revoked");
    return ncclInvalidUsage;
  }
  if (c->suspended.load(std::memory_order_acquire)) {
    set_last_error(c.get(), "communicator is suspended (ncclCommResume first)");
    return ncclInvalidUsage;
  }
  *out = std::move(c);
  return ncclSuccess;
}

ncclResult_t check_stream(CommState* c, cudaStream_t s) {
  CUstreamCaptureStatus st;
  if (cuStreamIsCapturing(reinterpret_cast<CUstream>(s), &st) != CUDA_SUCCESS) {
    set_last_error(c, "invalid stream");
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

ncclResult_t build(Op* op, ncclComm_t comm, OpKind kind, const void* send, void* recv, size_t count,
                   ncclDataType_t dtype, ncclRedOp_t redop, int root, cudaStream_t stream,
                   const char* name) {
  std::shared_ptr<CommState> c;
  if (ncclResult_t r = check_comm(comm, &c); r != ncclSuccess) return r;
  if (static_cast<int>(dtype) < 0 || dtype >= ncclNumTypes) {
    set_last_error(c.get(), "%s: invalid data type %d", name, static_cast<int>(dtype));
    return ncclInvalidArgument;
  }
  bool reducing = kind == kAllReduce || kind == kReduce || kind == kReduceScatter;
  op->redop = ncclSum;
  if (reducing) {
    int v = static_cast<int>(redop);
    if (v >= 0 && v < ncclNumOps) {
      op->redop = static_cast<uint32_t>(v);
    } else {
      RedOpInfo info{};
      bool found;
      {
        std::lock_guard<std::mutex> g(c->mu);
        auto it = c->redops.find(v);
        found = it != c->redops.end();
        if (found) info = it->second;
      }
      if (!found) {
        set_last_error(c.get(), "%s: invalid reduction operation %d", name, v);
        return ncclInvalidArgument;
      }
      if (info.dtype != dtype) {
        set_last_error(c.get(), "%s: reduction operation %d was created for another data type",
                       name, v);
        return ncclInvalidArgument;
      }
      op->redop = kPreMulSum;
      op->premul = info.scalar;
      op->premul_ptr = info.residence == ncclScalarDevice ? info.scalar_ptr : nullptr;
      op->premul_dtype = dtype;
    }
  }
  bool rooted = kind == kBroadcast || kind == kReduce || kind == kGather || kind == kScatter ||
                kind == kSend || kind == kRecv;
  if (rooted && (root < 0 || root >= c->nranks)) {
    set_last_error(c.get(), "%s: %s %d out of range (0..%d)", name,
                   (kind == kSend || kind == kRecv) ? "peer" : "root", root, c->nranks - 1);
    return ncclInvalidArgument;
  }
  bool is_root = rooted && root == c->rank;
  bool needs_send = kind == kSend || !((kind == kScatter || kind == kBroadcast) && !is_root);
  bool needs_recv = kind != kSend && !((kind == kReduce || kind == kGather) && !is_root);
  if (kind == kRecv) needs_send = false;
  if (count > 0 && ((needs_send && send == nullptr) || (needs_recv && recv == nullptr))) {
    set_last_error(c.get(), "%s: NULL buffer", name);
    return ncclInvalidArgument;
  }
  if (ncclResult_t r = check_stream(c.get(), stream); r != ncclSuccess) return r;
  op->comm = std::move(c);
  op->kind = kind;
  op->sendbuff = send;
  op->recvbuff = recv;
  op->count = count;
  op->dtype = dtype;
  op->root = rooted ? root : -1;
  op->stream = reinterpret_cast<CUstream>(stream);
  return ncclSuccess;
}

ncclResult_t call(OpKind kind, const void* send, void* recv, size_t count, ncclDataType_t dtype,
                  ncclRedOp_t redop, int root, ncclComm_t comm, cudaStream_t stream,
                  const char* name) {
  Op op;
  if (ncclResult_t r = build(&op, comm, kind, send, recv, count, dtype, redop, root, stream, name);
      r != ncclSuccess)
    return r;
  return submit(std::move(op));
}

}  // namespace
}  // namespace frsim

using namespace frsim;

FRSIM_API ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                                     ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                     cudaStream_t stream) {
  return call(kAllReduce, sendbuff, recvbuff, count, datatype, op, 0, comm, stream,
              "ncclAllReduce");
}

FRSIM_API ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                                     ncclDataType_t datatype, int root, ncclComm_t comm,
                                     cudaStream_t stream) {
  return call(kBroadcast, sendbuff, recvbuff, count, datatype, ncclSum, root, comm, stream,
              "ncclBroadcast");
}

FRSIM_API ncclResult_t ncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root,
                                 ncclComm_t comm, cudaStream_t stream) {
  return ncclBroadcast(buff, buff, count, datatype, root, comm,
                       stream);  // through the PLT, as NCCL
}

FRSIM_API ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count,
                                  ncclDataType_t datatype, ncclRedOp_t op, int root,
                                  ncclComm_t comm, cudaStream_t stream) {
  return call(kReduce, sendbuff, recvbuff, count, datatype, op, root, comm, stream, "ncclReduce");
}

FRSIM_API ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                                     ncclDataType_t datatype, ncclComm_t comm,
                                     cudaStream_t stream) {
  return call(kAllGather, sendbuff, recvbuff, sendcount, datatype, ncclSum, 0, comm, stream,
              "ncclAllGather");
}

FRSIM_API ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                         ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                         cudaStream_t stream) {
  return call(kReduceScatter, sendbuff, recvbuff, recvcount, datatype, op, 0, comm, stream,
              "ncclReduceScatter");
}

FRSIM_API ncclResult_t ncclAlltoAll(const void* sendbuff, void* recvbuff, size_t count,
                                    ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  return call(kAlltoAll, sendbuff, recvbuff, count, datatype, ncclSum, 0, comm, stream,
              "ncclAlltoAll");
}

FRSIM_API ncclResult_t ncclGather(const void* sendbuff, void* recvbuff, size_t count,
                                  ncclDataType_t datatype, int root, ncclComm_t comm,
                                  cudaStream_t stream) {
  return call(kGather, sendbuff, recvbuff, count, datatype, ncclSum, root, comm, stream,
              "ncclGather");
}

FRSIM_API ncclResult_t ncclScatter(const void* sendbuff, void* recvbuff, size_t count,
                                   ncclDataType_t datatype, int root, ncclComm_t comm,
                                   cudaStream_t stream) {
  return call(kScatter, sendbuff, recvbuff, count, datatype, ncclSum, root, comm, stream,
              "ncclScatter");
}

FRSIM_API ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype,
                                int peer, ncclComm_t comm, cudaStream_t stream) {
  return call(kSend, sendbuff, nullptr, count, datatype, ncclSum, peer, comm, stream, "ncclSend");
}

FRSIM_API ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer,
                                ncclComm_t comm, cudaStream_t stream) {
  return call(kRecv, nullptr, recvbuff, count, datatype, ncclSum, peer, comm, stream, "ncclRecv");
}

FRSIM_API ncclResult_t ncclGroupStart() { return group_start(); }

FRSIM_API ncclResult_t ncclGroupEnd() {
  ncclResult_t r = group_end(false);
  if (r == ncclInvalidUsage && group_depth() == 0)
    set_last_error(nullptr, "ncclGroupEnd without ncclGroupStart");
  return r;
}

FRSIM_API ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t* info) {
  if (info != nullptr && (info->magic != 0x74685283 || info->size < sizeof(ncclSimInfo_t))) {
    set_last_error(nullptr, "invalid ncclSimInfo_t: initialize it with NCCL_SIM_INFO_INITIALIZER");
    return ncclInvalidArgument;
  }
  ncclResult_t r = group_end(true);
  if (r == ncclSuccess && info != nullptr) info->estimatedTime = 0.0f;
  return r;
}

FRSIM_API ncclResult_t ncclMemAlloc(void** ptr, size_t size) {
  if (ptr == nullptr || size == 0) return ncclInvalidArgument;
  CUdeviceptr d = 0;
  if (cuMemAlloc(&d, size) != CUDA_SUCCESS) return ncclUnhandledCudaError;
  *ptr = reinterpret_cast<void*>(static_cast<uintptr_t>(d));
  return ncclSuccess;
}

FRSIM_API ncclResult_t ncclMemFree(void* ptr) {
  if (ptr == nullptr) return ncclSuccess;
  return cuMemFree(reinterpret_cast<uintptr_t>(ptr)) == CUDA_SUCCESS ? ncclSuccess
                                                                     : ncclInvalidArgument;
}

FRSIM_API ncclResult_t ncclCommRegister(const ncclComm_t comm, void* buff, size_t size,
                                        void** handle) {
  std::shared_ptr<CommState> c;
  if (ncclResult_t r = check_comm(comm, &c); r != ncclSuccess) return r;
  if (handle == nullptr || (buff == nullptr && size > 0)) return ncclInvalidArgument;
  void* h = malloc(1);
  std::lock_guard<std::mutex> g(g_handles_mu);
  g_handles->insert(h);
  *handle = h;
  return ncclSuccess;
}

FRSIM_API ncclResult_t ncclCommDeregister(const ncclComm_t comm, void* handle) {
  if (!lookup(comm)) return ncclInvalidArgument;
  std::lock_guard<std::mutex> g(g_handles_mu);
  if (g_handles->erase(handle) == 0) return ncclInvalidArgument;
  free(handle);
  return ncclSuccess;
}

FRSIM_API ncclResult_t ncclCommWindowRegister(ncclComm_t comm, void* buff, size_t size,
                                              ncclWindow_t* win, int flags) {
  (void)flags;
  std::shared_ptr<CommState> c;
  if (ncclResult_t r = check_comm(comm, &c); r != ncclSuccess) return r;
  if (win == nullptr || (buff == nullptr && size > 0)) return ncclInvalidArgument;
  void* h = malloc(1);
  std::lock_guard<std::mutex> g(g_handles_mu);
  (*g_windows)[h] = Window{comm, static_cast<char*>(buff), size};
  *win = static_cast<ncclWindow_t>(h);
  return ncclSuccess;
}

FRSIM_API ncclResult_t ncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win) {
  if (!lookup(comm)) return ncclInvalidArgument;
  std::lock_guard<std::mutex> g(g_handles_mu);
  if (g_windows->erase(win) == 0) return ncclInvalidArgument;
  free(win);
  return ncclSuccess;
}

// ---- NCCL 2.30: memory statistics, windows, one-sided calls, device communicators ------------
// Answered as NCCL answers on a communicator whose ranks share no load/store memory (each rank
// is a process of its own: the LSA team is the rank alone), without multimem (nvlsSupport 0),
// host RMA or device kernels: the checks in NCCL's order, then its answer for that case.

FRSIM_API ncclResult_t ncclCommMemStats(ncclComm_t comm, ncclCommMemStat_t stat, uint64_t* value) {
  auto c = lookup(comm);
  if (!c) return ncclInvalidArgument;
  if (c->init_state.load(std::memory_order_acquire) != 1) {
    set_last_error(c.get(), "communicator is not initialized (poll ncclCommGetAsyncError)");
    return ncclInvalidUsage;
  }
  if (value == nullptr) return ncclInvalidArgument;
  switch (stat) {
    case ncclStatGpuMemSuspended:
      *value = c->suspended.load(std::memory_order_acquire) ? 1 : 0;
      return ncclSuccess;
    case ncclStatGpuMemSuspend:  // the emulation's buffers are host memory: no GPU bytes
    case ncclStatGpuMemPersist:
    case ncclStatGpuMemTotal: *value = 0; return ncclSuccess;
  }
  set_last_error(c.get(), "ncclCommMemStats: invalid statistic %d", static_cast<int>(stat));
  return ncclInvalidArgument;
}

FRSIM_API ncclResult_t ncclWinGetUserPtr(ncclComm_t comm, ncclWindow_t win, void** outUserPtr) {
  if (!lookup(comm) || outUserPtr == nullptr || win == nullptr) return ncclInvalidArgument;
  Window w;
  std::shared_ptr<CommState> c;
  if (!find_window(win, &w, &c) || w.comm != comm) return ncclInvalidArgument;
  *outUserPtr = w.buff;
  return ncclSuccess;
}

namespace {
// A pointer query's window and its communicator; false (ncclInvalidArgument) for a NULL window or
// output, or a window that is not registered.
bool query_window(ncclWindow_t win, void** out, Window* w, std::shared_ptr<CommState>* c) {
  return win != nullptr && out != nullptr && find_window(win, w, c);
}

// The address of `offset` in LSA rank `lsa_rank`'s copy of the window: the LSA team is the rank
// alone, so only rank 0 is valid and the copy is the user's buffer.
ncclResult_t lsa_address(const Window& w, CommState* c, size_t offset, int lsa_rank, void** out) {
  if (lsa_rank != 0) {
    set_last_error(c, "The provided lsaRank %d is not in the valid lsaSize of [0,1]", lsa_rank);
    return ncclInvalidArgument;
  }
  if (offset >= w.size) return ncclInvalidArgument;
  *out = w.buff + offset;
  return ncclSuccess;
}
}  // namespace

FRSIM_API ncclResult_t ncclGetLsaMultimemDevicePointer(ncclWindow_t window, size_t offset,
                                                       void** outPtr) {
  (void)offset;
  Window w;
  std::shared_ptr<CommState> c;
  if (!query_window(window, outPtr, &w, &c)) return ncclInvalidArgument;
  *outPtr = nullptr;  // no multimem: NCCL answers NULL, not an error
  return ncclSuccess;
}

FRSIM_API ncclResult_t ncclGetLsaDevicePointer(ncclWindow_t window, size_t offset, int lsaRank,
                                               void** outPtr) {
  Window w;
  std::shared_ptr<CommState> c;
  if (!query_window(window, outPtr, &w, &c)) return ncclInvalidArgument;
  return lsa_address(w, c.get(), offset, lsaRank, outPtr);
}

FRSIM_API ncclResult_t ncclGetPeerDevicePointer(ncclWindow_t window, size_t offset, int peer,
                                                void** outPtr) {
  Window w;
  std::shared_ptr<CommState> c;
  if (!query_window(window, outPtr, &w, &c)) return ncclInvalidArgument;
  if (peer < 0 || peer >= c->nranks) {
    set_last_error(c.get(), "peer %d is not within valid range of ranks %d.", peer, c->nranks);
    return ncclInvalidArgument;
  }
  if (peer != c->rank) {  // outside the LSA team: not reachable, NULL as on the device
    *outPtr = nullptr;
    return ncclSuccess;
  }
  return lsa_address(w, c.get(), offset, 0, outPtr);
}

namespace {
// One-sided calls reach NCCL's RMA path, which refuses a communicator without host RMA.
ncclResult_t no_host_rma(ncclComm_t comm, const char* name) {
  std::shared_ptr<CommState> c;
  if (ncclResult_t r = check_comm(comm, &c); r != ncclSuccess) return r;
  set_last_error(c.get(), "%s: one sided RMA: host RMA is not supported in this communicator",
                 name);
  return ncclInvalidArgument;
}
}  // namespace

FRSIM_API ncclResult_t ncclPutSignal(const void* localbuff, size_t count, ncclDataType_t datatype,
                                     int peer, ncclWindow_t peerWin, size_t peerWinOffset,
                                     int sigIdx, int ctx, unsigned int flags, ncclComm_t comm,
                                     cudaStream_t stream) {
  (void)localbuff, (void)count, (void)datatype, (void)peer, (void)peerWin, (void)peerWinOffset;
  (void)sigIdx, (void)ctx, (void)flags, (void)stream;
  return no_host_rma(comm, "ncclPutSignal");
}

FRSIM_API ncclResult_t ncclSignal(int peer, int sigIdx, int ctx, unsigned int flags,
                                  ncclComm_t comm, cudaStream_t stream) {
  (void)peer, (void)sigIdx, (void)ctx, (void)flags, (void)stream;
  return no_host_rma(comm, "ncclSignal");
}

FRSIM_API ncclResult_t ncclWaitSignal(int nDesc, ncclWaitSignalDesc_t* signalDescs, ncclComm_t comm,
                                      cudaStream_t stream) {
  (void)nDesc, (void)signalDescs, (void)stream;
  return no_host_rma(comm, "ncclWaitSignal");
}

// A device communicator needs symmetric memory and GPU kernels: refused as NCCL refuses a
// communicator without symmetric support (after its argument checks).
FRSIM_API ncclResult_t ncclDevCommCreate(ncclComm_t comm,
                                         const struct ncclDevCommRequirements* reqs,
                                         struct ncclDevComm* outDevComm) {
  (void)outDevComm;
  auto c = lookup(comm);
  if (!c || reqs == nullptr) return ncclInvalidArgument;
  set_last_error(c.get(), "Communicator does not support symmetric memory!");
  return ncclInvalidUsage;
}

// None can have been made, so there is nothing to free: NCCL's answer for an empty one.
FRSIM_API ncclResult_t ncclDevCommDestroy(ncclComm_t comm, const struct ncclDevComm* devComm) {
  if (!lookup(comm) || devComm == nullptr) return ncclInvalidArgument;
  return ncclSuccess;
}

FRSIM_API ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar,
                                                ncclDataType_t datatype,
                                                ncclScalarResidence_t residence, ncclComm_t comm) {
  std::shared_ptr<CommState> c;
  if (ncclResult_t r = check_comm(comm, &c); r != ncclSuccess) return r;
  if (op == nullptr || scalar == nullptr || static_cast<int>(datatype) < 0 ||
      datatype >= ncclNumTypes ||
      (residence != ncclScalarDevice && residence != ncclScalarHostImmediate)) {
    set_last_error(c.get(), "ncclRedOpCreatePreMulSum: invalid argument");
    return ncclInvalidArgument;
  }
  RedOpInfo info{datatype, residence, scalar, scalar_to_double(scalar, datatype)};
  std::lock_guard<std::mutex> g(c->mu);
  int id = c->next_redop++;
  c->redops[id] = info;
  *op = static_cast<ncclRedOp_t>(id);
  return ncclSuccess;
}

FRSIM_API ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm) {
  auto c = lookup(comm);
  if (!c) return ncclInvalidArgument;
  std::lock_guard<std::mutex> g(c->mu);
  if (c->redops.erase(static_cast<int>(op)) == 0) return ncclInvalidArgument;
  return ncclSuccess;
}

// pncclX: the profiling names, aliases of the functions above (the list's rows marked OP and API).
#define FRSIM_ALIASES_OF_OP
#define FRSIM_ALIASES_OF_API
#include "aliases.h"

// The window address queries of the device API, which the agent leaves out (docs/agent.md) and
// the list therefore lacks: aliased here.
extern "C" __attribute__((visibility("default"), alias("ncclGetLsaMultimemDevicePointer")))
ncclResult_t
pncclGetLsaMultimemDevicePointer(ncclWindow_t, size_t, void**);
extern "C" __attribute__((visibility("default"), alias("ncclGetLsaDevicePointer"))) ncclResult_t
pncclGetLsaDevicePointer(ncclWindow_t, size_t, int, void**);
extern "C" __attribute__((visibility("default"), alias("ncclGetPeerDevicePointer"))) ncclResult_t
pncclGetPeerDevicePointer(ncclWindow_t, size_t, int, void**);
