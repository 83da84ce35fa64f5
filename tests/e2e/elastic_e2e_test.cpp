// End to end under --elastic: at step 3 the highest rank (7) leaves; the survivors revoke the
// world, shrink it without rank 7 and grow it back with a fresh process that takes rank 7 through
// ncclCommGrow; TP, PP and DP are split again from the grown world. A joiner that never joins, a
// hang after the grow and a crash during the shrink must each get the right verdict, through
// fr-analyze (result.json's analysis) and through the daemons.
//
// The job is the one of simjob_e2e_test.cpp: 2 nodes x 4 ranks, TP 2, PP 2, DP 2.
#include <set>

#include <catch2/catch.hpp>

#include "simjob_run.h"
#include "skip.h"

using fr::e2e::SimRun;
using nlohmann::json;

namespace {

constexpr int kLeaving = 7;
constexpr int kElasticStep = 3;

std::string describe(const SimRun& run) {
  return "out dir " + run.dir + ", exit " + std::to_string(run.exit_code) + "\n" + run.output;
}

std::vector<std::string> elastic_job(int steps, const std::vector<std::string>& faults,
                                     bool daemons) {
  std::vector<std::string> a;
  if (daemons) {
    a = {"--nodes", "2",       "--ranks-per-node",    "4",         "--tp",          "2", "--pp",
         "2",       "--steps", std::to_string(steps), "--daemons", "--stall-after", "2", "--quiet"};
    for (const auto& f : faults) a.insert(a.end(), {"--fault", f});
  } else {
    a = fr::e2e::small_job(steps, faults, "2");
  }
  a.insert(a.end(), {"--elastic", std::to_string(kElasticStep)});
  return a;
}

const json& verdict_of(const SimRun& run) {
  INFO(describe(run));
  REQUIRE(run.result.is_object());
  REQUIRE(!run.result.contains("analysis_error"));
  if (!run.result.contains("analysis"))
    FR_SKIP("not built: fr-simjob was built without the analyzer, verdict not checked");
  return run.result["analysis"]["verdict"];
}

std::set<int> culprits(const json& v) {
  std::set<int> got;
  for (const auto& c : v["culprit_ranks"]) got.insert(c.get<int>());
  return got;
}

// A run that stopped on a hang (a stall snapshot, or the coordinator's incident).
SimRun hung(const std::vector<std::string>& faults, bool daemons) {
  SimRun run = fr::e2e::run_simjob(elastic_job(20, faults, daemons));
  INFO(describe(run));
  REQUIRE(run.exit_code == 0);
  REQUIRE(run.result.is_object());
  REQUIRE(run.result["elastic"] == kElasticStep);
  REQUIRE(run.result["completed"] == false);
  REQUIRE(run.result["stop_reason"] == (daemons ? "incident" : "stalled"));
  return run;
}

// The process of rank 7 that left did so at the elastic step, with the leaving exit code, and a
// fresh process took its place.
void check_replaced(const SimRun& run) {
  const json& r7 = run.result["ranks"][kLeaving];
  INFO(r7.dump());
  REQUIRE(r7["joined"] == true);
  REQUIRE(r7["left"]["exit_code"] == 10);
  REQUIRE(r7["left"]["pid"] != r7["pid"]);
}

}  // namespace

TEST_CASE("fr-simjob --elastic: rank 7 leaves, a fresh process joins, training goes on", "[e2e]") {
  for (bool graphs : {false, true}) {
    INFO("graphs " << graphs);
    auto args = elastic_job(8, {}, false);
    if (graphs) args.push_back("--graphs");
    SimRun run = fr::e2e::run_simjob(args);
    INFO(describe(run));
    REQUIRE(run.exit_code == 0);
    REQUIRE(run.result["completed"] == true);
    check_replaced(run);
    for (const auto& r : run.result["ranks"]) {
      CHECK(r["exit_code"] == 0);
      CHECK(r["steps_done"] == 8);  // the joiner goes on counting where the one that left stopped
      CHECK(r["check_failures"] == 0);
    }
    const json& v = verdict_of(run);
    CHECK(v["kind"] == "no_hang");
    // The grown world is one communicator of all 8 ranks: members and joiner alike.
    bool grown = false;
    for (const auto& c : run.result["analysis"]["communicators"])
      if (c["name"] == "world") {
        grown = true;
        CHECK(c["members"].size() == 8);
      }
    CHECK(grown);
    fr::e2e::remove_run(run);
  }
}

