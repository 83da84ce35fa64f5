// frd-slow-scorecard: the fail-slow detector's accuracy (#38) on seeded random synthetic jobs
// (tests/daemon/slow_synth.h): sizes, layouts, step times, jitter and checkpoint pauses drawn at
// random, one fault per job (a slow host, GPU or link at a random rank, 1.2x to 10x from a
// random step), and healthy jobs with heavy jitter and checkpoint pauses. Prints, per kind, how
// often the right rank (link: both ranks) was named, how long it took from the fault's start,
// and every finding that named something else. Asserts nothing.
//   frd-slow-scorecard [JOBS_PER_KIND [SEED]]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "daemon/logic/slow_detector.h"
#include "slow_synth.h"

namespace {

using fr::daemon::SlowDetector;
using fr::daemon::synth::Fault;
using fr::daemon::synth::SlowJob;

SlowJob random_job(std::mt19937_64& rng) {
  auto pick = [&](std::initializer_list<int> v) { return *(v.begin() + rng() % v.size()); };
  std::uniform_real_distribution<double> u(0, 1);
  SlowJob j;
  j.ranks = pick({4, 8, 16, 32, 64, 128});
  j.per_node = std::min(j.ranks, pick({1, 2, 4, 8}));
  j.compute_ns = int64_t(20e6 + u(rng) * 280e6);  // 20 to 300 ms of work per step
  j.kernel_ns = int64_t(double(j.compute_ns) * (0.05 + u(rng) * 0.3));
  j.jitter = 0.01 + u(rng) * 0.3;
  j.clock_error_ns = int64_t(u(rng) * 500'000);
  if (rng() % 2) {
    j.pause_every = 20 + int(rng() % 60);
    j.pause_ns = int64_t(1e9 + u(rng) * 9e9);
    j.pause_rank0_only = rng() % 2;
  }
  j.channels = pick({1, 2, 4});
  j.steps = 600;
  j.seed = rng();
  return j;
}

struct Tally {
  int jobs = 0, strong = 0, strong_found = 0, strong_in_time = 0, weak = 0, weak_found = 0;
  int wrong = 0;
  std::vector<double> secs, steps;
  std::vector<std::string> wrong_keys;
};

double pct(int a, int b) { return b ? 100.0 * a / b : 0; }

double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, size_t(q * double(v.size())))];
}

// The kinds; "counters" without kernel times (each host waits for its GPU at the end of its step,
// the heartbeats carry the GPU's progress counters), where host and GPU must be told apart by the
// counters, and by the markers' times where the node samples them every sample_ns.
struct Kind {
  Fault fault;
  bool counters;
  const char* name;
  int64_t sample_ns = 0;
};

void run_kind(const Kind& kind, int per_kind, std::mt19937_64& rng) {
  Tally t;
  for (int i = 0; i < per_kind; ++i) {
    SlowJob j = random_job(rng);
    j.fault = kind.fault;
    j.counters = kind.counters;
    j.sample_ns = kind.sample_ns;
    j.fault_rank = int(rng() % uint64_t(j.ranks));
    // 1.2x to 10x, log-uniform: as many mild faults as severe ones.
    j.factor = std::exp(std::log(1.2) + std::uniform_real_distribution<double>(0, 1)(rng) *
                                            (std::log(10.0) - std::log(1.2)));
    j.fault_step = 20 + int(rng() % 100);
    SlowDetector det;
    auto out = fr::daemon::synth::run(j, det);
    t.jobs++;
    const bool strong = j.factor >= 1.5;
    t.strong += strong;
    t.weak += !strong;
    if (out.found) {
      (strong ? t.strong_found : t.weak_found)++;
      if (strong) {
        t.secs.push_back(out.seconds_to_find);
        t.steps.push_back(out.steps_to_find);
        t.strong_in_time += out.seconds_to_find <= 30 || out.steps_to_find <= 20;
      }
    }
    if (out.wrong) {
      t.wrong++;
      if (t.wrong_keys.size() < 5)
        for (const auto& k : out.wrong_keys)
          t.wrong_keys.push_back(k + " (fault " + std::to_string(j.fault_rank) + ", " +
                                 std::to_string(j.factor).substr(0, 4) + "x, " +
                                 std::to_string(j.ranks) + " ranks)");
    }
  }
  std::printf(
      "%-22s >=1.5x: named %.1f%% (%d/%d), within 30 s or 20 steps %.1f%%; "
      "time to finding median %.1f s (p95 %.1f s), %.0f steps (p95 %.0f); "
      "1.2-1.5x: named %.1f%% (%d/%d); jobs with a wrong finding: %d\n",
      kind.name, pct(t.strong_found, t.strong), t.strong_found, t.strong,
      pct(t.strong_in_time, t.strong), quantile(t.secs, 0.5), quantile(t.secs, 0.95),
      quantile(t.steps, 0.5), quantile(t.steps, 0.95), pct(t.weak_found, t.weak), t.weak_found,
      t.weak, t.wrong);
  for (const auto& k : t.wrong_keys) std::printf("      wrong: %s\n", k.c_str());
}

