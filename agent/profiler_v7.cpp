// The profiler plugin interface version 7: the exported table ncclProfiler_v7, translating the
// version's descriptors (136 bytes) into the core's events (profiler_adapter.h).
// NCCL 2.32 looks this one up first. Kernel-phase events (v7 on) are never activated.
#include "profiler_adapter.h"

// Constant-initialized (constinit): ready before NCCL can look it up.
extern "C"
    __attribute__((visibility("default"))) constinit const fr::nccl_prof::PluginV7 ncclProfiler_v7 =
        fr::agent::prof::plugin_table<7, fr::nccl_prof::DescrV7>();
