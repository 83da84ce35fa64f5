// Devices and contexts of the CUDA driver emulation: cuInit, the driver version, the visible
// devices with their names, UUIDs and attributes (those of an H100-like GPU that supports stream
// memory operations on registered host memory), the primary context per device, created contexts
// and the per-thread context stack.
#include <stdio.h>
#include <string.h>

#include "driver.h"

using namespace frsim;

// ---- initialization, version, devices -------------------------------------------------------

FRSIM_API CUresult cuInit(unsigned int flags) {
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  ready();
  return CUDA_SUCCESS;
}

FRSIM_API CUresult cuDriverGetVersion(int* version) {
  if (version == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *version = CUDA_VERSION;
  return CUDA_SUCCESS;
}

FRSIM_API CUresult cuDeviceGetCount(int* count) {
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *count = static_cast<int>(ready().visible.size());
  return CUDA_SUCCESS;
}

FRSIM_API CUresult cuDeviceGet(CUdevice* device, int ordinal) {
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (ordinal < 0 || ordinal >= static_cast<int>(ready().visible.size()))
    return CUDA_ERROR_INVALID_DEVICE;
  *device = ordinal;
  return CUDA_SUCCESS;
}

FRSIM_API CUresult cuDeviceGetName(char* name, int len, CUdevice dev) {
  if (name == nullptr || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  snprintf(name, static_cast<size_t>(len), "FRSIM Emulated GPU %d", ready().visible[dev]);
  return CUDA_SUCCESS;
}

FRSIM_API CUresult cuDeviceGetUuid_v2(CUuuid* uuid, CUdevice dev) {
  if (uuid == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  memset(uuid->bytes, 0, sizeof uuid->bytes);
  memcpy(uuid->bytes, "FRSIMGPU", 8);
  int phys = ready().visible[dev];
  memcpy(uuid->bytes + 12, &phys, sizeof phys);
  return CUDA_SUCCESS;
}

FRSIM_API CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice dev) {
  if (bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  *bytes = size_t{80} << 30;
  return CUDA_SUCCESS;
}

FRSIM_API CUresult cuDeviceGetAttribute(int* pi, CUdevice_attribute attrib, CUdevice dev) {
  if (pi == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  switch (attrib) {
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *pi = 9; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *pi = 0; break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *pi = 132; break;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: *pi = ready().visible[dev]; break;
    case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID: *pi = 0; break;
    case CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID: *pi = 0; break;
    case CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM: *pi = 1; break;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: *pi = 1; break;
    case CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS:
      *pi = cu_fail(CuFail::kWriteUnsupported) || cu_fail(CuFail::kWrite64Unsupported) ? 0 : 1;
      break;
    case CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR: *pi = 1; break;
    case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY: *pi = 1; break;
    case CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED: *pi = 1; break;
    default: *pi = 0; break;
  }
  return CUDA_SUCCESS;
}

FRSIM_API CUresult cuDeviceCanAccessPeer(int* can, CUdevice dev, CUdevice peer) {
  if (can == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev) || !valid_device(peer)) return CUDA_ERROR_INVALID_DEVICE;
  *can = dev != peer;
  return CUDA_SUCCESS;
}

// ---- contexts ----------------------------------------------------------------------------------

static CUctx_st* live_ctx(CUcontext c) {
  State& s = ready();
  std::lock_guard<std::mutex> g(s.mu);
  auto it = s.contexts.find(c);
  return it == s.contexts.end() ? nullptr : it->second;
}

FRSIM_API CUresult cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  State& s = ready();
  std::lock_guard<std::mutex> g(s.mu);
  ++s.primary_refs[dev];
  *pctx = s.primary[dev];
  return CUDA_SUCCESS;
}

FRSIM_API CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  State& s = ready();
  std::lock_guard<std::mutex> g(s.mu);
  if (s.primary_refs[dev] == 0) return CUDA_ERROR_INVALID_CONTEXT;
  --s.primary_refs[dev];  // the primary context itself lives as long as the process
  return CUDA_SUCCESS;
}

FRSIM_API CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int* flags, int* active) {
  if (flags == nullptr || active == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  State& s = ready();
  std::lock_guard<std::mutex> g(s.mu);
  *flags = s.primary[dev]->flags;
  *active = s.primary_refs[dev] > 0;
  return CUDA_SUCCESS;
}

CUresult frsim::create_ctx(CUcontext* pctx, unsigned flags, CUdevice dev) {
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  auto* c = new CUctx_st{kCtxMagic, dev, false, flags};
  {
    State& s = state();
    std::lock_guard<std::mutex> g(s.mu);
    s.contexts[c] = c;
  }
  tls_ctx_stack.push_back(c);
  *pctx = c;
  return CUDA_SUCCESS;
}

FRSIM_API CUresult cuCtxCreate_v4(CUcontext* pctx, CUctxCreateParams* params, unsigned int flags,
                                  CUdevice dev) {
  (void)params;  // execution affinity and CIG parameters have no meaning on the emulation
  return create_ctx(pctx, flags, dev);
}

FRSIM_API CUresult cuCtxDestroy_v2(CUcontext ctx) {
  CUctx_st* c = live_ctx(ctx);
  if (c == nullptr || c->primary) return CUDA_ERROR_INVALID_CONTEXT;
  {
    State& s = state();
    std::lock_guard<std::mutex> g(s.mu);
    s.contexts.erase(ctx);
    s.retired.push_back(c);
  }
  for (auto& e : tls_ctx_stack)
    if (e == ctx) e = nullptr;
  while (!tls_ctx_stack.empty() && tls_ctx_stack.back() == nullptr) tls_ctx_stack.pop_back();
  return CUDA_SUCCESS;
}

FRSIM_API CUresult cuCtxSetCurrent(CUcontext ctx) {
  if (ctx != nullptr && live_ctx(ctx) == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (tls_ctx_stack.empty())
    tls_ctx_stack.push_back(ctx);
  else
    tls_ctx_stack.back() = ctx;
  return CUDA_SUCCESS;
}

FRSIM_API CUresult cuCtxGetCurrent(CUcontext* pctx) {
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *pctx = tls_ctx_stack.empty() ? nullptr : tls_ctx_stack.back();
  return CUDA_SUCCESS;
}

FRSIM_API CUresult cuCtxPushCurrent_v2(CUcontext ctx) {
  if (ctx == nullptr || live_ctx(ctx) == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  tls_ctx_stack.push_back(ctx);
  return CUDA_SUCCESS;
}

FRSIM_API CUresult cuCtxPopCurrent_v2(CUcontext* pctx) {
  if (tls_ctx_stack.empty()) return CUDA_ERROR_INVALID_CONTEXT;
  if (pctx != nullptr) *pctx = tls_ctx_stack.back();
  tls_ctx_stack.pop_back();
  return CUDA_SUCCESS;
}

FRSIM_API CUresult cuCtxGetDevice(CUdevice* dev) {
  if (dev == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (tls_ctx_stack.empty() || tls_ctx_stack.back() == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  *dev = tls_ctx_stack.back()->device;
  return CUDA_SUCCESS;
}

FRSIM_API CUresult cuCtxGetFlags(unsigned int* flags) {
  if (flags == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (tls_ctx_stack.empty() || tls_ctx_stack.back() == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  *flags = tls_ctx_stack.back()->flags;
  return CUDA_SUCCESS;
}

FRSIM_API CUresult cuCtxGetId(CUcontext ctx, unsigned long long* id) {
  if (id == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (ctx == nullptr) ctx = tls_ctx_stack.empty() ? nullptr : tls_ctx_stack.back();
  if (ctx == nullptr || live_ctx(ctx) == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  *id = reinterpret_cast<uintptr_t>(ctx);
  return CUDA_SUCCESS;
}

// Priorities the emulation's streams take (cuStreamCreateWithPriority clamps to them): 0 the
// lowest, -5 the greatest, as on current GPUs.
FRSIM_API CUresult cuCtxGetStreamPriorityRange(int* least, int* greatest) {
  if (tls_ctx_stack.empty() || tls_ctx_stack.back() == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (least != nullptr) *least = 0;
  if (greatest != nullptr) *greatest = -5;
  return CUDA_SUCCESS;
}

FRSIM_API CUresult cuCtxSynchronize(void) {
  if (CUresult r = capture_unsafe_call(); r != CUDA_SUCCESS) return r;
  // Waits for every stream of the process (the emulation does not partition them by context).
  std::vector<std::shared_ptr<CUstream_st>> all;
  {
    State& s = ready();
    std::lock_guard<std::mutex> g(s.mu);
    for (auto& [h, st] : s.streams) all.push_back(st);
    if (s.legacy) all.push_back(s.legacy);
  }
  for (auto& st : all) wait_stream(st);
  return CUDA_SUCCESS;
}
