// A stand-in for an LD_PRELOAD wrapper such as the agent: it interposes ncclBroadcast and counts
// the calls that reach it, so a test can see that ncclBcast enters ncclBroadcast through the
// exported symbol (as the real NCCL does) and a wrapper's reentrancy guard gets exercised.
#include <dlfcn.h>
#include <nccl.h>

#include <atomic>

namespace {
std::atomic<int> g_calls{0};
}

extern "C" __attribute__((visibility("default"))) int frsim_test_broadcast_calls() {
  return g_calls.load();
}

extern "C" __attribute__((visibility("default"))) ncclResult_t ncclBroadcast(
    const void* s, void* r, size_t n, ncclDataType_t t, int root, ncclComm_t c, cudaStream_t st) {
  using Fn =
      ncclResult_t (*)(const void*, void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
  static Fn next = reinterpret_cast<Fn>(dlsym(RTLD_NEXT, "ncclBroadcast"));
  ++g_calls;
  return next != nullptr ? next(s, r, n, t, root, c, st) : ncclSystemError;
}