TEST_CASE("fr-simjob --elastic: bad usage exits 2 with one clear line", "[e2e]") {
  struct Case {
    std::vector<std::string> args;
    std::string message;
  } cases[] = {
      {{"--nodes", "2", "--ranks-per-node", "4", "--steps", "3", "--elastic", "3"},
       "outside the job"},
      {{"--nodes", "1", "--ranks-per-node", "1", "--steps", "3", "--elastic", "1"},
       "at least 2 ranks"},
      {{"--nodes", "2", "--ranks-per-node", "4", "--steps", "3", "--elastic", "-1"}, "--elastic"},
  };
  for (const auto& c : cases) {
    SimRun run = fr::e2e::run_simjob(c.args);
    INFO(describe(run));
    REQUIRE(run.exit_code == 2);
    REQUIRE(run.output.find(c.message) != std::string::npos);
    REQUIRE(run.result.is_null());
    fr::e2e::remove_run(run);
  }
}

void joiner_never_joins(bool daemons) {
  SimRun run = hung({"rank=7,step=3,kind=hang-host"}, daemons);
  check_replaced(run);
  const json& v = verdict_of(run);
  INFO(v.dump(1));
  CHECK(v["kind"] == "not_entered");
  CHECK(v["op"] == "CommGrow");
  CHECK(culprits(v) == std::set<int>{kLeaving});
  CHECK(v["blocked_ranks"].size() == 7);
  fr::e2e::remove_run(run);
}

void hang_after_grow(bool daemons) {
  SimRun run = hung({"rank=2,step=4,kind=hang-host"}, daemons);
  check_replaced(run);
  const json& v = verdict_of(run);
  INFO(v.dump(1));
  CHECK(v["kind"] == "not_entered");
  CHECK(culprits(v) == std::set<int>{2});
  CHECK(v["comm"]["name"] == "world");  // the grown world (the first one has no name)
  CHECK(v["comm"]["size"] == 8);
  fr::e2e::remove_run(run);
}

void crash_during_shrink(bool daemons) {
  SimRun run = hung({"rank=1,step=3,kind=crash"}, daemons);
  check_replaced(run);  // the joiner waits for an id the coordinator never made
  const json& v = verdict_of(run);
  INFO(run.result["analysis"].dump(1));
  CHECK(v["kind"] == "rank_dead");
  CHECK(v["op"] == "CommShrink");
  CHECK(culprits(v) == std::set<int>{1});
  bool named = false;
  for (const auto& f : run.result["analysis"]["findings"])
    if (f["op"] == "CommShrink" && f["kind"] == "not_entered") {
      named = true;
      CHECK(culprits(f) == std::set<int>{1});
      CHECK(f["shrink_excluded"] == json::array({kLeaving}));
    }
  CHECK(named);
  fr::e2e::remove_run(run);
}

TEST_CASE("fr-simjob --elastic: a joiner that never joins is not_entered in the grow", "[e2e]") {
  joiner_never_joins(false);
}

TEST_CASE("fr-simjob --elastic: a hang after the grow is decided on the grown world at full size",
          "[e2e]") {
  hang_after_grow(false);
}

TEST_CASE(
    "fr-simjob --elastic: a crash during the shrink names the dead survivor, not the rank "
    "that left",
    "[e2e]") {
  crash_during_shrink(false);
}

TEST_CASE("fr-simjob --elastic: a fault on rank 7 after the elastic step hits the new process",
          "[e2e]") {
  SimRun run = hung({"rank=7,step=4,kind=gpu-stall,comm=dp"}, false);
  check_replaced(run);
  const json& v = verdict_of(run);
  INFO(v.dump(1));
  CHECK(v["kind"] == "stuck_in_collective");
  CHECK(culprits(v) == std::set<int>{kLeaving});
  fr::e2e::remove_run(run);
}

TEST_CASE("fr-simjob --elastic --daemons: the coordinator's verdicts across the shrink and grow",
          "[e2e]") {
  joiner_never_joins(true);
  hang_after_grow(true);
  crash_during_shrink(true);
}
