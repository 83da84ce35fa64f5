// Fail-slow end to end: fr-simjob jobs (2 nodes x 2 ranks, so ranks of different nodes talk over
// NET) with a slow host, a slow GPU or a slow link, and healthy jobs with jitter and checkpoint
// pauses; fr-analyze's `slow` finding on their dump sets. Each job runs a few seconds at most.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>
#include <vector>

#include "analyzer/analyze.h"
#include "simjob_run.h"

using fr::e2e::SimRun;
using nlohmann::json;

namespace {

std::vector<std::string> job(int steps, std::vector<std::string> extra) {
  std::vector<std::string> a = {"--nodes",   "2",       "--ranks-per-node",
                                "2",         "--steps", std::to_string(steps),
                                "--step-ms", "5",       "--quiet"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

std::string describe(const SimRun& run) {
  return "exit " + std::to_string(run.exit_code) + ", output: " + run.output +
         "\nresult: " + (run.result.is_null() ? "none" : run.result.dump());
}

std::vector<json> slow_findings(const json& analysis) {
  std::vector<json> out;
  for (const auto& f : analysis.value("findings", json::array()))
    if (f["kind"] == "slow") out.push_back(f);
  return out;
}

// The finished job's flight logs, node by node, into dump sets with the emulated NVML's GPU
// health (frd snapshot, as an operator would take them), then analysed together.
json analyze_with_gpus(const SimRun& run) {
  const std::string build = fr::e2e::build_dir();
  std::vector<std::string> sets;
  for (int node = 0; node < 2; ++node) {
    const std::string n = run.dir + "/node" + std::to_string(node);
    const std::string out = run.dir + "/gpusnap" + std::to_string(node);
    const std::string cmd = "FR_SIM_NVML=" + n + "/nvml.conf " + build +
                            "/bin/frd snapshot --no-stacks --log-dir " + n + "/shm --out " + out +
                            " --nvml-lib " + build + "/sim/lib/libnvidia-ml.so.1 >/dev/null 2>&1";
    REQUIRE(std::system(cmd.c_str()) == 0);
    sets.push_back(out);
  }
  std::string err;
  json doc = fr::analyzer::analyze_paths(sets, {}, &err);
  INFO(err);
  REQUIRE(doc.is_object());
  return doc;
}

}  // namespace

TEST_CASE("fail-slow e2e: a slow host is named, with its lateness and the step it costs",
          "[e2e][slow]") {
  SimRun run = fr::e2e::run_simjob(job(24, {"--fault", "rank=3,step=4,kind=slow,ms=25"}), 60);
  INFO(describe(run));
  REQUIRE(run.exit_code == 0);
  const json& a = run.result["analysis"];
  CHECK(a["verdict"]["kind"] == "no_hang");
  auto found = slow_findings(a);
  REQUIRE(found.size() == 1);
  CHECK(found[0]["culprit_ranks"] == json::array({3}));
  CHECK(found[0]["slow"]["cause"] == "host");
  CHECK(found[0]["slow"]["value_ns"].get<int64_t>() > 20'000'000);
  CHECK(found[0]["slow"]["factor"].get<double>() > 2);
  CHECK(found[0]["slow"]["loss_percent"].get<double>() > 50);
  fr::e2e::remove_run(run);
}

TEST_CASE("fail-slow e2e: a slow GPU is named, its cause from its GPU's throttling",
          "[e2e][slow]") {
  SimRun run =
      fr::e2e::run_simjob(job(24, {"--fault", "rank=1,step=4,kind=gpu-slow,factor=4"}), 60);
  INFO(describe(run));
  REQUIRE(run.exit_code == 0);
  CHECK(run.result["gpu_us"] == 1000);
  // Its host waits for its GPU at the end of each step: late at the next step's first call.
  auto found = slow_findings(run.result["analysis"]);
  REQUIRE(found.size() == 1);
  CHECK(found[0]["culprit_ranks"] == json::array({1}));
  // fr-simjob's own dump set has no GPU health: the lateness alone says host. With the GPUs'
  // NVML health beside the dumps, the throttled GPU is the cause.
  CHECK(found[0]["slow"]["cause"] == "host");
  json doc = analyze_with_gpus(run);
  found = slow_findings(doc);
  REQUIRE(found.size() == 1);
  CHECK(found[0]["culprit_ranks"] == json::array({1}));
  CHECK(found[0]["slow"]["cause"] == "gpu");
  CHECK(found[0]["slow"]["nvml_throttle"] == json::array({"HwThermalSlowdown"}));
  CHECK(found[0]["summary"].get<std::string>().find("NVML") != std::string::npos);
  fr::e2e::remove_run(run);
}

TEST_CASE("fail-slow e2e: a slow link slows every member alike, and no host is blamed for it",
          "[e2e][slow]") {
  // 1 -> 2 crosses the nodes; the world and dp AllReduces (rings) use it every step: from step 4
  // on each takes 10 x 1 ms on that link, beside 5 ms of host work and 1 ms of kernel work per
  // collective: at least 20 x (5 + 3 x 1 + 2 x 10) ms. (A healthy run has no such floor: 24 x 11
  // ms.) Only lower bounds: the pace's gates never fire early.
  SimRun run = fr::e2e::run_simjob(
      job(24, {"--fault", "rank=1,step=4,kind=link-slow,peer=2,factor=10"}), 60);
  INFO(describe(run));
  REQUIRE(run.exit_code == 0);
  CHECK(run.result["job_s"].get<double>() >= 0.56);
  // The profiler plugin's slot for rank 1's sends to 2 shows the last op that used it lasting
  // the slow step at least.
  auto ranks = fr::e2e::load_dump_set(run.result["dump_set"].get<std::string>());
  bool seen = false;
  for (const auto& c : ranks.at(1).log.chans)
    if (c.kind == FR_CHAN_SEND && c.peer == 2 && c.ops_done > 0) {
      seen = true;
      CHECK(c.last_ns - c.op_start_ns >= 10'000'000);
    }
  CHECK(seen);
  CHECK(slow_findings(run.result["analysis"]).empty());
  fr::e2e::remove_run(run);
}

TEST_CASE("fail-slow e2e: healthy jobs with jitter and checkpoint pauses give no slow finding",
          "[e2e][slow]") {
  for (const char* seed : {"1", "2"}) {
    SimRun run = fr::e2e::run_simjob(
        job(30, {"--step-jitter", "10", "--seed", seed, "--pause", "every=7,ms=120"}), 60);
    INFO(describe(run));
    REQUIRE(run.exit_code == 0);
    CHECK(run.result["pause"]["every"] == 7);
    CHECK(run.result["analysis"]["verdict"]["kind"] == "no_hang");
    CHECK(slow_findings(run.result["analysis"]).empty());
    fr::e2e::remove_run(run);
  }
}
