// Stream capture and graphs of the CUDA driver emulation. A capturing stream appends its work to
// a graph instead of running it (enqueue() in state.cpp); an instantiated graph replays the
// recorded work in order at each launch, queued on the launch stream. Work made by a `prepare`
// (a captured NCCL call) is made anew on the host at every launch.
#include <sys/syscall.h>

#include "driver.h"

using namespace frsim;

FRSIM_API CUresult cuStreamBeginCapture_v2(CUstream h, CUstreamCaptureMode mode) {
  if (h == nullptr || h == CU_STREAM_LEGACY) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  if (mode != CU_STREAM_CAPTURE_MODE_GLOBAL && mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
      mode != CU_STREAM_CAPTURE_MODE_RELAXED)
    return CUDA_ERROR_INVALID_VALUE;
  auto st = get_stream(h);
  if (!st) return CUDA_ERROR_INVALID_HANDLE;
  State& s = state();
  std::lock_guard<std::mutex> sg(s.mu);  // s.mu before a stream's mu, as everywhere
  std::lock_guard<std::mutex> g(st->mu);
  if (st->capture != CU_STREAM_CAPTURE_STATUS_NONE) return CUDA_ERROR_ILLEGAL_STATE;
  st->capture = CU_STREAM_CAPTURE_STATUS_ACTIVE;
  st->graph = new CUgraph_st();
  st->capture_id = s.next_capture_id++;
  st->capture_mode = mode;
  st->capture_tid = static_cast<pid_t>(syscall(SYS_gettid));
  s.capturing.push_back(st.get());
  return CUDA_SUCCESS;
}

FRSIM_API CUresult cuStreamEndCapture(CUstream h, CUgraph* graph) {
  if (graph == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto st = get_stream(h);
  if (!st) return CUDA_ERROR_INVALID_HANDLE;
  CUgraph g;
  bool invalidated;
  {
    std::lock_guard<std::mutex> lk(st->mu);
    if (st->capture == CU_STREAM_CAPTURE_STATUS_NONE) return CUDA_ERROR_ILLEGAL_STATE;
    invalidated = st->capture == CU_STREAM_CAPTURE_STATUS_INVALIDATED;
    g = st->graph;
    st->graph = nullptr;
    st->capture = CU_STREAM_CAPTURE_STATUS_NONE;
  }
  capture_forget(st.get());
  if (invalidated) {  // as CUDA: the capture ends, and no graph comes of it
    delete g;
    *graph = nullptr;
    return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  }
  State& s = state();
  std::lock_guard<std::mutex> lk(s.mu);
  s.graphs[g] = g;
  *graph = g;
  return CUDA_SUCCESS;
}

FRSIM_API CUresult cuStreamIsCapturing(CUstream h, CUstreamCaptureStatus* status) {
  if (status == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto st = get_stream(h);
  if (!st) return CUDA_ERROR_INVALID_HANDLE;
  std::lock_guard<std::mutex> g(st->mu);
  *status = st->capture;
  return CUDA_SUCCESS;
}

FRSIM_API CUresult cuStreamGetCaptureInfo_v3(CUstream h, CUstreamCaptureStatus* status,
                                             cuuint64_t* id, CUgraph* graph,
                                             const CUgraphNode** deps,
                                             const CUgraphEdgeData** edges, size_t* ndeps) {
  if (status == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto st = get_stream(h);
  if (!st) return CUDA_ERROR_INVALID_HANDLE;
  std::lock_guard<std::mutex> g(st->mu);
  *status = st->capture;
  bool active = st->capture == CU_STREAM_CAPTURE_STATUS_ACTIVE;
  if (id) *id = active ? st->capture_id : 0;
  if (graph) *graph = active ? st->graph : nullptr;
  if (deps) *deps = nullptr;
  if (edges) *edges = nullptr;
  if (ndeps) *ndeps = 0;
  return CUDA_SUCCESS;
}

FRSIM_API CUresult cuGraphInstantiateWithFlags(CUgraphExec* exec, CUgraph graph,
                                               unsigned long long flags) {
  (void)flags;
  if (exec == nullptr) return CUDA_ERROR_INVALID_VALUE;
  State& s = ready();
  std::lock_guard<std::mutex> g(s.mu);
  auto it = s.graphs.find(graph);
  if (it == s.graphs.end()) return CUDA_ERROR_INVALID_HANDLE;
  auto* e = new CUgraphExec_st{it->second->items};
  s.execs[e] = e;
  *exec = e;
  return CUDA_SUCCESS;
}

FRSIM_API CUresult cuGraphLaunch(CUgraphExec exec, CUstream h) {
  auto st = get_stream(h);
  if (!st) return CUDA_ERROR_INVALID_HANDLE;
  std::vector<GraphItem> items;
  {
    State& s = state();
    std::lock_guard<std::mutex> g(s.mu);
    auto it = s.execs.find(exec);
    if (it == s.execs.end()) return CUDA_ERROR_INVALID_HANDLE;
    items = it->second->items;
  }
  for (auto& item : items) {
    CUresult r = item.prepare ? enqueue_prepared(st, item.prepare) : enqueue(st, item.run);
    if (r != CUDA_SUCCESS) return r;
  }
  return CUDA_SUCCESS;
}

FRSIM_API CUresult cuGraphExecDestroy(CUgraphExec exec) {
  State& s = ready();
  std::lock_guard<std::mutex> g(s.mu);
  auto it = s.execs.find(exec);
  if (it == s.execs.end()) return CUDA_ERROR_INVALID_HANDLE;
  delete it->second;
  s.execs.erase(it);
  return CUDA_SUCCESS;
}

FRSIM_API CUresult cuGraphDestroy(CUgraph graph) {
  State& s = ready();
  std::lock_guard<std::mutex> g(s.mu);
  auto it = s.graphs.find(graph);
  if (it == s.graphs.end()) return CUDA_ERROR_INVALID_HANDLE;
  delete it->second;
  s.graphs.erase(it);
  return CUDA_SUCCESS;
}
