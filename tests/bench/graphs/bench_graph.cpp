// Host time per cuGraphLaunch of a graph holding NCCL work: run once plainly and once under the
// agent (run.sh does both) against a no-op driver and a no-op NCCL, so the difference is what the
// agent adds per replay (its target: 100 ns). The graph holds 8 all-reduces: nothing may be added
// per captured op. Prints the median of many batches and the heap allocations in the timed loop.
#include <cuda.h>
#include <malloc.h>
#include <nccl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <algorithm>
#include <vector>

extern "C" void* __libc_malloc(size_t);
extern "C" void noop_cuda_set_capturing(bool on);
extern "C" CUgraph noop_cuda_graph();

namespace {
unsigned long g_allocs;
bool g_counting;
}  // namespace

#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
extern "C" void* malloc(size_t n) {
  if (g_counting) __atomic_fetch_add(&g_allocs, 1, __ATOMIC_RELAXED);
  return __libc_malloc(n);
}
#endif

namespace {
uint64_t now() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
}  // namespace

int main(int argc, char** argv) {
  int batches = argc > 1 ? atoi(argv[1]) : 200;
  const int per_batch = 1000;
  ncclUniqueId id;
  ncclComm_t comm;
  if (ncclGetUniqueId(&id) != ncclSuccess || ncclCommInitRank(&comm, 1, id, 0) != ncclSuccess) {
    fprintf(stderr, "bench: the no-op NCCL did not start\n");
    return 1;
  }
  static float buf[256];
  CUstream s = (CUstream)(uintptr_t)0x10;
  noop_cuda_set_capturing(true);
  for (int i = 0; i < 8; ++i)
    ncclAllReduce(buf, buf, 256, ncclFloat32, ncclSum, comm, (cudaStream_t)s);
  noop_cuda_set_capturing(false);
  CUgraphExec exec = nullptr;
  if (cuGraphInstantiateWithFlags(&exec, noop_cuda_graph(), 0) != CUDA_SUCCESS) return 1;
  std::vector<double> v;
  v.reserve((size_t)batches + 20);
  for (int i = 0; i < 20 * per_batch; ++i) cuGraphLaunch(exec, s);  // warm up
  g_counting = true;
  for (int b = 0; b < batches; ++b) {
    uint64_t t0 = now();
    for (int i = 0; i < per_batch; ++i) cuGraphLaunch(exec, s);
    v.push_back((double)(now() - t0) / per_batch);
  }
  g_counting = false;
  std::sort(v.begin(), v.end());
  printf("graph_launch_ns=%.1f\n", v[v.size() / 2]);
  printf("launches=%llu\n", (unsigned long long)(20 + batches) * per_batch);
  printf("allocs_in_loop=%lu\n", g_allocs);
  return 0;
}
