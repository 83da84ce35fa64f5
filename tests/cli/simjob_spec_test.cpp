// The job shape, the fault specifications and the rank layout of fr-simjob (no processes).
#include <algorithm>

#include <catch2/catch.hpp>

#include "job.h"

using namespace fr::simjob;

TEST_CASE("fault specs parse into canonical form with per-kind default communicators", "[simjob]") {
  Fault f;
  std::string err;
  REQUIRE(parse_fault("rank=5,step=3,kind=hang-host", &f, &err));
  REQUIRE(f.rank == 5);
  REQUIRE(f.step == 3);
  REQUIRE(f.kind == FaultKind::kHangHost);
  REQUIRE(f.to_spec() == "rank=5,step=3,kind=hang-host");

  REQUIRE(parse_fault("kind=skip,step=0,rank=1", &f, &err));
  REQUIRE(f.comm == CommKind::kDp);
  REQUIRE(f.to_spec() == "rank=1,step=0,kind=skip,comm=dp");
  REQUIRE(parse_fault("rank=1,step=0,kind=mismatch-root", &f, &err));
  REQUIRE(f.comm == CommKind::kWorld);
  REQUIRE(parse_fault("rank=2,step=4,kind=gpu-stall,comm=tp,ms=250", &f, &err));
  REQUIRE(f.ms == 250);
  REQUIRE(f.to_spec() == "rank=2,step=4,kind=gpu-stall,comm=tp,ms=250");

  // Every kind round-trips through its name.
  for (const char* k : {"hang-host", "skip", "crash", "gpu-stall", "mismatch-count",
                        "mismatch-dtype", "mismatch-op", "mismatch-root", "p2p-skip", "slow"}) {
    auto kind = parse_fault_kind(k);
    REQUIRE(kind);
    REQUIRE(std::string(fault_kind_name(*kind)) == k);
  }
}

TEST_CASE("bad fault specs are refused with the reason", "[simjob]") {
  Fault f;
  std::string err;
  auto refuse = [&](const std::string& spec, const std::string& why) {
    INFO(spec);
    err.clear();
    REQUIRE_FALSE(parse_fault(spec, &f, &err));
    INFO(err);
    REQUIRE(err.find(why) != std::string::npos);
  };
  refuse("", "empty");
  refuse("rank=1,step=2", "missing kind");
  refuse("step=2,kind=crash", "missing rank");
  refuse("rank=1,kind=crash", "missing step");
  refuse("rank=-1,step=2,kind=crash", "rank '-1'");
  refuse("rank=1x,step=2,kind=crash", "rank '1x'");
  refuse("rank=1,step=99999999999999999999,kind=crash", "step '");
  refuse("rank=1,step=2,kind=explode", "unknown kind 'explode'");
  refuse("rank=1,step=2,kind=skip,comm=ep", "unknown comm 'ep'");
  refuse("rank=1,step=2,kind=crash,color=3", "unknown key 'color'");
  refuse("rank=1,rank=2,step=2,kind=crash", "rank given twice");
  refuse("rank=1,step=2,,kind=crash", "not key=value");
  refuse("rank=1,step=2,kind=slow,ms=abc", "ms 'abc'");
}

