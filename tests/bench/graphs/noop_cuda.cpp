// A no-op libcuda.so.1 for the graph-launch benchmark: a stream that reports itself capturing
// while the benchmark captures, stream writes that succeed at once, and a graph launch that
// returns at once, so what is measured is the agent's own path around cuGraphLaunch.
#include <cuda.h>

#define API extern "C" __attribute__((visibility("default")))

namespace {
int g_ctx;
int g_graph;
int g_exec;
bool g_capturing;
}  // namespace

API void noop_cuda_set_capturing(bool on) { g_capturing = on; }
API CUgraph noop_cuda_graph() { return (CUgraph)&g_graph; }

API CUresult cuCtxGetCurrent(CUcontext* c) {
  *c = (CUcontext)&g_ctx;
  return CUDA_SUCCESS;
}
API CUresult cuMemHostRegister_v2(void*, size_t, unsigned int) { return CUDA_SUCCESS; }
API CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr* d, void* p, unsigned int) {
  *d = (CUdeviceptr)p;
  return CUDA_SUCCESS;
}
API CUresult cuStreamWriteValue64_v2(CUstream, CUdeviceptr, cuuint64_t, unsigned int) {
  return CUDA_SUCCESS;
}
API CUresult cuStreamIsCapturing(CUstream, CUstreamCaptureStatus* s) {
  *s = g_capturing ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
  return CUDA_SUCCESS;
}
API CUresult cuStreamGetCaptureInfo_v3(CUstream, CUstreamCaptureStatus* s, cuuint64_t* id,
                                       CUgraph* g, const CUgraphNode** deps,
                                       const CUgraphEdgeData** edges, size_t* n) {
  *s = g_capturing ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
  if (id) *id = 1;
  if (g) *g = (CUgraph)&g_graph;
  if (deps) *deps = nullptr;
  if (edges) *edges = nullptr;
  if (n) *n = 0;
  return CUDA_SUCCESS;
}
API CUresult cuGraphInstantiateWithFlags(CUgraphExec* e, CUgraph, unsigned long long) {
  *e = (CUgraphExec)&g_exec;
  return CUDA_SUCCESS;
}
API CUresult cuGraphLaunch(CUgraphExec, CUstream) { return CUDA_SUCCESS; }
// The graph replay kernel (agent/replay_kernel.h): loads and captures at once, as a driver with
// module support does, so the benchmark measures the launch path the agent takes on a GPU.
API CUresult cuModuleLoadData(CUmodule* m, const void*) {
  *m = (CUmodule)&g_ctx;
  return CUDA_SUCCESS;
}
API CUresult cuModuleGetFunction(CUfunction* f, CUmodule, const char*) {
  *f = (CUfunction)&g_ctx;
  return CUDA_SUCCESS;
}
API CUresult cuLaunchKernel(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                            unsigned, CUstream, void**, void**) {
  return CUDA_SUCCESS;
}
