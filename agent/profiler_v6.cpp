// The profiler plugin interface version 6: the exported table ncclProfiler_v6, translating the
// version's descriptors into the core's events (profiler_adapter.h).
// NCCL 2.29 to 2.31 look this one up first. Copy-engine events (v6 on) are never activated.
#include "profiler_adapter.h"

// Constant-initialized (constinit): ready before NCCL can look it up.
extern "C"
    __attribute__((visibility("default"))) constinit const fr::nccl_prof::PluginV6 ncclProfiler_v6 =
        fr::agent::prof::plugin_table<6, fr::nccl_prof::DescrV6>();
