// Host time per intercepted NCCL call: run once plainly and once under the agent (run.sh does
// both) against a no-op NCCL, so the difference is what the agent adds. Prints the median of many
// batches, and the heap allocations made inside the timed loops (counted by interposing malloc),
// which must be zero.
//
// `fr_bench_agent --calls allreduce|group|group16 N` instead makes N calls (after the same warm-up) and
// prints nothing: run.sh runs it under callgrind with two values of N, so the difference in
// instructions, divided by the difference in N, is the exact count per call, free of start-up.
#include <malloc.h>
#include <nccl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <dlfcn.h>

#include <algorithm>
#include <vector>

#include "fr/profiler_abi.h"

extern "C" void* __libc_malloc(size_t);
extern "C" void* __libc_calloc(size_t, size_t);
extern "C" void* __libc_realloc(void*, size_t);
extern "C" void* __libc_memalign(size_t, size_t);

namespace {
unsigned long g_allocs;  // counted while g_counting
bool g_counting;
}  // namespace

// Sanitizer runtimes own malloc; the benchmark is only meaningful in plain builds anyway.
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
extern "C" void* malloc(size_t n) {
  if (g_counting) __atomic_fetch_add(&g_allocs, 1, __ATOMIC_RELAXED);
  return __libc_malloc(n);
}
extern "C" void* calloc(size_t n, size_t m) {
  if (g_counting) __atomic_fetch_add(&g_allocs, 1, __ATOMIC_RELAXED);
  return __libc_calloc(n, m);
}
extern "C" void* realloc(void* p, size_t n) {
  if (g_counting) __atomic_fetch_add(&g_allocs, 1, __ATOMIC_RELAXED);
  return __libc_realloc(p, n);
}
extern "C" void* memalign(size_t a, size_t n) {
  if (g_counting) __atomic_fetch_add(&g_allocs, 1, __ATOMIC_RELAXED);
  return __libc_memalign(a, n);
}
#endif

