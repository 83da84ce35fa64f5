// The agent's lifecycle: lazy start at the first NCCL call, configuration from the environment,
// fork handling, diagnostics and the lookup of the real NCCL symbols.
//
// Loading libfr_agent.so does nothing (no constructor, no thread, no file); the first intercepted
// call starts it. Every failure here ends in kOff: the wrappers keep forwarding, unrecorded.
#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <cpuid.h>
#include <x86intrin.h>
#endif

#include "agent.h"
#include "comms.h"
#include "gpu.h"
#include "graphs.h"
#include "log.h"
#include "nixl.h"

namespace fr::agent {

constinit AgentState g_agent = {};
constinit ClockState g_clock = {};
constinit thread_local ThreadState t_state __attribute__((tls_model("initial-exec"))) = {};
static constinit thread_local GroupOp t_ops[kMaxGroupOps] = {};

GroupOp* thread_ops_slow() {
  t_state.ops = t_ops;
  return t_state.ops;
}

static uint64_t clock_ns(clockid_t id) {
  struct timespec ts;
  clock_gettime(id, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

// Whether the TSC ticks at a constant rate through sleep states (cpuid "invariant TSC"), and if
// so its rate, measured against CLOCK_MONOTONIC_RAW over 0.5 ms at start: every rank process
// pays this once, so it is kept short; the rate error (~2e-4) moves times by at most ~20 us
// before the next re-anchor. The rate is kept in fixed point (32 fraction bits), so a time is one
// multiply and one shift from the tick count: cheaper than the vDSO's clock_gettime, which reads
// the same TSC and converts it with more work.
static void calibrate_clock() {
#if defined(__x86_64__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(0x80000000u, &a, &b, &c, &d) || a < 0x80000007u) return;
  if (!__get_cpuid(0x80000007u, &a, &b, &c, &d) || !(d & (1u << 8))) return;
  uint64_t m0 = clock_ns(CLOCK_MONOTONIC_RAW), t0 = __rdtsc(), m1;
  do m1 = clock_ns(CLOCK_MONOTONIC_RAW);
  while (m1 - m0 < 500000);
  uint64_t t1 = __rdtsc();
  if (t1 <= t0) return;
  double ns_per_tick = (double)(m1 - m0) / (double)(t1 - t0);
  if (!(ns_per_tick > 0.01 && ns_per_tick < 100)) return;  // 10 MHz .. 100 GHz
  g_clock.ns_per_tick_q32 = (uint64_t)(ns_per_tick * 4294967296.0);
  // Every 100 ms; ticks * ns_per_tick_q32 stays below 100e6 * 2^32 < 2^59, so it never overflows.
  g_clock.reanchor_ticks = (uint64_t)(100e6 / ns_per_tick);
  g_clock.use_tsc = 1;
#endif
}

// now_ns (agent.h) past its fast path: a thread's first call, a re-anchor, or no invariant TSC.
uint64_t now_ns_slow() {
#if defined(__x86_64__)
  if (g_clock.use_tsc) {
    // Re-anchor to the wall clock now and then (and at a thread's first call, whose anchor is 0),
    // so NTP adjustments are followed.
    ThreadState& t = t_state;
    t.anchor_ns = clock_ns(CLOCK_REALTIME);
    t.anchor_tsc = __rdtsc();
    return t.anchor_ns;
  }
#endif
  return clock_ns(CLOCK_REALTIME);
}

uint32_t current_tid_slow() {
  t_state.tid = (uint32_t)syscall(SYS_gettid);
  return t_state.tid;
}

void record_lost(uint64_t id) {
  const uint64_t lost = __atomic_add_fetch(&g_log.records_lost, 1, __ATOMIC_RELAXED);
  const uint64_t laps = id >= g_log.ring_cap ? id + 1 - g_log.ring_cap : 0;
  __atomic_store_n(&g_log.hdr->overwritten, laps + lost, __ATOMIC_RELAXED);
}

static void write_log_line(const char* fmt, va_list ap) {
  char line[512];
  int n = snprintf(line, sizeof line, "fr[%d]: ", (int)getpid());
  if (n > 0 && (size_t)n < sizeof line) vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
  size_t len = strnlen(line, sizeof line - 2);
  line[len] = '\n';
  ssize_t ignored = write(2, line, len + 1);
  (void)ignored;
}

void debug_log(const char* fmt, ...) {
  if (!g_agent.debug) return;
  va_list ap;
  va_start(ap, fmt);
  write_log_line(fmt, ap);
  va_end(ap);
}

void notice_log(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  write_log_line(fmt, ap);
  va_end(ap);
}

void* resolve_real(const char* name, const char* pname, const void* self) {
  void* p = real_dlsym(RTLD_NEXT, name);
  if (p == nullptr || p == self) {
    // NCCL may have been dlopen'ed RTLD_LOCAL (e.g. as a dependency of a framework library):
    // invisible to RTLD_NEXT, but reachable through its own handle.
    p = nullptr;
    void* h = os_dlopen("libnccl.so.2", RTLD_NOLOAD | RTLD_LAZY);
    if (h != nullptr) {
      p = real_dlsym(h, pname);
      if (p == nullptr || p == self) p = real_dlsym(h, name);
      if (p == self) p = nullptr;
      os_dlclose(h);
    }
  }
  return p;
}

// ---- fork ------------------------------------------------------------------------------------

static void atfork_prepare() {
  pthread_mutex_lock(&g_comms.lock);
  pthread_mutex_lock(&g_graphs.lock);
  pthread_mutex_lock(&g_gpu.lock);
}
static void atfork_parent() {
  pthread_mutex_unlock(&g_gpu.lock);
  pthread_mutex_unlock(&g_graphs.lock);
  pthread_mutex_unlock(&g_comms.lock);
}
// The child starts over: it never writes into the parent's log (it does not hold the parent's
// file lock either) and makes its own log if it calls NCCL itself.
static void atfork_child() {
  pthread_mutex_init(&g_comms.lock, nullptr);
  pthread_mutex_init(&g_gpu.lock, nullptr);
  pthread_mutex_init(&g_graphs.lock, nullptr);
  log_forget_in_child();
  comms_forget_in_child();
  gpu_forget_in_child();
  graphs_forget_in_child();
  xfers_forget_in_child();
  g_clock = ClockState{};  // calibrated again when the child starts recording
  g_agent.next_group_id = 0;
  t_state.tid = 0;
  t_state.anchor_tsc = 0;
  t_state.cache_handle = 0;  // the child's communicator table starts empty
  t_state.cache_gen = kNoCacheGen;
  t_state.group_depth = 0;
  t_state.group_id = 0;
  t_state.n_ops = 0;
  t_state.overflow = 0;
  __atomic_store_n(&g_agent.mode, (int)kUninit, __ATOMIC_RELEASE);
}

// ---- start -----------------------------------------------------------------------------------

static bool env_true(const char* name) {
  const char* v = getenv(name);
  return v != nullptr && v[0] != '\0' && strcmp(v, "0") != 0 && strcasecmp(v, "false") != 0 &&
         strcasecmp(v, "no") != 0 && strcasecmp(v, "off") != 0;
}

// NCCL_COMM_BLOCKING as NCCL reads it (an integer; 0 makes every communicator nonblocking,
// whatever its config says). Anything else is ignored, as NCCL ignores it.
static int comm_blocking_from_env() {
  const char* v = getenv("NCCL_COMM_BLOCKING");
  if (v == nullptr || v[0] == '\0') return 0;
  char* end = nullptr;
  long n = strtol(v, &end, 0);
  if (end == v || *end != '\0') return 0;
  return n == 0 ? 2 : 1;
}

static int start() {
  g_agent.debug = env_true("FR_DEBUG");
  g_comms.env_blocking = comm_blocking_from_env();
  if (!g_agent.atfork_registered) {
    pthread_mutex_init(&g_comms.lock, nullptr);
    pthread_mutex_init(&g_gpu.lock, nullptr);
    pthread_mutex_init(&g_graphs.lock, nullptr);
    if (pthread_atfork(atfork_prepare, atfork_parent, atfork_child) != 0) {
      debug_log("pthread_atfork failed; not recording");
      return kOff;
    }
    g_agent.atfork_registered = 1;
  }
  if (env_true("FR_DISABLE")) {
    debug_log("FR_DISABLE is set; forwarding only");
    return kOff;
  }
  calibrate_clock();
  if (!log_open()) return kOff;
  debug_log("recording to %s (ring %u records)", g_log.path, g_log.ring_cap);
  return kRecording;
}

bool recording_slow() {
  int m = __atomic_load_n(&g_agent.mode, __ATOMIC_ACQUIRE);
  if (m == kRecording) return true;
  if (m == kOff) return false;
  int expected = kUninit;
  if (m == kUninit && __atomic_compare_exchange_n(&g_agent.mode, &expected, (int)kStarting, false,
                                                  __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
    int result = start();
    __atomic_store_n(&g_agent.mode, result, __ATOMIC_RELEASE);
    return result == kRecording;
  }
  // Another thread is starting the agent; it takes a few system calls.
  while ((m = __atomic_load_n(&g_agent.mode, __ATOMIC_ACQUIRE)) == kStarting) sched_yield();
  return m == kRecording;
}

}  // namespace fr::agent
