// Memory of the CUDA driver emulation: "device memory" is host memory. Registered and
// host-allocated ranges and cuMemAlloc allocations are tracked so that stream memory operations
// and cuMemHostGetDevicePointer accept only addresses a GPU could reach; copies and sets are
// memmove and memset, synchronous ones ordered after the default stream, asynchronous ones queued.
#include <stdlib.h>
#include <string.h>

#include "driver.h"

using namespace frsim;

bool frsim::addr_is_host_mapped(uintptr_t p, size_t len) {
  State& s = ready();
  std::lock_guard<std::mutex> g(s.mu);
  for (auto* m : {&s.host_ranges, &s.dev_allocs}) {
    auto it = m->upper_bound(p);
    if (it == m->begin()) continue;
    --it;
    if (p >= it->first && p + len <= it->first + it->second) return true;
  }
  return false;
}

// ---- memory ----------------------------------------------------------------------------------------

static bool overlaps(const std::map<uintptr_t, size_t>& m, uintptr_t p, size_t n) {
  auto it = m.lower_bound(p + n);
  if (it == m.begin()) return false;
  --it;
  return it->first + it->second > p;
}

FRSIM_API CUresult cuMemHostRegister_v2(void* p, size_t bytes, unsigned int flags) {
  constexpr unsigned kFlags = CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP |
                              CU_MEMHOSTREGISTER_IOMEMORY | CU_MEMHOSTREGISTER_READ_ONLY;
  if (cu_fail(CuFail::kRegisterNoContext)) return CUDA_ERROR_INVALID_CONTEXT;
  if (cu_fail(CuFail::kRegisterUnsupported)) return CUDA_ERROR_NOT_SUPPORTED;
  if (p == nullptr || bytes == 0 || (flags & ~kFlags) != 0) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = capture_unsafe_call(); r != CUDA_SUCCESS) return r;
  State& s = ready();
  std::lock_guard<std::mutex> g(s.mu);
  auto a = reinterpret_cast<uintptr_t>(p);
  if (overlaps(s.host_ranges, a, bytes)) return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
  s.host_ranges[a] = bytes;
  return CUDA_SUCCESS;
}

FRSIM_API CUresult cuMemHostUnregister(void* p) {
  if (CUresult r = capture_unsafe_call(); r != CUDA_SUCCESS) return r;
  State& s = ready();
  std::lock_guard<std::mutex> g(s.mu);
  auto it = s.host_ranges.find(reinterpret_cast<uintptr_t>(p));
  if (it == s.host_ranges.end()) return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
  s.host_ranges.erase(it);
  return CUDA_SUCCESS;
}

