// End to end: fr-simjob's own dump set (no daemons) carries every live rank's stacks, taken as the
// node daemon takes them (the `frd stacks` helper), so its verdict shows the culprit's stack. The
// job is the one of simjob_e2e_test.cpp: 2 nodes x 4 ranks, TP 2, PP 2, DP 2.
#include <filesystem>
#include <string>

#include <catch2/catch.hpp>

#include "simjob_run.h"
#include "skip.h"
#include "stack_frames.h"

using fr::e2e::SimRun;
using nlohmann::json;

namespace {

std::string describe(const SimRun& run) {
  return "out dir " + run.dir + ", exit " + std::to_string(run.exit_code) + "\n" + run.output;
}

using fr::test::frame_index;
using fr::test::frames_text;

}  // namespace

TEST_CASE("fr-simjob: its own dump set shows the hung rank's stack", "[e2e][stacks]") {
  // A generous budget, so that a loaded test machine still takes all 8 (about 4 s on 2 busy cores).
  auto args = fr::e2e::small_job(6, {"rank=5,step=3,kind=hang-host"}, "2");
  args.insert(args.end(), {"--stack-budget", "30"});
  SimRun run = fr::e2e::run_simjob(args);
  INFO(describe(run));
  REQUIRE(run.exit_code == 0);
  REQUIRE(run.result.is_object());
  REQUIRE(run.result["stop_reason"] == "stalled");
  const json& taken = run.result["snapshot"]["stacks"];
  INFO("stacks: " << taken.dump());
  if (taken["taken"] == 0 && !taken["notes"].empty() &&
      taken["notes"][0].get<std::string>().find("ptrace") != std::string::npos)
    FR_SKIP("ptrace is not permitted here: " + taken["notes"][0].get<std::string>());
  REQUIRE(taken["taken"] == 8);
  REQUIRE(taken["notes"].empty());
  // A stacks file beside every dump of the set.
  size_t dumps = 0, stacks = 0;
  for (const auto& f :
       std::filesystem::directory_iterator(run.result["dump_set"].get<std::string>())) {
    std::string name = f.path().filename().string();
    if (name.size() > 6 && name.compare(name.size() - 6, 6, ".frlog") == 0) ++dumps;
    if (name.find(".frlog.stacks.json") != std::string::npos) ++stacks;
  }
  REQUIRE(dumps == 8);
  REQUIRE(stacks == 8);

  REQUIRE(run.result.contains("analysis"));
  const json& v = run.result["analysis"]["verdict"];
  REQUIRE(v["kind"] == "not_entered");
  REQUIRE(v["culprit_ranks"] == json::array({5}));
  json e;
  for (const auto& x : v["evidence"])
    if (x["rank"] == 5) e = x;
  REQUIRE(e.contains("stack"));
  const json& st = e["stack"];
  INFO("rank 5: " << frames_text(st));
  size_t hang = frame_index(st, "hang_forever"), step = frame_index(st, "run_step");
  REQUIRE(hang < step);
  REQUIRE(step < st.size());
  CHECK(st[hang]["file"].get<std::string>().find("rank_main.cpp") != std::string::npos);
  // Rank 5 alone stands apart from the others.
  bool outlier = false;
  for (const auto& g : run.result["analysis"]["stack_groups"])
    if (g["outlier"] == true && g["ranks"] == json::array({5})) outlier = true;
  CHECK(outlier);
  fr::e2e::remove_run(run);
}
