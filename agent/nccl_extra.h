// NCCL API the agent wraps beyond what nccl.h may declare. The agent is built against the newest
// nccl.h at hand (2.32.3; see agent/CMakeLists.txt); with an older one, the functions it lacks are
// declared here, with the signatures of NCCL's own headers, so the wrappers always exist. Every
// one is resolved at run time: a loaded NCCL that lacks it gets the answer described in
// wrappers.h. The host functions of NCCL's device API (nccl_device/host.h, 2.28+) are declared
// here in any case, with opaque pointer types: nccl.h does not include that header.
#pragma once

#include <nccl.h>
#include <stdint.h>

#ifndef NCCL_VERSION_CODE
#define NCCL_VERSION_CODE 0
#endif

extern "C" {

#if NCCL_VERSION_CODE < 22900
// Grow: existing members pass comm (uniqueId only on the coordinating rank, rank = -1); joining
// ranks pass comm = NULL, the coordinator's uniqueId and their new rank.
ncclResult_t ncclCommGrow(ncclComm_t comm, int nRanks, const ncclUniqueId* uniqueId, int rank,
                          ncclComm_t* newcomm, ncclConfig_t* config);
// A unique id for one grow of `comm`, made by the coordinating rank.
ncclResult_t ncclCommGetUniqueId(ncclComm_t comm, ncclUniqueId* uniqueId);
ncclResult_t ncclCommSuspend(ncclComm_t comm, int flags);
ncclResult_t ncclCommResume(ncclComm_t comm);
#endif

#if NCCL_VERSION_CODE < 23000
typedef int ncclCommMemStat_t;
typedef struct {
  int opCnt;   // signals to wait for
  int peer;    // from this rank
  int sigIdx;  // on this signal index
  int ctx;     // and context
} ncclWaitSignalDesc_t;
ncclResult_t ncclCommMemStats(ncclComm_t comm, ncclCommMemStat_t stat, uint64_t* value);
ncclResult_t ncclWinGetUserPtr(ncclComm_t comm, ncclWindow_t win, void** outUserPtr);
ncclResult_t ncclPutSignal(const void* localbuff, size_t count, ncclDataType_t datatype, int peer,
                           ncclWindow_t peerWin, size_t peerWinOffset, int sigIdx, int ctx,
                           unsigned int flags, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclSignal(int peer, int sigIdx, int ctx, unsigned int flags, ncclComm_t comm,
                        cudaStream_t stream);
ncclResult_t ncclWaitSignal(int nDesc, ncclWaitSignalDesc_t* signalDescs, ncclComm_t comm,
                            cudaStream_t stream);
#endif

#if NCCL_VERSION_CODE < 23100
// The per-call configuration of the *Config collectives (only passed through).
typedef struct ncclCollConfig_v23200 ncclCollConfig_t;
ncclResult_t ncclAllReduceConfig(const void* sendbuff, void* recvbuff, size_t count,
                                 ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                 cudaStream_t stream, const ncclCollConfig_t* config);
ncclResult_t ncclBroadcastConfig(const void* sendbuff, void* recvbuff, size_t count,
                                 ncclDataType_t datatype, int root, ncclComm_t comm,
                                 cudaStream_t stream, const ncclCollConfig_t* config);
ncclResult_t ncclReduceConfig(const void* sendbuff, void* recvbuff, size_t count,
                              ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm,
                              cudaStream_t stream, const ncclCollConfig_t* config);
ncclResult_t ncclAllGatherConfig(const void* sendbuff, void* recvbuff, size_t sendcount,
                                 ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream,
                                 const ncclCollConfig_t* config);
ncclResult_t ncclReduceScatterConfig(const void* sendbuff, void* recvbuff, size_t recvcount,
                                     ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                     cudaStream_t stream, const ncclCollConfig_t* config);
ncclResult_t ncclAlltoAllConfig(const void* sendbuff, void* recvbuff, size_t count,
                                ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream,
                                const ncclCollConfig_t* config);
ncclResult_t ncclGatherConfig(const void* sendbuff, void* recvbuff, size_t count,
                              ncclDataType_t datatype, int root, ncclComm_t comm,
                              cudaStream_t stream, const ncclCollConfig_t* config);
ncclResult_t ncclScatterConfig(const void* sendbuff, void* recvbuff, size_t count,
                               ncclDataType_t datatype, int root, ncclComm_t comm,
                               cudaStream_t stream, const ncclCollConfig_t* config);
#endif

// nccl_device/host.h (only pointers cross the call, so opaque types keep the ABI).
struct ncclDevCommRequirements;
struct ncclDevComm;
struct ncclCommProperties;
ncclResult_t ncclDevCommCreate(ncclComm_t comm, const struct ncclDevCommRequirements* reqs,
                               struct ncclDevComm* outDevComm);
ncclResult_t ncclDevCommDestroy(ncclComm_t comm, const struct ncclDevComm* devComm);
ncclResult_t ncclCommQueryProperties(ncclComm_t comm, struct ncclCommProperties* props);
}