TEST_CASE("the shape must divide and faults must fit it", "[simjob]") {
  Shape s{2, 4, 2, 2, 6};
  std::vector<Fault> none;
  std::string err;
  REQUIRE(validate(s, &none, &err));
  REQUIRE(s.dp() == 2);

  auto refuse_shape = [&](Shape bad, const std::string& why) {
    err.clear();
    REQUIRE_FALSE(validate(bad, &none, &err));
    INFO(err);
    REQUIRE(err.find(why) != std::string::npos);
  };
  refuse_shape({2, 4, 3, 1, 6}, "--tp 3 must divide --ranks-per-node 4");
  refuse_shape({2, 4, 2, 3, 6}, "--pp 3 must divide");
  refuse_shape({0, 4, 1, 1, 6}, "--nodes");
  refuse_shape({1, 4, 1, 1, 0}, "--steps");
  refuse_shape({64, 64, 1, 1, 1}, "at most");

  auto refuse = [&](Shape shape, const std::string& spec, const std::string& why) {
    Fault f;
    REQUIRE(parse_fault(spec, &f, &err));
    std::vector<Fault> v{f};
    err.clear();
    INFO(spec);
    REQUIRE_FALSE(validate(shape, &v, &err));
    INFO(err);
    REQUIRE(err.find(why) != std::string::npos);
  };
  refuse(s, "rank=8,step=1,kind=crash", "outside the world");
  refuse(s, "rank=1,step=6,kind=crash", "outside the job");
  refuse(s, "rank=1,step=1,kind=crash,comm=tp", "comm= does not apply to crash");
  refuse(s, "rank=1,step=1,kind=crash,ms=5", "ms= applies only");
  refuse(s, "rank=1,step=1,kind=slow", "slow needs ms=M");
  refuse(s, "rank=1,step=1,kind=p2p-skip,comm=dp", "comm=pp only");
  refuse({1, 4, 2, 1, 6}, "rank=1,step=1,kind=p2p-skip", "needs a pipeline");
  refuse({1, 4, 1, 1, 6}, "rank=1,step=1,kind=skip,comm=tp", "has one rank");
  refuse(s, "rank=1,step=1,kind=mismatch-count,comm=pp", "acts on a collective");
  refuse(s, "rank=1,step=1,kind=mismatch-root,comm=dp", "comm=world");
  refuse({1, 1, 1, 1, 6}, "rank=0,step=1,kind=mismatch-root", "a mismatch needs two");

  // --elastic STEP: a step of the job, and a rank that can leave while another stays.
  Shape elastic = s;
  for (int step : {0, 3, 5}) {
    elastic.elastic = step;
    REQUIRE(validate(elastic, &none, &err));
  }
  elastic.elastic = 6;
  refuse_shape(elastic, "--elastic 6 is outside the job");
  Shape lone{1, 1, 1, 1, 6};
  lone.elastic = 1;
  refuse_shape(lone, "--elastic needs at least 2 ranks");
}

TEST_CASE("ranks are laid out in Megatron order: TP fastest, then DP, then PP", "[simjob]") {
  Shape s{2, 4, 2, 2, 1};
  REQUIRE(group_of(s, 5, CommKind::kTp) == std::vector<int>{4, 5});
  REQUIRE(group_of(s, 5, CommKind::kDp) == std::vector<int>{5, 7});
  REQUIRE(group_of(s, 5, CommKind::kPp) == std::vector<int>{1, 5});
  REQUIRE(group_of(s, 5, CommKind::kWorld).size() == 8);
  Position p = position_of(s, 5);
  REQUIRE(p.node == 1);
  REQUIRE(p.local_rank == 1);
  REQUIRE(p.tp_rank == 1);
  REQUIRE(p.dp_rank == 0);
  REQUIRE(p.stage == 1);

  // Every group of every kind partitions the world, and TP groups never cross a node.
  Shape big{4, 8, 4, 2, 1};
  for (CommKind k : {CommKind::kTp, CommKind::kDp, CommKind::kPp}) {
    std::vector<int> seen(big.world(), 0);
    for (int r = 0; r < big.world(); ++r) {
      auto g = group_of(big, r, k);
      REQUIRE(std::find(g.begin(), g.end(), r) != g.end());
      size_t want = k == CommKind::kTp ? 4 : k == CommKind::kPp ? 2 : 4;
      REQUIRE(g.size() == want);
      if (k == CommKind::kTp)
        for (int m : g) REQUIRE(position_of(big, m).node == position_of(big, r).node);
      seen[r]++;
    }
    REQUIRE(std::count(seen.begin(), seen.end(), 1) == big.world());
  }
}

