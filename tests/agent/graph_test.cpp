// CUDA graphs under the agent (graph_probe.cpp on the emulation): replays through the runtime and
// through the driver entries cuGetProcAddress hands out are recorded, each replay once; the
// positions the graph writes and the sequence counters stay exact over 10,000 replays; graphs
// without NCCL work cost nothing; a captured op never replayed is never taken for a hang.
#include <catch2/catch.hpp>

#include "skip.h"
#include "test_util.h"
#ifdef FR_GRAPH_TEST_ANALYZER
#include "analyzer/analyze.h"
#endif

using fr::agent_test::env_for;
using fr::agent_test::only_log;
using fr::agent_test::records_of;
using fr::agent_test::run;
using fr::agent_test::RunResult;
using fr::agent_test::TempDir;

namespace {

const std::string kProbe = std::string(FR_AGENT_TEST_DIR) + "/fr_agent_graph_probe";

RunResult probe(const TempDir& dir, std::vector<std::string> args, fr::agent_test::Env extra = {}) {
  args.insert(args.begin(), kProbe);
  RunResult r = run(args, env_for(dir, std::move(extra)));
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  REQUIRE(r.values["failures"] == "0");
  return r;
}

std::string pos(uint32_t ordinal, uint32_t k) {
  char buf[32];
  snprintf(buf, sizeof buf, "%llx", (unsigned long long)FR_GRAPH_POS(ordinal, k));
  return buf;
}

}  // namespace

TEST_CASE("10,000 runtime replays: one record each, exact counters and positions", "[agent]") {
  TempDir dir;
  RunResult r = probe(dir, {"runtime", "10000"});
  INFO(r.out);
  CHECK(r.values["bad_positions"] == "0");
  CHECK(r.values["end.graphs"] == "1");
  CHECK(r.values["end.replays"] == "10000");
  CHECK(r.values["end.n_ops"] == "2");
  CHECK(r.values["end.coll_seq"] == "20000");
  CHECK(r.values["end.completed"] == pos(1, 2));
  auto log = only_log(dir);
  REQUIRE(log.graphs.size() == 1);
  CHECK(log.graphs[0].replays == 10000);
  CHECK((log.graphs[0].flags & FR_GRAPH_F_GPU_POSITION) != 0);
  // The graph's replay kernel (run by the emulation's host-side version) counted every replay.
  CHECK((log.header.flags & FR_LOG_F_GRAPH_REPLAY_KERNEL) != 0);
  CHECK((log.header.flags & FR_LOG_F_GRAPH_REPLAY_HOST) == 0);
  CHECK((log.graphs[0].flags & FR_GRAPH_F_GPU_REPLAYS) != 0);
  CHECK(log.graphs[0].gpu_replays == 10000);
  // The captured ops outlive the ring's wrap-around in the capture table.
  REQUIRE(log.captures.size() == 2);
  CHECK(log.captures[0].op == FR_OP_ALLREDUCE);
  CHECK(log.captures[0].op_index == 1);
  CHECK(log.captures[0].seq == 0);
  CHECK(log.captures[1].op == FR_OP_BROADCAST);
  CHECK(log.captures[1].aux == log.graphs[0].id);
  CHECK((log.captures[1].flags & FR_REC_F_GPU_POSITION) != 0);
  auto launches = records_of(log, FR_OP_GRAPH_LAUNCH);
  REQUIRE(!launches.empty());
  CHECK(launches.back().seq == 10000);
  CHECK(launches.back().count == 2);
  for (size_t i = 1; i < launches.size(); ++i) CHECK(launches[i].seq == launches[i - 1].seq + 1);
  CHECK(log.header.overwritten > 0);  // the ring wrapped
}

TEST_CASE("without module support, replays are tracked from the host as before", "[agent]") {
  // The emulated driver refuses cuModuleLoadData: the agent says so in the header, the graph
  // does not count its replays on the GPU, and the host resets its positions at each launch.
  TempDir dir;
  RunResult r = probe(dir, {"runtime", "200"}, {{"FRSIM_NO_MODULES", "1"}});
  CHECK(r.values["bad_positions"] == "0");
  CHECK(r.values["end.replays"] == "200");
  CHECK(r.values["end.completed"] == pos(1, 2));
  auto log = only_log(dir);
  CHECK((log.header.flags & FR_LOG_F_GRAPH_REPLAY_HOST) != 0);
  CHECK((log.header.flags & FR_LOG_F_GRAPH_REPLAY_KERNEL) == 0);
  REQUIRE(log.graphs.size() == 1);
  CHECK((log.graphs[0].flags & FR_GRAPH_F_GPU_REPLAYS) == 0);
  CHECK((log.graphs[0].flags & FR_GRAPH_F_GPU_POSITION) != 0);
  CHECK(log.graphs[0].gpu_replays == 0);
  CHECK(log.graphs[0].replays == 200);
}

TEST_CASE("driver launches through cuGetProcAddress's pointers are recorded once each", "[agent]") {
  TempDir dir;
  RunResult r = probe(dir, {"driver"});
  CHECK(r.values["end.replays"] == "4");
  CHECK(r.values["end.coll_seq"] == "8");
  CHECK(r.values["end.completed"] == pos(1, 2));
  auto log = only_log(dir);
  CHECK(records_of(log, FR_OP_GRAPH_LAUNCH).size() == 4);
}

TEST_CASE("a graph without NCCL work is launched unrecorded", "[agent]") {
  TempDir dir;
  RunResult r = probe(dir, {"no_nccl"});
  CHECK(r.values["end.graphs"] == "0");
  auto log = only_log(dir);
  CHECK(records_of(log, FR_OP_GRAPH_LAUNCH).empty());
  CHECK(log.graphs.empty());
}

TEST_CASE("captured ops that are never replayed are no hang", "[agent]") {
  TempDir dir;
  RunResult r = probe(dir, {"unreplayed"});
  auto log = only_log(dir);
  CHECK(log.captures.size() == 2);
  CHECK(records_of(log, FR_OP_GRAPH_LAUNCH).empty());
  REQUIRE(log.comms.size() == 1);
  CHECK(log.comms[0].coll_seq == 1);  // the eager all-reduce only
#ifdef FR_GRAPH_TEST_ANALYZER
  std::string err;
  auto a = fr::analyzer::analyze_paths({dir.path()}, {}, &err);
  INFO(err << a.dump());
  REQUIRE(a.is_object());
  CHECK(a["verdict"]["kind"] == "no_hang");
#else
  FR_SKIP("sanitizer build: the analyzer is not part of it, the verdict is not checked");
#endif
}
