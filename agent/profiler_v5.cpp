// The profiler plugin interface version 5: the exported table ncclProfiler_v5, translating the
// version's descriptors into the core's events (profiler_adapter.h).
// NCCL 2.28 looks this one up first (it knows no newer one); 2.29 on take v6 or v7 when there.
#include "profiler_adapter.h"

// Constant-initialized (constinit): ready before NCCL can look it up.
extern "C"
    __attribute__((visibility("default"))) constinit const fr::nccl_prof::PluginV5 ncclProfiler_v5 =
        fr::agent::prof::plugin_table<5, fr::nccl_prof::DescrV5>();
