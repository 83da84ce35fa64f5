// The names of the CUDA driver emulation: error names and strings for the codes it returns,
// cuGetProcAddress (resolving a name to this library's own symbol, with the version suffix that
// matches the requested CUDA version), and the forwarders that export each entry point under its
// plain and per-thread names as well as the name cuda.h maps it to.
#include <dlfcn.h>

#include <string>

#include "driver.h"

using namespace frsim;

namespace {

struct ErrorName {
  CUresult code;
  const char* name;
  const char* text;
};

const ErrorName kErrors[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {CUDA_ERROR_DEINITIALIZED, "CUDA_ERROR_DEINITIALIZED", "driver shutting down"},
    {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {CUDA_ERROR_INVALID_IMAGE, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
    {CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready"},
    {CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED",
     "part or all of the requested memory range is already mapped"},
    {CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED",
     "pointer does not correspond to a registered memory region"},
    {CUDA_ERROR_CONTEXT_ALREADY_IN_USE, "CUDA_ERROR_CONTEXT_ALREADY_IN_USE",
     "context already in use"},
    {CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED",
     "operation not permitted when stream is capturing"},
    {CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED",
     "operation failed due to a previous error during capture"},
    {CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD, "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD",
     "attempted to end capture from the wrong thread"},
    {CUDA_ERROR_ILLEGAL_STATE, "CUDA_ERROR_ILLEGAL_STATE",
     "the operation cannot be performed in the present state"},
    {CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

}  // namespace

// ---- errors ----------------------------------------------------------------------------------------

FRSIM_API CUresult cuGetErrorString(CUresult error, const char** str) {
  if (str == nullptr) return CUDA_ERROR_INVALID_VALUE;
  for (const auto& e : kErrors)
    if (e.code == error) {
      *str = e.text;
      return CUDA_SUCCESS;
    }
  *str = nullptr;
  return CUDA_ERROR_INVALID_VALUE;
}

FRSIM_API CUresult cuGetErrorName(CUresult error, const char** str) {
  if (str == nullptr) return CUDA_ERROR_INVALID_VALUE;
  for (const auto& e : kErrors)
    if (e.code == error) {
      *str = e.name;
      return CUDA_SUCCESS;
    }
  *str = nullptr;
  return CUDA_ERROR_INVALID_VALUE;
}

// ---- cuGetProcAddress ----------------------------------------------------------------------------

// The versioned names of entry points whose signature changed: a caller that asks for an older
// CUDA version than the one that introduced the suffix gets the plain (old-signature) name.
struct Versioned {
  const char* name;
  const char* suffix;
  int since;
};
static const Versioned kVersioned[] = {
    {"cuCtxCreate", "_v4", 12050},          {"cuStreamGetCaptureInfo", "_v3", 12030},
    {"cuStreamBeginCapture", "_v2", 10010}, {"cuGetProcAddress", "_v2", 12000},
    {"cuEventElapsedTime", "_v2", 12080},   {"cuStreamWriteValue64", "_v2", 11070},
    {"cuStreamWriteValue32", "_v2", 11070}, {"cuStreamWaitValue64", "_v2", 11070},
    {"cuStreamWaitValue32", "_v2", 11070},  {"cuDeviceGetUuid", "_v2", 11040},
};

static void* self_handle() {
  static void* h = [] {
    Dl_info info{};
    if (dladdr(reinterpret_cast<void*>(&cuInit), &info) == 0 || info.dli_fname == nullptr)
      return static_cast<void*>(nullptr);
    return dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD);
  }();
  return h;
}

FRSIM_API CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version,
                                       cuuint64_t flags, CUdriverProcAddressQueryResult* status) {
  if (symbol == nullptr || pfn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *pfn = nullptr;
  void* h = self_handle();
  if (h == nullptr) return CUDA_ERROR_NOT_FOUND;
  std::string base(symbol);
  std::vector<std::string> candidates;
  bool known = false;
  for (const auto& v : kVersioned)
    if (base == v.name) {
      known = true;
      if (version >= v.since) candidates.push_back(base + v.suffix);
      candidates.push_back(base);
    }
  if (!known) {
    for (const char* suffix : {"_v4", "_v3", "_v2", ""}) candidates.push_back(base + suffix);
  }
  if (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) {
    std::vector<std::string> ptsz;
    for (auto& c : candidates) {
      ptsz.push_back(c + "_ptsz");
      ptsz.push_back(c + "_ptds");
    }
    candidates.insert(candidates.begin(), ptsz.begin(), ptsz.end());
  }
  for (auto& c : candidates) {
    if (void* f = dlsym(h, c.c_str())) {
      *pfn = f;
      if (status) *status = CU_GET_PROC_ADDRESS_SUCCESS;
      return CUDA_SUCCESS;
    }
  }
  if (status) *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  return CUDA_ERROR_NOT_FOUND;
}

// ---- plain and per-thread names ------------------------------------------------------------------
// cuda.h renames most entry points (cuStreamWriteValue64 -> cuStreamWriteValue64_v2, and to
// *_ptsz with per-thread default streams). Programs that resolve by the plain name with dlsym, or
// were built that way, find these forwarders. In a *_ptsz entry point the NULL stream is the
// calling thread's per-thread default stream, as cuda.h's per-thread mode makes it (PT below).

#define PT(s) ((s) == nullptr ? CU_STREAM_PER_THREAD : (s))

#define FRSIM_FORWARD(sym, target, params, args)                                                   \
  extern "C" __attribute__((visibility("default"))) CUresult frsim_fwd_##sym params __asm__(#sym); \
  CUresult frsim_fwd_##sym params { return target args; }

FRSIM_FORWARD(cuStreamWriteValue64, cuStreamWriteValue64_v2,
              (CUstream s, CUdeviceptr a, cuuint64_t v, unsigned f), (s, a, v, f))
FRSIM_FORWARD(cuStreamWriteValue32, cuStreamWriteValue32_v2,
              (CUstream s, CUdeviceptr a, cuuint32_t v, unsigned f), (s, a, v, f))
FRSIM_FORWARD(cuStreamWaitValue64, cuStreamWaitValue64_v2,
              (CUstream s, CUdeviceptr a, cuuint64_t v, unsigned f), (s, a, v, f))
FRSIM_FORWARD(cuStreamWaitValue32, cuStreamWaitValue32_v2,
              (CUstream s, CUdeviceptr a, cuuint32_t v, unsigned f), (s, a, v, f))
FRSIM_FORWARD(cuStreamWriteValue64_v2_ptsz, cuStreamWriteValue64_v2,
              (CUstream s, CUdeviceptr a, cuuint64_t v, unsigned f), (PT(s), a, v, f))
FRSIM_FORWARD(cuStreamWriteValue32_v2_ptsz, cuStreamWriteValue32_v2,
              (CUstream s, CUdeviceptr a, cuuint32_t v, unsigned f), (PT(s), a, v, f))
FRSIM_FORWARD(cuStreamWaitValue64_v2_ptsz, cuStreamWaitValue64_v2,
              (CUstream s, CUdeviceptr a, cuuint64_t v, unsigned f), (PT(s), a, v, f))
FRSIM_FORWARD(cuStreamWaitValue32_v2_ptsz, cuStreamWaitValue32_v2,
              (CUstream s, CUdeviceptr a, cuuint32_t v, unsigned f), (PT(s), a, v, f))
FRSIM_FORWARD(cuMemHostGetDevicePointer, cuMemHostGetDevicePointer_v2,
              (CUdeviceptr * d, void* p, unsigned f), (d, p, f))
FRSIM_FORWARD(cuMemHostRegister, cuMemHostRegister_v2, (void* p, size_t n, unsigned f), (p, n, f))
FRSIM_FORWARD(cuCtxDestroy, cuCtxDestroy_v2, (CUcontext c), (c))
FRSIM_FORWARD(cuCtxPushCurrent, cuCtxPushCurrent_v2, (CUcontext c), (c))
FRSIM_FORWARD(cuCtxPopCurrent, cuCtxPopCurrent_v2, (CUcontext * c), (c))
FRSIM_FORWARD(cuDevicePrimaryCtxRelease, cuDevicePrimaryCtxRelease_v2, (CUdevice d), (d))
FRSIM_FORWARD(cuStreamDestroy, cuStreamDestroy_v2, (CUstream s), (s))
FRSIM_FORWARD(cuEventDestroy, cuEventDestroy_v2, (CUevent e), (e))
FRSIM_FORWARD(cuEventElapsedTime, cuEventElapsedTime_v2, (float* ms, CUevent a, CUevent b),
              (ms, a, b))
FRSIM_FORWARD(cuDeviceGetUuid, cuDeviceGetUuid_v2, (CUuuid * u, CUdevice d), (u, d))
FRSIM_FORWARD(cuStreamQuery_ptsz, cuStreamQuery, (CUstream s), (PT(s)))
FRSIM_FORWARD(cuStreamSynchronize_ptsz, cuStreamSynchronize, (CUstream s), (PT(s)))
FRSIM_FORWARD(cuStreamWaitEvent_ptsz, cuStreamWaitEvent, (CUstream s, CUevent e, unsigned f),
              (PT(s), e, f))
FRSIM_FORWARD(cuStreamIsCapturing_ptsz, cuStreamIsCapturing, (CUstream s, CUstreamCaptureStatus* c),
              (PT(s), c))
FRSIM_FORWARD(cuStreamEndCapture_ptsz, cuStreamEndCapture, (CUstream s, CUgraph* g), (PT(s), g))
FRSIM_FORWARD(cuStreamBeginCapture_v2_ptsz, cuStreamBeginCapture_v2,
              (CUstream s, CUstreamCaptureMode m), (PT(s), m))
FRSIM_FORWARD(cuEventRecord_ptsz, cuEventRecord, (CUevent e, CUstream s), (e, PT(s)))
FRSIM_FORWARD(cuLaunchHostFunc_ptsz, cuLaunchHostFunc, (CUstream s, CUhostFn f, void* u),
              (PT(s), f, u))
FRSIM_FORWARD(cuGraphLaunch_ptsz, cuGraphLaunch, (CUgraphExec g, CUstream s), (g, PT(s)))
FRSIM_FORWARD(cuLaunchKernel_ptsz, cuLaunchKernel,
              (CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
               unsigned bz, unsigned sh, CUstream s, void** p, void** x),
              (f, gx, gy, gz, bx, by, bz, sh, PT(s), p, x))
FRSIM_FORWARD(cuGraphInstantiate, cuGraphInstantiateWithFlags,
              (CUgraphExec * e, CUgraph g, unsigned long long f), (e, g, f))
FRSIM_FORWARD(cuStreamGetCaptureInfo_v3_ptsz, cuStreamGetCaptureInfo_v3,
              (CUstream s, CUstreamCaptureStatus* c, cuuint64_t* i, CUgraph* g,
               const CUgraphNode** d, const CUgraphEdgeData** e, size_t* n),
              (PT(s), c, i, g, d, e, n))

// Entry points whose plain name has an older signature.
FRSIM_FORWARD(cuCtxCreate, create_ctx, (CUcontext * c, unsigned f, CUdevice d), (c, f, d))
FRSIM_FORWARD(cuCtxCreate_v2, create_ctx, (CUcontext * c, unsigned f, CUdevice d), (c, f, d))
FRSIM_FORWARD(cuStreamBeginCapture, cuStreamBeginCapture_v2, (CUstream s),
              (s, CU_STREAM_CAPTURE_MODE_GLOBAL))
FRSIM_FORWARD(cuStreamGetCaptureInfo, cuStreamGetCaptureInfo_v3,
              (CUstream s, CUstreamCaptureStatus* c, cuuint64_t* i),
              (s, c, i, nullptr, nullptr, nullptr, nullptr))
FRSIM_FORWARD(cuStreamGetCaptureInfo_v2, cuStreamGetCaptureInfo_v3,
              (CUstream s, CUstreamCaptureStatus* c, cuuint64_t* i, CUgraph* g,
               const CUgraphNode** d, size_t* n),
              (s, c, i, g, d, nullptr, n))
FRSIM_FORWARD(cuGetProcAddress, cuGetProcAddress_v2,
              (const char* sym, void** pfn, int v, cuuint64_t f), (sym, pfn, v, f, nullptr))
