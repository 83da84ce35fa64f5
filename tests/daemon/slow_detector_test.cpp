// The fail-slow detector on synthetic jobs (slow_synth.h): each kind of fault named with its
// cause, healthy jobs with heavy jitter and checkpoint pauses left alone, a straggler that recovers
// cleared, and the bounds held.
#include <catch2/catch.hpp>

#include "daemon/logic/slow_detector.h"
#include "slow_synth.h"

using namespace fr::daemon;
using fr::daemon::synth::Fault;
using fr::daemon::synth::SlowJob;

namespace {

SlowJob job(Fault f, int rank, double factor, uint64_t seed) {
  SlowJob j;
  j.fault = f;
  j.fault_rank = rank;
  j.factor = factor;
  j.seed = seed;
  return j;
}

}  // namespace

TEST_CASE("slow detector names a slow host with its lateness and what the job loses") {
  for (uint64_t seed : {1, 2, 3}) {
    SlowDetector det;
    auto out = synth::run(job(Fault::kHost, 3, 1.5, seed), det);
    INFO("seed " << seed);
    REQUIRE(out.found);
    REQUIRE_FALSE(out.wrong);
    // Found within 30 s of the fault (the heartbeats come once a second; the steps are short).
    REQUIRE(out.steps_to_find > 0);
    REQUIRE(out.seconds_to_find <= 30);
    REQUIRE(out.findings.size() == 1);
    const SlowFinding& f = out.findings[0];
    REQUIRE(f.cause == SlowCause::kHost);
    REQUIRE(f.rank == 3);
    REQUIRE(f.key() == "host:3");
    // 40 ms of work made 60: about 20 ms late, out of a step of about 70 ms.
    REQUIRE(f.value_ns > 15'000'000);
    REQUIRE(f.value_ns < 25'000'000);
    REQUIRE(f.loss_percent() > 15);
    REQUIRE(f.loss_percent() < 40);
    const std::string e = f.evidence();
    REQUIRE(e.find("rank 3 arrives late at") != std::string::npos);
    REQUIRE(e.find("of dp collectives") != std::string::npos);
    REQUIRE(e.find("the job loses") != std::string::npos);
  }
}

TEST_CASE("slow detector names a slow GPU by its kernel time ratio") {
  SlowDetector det;
  auto out = synth::run(job(Fault::kGpu, 5, 3, 7), det);
  REQUIRE(out.found);
  REQUIRE_FALSE(out.wrong);
  REQUIRE(out.findings.size() == 1);
  const SlowFinding& f = out.findings[0];
  REQUIRE(f.cause == SlowCause::kGpu);
  REQUIRE(f.rank == 5);
  REQUIRE(f.factor > 2.4);
  REQUIRE(f.factor < 3.6);
  REQUIRE(f.evidence().find("rank 5's GPU takes") != std::string::npos);
}

TEST_CASE("slow detector names a slow link by its sender and receiver") {
  SlowDetector det;
  auto out = synth::run(job(Fault::kLink, 2, 5, 11), det);
  REQUIRE(out.found);
  REQUIRE_FALSE(out.wrong);
  REQUIRE(out.findings.size() == 1);
  const SlowFinding& f = out.findings[0];
  REQUIRE(f.cause == SlowCause::kLink);
  REQUIRE(f.rank == 2);
  REQUIRE(f.peer_rank == 1);
  REQUIRE(f.channel == 1);
  REQUIRE(f.key() == "link:1->2");
  REQUIRE(f.evidence().find("channel 1's rank 1 -> rank 2 steps take") != std::string::npos);
}

TEST_CASE("slow detector finds nothing in healthy jobs with heavy jitter and checkpoint pauses") {
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    SlowJob j;
    j.seed = seed;
    j.jitter = 0.5;
    j.steps = 400;
    j.pause_every = 40;
    j.pause_rank0_only = seed % 2 == 0;
    j.ranks = 16;
    SlowDetector det;
    auto out = synth::run(j, det);
    INFO("seed " << seed << " wrong " << (out.wrong_keys.empty() ? "" : out.wrong_keys[0]));
    REQUIRE_FALSE(out.wrong);
    REQUIRE(out.findings.empty());
  }
}

TEST_CASE("slow detector clears a straggler that recovers") {
  SlowJob j = job(Fault::kHost, 6, 2, 5);
  j.fault_end = 120;
  j.steps = 300;
  j.stop_at_finding = false;
  SlowDetector det;
  auto out = synth::run(j, det);
  REQUIRE(out.found);
  REQUIRE(out.findings.empty());  // gone by the end
  // While it lasts it is one finding, not one per judgement.
  SlowDetector again;
  j.steps = 119;
  auto during = synth::run(j, again);
  REQUIRE(during.findings.size() == 1);
  REQUIRE(during.findings[0].key() == "host:6");
}

TEST_CASE("slow detector keeps to its bounds") {
  SlowConfig cfg;
  cfg.max_comms = 2;
  cfg.max_members = 3;
  SlowDetector det(cfg);
  for (uint64_t id = 1; id <= 5; ++id)
    for (int r = 0; r < 8; ++r) {
      CommProgress c;
      c.comm_id = id;
      c.size = 8;
      c.rank = r;
      for (uint64_t s = 1; s <= 40; ++s) c.recent.push_back({s, 1, int64_t(s) * 1'000'000, 0});
      det.member(c, r, 0, 0);
    }
  det.judge(1'000'000'000);
  REQUIRE(det.tracked_comms() == 2);
  REQUIRE(det.rank_stats().size() == 3);  // members 0..2 of the first communicators only
}
