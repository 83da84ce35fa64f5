// Compiled, not run (real_header_test.sh): the emulation's declarations of the NCCL 2.29-2.32
// additions (sim/include/fr_sim_nccl.h) beside a real NCCL's nccl.h. A C function declared twice
// with other parameters does not compile, so each declaration the real header also makes is
// checked against it; the types the emulation declares for older headers are checked here
// against the real ones' values and layout.
#include "fr_sim_nccl.h"

#include <cstddef>

static_assert(NCCL_VERSION_CODE >= 23000, "a real nccl.h of 2.30 or newer is first on the path");
static_assert(ncclStatGpuMemSuspend == 0 && ncclStatGpuMemSuspended == 1 &&
                  ncclStatGpuMemPersist == 2 && ncclStatGpuMemTotal == 3,
              "ncclCommMemStat_t's values");
static_assert(sizeof(ncclWaitSignalDesc_t) == 4 * sizeof(int) &&
                  offsetof(ncclWaitSignalDesc_t, opCnt) == 0 &&
                  offsetof(ncclWaitSignalDesc_t, peer) == sizeof(int) &&
                  offsetof(ncclWaitSignalDesc_t, sigIdx) == 2 * sizeof(int) &&
                  offsetof(ncclWaitSignalDesc_t, ctx) == 3 * sizeof(int),
              "ncclWaitSignalDesc_t's layout");

#ifdef FR_CHECK_MISMATCH
// The check's own check: a declaration that differs from the real header's must not compile.
extern "C" ncclResult_t ncclSignal(int peer, int sigIdx, int ctx, ncclComm_t comm,
                                   cudaStream_t stream);
#endif
