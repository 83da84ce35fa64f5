/* NCCL 2.29 additions the emulation implements (not in the 2.28.9 nccl.h; signatures as in
 * NCCL's src/nccl.h.in), for the emulation itself and for programs that call them on it.
 * Grow: the coordinating member makes an id with ncclCommGetUniqueId and hands it to the joining
 * ranks; existing members pass their communicator and rank -1 and keep their rank; joining ranks
 * pass comm = NULL, the id and their new rank. */
#pragma once

#include <nccl.h>

#ifdef __cplusplus
extern "C" {
#endif
ncclResult_t ncclCommGrow(ncclComm_t comm, int nRanks, const ncclUniqueId* uniqueId, int rank,
                          ncclComm_t* newcomm, ncclConfig_t* config);
ncclResult_t ncclCommGetUniqueId(ncclComm_t comm, ncclUniqueId* uniqueId);
ncclResult_t ncclCommSuspend(ncclComm_t comm, int flags);
ncclResult_t ncclCommResume(ncclComm_t comm);
#ifdef __cplusplus
}
#endif
