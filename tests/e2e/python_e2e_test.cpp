// End to end: fr-simjob --python, whose ranks drive NCCL through ctypes as vLLM's pynccl does,
// names its communicators as the C++ ranks do (commName in the split's config), so the verdicts of
// the two read the same. The job is the one of simjob_e2e_test.cpp: 2 nodes x 4 ranks, TP 2, PP 2,
// DP 2; rank 3's DP group is dp1, its TP group tp1, its PP group pp3.
#include <cstdlib>
#include <string>

#include <catch2/catch.hpp>

#include "simjob_run.h"
#include "skip.h"

using fr::e2e::SimRun;
using nlohmann::json;

namespace {

std::string describe(const SimRun& run) {
  return "out dir " + run.dir + ", exit " + std::to_string(run.exit_code) + "\n" + run.output;
}

json verdict_of(const SimRun& run) {
  INFO(describe(run));
  REQUIRE(run.exit_code == 0);
  REQUIRE(run.result.is_object());
  REQUIRE(run.result["stop_reason"] == "stalled");
  REQUIRE(run.result.contains("analysis"));
  return run.result["analysis"]["verdict"];
}

}  // namespace

TEST_CASE("fr-simjob --python: the ranks name their communicators as the C++ ranks do",
          "[e2e][python]") {
  if (std::system("command -v python3 >/dev/null 2>&1") != 0) FR_SKIP("python3 is not on PATH");
  const std::string fault = GENERATE(std::string("rank=3,step=2,kind=skip,comm=dp"),
                                     std::string("rank=3,step=2,kind=gpu-stall,comm=tp"));
  INFO("fault " << fault);
  auto args = fr::e2e::small_job(4, {fault}, "2");
  SimRun cpp = fr::e2e::run_simjob(args);
  args.push_back("--python");
  SimRun py = fr::e2e::run_simjob(args);
  json vc = verdict_of(cpp), vp = verdict_of(py);
  INFO("C++ verdict " << vc.dump() << "\nPython verdict " << vp.dump());
  const std::string name = fault.find("comm=dp") != std::string::npos ? "dp1" : "tp1";
  REQUIRE(vc["comm"]["name"] == name);
  REQUIRE(vp["comm"]["name"] == name);
  for (const char* field : {"kind", "seq", "op", "culprit_ranks"}) REQUIRE(vp[field] == vc[field]);
  REQUIRE(vp["comm"]["size"] == vc["comm"]["size"]);
  // The summary names the communicator by its name; only its id (from the unique id) differs.
  REQUIRE(vp["summary"].get<std::string>().find(name) != std::string::npos);
  fr::e2e::remove_run(cpp);
  fr::e2e::remove_run(py);
}
