// CUDA graphs under the agent, on the emulation (libcuda.so.1, libcudart.so.13, libnccl.so.2 of
// sim/): one process, a one-rank communicator. Prints `key=value` lines for graph_test.cpp.
//
//   runtime N     capture an all-reduce and a broadcast with the CUDA runtime (the versioned
//                 cudaGraphLaunch@libcudart.so.13 reference torch has), replay N times, checking
//                 the graph's position after every 1000 replays
//   driver        the same through the driver, launching with the pointer cuGetProcAddress gives
//   unreplayed    capture an all-reduce, never launch it; then one eager all-reduce
//   no_nccl       a graph without NCCL work is launched: nothing is recorded for it
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dirent.h>
#include <fcntl.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>

#include "fr/flight_log.h"

namespace {

int g_failures = 0;

void check(const char* what, int rc) {
  if (rc != 0) {
    printf("fail.%s=%d\n", what, rc);
    ++g_failures;
  }
}

// This process's log, mapped read-only (the agent writes it as we go).
const fr_log_header* own_log() {
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
  return m == MAP_FAILED ? nullptr : (const fr_log_header*)m;
}

struct Job {
  ncclComm_t comm = nullptr;
  CUstream stream = nullptr;
  CUdeviceptr buf = 0;
};

Job setup() {
  Job j;
  check("cuInit", cuInit(0));
  CUdevice dev;
  CUcontext ctx;
  check("cuDeviceGet", cuDeviceGet(&dev, 0));
  check("cuDevicePrimaryCtxRetain", cuDevicePrimaryCtxRetain(&ctx, dev));
  check("cuCtxSetCurrent", cuCtxSetCurrent(ctx));
  check("cuStreamCreate", cuStreamCreate(&j.stream, CU_STREAM_NON_BLOCKING));
  check("cuMemAlloc", cuMemAlloc(&j.buf, 64 * sizeof(float)));
  ncclUniqueId id;
  check("ncclGetUniqueId", ncclGetUniqueId(&id));
  check("ncclCommInitRank", ncclCommInitRank(&j.comm, 1, id, 0));
  return j;
}

void issue(Job& j) {
  void* p = (void*)j.buf;
  check("ncclAllReduce",
        ncclAllReduce(p, p, 16, ncclFloat32, ncclSum, j.comm, (cudaStream_t)j.stream));
  check("ncclBroadcast", ncclBroadcast(p, p, 8, ncclFloat32, 0, j.comm, (cudaStream_t)j.stream));
}

void finish(Job& j) {
  check("ncclCommDestroy", ncclCommDestroy(j.comm));
  cuStreamDestroy(j.stream);
}

// After replay n: the graph's entry and the communicator's counters and positions.
void report(const fr_log_header* h, const char* prefix) {
  const fr_log_section* graphs = h ? fr_log_section_of(h, FR_SECTION_GRAPHS) : nullptr;
  if (graphs == nullptr || graphs->capacity == 0) {
    printf("%s.log=missing\n", prefix);
    return;
  }
  auto* g = (const fr_graph_entry*)((const uint8_t*)h + graphs->offset);
  auto* c =
      (const fr_comm_entry*)((const uint8_t*)h + fr_log_section_of(h, FR_SECTION_COMMS)->offset);
  printf(
      "%s.graphs=%u\n%s.replays=%llu\n%s.n_ops=%u\n%s.coll_seq=%llu\n%s.started=%llx\n"
      "%s.completed=%llx\n",
      prefix, (unsigned)__atomic_load_n(&graphs->count, __ATOMIC_ACQUIRE), prefix,
      (unsigned long long)__atomic_load_n(&g->replays, __ATOMIC_ACQUIRE), prefix,
      __atomic_load_n(&g->n_ops, __ATOMIC_ACQUIRE), prefix,
      (unsigned long long)__atomic_load_n(&c->coll_seq, __ATOMIC_ACQUIRE), prefix,
      (unsigned long long)__atomic_load_n(&c->graph_started, __ATOMIC_ACQUIRE), prefix,
      (unsigned long long)__atomic_load_n(&c->graph_completed, __ATOMIC_ACQUIRE));
}

int runtime(long n) {
  Job j = setup();
  cudaStream_t s = (cudaStream_t)j.stream;
  check("cudaStreamBeginCapture", cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  issue(j);
  cudaGraph_t g = nullptr;
  check("cudaStreamEndCapture", cudaStreamEndCapture(s, &g));
  cudaGraphExec_t exec = nullptr;
  check("cudaGraphInstantiate", cudaGraphInstantiate(&exec, g, 0));
  const fr_log_header* h = own_log();
  long bad_positions = 0;
  for (long i = 1; i <= n; ++i) {
    check("cudaGraphLaunch", cudaGraphLaunch(exec, s));
    if (i % 1000 == 0 || i == n) {
      check("cudaStreamSynchronize", cudaStreamSynchronize(s));
      // Replay i finished both ops: the position is the graph's last op, the counters are exact.
      auto* c = (const fr_comm_entry*)((const uint8_t*)h +
                                       fr_log_section_of(h, FR_SECTION_COMMS)->offset);
      auto* ge = (const fr_graph_entry*)((const uint8_t*)h +
                                         fr_log_section_of(h, FR_SECTION_GRAPHS)->offset);
      if (c->graph_completed != FR_GRAPH_POS(1, 2) || c->graph_started != FR_GRAPH_POS(1, 2) ||
          c->coll_seq != (uint64_t)(2 * i) || ge->replays != (uint64_t)i)
        ++bad_positions;
    }
  }
  printf("bad_positions=%ld\n", bad_positions);
  report(h, "end");
  check("cudaGraphExecDestroy", cudaGraphExecDestroy(exec));
  check("cudaGraphDestroy", cudaGraphDestroy(g));
  finish(j);
  return g_failures;
}

int driver() {
  Job j = setup();
  check("cuStreamBeginCapture", cuStreamBeginCapture(j.stream, CU_STREAM_CAPTURE_MODE_RELAXED));
  issue(j);
  CUgraph g = nullptr;
  check("cuStreamEndCapture", cuStreamEndCapture(j.stream, &g));
  // The driver entries as the runtime gets them.
  using InstFn = CUresult (*)(CUgraphExec*, CUgraph, unsigned long long);
  using LaunchFn = CUresult (*)(CUgraphExec, CUstream);
  void* inst = nullptr;
  void* launch = nullptr;
  CUdriverProcAddressQueryResult st;
  check("cuGetProcAddress(inst)",
        cuGetProcAddress("cuGraphInstantiateWithFlags", &inst, 13000, 0, &st));
  check("cuGetProcAddress(launch)", cuGetProcAddress("cuGraphLaunch", &launch, 13000, 0, &st));
  CUgraphExec exec = nullptr;
  check("instantiate", ((InstFn)inst)(&exec, g, 0));
  for (int i = 0; i < 3; ++i) check("launch", ((LaunchFn)launch)(exec, j.stream));
  // And once through the exported name.
  check("cuGraphLaunch", cuGraphLaunch(exec, j.stream));
  check("cuStreamSynchronize", cuStreamSynchronize(j.stream));
  report(own_log(), "end");
  cuGraphExecDestroy(exec);
  cuGraphDestroy(g);
  finish(j);
  return g_failures;
}

int unreplayed() {
  Job j = setup();
  check("cuStreamBeginCapture", cuStreamBeginCapture(j.stream, CU_STREAM_CAPTURE_MODE_GLOBAL));
  issue(j);
  CUgraph g = nullptr;
  check("cuStreamEndCapture", cuStreamEndCapture(j.stream, &g));
  CUgraphExec exec = nullptr;
  check("cuGraphInstantiate", cuGraphInstantiate(&exec, g, 0));
  void* p = (void*)j.buf;
  check("ncclAllReduce",
        ncclAllReduce(p, p, 16, ncclFloat32, ncclSum, j.comm, (cudaStream_t)j.stream));
  check("cuStreamSynchronize", cuStreamSynchronize(j.stream));
  report(own_log(), "end");
  // Exits without destroying anything: the log is analysed as a dump of a live job would be.
  return g_failures;
}

void CUDA_CB nothing(void*) {}

int no_nccl() {
  Job j = setup();
  check("cuStreamBeginCapture", cuStreamBeginCapture(j.stream, CU_STREAM_CAPTURE_MODE_GLOBAL));
  check("cuLaunchHostFunc", cuLaunchHostFunc(j.stream, nothing, nullptr));
  CUgraph g = nullptr;
  check("cuStreamEndCapture", cuStreamEndCapture(j.stream, &g));
  cudaGraphExec_t exec = nullptr;
  check("cudaGraphInstantiate", cudaGraphInstantiate(&exec, g, 0));
  for (int i = 0; i < 5; ++i)
    check("cudaGraphLaunch", cudaGraphLaunch(exec, (cudaStream_t)j.stream));
  check("cuStreamSynchronize", cuStreamSynchronize(j.stream));
  report(own_log(), "end");
  finish(j);
  return g_failures;
}

}  // namespace

int main(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  printf("pid=%d\n", (int)getpid());
  std::string mode = argc > 1 ? argv[1] : "";
  int failures = mode == "runtime"      ? runtime(argc > 2 ? atol(argv[2]) : 100)
                 : mode == "driver"     ? driver()
                 : mode == "unreplayed" ? unreplayed()
                 : mode == "no_nccl"    ? no_nccl()
                                        : (printf("unknown mode\n"), 2);
  printf("failures=%d\n", failures);
  return failures == 0 ? 0 : 1;
}
