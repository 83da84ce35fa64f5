// Tests of the CUDA driver emulation (libcuda.so.1): streams run their work in order on worker
// threads, events and write-value markers take effect only when the stream reaches them, stalled
// kernels hold everything behind them, capture records instead of running, and bad handles or
// addresses get error codes.
#include <catch2/catch.hpp>
#include <cuda.h>
#include <fr_sim.h>
#include <dlfcn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <string>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include "replay_kernel.h"
#include "skip.h"

namespace {

struct Recorder {
  std::mutex mu;
  std::vector<int> seen;
};
struct Item {
  Recorder* rec;
  int id;
  int sleep_ms;
};

void record_item(void* p) {
  auto* it = static_cast<Item*>(p);
  if (it->sleep_ms) std::this_thread::sleep_for(std::chrono::milliseconds(it->sleep_ms));
  std::lock_guard<std::mutex> g(it->rec->mu);
  it->rec->seen.push_back(it->id);
}

// Polls cond for up to 10 s; the emulation is asynchronous, so results appear "soon".
template <typename F>
bool eventually(F cond) {
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < end) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return cond();
}

void hold_for(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

}  // namespace

TEST_CASE("devices and contexts", "[sim][cuda]") {
  REQUIRE(cuInit(0) == CUDA_SUCCESS);
  int count = 0, version = 0;
  REQUIRE(cuDeviceGetCount(&count) == CUDA_SUCCESS);
  CHECK(count == frsim_device_count());
  CHECK(count >= 1);
  REQUIRE(cuDriverGetVersion(&version) == CUDA_SUCCESS);
  CHECK(version == CUDA_VERSION);
  CUdevice dev;
  REQUIRE(cuDeviceGet(&dev, 0) == CUDA_SUCCESS);
  CHECK(cuDeviceGet(&dev, count) == CUDA_ERROR_INVALID_DEVICE);
  char name[64];
  REQUIRE(cuDeviceGetName(name, sizeof name, 0) == CUDA_SUCCESS);
  CHECK(std::string(name).find("FRSIM") == 0);
  CUcontext primary, cur;
  REQUIRE(cuDevicePrimaryCtxRetain(&primary, 0) == CUDA_SUCCESS);
  REQUIRE(cuCtxSetCurrent(primary) == CUDA_SUCCESS);
  REQUIRE(cuCtxGetCurrent(&cur) == CUDA_SUCCESS);
  CHECK(cur == primary);
  CUdevice d = -1;
  REQUIRE(cuCtxGetDevice(&d) == CUDA_SUCCESS);
  CHECK(d == 0);
  CUcontext mine;
  REQUIRE(cuCtxCreate(&mine, nullptr, 0, 0) == CUDA_SUCCESS);
  REQUIRE(cuCtxGetCurrent(&cur) == CUDA_SUCCESS);
  CHECK(cur == mine);
  CUcontext popped;
  REQUIRE(cuCtxPopCurrent(&popped) == CUDA_SUCCESS);
  CHECK(popped == mine);
  REQUIRE(cuCtxPushCurrent(mine) == CUDA_SUCCESS);
  REQUIRE(cuCtxPopCurrent(nullptr) == CUDA_SUCCESS);
  REQUIRE(cuCtxDestroy(mine) == CUDA_SUCCESS);
  CHECK(cuCtxDestroy(mine) == CUDA_ERROR_INVALID_CONTEXT);
  CHECK(cuDevicePrimaryCtxRelease(0) == CUDA_SUCCESS);
  CHECK(frsim_set_device(0) == CUDA_SUCCESS);
  CHECK(frsim_set_device(count) == CUDA_ERROR_INVALID_DEVICE);
  CHECK(frsim_current_device() == 0);
  const char* s = nullptr;
  REQUIRE(cuGetErrorName(CUDA_ERROR_NOT_READY, &s) == CUDA_SUCCESS);
  CHECK(std::string(s) == "CUDA_ERROR_NOT_READY");
  REQUIRE(cuGetErrorString(CUDA_ERROR_INVALID_HANDLE, &s) == CUDA_SUCCESS);
  CHECK(cuGetErrorString(static_cast<CUresult>(123456), &s) == CUDA_ERROR_INVALID_VALUE);
}

TEST_CASE("a stream runs its work in order, asynchronously", "[sim][cuda]") {
  CUstream s;
  REQUIRE(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS);
  Recorder rec;
  std::vector<Item> items;
  for (int i = 0; i < 20; ++i) items.push_back({&rec, i, i % 3 == 0 ? 5 : 0});
  // Everything is queued behind a gate the test holds: queueing returns while nothing has run.
  volatile uint32_t gate = 0;
  REQUIRE(frsim_stream_stall_until(s, &gate) == CUDA_SUCCESS);
  for (auto& it : items) REQUIRE(cuLaunchHostFunc(s, record_item, &it) == CUDA_SUCCESS);
  CHECK(cuStreamQuery(s) == CUDA_ERROR_NOT_READY);
  {
    std::lock_guard<std::mutex> g(rec.mu);
    CHECK(rec.seen.empty());
  }
  __atomic_store_n(const_cast<uint32_t*>(&gate), 1u, __ATOMIC_RELEASE);
  REQUIRE(cuStreamSynchronize(s) == CUDA_SUCCESS);
  REQUIRE(rec.seen.size() == 20);
  for (int i = 0; i < 20; ++i) CHECK(rec.seen[i] == i);
  CHECK(cuStreamQuery(s) == CUDA_SUCCESS);
  // The legacy stream (NULL) is a stream too.
  Item one{&rec, 99, 0};
  REQUIRE(frsim_stream_launch(nullptr, record_item, &one) == CUDA_SUCCESS);
  REQUIRE(cuStreamSynchronize(CU_STREAM_LEGACY) == CUDA_SUCCESS);
  CHECK(rec.seen.back() == 99);
  REQUIRE(cuStreamDestroy(s) == CUDA_SUCCESS);
  CHECK(cuStreamDestroy(s) == CUDA_ERROR_INVALID_HANDLE);
  CHECK(cuStreamQuery(s) == CUDA_ERROR_INVALID_HANDLE);
  CHECK(cuLaunchHostFunc(s, record_item, &one) == CUDA_ERROR_INVALID_HANDLE);
}

