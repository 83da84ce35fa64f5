// The NCCL API the agent wraps, declared whatever nccl.h it is built against. The agent is built
// against the newest nccl.h at hand (2.32.3; see agent/CMakeLists.txt); with an older one, the
// types of what it lacks are declared here, with the definitions of NCCL's own headers. Every
// function of the list (fr/nccl_api.def) is then declared from its row: a row that disagrees with
// nccl.h does not compile, and none is missing where nccl.h is older. Every one is resolved at run
// time: a loaded NCCL that lacks it gets the answer described in wrappers.h. The host functions of
// NCCL's device API (nccl_device/host.h, 2.28+) take opaque pointer types: nccl.h does not
// include that header.
#pragma once

#include <nccl.h>
#include <stdint.h>

#include "fr/nccl_api.h"

#ifndef NCCL_VERSION_CODE
#define NCCL_VERSION_CODE 0
#endif

extern "C" {

#if NCCL_VERSION_CODE < 23000
typedef int ncclCommMemStat_t;
typedef struct {
  int opCnt;   // signals to wait for
  int peer;    // from this rank
  int sigIdx;  // on this signal index
  int ctx;     // and context
} ncclWaitSignalDesc_t;
#endif

#if NCCL_VERSION_CODE < 23100
// The per-call configuration of the *Config collectives (only passed through).
typedef struct ncclCollConfig_v23200 ncclCollConfig_t;
#endif

// nccl_device/host.h (only pointers cross the call, so opaque types keep the ABI).
struct ncclDevCommRequirements;
struct ncclDevComm;
struct ncclCommProperties;

// Grow (2.29): existing members pass comm (uniqueId only on the coordinating rank, rank = -1);
// joining ranks pass comm = NULL, the coordinator's uniqueId and their new rank.
// CommGetUniqueId (2.29): a unique id for one grow of `comm`, made by the coordinating rank.
#define FR_NCCL_FN(base, ret, op, kind, rooted, reducing, torch, since, emu, ...) \
  ret nccl##base(FR_NCCL_PARAMS(__VA_ARGS__));
#include "fr/nccl_api.def"
}
