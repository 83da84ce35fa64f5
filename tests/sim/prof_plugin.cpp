// A profiler plugin for the emulation's tests: it exports one versioned table (FRSIM_PROF_VERSION
// 5, or 9: a version no NCCL knows) and counts what it is given, which the ranks read through
// frsim_test_prof_counts. Built as libfrsim_prof_v5.so and libfrsim_prof_v9.so.
#include <string.h>

#include "profiler_abi.h"

namespace ap = fr::agent::prof;

namespace {

int g_counts
    [8];  // 0 inits, 1 coll, 2 proxy ops, 3 proxy steps, 4 kernel channels, 5 states, 6 stops
int g_token;

int init(void** ctx, uint64_t, int* mask, const char*, int, int, int, ap::Logger) {
  ++g_counts[0];
  *ctx = &g_token;
  *mask = int(ap::kEvColl | ap::kEvProxyOp | ap::kEvProxyStep | ap::kEvKernelCh);
  return 0;
}
int start(void*, void** h, ap::DescrV5* d) {
  if (d->type == ap::kEvColl) ++g_counts[1];
  if (d->type == ap::kEvProxyOp) ++g_counts[2];
  if (d->type == ap::kEvProxyStep) ++g_counts[3];
  if (d->type == ap::kEvKernelCh) ++g_counts[4];
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
#if FRSIM_PROF_VERSION == 5
__attribute__((visibility("default")))
ap::PluginV5 ncclProfiler_v5 = {"test", init, start, stop, record, finalize};
#else
__attribute__((visibility("default")))
ap::PluginV5 ncclProfiler_v9 = {"test", init, start, stop, record, finalize};
#endif
__attribute__((visibility("default"))) void frsim_test_prof_counts(int* out) {
  memcpy(out, g_counts, sizeof g_counts);
}
}