TEST_CASE("step time, jitter and a pause: host work per step", "[simjob]") {
  Shape s;
  s.nodes = 1;
  s.ranks_per_node = 4;
  s.steps = 1000;
  REQUIRE(host_ms(s, 0, 0) == 0);
  s.step_ms = 100;
  REQUIRE(host_ms(s, 3, 7) == 100);
  // Jitter: one step in ten (about) takes 1 to J times longer; the draw is the same every time.
  s.jitter = 20;
  int longer = 0;
  int64_t longest = 0;
  for (int r = 0; r < 4; ++r)
    for (int step = 0; step < 1000; ++step) {
      int64_t ms = host_ms(s, r, step);
      REQUIRE(ms >= 100);
      REQUIRE(ms <= 2000);
      REQUIRE(ms == host_ms(s, r, step));
      longer += ms > 100;
      longest = std::max(longest, ms);
    }
  REQUIRE(longer > 200);
  REQUIRE(longer < 600);
  REQUIRE(longest > 1500);
  // The pause adds to its step only.
  std::string err;
  REQUIRE(parse_pause("step=500,ms=10000", &s, &err));
  REQUIRE(s.pause_step == 500);
  REQUIRE(host_ms(s, 1, 500) >= 10100);
  REQUIRE(host_ms(s, 1, 501) < 10000);
  std::vector<Fault> none;
  REQUIRE(validate(s, &none, &err));

  for (const char* bad :
       {"", "step=1", "ms=5", "step=-1,ms=5", "step=1,ms=x", "step=1,ms=5,x=2", "step"}) {
    INFO(bad);
    Shape t = s;
    REQUIRE_FALSE(parse_pause(bad, &t, &err));
    REQUIRE(err.find("--pause") != std::string::npos);
  }
  s.pause_step = 1000;
  REQUIRE_FALSE(validate(s, &none, &err));
  REQUIRE(err.find("outside the job") != std::string::npos);
  s.pause_step = -1;
  s.jitter = 0;
  REQUIRE_FALSE(validate(s, &none, &err));
  REQUIRE(err.find("--step-jitter") != std::string::npos);
}

TEST_CASE("transport faults: channel, peer, at and nth, checked against the shape", "[simjob]") {
  Shape s;
  s.nodes = 4;
  s.ranks_per_node = 1;
  s.steps = 3;
  std::string err;
  auto parse = [&](const std::string& spec) {
    Fault f;
    INFO(spec);
    REQUIRE(parse_fault(spec, &f, &err));
    return f;
  };
  Fault f = parse("rank=1,step=1,kind=chan-stall,channel=1,at=2");
  CHECK(f.kind == FaultKind::kChanStall);
  CHECK(f.channel == 1);
  CHECK(f.at == 2);
  CHECK(f.to_spec() == "rank=1,step=1,kind=chan-stall,comm=dp,channel=1,at=2");
  Fault g = parse("rank=0,step=1,kind=link-down,comm=world,nth=1,peer=2");
  CHECK(g.peer == 2);
  CHECK(g.nth == 1);
  std::vector<Fault> ok = {f, g};
  REQUIRE(validate(s, &ok, &err));
  auto refused = [&](const std::string& spec, const std::string& why) {
    std::vector<Fault> v = {parse(spec)};
    INFO(spec);
    REQUIRE_FALSE(validate(s, &v, &err));
    INFO(err);
    CHECK(err.find(why) != std::string::npos);
  };
  refused("rank=1,step=1,kind=proxy-stall", "peer= must name another rank");
  refused("rank=1,step=1,kind=proxy-stall,peer=1", "peer= must name another rank");
  refused("rank=1,step=1,kind=link-down,peer=9", "peer= must name another rank");
  refused("rank=1,step=1,kind=chan-stall,peer=2", "chan-stall takes channel=");
  refused("rank=1,step=1,kind=crash,channel=1", "apply only to the transport faults");
  refused("rank=1,step=1,kind=chan-stall,comm=dp,nth=1", "nth= counts");
  Fault bad;
  CHECK_FALSE(parse_fault("rank=1,step=1,kind=chan-stall,channel=64", &bad, &err));
  CHECK_FALSE(parse_fault("rank=1,step=1,kind=chan-stall,at=-1", &bad, &err));
}

