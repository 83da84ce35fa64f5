// A job of one process on the emulation (libcuda.so.1, libnccl.so.2 of sim/) with the agent
// linked and loaded as NCCL's profiler plugin: two ranks of one communicator made with
// ncclCommInitAll, ten grouped all-reduces, one per rank's stream. The test runs it with
// FR_LOG_DIR on a small file system; it must succeed whatever room the log finds. Prints
// `rc.<call>=<result>` for each call that failed and `ok=1` at the end.
#include <cuda.h>
#include <nccl.h>
#include <stdio.h>

namespace {

int g_failures = 0;

void check(const char* what, int rc) {
  if (rc == 0) return;
  printf("rc.%s=%d\n", what, rc);
  ++g_failures;
}

}  // namespace

int main() {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  check("cuInit", cuInit(0));
  ncclComm_t comms[2] = {};
  CUstream streams[2] = {};
  int devs[2] = {0, 0};
  check("CommInitAll", ncclCommInitAll(comms, 2, devs));
  for (CUstream& s : streams) check("cuStreamCreate", cuStreamCreate(&s, 0));
  static float buf[2][256];
  for (int step = 0; step < 10; ++step) {
    check("GroupStart", ncclGroupStart());
    for (int r = 0; r < 2; ++r)
      check("AllReduce", ncclAllReduce(buf[r], buf[r], 256, ncclFloat32, ncclSum, comms[r],
                                       (cudaStream_t)streams[r]));
    check("GroupEnd", ncclGroupEnd());
  }
  for (CUstream s : streams) check("cuStreamSynchronize", cuStreamSynchronize(s));
  for (ncclComm_t c : comms) check("CommDestroy", ncclCommDestroy(c));
  printf("ok=%d\n", g_failures == 0 ? 1 : 0);
  return g_failures == 0 ? 0 : 1;
}
