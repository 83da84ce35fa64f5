// GPU progress: the stream itself writes each communicator's "started" and "completed" op index
// into the log (cuStreamWriteValue64 into the host-registered mapping), so a reader can tell an op
// the GPU never reached from one it is stuck in, even while the host is wedged.
//
// The CUDA driver is reached through a table of function pointers loaded with dlopen at the first
// launch, so the agent links to nothing of CUDA. Where stream writes are unavailable, events
// recorded around each op are polled by one agent thread, which writes the same counters from
// the host. The agent never creates or switches a CUDA context and never enqueues into a stream
// that is being captured.
#include <cuda.h>
#include <dlfcn.h>
#include <signal.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "comms.h"
#include "gpu.h"
#include "log.h"
#include "replay_kernel.h"

namespace fr::agent {

constinit GpuState g_gpu = {};

namespace {

// While another thread captures a graph in the (default) global mode, "unsafe" driver calls from
// any thread in global mode invalidate that capture. The agent's own calls (registration, events)
// run in relaxed mode so they can never break an application's capture.
class RelaxedCapture {
 public:
  RelaxedCapture() {
    if (g_gpu.cuda.exchange_capture_mode != nullptr &&
        g_gpu.cuda.exchange_capture_mode(&mode_) == CUDA_SUCCESS)
      active_ = true;
  }
  ~RelaxedCapture() {
    if (active_) g_gpu.cuda.exchange_capture_mode(&mode_);
  }
  RelaxedCapture(const RelaxedCapture&) = delete;
  RelaxedCapture& operator=(const RelaxedCapture&) = delete;