FRSIM_API CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr* dptr, void* p, unsigned int flags) {
  if (dptr == nullptr || p == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (!addr_is_host_mapped(reinterpret_cast<uintptr_t>(p), 1)) return CUDA_ERROR_INVALID_VALUE;
  *dptr = reinterpret_cast<uintptr_t>(p);
  return CUDA_SUCCESS;
}

FRSIM_API CUresult cuMemHostGetFlags(unsigned int* flags, void* p) {
  if (flags == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!addr_is_host_mapped(reinterpret_cast<uintptr_t>(p), 1)) return CUDA_ERROR_INVALID_VALUE;
  *flags = CU_MEMHOSTALLOC_DEVICEMAP;
  return CUDA_SUCCESS;
}

FRSIM_API CUresult cuMemHostAlloc(void** pp, size_t bytes, unsigned int flags) {
  (void)flags;
  if (pp == nullptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = capture_unsafe_call(); r != CUDA_SUCCESS) return r;
  void* p = nullptr;
  if (posix_memalign(&p, 4096, bytes) != 0) return CUDA_ERROR_OUT_OF_MEMORY;
  State& s = ready();
  std::lock_guard<std::mutex> g(s.mu);
  s.host_ranges[reinterpret_cast<uintptr_t>(p)] = bytes;
  *pp = p;
  return CUDA_SUCCESS;
}

FRSIM_API CUresult cuMemAllocHost_v2(void** pp, size_t bytes) {
  return cuMemHostAlloc(pp, bytes, 0);
}

FRSIM_API CUresult cuMemFreeHost(void* p) {
  if (CUresult r = capture_unsafe_call(); r != CUDA_SUCCESS) return r;
  State& s = ready();
  {
    std::lock_guard<std::mutex> g(s.mu);
    auto it = s.host_ranges.find(reinterpret_cast<uintptr_t>(p));
    if (it == s.host_ranges.end()) return CUDA_ERROR_INVALID_VALUE;
    s.host_ranges.erase(it);
  }
  free(p);
  return CUDA_SUCCESS;
}

FRSIM_API CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytes) {
  if (dptr == nullptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = capture_unsafe_call(); r != CUDA_SUCCESS) return r;
  void* p = nullptr;
  if (posix_memalign(&p, 256, bytes) != 0) return CUDA_ERROR_OUT_OF_MEMORY;
  State& s = ready();
  std::lock_guard<std::mutex> g(s.mu);
  s.dev_allocs[reinterpret_cast<uintptr_t>(p)] = bytes;
  s.dev_alloc_device[reinterpret_cast<uintptr_t>(p)] = current_device();
  *dptr = reinterpret_cast<uintptr_t>(p);
  return CUDA_SUCCESS;
}

FRSIM_API CUresult cuMemFree_v2(CUdeviceptr dptr) {
  if (dptr == 0) return CUDA_SUCCESS;
  if (CUresult r = capture_unsafe_call(); r != CUDA_SUCCESS) return r;
  State& s = ready();
  {
    std::lock_guard<std::mutex> g(s.mu);
    auto it = s.dev_allocs.find(static_cast<uintptr_t>(dptr));
    if (it == s.dev_allocs.end()) return CUDA_ERROR_INVALID_VALUE;
    s.dev_allocs.erase(it);
    s.dev_alloc_device.erase(static_cast<uintptr_t>(dptr));
  }
  free(reinterpret_cast<void*>(static_cast<uintptr_t>(dptr)));
  return CUDA_SUCCESS;
}

