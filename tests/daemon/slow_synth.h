// Synthetic jobs for the fail-slow detector (daemon/logic/slow_detector.h): ranks on nodes that
// call one collective per step, with jitter, checkpoint pauses and at most one fault (a slow
// host, GPU or link from a given step), and heartbeats as frd node sends them (once a second per
// node, at its own phase, with each member's newest collectives and the newest kernel time, and
// the proxy steps of its ring links). Shared by the detector's tests and its scorecard benchmark.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "daemon/base/model.h"
#include "daemon/logic/slow_detector.h"

namespace fr::daemon::synth {

enum class Fault { kNone, kHost, kGpu, kLink };

struct SlowJob {
  int ranks = 8;
  int per_node = 4;
  int64_t compute_ns = 40'000'000;   // host work per step before the collective
  int64_t kernel_ns = 8'000'000;     // the collective's kernel time
  double jitter = 0.05;              // per rank and step: exponential, this share of compute_ns
  int64_t clock_error_ns = 200'000;  // per node, uniform in +-, left after offset correction
  int pause_every = 0;               // steps between checkpoint pauses (0: none)
  int64_t pause_ns = 2'000'000'000;
  bool pause_rank0_only = false;  // rank 0 writes the checkpoint, the others wait for it
  Fault fault = Fault::kNone;
  int fault_rank = 3;  // host, gpu: the rank; link: the receiving rank
  double factor = 2;
  int fault_step = 20;
  int fault_end = 1 << 30;  // the fault stops before this step
  int steps = 200;
  int channels = 2;
  int link_steps = 8;  // proxy steps per op and channel
  uint64_t seed = 1;
  bool stop_at_finding = true;
  // No kernel times: each host waits for its own GPU at the end of its step (as fr-simjob's ranks
  // and a loop that reads its loss do) and goes on at once, and the heartbeats carry the GPU's
  // progress counters (a collective in flight or not) instead. A slow GPU then makes its host late.
  bool counters = false;
  // With counters: the node samples the stream's progress markers every sample_ns (0: not), so
  // each collective carries when its GPU reached it (the call: its GPU waited for its host) and
  // finished it (every member arrived and its own kernel ran), each rounded up to the node's next
  // sample tick (a random phase per node), and known from the first heartbeat after its end.
  int64_t sample_ns = 0;
};

struct SlowOutcome {
  bool found = false;      // the fault's rank (link: its two ranks) named with the right cause
  bool wrong = false;      // a finding that names something else
  int steps_to_find = -1;  // from the fault's step
  double seconds_to_find = -1;
  std::vector<SlowFinding> findings;  // what the detector held when it stopped
  std::vector<std::string> wrong_keys;
};

inline bool right(const SlowJob& j, const SlowFinding& f) {
  switch (j.fault) {
    case Fault::kHost:  // with kernel times, a late host whose kernels look slow too may be gpu
      return (f.cause == SlowCause::kHost || (!j.counters && f.cause == SlowCause::kGpu)) &&
             f.rank == j.fault_rank;
    case Fault::kGpu: return f.cause == SlowCause::kGpu && f.rank == j.fault_rank;
    case Fault::kLink:
      return f.cause == SlowCause::kLink && f.rank == j.fault_rank &&
             f.peer_rank == (j.fault_rank + j.ranks - 1) % j.ranks;
    case Fault::kNone: return false;
  }
  return false;
}

// Runs the job through a detector and reports what it found, and when.
inline SlowOutcome run(const SlowJob& j, SlowDetector& det) {
  std::mt19937_64 rng(j.seed);
  std::uniform_real_distribution<double> uni(0, 1);
  std::exponential_distribution<double> expo(1);
  const int nodes = (j.ranks + j.per_node - 1) / j.per_node;
  const size_t nn = size_t(nodes);
  std::vector<int64_t> clock_error(nn), phase(nn), next_hb(nn);
  for (int n = 0; n < nodes; ++n) {
    clock_error[size_t(n)] = int64_t((uni(rng) * 2 - 1) * double(j.clock_error_ns));
    phase[size_t(n)] = int64_t(uni(rng) * 1e9);
    next_hb[size_t(n)] = phase[size_t(n)];
  }
  // Each node's sampler ticks at its own phase: a time on the node's clock, rounded up to a tick.
  std::vector<int64_t> tick_phase(nn);
  for (auto& p : tick_phase) p = j.sample_ns > 0 ? int64_t(uni(rng) * double(j.sample_ns)) : 0;
  auto tick = [&](int64_t t, int n) {
    const int64_t p = tick_phase[size_t(n)], k = j.sample_ns;
    const int64_t d = t - p;
    return p + (d >= 0 ? (d + k - 1) / k : -((-d) / k)) * k;
  };
  // Per rank: its recent collectives; per link (the ring, receiver r from r-1) and channel: the
  // newest op's step time.
  std::vector<std::vector<CollTiming>> recent(size_t(j.ranks));
  std::vector<std::vector<int64_t>> link_step(size_t(j.ranks),
                                              std::vector<int64_t>(size_t(j.channels)));
  const uint64_t comm = 0xc0ffee;
  SlowOutcome out;
  int64_t t = 0;  // the step's start, on the coordinator's clock
  // counters: each rank's next step's start, and its collectives' time in flight (call to done) in
  // the last two steps.
  std::vector<int64_t> start(size_t(j.ranks), 0);
  std::vector<std::array<int64_t, 4>> flight(size_t(j.ranks), {0, 0, 0, 0});
  int64_t fault_t = -1, next_judge = 1'000'000'000;
  auto heartbeats_until = [&](int64_t until, int step) {
    for (;;) {
      int n = int(std::min_element(next_hb.begin(), next_hb.end()) - next_hb.begin());
      const int64_t at = next_hb[size_t(n)];
      if (at > until) break;
      while (next_judge <= at) {
        det.judge(next_judge);
        next_judge += 1'000'000'000;
        for (const auto& f : det.findings()) {
          if (j.fault != Fault::kNone && right(j, f) && !out.found && fault_t >= 0) {
            out.found = true;
            out.steps_to_find = step - j.fault_step;
            out.seconds_to_find = double(next_judge - 1'000'000'000 - fault_t) / 1e9;
          } else if (!right(j, f) && !out.wrong) {
            out.wrong = true;
            out.wrong_keys.push_back(f.key());
          }
        }
      }
      for (int r = n * j.per_node; r < std::min(j.ranks, (n + 1) * j.per_node); ++r) {
        CommProgress c;
        c.comm_id = comm;
        c.size = j.ranks;
        c.rank = r;
        c.name = "dp";
        c.recent = recent[size_t(r)];
        for (auto& x : c.recent)  // not finished yet on its GPU at this heartbeat: no times
          if (x.gpu_end_ns - clock_error[size_t(n)] > at) x.gpu_start_ns = x.gpu_end_ns = 0;
        if (j.counters) {
          const auto& fl = flight[size_t(r)];
          const bool busy = (at >= fl[0] && at < fl[1]) || (at >= fl[2] && at < fl[3]);
          c.completed = 1;
          c.enqueued = busy ? 2 : 1;
        }
        det.member(c, r, -clock_error[size_t(n)], at, uint64_t(n) + 1);
        ProcessReport p;
        p.rank = r;
        p.comms.push_back(c);
        for (int ch = 0; ch < j.channels; ++ch) {
          if (link_step[size_t(r)][size_t(ch)] == 0) continue;
          LinkTiming l;
          l.comm_id = comm;
          l.channel = ch;
          l.peer = (r + j.ranks - 1) % j.ranks;
          l.send = false;
          l.op_seq = recent[size_t(r)].empty() ? 0 : recent[size_t(r)].back().seq;
          l.steps = uint32_t(j.link_steps);
          l.step_ns = link_step[size_t(r)][size_t(ch)];
          p.links.push_back(l);
        }
        det.links(p, at);
      }
      next_hb[size_t(n)] += 1'000'000'000;
    }
  };
  for (int s = 1; s <= j.steps; ++s) {
    const bool faulty = j.fault != Fault::kNone && s >= j.fault_step && s < j.fault_end;
    if (j.counters) t = *std::min_element(start.begin(), start.end());
    if (faulty && fault_t < 0) fault_t = t;
    const bool pause = j.pause_every > 0 && s % j.pause_every == 0;
    int64_t latest = 0;
    std::vector<int64_t> arrive(size_t(j.ranks));
    for (int r = 0; r < j.ranks; ++r) {
      double work = double(j.compute_ns) * (1 + j.jitter * expo(rng));
      if (faulty && j.fault == Fault::kHost && r == j.fault_rank) work *= j.factor;
      if (pause && (!j.pause_rank0_only || r == 0)) work += double(j.pause_ns);
      arrive[size_t(r)] = (j.counters ? start[size_t(r)] : t) + int64_t(work);
      latest = std::max(latest, arrive[size_t(r)]);
    }
    int64_t kernel_max = 0;
    for (int r = 0; r < j.ranks; ++r) {
      double k = double(j.kernel_ns) * (1 + 0.05 * expo(rng));
      if (faulty && j.fault == Fault::kGpu && r == j.fault_rank) k *= j.factor;
      kernel_max = std::max(kernel_max, int64_t(k));
      const int node = r / j.per_node;
      auto& rec = recent[size_t(r)];
      for (auto& x : rec) x.gpu_ns = 0;  // a kernel slot shows its newest op only
      rec.push_back({uint64_t(s), 1, arrive[size_t(r)] + clock_error[size_t(node)],
                     j.counters ? 0 : int64_t(k)});
      if (j.counters) {  // done once every member arrived and its own kernel ran
        auto& fl = flight[size_t(r)];
        fl = {fl[2], fl[3], arrive[size_t(r)], latest + int64_t(k)};
        start[size_t(r)] = fl[3];
        if (j.sample_ns > 0) {
          const int64_t err = clock_error[size_t(node)];
          rec.back().gpu_start_ns = tick(fl[2] + err, node);
          rec.back().gpu_end_ns = tick(fl[3] + err, node);
        }
      }
      if (rec.size() > CommProgress::kMaxRecent) rec.erase(rec.begin());
      for (int ch = 0; ch < j.channels; ++ch) {
        double st = double(j.kernel_ns) / j.link_steps * (1 + 0.1 * expo(rng));
        if (faulty && j.fault == Fault::kLink && r == j.fault_rank && ch == j.channels - 1)
          st *= j.factor;
        link_step[size_t(r)][size_t(ch)] = int64_t(st);
      }
    }
    t = latest + kernel_max;
    // counters: up to the first rank's next step, before which none calls again.
    heartbeats_until(j.counters ? *std::min_element(start.begin(), start.end()) : t, s);
    if (out.found && j.stop_at_finding) break;
  }
  out.findings = det.findings();
  return out;
}

}  // namespace fr::daemon::synth