TEST_CASE("a stalled kernel holds everything queued behind it (watched for 100 ms)",
          "[sim][cuda]") {
  CUstream s;
  REQUIRE(cuStreamCreate(&s, 0) == CUDA_SUCCESS);
  volatile uint32_t release = 0;
  Recorder rec;
  Item after{&rec, 1, 0};
  REQUIRE(frsim_stream_stall_until(s, &release) == CUDA_SUCCESS);
  REQUIRE(cuLaunchHostFunc(s, record_item, &after) == CUDA_SUCCESS);
  uint64_t pending = 0;
  hold_for(100);
  REQUIRE(frsim_stream_pending(s, &pending) == CUDA_SUCCESS);
  CHECK(pending == 2);
  CHECK(cuStreamQuery(s) == CUDA_ERROR_NOT_READY);
  CHECK(rec.seen.empty());
  __atomic_store_n(const_cast<uint32_t*>(&release), 1u, __ATOMIC_RELEASE);
  REQUIRE(cuStreamSynchronize(s) == CUDA_SUCCESS);
  CHECK(rec.seen.size() == 1);
  // A timed stall.
  auto t0 = std::chrono::steady_clock::now();
  REQUIRE(frsim_stream_stall(s, 50) == CUDA_SUCCESS);
  REQUIRE(cuStreamSynchronize(s) == CUDA_SUCCESS);
  CHECK(std::chrono::steady_clock::now() - t0 >= std::chrono::milliseconds(50));
  cuStreamDestroy(s);
}

TEST_CASE("events complete when the stream reaches them (a stalled one stays pending for 50 ms)",
          "[sim][cuda]") {
  CUstream s;
  REQUIRE(cuStreamCreate(&s, 0) == CUDA_SUCCESS);
  CUevent a, b, nt;
  REQUIRE(cuEventCreate(&a, CU_EVENT_DEFAULT) == CUDA_SUCCESS);
  REQUIRE(cuEventCreate(&b, CU_EVENT_DEFAULT) == CUDA_SUCCESS);
  REQUIRE(cuEventCreate(&nt, CU_EVENT_DISABLE_TIMING) == CUDA_SUCCESS);
  CHECK(cuEventQuery(a) == CUDA_SUCCESS);  // never recorded
  volatile uint32_t release = 0;
  REQUIRE(cuEventRecord(a, s) == CUDA_SUCCESS);
  REQUIRE(frsim_stream_stall_until(s, &release) == CUDA_SUCCESS);
  REQUIRE(cuEventRecord(b, s) == CUDA_SUCCESS);
  REQUIRE(cuEventRecord(nt, s) == CUDA_SUCCESS);
  CHECK(eventually([&] { return cuEventQuery(a) == CUDA_SUCCESS; }));
  hold_for(50);
  CHECK(cuEventQuery(b) == CUDA_ERROR_NOT_READY);
  float ms = 0;
  CHECK(cuEventElapsedTime(&ms, a, b) == CUDA_ERROR_NOT_READY);
  // Another stream waiting on b waits for the stall too.
  CUstream s2;
  REQUIRE(cuStreamCreate(&s2, 0) == CUDA_SUCCESS);
  REQUIRE(cuStreamWaitEvent(s2, b, 0) == CUDA_SUCCESS);
  hold_for(30);
  CHECK(cuStreamQuery(s2) == CUDA_ERROR_NOT_READY);
  hold_for(20);
  __atomic_store_n(const_cast<uint32_t*>(&release), 1u, __ATOMIC_RELEASE);
  REQUIRE(cuEventSynchronize(b) == CUDA_SUCCESS);
  REQUIRE(cuStreamSynchronize(s2) == CUDA_SUCCESS);
  REQUIRE(cuEventElapsedTime(&ms, a, b) == CUDA_SUCCESS);
  CHECK(ms >= 40.0f);
  CHECK(cuEventElapsedTime(&ms, a, nt) == CUDA_ERROR_INVALID_HANDLE);
  REQUIRE(cuEventDestroy(a) == CUDA_SUCCESS);
  CHECK(cuEventQuery(a) == CUDA_ERROR_INVALID_HANDLE);
  cuEventDestroy(b);
  cuEventDestroy(nt);
  cuStreamDestroy(s);
  cuStreamDestroy(s2);
}