 private:
  CUstreamCaptureMode mode_ = CU_STREAM_CAPTURE_MODE_RELAXED;
  bool active_ = false;
};

void* sym(const char* a, const char* b) {
  void* p = real_dlsym(g_gpu.cuda.lib, a);
  if (p == nullptr && b != nullptr) p = real_dlsym(g_gpu.cuda.lib, b);
  return p;
}

// Under g_gpu.lock.
bool load_cuda() {
  int loaded = __atomic_load_n(&g_gpu.cuda_loaded, __ATOMIC_ACQUIRE);
  if (loaded != 0) return loaded > 0;
  g_gpu.cuda.lib = os_dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (g_gpu.cuda.lib == nullptr) {
    debug_log("libcuda.so.1 not found; no GPU progress tracking");
    __atomic_store_n(&g_gpu.cuda_loaded, -1, __ATOMIC_RELEASE);
    __atomic_store_n(&g_gpu.cuda_absent, 1, __ATOMIC_RELEASE);
    return false;
  }
  g_gpu.cuda.ctx_get_current =
      (decltype(g_gpu.cuda.ctx_get_current))sym("cuCtxGetCurrent", nullptr);
  g_gpu.cuda.ctx_get_device = (decltype(g_gpu.cuda.ctx_get_device))sym("cuCtxGetDevice", nullptr);
  g_gpu.cuda.device_get_attribute =
      (decltype(g_gpu.cuda.device_get_attribute))sym("cuDeviceGetAttribute", nullptr);
  g_gpu.cuda.mem_host_register =
      (decltype(g_gpu.cuda.mem_host_register))sym("cuMemHostRegister_v2", "cuMemHostRegister");
  g_gpu.cuda.mem_host_get_device_pointer = (decltype(g_gpu.cuda.mem_host_get_device_pointer))sym(
      "cuMemHostGetDevicePointer_v2", "cuMemHostGetDevicePointer");
  g_gpu.cuda.stream_write_value64 = (decltype(g_gpu.cuda.stream_write_value64))sym(
      "cuStreamWriteValue64_v2", "cuStreamWriteValue64");
  g_gpu.cuda.stream_is_capturing =
      (decltype(g_gpu.cuda.stream_is_capturing))sym("cuStreamIsCapturing", nullptr);
  g_gpu.cuda.event_create = (decltype(g_gpu.cuda.event_create))sym("cuEventCreate", nullptr);
  g_gpu.cuda.event_record = (decltype(g_gpu.cuda.event_record))sym("cuEventRecord", nullptr);
  g_gpu.cuda.event_query = (decltype(g_gpu.cuda.event_query))sym("cuEventQuery", nullptr);
  g_gpu.cuda.event_destroy =
      (decltype(g_gpu.cuda.event_destroy))sym("cuEventDestroy_v2", "cuEventDestroy");
  g_gpu.cuda.exchange_capture_mode =
      (decltype(g_gpu.cuda.exchange_capture_mode))sym("cuThreadExchangeStreamCaptureMode", nullptr);
  g_gpu.cuda.capture_info_v3 =
      (decltype(g_gpu.cuda.capture_info_v3))sym("cuStreamGetCaptureInfo_v3", nullptr);
  g_gpu.cuda.capture_info_v2 =
      (decltype(g_gpu.cuda.capture_info_v2))sym("cuStreamGetCaptureInfo_v2", nullptr);
  g_gpu.cuda.stream_get_ctx = (decltype(g_gpu.cuda.stream_get_ctx))sym("cuStreamGetCtx", nullptr);
  g_gpu.cuda.module_load_data =
      (decltype(g_gpu.cuda.module_load_data))sym("cuModuleLoadData", nullptr);
  g_gpu.cuda.module_get_function =
      (decltype(g_gpu.cuda.module_get_function))sym("cuModuleGetFunction", nullptr);
  g_gpu.cuda.launch_kernel = (decltype(g_gpu.cuda.launch_kernel))sym("cuLaunchKernel", nullptr);
  g_gpu.cuda.func_load = (decltype(g_gpu.cuda.func_load))sym("cuFuncLoad", nullptr);
  __atomic_store_n(&g_gpu.cuda_loaded, 1, __ATOMIC_RELEASE);
  return true;
}

bool events_available() {
  return g_gpu.cuda.event_create && g_gpu.cuda.event_record && g_gpu.cuda.event_query &&
         g_gpu.cuda.event_destroy;
}

void raise_to(uint64_t* target, uint64_t index) {
  uint64_t cur = __atomic_load_n(target, __ATOMIC_RELAXED);
  while (cur < index && !__atomic_compare_exchange_n(target, &cur, index, true, __ATOMIC_RELEASE,
                                                     __ATOMIC_RELAXED)) {
  }
}

void* poller_main(void*) {
  CUstreamCaptureMode relaxed = CU_STREAM_CAPTURE_MODE_RELAXED;
  if (g_gpu.cuda.exchange_capture_mode != nullptr) g_gpu.cuda.exchange_capture_mode(&relaxed);
  struct timespec tick = {0, 2000000};  // 2 ms: finer than any hang worth reporting
  for (;;) {
    nanosleep(&tick, nullptr);
    pthread_mutex_lock(&g_gpu.lock);
    uint32_t used = g_gpu.pending_used;
    for (uint32_t i = 0; i < kMaxPending && used > 0; ++i) {
      Pending& p = g_gpu.pending[i];
      if (p.event == nullptr) continue;
      --used;
      CUresult r = g_gpu.cuda.event_query(p.event);
      if (r == CUDA_ERROR_NOT_READY) continue;
      if (r == CUDA_SUCCESS) raise_to(p.target, p.index);
      g_gpu.cuda.event_destroy(p.event);
      p.event = nullptr;
      --g_gpu.pending_used;
    }
    pthread_mutex_unlock(&g_gpu.lock);
  }
  return nullptr;
}

// Under g_gpu.lock.
bool start_poller() {
  if (g_gpu.poller_started) return true;
  sigset_t all, old;
  sigfillset(&all);
  os_pthread_sigmask(SIG_SETMASK, &all, &old);  // the thread never takes the application's signals
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_t th;
  int rc = os_pthread_create(&th, &attr, poller_main, nullptr);
  pthread_attr_destroy(&attr);
  os_pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (rc != 0) return false;
  g_gpu.poller_started = 1;
  return true;
}

void choose(int mode) {
  __atomic_store_n(&g_gpu.mode, mode, __ATOMIC_RELEASE);
  uint32_t flag = mode == kGpuMarkers  ? FR_LOG_F_GPU_MARKERS
                  : mode == kGpuEvents ? FR_LOG_F_GPU_EVENTS
                                       : FR_LOG_F_NO_GPU_TRACKING;
  set_log_flags(flag,
                (FR_LOG_F_GPU_MARKERS | FR_LOG_F_GPU_EVENTS | FR_LOG_F_NO_GPU_TRACKING) & ~flag);
  debug_log("GPU progress: %s", mode == kGpuMarkers  ? "stream markers"
                                : mode == kGpuEvents ? "polled events"
                                                     : "not tracked");
}

// Under g_gpu.lock: markers failed or are missing; try events, else give up tracking.
void fall_back() {
  if (events_available() && start_poller())
    choose(kGpuEvents);
  else
    choose(kGpuNone);
}

// The mapping starts on a page; registration covers whole pages (the last one is mapped too).
size_t page_rounded(uint64_t bytes) {
  long page = sysconf(_SC_PAGESIZE);
  uint64_t p = page > 0 ? (uint64_t)page : 4096u;
  return (size_t)((bytes + p - 1) / p * p);
}

uint64_t* counter(int32_t slot, bool completed) {
  fr_comm_entry* e = &g_log.comms[slot];
  return completed ? &e->gpu_completed : &e->gpu_started;
}

bool place_event(int32_t slot, uint64_t stream, uint64_t index, bool completed) {
  RelaxedCapture relaxed;
  CUevent ev = nullptr;
  if (g_gpu.cuda.event_create(&ev, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS || ev == nullptr)
    return false;
  if (g_gpu.cuda.event_record(ev, (CUstream)stream) != CUDA_SUCCESS) {
    g_gpu.cuda.event_destroy(ev);
    return false;
  }
  pthread_mutex_lock(&g_gpu.lock);
  bool queued = false;
  if (g_gpu.pending_used < kMaxPending) {
    for (uint32_t i = 0; i < kMaxPending; ++i) {
      if (g_gpu.pending[i].event != nullptr) continue;
      g_gpu.pending[i] = Pending{ev, counter(slot, completed), index};
      ++g_gpu.pending_used;
      queued = true;
      break;
    }
  }
  pthread_mutex_unlock(&g_gpu.lock);
  if (!queued) g_gpu.cuda.event_destroy(ev);
  return queued;
}

// Whether `stream` is one whose stream write failed (GpuState::event_streams).
bool uses_events(uint64_t stream) {
  const uint32_t n = __atomic_load_n(&g_gpu.event_stream_count, __ATOMIC_ACQUIRE);
  for (uint32_t i = 0; i < n && i < kEventStreams; ++i)
    if (__atomic_load_n(&g_gpu.event_streams[i], __ATOMIC_RELAXED) == stream + 1) return true;
  return false;
}

const char* gpu_call_name(uint32_t call) {
#define FR_X(e, v, s) \
  if (call == v) return s;
  FR_GPU_CALL_LIST(FR_X)
#undef FR_X
  return "?";
}

// The failed call and its CUresult, in the header, where a reader of the dump sees them.
void note_failure(uint32_t call, CUresult r) {
  if (g_log.hdr == nullptr) return;
  __atomic_store_n(&g_log.hdr->gpu_error, (int32_t)r, __ATOMIC_RELAXED);
  __atomic_store_n(&g_log.hdr->gpu_error_call, call, __ATOMIC_RELEASE);
  debug_log("GPU progress: %s failed (CUresult %d)", gpu_call_name(call), (int)r);
}

// Under g_gpu.lock: a stream write failed on `stream`. That stream goes to events (its progress
// stays tracked, the others keep markers); when events cannot be had or too many streams failed,
// the whole process falls back as before.
void stream_failed(uint64_t stream, CUresult r) {
  note_failure(FR_GPU_CALL_STREAM_WRITE_VALUE64, r);
  const uint32_t n = g_gpu.event_stream_count;
  if (n < kEventStreams && events_available() && start_poller()) {
    __atomic_store_n(&g_gpu.event_streams[n], stream + 1, __ATOMIC_RELAXED);
    __atomic_store_n(&g_gpu.event_stream_count, n + 1, __ATOMIC_RELEASE);
    if (g_log.hdr != nullptr)
      __atomic_fetch_add(&g_log.hdr->gpu_event_streams, 1u, __ATOMIC_RELAXED);
    set_log_flags(FR_LOG_F_GPU_EVENTS, 0);  // with GPU_MARKERS: some streams each way
    debug_log("GPU progress: stream %#llx from events from now on", (unsigned long long)stream);
    return;
  }
  debug_log("cuStreamWriteValue64 failed; falling back");
  fall_back();
}

bool place(int32_t slot, uint64_t stream, uint64_t index, bool completed) {
  if (slot < 0 || index == 0) return false;
  int mode = __atomic_load_n(&g_gpu.mode, __ATOMIC_ACQUIRE);
  if (mode == kGpuMarkers && !uses_events(stream)) {
    uint64_t off = (uint64_t)((uint8_t*)counter(slot, completed) - g_log.map);
    CUresult r = g_gpu.cuda.stream_write_value64((CUstream)stream, g_gpu.dev_base + off, index, 0);
    if (r == CUDA_SUCCESS) return true;
    pthread_mutex_lock(&g_gpu.lock);
    if (__atomic_load_n(&g_gpu.mode, __ATOMIC_ACQUIRE) == kGpuMarkers && !uses_events(stream))
      stream_failed(stream, r);
    pthread_mutex_unlock(&g_gpu.lock);
    mode = __atomic_load_n(&g_gpu.mode, __ATOMIC_ACQUIRE);
    if (mode == kGpuMarkers && !uses_events(stream)) return false;
  }
  if (mode == kGpuEvents || mode == kGpuMarkers) return place_event(slot, stream, index, completed);
  return false;
}

void kernel_failed(const char* why, int code) {
  if (!g_gpu.kernel_failed)
    debug_log("graph replay kernel unavailable (%s, %d); replays are tracked from the host", why,
              code);
  g_gpu.kernel_failed = 1;
  set_log_flags(FR_LOG_F_GRAPH_REPLAY_HOST, FR_LOG_F_GRAPH_REPLAY_KERNEL);
}

// The replay kernel, loaded once per CUDA context (a module belongs to one context). Under
// g_gpu.lock. Null when it cannot be had; then replay tracking stays on the host, for good.
CUfunction replay_kernel(CUcontext ctx) {
  if (g_gpu.kernel_failed) return nullptr;
  for (uint32_t i = 0; i < g_gpu.kernels_used; ++i)
    if (g_gpu.kernels[i].ctx == ctx) return g_gpu.kernels[i].fn;
  if (!g_gpu.cuda.module_load_data || !g_gpu.cuda.module_get_function ||
      !g_gpu.cuda.launch_kernel) {
    kernel_failed("no module support in the driver", 0);
    return nullptr;
  }
  if (g_gpu.kernels_used == kMaxKernelContexts) return nullptr;  // this context only
  // Relaxed mode: loading a module is not a stream operation and must not disturb a capture in
  // global mode (this thread's own, or another thread's).
  RelaxedCapture relaxed;
  CUmodule mod = nullptr;
  CUfunction fn = nullptr;
  CUresult r = g_gpu.cuda.module_load_data(&mod, kReplayKernelPtx);
  if (r != CUDA_SUCCESS) {
    kernel_failed("cuModuleLoadData", (int)r);
    return nullptr;
  }
  r = g_gpu.cuda.module_get_function(&fn, mod, kReplayKernelName);
  if (r != CUDA_SUCCESS || fn == nullptr) {
    kernel_failed("cuModuleGetFunction", (int)r);
    return nullptr;
  }
  // With lazy loading (CUDA_MODULE_LOADING=LAZY, the default) the function would be loaded at
  // its first launch, inside the capture: load it now, still in relaxed mode.
  if (g_gpu.cuda.func_load != nullptr && (r = g_gpu.cuda.func_load(fn)) != CUDA_SUCCESS) {
    kernel_failed("cuFuncLoad", (int)r);
    return nullptr;
  }
  g_gpu.kernels[g_gpu.kernels_used++] = KernelSlot{ctx, fn};
  return fn;
}

}  // namespace

bool gpu_capture_replay_kernel(uint64_t stream, uint64_t* counter, uint32_t ordinal) {
  if (gpu_prepare() != kGpuMarkers || g_gpu.cuda.ctx_get_current == nullptr) return false;
  CUcontext ctx = nullptr, stream_ctx = nullptr;
  if (g_gpu.cuda.ctx_get_current(&ctx) != CUDA_SUCCESS || ctx == nullptr) return false;
  // A stream of another context than the current one: its module is not at hand here.
  if (g_gpu.cuda.stream_get_ctx != nullptr &&
      (g_gpu.cuda.stream_get_ctx((CUstream)stream, &stream_ctx) != CUDA_SUCCESS ||
       stream_ctx != ctx))
    return false;
  pthread_mutex_lock(&g_gpu.lock);
  CUfunction fn = replay_kernel(ctx);
  pthread_mutex_unlock(&g_gpu.lock);
  if (fn == nullptr) return false;
  unsigned long long counter_dev = g_gpu.dev_base + (uint64_t)((uint8_t*)counter - g_log.map);
  unsigned long long comms_dev = g_gpu.dev_base + (uint64_t)((uint8_t*)g_log.comms - g_log.map);
  unsigned n = g_log.comm_cap;
  void* params[] = {&counter_dev, &comms_dev, &n, &ordinal};
  unsigned blocks = (n + kReplayKernelBlock - 1) / kReplayKernelBlock;
  CUresult r = g_gpu.cuda.launch_kernel(fn, blocks > 0 ? blocks : 1, 1, 1, kReplayKernelBlock, 1, 1,
                                        0, (CUstream)stream, params, nullptr);
  if (r != CUDA_SUCCESS) {
    pthread_mutex_lock(&g_gpu.lock);
    kernel_failed("cuLaunchKernel", (int)r);
    pthread_mutex_unlock(&g_gpu.lock);
    return false;
  }
  set_log_flags(FR_LOG_F_GRAPH_REPLAY_KERNEL, 0);
  return true;
}

int gpu_stream_capture(uint64_t stream) {
  int loaded = __atomic_load_n(&g_gpu.cuda_loaded, __ATOMIC_ACQUIRE);
  if (loaded == 0) {
    // Only dlopen and dlsym here: no CUDA call may run before we know the stream is not capturing.
    pthread_mutex_lock(&g_gpu.lock);
    loaded = load_cuda() ? 1 : -1;
    pthread_mutex_unlock(&g_gpu.lock);
  }
  if (loaded < 0) return kNotCapturing;  // no driver: nothing is enqueued anyway
  if (g_gpu.cuda.stream_is_capturing == nullptr) return kCaptureUnknown;
  CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
  if (g_gpu.cuda.stream_is_capturing((CUstream)stream, &st) != CUDA_SUCCESS) return kCaptureUnknown;
  return st == CU_STREAM_CAPTURE_STATUS_NONE ? kNotCapturing : kCapturing;
}

// Whether the current device says it cannot do 64-bit stream memory operations (the markers'
// cuStreamWriteValue64). Unknown (an older driver, no such attribute) counts as able: a write
// that then fails falls back per stream.
bool memops_unsupported() {
  CUdevice dev = 0;
  int can = 1;
  return g_gpu.cuda.ctx_get_device != nullptr && g_gpu.cuda.device_get_attribute != nullptr &&
         g_gpu.cuda.ctx_get_device(&dev) == CUDA_SUCCESS &&
         g_gpu.cuda.device_get_attribute(&can, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS,
                                         dev) == CUDA_SUCCESS &&
         can == 0;
}

int gpu_prepare() {
  int mode = __atomic_load_n(&g_gpu.mode, __ATOMIC_ACQUIRE);
  if (__builtin_expect(mode != kGpuUndecided, 1)) return mode;
  pthread_mutex_lock(&g_gpu.lock);
  mode = g_gpu.mode;
  if (mode == kGpuUndecided) {
    if (!load_cuda()) {
      choose(kGpuNone);
    } else {
      CUcontext ctx = nullptr;
      CUresult cr =
          g_gpu.cuda.ctx_get_current ? g_gpu.cuda.ctx_get_current(&ctx) : CUDA_ERROR_NOT_FOUND;
      bool has_ctx = cr == CUDA_SUCCESS && ctx != nullptr;
      if (!has_ctx && ++g_gpu.tries < 8) {
        // No context on this thread yet (the launch itself may create the primary one): decide
        // at a later launch, and leave this op untracked.
        pthread_mutex_unlock(&g_gpu.lock);
        return kGpuUndecided;
      }
      CUdeviceptr dev = 0;
      RelaxedCapture relaxed;
      // PORTABLE: every context of the process sees the mapping (one process may drive several
      // devices); the mapping is page-aligned, as registration requires.
      CUresult rr = CUDA_ERROR_NOT_FOUND, dr = CUDA_ERROR_NOT_FOUND;
      const bool no_memops = has_ctx && memops_unsupported();
      if (no_memops) {
        note_failure(FR_GPU_CALL_DEVICE_GET_ATTRIBUTE, CUDA_ERROR_NOT_SUPPORTED);
        fall_back();
      } else if (has_ctx && g_gpu.cuda.mem_host_register &&
                 g_gpu.cuda.mem_host_get_device_pointer && g_gpu.cuda.stream_write_value64 &&
                 (rr = g_gpu.cuda.mem_host_register(
                      g_log.map, page_rounded(g_log.map_size),
                      CU_MEMHOSTREGISTER_DEVICEMAP | CU_MEMHOSTREGISTER_PORTABLE)) ==
                     CUDA_SUCCESS &&
                 (dr = g_gpu.cuda.mem_host_get_device_pointer(&dev, g_log.map, 0)) ==
                     CUDA_SUCCESS) {
        g_gpu.dev_base = (uint64_t)dev;
        choose(kGpuMarkers);
      } else if (has_ctx) {
        if (rr != CUDA_SUCCESS)
          note_failure(FR_GPU_CALL_MEM_HOST_REGISTER, rr);
        else
          note_failure(FR_GPU_CALL_MEM_HOST_GET_DEVICE_POINTER, dr);
        fall_back();
      } else {
        // Eight launches found no current context: the result says why (or CUDA_SUCCESS with
        // none current).
        note_failure(FR_GPU_CALL_CTX_GET_CURRENT,
                     cr == CUDA_SUCCESS ? CUDA_ERROR_INVALID_CONTEXT : cr);
        choose(kGpuNone);
      }
    }
    mode = g_gpu.mode;
  }
  pthread_mutex_unlock(&g_gpu.lock);
  return mode;
}

bool gpu_before(int32_t slot, uint64_t stream, uint64_t index) {
  return place(slot, stream, index, false);
}

bool gpu_after(int32_t slot, uint64_t stream, uint64_t index) {
  return place(slot, stream, index, true);
}

bool gpu_write_word(uint64_t stream, uint64_t* word, uint64_t value) {
  if (gpu_prepare() != kGpuMarkers) return false;
  uint64_t off = (uint64_t)((uint8_t*)word - g_log.map);
  return g_gpu.cuda.stream_write_value64((CUstream)stream, g_gpu.dev_base + off, value, 0) ==
         CUDA_SUCCESS;
}

bool gpu_capture_info(uint64_t stream, uint64_t* capture_id, uint64_t* graph) {
  if (__atomic_load_n(&g_gpu.cuda_loaded, __ATOMIC_ACQUIRE) <= 0) return false;
  CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
  cuuint64_t id = 0;
  CUgraph g = nullptr;
  CUresult r = CUDA_ERROR_NOT_SUPPORTED;
  if (g_gpu.cuda.capture_info_v3 != nullptr)
    r = g_gpu.cuda.capture_info_v3((CUstream)stream, &st, &id, &g, nullptr, nullptr, nullptr);
  else if (g_gpu.cuda.capture_info_v2 != nullptr)
    r = g_gpu.cuda.capture_info_v2((CUstream)stream, &st, &id, &g, nullptr, nullptr);
  if (r != CUDA_SUCCESS || st != CU_STREAM_CAPTURE_STATUS_ACTIVE) return false;
  *capture_id = (uint64_t)id;
  *graph = (uint64_t)(uintptr_t)g;
  return true;
}

void gpu_forget_in_child() {
  // The parent's registration, events and poller thread do not exist in the child; the loaded
  // driver table stays (dlopen'ed libraries survive fork).
  memset(g_gpu.pending, 0, sizeof g_gpu.pending);
  g_gpu.pending_used = 0;
  g_gpu.poller_started = 0;
  memset(g_gpu.kernels, 0, sizeof g_gpu.kernels);  // modules belong to the parent's contexts
  g_gpu.kernels_used = 0;
  g_gpu.kernel_failed = 0;
  g_gpu.mode = kGpuUndecided;
  g_gpu.cuda_absent = 0;
  g_gpu.tries = 0;
  g_gpu.dev_base = 0;
}

}  // namespace fr::agent
