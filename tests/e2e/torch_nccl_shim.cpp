// The two NCCL 2.28 functions torch 2.15's libtorch_cuda.so links that the emulated libnccl.so.2
// (sim/nccl) does not export, so that torch loads beside the emulation in
// torch_incident_e2e_test's NCCL job (torch_nccl_job.py). torch calls neither on a job that never
// makes a symmetric-memory window; should it, they refuse (ncclInvalidUsage).
#include <cstddef>

extern "C" {

__attribute__((visibility("default"))) int ncclGetLsaMultimemDevicePointer(void*, size_t, void**) {
  return 5;  // ncclInvalidUsage
}

__attribute__((visibility("default"))) int ncclGetPeerDevicePointer(void*, size_t, int, void**) {
  return 5;  // ncclInvalidUsage
}

}  // extern "C"
