// Streams and events of the CUDA driver emulation: creating, querying, synchronizing and
// destroying streams, host functions and callbacks queued on them, the stream memory operations
// (write a value, wait for a value, on host-mapped memory only) and events, which complete when
// their stream reaches the record. Each queues its work through enqueue() (state.cpp), so a
// capturing stream records it into its graph instead.
#include "driver.h"

using namespace frsim;

namespace {

bool wait_value_met(uint64_t cur, uint64_t value, unsigned flags, bool is64) {
  switch (flags & 0xf) {
    case CU_STREAM_WAIT_VALUE_GEQ:
      return is64 ? static_cast<int64_t>(cur - value) >= 0
                  : static_cast<int32_t>(static_cast<uint32_t>(cur) -
                                         static_cast<uint32_t>(value)) >= 0;
    case CU_STREAM_WAIT_VALUE_EQ: return cur == value;
    case CU_STREAM_WAIT_VALUE_AND: return (cur & value) != 0;
    case CU_STREAM_WAIT_VALUE_NOR:
      return is64 ? ~(cur | value) != 0 : static_cast<uint32_t>(~(cur | value)) != 0;
    default: return true;
  }
}

}  // namespace

// ---- streams -----------------------------------------------------------------------------------

FRSIM_API CUresult cuStreamCreateWithPriority(CUstream* ph, unsigned int flags, int priority) {
  if (ph == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (flags & ~static_cast<unsigned>(CU_STREAM_NON_BLOCKING)) return CUDA_ERROR_INVALID_VALUE;
  State& s = ready();
  CUcontext ctx = tls_ctx_stack.empty() ? nullptr : tls_ctx_stack.back();
  auto st =
      make_stream(current_device(), ctx, flags, priority < -5 ? -5 : (priority > 0 ? 0 : priority));
  std::lock_guard<std::mutex> g(s.mu);
  s.streams[st.get()] = st;
  *ph = st.get();
  return CUDA_SUCCESS;
}

FRSIM_API CUresult cuStreamCreate(CUstream* ph, unsigned int flags) {
  return cuStreamCreateWithPriority(ph, flags, 0);
}

FRSIM_API CUresult cuStreamDestroy_v2(CUstream h) {
  if (h == nullptr || h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD)
    return CUDA_ERROR_INVALID_HANDLE;
  std::shared_ptr<CUstream_st> st;
  {
    State& s = ready();
    std::lock_guard<std::mutex> g(s.mu);
    auto it = s.streams.find(h);
    if (it == s.streams.end()) return CUDA_ERROR_INVALID_HANDLE;
    st = it->second;
    s.streams.erase(it);
  }
  capture_forget(st.get());
  // As on a GPU, queued work still runs; the worker ends once the queue is drained.
  std::lock_guard<std::mutex> g(st->mu);
  st->destroyed = true;
  st->work_cv.notify_all();
  return CUDA_SUCCESS;
}

FRSIM_API CUresult cuStreamSynchronize(CUstream h) {
  auto st = get_stream(h);
  if (!st) return CUDA_ERROR_INVALID_HANDLE;
  {
    std::lock_guard<std::mutex> g(st->mu);
    if (st->capture != CU_STREAM_CAPTURE_STATUS_NONE) {  // syncing a capture invalidates it
      st->capture = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
      return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
  }
  if (CUresult r = capture_unsafe_call(); r != CUDA_SUCCESS) return r;
  wait_stream(st);
  return CUDA_SUCCESS;
}

FRSIM_API CUresult cuStreamQuery(CUstream h) {
  auto st = get_stream(h);
  if (!st) return CUDA_ERROR_INVALID_HANDLE;
  std::lock_guard<std::mutex> g(st->mu);
  if (st->capture != CU_STREAM_CAPTURE_STATUS_NONE) {  // querying a capture invalidates it
    st->capture = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
    return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  }
  return st->finished >= st->enqueued ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

FRSIM_API CUresult cuStreamGetPriority(CUstream h, int* priority) {
  auto st = get_stream(h);
  if (!st) return CUDA_ERROR_INVALID_HANDLE;
  if (priority == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *priority = st->priority;
  return CUDA_SUCCESS;
}

FRSIM_API CUresult cuStreamGetFlags(CUstream h, unsigned int* flags) {
  auto st = get_stream(h);
  if (!st) return CUDA_ERROR_INVALID_HANDLE;
  if (flags == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *flags = st->flags;
  return CUDA_SUCCESS;
}

FRSIM_API CUresult cuStreamGetId(CUstream h, unsigned long long* id) {
  auto st = get_stream(h);
  if (!st) return CUDA_ERROR_INVALID_HANDLE;
  if (id == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *id = st->id;
  return CUDA_SUCCESS;
}

FRSIM_API CUresult cuStreamGetCtx(CUstream h, CUcontext* pctx) {
  auto st = get_stream(h);
  if (!st) return CUDA_ERROR_INVALID_HANDLE;
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *pctx = st->ctx;
  return CUDA_SUCCESS;
}

FRSIM_API CUresult cuStreamGetDevice(CUstream h, CUdevice* dev) {
  auto st = get_stream(h);
  if (!st) return CUDA_ERROR_INVALID_HANDLE;
  if (dev == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *dev = st->device;
  return CUDA_SUCCESS;
}

FRSIM_API CUresult cuStreamWaitEvent(CUstream h, CUevent ev, unsigned int flags) {
  (void)flags;
  auto st = get_stream(h);
  if (!st) return CUDA_ERROR_INVALID_HANDLE;
  auto e = get_event(ev);
  if (!e) return CUDA_ERROR_INVALID_HANDLE;
  uint64_t target;
  {
    std::lock_guard<std::mutex> g(e->mu);
    target = e->recorded;  // waits for the most recent record at the time of this call
  }
  if (target == 0) return CUDA_SUCCESS;
  return enqueue(st, [e, target] {
    std::unique_lock<std::mutex> lk(e->mu);
    e->cv.wait(lk, [&] { return e->completed >= target; });
  });
}

FRSIM_API CUresult cuLaunchHostFunc(CUstream h, CUhostFn fn, void* user) {
  if (fn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto st = get_stream(h);
  if (!st) return CUDA_ERROR_INVALID_HANDLE;
  return enqueue(st, [fn, user] { fn(user); });
}

FRSIM_API CUresult cuStreamAddCallback(CUstream h, CUstreamCallback cb, void* user,
                                       unsigned int flags) {
  if (cb == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  auto st = get_stream(h);
  if (!st) return CUDA_ERROR_INVALID_HANDLE;
  CUstream handle = h;
  return enqueue(st, [cb, user, handle] { cb(handle, CUDA_SUCCESS, user); });
}

// ---- stream memory operations --------------------------------------------------------------------

// As the driver: FRSIM_CU_FAIL's refusals first (a GPU or driver without stream memory
// operations, or 64-bit ones; no current context), then the flags, then the address: aligned to
// its size and inside memory the GPU can reach.
static CUresult check_mem_op(CUdeviceptr addr, size_t len, unsigned flags, unsigned valid_flags) {
  if (cu_fail(CuFail::kWriteNoContext)) return CUDA_ERROR_INVALID_CONTEXT;
  if (cu_fail(CuFail::kWriteUnsupported) || (len == 8 && cu_fail(CuFail::kWrite64Unsupported)))
    return CUDA_ERROR_NOT_SUPPORTED;
  if ((flags & ~valid_flags) != 0) return CUDA_ERROR_INVALID_VALUE;
  if (addr == 0 || addr % len != 0) return CUDA_ERROR_INVALID_VALUE;
  if (!addr_is_host_mapped(static_cast<uintptr_t>(addr), len)) return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}

FRSIM_API CUresult cuStreamWriteValue64_v2(CUstream h, CUdeviceptr addr, cuuint64_t value,
                                           unsigned int flags) {
  auto st = get_stream(h);
  if (!st) return CUDA_ERROR_INVALID_HANDLE;
  if (CUresult r = check_mem_op(addr, 8, flags, CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER);
      r != CUDA_SUCCESS)
    return r;
  auto* p = reinterpret_cast<uint64_t*>(static_cast<uintptr_t>(addr));
  return enqueue(
      st, [p, value] { __atomic_store_n(p, value, __ATOMIC_SEQ_CST); }, nullptr, true);
}

FRSIM_API CUresult cuStreamWriteValue32_v2(CUstream h, CUdeviceptr addr, cuuint32_t value,
                                           unsigned int flags) {
  auto st = get_stream(h);
  if (!st) return CUDA_ERROR_INVALID_HANDLE;
  if (CUresult r = check_mem_op(addr, 4, flags, CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER);
      r != CUDA_SUCCESS)
    return r;
  auto* p = reinterpret_cast<uint32_t*>(static_cast<uintptr_t>(addr));
  return enqueue(
      st, [p, value] { __atomic_store_n(p, value, __ATOMIC_SEQ_CST); }, nullptr, true);
}

FRSIM_API CUresult cuStreamWaitValue64_v2(CUstream h, CUdeviceptr addr, cuuint64_t value,
                                          unsigned int flags) {
  auto st = get_stream(h);
  if (!st) return CUDA_ERROR_INVALID_HANDLE;
  if (CUresult r = check_mem_op(addr, 8, flags, 0xf | CU_STREAM_WAIT_VALUE_FLUSH);
      r != CUDA_SUCCESS)
    return r;
  if ((flags & 0xf) > CU_STREAM_WAIT_VALUE_NOR) return CUDA_ERROR_INVALID_VALUE;
  auto* p = reinterpret_cast<const uint64_t*>(static_cast<uintptr_t>(addr));
  return enqueue(st, [p, value, flags] {
    Backoff b;
    while (!wait_value_met(__atomic_load_n(p, __ATOMIC_ACQUIRE), value, flags, true)) b.pause();
  });
}

FRSIM_API CUresult cuStreamWaitValue32_v2(CUstream h, CUdeviceptr addr, cuuint32_t value,
                                          unsigned int flags) {
  auto st = get_stream(h);
  if (!st) return CUDA_ERROR_INVALID_HANDLE;
  if (CUresult r = check_mem_op(addr, 4, flags, 0xf | CU_STREAM_WAIT_VALUE_FLUSH);
      r != CUDA_SUCCESS)
    return r;
  if ((flags & 0xf) > CU_STREAM_WAIT_VALUE_NOR) return CUDA_ERROR_INVALID_VALUE;
  auto* p = reinterpret_cast<const uint32_t*>(static_cast<uintptr_t>(addr));
  return enqueue(st, [p, value, flags] {
    Backoff b;
    while (!wait_value_met(__atomic_load_n(p, __ATOMIC_ACQUIRE), value, flags, false)) b.pause();
  });
}

// ---- events --------------------------------------------------------------------------------------

FRSIM_API CUresult cuEventCreate(CUevent* ph, unsigned int flags) {
  if (ph == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (flags & ~0xfu) return CUDA_ERROR_INVALID_VALUE;
  auto e = std::make_shared<CUevent_st>();
  e->magic = kEventMagic;
  e->flags = flags;
  State& s = ready();
  std::lock_guard<std::mutex> g(s.mu);
  s.events[e.get()] = e;
  *ph = e.get();
  return CUDA_SUCCESS;
}

FRSIM_API CUresult cuEventDestroy_v2(CUevent h) {
  State& s = ready();
  std::lock_guard<std::mutex> g(s.mu);
  // Pending records keep their own reference; the event goes away when they have run.
  return s.events.erase(h) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

FRSIM_API CUresult cuEventRecord(CUevent h, CUstream hs) {
  auto e = get_event(h);
  if (!e) return CUDA_ERROR_INVALID_HANDLE;
  auto st = get_stream(hs);
  if (!st) return CUDA_ERROR_INVALID_HANDLE;
  {
    std::lock_guard<std::mutex> g(st->mu);
    if (st->capture == CU_STREAM_CAPTURE_STATUS_ACTIVE)
      return CUDA_SUCCESS;  // a capture node; nothing recorded now
  }
  uint64_t gen;
  {
    std::lock_guard<std::mutex> g(e->mu);
    gen = ++e->recorded;
  }
  CUresult r = enqueue(st, [e, gen] {
    std::lock_guard<std::mutex> g(e->mu);
    if (gen > e->completed) {
      e->completed = gen;
      e->time_ms = now_ms();
    }
    e->cv.notify_all();
  });
  if (r != CUDA_SUCCESS) {
    std::lock_guard<std::mutex> g(e->mu);
    if (e->recorded == gen) --e->recorded;
  }
  return r;
}

FRSIM_API CUresult cuEventRecordWithFlags(CUevent h, CUstream hs, unsigned int flags) {
  (void)flags;
  return cuEventRecord(h, hs);
}

FRSIM_API CUresult cuEventQuery(CUevent h) {
  auto e = get_event(h);
  if (!e) return CUDA_ERROR_INVALID_HANDLE;
  std::lock_guard<std::mutex> g(e->mu);
  return e->completed >= e->recorded ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

FRSIM_API CUresult cuEventSynchronize(CUevent h) {
  auto e = get_event(h);
  if (!e) return CUDA_ERROR_INVALID_HANDLE;
  std::unique_lock<std::mutex> lk(e->mu);
  uint64_t target = e->recorded;
  e->cv.wait(lk, [&] { return e->completed >= target; });
  return CUDA_SUCCESS;
}

FRSIM_API CUresult cuEventElapsedTime_v2(float* ms, CUevent start, CUevent end) {
  if (ms == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto a = get_event(start);
  auto b = get_event(end);
  if (!a || !b) return CUDA_ERROR_INVALID_HANDLE;
  if ((a->flags | b->flags) & CU_EVENT_DISABLE_TIMING) return CUDA_ERROR_INVALID_HANDLE;
  double ta, tb;
  {
    std::lock_guard<std::mutex> g(a->mu);
    if (a->recorded == 0) return CUDA_ERROR_INVALID_HANDLE;
    if (a->completed < a->recorded) return CUDA_ERROR_NOT_READY;
    ta = a->time_ms;
  }
  {
    std::lock_guard<std::mutex> g(b->mu);
    if (b->recorded == 0) return CUDA_ERROR_INVALID_HANDLE;
    if (b->completed < b->recorded) return CUDA_ERROR_NOT_READY;
    tb = b->time_ms;
  }
  *ms = static_cast<float>(tb - ta);
  return CUDA_SUCCESS;
}