TEST_CASE("write-value markers are written in stream order", "[sim][cuda]") {
  // What the agent does: progress words in host-registered memory, written by the stream around
  // each operation. "started" appears only when the stream reaches the op, "completed" only
  // after the op (here a stalled kernel) has finished.
  alignas(64) static uint64_t words[8] = {};
  REQUIRE(cuMemHostRegister(words, sizeof words, CU_MEMHOSTREGISTER_DEVICEMAP) == CUDA_SUCCESS);
  CHECK(cuMemHostRegister(words, sizeof words, 0) == CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
  CUdeviceptr d;
  REQUIRE(cuMemHostGetDevicePointer(&d, words, 0) == CUDA_SUCCESS);
  CHECK(d == reinterpret_cast<uintptr_t>(words));
  CUstream s;
  REQUIRE(cuStreamCreate(&s, 0) == CUDA_SUCCESS);
  volatile uint32_t first = 0, second = 0;
  // op 1 waits behind a stalled kernel: neither marker may move.
  REQUIRE(frsim_stream_stall_until(s, &first) == CUDA_SUCCESS);
  REQUIRE(cuStreamWriteValue64(s, d, 1, 0) == CUDA_SUCCESS);      // started = 1
  REQUIRE(frsim_stream_stall_until(s, &second) == CUDA_SUCCESS);  // the "kernel" of op 1
  REQUIRE(cuStreamWriteValue64(s, d + 8, 1, 0) == CUDA_SUCCESS);  // completed = 1
  hold_for(50);
  CHECK(__atomic_load_n(&words[0], __ATOMIC_ACQUIRE) == 0);
  CHECK(__atomic_load_n(&words[1], __ATOMIC_ACQUIRE) == 0);
  __atomic_store_n(const_cast<uint32_t*>(&first), 1u, __ATOMIC_RELEASE);
  CHECK(eventually([&] { return __atomic_load_n(&words[0], __ATOMIC_ACQUIRE) == 1; }));
  hold_for(50);
  CHECK(__atomic_load_n(&words[1], __ATOMIC_ACQUIRE) == 0);  // still inside the op
  __atomic_store_n(const_cast<uint32_t*>(&second), 1u, __ATOMIC_RELEASE);
  REQUIRE(cuStreamSynchronize(s) == CUDA_SUCCESS);
  CHECK(words[1] == 1);
  // 32-bit writes, and a stream waiting on a value another thread writes.
  uint32_t* w32 = reinterpret_cast<uint32_t*>(&words[2]);
  REQUIRE(cuStreamWaitValue32(s, d + 16, 5, CU_STREAM_WAIT_VALUE_GEQ) == CUDA_SUCCESS);
  REQUIRE(cuStreamWriteValue32(s, d + 20, 7, 0) == CUDA_SUCCESS);
  hold_for(30);
  CHECK(w32[1] == 0);
  __atomic_store_n(w32, 5u, __ATOMIC_RELEASE);
  REQUIRE(cuStreamSynchronize(s) == CUDA_SUCCESS);
  CHECK(__atomic_load_n(&w32[1], __ATOMIC_ACQUIRE) == 7);
  REQUIRE(cuStreamWaitValue64(s, d + 24, 1, CU_STREAM_WAIT_VALUE_AND) == CUDA_SUCCESS);
  __atomic_store_n(&words[3], 3ull, __ATOMIC_RELEASE);
  REQUIRE(cuStreamSynchronize(s) == CUDA_SUCCESS);
  // Addresses outside registered or allocated memory are refused, never written.
  static uint64_t unregistered = 0;
  CHECK(cuStreamWriteValue64(s, reinterpret_cast<uintptr_t>(&unregistered), 1, 0) ==
        CUDA_ERROR_INVALID_VALUE);
  CHECK(cuStreamWriteValue64(s, d + 4, 1, 0) == CUDA_ERROR_INVALID_VALUE);  // misaligned
  CHECK(cuStreamWriteValue64(s, 0, 1, 0) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuMemHostGetDevicePointer(&d, &unregistered, 0) == CUDA_ERROR_INVALID_VALUE);
  REQUIRE(cuMemHostUnregister(words) == CUDA_SUCCESS);
  CHECK(cuMemHostUnregister(words) == CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
  // Device allocations are host memory, and markers may live there too.
  CUdeviceptr dm;
  REQUIRE(cuMemAlloc(&dm, 64) == CUDA_SUCCESS);
  REQUIRE(cuMemsetD8(dm, 0, 64) == CUDA_SUCCESS);
  REQUIRE(cuStreamWriteValue64(s, dm, 42, 0) == CUDA_SUCCESS);
  uint64_t back = 0;
  REQUIRE(cuStreamSynchronize(s) == CUDA_SUCCESS);
  REQUIRE(cuMemcpyDtoH(&back, dm, 8) == CUDA_SUCCESS);
  CHECK(back == 42);
  REQUIRE(cuMemFree(dm) == CUDA_SUCCESS);
  CHECK(cuMemFree(dm) == CUDA_ERROR_INVALID_VALUE);
  cuStreamDestroy(s);
}

TEST_CASE("stream capture records work instead of running it", "[sim][cuda]") {
  CUstream s;
  REQUIRE(cuStreamCreate(&s, 0) == CUDA_SUCCESS);
  CUstreamCaptureStatus st;
  REQUIRE(cuStreamIsCapturing(s, &st) == CUDA_SUCCESS);
  CHECK(st == CU_STREAM_CAPTURE_STATUS_NONE);
  Recorder rec;
  Item it{&rec, 7, 0};
  REQUIRE(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL) == CUDA_SUCCESS);
  REQUIRE(cuStreamIsCapturing(s, &st) == CUDA_SUCCESS);
  CHECK(st == CU_STREAM_CAPTURE_STATUS_ACTIVE);
  cuuint64_t id = 0;
  REQUIRE(cuStreamGetCaptureInfo(s, &st, &id, nullptr, nullptr, nullptr, nullptr) == CUDA_SUCCESS);
  CHECK(id != 0);
  REQUIRE(cuLaunchHostFunc(s, record_item, &it) == CUDA_SUCCESS);
  CUgraph g;
  REQUIRE(cuStreamEndCapture(s, &g) == CUDA_SUCCESS);
  hold_for(20);
  CHECK(rec.seen.empty());
  CUgraphExec ex;
  REQUIRE(cuGraphInstantiate(&ex, g, 0) == CUDA_SUCCESS);
  REQUIRE(cuGraphLaunch(ex, s) == CUDA_SUCCESS);
  REQUIRE(cuGraphLaunch(ex, s) == CUDA_SUCCESS);
  REQUIRE(cuStreamSynchronize(s) == CUDA_SUCCESS);
  CHECK(rec.seen.size() == 2);
  CHECK(cuStreamBeginCapture(nullptr, CU_STREAM_CAPTURE_MODE_GLOBAL) ==
        CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  REQUIRE(cuGraphExecDestroy(ex) == CUDA_SUCCESS);
  REQUIRE(cuGraphDestroy(g) == CUDA_SUCCESS);
  cuStreamDestroy(s);
}

namespace {

// Runs `fn` on a thread of its own (its own capture mode and per-thread stream) and returns its
// result.
template <class F>
CUresult on_other_thread(F fn) {
  CUresult r = CUDA_ERROR_UNKNOWN;
  std::thread t([&] { r = fn(); });
  t.join();
  return r;
}

CUresult alloc_and_free() {
  CUdeviceptr p = 0;
  CUresult r = cuMemAlloc(&p, 64);
  if (r == CUDA_SUCCESS) cuMemFree(p);
  return r;
}

// Ends the capture of `s`; the result of cuStreamEndCapture (the graph, if any, is destroyed).
CUresult end_capture(CUstream s) {
  CUgraph g = nullptr;
  CUresult r = cuStreamEndCapture(s, &g);
  if (g != nullptr) cuGraphDestroy(g);
  if (r != CUDA_SUCCESS) CHECK(g == nullptr);
  return r;
}

}  // namespace

TEST_CASE("capture modes: what a global, thread-local or relaxed capture forbids, as CUDA",
          "[sim][cuda]") {
  CUstream s, other;
  REQUIRE(cuStreamCreate(&s, 0) == CUDA_SUCCESS);
  REQUIRE(cuStreamCreate(&other, 0) == CUDA_SUCCESS);
  Recorder rec;
  Item it{&rec, 1, 0};
  SECTION("global: an allocation on another thread fails and invalidates the capture") {
    REQUIRE(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL) == CUDA_SUCCESS);
    CHECK(on_other_thread(alloc_and_free) == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    CUstreamCaptureStatus st;
    REQUIRE(cuStreamIsCapturing(s, &st) == CUDA_SUCCESS);
    CHECK(st == CU_STREAM_CAPTURE_STATUS_INVALIDATED);
    CHECK(cuLaunchHostFunc(s, record_item, &it) == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    CHECK(end_capture(s) == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    // The capture is over: the stream runs work again, and allocations are allowed.
    REQUIRE(cuLaunchHostFunc(s, record_item, &it) == CUDA_SUCCESS);
    REQUIRE(cuStreamSynchronize(s) == CUDA_SUCCESS);
    CHECK(rec.seen.size() == 1);
    CHECK(alloc_and_free() == CUDA_SUCCESS);
  }
  SECTION("global: so does a synchronization of another stream on another thread") {
    REQUIRE(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL) == CUDA_SUCCESS);
    CHECK(on_other_thread([&] { return cuStreamSynchronize(other); }) ==
          CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    CHECK(end_capture(s) == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  }
  SECTION("global: a thread that switched itself to relaxed may allocate") {
    REQUIRE(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL) == CUDA_SUCCESS);
    CHECK(on_other_thread([] {
            CUstreamCaptureMode m = CU_STREAM_CAPTURE_MODE_RELAXED;
            cuThreadExchangeStreamCaptureMode(&m);
            CUresult r = alloc_and_free();
            cuThreadExchangeStreamCaptureMode(&m);
            return m == CU_STREAM_CAPTURE_MODE_RELAXED ? r : CUDA_ERROR_UNKNOWN;
          }) == CUDA_SUCCESS);
    CHECK(end_capture(s) == CUDA_SUCCESS);
  }
  SECTION("thread-local: other threads may allocate, the capturing thread may not") {
    REQUIRE(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL) == CUDA_SUCCESS);
    CHECK(on_other_thread(alloc_and_free) == CUDA_SUCCESS);
    CHECK(alloc_and_free() == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    CHECK(end_capture(s) == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  }
  SECTION("relaxed: the capturing thread may allocate and register") {
    REQUIRE(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED) == CUDA_SUCCESS);
    CHECK(alloc_and_free() == CUDA_SUCCESS);
    static char page[4096] __attribute__((aligned(4096)));
    CHECK(cuMemHostRegister(page, sizeof page, 0) == CUDA_SUCCESS);
    CHECK(cuMemHostUnregister(page) == CUDA_SUCCESS);
    CHECK(end_capture(s) == CUDA_SUCCESS);
  }
  SECTION("any mode: synchronizing or querying the capturing stream invalidates it") {
    REQUIRE(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED) == CUDA_SUCCESS);
    CHECK(cuStreamSynchronize(s) == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    CHECK(end_capture(s) == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    REQUIRE(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED) == CUDA_SUCCESS);
    CHECK(cuStreamQuery(s) == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    CHECK(end_capture(s) == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  }
  SECTION("the legacy stream during a blocking stream's capture: an implicit dependency") {
    REQUIRE(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED) == CUDA_SUCCESS);
    CHECK(cuLaunchHostFunc(nullptr, record_item, &it) == CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
    CHECK(end_capture(s) == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    CUstream nb;
    REQUIRE(cuStreamCreate(&nb, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS);
    REQUIRE(cuStreamBeginCapture(nb, CU_STREAM_CAPTURE_MODE_RELAXED) == CUDA_SUCCESS);
    CHECK(cuLaunchHostFunc(nullptr, record_item, &it) == CUDA_SUCCESS);  // no dependency
    CHECK(end_capture(nb) == CUDA_SUCCESS);
    REQUIRE(cuStreamSynchronize(nullptr) == CUDA_SUCCESS);
    cuStreamDestroy(nb);
  }
  CHECK(cuStreamBeginCapture(s, static_cast<CUstreamCaptureMode>(7)) == CUDA_ERROR_INVALID_VALUE);
  cuStreamDestroy(s);
  cuStreamDestroy(other);
}

TEST_CASE("the legacy stream and per-thread default streams are distinct streams, as CUDA's",
          "[sim][cuda]") {
  static volatile uint32_t gate = 0;
  gate = 0;
  CUstream blocking, nonblocking;
  REQUIRE(cuStreamCreate(&blocking, 0) == CUDA_SUCCESS);
  REQUIRE(cuStreamCreate(&nonblocking, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS);
  Recorder rec;
  Item a{&rec, 1, 0}, b{&rec, 2, 0}, c{&rec, 3, 0};
  SECTION("per-thread streams of two threads do not wait for each other") {
    REQUIRE(frsim_stream_stall_until(CU_STREAM_PER_THREAD, &gate) == CUDA_SUCCESS);
    CHECK(on_other_thread([&] {
            CUresult r = cuLaunchHostFunc(CU_STREAM_PER_THREAD, record_item, &a);
            return r == CUDA_SUCCESS ? cuStreamSynchronize(CU_STREAM_PER_THREAD) : r;
          }) == CUDA_SUCCESS);
    CHECK(rec.seen == std::vector<int>{1});
    // Capture is allowed on a per-thread stream, never on the legacy one.
    CHECK(cuStreamBeginCapture(CU_STREAM_LEGACY, CU_STREAM_CAPTURE_MODE_RELAXED) ==
          CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    gate = 1;
    REQUIRE(cuStreamSynchronize(CU_STREAM_PER_THREAD) == CUDA_SUCCESS);
  }
  SECTION("the legacy stream waits for blocking streams' earlier work, not non-blocking ones'") {
    REQUIRE(frsim_stream_stall_until(nonblocking, &gate) == CUDA_SUCCESS);
    REQUIRE(cuLaunchHostFunc(CU_STREAM_LEGACY, record_item, &a) == CUDA_SUCCESS);
    REQUIRE(cuStreamSynchronize(CU_STREAM_LEGACY) == CUDA_SUCCESS);  // not held by `nonblocking`
    REQUIRE(frsim_stream_stall_until(blocking, &gate) == CUDA_SUCCESS);
    REQUIRE(cuLaunchHostFunc(nullptr, record_item, &b) == CUDA_SUCCESS);
    hold_for(50);
    {
      std::lock_guard<std::mutex> g(rec.mu);
      CHECK(rec.seen == std::vector<int>{1});  // b waits behind the stalled blocking stream
    }
    // And work on a blocking stream waits for the legacy stream's earlier work.
    CUstream later;
    REQUIRE(cuStreamCreate(&later, 0) == CUDA_SUCCESS);
    REQUIRE(cuLaunchHostFunc(later, record_item, &c) == CUDA_SUCCESS);
    hold_for(20);
    {
      std::lock_guard<std::mutex> g(rec.mu);
      CHECK(rec.seen.size() == 1);
    }
    gate = 1;
    REQUIRE(cuStreamSynchronize(later) == CUDA_SUCCESS);
    CHECK(rec.seen == std::vector<int>{1, 2, 3});
    cuStreamDestroy(later);
  }
  gate = 1;
  cuStreamSynchronize(blocking);
  cuStreamSynchronize(nonblocking);
  cuStreamDestroy(blocking);
  cuStreamDestroy(nonblocking);
}

TEST_CASE("host registration and stream writes check flags and addresses as the driver does",
          "[sim][cuda]") {
  static char page[4096] __attribute__((aligned(4096)));
  CHECK(cuMemHostRegister(page, sizeof page, 0x80) == CUDA_ERROR_INVALID_VALUE);
  REQUIRE(cuMemHostRegister(page, sizeof page, CU_MEMHOSTREGISTER_DEVICEMAP) == CUDA_SUCCESS);
  CUstream s;
  REQUIRE(cuStreamCreate(&s, 0) == CUDA_SUCCESS);
  const auto at = [](size_t off) { return reinterpret_cast<CUdeviceptr>(page + off); };
  CHECK(cuStreamWriteValue64(s, at(8), 1, 0) == CUDA_SUCCESS);
  CHECK(cuStreamWriteValue64(s, at(8), 1, CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER) == CUDA_SUCCESS);
  CHECK(cuStreamWriteValue64(s, at(8), 1, 0x4) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuStreamWriteValue64(s, at(4), 1, 0) == CUDA_ERROR_INVALID_VALUE);  // unaligned
  CHECK(cuStreamWriteValue32(s, at(4), 1, 0) == CUDA_SUCCESS);
  REQUIRE(cuStreamSynchronize(s) == CUDA_SUCCESS);
  CHECK(cuMemHostUnregister(page) == CUDA_SUCCESS);
  cuStreamDestroy(s);
}

TEST_CASE("pointer attributes and stream priorities answer as the driver does (cuda.core's asks)",
          "[sim][cuda]") {
  REQUIRE(cuInit(0) == CUDA_SUCCESS);
  int least = 1, greatest = 1;
  CUcontext primary;
  REQUIRE(cuDevicePrimaryCtxRetain(&primary, 0) == CUDA_SUCCESS);
  REQUIRE(cuCtxSetCurrent(nullptr) == CUDA_SUCCESS);
  CHECK(cuCtxGetStreamPriorityRange(&least, &greatest) == CUDA_ERROR_INVALID_CONTEXT);
  REQUIRE(cuCtxSetCurrent(primary) == CUDA_SUCCESS);
  REQUIRE(cuCtxGetStreamPriorityRange(&least, &greatest) == CUDA_SUCCESS);
  CHECK(least == 0);
  CHECK(greatest == -5);
  CHECK(cuCtxGetStreamPriorityRange(nullptr, nullptr) == CUDA_SUCCESS);

  CUdeviceptr d = 0;
  REQUIRE(cuMemAlloc(&d, 256) == CUDA_SUCCESS);
  unsigned type = 0;
  REQUIRE(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, d + 16) == CUDA_SUCCESS);
  CHECK(type == CU_MEMORYTYPE_DEVICE);
  int ordinal = -1;
  REQUIRE(cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, d) == CUDA_SUCCESS);
  CHECK(ordinal == 0);
  CUdeviceptr start = 0, same = 0;
  size_t size = 0;
  REQUIRE(cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, d + 100) ==
          CUDA_SUCCESS);
  CHECK(start == d);
  REQUIRE(cuPointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, d + 100) == CUDA_SUCCESS);
  CHECK(size == 256);
  REQUIRE(cuPointerGetAttribute(&same, CU_POINTER_ATTRIBUTE_DEVICE_POINTER, d + 8) == CUDA_SUCCESS);
  CHECK(same == d + 8);
  void* host = nullptr;
  // Device memory has no host pointer; past the allocation, or an address the driver never saw,
  // nothing is known; nor an attribute the emulation does not keep.
  CHECK(cuPointerGetAttribute(&host, CU_POINTER_ATTRIBUTE_HOST_POINTER, d) ==
        CUDA_ERROR_INVALID_VALUE);
  CHECK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, d + 256) ==
        CUDA_ERROR_INVALID_VALUE);
  int local = 0;
  CHECK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                              reinterpret_cast<CUdeviceptr>(&local)) == CUDA_ERROR_INVALID_VALUE);
  unsigned long long id = 0;
  CHECK(cuPointerGetAttribute(&id, CU_POINTER_ATTRIBUTE_BUFFER_ID, d) == CUDA_ERROR_INVALID_VALUE);
  CHECK(cuPointerGetAttribute(nullptr, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, d) ==
        CUDA_ERROR_INVALID_VALUE);
  REQUIRE(cuMemFree(d) == CUDA_SUCCESS);
  CHECK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, d) ==
        CUDA_ERROR_INVALID_VALUE);

  // Registered host memory: host memory, reachable from the host at its own address.
  static char page[4096] __attribute__((aligned(4096)));
  REQUIRE(cuMemHostRegister(page, sizeof page, 0) == CUDA_SUCCESS);
  const auto p = reinterpret_cast<CUdeviceptr>(page + 64);
  REQUIRE(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p) == CUDA_SUCCESS);
  CHECK(type == CU_MEMORYTYPE_HOST);
  REQUIRE(cuPointerGetAttribute(&host, CU_POINTER_ATTRIBUTE_HOST_POINTER, p) == CUDA_SUCCESS);
  CHECK(host == page + 64);
  CHECK(cuMemHostUnregister(page) == CUDA_SUCCESS);
  CHECK(cuDevicePrimaryCtxRelease(0) == CUDA_SUCCESS);
}

