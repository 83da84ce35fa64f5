// NCCL API newer than the nccl.h the agent is built against (2.28): declared by hand and resolved
// at run time, so the wrappers exist when the loaded library has them and answer ncclSystemError
// when it does not. Signatures as in NCCL 2.29+ (src/nccl.h.in).
#pragma once

#include <nccl.h>

extern "C" {
// Grow: existing members pass comm (uniqueId only on the coordinating rank, rank = -1); joining
// ranks pass comm = NULL, the coordinator's uniqueId and their new rank.
ncclResult_t ncclCommGrow(ncclComm_t comm, int nRanks, const ncclUniqueId* uniqueId, int rank,
                          ncclComm_t* newcomm, ncclConfig_t* config);
// A unique id for one grow of `comm`, made by the coordinating rank.
ncclResult_t ncclCommGetUniqueId(ncclComm_t comm, ncclUniqueId* uniqueId);
ncclResult_t ncclCommSuspend(ncclComm_t comm, int flags);
ncclResult_t ncclCommResume(ncclComm_t comm);
}