TEST_CASE("fail-slow faults: gpu-slow and link-slow take factor=, link-slow a peer", "[simjob]") {
  Fault f;
  std::string err;
  REQUIRE(parse_fault("rank=3,step=2,kind=gpu-slow,factor=2.5", &f, &err));
  REQUIRE(f.kind == FaultKind::kGpuSlow);
  REQUIRE(f.factor == 2.5);
  REQUIRE(f.to_spec() == "rank=3,step=2,kind=gpu-slow,factor=2.5");
  REQUIRE(parse_fault("rank=1,step=0,kind=link-slow,peer=2,factor=10", &f, &err));
  REQUIRE(f.to_spec() == "rank=1,step=0,kind=link-slow,peer=2,factor=10");
  for (const char* bad : {"factor=1", "factor=0.5", "factor=x", "factor=", "factor=1001"}) {
    INFO(bad);
    REQUIRE_FALSE(parse_fault(std::string("rank=1,step=0,kind=gpu-slow,") + bad, &f, &err));
    REQUIRE(err.find("factor") != std::string::npos);
  }

  Shape s;
  s.nodes = 2;
  s.ranks_per_node = 2;
  s.steps = 10;
  auto check = [&](const std::string& spec) {
    Fault g;
    REQUIRE(parse_fault(spec, &g, &err));
    std::vector<Fault> v{g};
    err.clear();
    return validate(s, &v, &err);
  };
  REQUIRE(check("rank=1,step=2,kind=gpu-slow,factor=3"));
  REQUIRE(check("rank=1,step=2,kind=link-slow,peer=2,factor=3"));
  REQUIRE_FALSE(check("rank=1,step=2,kind=gpu-slow"));
  REQUIRE(err.find("needs factor=") != std::string::npos);
  REQUIRE_FALSE(check("rank=1,step=2,kind=slow,ms=5,factor=2"));
  REQUIRE(err.find("factor= applies only") != std::string::npos);
  REQUIRE_FALSE(check("rank=1,step=2,kind=link-slow,factor=3"));
  REQUIRE(err.find("peer=P") != std::string::npos);
  REQUIRE_FALSE(check("rank=1,step=2,kind=link-slow,peer=1,factor=3"));
  REQUIRE_FALSE(check("rank=1,step=2,kind=link-slow,peer=4,factor=3"));
  REQUIRE_FALSE(check("rank=1,step=2,kind=link-slow,peer=2,factor=3,channel=1"));
  REQUIRE_FALSE(check("rank=1,step=2,kind=gpu-slow,factor=3,peer=2"));

  // The pace they multiply: 1000 us unless given; 0 refuses them.
  std::vector<Fault> none;
  REQUIRE(effective_gpu_us(s, none) == 0);
  Fault g;
  REQUIRE(parse_fault("rank=1,step=2,kind=gpu-slow,factor=3", &g, &err));
  REQUIRE(effective_gpu_us(s, {g}) == kDefaultGpuUs);
  s.gpu_us = 250;
  REQUIRE(effective_gpu_us(s, {g}) == 250);
  s.gpu_us = 0;
  REQUIRE_FALSE(check("rank=1,step=2,kind=gpu-slow,factor=3"));
  REQUIRE(err.find("--gpu-us") != std::string::npos);
}

TEST_CASE("checkpoint pauses repeat with every=, and the seed changes the jitter draw",
          "[simjob]") {
  Shape s;
  s.nodes = 1;
  s.ranks_per_node = 2;
  s.steps = 100;
  s.step_ms = 10;
  std::string err;
  REQUIRE(parse_pause("step=5,ms=300,every=20", &s, &err));
  for (int step = 0; step < 100; ++step) {
    const bool pausing = step == 5 || step == 25 || step == 45 || step == 65 || step == 85;
    INFO(step);
    REQUIRE(host_ms(s, 0, step) == (pausing ? 310 : 10));
    REQUIRE(host_ms(s, 1, step) == host_ms(s, 0, step));  // every rank pauses together
  }
  Shape t = s;
  REQUIRE(parse_pause("every=30,ms=100", &t, &err));
  REQUIRE(t.pause_step == 30);
  REQUIRE(t.pause_every == 30);
  REQUIRE(host_ms(t, 0, 60) == 110);
  REQUIRE(host_ms(t, 0, 0) == 10);
  REQUIRE_FALSE(parse_pause("every=0,ms=100", &t, &err));
  REQUIRE_FALSE(parse_pause("every=5", &t, &err));

  // Seeds: each gives its own draw, the same one every time.
  Shape a, b;
  a.step_ms = b.step_ms = 100;
  a.jitter = b.jitter = 10;
  b.seed = 7;
  int differ = 0;
  for (int step = 0; step < 500; ++step) {
    differ += host_ms(a, 0, step) != host_ms(b, 0, step);
    REQUIRE(host_ms(b, 0, step) == host_ms(b, 0, step));
  }
  REQUIRE(differ > 20);
}
