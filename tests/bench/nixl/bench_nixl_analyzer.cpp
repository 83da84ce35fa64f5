// The analyzer's NIXL pass at scale: one process without a rank whose transfer table holds N
// transfers, each from a local agent of its own, every one in flight past the threshold to one of
// 600 remote agents (more than the 512 stalls kept). Times analyze_model on the model in memory
// for N = 2^14 .. 2^20 (FR_BENCH_NIXL_MAX: another top) and prints seconds and nanoseconds per
// transfer; an even figure per transfer across the sizes says the pass is linear (n log n) in
// the transfers. The model skips the reader's per-process cap (kMaxXfersPerProc), so the pass
// itself is what is measured. Figures only: nothing is asserted.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "analyzer/analyze.h"
#include "analyzer/model.h"
#include "analyzer/verdicts.h"

namespace {

constexpr uint64_t kSec = 1'000'000'000ull;
constexpr uint64_t kSnapNs = 1796205700ull * kSec;

fr::analyzer::Model model_of(size_t n) {
  fr::analyzer::Model m;
  fr::analyzer::Proc& p = m.rankless.emplace_back();
  p.file = "prefill.frlog";
  p.host = "node-a";
  p.pid = 4242;
  p.alive = true;
  p.snapshot = true;
  p.snapshot_ns = kSnapNs;
  p.flags = FR_LOG_F_NIXL;
  p.xfers.resize(n);
  for (size_t i = 0; i < n; ++i) {
    fr::analyzer::Xfer& x = p.xfers[i];
    x.id = i + 1;
    x.bytes = 4096;
    x.posts = 1;
    x.post_ns = kSnapNs - 30 * kSec - i;
    x.op = FR_XFER_OP_WRITE;
    x.state = FR_XFER_IN_PROGRESS;
    x.status = FR_NIXL_IN_PROG;
    x.local_agent = "prefill-" + std::to_string(i);
    x.remote_agent = "decode-" + std::to_string(i % 600);
    x.backend = "UCX";
  }
  return m;
}

}  // namespace

int main() {
  const char* top_env = std::getenv("FR_BENCH_NIXL_MAX");
  const size_t top = top_env ? std::strtoull(top_env, nullptr, 10) : size_t{1} << 20;
  std::printf("%10s %10s %14s  %s\n", "transfers", "seconds", "ns/transfer", "verdict");
  for (size_t n = size_t{1} << 14; n <= top; n *= 2) {
    const fr::analyzer::Model m = model_of(n);
    const fr::analyzer::Options opts;
    const auto t0 = std::chrono::steady_clock::now();
    const fr::analyzer::Analysis a = fr::analyzer::analyze_model(m, opts);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("%10zu %10.3f %14.1f  %s\n", n, s, s * 1e9 / double(n),
                fr::analyzer::verdict_name(a.verdict.kind));
    std::fflush(stdout);
  }
  return 0;
}
