// A "framework" library that depends on libnccl.so.2 and is itself dlopen'ed RTLD_LOCAL by the
// late-load probe, the way Python loads a framework's CUDA extension. Its NCCL calls reach the
// agent, but NCCL is not in the global scope, so the agent has to find it through the pnccl
// fallback.
#include <nccl.h>
#include <stdint.h>

extern "C" __attribute__((visibility("default"))) int fr_user_run() {
  static float buf[8];
  cudaStream_t s = (cudaStream_t)(uintptr_t)0x10;
  ncclUniqueId id;
  ncclResult_t r = ncclGetUniqueId(&id);
  if (r != ncclSuccess) return 100 + r;
  ncclComm_t comm = nullptr;
  if ((r = ncclCommInitRank(&comm, 1, id, 0)) != ncclSuccess) return 200 + r;
  for (int i = 0; i < 3; ++i)
    if ((r = ncclAllReduce(buf, buf, 8, ncclFloat32, ncclSum, comm, s)) != ncclSuccess)
      return 300 + r;
  if ((r = ncclGroupStart()) != ncclSuccess) return 400 + r;
  if ((r = ncclSend(buf, 8, ncclFloat32, 0, comm, s)) != ncclSuccess) return 500 + r;
  if ((r = ncclRecv(buf, 8, ncclFloat32, 0, comm, s)) != ncclSuccess) return 600 + r;
  if ((r = ncclGroupEnd()) != ncclSuccess) return 700 + r;
  if ((r = ncclCommDestroy(comm)) != ncclSuccess) return 800 + r;
  return 0;
}
