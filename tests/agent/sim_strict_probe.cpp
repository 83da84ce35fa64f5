// The agent under the strict CUDA emulation (build/sim/lib/libcuda.so.1, sim/README.md): capture
// modes enforced, and FRSIM_CU_FAIL's driver refusals. Uses the NCCL test double for NCCL and
// prints `key=value` lines for the test.
//
//   1. control: an allocation on this thread during another thread's GLOBAL capture invalidates
//      it (the emulation is as strict as CUDA)
//   2. the process's first all-reduce, whose launch makes the agent register its log with the
//      driver, runs while another thread holds a GLOBAL capture: that capture must survive
//   3. two more all-reduces, synchronized: their GPU state is read from the log by the test
#include <cuda.h>
#include <dirent.h>
#include <fcntl.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <thread>

#include "fr/flight_log.h"

namespace {

int g_failures = 0;

void check(const char* what, int rc) {
  printf("rc.%s=%d\n", what, rc);
  if (rc != 0) ++g_failures;
}

// This process's log's first communicator, mapped read-only; nullptr when there is none.
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
  return (const fr_comm_entry*)((const uint8_t*)m + h->comm_offset);
}

// Holds a GLOBAL capture on a stream of its own thread while `during` runs on the caller's
// thread; the result of its cuStreamEndCapture.
int global_capture_around(CUcontext ctx, const std::function<void()>& during) {
  std::atomic<int> phase{0};
  int end_rc = -1;
  std::thread t([&] {
    cuCtxSetCurrent(ctx);
    CUstream s;
    cuStreamCreate(&s, 0);
    if (cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL) != CUDA_SUCCESS) end_rc = -2;
    phase = 1;
    while (phase.load() != 2) std::this_thread::yield();
    CUgraph g = nullptr;
    end_rc = cuStreamEndCapture(s, &g);
    if (g != nullptr) cuGraphDestroy(g);
    cuStreamDestroy(s);
  });
  while (phase.load() != 1) std::this_thread::yield();
  during();
  phase = 2;
  t.join();
  return end_rc;
}

}  // namespace

int main() {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  CUdevice dev;
  CUcontext ctx;
  CUstream s1;
  check("cuInit", cuInit(0));
  check("cuDeviceGet", cuDeviceGet(&dev, 0));
  check("cuDevicePrimaryCtxRetain", cuDevicePrimaryCtxRetain(&ctx, dev));
  check("cuCtxSetCurrent", cuCtxSetCurrent(ctx));
  check("cuStreamCreate", cuStreamCreate(&s1, 0));
  int alloc_rc = 0;
  int control = global_capture_around(ctx, [&] {
    CUdeviceptr p = 0;
    alloc_rc = cuMemAlloc(&p, 64);
    if (alloc_rc == CUDA_SUCCESS) cuMemFree(p);
  });
  printf("control.alloc=%d\ncontrol.end=%d\n", alloc_rc, control);
  ncclUniqueId id;
  ncclComm_t comm = nullptr;
  check("GetUniqueId", ncclGetUniqueId(&id));
  check("CommInitRank", ncclCommInitRank(&comm, 2, id, 0));
  static float buf[16];
  int launch_rc = -1;
  int end = global_capture_around(ctx, [&] {
    launch_rc = ncclAllReduce(buf, buf, 16, ncclFloat32, ncclSum, comm, (cudaStream_t)s1);
  });
  check("AllReduceDuringCapture", launch_rc);
  check("OtherThreadsCapture", end);
  check("AllReduce", ncclAllReduce(buf, buf, 16, ncclFloat32, ncclSum, comm, (cudaStream_t)s1));
  check("AllReduce", ncclAllReduce(buf, buf, 16, ncclFloat32, ncclSum, comm, (cudaStream_t)s1));
  check("sync", cuStreamSynchronize(s1));
  // Where events stand in for markers the agent's poller reports completion: wait for it.
  const fr_comm_entry* c = first_comm();
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (c != nullptr && __atomic_load_n(&c->gpu_completed, __ATOMIC_ACQUIRE) < 3 &&
         std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  printf("gpu_completed=%llu\n",
         c ? (unsigned long long)__atomic_load_n(&c->gpu_completed, __ATOMIC_ACQUIRE) : 0ull);
  return g_failures == 0 ? 0 : 1;
}