// Healthy jobs: heavy jitter (up to as long as the step's work, on average) and pauses. `mode`
// picks what the heartbeats carry: 0 kernel times, 1 counters, 2 counters and sampled markers
// (-1: half kernel times, half counters).
void run_healthy(int per_kind, int mode, const char* what, std::mt19937_64& rng) {
  int healthy_false = 0;
  std::vector<std::string> keys;
  for (int i = 0; i < per_kind; ++i) {
    SlowJob j = random_job(rng);
    j.jitter = 0.3 + std::uniform_real_distribution<double>(0, 0.7)(rng);
    j.pause_every = 20 + int(rng() % 60);
    j.pause_ns = 5'000'000'000;
    j.pause_rank0_only = rng() % 2;
    j.steps = 400;
    j.counters = mode < 0 ? i % 2 : mode > 0;
    if (mode == 2) j.sample_ns = 1'000'000;
    SlowDetector det;
    auto out = fr::daemon::synth::run(j, det);
    if (out.wrong || !out.findings.empty()) {
      healthy_false++;
      if (keys.size() < 5 && !out.wrong_keys.empty()) keys.push_back(out.wrong_keys[0]);
    }
  }
  std::printf(
      "healthy (jitter 30-100%% of the work, checkpoint pauses, %s): %d of %d jobs with a "
      "false finding\n",
      what, healthy_false, per_kind);
  for (const auto& k : keys) std::printf("      false: %s\n", k.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  const int per_kind = argc > 1 ? std::atoi(argv[1]) : 200;
  const uint64_t seed = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 38;
  if (per_kind <= 0) {
    std::fprintf(stderr, "usage: frd-slow-scorecard [JOBS_PER_KIND [SEED]]\n");
    return 2;
  }
  std::mt19937_64 rng(seed);
  std::printf("fail-slow scorecard: %d jobs per kind, seed %llu\n", per_kind,
              static_cast<unsigned long long>(seed));
  for (Kind kind : {Kind{Fault::kHost, false, "host"}, Kind{Fault::kGpu, false, "gpu"},
                    Kind{Fault::kLink, false, "link"}, Kind{Fault::kHost, true, "host, counters"},
                    Kind{Fault::kGpu, true, "gpu, counters"}})
    run_kind(kind, per_kind, rng);
  run_healthy(per_kind, -1, "half with the GPU's progress counters", rng);
  // The node sampling the stream's markers every 1 ms (frd node --gpu-sample-us 1000), on jobs
  // of their own (the rows above stay as they were for a seed).
  std::mt19937_64 sampled(seed ^ 0x9e3779b97f4a7c15ULL);
  for (Kind kind : {Kind{Fault::kHost, true, "host, sampled markers", 1'000'000},
                    Kind{Fault::kGpu, true, "gpu, sampled markers", 1'000'000}})
    run_kind(kind, per_kind, sampled);
  run_healthy(per_kind, 2, "the GPU's markers sampled every 1 ms", sampled);
  return 0;
}
