// nccl4py (PyPI `nccl4py` 0.6, what torch's nccl4py backend uses) reaches libnccl.so.2 through
// its bindings' dlsym and the GPU through cuda.core: a real two-rank nccl4py job on the emulated
// NCCL and CUDA (nccl4py_job.py), from the /opt/fr-nccl4py virtual environment that
// scripts/install-deps.sh makes, with the agent preloaded. Its calls are recorded as a linked
// program's are, and a rank stuck in Python before a collective is named by fr-analyze.
#include <nccl.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <string>

#include "skip.h"
#include "test_util.h"

using fr::agent_test::env_for;
using fr::agent_test::records_of;
using fr::agent_test::run;
using fr::agent_test::RunResult;
using fr::agent_test::TempDir;

namespace {

const std::string kPython = FR_NCCL4PY_PYTHON;
const std::string kJob = FR_SOURCE_DIR "/tests/agent/nccl4py_job.py";
constexpr bool kSanitized = FR_AGENT_SANITIZED != 0;

// The job in `mode` with the agent preloaded, its logs in `logs`.
RunResult run_job(const TempDir& logs, const TempDir& work, const char* mode) {
  if (kSanitized) FR_SKIP("sanitizer build: the agent is preloaded into Python");
  if (access(kPython.c_str(), X_OK) != 0)
    FR_SKIP("no nccl4py: " << kPython << " is missing (scripts/install-deps.sh makes it)");
  const std::string sim = FR_SIM_NCCL;
  return run({kPython, kJob, work.path(), mode},
             env_for(logs, {{"LD_PRELOAD", FR_AGENT_LIB},
                            {"LD_LIBRARY_PATH", sim.substr(0, sim.rfind('/'))},
                            {"PYTHONUNBUFFERED", "1"}}));
}

// Each rank's log, by the pid the job printed for it.
std::vector<fr::log::LogFile> logs_by_rank(const TempDir& dir, const RunResult& r) {
  std::vector<fr::log::LogFile> out(2);
  std::vector<bool> found(2, false);
  for (const auto& path : dir.logs()) {
    auto l = fr::log::read_log(path);
    INFO(path << ": " << l.message);
    REQUIRE(l.ok());
    for (int rank = 0; rank < 2; ++rank)
      if (std::to_string(l.log->header.pid) == r.values.at("pid" + std::to_string(rank))) {
        out[rank] = *l.log;
        found[rank] = true;
      }
  }
  REQUIRE(found[0]);
  REQUIRE(found[1]);
  return out;
}

}  // namespace

TEST_CASE("nccl4py on the emulated NCCL: each rank's calls are recorded", "[agent][nccl4py]") {
  TempDir logs, work;
  RunResult r = run_job(logs, work, "healthy");
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  REQUIRE(r.values["done"] == "1");
  // Three in-place sums of 1 and 2: 3, 6, 12 on both ranks.
  CHECK(r.values["sum0"] == "12");
  CHECK(r.values["sum1"] == "12");
  // The emulation lacks nccl4py's device-API query (ncclCommQueryProperties), as NCCL 2.28.9
  // does; the agent answers the name with ncclInvalidUsage, as NCCL answers a missing feature,
  // which the binding raises as an NCCL error.
  CHECK(r.values["properties"] == "NCCLError");
  const auto ranks = logs_by_rank(logs, r);
  CHECK(records_of(ranks[0], FR_OP_GET_UNIQUE_ID).size() == 1);
  CHECK(records_of(ranks[1], FR_OP_GET_UNIQUE_ID).empty());
  uint64_t comm = 0;
  for (int rank = 0; rank < 2; ++rank) {
    INFO("rank " << rank);
    // nccl4py's Communicator.init is ncclCommInitRankScalable with one id.
    auto inits = records_of(ranks[rank], FR_OP_COMM_INIT_RANK_SCALABLE);
    REQUIRE(inits.size() == 1);
    CHECK(inits[0].result == ncclSuccess);
    if (rank == 0) comm = inits[0].comm_id;
    CHECK(inits[0].comm_id == comm);
    auto ars = records_of(ranks[rank], FR_OP_ALLREDUCE);
    REQUIRE(ars.size() == 3);
    for (size_t i = 0; i < ars.size(); ++i) {
      CHECK(ars[i].comm_id == comm);
      CHECK(ars[i].seq == i + 1);
      CHECK(ars[i].count == 256);
      CHECK(ars[i].dtype == ncclFloat32);
      CHECK(ars[i].result == ncclSuccess);
    }
    CHECK(records_of(ranks[rank], FR_OP_COMM_DESTROY).size() == 1);
  }
}

TEST_CASE("nccl4py on the emulated NCCL: a rank stuck in Python before a collective is named",
          "[agent][nccl4py]") {
  TempDir logs, work;
  RunResult r = run_job(logs, work, "hang");
  INFO(r.out << r.err);
  REQUIRE(r.values["done"] == "1");
  const auto ranks = logs_by_rank(logs, r);
  CHECK(records_of(ranks[0], FR_OP_ALLREDUCE).size() == 3);
  CHECK(records_of(ranks[1], FR_OP_ALLREDUCE).size() == 2);
  if (std::string(FR_ANALYZE).empty()) FR_SKIP("this build has no fr-analyze");
  RunResult a = run({FR_ANALYZE, "--json", logs.path()}, {});
  INFO(a.out << a.err);
  auto j = nlohmann::json::parse(a.out, nullptr, false);
  REQUIRE(j.is_object());
  CHECK(j["verdict"]["kind"] == "not_entered");
  CHECK(j["verdict"]["culprit_ranks"] == nlohmann::json::array({1}));
  CHECK(j["verdict"]["seq"] == 3);
}
