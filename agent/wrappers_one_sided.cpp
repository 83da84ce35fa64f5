// The wrappers of NCCL's one-sided calls: the signal calls (PutSignal, Signal, WaitSignal) are
// recorded as point-to-point ops (peer, stream, signal index and context) through run_op's path,
// WaitSignal with one record per descriptor; the windows they write into are registered and
// deregistered with a record each.
#include "wrappers.h"

using namespace fr::agent;

// ---- signals: one-sided point-to-point ------------------------------------------------------------

FR_API ncclResult_t ncclPutSignal(const void* localbuff, size_t count, ncclDataType_t datatype,
                                  int peer, ncclWindow_t peerWin, size_t peerWinOffset, int sigIdx,
                                  int ctx, unsigned int flags, ncclComm_t comm,
                                  cudaStream_t stream) {
  FR_REAL_OR_FAIL(ncclPutSignal);
  OpArgs a = {FR_OP_PUT_SIGNAL,
              true,
              localbuff,
              (const void*)peerWin,
              count,
              datatype,
              -1,
              peer,
              comm,
              stream,
              FR_SIGNAL_AUX(sigIdx, ctx)};
  return run_op(a, [=] {
    return real(localbuff, count, datatype, peer, peerWin, peerWinOffset, sigIdx, ctx, flags, comm,
                stream);
  });
}

FR_API ncclResult_t ncclSignal(int peer, int sigIdx, int ctx, unsigned int flags, ncclComm_t comm,
                               cudaStream_t stream) {
  FR_REAL_OR_FAIL(ncclSignal);
  OpArgs a = {FR_OP_SIGNAL,
              true,
              nullptr,
              nullptr,
              0,
              -1,
              -1,
              peer,
              comm,
              stream,
              FR_SIGNAL_AUX(sigIdx, ctx)};
  return run_op(a, [=] { return real(peer, sigIdx, ctx, flags, comm, stream); });
}

// One record per descriptor (the first kMaxWaitDescs), so each awaited peer is named; they share
// the call's launch and each has its own op index on the stream.
constexpr int kMaxWaitDescs = 16;

FR_API ncclResult_t ncclWaitSignal(int nDesc, ncclWaitSignalDesc_t* signalDescs, ncclComm_t comm,
                                   cudaStream_t stream) {
  FR_REAL_OR_FAIL(ncclWaitSignal);
  Scope s;
  if (!s.active) return real(nDesc, signalDescs, comm, stream);
  int n = signalDescs == nullptr || nDesc <= 0 ? 0 : nDesc < kMaxWaitDescs ? nDesc : kMaxWaitDescs;
  OpState o[kMaxWaitDescs];
  for (int i = 0; i < (n > 0 ? n : 1); ++i) {
    const ncclWaitSignalDesc_t* d = n > 0 ? &signalDescs[i] : nullptr;
    OpArgs a = {FR_OP_WAIT_SIGNAL,
                true,
                nullptr,
                nullptr,
                d != nullptr && d->opCnt > 0 ? (size_t)d->opCnt : 0,
                -1,
                -1,
                d != nullptr ? d->peer : -1,
                comm,
                stream,
                d != nullptr ? FR_SIGNAL_AUX(d->sigIdx, d->ctx) : 0};
    op_enter(a, o[i]);
  }
  ncclResult_t res = real(nDesc, signalDescs, comm, stream);
  for (int i = 0; i < (n > 0 ? n : 1); ++i) op_exit(o[i], res);
  return res;
}

// ---- windows -----------------------------------------------------------------------------------

FR_API ncclResult_t ncclCommWindowRegister(ncclComm_t comm, void* buff, size_t size,
                                           ncclWindow_t* win, int winFlags) {
  FR_REAL_OR_FAIL(ncclCommWindowRegister);
  return run_api(
      FR_OP_COMM_WINDOW_REGISTER, comm, [&] { return real(comm, buff, size, win, winFlags); },
      [&](fr_record& r, const CommRef&) {
        r.sendbuff = (uint64_t)(uintptr_t)buff;
        r.count = size;
      },
      [&](fr_record& r, const CommRef&, ncclResult_t res) {
        if (res == ncclSuccess && win != nullptr) r.recvbuff = (uint64_t)(uintptr_t)*win;
      });
}

FR_API ncclResult_t ncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win) {
  FR_REAL_OR_FAIL(ncclCommWindowDeregister);
  return run_api(
      FR_OP_COMM_WINDOW_DEREGISTER, comm, [&] { return real(comm, win); },
      [&](fr_record& r, const CommRef&) { r.recvbuff = (uint64_t)(uintptr_t)win; }, no_after);
}
