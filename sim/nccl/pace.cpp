// Timing of the emulated GPU and links, for fail-slow faults: a GPU whose kernels run F times
// slower and a link that delivers one direction's steps F times slower. The emulation is
// otherwise instantaneous; a slowdown needs a base to multiply, so FRSIM_KERNEL_US (each
// collective's own GPU work) and FRSIM_STEP_US (each channel step's transmission) give one. The
// gates never block the stream's worker thread: a gate not due yet makes its op wait as for a
// peer, and the worker sleeps until the earliest due time (pace_take_wait).
#include <stdlib.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <utility>

#include "fr_sim_nccl.h"
#include "internal.h"

namespace frsim {
namespace {

uint64_t env_us(const char* name) {
  const char* e = getenv(name);
  if (e == nullptr || *e == '\0') return 0;
  char* end = nullptr;
  long long v = strtoll(e, &end, 10);
  return *end == '\0' && v > 0 ? static_cast<uint64_t>(std::min(v, 60'000'000LL)) : 0;
}

uint64_t kernel_base_ns() {
  static const uint64_t ns = env_us("FRSIM_KERNEL_US") * 1000;
  return ns;
}
uint64_t step_base_ns() {
  static const uint64_t ns = env_us("FRSIM_STEP_US") * 1000;
  return ns;
}

std::atomic<double> g_gpu_factor{1.0};
thread_local uint64_t tl_wait_due = 0;

bool valid_factor(double f) { return std::isfinite(f) && f >= 1.0 && f <= 1000.0; }

}  // namespace

uint64_t pace_now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

uint64_t pace_kernel_ns() {
  return static_cast<uint64_t>(static_cast<double>(kernel_base_ns()) * g_gpu_factor.load());
}

uint64_t pace_step_ns(CommState& c, int peer) {
  if (step_base_ns() == 0) return 0;
  double f = 1.0;
  {
    std::lock_guard<std::mutex> g(c.mu);
    if (peer >= 0 && static_cast<size_t>(peer) < c.link_factor.size()) f = c.link_factor[peer];
  }
  return static_cast<uint64_t>(static_cast<double>(step_base_ns()) * f);
}

void pace_wait_until(uint64_t due_ns) {
  if (tl_wait_due == 0 || due_ns < tl_wait_due) tl_wait_due = due_ns;
}

uint64_t pace_take_wait() { return std::exchange(tl_wait_due, 0); }

}  // namespace frsim

extern "C" __attribute__((visibility("default"))) ncclResult_t frsim_gpu_slow(double factor) {
  if (!frsim::valid_factor(factor)) return ncclInvalidArgument;
  frsim::g_gpu_factor.store(factor);
  return ncclSuccess;
}

extern "C" __attribute__((visibility("default"))) ncclResult_t frsim_nccl_link_slow(ncclComm_t comm,
                                                                                    int peer,
                                                                                    double factor) {
  ncclResult_t err = ncclSuccess;
  auto c = frsim::ready_comm(comm, &err);
  if (!c) return err;
  if (!frsim::valid_factor(factor) || peer < 0 || peer >= c->nranks || peer == c->rank)
    return ncclInvalidArgument;
  std::lock_guard<std::mutex> g(c->mu);
  c->link_factor.resize(static_cast<size_t>(c->nranks), 1.0);
  c->link_factor[static_cast<size_t>(peer)] = factor;
  return ncclSuccess;
}
