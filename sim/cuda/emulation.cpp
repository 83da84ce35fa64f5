// The emulation-only API of libcuda.so.1 (fr_sim.h): emulated kernels that run a function, sleep,
// stall forever or until a flag is set, the count of pending work on a stream, the visible devices,
// and frsim_internal_launch_prepared, through which libnccl.so.2 queues its operations.
#include <fr_sim.h>

#include <chrono>
#include <thread>

#include "driver.h"

using namespace frsim;

FRSIM_API CUresult frsim_stream_launch(CUstream h, frsim_kernel_fn fn, void* arg) {
  if (fn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto st = get_stream(h);
  if (!st) return CUDA_ERROR_INVALID_HANDLE;
  return enqueue(st, [fn, arg] { fn(arg); });
}

FRSIM_API CUresult frsim_stream_launch_owned(CUstream h, frsim_kernel_fn fn, void* arg,
                                             void (*release)(void*)) {
  if (fn == nullptr || release == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto st = get_stream(h);
  if (!st) {
    release(arg);
    return CUDA_ERROR_INVALID_HANDLE;
  }
  std::shared_ptr<void> owned(arg, release);
  return enqueue(st, [fn, owned] { fn(owned.get()); });
}

// For libnccl.so.2 (C++ on both sides, same toolchain): queue the work `prepare` makes, calling
// prepare on the host now, or at every launch of the graph when the stream is capturing.
FRSIM_API CUresult frsim_internal_launch_prepared(CUstream h,
                                                  std::function<std::function<void()>()> prepare) {
  auto st = get_stream(h);
  if (!st) return CUDA_ERROR_INVALID_HANDLE;
  return enqueue_prepared(st, std::move(prepare));
}

FRSIM_API CUresult frsim_stream_stall(CUstream h, int ms) {
  auto st = get_stream(h);
  if (!st) return CUDA_ERROR_INVALID_HANDLE;
  return enqueue(st, [ms] {
    if (ms < 0) {
      for (;;) pause();  // blocked until the process ends, as a kernel that never returns
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  });
}

FRSIM_API CUresult frsim_stream_stall_until(CUstream h, const volatile uint32_t* flag) {
  if (flag == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto st = get_stream(h);
  if (!st) return CUDA_ERROR_INVALID_HANDLE;
  return enqueue(st, [flag] {
    Backoff b;
    while (__atomic_load_n(const_cast<const uint32_t*>(flag), __ATOMIC_ACQUIRE) == 0) b.pause();
  });
}

FRSIM_API CUresult frsim_stream_pending(CUstream h, uint64_t* pending) {
  if (pending == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto st = get_stream(h);
  if (!st) return CUDA_ERROR_INVALID_HANDLE;
  std::lock_guard<std::mutex> g(st->mu);
  *pending = st->enqueued - st->finished;
  return CUDA_SUCCESS;
}

FRSIM_API int frsim_device_count(void) { return static_cast<int>(ready().visible.size()); }

FRSIM_API int frsim_physical_device(int ordinal) {
  State& s = ready();
  if (ordinal < 0 || ordinal >= static_cast<int>(s.visible.size())) return -1;
  return s.visible[ordinal];
}

FRSIM_API CUresult frsim_set_device(int ordinal) {
  if (!valid_device(ordinal)) return CUDA_ERROR_INVALID_DEVICE;
  CUcontext c = ready().primary[ordinal];
  return cuCtxSetCurrent(c);
}

FRSIM_API int frsim_current_device(void) { return current_device(); }
