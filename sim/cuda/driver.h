// Internal declarations of the CUDA driver emulation (libcuda.so.1), shared by its files: the
// handle structures behind CUstream, CUevent, CUcontext, CUgraph and CUgraphExec, the process-wide
// state, and the stream machinery every entry point queues its work through. Nothing here is
// exported (exports.map keeps cu* and frsim_* only).
//
// The emulation covers the subset of the driver API that the fr agent and the emulated training
// jobs use. "Device memory" is host memory, a device pointer is the host address, and every stream
// is a worker thread that runs its queued work strictly in order, so work on a stream starts only
// when the stream reaches it and finishes when the host function returns, exactly the ordering a
// GPU gives. The files are compiled against the real cuda.h so the signatures and the exported
// names (cuda.h maps e.g. cuStreamWriteValue64 to cuStreamWriteValue64_v2) are the ones real
// programs link against; names.cpp adds the plain-name forwarders.
//
// Global state is allocated once and never freed: stream threads may still be running (or be
// stalled forever) when the process exits, and no static destructor may pull state from under them.
#pragma once

#include <cuda.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
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
  bool legacy = false;      // the NULL / CU_STREAM_LEGACY stream
  bool per_thread = false;  // a thread's CU_STREAM_PER_THREAD stream
  // Capture state, guarded by mu.
  CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
  CUgraph graph = nullptr;
  unsigned long long capture_id = 0;
  CUstreamCaptureMode capture_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
  pid_t capture_tid = 0;  // the thread that began the capture
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

constexpr uint32_t kCtxMagic = 0x43545831;     // "CTX1"
constexpr uint32_t kStreamMagic = 0x53545231;  // "STR1"
constexpr uint32_t kEventMagic = 0x45565431;   // "EVT1"

inline double now_ms() {
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
  std::map<uintptr_t, size_t> host_ranges;    // registered or host-allocated: start -> size
  std::map<uintptr_t, size_t> dev_allocs;     // cuMemAlloc: start -> size
  std::map<uintptr_t, int> dev_alloc_device;  // cuMemAlloc: start -> device current then
  std::shared_ptr<CUstream_st> legacy;
  std::vector<std::weak_ptr<CUstream_st>> per_thread;  // every thread's per-thread stream
  std::vector<CUstream_st*> capturing;                 // streams with a capture begun, not ended
  unsigned long long next_stream_id = 1;
  unsigned long long next_capture_id = 1;
};

// The calling thread's context stack (cuCtxPushCurrent/PopCurrent); its top is the current context.
extern thread_local std::vector<CUcontext> tls_ctx_stack;

// The process-wide state, made on first use (a forked child gets a fresh one).
State& state();
// The state, with the devices and primary contexts set up (the emulation initializes itself).
State& ready();
// Whether d is the ordinal of a visible device.
bool valid_device(CUdevice d);
// The device of the calling thread's current context (0 without one).
int current_device();

std::shared_ptr<CUstream_st> make_stream(int device, CUcontext ctx, unsigned flags, int prio);
// Resolves a stream handle (NULL and CU_STREAM_LEGACY mean the legacy default stream of the
// process, CU_STREAM_PER_THREAD the calling thread's own default stream); nullptr for a handle
// that is not a live stream.
std::shared_ptr<CUstream_st> get_stream(CUstream h);
std::shared_ptr<CUevent_st> get_event(CUevent h);
// Queues work on a stream, or appends it to the graph being captured. Returns the ticket the
// stream reaches when this work is finished (0 when captured). `run_if_idle` is for tiny,
// non-blocking work (memory writes): on an idle stream it runs at once on the caller's thread,
// as a GPU would execute it at once, which spares a wake-up of the stream's worker.
CUresult enqueue(const std::shared_ptr<CUstream_st>& st, std::function<void()> fn,
                 uint64_t* ticket = nullptr, bool run_if_idle = false);
// Work made by `prepare` on the host now, or at each launch of the graph being captured.
CUresult enqueue_prepared(const std::shared_ptr<CUstream_st>& st,
                          std::function<std::function<void()>()> prepare);
// Waits until the stream has finished everything queued before the call.
void wait_stream(const std::shared_ptr<CUstream_st>& st);

// ---- capture rules and driver failures on demand (capture.cpp) ----------------------------------

// A potentially unsafe call (allocation, registration, synchronization) by the calling thread: as
// CUDA, it is refused with CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, and the captures that forbid it
// are invalidated, when the thread's capture mode (cuThreadExchangeStreamCaptureMode) is GLOBAL
// and another thread has a GLOBAL capture, or when the thread has a capture of its own that is not
// RELAXED. CUDA_SUCCESS when the call may go on.
CUresult capture_unsafe_call();
// Work on the legacy stream while a blocking stream captures would make an implicit dependency:
// CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, and those captures are invalidated.
CUresult capture_legacy_use();
// Ends a stream's capture (invalidated or not): it leaves the list of capturing streams.
void capture_forget(CUstream_st* st);
// Work a blocking stream's new item must wait for first (legacy stream semantics): the other
// streams' tickets at the time of the call. Empty when nothing is outstanding.
std::vector<std::pair<std::shared_ptr<CUstream_st>, uint64_t>> legacy_deps(
    const std::shared_ptr<CUstream_st>& st);

// Driver failures asked for with FRSIM_CU_FAIL (a comma list; sim/README.md).
enum class CuFail {
  kRegisterUnsupported,
  kRegisterNoContext,
  kWriteUnsupported,
  kWrite64Unsupported,
  kWriteNoContext
};
bool cu_fail(CuFail f);

// Whether [p, p + len) lies in registered, host-allocated or cuMemAlloc'ed memory (memory.cpp).
bool addr_is_host_mapped(uintptr_t p, size_t len);
// Makes a context of device `dev` and pushes it on the calling thread's stack (contexts.cpp).
CUresult create_ctx(CUcontext* pctx, unsigned flags, CUdevice dev);

}  // namespace frsim
