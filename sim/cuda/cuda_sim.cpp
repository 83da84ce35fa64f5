// The CPU emulation of the CUDA driver API (libcuda.so.1): the subset that the fr agent and the
// emulated training jobs use. "Device memory" is host memory, a device pointer is the host
// address, and every stream is a worker thread that runs its queued work strictly in order, so
// work on a stream starts only when the stream reaches it and finishes when the host function
// returns, exactly the ordering a GPU gives. The file is compiled against the real cuda.h so the
// signatures and the exported names (cuda.h maps e.g. cuStreamWriteValue64 to
// cuStreamWriteValue64_v2) are the ones real programs link against; plain-name forwarders sit at
// the end.
//
// Global state is allocated once and never freed: stream threads may still be running (or be
// stalled forever) when the process exits, and no static destructor may pull state from under them.

#include <cuda.h>
#include <dlfcn.h>
#include <fr_sim.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#define FRSIM_API extern "C" __attribute__((visibility("default")))

// Capture (graph) and stream state are declared first so the graph can hold stream work.
// A captured piece of work: either fixed work, or a `prepare` that the host runs at each graph
// launch to make that launch's work (what a captured NCCL call needs: a new sequence number per
// launch, given in host order).
struct GraphItem {
  std::function<void()> run;
  std::function<std::function<void()>()> prepare;
};
struct CUgraph_st {
  std::vector<GraphItem> items;
};
struct CUgraphExec_st {
  std::vector<GraphItem> items;
};

struct CUctx_st {
  uint32_t magic;
  int device;
  bool primary;
  unsigned flags;
};

struct CUstream_st {
  uint32_t magic = 0;
  int device = 0;
  CUcontext ctx = nullptr;
  unsigned flags = 0;
  int priority = 0;
  unsigned long long id = 0;
  std::mutex mu;
  std::condition_variable work_cv;  // worker waits for work
  std::condition_variable done_cv;  // synchronizers wait for progress
  std::deque<std::function<void()>> queue;
  uint64_t enqueued = 0;
  uint64_t finished = 0;
  bool destroyed = false;
  // Capture state, guarded by mu.
  CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
  CUgraph graph = nullptr;
  unsigned long long capture_id = 0;
};

struct CUevent_st {
  uint32_t magic = 0;
  unsigned flags = 0;
  std::mutex mu;
  std::condition_variable cv;
  uint64_t recorded = 0;   // records issued by the host
  uint64_t completed = 0;  // highest record the stream has reached
  double time_ms = 0;      // host clock when the last completed record ran
};

