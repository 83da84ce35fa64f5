/* NCCL 2.29 and 2.30 additions the emulation implements (not in the 2.28.9 nccl.h; signatures as in
 * NCCL's src/nccl.h.in), for the emulation itself and for programs that call them on it.
 * Grow: the coordinating member makes an id with ncclCommGetUniqueId and hands it to the joining
 * ranks; existing members pass their communicator and rank -1 and keep their rank; joining ranks
 * pass comm = NULL, the id and their new rank. */
#pragma once

#include <nccl.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif
ncclResult_t ncclCommGrow(ncclComm_t comm, int nRanks, const ncclUniqueId* uniqueId, int rank,
                          ncclComm_t* newcomm, ncclConfig_t* config);
ncclResult_t ncclCommGetUniqueId(ncclComm_t comm, ncclUniqueId* uniqueId);
ncclResult_t ncclCommSuspend(ncclComm_t comm, int flags);
ncclResult_t ncclCommResume(ncclComm_t comm);

/* NCCL 2.30 additions (nccl.h.in; the window pointer queries and the device communicator from
 * nccl_device/core.h) that torch 2.15's libtorch_cuda.so or nccl4py link, so the emulation exports them with
 * NCCL's answers for a communicator without host RMA, multimem or device kernels (sim/README.md,
 * "Symmetric memory and one-sided calls"). */
#if NCCL_VERSION_CODE < 23000
typedef enum {
  ncclStatGpuMemSuspend = 0,
  ncclStatGpuMemSuspended = 1,
  ncclStatGpuMemPersist = 2,
  ncclStatGpuMemTotal = 3
} ncclCommMemStat_t;
typedef struct {
  int opCnt;
  int peer;
  int sigIdx;
  int ctx;
} ncclWaitSignalDesc_t;
#endif
struct ncclDevCommRequirements;
struct ncclDevComm;
ncclResult_t ncclCommMemStats(ncclComm_t comm, ncclCommMemStat_t stat, uint64_t* value);
ncclResult_t ncclWinGetUserPtr(ncclComm_t comm, ncclWindow_t win, void** outUserPtr);
ncclResult_t ncclPutSignal(const void* localbuff, size_t count, ncclDataType_t datatype, int peer,
                           ncclWindow_t peerWin, size_t peerWinOffset, int sigIdx, int ctx,
                           unsigned int flags, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclSignal(int peer, int sigIdx, int ctx, unsigned int flags, ncclComm_t comm,
                        cudaStream_t stream);
ncclResult_t ncclWaitSignal(int nDesc, ncclWaitSignalDesc_t* signalDescs, ncclComm_t comm,
                            cudaStream_t stream);
ncclResult_t ncclDevCommCreate(ncclComm_t comm, const struct ncclDevCommRequirements* reqs,
                               struct ncclDevComm* outDevComm);
ncclResult_t ncclDevCommDestroy(ncclComm_t comm, const struct ncclDevComm* devComm);
ncclResult_t ncclGetLsaMultimemDevicePointer(ncclWindow_t window, size_t offset, void** outPtr);
ncclResult_t ncclGetLsaDevicePointer(ncclWindow_t window, size_t offset, int lsaRank,
                                     void** outPtr);
ncclResult_t ncclGetPeerDevicePointer(ncclWindow_t window, size_t offset, int peer, void** outPtr);
ncclResult_t pncclGetLsaDevicePointer(ncclWindow_t window, size_t offset, int lsaRank,
                                      void** outPtr);
ncclResult_t pncclGetLsaMultimemDevicePointer(ncclWindow_t window, size_t offset, void** outPtr);
ncclResult_t pncclGetPeerDevicePointer(ncclWindow_t window, size_t offset, int peer, void** outPtr);

/* Emulation only: faults of the transport model (sim/README.md "Channels, proxies and links"),
 * armed on this process's member of `comm` for the collective launched `nth` after the next one
 * (0: the next one), striking at
 * channel step `step` (clamped to the collective's last step).
 *   FRSIM_FAULT_CHANNEL_STALL: this rank's kernel stops on channel `channel` (peer ignored).
 *   FRSIM_FAULT_PROXY_SEND_STALL: this rank's proxy stops sending to `peer` (every channel).
 *   FRSIM_FAULT_PROXY_RECV_STALL: this rank's proxy stops receiving from `peer`: it posts no
 *     buffer, so the peer's send waits for credit (every channel).
 *   FRSIM_FAULT_LINK_DOWN: what this rank transmits to `peer` never arrives (one direction of the
 *     link, every channel that uses it).
 * channel -1: every channel. Returns ncclInvalidArgument for a bad kind, channel or peer. */
#define FRSIM_FAULT_CHANNEL_STALL 1
#define FRSIM_FAULT_PROXY_SEND_STALL 2
#define FRSIM_FAULT_PROXY_RECV_STALL 3
#define FRSIM_FAULT_LINK_DOWN 4
ncclResult_t frsim_nccl_fault(ncclComm_t comm, int kind, int channel, int peer, int step, int nth);

/* Emulation only: fail-slow. The emulation is instantaneous unless FRSIM_KERNEL_US (each
 * collective's own GPU work, after its data moved) and FRSIM_STEP_US (each channel step's
 * transmission) give it a pace; these multiply that pace from the next step or collective on.
 *   frsim_gpu_slow: this process's GPU does its kernels' work `factor` times slower.
 *   frsim_nccl_link_slow: what this rank transmits to comm rank `peer` takes `factor` times
 *     longer per step (one direction of the link, every channel that uses it).
 * factor 1 restores the pace; 1 to 1000, else ncclInvalidArgument (also for a bad peer). */
ncclResult_t frsim_gpu_slow(double factor);
ncclResult_t frsim_nccl_link_slow(ncclComm_t comm, int peer, double factor);
#ifdef __cplusplus
}
#endif