// The failures FRSIM_CU_FAIL asks for, checked in a child run of this test program (the variable
// is read once per process): the parent test starts it.
TEST_CASE("FRSIM_CU_FAIL child", "[.cu-fail-child]") {
  const char* mode = getenv("FRSIM_CU_FAIL");
  REQUIRE(mode != nullptr);
  static char page[4096] __attribute__((aligned(4096)));
  CUstream s;
  REQUIRE(cuStreamCreate(&s, 0) == CUDA_SUCCESS);
  int can64 = -1;
  REQUIRE(cuDeviceGetAttribute(&can64, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, 0) ==
          CUDA_SUCCESS);
  const auto at = reinterpret_cast<CUdeviceptr>(page);
  if (std::string(mode) == "register-unsupported,write64-unsupported") {
    CHECK(cuMemHostRegister(page, sizeof page, 0) == CUDA_ERROR_NOT_SUPPORTED);
    void* host = nullptr;
    REQUIRE(cuMemAllocHost(&host, 4096) == CUDA_SUCCESS);
    const auto h = reinterpret_cast<CUdeviceptr>(host);
    CHECK(can64 == 0);
    CHECK(cuStreamWriteValue64(s, h, 1, 0) == CUDA_ERROR_NOT_SUPPORTED);
    CHECK(cuStreamWriteValue32(s, h, 1, 0) == CUDA_SUCCESS);
    REQUIRE(cuStreamSynchronize(s) == CUDA_SUCCESS);
    cuMemFreeHost(host);
  } else {
    REQUIRE(std::string(mode) == "register-no-context,write-no-context");
    CHECK(cuMemHostRegister(page, sizeof page, 0) == CUDA_ERROR_INVALID_CONTEXT);
    CHECK(can64 == 1);
    CHECK(cuStreamWriteValue64(s, at, 1, 0) == CUDA_ERROR_INVALID_CONTEXT);
    CHECK(cuStreamWriteValue32(s, at, 1, 0) == CUDA_ERROR_INVALID_CONTEXT);
  }
  cuStreamDestroy(s);
}

