// A profiler plugin for the emulation's tests: it exports versioned tables (FRSIM_PROF_VERSION 5:
// ncclProfiler_v5; 9: a version no NCCL knows; 567: v5, v6 and v7, as the agent does) and counts
// what it is given, which the ranks read through frsim_test_prof_counts (slot 7: the version
// whose init was called) and frsim_test_prof_steps (the largest ProxyOp nSteps, the largest
// ProxyStep number + 1, the channels that had a KernelCh event, as bits). The mask it asks for is
// FRSIM_TEST_PROF_MASK when set, else Coll|ProxyOp|ProxyStep|KernelCh. Built as
// libfrsim_prof_v5.so, libfrsim_prof_v9.so, libfrsim_prof_v567.so.
#include <stdlib.h>
#include <string.h>

#include "fr/profiler_abi.h"

namespace ap = fr::nccl_prof;

namespace {

int g_counts
    [8];  // 0 inits, 1 coll, 2 proxy ops, 3 proxy steps, 4 kernel channels, 5 states, 6 stops
int g_token;
int g_steps[3];  // max nSteps, max step + 1, KernelCh channel bits

template <class Descr>
void note_steps(const Descr* d) {
  if (d->type == ap::kEvProxyOp && d->proxyOp.nSteps > g_steps[0]) g_steps[0] = d->proxyOp.nSteps;
  if (d->type == ap::kEvProxyStep && d->proxyStep.step + 1 > g_steps[1])
    g_steps[1] = d->proxyStep.step + 1;
  if (d->type == ap::kEvKernelCh) g_steps[2] |= 1 << (d->kernelCh.channelId & 31);
}

template <int Version>
int init(void** ctx, uint64_t, int* mask, const char*, int, int, int, ap::Logger) {
  ++g_counts[0];
  g_counts[7] = Version;
  *ctx = &g_token;
  const char* m = getenv("FRSIM_TEST_PROF_MASK");
  *mask = m != nullptr ? atoi(m)
                       : int(ap::kEvColl | ap::kEvProxyOp | ap::kEvProxyStep | ap::kEvKernelCh);
  return 0;
}
template <class Descr>
int start(void*, void** h, Descr* d) {
  if (d->type == ap::kEvColl) ++g_counts[1];
  if (d->type == ap::kEvProxyOp) ++g_counts[2];
  if (d->type == ap::kEvProxyStep) ++g_counts[3];
  if (d->type == ap::kEvKernelCh) ++g_counts[4];
  note_steps(d);
  *h = &g_token;
  return 0;
}
int stop(void*) {
  ++g_counts[6];
  return 0;
}
int record(void*, int, ap::StateArgs*) {
  ++g_counts[5];
  return 0;
}
int finalize(void*) { return 0; }

}  // namespace

extern "C" {
#if FRSIM_PROF_VERSION == 5 || FRSIM_PROF_VERSION == 567
__attribute__((visibility("default")))
ap::PluginV5 ncclProfiler_v5 = {"test", init<5>, start<ap::DescrV5>, stop, record, finalize};
#endif
#if FRSIM_PROF_VERSION == 567
__attribute__((visibility("default")))
ap::PluginV6 ncclProfiler_v6 = {"test", init<6>, start<ap::DescrV6>, stop, record, finalize};
__attribute__((visibility("default")))
ap::PluginV7 ncclProfiler_v7 = {"test", init<7>, start<ap::DescrV7>, stop, record, finalize};
#endif
#if FRSIM_PROF_VERSION == 9
__attribute__((visibility("default")))
ap::PluginV5 ncclProfiler_v9 = {"test", init<9>, start<ap::DescrV5>, stop, record, finalize};
#endif
__attribute__((visibility("default"))) void frsim_test_prof_counts(int* out) {
  memcpy(out, g_counts, sizeof g_counts);
}
__attribute__((visibility("default"))) void frsim_test_prof_steps(int* out) {
  memcpy(out, g_steps, sizeof g_steps);
}
}