namespace frsim {
namespace {

constexpr uint32_t kCtxMagic = 0x43545831;     // "CTX1"
constexpr uint32_t kStreamMagic = 0x53545231;  // "STR1"
constexpr uint32_t kEventMagic = 0x45565431;   // "EVT1"

double now_ms() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

// Sleeps a little longer each call, up to 2 ms: the wait loops of the emulation never spin a core.
struct Backoff {
  unsigned us = 1;
  void pause() {
    if (us < 4) {
      sched_yield();
    } else {
      usleep(us);
    }
    us = us < 2000 ? us * 2 : 2000;
  }
};

struct State {
  std::mutex mu;
  bool initialized = false;
  std::vector<int> visible;  // physical device numbers
  std::vector<CUctx_st*> primary;
  std::vector<int> primary_refs;
  std::unordered_map<CUstream, std::shared_ptr<CUstream_st>> streams;
  std::unordered_map<CUevent, std::shared_ptr<CUevent_st>> events;
  std::unordered_map<CUcontext, CUctx_st*> contexts;
  std::vector<CUctx_st*> retired;  // destroyed contexts: streams made in them may still point there
  std::unordered_map<CUgraph, CUgraph_st*> graphs;
  std::unordered_map<CUgraphExec, CUgraphExec_st*> execs;
  std::map<uintptr_t, size_t> host_ranges;  // registered or host-allocated: start -> size
  std::map<uintptr_t, size_t> dev_allocs;   // cuMemAlloc: start -> size
  std::shared_ptr<CUstream_st> legacy;
  unsigned long long next_stream_id = 1;
  unsigned long long next_capture_id = 1;
};

thread_local std::vector<CUcontext> tls_ctx_stack;

// A forked child has none of the parent's stream threads and may inherit a locked mutex: it starts
// over with a fresh state, and the parent's handles are invalid there (as the driver refuses to
// work in a forked child until it initializes again).
std::atomic<State*> g_state{nullptr};
void reset_in_child() {
  g_state.store(new State());
  tls_ctx_stack.clear();
}

State& state() {
  State* s = g_state.load(std::memory_order_acquire);
  if (s != nullptr) return *s;
  static std::once_flag once;
  std::call_once(once, [] {
    g_state.store(new State());
    pthread_atfork(nullptr, nullptr, reset_in_child);
  });
  return *g_state.load(std::memory_order_acquire);
}

std::vector<int> parse_visible() {
  std::vector<int> out;
  const char* cvd = getenv("CUDA_VISIBLE_DEVICES");
  if (cvd != nullptr && *cvd != '\0') {
    const char* p = cvd;
    while (*p != '\0') {
      char* end = nullptr;
      long v = strtol(p, &end, 10);
      if (end == p || v < 0) break;  // as the real driver: stop at the first invalid entry
      out.push_back(static_cast<int>(v));
      p = end;
      if (*p == ',') ++p;
      else break;
    }
    return out;
  }
  const char* dev = getenv("FRSIM_DEVICE");
  long v = dev != nullptr ? strtol(dev, nullptr, 10) : 0;
  out.push_back(v >= 0 ? static_cast<int>(v) : 0);
  return out;
}

// Called with state().mu held.
void ensure_init_locked(State& s) {
  if (s.initialized) return;
  s.visible = parse_visible();
  for (size_t i = 0; i < s.visible.size(); ++i) {
    auto* c = new CUctx_st{kCtxMagic, static_cast<int>(i), true, 0};
    s.primary.push_back(c);
    s.primary_refs.push_back(0);
    s.contexts[c] = c;
  }
  s.initialized = true;
}

State& ready() {
  State& s = state();
  std::lock_guard<std::mutex> g(s.mu);
  ensure_init_locked(s);
  return s;
}

void worker_main(std::shared_ptr<CUstream_st> st) {
  char name[16];
  snprintf(name, sizeof name, "frsim-strm%llu", st->id);
  pthread_setname_np(pthread_self(), name);
  std::unique_lock<std::mutex> lk(st->mu);
  for (;;) {
    st->work_cv.wait(lk, [&] { return !st->queue.empty() || st->destroyed; });
    if (st->queue.empty()) break;  // destroyed and drained
    std::function<void()>& item = st->queue.front();
    lk.unlock();
    item();
    item = nullptr;  // drop what the work owns before the stream reports it finished
    lk.lock();
    st->queue.pop_front();
    ++st->finished;
    st->done_cv.notify_all();
  }
}

std::shared_ptr<CUstream_st> make_stream(int device, CUcontext ctx, unsigned flags, int prio) {
  auto st = std::make_shared<CUstream_st>();
  st->magic = kStreamMagic;
  st->device = device;
  st->ctx = ctx;
  st->flags = flags;
  st->priority = prio;
  {
    State& s = state();
    std::lock_guard<std::mutex> g(s.mu);
    st->id = s.next_stream_id++;
  }
  std::thread(worker_main, st).detach();
  return st;
}

int current_device() {
  if (!tls_ctx_stack.empty() && tls_ctx_stack.back() != nullptr) return tls_ctx_stack.back()->device;
  return 0;
}

// Resolves a stream handle (NULL, CU_STREAM_LEGACY and CU_STREAM_PER_THREAD mean the one default
// stream of the process); nullptr for a handle that is not a live stream.
std::shared_ptr<CUstream_st> get_stream(CUstream h) {
  State& s = ready();
  if (h == nullptr || h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD) {
    std::unique_lock<std::mutex> g(s.mu);
    if (!s.legacy) {
      g.unlock();
      auto st = make_stream(0, s.primary.empty() ? nullptr : s.primary[0], 0, 0);
      g.lock();
      if (!s.legacy) s.legacy = st;
      else {
        std::lock_guard<std::mutex> sg(st->mu);
        st->destroyed = true;
        st->work_cv.notify_all();
      }
    }
    return s.legacy;
  }
  std::lock_guard<std::mutex> g(s.mu);
  auto it = s.streams.find(h);
  return it == s.streams.end() ? nullptr : it->second;
}

std::shared_ptr<CUevent_st> get_event(CUevent h) {
  State& s = ready();
  std::lock_guard<std::mutex> g(s.mu);
  auto it = s.events.find(h);
  return it == s.events.end() ? nullptr : it->second;
}

// Queues work on a stream, or appends it to the graph being captured. Returns the ticket the
// stream reaches when this work is finished (0 when captured). `run_if_idle` is for tiny,
// non-blocking work (memory writes): on an idle stream it runs at once on the caller's thread,
// as a GPU would execute it at once, which spares a wake-up of the stream's worker.
CUresult enqueue(const std::shared_ptr<CUstream_st>& st, std::function<void()> fn,
                 uint64_t* ticket = nullptr, bool run_if_idle = false) {
  std::lock_guard<std::mutex> g(st->mu);
  if (st->destroyed) return CUDA_ERROR_INVALID_HANDLE;
  if (st->capture == CU_STREAM_CAPTURE_STATUS_ACTIVE) {
    st->graph->items.push_back(GraphItem{std::move(fn), nullptr});
    if (ticket) *ticket = 0;
    return CUDA_SUCCESS;
  }
  if (run_if_idle && st->queue.empty()) {  // the worker holds an item at the front while running it
    fn();
    ++st->enqueued;
    ++st->finished;
    if (ticket) *ticket = st->enqueued;
    st->done_cv.notify_all();
    return CUDA_SUCCESS;
  }
  st->queue.push_back(std::move(fn));
  ++st->enqueued;
  if (ticket) *ticket = st->enqueued;
  st->work_cv.notify_one();
  return CUDA_SUCCESS;
}

// Work made by `prepare` on the host now, or at each launch of the graph being captured.
CUresult enqueue_prepared(const std::shared_ptr<CUstream_st>& st, std::function<std::function<void()>()> prepare) {
  {
    std::lock_guard<std::mutex> g(st->mu);
    if (st->destroyed) return CUDA_ERROR_INVALID_HANDLE;
    if (st->capture == CU_STREAM_CAPTURE_STATUS_ACTIVE) {
      st->graph->items.push_back(GraphItem{nullptr, std::move(prepare)});
      return CUDA_SUCCESS;
    }
  }
  return enqueue(st, prepare());
}

void wait_stream(const std::shared_ptr<CUstream_st>& st) {
  std::unique_lock<std::mutex> lk(st->mu);
  uint64_t target = st->enqueued;
  st->done_cv.wait(lk, [&] { return st->finished >= target; });
}

bool addr_is_host_mapped(uintptr_t p, size_t len) {
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

bool wait_value_met(uint64_t cur, uint64_t value, unsigned flags, bool is64) {
  switch (flags & 0xf) {
    case CU_STREAM_WAIT_VALUE_GEQ:
      return is64 ? static_cast<int64_t>(cur - value) >= 0
                  : static_cast<int32_t>(static_cast<uint32_t>(cur) - static_cast<uint32_t>(value)) >= 0;
    case CU_STREAM_WAIT_VALUE_EQ:
      return cur == value;
    case CU_STREAM_WAIT_VALUE_AND:
      return (cur & value) != 0;
    case CU_STREAM_WAIT_VALUE_NOR:
      return is64 ? ~(cur | value) != 0
                  : static_cast<uint32_t>(~(cur | value)) != 0;
    default:
      return true;
  }
}

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
    {CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready"},
    {CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED",
     "part or all of the requested memory range is already mapped"},
    {CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED",
     "pointer does not correspond to a registered memory region"},
    {CUDA_ERROR_CONTEXT_ALREADY_IN_USE, "CUDA_ERROR_CONTEXT_ALREADY_IN_USE", "context already in use"},
    {CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED",
     "operation not permitted when stream is capturing"},
    {CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED",
     "operation failed due to a previous error during capture"},
    {CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD, "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD",
     "attempted to end capture from the wrong thread"},
    {CUDA_ERROR_ILLEGAL_STATE, "CUDA_ERROR_ILLEGAL_STATE", "the operation cannot be performed in the present state"},
    {CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

}  // namespace
}  // namespace frsim

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
  if (ordinal < 0 || ordinal >= static_cast<int>(ready().visible.size())) return CUDA_ERROR_INVALID_DEVICE;
  *device = ordinal;
  return CUDA_SUCCESS;
}

static bool valid_device(CUdevice d) { return d >= 0 && d < static_cast<int>(ready().visible.size()); }

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
    case CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS: *pi = 1; break;
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

static CUresult create_ctx(CUcontext* pctx, unsigned flags, CUdevice dev) {
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

FRSIM_API CUresult cuCtxCreate_v4(CUcontext* pctx, CUctxCreateParams* params, unsigned int flags, CUdevice dev) {
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
  if (tls_ctx_stack.empty()) tls_ctx_stack.push_back(ctx);
  else tls_ctx_stack.back() = ctx;
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

FRSIM_API CUresult cuCtxSynchronize(void) {
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

// ---- streams -----------------------------------------------------------------------------------

FRSIM_API CUresult cuStreamCreateWithPriority(CUstream* ph, unsigned int flags, int priority) {
  if (ph == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (flags & ~static_cast<unsigned>(CU_STREAM_NON_BLOCKING)) return CUDA_ERROR_INVALID_VALUE;
  State& s = ready();
  CUcontext ctx = tls_ctx_stack.empty() ? nullptr : tls_ctx_stack.back();
  auto st = make_stream(current_device(), ctx, flags, priority < -5 ? -5 : (priority > 0 ? 0 : priority));
  std::lock_guard<std::mutex> g(s.mu);
  s.streams[st.get()] = st;
  *ph = st.get();
  return CUDA_SUCCESS;
}

FRSIM_API CUresult cuStreamCreate(CUstream* ph, unsigned int flags) {
  return cuStreamCreateWithPriority(ph, flags, 0);
}

FRSIM_API CUresult cuStreamDestroy_v2(CUstream h) {
  if (h == nullptr || h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD) return CUDA_ERROR_INVALID_HANDLE;
  std::shared_ptr<CUstream_st> st;
  {
    State& s = ready();
    std::lock_guard<std::mutex> g(s.mu);
    auto it = s.streams.find(h);
    if (it == s.streams.end()) return CUDA_ERROR_INVALID_HANDLE;
    st = it->second;
    s.streams.erase(it);
  }
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
    if (st->capture == CU_STREAM_CAPTURE_STATUS_ACTIVE) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  }
  wait_stream(st);
  return CUDA_SUCCESS;
}

FRSIM_API CUresult cuStreamQuery(CUstream h) {
  auto st = get_stream(h);
  if (!st) return CUDA_ERROR_INVALID_HANDLE;
  std::lock_guard<std::mutex> g(st->mu);
  if (st->capture == CU_STREAM_CAPTURE_STATUS_ACTIVE) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
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

FRSIM_API CUresult cuStreamAddCallback(CUstream h, CUstreamCallback cb, void* user, unsigned int flags) {
  if (cb == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  auto st = get_stream(h);
  if (!st) return CUDA_ERROR_INVALID_HANDLE;
  CUstream handle = h;
  return enqueue(st, [cb, user, handle] { cb(handle, CUDA_SUCCESS, user); });
}

// ---- stream memory operations --------------------------------------------------------------------

static CUresult check_mem_op(CUdeviceptr addr, size_t len) {
  if (addr == 0 || addr % len != 0) return CUDA_ERROR_INVALID_VALUE;
  if (!addr_is_host_mapped(static_cast<uintptr_t>(addr), len)) return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}

FRSIM_API CUresult cuStreamWriteValue64_v2(CUstream h, CUdeviceptr addr, cuuint64_t value, unsigned int flags) {
  (void)flags;
  auto st = get_stream(h);
  if (!st) return CUDA_ERROR_INVALID_HANDLE;
  if (CUresult r = check_mem_op(addr, 8); r != CUDA_SUCCESS) return r;
  auto* p = reinterpret_cast<uint64_t*>(static_cast<uintptr_t>(addr));
  return enqueue(st, [p, value] { __atomic_store_n(p, value, __ATOMIC_SEQ_CST); }, nullptr, true);
}

FRSIM_API CUresult cuStreamWriteValue32_v2(CUstream h, CUdeviceptr addr, cuuint32_t value, unsigned int flags) {
  (void)flags;
  auto st = get_stream(h);
  if (!st) return CUDA_ERROR_INVALID_HANDLE;
  if (CUresult r = check_mem_op(addr, 4); r != CUDA_SUCCESS) return r;
  auto* p = reinterpret_cast<uint32_t*>(static_cast<uintptr_t>(addr));
  return enqueue(st, [p, value] { __atomic_store_n(p, value, __ATOMIC_SEQ_CST); }, nullptr, true);
}

FRSIM_API CUresult cuStreamWaitValue64_v2(CUstream h, CUdeviceptr addr, cuuint64_t value, unsigned int flags) {
  auto st = get_stream(h);
  if (!st) return CUDA_ERROR_INVALID_HANDLE;
  if (CUresult r = check_mem_op(addr, 8); r != CUDA_SUCCESS) return r;
  if ((flags & 0xf) > CU_STREAM_WAIT_VALUE_NOR) return CUDA_ERROR_INVALID_VALUE;
  auto* p = reinterpret_cast<const uint64_t*>(static_cast<uintptr_t>(addr));
  return enqueue(st, [p, value, flags] {
    Backoff b;
    while (!wait_value_met(__atomic_load_n(p, __ATOMIC_ACQUIRE), value, flags, true)) b.pause();
  });
}

FRSIM_API CUresult cuStreamWaitValue32_v2(CUstream h, CUdeviceptr addr, cuuint32_t value, unsigned int flags) {
  auto st = get_stream(h);
  if (!st) return CUDA_ERROR_INVALID_HANDLE;
  if (CUresult r = check_mem_op(addr, 4); r != CUDA_SUCCESS) return r;
  if ((flags & 0xf) > CU_STREAM_WAIT_VALUE_NOR) return CUDA_ERROR_INVALID_VALUE;
  auto* p = reinterpret_cast<const uint32_t*>(static_cast<uintptr_t>(addr));
  return enqueue(st, [p, value, flags] {
    Backoff b;
    while (!wait_value_met(__atomic_load_n(p, __ATOMIC_ACQUIRE), value, flags, false)) b.pause();
  });
}

// ---- stream capture and graphs ---------------------------------------------------------------------

FRSIM_API CUresult cuStreamBeginCapture_v2(CUstream h, CUstreamCaptureMode mode) {
  (void)mode;
  if (h == nullptr || h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  auto st = get_stream(h);
  if (!st) return CUDA_ERROR_INVALID_HANDLE;
  State& s = state();
  unsigned long long id;
  {
    std::lock_guard<std::mutex> g(s.mu);
    id = s.next_capture_id++;
  }
  std::lock_guard<std::mutex> g(st->mu);
  if (st->capture != CU_STREAM_CAPTURE_STATUS_NONE) return CUDA_ERROR_ILLEGAL_STATE;
  st->capture = CU_STREAM_CAPTURE_STATUS_ACTIVE;
  st->graph = new CUgraph_st();
  st->capture_id = id;
  return CUDA_SUCCESS;
}

FRSIM_API CUresult cuStreamEndCapture(CUstream h, CUgraph* graph) {
  if (graph == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto st = get_stream(h);
  if (!st) return CUDA_ERROR_INVALID_HANDLE;
  CUgraph g;
  {
    std::lock_guard<std::mutex> lk(st->mu);
    if (st->capture != CU_STREAM_CAPTURE_STATUS_ACTIVE) return CUDA_ERROR_ILLEGAL_STATE;
    g = st->graph;
    st->graph = nullptr;
    st->capture = CU_STREAM_CAPTURE_STATUS_NONE;
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

FRSIM_API CUresult cuStreamGetCaptureInfo_v3(CUstream h, CUstreamCaptureStatus* status, cuuint64_t* id,
                                             CUgraph* graph, const CUgraphNode** deps,
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

FRSIM_API CUresult cuGraphInstantiateWithFlags(CUgraphExec* exec, CUgraph graph, unsigned long long flags) {
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
    if (st->capture == CU_STREAM_CAPTURE_STATUS_ACTIVE) return CUDA_SUCCESS;  // a capture node; nothing recorded now
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

// ---- memory ----------------------------------------------------------------------------------------

static bool overlaps(const std::map<uintptr_t, size_t>& m, uintptr_t p, size_t n) {
  auto it = m.lower_bound(p + n);
  if (it == m.begin()) return false;
  --it;
  return it->first + it->second > p;
}

FRSIM_API CUresult cuMemHostRegister_v2(void* p, size_t bytes, unsigned int flags) {
  (void)flags;
  if (p == nullptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  State& s = ready();
  std::lock_guard<std::mutex> g(s.mu);
  auto a = reinterpret_cast<uintptr_t>(p);
  if (overlaps(s.host_ranges, a, bytes)) return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
  s.host_ranges[a] = bytes;
  return CUDA_SUCCESS;
}

FRSIM_API CUresult cuMemHostUnregister(void* p) {
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
  void* p = nullptr;
  if (posix_memalign(&p, 4096, bytes) != 0) return CUDA_ERROR_OUT_OF_MEMORY;
  State& s = ready();
  std::lock_guard<std::mutex> g(s.mu);
  s.host_ranges[reinterpret_cast<uintptr_t>(p)] = bytes;
  *pp = p;
  return CUDA_SUCCESS;
}

FRSIM_API CUresult cuMemAllocHost_v2(void** pp, size_t bytes) { return cuMemHostAlloc(pp, bytes, 0); }

FRSIM_API CUresult cuMemFreeHost(void* p) {
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
  void* p = nullptr;
  if (posix_memalign(&p, 256, bytes) != 0) return CUDA_ERROR_OUT_OF_MEMORY;
  State& s = ready();
  std::lock_guard<std::mutex> g(s.mu);
  s.dev_allocs[reinterpret_cast<uintptr_t>(p)] = bytes;
  *dptr = reinterpret_cast<uintptr_t>(p);
  return CUDA_SUCCESS;
}

FRSIM_API CUresult cuMemFree_v2(CUdeviceptr dptr) {
  if (dptr == 0) return CUDA_SUCCESS;
  State& s = ready();
  {
    std::lock_guard<std::mutex> g(s.mu);
    auto it = s.dev_allocs.find(static_cast<uintptr_t>(dptr));
    if (it == s.dev_allocs.end()) return CUDA_ERROR_INVALID_VALUE;
    s.dev_allocs.erase(it);
  }
  free(reinterpret_cast<void*>(static_cast<uintptr_t>(dptr)));
  return CUDA_SUCCESS;
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

FRSIM_API CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n) { return sync_copy(FRSIM_PTR(dst), FRSIM_PTR(src), n); }
FRSIM_API CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, size_t n) { return sync_copy(FRSIM_PTR(dst), src, n); }
FRSIM_API CUresult cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, size_t n) { return sync_copy(dst, FRSIM_PTR(src), n); }
FRSIM_API CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n) { return sync_copy(FRSIM_PTR(dst), FRSIM_PTR(src), n); }
FRSIM_API CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream h) { return async_copy(FRSIM_PTR(dst), FRSIM_PTR(src), n, h); }
FRSIM_API CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t n, CUstream h) { return async_copy(FRSIM_PTR(dst), src, n, h); }
FRSIM_API CUresult cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, size_t n, CUstream h) { return async_copy(dst, FRSIM_PTR(src), n, h); }
FRSIM_API CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream h) { return async_copy(FRSIM_PTR(dst), FRSIM_PTR(src), n, h); }

FRSIM_API CUresult cuMemsetD8_v2(CUdeviceptr dst, unsigned char v, size_t n) {
  if (dst == 0 && n != 0) return CUDA_ERROR_INVALID_VALUE;
  wait_stream(get_stream(nullptr));
  memset(FRSIM_PTR(dst), v, n);
  return CUDA_SUCCESS;
}

FRSIM_API CUresult cuMemsetD32_v2(CUdeviceptr dst, unsigned int v, size_t n) {
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

// ---- the emulation-only API (fr_sim.h) ----------------------------------------------------------------

FRSIM_API CUresult frsim_stream_launch(CUstream h, frsim_kernel_fn fn, void* arg) {
  if (fn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto st = get_stream(h);
  if (!st) return CUDA_ERROR_INVALID_HANDLE;
  return enqueue(st, [fn, arg] { fn(arg); });
}

FRSIM_API CUresult frsim_stream_launch_owned(CUstream h, frsim_kernel_fn fn, void* arg, void (*release)(void*)) {
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
FRSIM_API CUresult frsim_internal_launch_prepared(CUstream h, std::function<std::function<void()>()> prepare) {
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
    if (dladdr(reinterpret_cast<void*>(&cuInit), &info) == 0 || info.dli_fname == nullptr) return static_cast<void*>(nullptr);
    return dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD);
  }();
  return h;
}

FRSIM_API CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version, cuuint64_t flags,
                                       CUdriverProcAddressQueryResult* status) {
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
// were built that way, find these forwarders; the per-thread default stream is the legacy one here.

#define FRSIM_FORWARD(sym, target, params, args)                                    \
  extern "C" __attribute__((visibility("default"))) CUresult frsim_fwd_##sym params \
      __asm__(#sym);                                                                \
  CUresult frsim_fwd_##sym params { return target args; }

FRSIM_FORWARD(cuStreamWriteValue64, cuStreamWriteValue64_v2, (CUstream s, CUdeviceptr a, cuuint64_t v, unsigned f), (s, a, v, f))
FRSIM_FORWARD(cuStreamWriteValue32, cuStreamWriteValue32_v2, (CUstream s, CUdeviceptr a, cuuint32_t v, unsigned f), (s, a, v, f))
FRSIM_FORWARD(cuStreamWaitValue64, cuStreamWaitValue64_v2, (CUstream s, CUdeviceptr a, cuuint64_t v, unsigned f), (s, a, v, f))
FRSIM_FORWARD(cuStreamWaitValue32, cuStreamWaitValue32_v2, (CUstream s, CUdeviceptr a, cuuint32_t v, unsigned f), (s, a, v, f))
FRSIM_FORWARD(cuStreamWriteValue64_v2_ptsz, cuStreamWriteValue64_v2, (CUstream s, CUdeviceptr a, cuuint64_t v, unsigned f), (s, a, v, f))
FRSIM_FORWARD(cuStreamWriteValue32_v2_ptsz, cuStreamWriteValue32_v2, (CUstream s, CUdeviceptr a, cuuint32_t v, unsigned f), (s, a, v, f))
FRSIM_FORWARD(cuStreamWaitValue64_v2_ptsz, cuStreamWaitValue64_v2, (CUstream s, CUdeviceptr a, cuuint64_t v, unsigned f), (s, a, v, f))
FRSIM_FORWARD(cuStreamWaitValue32_v2_ptsz, cuStreamWaitValue32_v2, (CUstream s, CUdeviceptr a, cuuint32_t v, unsigned f), (s, a, v, f))
FRSIM_FORWARD(cuMemHostGetDevicePointer, cuMemHostGetDevicePointer_v2, (CUdeviceptr * d, void* p, unsigned f), (d, p, f))
FRSIM_FORWARD(cuMemHostRegister, cuMemHostRegister_v2, (void* p, size_t n, unsigned f), (p, n, f))
FRSIM_FORWARD(cuCtxDestroy, cuCtxDestroy_v2, (CUcontext c), (c))
FRSIM_FORWARD(cuCtxPushCurrent, cuCtxPushCurrent_v2, (CUcontext c), (c))
FRSIM_FORWARD(cuCtxPopCurrent, cuCtxPopCurrent_v2, (CUcontext * c), (c))
FRSIM_FORWARD(cuDevicePrimaryCtxRelease, cuDevicePrimaryCtxRelease_v2, (CUdevice d), (d))
FRSIM_FORWARD(cuStreamDestroy, cuStreamDestroy_v2, (CUstream s), (s))
FRSIM_FORWARD(cuEventDestroy, cuEventDestroy_v2, (CUevent e), (e))
FRSIM_FORWARD(cuEventElapsedTime, cuEventElapsedTime_v2, (float* ms, CUevent a, CUevent b), (ms, a, b))
FRSIM_FORWARD(cuDeviceGetUuid, cuDeviceGetUuid_v2, (CUuuid * u, CUdevice d), (u, d))
FRSIM_FORWARD(cuStreamQuery_ptsz, cuStreamQuery, (CUstream s), (s))
FRSIM_FORWARD(cuStreamSynchronize_ptsz, cuStreamSynchronize, (CUstream s), (s))
FRSIM_FORWARD(cuStreamWaitEvent_ptsz, cuStreamWaitEvent, (CUstream s, CUevent e, unsigned f), (s, e, f))
FRSIM_FORWARD(cuStreamIsCapturing_ptsz, cuStreamIsCapturing, (CUstream s, CUstreamCaptureStatus * c), (s, c))
FRSIM_FORWARD(cuStreamEndCapture_ptsz, cuStreamEndCapture, (CUstream s, CUgraph * g), (s, g))
FRSIM_FORWARD(cuStreamBeginCapture_v2_ptsz, cuStreamBeginCapture_v2, (CUstream s, CUstreamCaptureMode m), (s, m))
FRSIM_FORWARD(cuEventRecord_ptsz, cuEventRecord, (CUevent e, CUstream s), (e, s))
FRSIM_FORWARD(cuLaunchHostFunc_ptsz, cuLaunchHostFunc, (CUstream s, CUhostFn f, void* u), (s, f, u))
FRSIM_FORWARD(cuGraphLaunch_ptsz, cuGraphLaunch, (CUgraphExec g, CUstream s), (g, s))
FRSIM_FORWARD(cuGraphInstantiate, cuGraphInstantiateWithFlags, (CUgraphExec * e, CUgraph g, unsigned long long f), (e, g, f))
FRSIM_FORWARD(cuStreamGetCaptureInfo_v3_ptsz, cuStreamGetCaptureInfo_v3,
              (CUstream s, CUstreamCaptureStatus* c, cuuint64_t* i, CUgraph* g, const CUgraphNode** d,
               const CUgraphEdgeData** e, size_t* n),
              (s, c, i, g, d, e, n))

// Entry points whose plain name has an older signature.
FRSIM_FORWARD(cuCtxCreate, create_ctx, (CUcontext * c, unsigned f, CUdevice d), (c, f, d))
FRSIM_FORWARD(cuCtxCreate_v2, create_ctx, (CUcontext * c, unsigned f, CUdevice d), (c, f, d))
FRSIM_FORWARD(cuStreamBeginCapture, cuStreamBeginCapture_v2, (CUstream s), (s, CU_STREAM_CAPTURE_MODE_GLOBAL))
FRSIM_FORWARD(cuStreamGetCaptureInfo, cuStreamGetCaptureInfo_v3, (CUstream s, CUstreamCaptureStatus * c, cuuint64_t * i),
              (s, c, i, nullptr, nullptr, nullptr, nullptr))
FRSIM_FORWARD(cuStreamGetCaptureInfo_v2, cuStreamGetCaptureInfo_v3,
              (CUstream s, CUstreamCaptureStatus* c, cuuint64_t* i, CUgraph* g, const CUgraphNode** d, size_t* n),
              (s, c, i, g, d, nullptr, n))
FRSIM_FORWARD(cuGetProcAddress, cuGetProcAddress_v2, (const char* sym, void** pfn, int v, cuuint64_t f),
              (sym, pfn, v, f, nullptr))
