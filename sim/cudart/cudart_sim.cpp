// libcudart.so.13 of the emulation: the CUDA runtime calls that capture, instantiate and launch
// graphs (and the few stream and error calls a program around them needs), forwarded to the
// emulated driver. Like the real runtime, it reaches the driver through cuGetProcAddress on its
// own dlopen'ed handle of libcuda.so.1, never through the driver's exported names, so a program
// exercises exactly the path torch's runtime takes. Exported under the version node
// libcudart.so.13, as the real library's symbols are.
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <mutex>

#define FRSIM_RT_API extern "C" __attribute__((visibility("default")))

namespace {

constexpr int kRuntimeVersion = 13000;

struct Driver {
  CUresult (*init)(unsigned);
  CUresult (*begin_capture)(CUstream, CUstreamCaptureMode);
  CUresult (*end_capture)(CUstream, CUgraph*);
  CUresult (*is_capturing)(CUstream, CUstreamCaptureStatus*);
  CUresult (*instantiate)(CUgraphExec*, CUgraph, unsigned long long);
  CUresult (*launch)(CUgraphExec, CUstream);
  CUresult (*graph_destroy)(CUgraph);
  CUresult (*exec_destroy)(CUgraphExec);
  CUresult (*stream_sync)(CUstream);
  CUresult (*stream_create)(CUstream*, unsigned);
  CUresult (*stream_destroy)(CUstream);
  CUresult (*driver_version)(int*);
  bool ok;
};

Driver g_drv;
std::once_flag g_once;
thread_local cudaError_t t_last = cudaSuccess;

template <class T>
void fetch(CUresult (*gpa)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*),
           const char* name, T* out, bool* ok) {
  void* p = nullptr;
  CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SUCCESS;
  if (gpa(name, &p, kRuntimeVersion, CU_GET_PROC_ADDRESS_DEFAULT, &st) != CUDA_SUCCESS ||
      p == nullptr)
    *ok = false;
  *out = reinterpret_cast<T>(p);
}

const Driver& driver() {
  std::call_once(g_once, [] {
    void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) return;
    using Gpa = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
    auto gpa = reinterpret_cast<Gpa>(dlsym(h, "cuGetProcAddress_v2"));
    if (gpa == nullptr) return;
    bool ok = true;
    fetch(gpa, "cuInit", &g_drv.init, &ok);
    fetch(gpa, "cuStreamBeginCapture", &g_drv.begin_capture, &ok);
    fetch(gpa, "cuStreamEndCapture", &g_drv.end_capture, &ok);
    fetch(gpa, "cuStreamIsCapturing", &g_drv.is_capturing, &ok);
    fetch(gpa, "cuGraphInstantiate", &g_drv.instantiate, &ok);
    fetch(gpa, "cuGraphLaunch", &g_drv.launch, &ok);
    fetch(gpa, "cuGraphDestroy", &g_drv.graph_destroy, &ok);
    fetch(gpa, "cuGraphExecDestroy", &g_drv.exec_destroy, &ok);
    fetch(gpa, "cuStreamSynchronize", &g_drv.stream_sync, &ok);
    fetch(gpa, "cuStreamCreate", &g_drv.stream_create, &ok);
    fetch(gpa, "cuStreamDestroy", &g_drv.stream_destroy, &ok);
    fetch(gpa, "cuDriverGetVersion", &g_drv.driver_version, &ok);
    g_drv.ok = ok && g_drv.init(0) == CUDA_SUCCESS;
  });
  return g_drv;
}

cudaError_t map(CUresult r) {
  switch (r) {
    case CUDA_SUCCESS: return cudaSuccess;
    case CUDA_ERROR_INVALID_VALUE: return cudaErrorInvalidValue;
    case CUDA_ERROR_INVALID_HANDLE: return cudaErrorInvalidResourceHandle;
    case CUDA_ERROR_NOT_READY: return cudaErrorNotReady;
    case CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED: return cudaErrorStreamCaptureUnsupported;
    case CUDA_ERROR_STREAM_CAPTURE_INVALIDATED: return cudaErrorStreamCaptureInvalidated;
    case CUDA_ERROR_ILLEGAL_STATE: return cudaErrorIllegalState;
    case CUDA_ERROR_NOT_INITIALIZED: return cudaErrorInitializationError;
    default: return cudaErrorUnknown;
  }
}

