// A tiny stand-in for libcuda.so.1: just the driver calls the agent makes for GPU progress.
// Stream writes land in host memory at once (the "device pointer" is the host address), events
// complete at once, stream 0xCA97 is "being captured", and the capture state of stream 0xBAD
// cannot be queried (as for the legacy stream during a global-mode capture). Anything enqueued
// into either stream is counted as a violation, which the probe reports.
//
// cuMemHostRegister, cuEventCreate and cuEventQuery count as "unsafe" calls (they would break a
// global-mode capture running in another thread) unless the calling thread is in relaxed capture
// mode; the probe reports how many were made in global mode.
//
// FAKE_CUDA_NO_WRITE=1 makes cuStreamWriteValue64 fail (CUDA_ERROR_NOT_SUPPORTED), so the agent
// falls back to events; FAKE_CUDA_NO_WRITE_STREAM=<stream> makes it fail on that stream only
// (CUDA_ERROR_INVALID_HANDLE, as for a stream of another context).
#include <cuda.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace {
constexpr uint64_t kCapturing = 0xCA97;
constexpr uint64_t kUnknown = 0xBAD;

bool forbidden(CUstream s) {
  uint64_t v = (uint64_t)(uintptr_t)s;
  return v == kCapturing || v == kUnknown;
}
int g_violations;   // atomic
int g_writes;       // atomic
int g_events_live;  // atomic
int g_ctx_token;
int event_pool[4096];  // events are addresses in this pool
int g_next_event;      // atomic
int g_unsafe_global;   // atomic: "unsafe" calls made in global capture mode
// Each thread's capture mode, by thread id (no thread_local: this library is dlopen'ed, and
// dynamic TLS trips LeakSanitizer's thread scan on some toolchains). 0 means the default, global.
int g_mode_by_tid[4096];

int& thread_mode() { return g_mode_by_tid[(unsigned)syscall(SYS_gettid) % 4096]; }

// Calls that would break another thread's global-mode capture unless made in relaxed mode.
void unsafe_call() {
  if (__atomic_load_n(&thread_mode(), __ATOMIC_RELAXED) != 1 + CU_STREAM_CAPTURE_MODE_RELAXED)
    __atomic_fetch_add(&g_unsafe_global, 1, __ATOMIC_RELAXED);
}

bool no_write() {
  const char* v = getenv("FAKE_CUDA_NO_WRITE");
  return v != nullptr && strcmp(v, "1") == 0;
}
}  // namespace

#define API extern "C" __attribute__((visibility("default")))

API int fr_fake_cuda_violations() { return __atomic_load_n(&g_violations, __ATOMIC_RELAXED); }
API int fr_fake_cuda_writes() { return __atomic_load_n(&g_writes, __ATOMIC_RELAXED); }
API int fr_fake_cuda_unsafe_global() { return __atomic_load_n(&g_unsafe_global, __ATOMIC_RELAXED); }
API int fr_fake_cuda_events_live() { return __atomic_load_n(&g_events_live, __ATOMIC_RELAXED); }

API CUresult cuCtxGetCurrent(CUcontext* ctx) {
  *ctx = (CUcontext)&g_ctx_token;
  return CUDA_SUCCESS;
}

API CUresult cuCtxGetDevice(CUdevice* dev) {
  *dev = 0;
  return CUDA_SUCCESS;
}

// FAKE_CUDA_NO_MEMOPS=1: the device says it cannot do 64-bit stream memory operations.
API CUresult cuDeviceGetAttribute(int* value, CUdevice_attribute attr, CUdevice) {
  const char* v = getenv("FAKE_CUDA_NO_MEMOPS");
  if (attr != CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS) return CUDA_ERROR_INVALID_VALUE;
  *value = v != nullptr && strcmp(v, "1") == 0 ? 0 : 1;
  return CUDA_SUCCESS;
}

API CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode* mode) {
  int old = __atomic_exchange_n(&thread_mode(), 1 + (int)*mode, __ATOMIC_RELAXED);
  *mode = old == 0 ? CU_STREAM_CAPTURE_MODE_GLOBAL : (CUstreamCaptureMode)(old - 1);
  return CUDA_SUCCESS;
}

API CUresult cuMemHostRegister_v2(void*, size_t, unsigned int) {
  unsafe_call();
  return CUDA_SUCCESS;
}

API CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr* dptr, void* p, unsigned int) {
  *dptr = (CUdeviceptr)(uintptr_t)p;
  return CUDA_SUCCESS;
}

API CUresult cuStreamWriteValue64_v2(CUstream stream, CUdeviceptr addr, cuuint64_t value,
                                     unsigned int) {
  if (no_write()) return CUDA_ERROR_NOT_SUPPORTED;
  const char* bad = getenv("FAKE_CUDA_NO_WRITE_STREAM");
  if (bad != nullptr && *bad != '\0' && strtoull(bad, nullptr, 0) == (uint64_t)(uintptr_t)stream)
    return CUDA_ERROR_INVALID_HANDLE;
  if (forbidden(stream)) __atomic_fetch_add(&g_violations, 1, __ATOMIC_RELAXED);
  __atomic_store_n((uint64_t*)(uintptr_t)addr, value, __ATOMIC_RELEASE);
  __atomic_fetch_add(&g_writes, 1, __ATOMIC_RELAXED);
  return CUDA_SUCCESS;
}

API CUresult cuStreamIsCapturing(CUstream stream, CUstreamCaptureStatus* status) {
  if ((uint64_t)(uintptr_t)stream == kUnknown) return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
  *status = (uint64_t)(uintptr_t)stream == kCapturing ? CU_STREAM_CAPTURE_STATUS_ACTIVE
                                                      : CU_STREAM_CAPTURE_STATUS_NONE;
  return CUDA_SUCCESS;
}

API CUresult cuEventCreate(CUevent* ev, unsigned int) {
  unsafe_call();
  int i = __atomic_fetch_add(&g_next_event, 1, __ATOMIC_RELAXED) % 4096;
  *ev = (CUevent)&event_pool[i];
  __atomic_fetch_add(&g_events_live, 1, __ATOMIC_RELAXED);
  return CUDA_SUCCESS;
}

API CUresult cuEventRecord(CUevent, CUstream stream) {
  if (forbidden(stream)) __atomic_fetch_add(&g_violations, 1, __ATOMIC_RELAXED);
  return CUDA_SUCCESS;
}

API CUresult cuEventQuery(CUevent) {
  unsafe_call();
  return CUDA_SUCCESS;
}

API CUresult cuEventDestroy_v2(CUevent) {
  __atomic_fetch_sub(&g_events_live, 1, __ATOMIC_RELAXED);
  return CUDA_SUCCESS;
}
