// What CUDA forbids during stream capture, and the driver failures a test can ask for.
//
// Capture modes (cuStreamBeginCapture_v2's mode, cuThreadExchangeStreamCaptureMode's per-thread
// mode) decide which "potentially unsafe" calls a thread may make while captures are under way,
// as the CUDA programming guide states: a thread whose mode is GLOBAL may not make them while any
// other thread has a GLOBAL capture; a thread may not make them while it has a capture of its own
// that is not RELAXED; a RELAXED thread always may. A forbidden call fails with
// CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidates the captures that forbade it: their later
// work is refused with CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, and so is their cuStreamEndCapture.
// Work on the legacy stream while a blocking stream captures fails with
// CUDA_ERROR_STREAM_CAPTURE_IMPLICIT and invalidates those captures (the legacy stream would
// synchronize with them).
//
// FRSIM_CU_FAIL makes host registration and stream memory operations fail as the driver does
// where they cannot be served, so the fallbacks of their callers run without fault injection.
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>

#include <string>

#include "driver.h"

using namespace frsim;

namespace {

thread_local CUstreamCaptureMode tls_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

pid_t tid() { return static_cast<pid_t>(syscall(SYS_gettid)); }

// Marks the captures `pick` selects invalidated; true when there was one. Holds s.mu.
template <class Pick>
bool invalidate_where(State& s, Pick pick) {
  bool any = false;
  for (CUstream_st* st : s.capturing) {
    std::lock_guard<std::mutex> g(st->mu);
    if (st->capture != CU_STREAM_CAPTURE_STATUS_ACTIVE || !pick(*st)) continue;
    st->capture = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
    any = true;
  }
  return any;
}

unsigned parse_fail() {
  const char* e = getenv("FRSIM_CU_FAIL");
  if (e == nullptr) return 0;
  static const char* const kNames[] = {"register-unsupported", "register-no-context",
                                       "write-unsupported", "write64-unsupported",
                                       "write-no-context"};
  unsigned bits = 0;
  std::string list = e;
  size_t at = 0;
  while (at <= list.size()) {
    size_t end = list.find(',', at);
    if (end == std::string::npos) end = list.size();
    const std::string word = list.substr(at, end - at);
    for (unsigned i = 0; i < sizeof kNames / sizeof kNames[0]; ++i)
      if (word == kNames[i]) bits |= 1u << i;
    at = end + 1;
  }
  return bits;
}

}  // namespace

CUresult frsim::capture_unsafe_call() {
  const CUstreamCaptureMode mine = tls_mode;
  if (mine == CU_STREAM_CAPTURE_MODE_RELAXED) return CUDA_SUCCESS;
  State& s = ready();
  std::lock_guard<std::mutex> g(s.mu);
  if (s.capturing.empty()) return CUDA_SUCCESS;
  const pid_t me = tid();
  const bool refused = invalidate_where(s, [&](const CUstream_st& st) {
    if (st.capture_tid == me) return st.capture_mode != CU_STREAM_CAPTURE_MODE_RELAXED;
    return mine == CU_STREAM_CAPTURE_MODE_GLOBAL &&
           st.capture_mode == CU_STREAM_CAPTURE_MODE_GLOBAL;
  });
  return refused ? CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED : CUDA_SUCCESS;
}

CUresult frsim::capture_legacy_use() {
  State& s = ready();
  std::lock_guard<std::mutex> g(s.mu);
  if (s.capturing.empty()) return CUDA_SUCCESS;
  const bool refused = invalidate_where(
      s, [](const CUstream_st& st) { return (st.flags & CU_STREAM_NON_BLOCKING) == 0; });
  return refused ? CUDA_ERROR_STREAM_CAPTURE_IMPLICIT : CUDA_SUCCESS;
}

void frsim::capture_forget(CUstream_st* st) {
  State& s = state();
  std::lock_guard<std::mutex> g(s.mu);
  for (size_t i = 0; i < s.capturing.size(); ++i)
    if (s.capturing[i] == st) {
      s.capturing.erase(s.capturing.begin() + static_cast<long>(i));
      return;
    }
}

std::vector<std::pair<std::shared_ptr<CUstream_st>, uint64_t>> frsim::legacy_deps(
    const std::shared_ptr<CUstream_st>& st) {
  std::vector<std::pair<std::shared_ptr<CUstream_st>, uint64_t>> deps;
  if ((st->flags & CU_STREAM_NON_BLOCKING) != 0) return deps;
  std::vector<std::shared_ptr<CUstream_st>> others;
  {
    State& s = state();
    std::lock_guard<std::mutex> g(s.mu);
    if (!st->legacy) {
      if (s.legacy) others.push_back(s.legacy);
    } else {
      for (auto& [h, o] : s.streams)
        if ((o->flags & CU_STREAM_NON_BLOCKING) == 0) others.push_back(o);
      for (auto& w : s.per_thread)
        if (auto o = w.lock()) others.push_back(o);
    }
  }
  for (auto& o : others) {
    if (o == st) continue;
    std::lock_guard<std::mutex> g(o->mu);
    if (o->finished < o->enqueued && o->capture == CU_STREAM_CAPTURE_STATUS_NONE)
      deps.emplace_back(o, o->enqueued);
  }
  return deps;
}

bool frsim::cu_fail(CuFail f) {
  static const unsigned bits = parse_fail();
  return (bits & (1u << static_cast<unsigned>(f))) != 0;
}

FRSIM_API CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode* mode) {
  if (mode == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (*mode != CU_STREAM_CAPTURE_MODE_GLOBAL && *mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
      *mode != CU_STREAM_CAPTURE_MODE_RELAXED)
    return CUDA_ERROR_INVALID_VALUE;
  const CUstreamCaptureMode old = tls_mode;
  tls_mode = *mode;
  *mode = old;
  return CUDA_SUCCESS;
}
