// The process-wide state of the CUDA driver emulation and the stream machinery: the visible
// devices (read once from CUDA_VISIBLE_DEVICES or FRSIM_DEVICE), the handle tables, the reset a
// forked child needs, and the worker thread behind every stream with the queue it drains. Every
// entry point in the other files reaches its streams and events through here.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include <atomic>
#include <thread>

#include "driver.h"

namespace frsim {

thread_local std::vector<CUcontext> tls_ctx_stack;

namespace {

// A forked child has none of the parent's stream threads and may inherit a locked mutex: it starts
// over with a fresh state, and the parent's handles are invalid there (as the driver refuses to
// work in a forked child until it initializes again).
std::atomic<State*> g_state{nullptr};
void reset_in_child() {
  g_state.store(new State());
  tls_ctx_stack.clear();
}

}  // namespace

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

namespace {

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
      if (*p == ',')
        ++p;
      else
        break;
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

}  // namespace

State& ready() {
  State& s = state();
  std::lock_guard<std::mutex> g(s.mu);
  ensure_init_locked(s);
  return s;
}

namespace {

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

}  // namespace

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
  if (!tls_ctx_stack.empty() && tls_ctx_stack.back() != nullptr)
    return tls_ctx_stack.back()->device;
  return 0;
}

namespace {
thread_local std::shared_ptr<CUstream_st> tls_per_thread;  // made on first use
}

std::shared_ptr<CUstream_st> get_stream(CUstream h) {
  State& s = ready();
  if (h == CU_STREAM_PER_THREAD) {
    if (!tls_per_thread) {
      auto st = make_stream(current_device(),
                            tls_ctx_stack.empty() ? nullptr : tls_ctx_stack.back(), 0, 0);
      st->per_thread = true;
      std::lock_guard<std::mutex> g(s.mu);
      s.per_thread.push_back(st);
      tls_per_thread = st;
    }
    return tls_per_thread;
  }
  if (h == nullptr || h == CU_STREAM_LEGACY) {
    std::unique_lock<std::mutex> g(s.mu);
    if (!s.legacy) {
      g.unlock();
      auto st = make_stream(0, s.primary.empty() ? nullptr : s.primary[0], 0, 0);
      st->legacy = true;
      g.lock();
      if (!s.legacy)
        s.legacy = st;
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

CUresult enqueue(const std::shared_ptr<CUstream_st>& st, std::function<void()> fn, uint64_t* ticket,
                 bool run_if_idle) {
  if (st->legacy)
    if (CUresult r = capture_legacy_use(); r != CUDA_SUCCESS) return r;
  // The legacy stream and the blocking streams wait for each other's earlier work.
  auto deps = legacy_deps(st);
  if (!deps.empty()) {
    run_if_idle = false;
    fn = [deps = std::move(deps), inner = std::move(fn)] {
      for (auto& [o, t] : deps) {
        std::unique_lock<std::mutex> lk(o->mu);
        o->done_cv.wait(lk, [&, t = t] { return o->finished >= t; });
      }
      inner();
    };
  }
  std::lock_guard<std::mutex> g(st->mu);
  if (st->destroyed) return CUDA_ERROR_INVALID_HANDLE;
  if (st->capture == CU_STREAM_CAPTURE_STATUS_INVALIDATED)
    return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
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

CUresult enqueue_prepared(const std::shared_ptr<CUstream_st>& st,
                          std::function<std::function<void()>()> prepare) {
  {
    std::lock_guard<std::mutex> g(st->mu);
    if (st->destroyed) return CUDA_ERROR_INVALID_HANDLE;
    if (st->capture == CU_STREAM_CAPTURE_STATUS_INVALIDATED)
      return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
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

bool valid_device(CUdevice d) { return d >= 0 && d < static_cast<int>(ready().visible.size()); }

}  // namespace frsim