// Every call: the driver's result, remembered as the thread's last error when it is one.
cudaError_t ret(CUresult r) {
  cudaError_t e = map(r);
  if (e != cudaSuccess) t_last = e;
  return e;
}

#define FRSIM_DRIVER_OR_FAIL() \
  const Driver& d = driver();  \
  if (!d.ok) return t_last = cudaErrorInitializationError

}  // namespace

FRSIM_RT_API cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode mode) {
  FRSIM_DRIVER_OR_FAIL();
  return ret(d.begin_capture(s, static_cast<CUstreamCaptureMode>(mode)));
}

FRSIM_RT_API cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t* graph) {
  FRSIM_DRIVER_OR_FAIL();
  return ret(d.end_capture(s, graph));
}

FRSIM_RT_API cudaError_t cudaStreamIsCapturing(cudaStream_t s, cudaStreamCaptureStatus* status) {
  FRSIM_DRIVER_OR_FAIL();
  if (status == nullptr) return t_last = cudaErrorInvalidValue;
  CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
  CUresult r = d.is_capturing(s, &st);
  *status = static_cast<cudaStreamCaptureStatus>(st);
  return ret(r);
}

FRSIM_RT_API cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph,
                                              unsigned long long flags) {
  FRSIM_DRIVER_OR_FAIL();
  return ret(d.instantiate(exec, graph, flags));
}

FRSIM_RT_API cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t* exec, cudaGraph_t graph,
                                                       unsigned long long flags) {
  FRSIM_DRIVER_OR_FAIL();
  return ret(d.instantiate(exec, graph, flags));
}

// The parameters' upload stream is accepted (the emulation has nothing to upload).
FRSIM_RT_API cudaError_t cudaGraphInstantiateWithParams(cudaGraphExec_t* exec, cudaGraph_t graph,
                                                        cudaGraphInstantiateParams* params) {
  FRSIM_DRIVER_OR_FAIL();
  if (params == nullptr) return t_last = cudaErrorInvalidValue;
  CUresult r = d.instantiate(exec, graph, params->flags);
  params->result_out = r == CUDA_SUCCESS ? cudaGraphInstantiateSuccess : cudaGraphInstantiateError;
  params->errNode_out = nullptr;
  return ret(r);
}

FRSIM_RT_API cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t s) {
  FRSIM_DRIVER_OR_FAIL();
  return ret(d.launch(exec, s));
}

FRSIM_RT_API cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  FRSIM_DRIVER_OR_FAIL();
  return ret(d.exec_destroy(exec));
}

FRSIM_RT_API cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  FRSIM_DRIVER_OR_FAIL();
  return ret(d.graph_destroy(graph));
}

FRSIM_RT_API cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned int flags) {
  FRSIM_DRIVER_OR_FAIL();
  return ret(d.stream_create(s, flags));
}

FRSIM_RT_API cudaError_t cudaStreamDestroy(cudaStream_t s) {
  FRSIM_DRIVER_OR_FAIL();
  return ret(d.stream_destroy(s));
}

FRSIM_RT_API cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  FRSIM_DRIVER_OR_FAIL();
  return ret(d.stream_sync(s));
}

FRSIM_RT_API cudaError_t cudaRuntimeGetVersion(int* v) {
  if (v == nullptr) return t_last = cudaErrorInvalidValue;
  *v = kRuntimeVersion;
  return cudaSuccess;
}

FRSIM_RT_API cudaError_t cudaDriverGetVersion(int* v) {
  FRSIM_DRIVER_OR_FAIL();
  return ret(d.driver_version(v));
}

FRSIM_RT_API cudaError_t cudaGetLastError(void) {
  cudaError_t e = t_last;
  t_last = cudaSuccess;
  return e;
}

FRSIM_RT_API cudaError_t cudaPeekAtLastError(void) { return t_last; }

FRSIM_RT_API const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorStreamCaptureUnsupported:
      return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated:
      return "operation failed due to a previous error during capture";
    case cudaErrorIllegalState: return "the operation cannot be performed in the present state";
    case cudaErrorInitializationError: return "initialization error";
    default: return "unknown error";
  }
}
