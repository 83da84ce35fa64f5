// GPU progress under the CUDA emulation (build/sim/lib/libcuda.so.1), where streams really run
// asynchronously on worker threads: a marker must not advance before the stream reaches it.
// Uses the NCCL test double for NCCL and prints `key=value` lines for the test.
//
//   1. all-reduce on a stream held by a stalled "kernel": counters stay 0; release: both 1
//   2. all-reduce on a capturing stream: nothing enqueued, the capture still ends cleanly
//   3. a group of three ops on one stream: indices 2..4, counters 4 after a sync
#include <cuda.h>
#include <dirent.h>
#include <fcntl.h>
#include <fr_sim.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <string>

#include "fr/flight_log.h"

namespace {

int g_failures = 0;

void check(const char* what, int rc) {
  printf("rc.%s=%d\n", what, rc);
  if (rc != 0) ++g_failures;
}

const fr_comm_entry* first_comm() {
  const char* dir = getenv("FR_LOG_DIR");
  DIR* d = dir ? opendir(dir) : nullptr;
  if (d == nullptr) return nullptr;
  std::string want = "." + std::to_string(getpid()) + ".", path;
  while (dirent* e = readdir(d))
    if (std::string(e->d_name).find(want) != std::string::npos)
      path = std::string(dir) + "/" + e->d_name;
  closedir(d);
  int fd = open(path.c_str(), O_RDONLY);
  if (fd < 0) return nullptr;
  struct stat st;
  void* m = MAP_FAILED;
  if (fstat(fd, &st) == 0) m = mmap(nullptr, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
  close(fd);
  if (m == MAP_FAILED) return nullptr;
  auto* h = (const fr_log_header*)m;
  return (const fr_comm_entry*)((const uint8_t*)m + fr_log_section_of(h, FR_SECTION_COMMS)->offset);
}

void print_counters(const char* when, const fr_comm_entry* c) {
  printf("%s.started=%llu\n%s.completed=%llu\n", when,
         (unsigned long long)__atomic_load_n(&c->gpu_started, __ATOMIC_ACQUIRE), when,
         (unsigned long long)__atomic_load_n(&c->gpu_completed, __ATOMIC_ACQUIRE));
}

}  // namespace

int main() {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  CUdevice dev;
  CUcontext ctx;
  CUstream s1, s2;
  check("cuInit", cuInit(0));
  check("cuDeviceGet", cuDeviceGet(&dev, 0));
  check("cuDevicePrimaryCtxRetain", cuDevicePrimaryCtxRetain(&ctx, dev));
  check("cuCtxSetCurrent", cuCtxSetCurrent(ctx));
  check("cuStreamCreate", cuStreamCreate(&s1, 0));
  check("cuStreamCreate", cuStreamCreate(&s2, 0));

  ncclUniqueId id;
  ncclComm_t comm = nullptr;
  check("GetUniqueId", ncclGetUniqueId(&id));
  check("CommInitRank", ncclCommInitRank(&comm, 2, id, 0));
  static float buf[16];

  static volatile uint32_t gate = 0;
  check("stall", frsim_stream_stall_until(s1, &gate));
  check("AllReduce", ncclAllReduce(buf, buf, 16, ncclFloat32, ncclSum, comm, (cudaStream_t)s1));
  const fr_comm_entry* c = first_comm();
  if (c == nullptr) {
    printf("no_log=1\n");
    return 1;
  }
  struct timespec pause = {0, 50000000};
  nanosleep(&pause, nullptr);
  print_counters("stalled", c);
  __atomic_store_n(&gate, 1u, __ATOMIC_RELEASE);
  check("sync1", cuStreamSynchronize(s1));
  print_counters("released", c);

  check("BeginCapture", cuStreamBeginCapture(s2, CU_STREAM_CAPTURE_MODE_RELAXED));
  check("AllReduceCaptured",
        ncclAllReduce(buf, buf, 16, ncclFloat32, ncclSum, comm, (cudaStream_t)s2));
  CUgraph graph = nullptr;
  check("EndCapture", cuStreamEndCapture(s2, &graph));
  if (graph) cuGraphDestroy(graph);

  check("GroupStart", ncclGroupStart());
  check("AllReduce", ncclAllReduce(buf, buf, 16, ncclFloat32, ncclSum, comm, (cudaStream_t)s1));
  check("Send", ncclSend(buf, 16, ncclFloat32, 1, comm, (cudaStream_t)s1));
  check("Recv", ncclRecv(buf, 16, ncclFloat32, 1, comm, (cudaStream_t)s1));
  check("GroupEnd", ncclGroupEnd());
  check("sync2", cuStreamSynchronize(s1));
  print_counters("group", c);
  return g_failures == 0 ? 0 : 1;
}
