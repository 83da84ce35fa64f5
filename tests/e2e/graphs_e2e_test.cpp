// End to end under --graphs: after one eager warm-up step every rank captures its whole step into
// one CUDA graph (through the emulated CUDA runtime, as torch does) and replays it. Each fault
// kind acts on a replay; the verdict must name the replay and the captured op, through
// fr-analyze (result.json's analysis) and through the daemons.
//
// The job is the one of simjob_e2e_test.cpp: 2 nodes x 4 ranks, TP 2, PP 2, DP 2. The graph holds
// 7 ops in this order: TP all-gather (1) and reduce-scatter (2), the pipeline's forward (3) and
// backward (4) send/recv groups, the DP all-reduce (5), the world all-reduce (6) and broadcast (7).
// Step s >= 1 is replay s.
#include <set>

#include <catch2/catch.hpp>

#include "simjob_run.h"
#include "skip.h"

using fr::e2e::RankView;
using fr::e2e::SimRun;
using nlohmann::json;

namespace {

constexpr int kWorld = 8;
constexpr int kGraphOps = 7;

std::string describe(const SimRun& run) {
  return "out dir " + run.dir + ", exit " + std::to_string(run.exit_code) + "\n" + run.output;
}

std::vector<std::string> graph_job(int steps, const std::vector<std::string>& faults) {
  auto a = fr::e2e::small_job(steps, faults, "2");
  a.push_back("--graphs");
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

// The verdict's kind and culprits; `replay`/`op` > 0: the replay and captured op it names.
void check(const SimRun& run, const std::string& kind, std::set<int> culprits, int replay = 0,
           int op = 0) {
  const json& v = verdict_of(run);
  INFO(describe(run) << "\nverdict " << v.dump());
  REQUIRE(v["kind"] == kind);
  std::set<int> got;
  for (const auto& c : v["culprit_ranks"]) got.insert(c.get<int>());
  REQUIRE(got == culprits);
  if (replay > 0) {
    REQUIRE(v.contains("graph_replay"));
    REQUIRE(v["graph_replay"]["replay"] == replay);
    REQUIRE(v["graph_replay"]["captured_ops"] == kGraphOps);
    REQUIRE(v["graph_replay"]["seq"] == v["seq"]);
    REQUIRE(v["graph_replay"].contains("count"));
    REQUIRE(v["graph_replay"].contains("dtype"));
    if (op > 0) REQUIRE(v["graph_replay"]["captured_op"] == op);
    REQUIRE(v["summary"].get<std::string>().find("replay " + std::to_string(replay)) !=
            std::string::npos);
  }
}

SimRun stalled(const std::vector<std::string>& args) {
  SimRun run = fr::e2e::run_simjob(args);
  INFO(describe(run));
  REQUIRE(run.exit_code == 0);
  REQUIRE(run.result.is_object());
  REQUIRE(run.result["graphs"] == true);
  REQUIRE(run.result["completed"] == false);
  return run;
}

}  // namespace

TEST_CASE("fr-simjob --graphs: a healthy job replays its step and every replay completes",
          "[e2e]") {
  SimRun run = fr::e2e::run_simjob(graph_job(6, {}));
  INFO(describe(run));
  REQUIRE(run.exit_code == 0);
  REQUIRE(run.result["completed"] == true);
  for (const auto& r : run.result["ranks"]) REQUIRE(r["check_failures"] == 0);
  auto ranks = fr::e2e::load_dump_set(run.result["dump_set"].get<std::string>());
  REQUIRE(ranks.size() == kWorld);
  for (const auto& [rank, v] : ranks) {
    INFO("rank " << rank);
    // One graph of 7 captured ops, replayed for steps 1..5.
    REQUIRE(v.log.graphs.size() == 1);
    REQUIRE(v.log.graphs[0].n_ops == kGraphOps);
    REQUIRE(v.log.graphs[0].replays == 5);
    REQUIRE((v.log.graphs[0].flags & FR_GRAPH_F_GPU_POSITION) != 0);
    REQUIRE(v.log.captures.size() == kGraphOps);
    size_t launches = 0;
    for (const auto& rec : v.log.records)
      if (rec.raw.op == FR_OP_GRAPH_LAUNCH) {
        ++launches;
        REQUIRE(rec.raw.seq == launches);
        REQUIRE(rec.raw.aux == v.log.graphs[0].id);
        REQUIRE((rec.raw.flags & FR_REC_F_LAUNCHED) != 0);
      }
    REQUIRE(launches == 5);
    // Sequence numbers counted the replays: 6 steps of 2 world collectives.
    const fr_comm_entry* world = v.log.find_comm(v.comm_ids.at("world"));
    REQUIRE(world != nullptr);
    REQUIRE(world->coll_seq == 12);
    // The last replay wrote its position: the broadcast, the graph's last op, finished.
    REQUIRE(world->graph_completed == FR_GRAPH_POS(1, kGraphOps));
  }
  REQUIRE(run.result["analysis"]["verdict"]["kind"] == "no_hang");
  fr::e2e::remove_run(run);
}

TEST_CASE("fr-simjob --graphs: hang-host blocks before launching replay 3", "[e2e]") {
  SimRun run = stalled(graph_job(6, {"rank=5,step=3,kind=hang-host"}));
  check(run, "not_entered", {5}, 3);
  fr::e2e::remove_run(run);
}

TEST_CASE("fr-simjob --graphs: gpu-stall stalls the stream inside replay 3 at the DP all-reduce",
          "[e2e]") {
  SimRun run = stalled(graph_job(6, {"rank=6,step=3,kind=gpu-stall,comm=dp"}));
  check(run, "stuck_in_collective", {6}, 3, 5);
  fr::e2e::remove_run(run);
}

TEST_CASE("fr-simjob --graphs: crash before replay 3", "[e2e]") {
  SimRun run = stalled(graph_job(6, {"rank=2,step=3,kind=crash"}));
  check(run, "rank_dead", {2});
  fr::e2e::remove_run(run);
}

TEST_CASE("fr-simjob --graphs: skip of replay 3 leaves the others one replay short", "[e2e]") {
  // Rank 3 replays one graph fewer: its replays pair with the others' previous ones, it finishes
  // its steps and leaves while the others wait in their last replay.
  SimRun run = stalled(graph_job(6, {"rank=3,step=3,kind=skip"}));
  const json& v = verdict_of(run);
  INFO("verdict " << v.dump());
  REQUIRE(v["culprit_ranks"] == json::array({3}));
  REQUIRE(v.contains("graph_replay"));
  REQUIRE(v["graph_replay"]["replay"] == 5);
  fr::e2e::remove_run(run);
}

TEST_CASE("fr-simjob --graphs: the mismatch kinds capture a different op", "[e2e]") {
  struct Case {
    const char* fault;
    int culprit;
    const char* field;
    int op;
  } cases[] = {{"rank=1,step=3,kind=mismatch-count,comm=tp", 1, "count", 1},
               {"rank=2,step=3,kind=mismatch-dtype", 2, "dtype", 5},
               {"rank=4,step=3,kind=mismatch-op,comm=world", 4, "redop", 6},
               {"rank=3,step=3,kind=mismatch-root", 3, "root", 7}};
  for (const Case& c : cases) {
    INFO(c.fault);
    SimRun run = stalled(graph_job(6, {c.fault}));
    check(run, "mismatch", {c.culprit}, 3, c.op);
    REQUIRE(verdict_of(run)["mismatch"]["field"] == c.field);
    fr::e2e::remove_run(run);
  }
}

TEST_CASE("fr-simjob --graphs: p2p-skip captures a pipeline group without its send", "[e2e]") {
  SimRun run = stalled(graph_job(6, {"rank=1,step=3,kind=p2p-skip"}));
  // Rank 1's own graph for step 3 is its first replay of that graph; its peer waits in replay 3
  // of the faultless one, whose forward receive is captured op 3.
  check(run, "p2p_unmatched", {1});
  const json& v = verdict_of(run);
  REQUIRE(v.contains("graph_replay"));
  CHECK(v["graph_replay"]["op"] == "Recv");
  fr::e2e::remove_run(run);
}

TEST_CASE("fr-simjob --graphs --daemons: the coordinator names the replay", "[e2e]") {
  struct Case {
    const char* fault;
    const char* kind;
    int culprit;
    int op;
  } cases[] = {{"rank=5,step=3,kind=hang-host", "not_entered", 5, 0},
               {"rank=6,step=3,kind=gpu-stall,comm=dp", "stuck_in_collective", 6, 5}};
  for (const Case& c : cases) {
    INFO(c.fault);
    SimRun run = fr::e2e::run_simjob({"--nodes", "2", "--ranks-per-node", "4", "--tp", "2", "--pp",
                                      "2", "--steps", "20", "--graphs", "--fault", c.fault,
                                      "--daemons", "--stall-after", "2", "--quiet"});
    INFO(describe(run));
    REQUIRE(run.exit_code == 0);
    REQUIRE(run.result["stop_reason"] == "incident");
    check(run, c.kind, {c.culprit}, 3, c.op);
    fr::e2e::remove_run(run);
  }
}

// --run-ahead: every host launches replay S+1 before replay S has finished on its stream, as a
// loop that never reads its loss does. A stall inside replay 3 must still be named replay 3 (the
// GPU's replay, counted by the graph itself), not replay 4, the newest one the hosts launched.
TEST_CASE("fr-simjob --graphs --run-ahead: a gpu-stall inside replay 3 names replay 3, not 4",
          "[e2e]") {
  auto args = graph_job(8, {"rank=6,step=3,kind=gpu-stall,comm=dp"});
  args.push_back("--run-ahead");
  SimRun run = stalled(args);
  check(run, "stuck_in_collective", {6}, 3, 5);
  // The hosts did run ahead: the stalled rank launched replay 4 while its GPU was inside 3.
  auto ranks = fr::e2e::load_dump_set(run.result["dump_set"].get<std::string>());
  const fr::log::LogFile& log = ranks.at(6).log;
  REQUIRE(log.graphs.size() == 1);
  CHECK(log.graphs[0].replays == 4);
  CHECK((log.graphs[0].flags & FR_GRAPH_F_GPU_REPLAYS) != 0);
  CHECK(log.graphs[0].gpu_replays == 3);
  fr::e2e::remove_run(run);
}

TEST_CASE("fr-simjob --graphs --run-ahead --daemons: the coordinator names replay 3", "[e2e]") {
  SimRun run = fr::e2e::run_simjob({"--nodes", "2", "--ranks-per-node", "4", "--tp", "2", "--pp",
                                    "2", "--steps", "20", "--graphs", "--run-ahead", "--fault",
                                    "rank=6,step=3,kind=gpu-stall,comm=dp", "--daemons",
                                    "--stall-after", "2", "--quiet"});
  INFO(describe(run));
  REQUIRE(run.exit_code == 0);
  REQUIRE(run.result["stop_reason"] == "incident");
  check(run, "stuck_in_collective", {6}, 3, 5);
  fr::e2e::remove_run(run);
}

TEST_CASE("fr-simjob --graphs --run-ahead: a healthy job completes", "[e2e]") {
  auto args = graph_job(12, {});
  args.push_back("--run-ahead");
  SimRun run = fr::e2e::run_simjob(args);
  INFO(describe(run));
  REQUIRE(run.exit_code == 0);
  REQUIRE(run.result["completed"] == true);
  fr::e2e::remove_run(run);
}