TEST_CASE("FRSIM_CU_FAIL makes registration and stream writes fail as the driver does",
          "[sim][cuda]") {
  for (const char* mode :
       {"register-unsupported,write64-unsupported", "register-no-context,write-no-context"}) {
    INFO(mode);
    const std::string cmd = "FRSIM_CU_FAIL=" + std::string(mode) + " /proc/" +
                            std::to_string(getpid()) + "/exe '[.cu-fail-child]' 2>&1";
    FILE* p = popen(cmd.c_str(), "r");
    REQUIRE(p != nullptr);
    std::string out;
    char buf[512];
    while (size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
    INFO(out);
    CHECK(pclose(p) == 0);
    CHECK(out.find("in 1 test case") != std::string::npos);  // the child test did run
  }
}

TEST_CASE("modules: the agent's replay kernel runs at each graph launch, other PTX never runs",
          "[sim][cuda]") {
  REQUIRE(cuInit(0) == CUDA_SUCCESS);
  CUcontext primary;
  REQUIRE(cuDevicePrimaryCtxRetain(&primary, 0) == CUDA_SUCCESS);
  REQUIRE(cuCtxSetCurrent(primary) == CUDA_SUCCESS);
  CUmodule mod = nullptr;
  CHECK(cuModuleLoadData(&mod, "not ptx") == CUDA_ERROR_INVALID_IMAGE);
  REQUIRE(cuModuleLoadData(&mod, fr::agent::kReplayKernelPtx) == CUDA_SUCCESS);
  CUfunction fn = nullptr;
  CHECK(cuModuleGetFunction(&fn, mod, "no_such_kernel") == CUDA_ERROR_NOT_FOUND);
  REQUIRE(cuModuleGetFunction(&fn, mod, fr::agent::kReplayKernelName) == CUDA_SUCCESS);

  // A host-mapped counter and a two-entry communicator table: entry 0 holds graph 3's positions,
  // entry 1 graph 4's.
  struct alignas(64) Mapped {
    uint64_t counter;
    fr_comm_entry comms[2];
  };
  auto* m = new Mapped{};
  REQUIRE(cuMemHostRegister(m, sizeof *m, CU_MEMHOSTREGISTER_DEVICEMAP) == CUDA_SUCCESS);
  CUdeviceptr dev = 0;
  REQUIRE(cuMemHostGetDevicePointer(&dev, m, 0) == CUDA_SUCCESS);
  unsigned long long counter = dev, comms = dev + offsetof(Mapped, comms);
  unsigned n = 2, ordinal = 3;
  void* params[] = {&counter, &comms, &n, &ordinal};

  CUstream s;
  REQUIRE(cuStreamCreate(&s, 0) == CUDA_SUCCESS);
  REQUIRE(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL) == CUDA_SUCCESS);
  REQUIRE(cuLaunchKernel(fn, 1, 1, 1, 128, 1, 1, 0, s, params, nullptr) == CUDA_SUCCESS);
  ordinal = 9;  // arguments are copied at the call
  REQUIRE(cuStreamWriteValue64(
              s, dev + offsetof(Mapped, comms) + offsetof(fr_comm_entry, graph_started),
              FR_GRAPH_POS(3, 1), 0) == CUDA_SUCCESS);
  CUgraph g;
  REQUIRE(cuStreamEndCapture(s, &g) == CUDA_SUCCESS);
  CHECK(m->counter == 0);  // captured, not run
  CUgraphExec ex;
  REQUIRE(cuGraphInstantiate(&ex, g, 0) == CUDA_SUCCESS);
  for (uint64_t replay = 1; replay <= 3; ++replay) {
    m->comms[0].graph_completed = FR_GRAPH_POS(3, 5);  // the previous replay's end
    m->comms[1].graph_started = FR_GRAPH_POS(4, 2);
    REQUIRE(cuGraphLaunch(ex, s) == CUDA_SUCCESS);
    REQUIRE(cuStreamSynchronize(s) == CUDA_SUCCESS);
    CHECK(m->counter == replay);
    CHECK(m->comms[0].graph_completed == FR_GRAPH_POS(3, 0));  // this graph's: reset
    CHECK(m->comms[0].graph_started == FR_GRAPH_POS(3, 1));    // then written by the replay
    CHECK(m->comms[1].graph_started == FR_GRAPH_POS(4, 2));    // another graph's: untouched
  }
  // Launched on a stream directly, it runs once there.
  REQUIRE(cuLaunchKernel(fn, 1, 1, 1, 128, 1, 1, 0, s, params, nullptr) == CUDA_SUCCESS);
  REQUIRE(cuStreamSynchronize(s) == CUDA_SUCCESS);
  CHECK(m->counter == 4);

  // PTX the emulation has no host-side version of loads, but never runs.
  CUmodule other = nullptr;
  REQUIRE(cuModuleLoadData(&other,
                           ".version 6.0\n.target sm_50\n.address_size 64\n"
                           ".visible .entry spin()\n{\n\tret;\n}\n") == CUDA_SUCCESS);
  CUfunction spin = nullptr;
  REQUIRE(cuModuleGetFunction(&spin, other, "spin") == CUDA_SUCCESS);
  CHECK(cuLaunchKernel(spin, 1, 1, 1, 1, 1, 1, 0, s, nullptr, nullptr) == CUDA_ERROR_NOT_SUPPORTED);
  CHECK(cuModuleUnload(other) == CUDA_SUCCESS);
  CHECK(cuModuleUnload(other) == CUDA_ERROR_INVALID_HANDLE);

  REQUIRE(cuGraphExecDestroy(ex) == CUDA_SUCCESS);
  REQUIRE(cuGraphDestroy(g) == CUDA_SUCCESS);
  CHECK(cuModuleUnload(mod) == CUDA_SUCCESS);
  cuStreamDestroy(s);
  REQUIRE(cuMemHostUnregister(m) == CUDA_SUCCESS);
  delete m;
}