namespace {

uint64_t now() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

// `v` has room for `batches` values already: nothing is allocated while timing.
template <class F>
double median_ns(std::vector<double>& v, int batches, int per_batch, F f) {
  v.clear();
  for (int b = 0; b < batches; ++b) {
    uint64_t t0 = now();
    for (int i = 0; i < per_batch; ++i) f();
    v.push_back((double)(now() - t0) / per_batch);
  }
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

namespace ap = fr::nccl_prof;

// `fr_bench_agent --profiler` (under the agent): the plugin interface's cost per event as NCCL
// would report it (ncclProfiler_v5 looked up as NCCL does), and an all-reduce's host time before
// any profiler context exists (NCCL did not load the plugin) and after one does.
int profiler_bench(ncclComm_t comm, int batches) {
  auto* t = static_cast<const ap::PluginV5*>(dlsym(RTLD_DEFAULT, "ncclProfiler_v5"));
  if (t == nullptr) {
    fprintf(stderr, "bench: ncclProfiler_v5 not found: run under the agent\n");
    return 1;
  }
  static float buf[256];
  cudaStream_t s = (cudaStream_t)(uintptr_t)0x10;
  auto allreduce = [&] { ncclAllReduce(buf, buf, 256, ncclFloat32, ncclSum, comm, s); };
  std::vector<double> v;
  v.reserve((size_t)batches + 20);
  median_ns(v, 20, 1000, allreduce);
  const double before = median_ns(v, batches, 1000, allreduce);
  void* ctx = nullptr;
  int mask = 0;
  t->init(&ctx, 1, &mask, "bench", 1, 2, 0, nullptr);
  if (ctx == nullptr || mask == 0) {
    fprintf(stderr, "bench: the plugin's init turned it off\n");
    return 1;
  }
  ap::DescrV5 coll = {}, op = {}, step = {}, kern = {};
  coll.type = ap::kEvColl;
  coll.coll.func = "AllReduce";
  void* ch = nullptr;
  t->startEvent(ctx, &ch, &coll);
  op.type = ap::kEvProxyOp;
  op.parentObj = ch;
  op.proxyOp.peer = 1;
  op.proxyOp.nSteps = 1 << 20;
  op.proxyOp.isSend = 1;
  step.type = ap::kEvProxyStep;
  kern.type = ap::kEvKernelCh;
  kern.parentObj = ch;
  ap::StateArgs a = {};
  a.proxyStep.transSize = 4096;
  void* oh = nullptr;
  t->startEvent(ctx, &oh, &op);
  step.parentObj = oh;
  int k = 0;
  auto one_step = [&] {
    void* h = nullptr;
    step.proxyStep.step = k++ & 0xfffff;
    t->startEvent(ctx, &h, &step);
    t->recordEventState(h, ap::kStSendGpuWait, &a);
    t->recordEventState(h, ap::kStSendWait, &a);
    t->stopEvent(h);
  };
  auto one_op = [&] {
    void* h = nullptr;
    t->startEvent(ctx, &h, &op);
    t->stopEvent(h);
  };
  auto one_kernel = [&] {
    void* h = nullptr;
    t->startEvent(ctx, &h, &kern);
    t->recordEventState(h, ap::kStKernelChStop, &a);
    t->stopEvent(h);
  };
  g_counting = true;
  const double st = median_ns(v, batches, 1000, one_step);
  const double po = median_ns(v, batches, 1000, one_op);
  const double kc = median_ns(v, batches, 1000, one_kernel);
  const double after = median_ns(v, batches, 1000, allreduce);
  g_counting = false;
  printf("allreduce_no_plugin_ns=%.1f\n", before);
  printf("allreduce_plugin_context_ns=%.1f\n", after);
  printf("proxy_step_ns=%.1f\n", st);      // start, two states, stop
  printf("proxy_op_ns=%.1f\n", po);        // start, stop
  printf("kernel_channel_ns=%.1f\n", kc);  // start, KernelChStop, stop
  printf("allocs_in_loop=%lu\n", g_allocs);
  return 0;
}

int main(int argc, char** argv) {
  const bool profiler_mode = argc == 2 && strcmp(argv[1], "--profiler") == 0;
  const bool count_mode = argc == 4 && strcmp(argv[1], "--calls") == 0;
  if (argc > 1 && !count_mode && !profiler_mode && (argc != 2 || atoi(argv[1]) <= 0)) {
    fprintf(stderr,
            "usage: fr_bench_agent [BATCHES] | --calls allreduce|group|group16 N | --profiler\n");
    return 2;
  }
  int batches = argc == 2 && !profiler_mode ? atoi(argv[1]) : 200;
  const int per_batch = 1000;
  ncclUniqueId id;
  ncclComm_t comm;
  if (ncclGetUniqueId(&id) != ncclSuccess || ncclCommInitRank(&comm, 1, id, 0) != ncclSuccess) {
    fprintf(stderr, "bench: the no-op NCCL did not start\n");
    return 1;
  }
  if (profiler_mode) return profiler_bench(comm, batches);
  if (profiler_mode) return profiler_bench(comm, batches);
  static float buf[256];
  cudaStream_t s = (cudaStream_t)(uintptr_t)0x10;
  auto allreduce = [&] { ncclAllReduce(buf, buf, 256, ncclFloat32, ncclSum, comm, s); };
  auto group = [&] {
    ncclGroupStart();
    ncclSend(buf, 256, ncclFloat32, 0, comm, s);
    ncclRecv(buf, 256, ncclFloat32, 0, comm, s);
    ncclGroupEnd();
  };
  // An exchange with 8 peers (an all-to-all's shape): 16 ops between one GroupStart and GroupEnd.
  auto group16 = [&] {
    ncclGroupStart();
    for (int p = 0; p < 8; ++p) {
      ncclSend(buf, 256, ncclFloat32, 0, comm, s);
      ncclRecv(buf, 256, ncclFloat32, 0, comm, s);
    }
    ncclGroupEnd();
  };
  std::vector<double> v;
  v.reserve((size_t)batches + 20);
  median_ns(v, 20, per_batch, allreduce);  // warm up: first-call resolution, page faults
  median_ns(v, 20, per_batch, group);
  median_ns(v, 4, per_batch, group16);
  if (count_mode) {
    const long n = atol(argv[3]);
    void (*run)(decltype(allreduce)&, decltype(group)&, decltype(group16)&) = nullptr;
    if (strcmp(argv[2], "allreduce") == 0)
      run = [](auto& a, auto&, auto&) { a(); };
    else if (strcmp(argv[2], "group") == 0)
      run = [](auto&, auto& g, auto&) { g(); };
    else if (strcmp(argv[2], "group16") == 0)
      run = [](auto&, auto&, auto& g16) { g16(); };
    if (run == nullptr || n < 0) {
      fprintf(stderr, "bench: --calls takes allreduce, group or group16, and a count\n");
      return 2;
    }
    for (long i = 0; i < n; ++i) run(allreduce, group, group16);
    return 0;
  }
  g_counting = true;
  double ar = median_ns(v, batches, per_batch, allreduce);
  double gr = median_ns(v, batches / 4 + 1, per_batch, group);
  double g16 = median_ns(v, batches / 8 + 1, per_batch, group16);
  g_counting = false;
  printf("allreduce_ns=%.1f\n", ar);
  printf("group_send_recv_ns=%.1f\n", gr);
  printf("group_16_ops_ns=%.1f\n", g16);
  printf("allocs_in_loop=%lu\n", g_allocs);
  return 0;
}