// What the driver knows of a pointer: into a cuMemAlloc allocation (device memory, of the device
// current when it was allocated) or a registered or host-allocated range (host memory, of the
// current device, as the driver answers for portable host memory). Any other address is CUDA_ERROR_INVALID_VALUE, as for memory
// the driver does not know; so is an attribute the emulation does not keep.
FRSIM_API CUresult cuPointerGetAttribute(void* data, CUpointer_attribute attr, CUdeviceptr ptr) {
  if (data == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const uintptr_t p = static_cast<uintptr_t>(ptr);
  State& s = ready();
  std::lock_guard<std::mutex> g(s.mu);
  auto range_of = [p](const std::map<uintptr_t, size_t>& m) -> std::pair<uintptr_t, size_t> {
    auto it = m.upper_bound(p);
    if (it == m.begin()) return {0, 0};
    --it;
    return p < it->first + it->second ? std::pair<uintptr_t, size_t>(*it)
                                      : std::pair<uintptr_t, size_t>{0, 0};
  };
  auto range = range_of(s.dev_allocs);
  const bool device = range.second != 0;
  if (!device) range = range_of(s.host_ranges);
  if (range.second == 0) return CUDA_ERROR_INVALID_VALUE;
  switch (attr) {
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
      *static_cast<unsigned*>(data) = device ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
      *static_cast<CUdeviceptr*>(data) = ptr;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
      if (device) return CUDA_ERROR_INVALID_VALUE;
      *static_cast<void**>(data) = reinterpret_cast<void*>(p);
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
      *static_cast<int*>(data) = device ? s.dev_alloc_device[range.first] : current_device();
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
      *static_cast<CUdeviceptr*>(data) = range.first;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
      *static_cast<size_t*>(data) = range.second;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MAPPED: *static_cast<unsigned*>(data) = 1; return CUDA_SUCCESS;
    default: return CUDA_ERROR_INVALID_VALUE;
  }
}

FRSIM_API CUresult cuMemGetInfo_v2(size_t* free_bytes, size_t* total) {
  if (free_bytes == nullptr || total == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *total = size_t{80} << 30;
  *free_bytes = *total;
  return CUDA_SUCCESS;
}

// Synchronous copies: ordered after the default stream's work, as the legacy stream orders them.
static CUresult sync_copy(void* dst, const void* src, size_t n) {
  if (n == 0) return CUDA_SUCCESS;
  if (dst == nullptr || src == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = capture_unsafe_call(); r != CUDA_SUCCESS) return r;
  wait_stream(get_stream(nullptr));
  memmove(dst, src, n);
  return CUDA_SUCCESS;
}

static CUresult async_copy(void* dst, const void* src, size_t n, CUstream h) {
  auto st = get_stream(h);
  if (!st) return CUDA_ERROR_INVALID_HANDLE;
  if (n == 0) return CUDA_SUCCESS;
  if (dst == nullptr || src == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return enqueue(st, [dst, src, n] { memmove(dst, src, n); });
}

#define FRSIM_PTR(d) reinterpret_cast<void*>(static_cast<uintptr_t>(d))

FRSIM_API CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  return sync_copy(FRSIM_PTR(dst), FRSIM_PTR(src), n);
}
FRSIM_API CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, size_t n) {
  return sync_copy(FRSIM_PTR(dst), src, n);
}
FRSIM_API CUresult cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, size_t n) {
  return sync_copy(dst, FRSIM_PTR(src), n);
}
FRSIM_API CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  return sync_copy(FRSIM_PTR(dst), FRSIM_PTR(src), n);
}
FRSIM_API CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream h) {
  return async_copy(FRSIM_PTR(dst), FRSIM_PTR(src), n, h);
}
FRSIM_API CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t n, CUstream h) {
  return async_copy(FRSIM_PTR(dst), src, n, h);
}
FRSIM_API CUresult cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, size_t n, CUstream h) {
  return async_copy(dst, FRSIM_PTR(src), n, h);
}
FRSIM_API CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream h) {
  return async_copy(FRSIM_PTR(dst), FRSIM_PTR(src), n, h);
}

FRSIM_API CUresult cuMemsetD8_v2(CUdeviceptr dst, unsigned char v, size_t n) {
  if (CUresult r = capture_unsafe_call(); r != CUDA_SUCCESS) return r;
  if (dst == 0 && n != 0) return CUDA_ERROR_INVALID_VALUE;
  wait_stream(get_stream(nullptr));
  memset(FRSIM_PTR(dst), v, n);
  return CUDA_SUCCESS;
}

FRSIM_API CUresult cuMemsetD32_v2(CUdeviceptr dst, unsigned int v, size_t n) {
  if (CUresult r = capture_unsafe_call(); r != CUDA_SUCCESS) return r;
  if ((dst == 0 && n != 0) || dst % 4 != 0) return CUDA_ERROR_INVALID_VALUE;
  wait_stream(get_stream(nullptr));
  auto* p = static_cast<uint32_t*>(FRSIM_PTR(dst));
  for (size_t i = 0; i < n; ++i) p[i] = v;
  return CUDA_SUCCESS;
}

FRSIM_API CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char v, size_t n, CUstream h) {
  auto st = get_stream(h);
  if (!st) return CUDA_ERROR_INVALID_HANDLE;
  if (dst == 0 && n != 0) return CUDA_ERROR_INVALID_VALUE;
  void* p = FRSIM_PTR(dst);
  return enqueue(st, [p, v, n] { memset(p, v, n); });
}