TEST_CASE("cuGetProcAddress and the plain names resolve to the emulation", "[sim][cuda]") {
  void* fn = nullptr;
  CUdriverProcAddressQueryResult q;
  REQUIRE(cuGetProcAddress("cuStreamWriteValue64", &fn, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &q) ==
          CUDA_SUCCESS);
  CHECK(q == CU_GET_PROC_ADDRESS_SUCCESS);
  CHECK(fn == reinterpret_cast<void*>(&cuStreamWriteValue64_v2));
  REQUIRE(cuGetProcAddress("cuInit", &fn, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &q) == CUDA_SUCCESS);
  CHECK(fn == reinterpret_cast<void*>(&cuInit));
  CHECK(cuGetProcAddress("cuNoSuchThing", &fn, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &q) ==
        CUDA_ERROR_NOT_FOUND);
  CHECK(q == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
  // dlsym by the plain names, as an agent resolving the driver at run time does.
  void* self = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  REQUIRE(self != nullptr);
  for (const char* name : {"cuStreamWriteValue64", "cuStreamWriteValue64_v2",
                           "cuMemHostGetDevicePointer_v2", "cuMemHostRegister_v2", "cuCtxCreate_v4",
                           "cuStreamGetCaptureInfo_v3", "cuEventElapsedTime_v2"}) {
    INFO(name);
    CHECK(dlsym(self, name) != nullptr);
  }
  dlclose(self);
}

#if defined(__SANITIZE_THREAD__)
#define FRSIM_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define FRSIM_TSAN 1
#endif
#endif

TEST_CASE("a forked child starts with a fresh emulated driver", "[sim][cuda]") {
#ifdef FRSIM_TSAN
  FR_SKIP(
      "sanitizer build: ThreadSanitizer cannot start threads in the child of a "
      "multi-threaded fork");
#endif
  CUstream s;
  REQUIRE(cuStreamCreate(&s, 0) == CUDA_SUCCESS);
  REQUIRE(frsim_stream_stall(s, 20) == CUDA_SUCCESS);
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    // The parent's stream threads did not come along: its handles are invalid here, new work runs.
    int bad = cuStreamQuery(s) == CUDA_ERROR_INVALID_HANDLE ? 0 : 1;
    CUstream c;
    if (cuStreamCreate(&c, 0) != CUDA_SUCCESS || frsim_stream_stall(c, 1) != CUDA_SUCCESS ||
        cuStreamSynchronize(c) != CUDA_SUCCESS || cuStreamSynchronize(nullptr) != CUDA_SUCCESS)
      bad |= 2;
    _exit(bad);
  }
  int st = 0;
  REQUIRE(waitpid(pid, &st, 0) == pid);
  CHECK(WIFEXITED(st));
  CHECK(WEXITSTATUS(st) == 0);
  REQUIRE(cuStreamSynchronize(s) == CUDA_SUCCESS);
  cuStreamDestroy(s);
}
