// End to end with a real PyTorch (2.15 here): a 4-rank gloo job under fr-run and frd whose rank 3
// stays in Python (torch_incident_run.py runs it, bounded in time). gloo records nothing of fr's
// own, yet the job's processes are counted (processes.total 4, "none has called NCCL or NIXL"),
// the stall is seen through torch's progress (--stall-after), and the incident's dump set holds
// torch's own recorder dump of every rank (fr-run's hook) and every rank's stacks; fr-analyze
// names rank 3. The same job on the emulated NCCL (torch_nccl_job.py: torch's process group on
// gloo and a NCCL communicator of the same ranks beside it, rank 3 stuck in Python between torch's
// all_reduce and NCCL's): fr's verdict on its communicator carries torch's process group, the
// Python call site and rank 3 as stuck between torch and NCCL. Skipped (exit 77) where python3
// cannot import torch.
#include <sys/wait.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "skip.h"
#include "temp_dir.h"

using nlohmann::json;

namespace {

int run(const std::string& cmd, std::string* out) {
  out->clear();
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return -1;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out->append(buf, n);
  int st = pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

size_t count_suffix(const std::string& dir, const std::string& suffix) {
  size_t n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.size() > suffix.size() &&
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
      ++n;
  }
  return n;
}

}  // namespace

TEST_CASE("real torch on gloo: a rank hung in Python opens an incident that names it",
          "[e2e][torch]") {
  fr::test::TempDir dir;
  std::string out;
  int rc = run(std::string("timeout 400 python3 ") + FR_SOURCE_DIR +
                   "/tests/e2e/torch_incident_run.py " + FR_BUILD_DIR + " " + dir.path,
               &out);
  if (rc == 77) FR_SKIP("python3 cannot import torch (scripts/install-deps.sh installs it)");
  INFO(out);
  REQUIRE(rc == 0);
  json r = json::parse(out.substr(out.rfind("\n{") == std::string::npos ? 0 : out.rfind("\n{")));
  CHECK(r["processes_total"] == 4);
  CHECK(r["processes_summary"].get<std::string>().find("none has called NCCL or NIXL") !=
        std::string::npos);
  REQUIRE(r["incident"].is_object());
  CHECK(r["incident"]["kind"] == "stall");
  CHECK(r["incident"]["reason"].get<std::string>().find("torch") != std::string::npos);
  const std::string set = r["incident"]["dir"];
  // torch's own recorder of every rank, and every rank's stacks.
  CHECK(count_suffix(set, ".torchfr") == 4);
  const std::string node_log = r["node_log"];
  if (node_log.find("ptrace") == std::string::npos) CHECK(count_suffix(set, ".stacks.json") == 4);
  CHECK(r["incident"]["culprit_ranks"] == json::array({3}));
  // fr-analyze on the dump set: the same verdict, from torch's recorder (the world group's name).
  std::string analysis;
  REQUIRE(run(std::string(FR_BUILD_DIR) + "/bin/fr-analyze --json " + set, &analysis) == 0);
  json a = json::parse(analysis);
  INFO(analysis.substr(0, 4000));
  CHECK(a["verdict"]["kind"] == "not_entered");
  CHECK(a["verdict"]["culprit_ranks"] == json::array({3}));
}

TEST_CASE("real torch on the emulated NCCL: the verdict carries torch's group and call site",
          "[e2e][torch]") {
  fr::test::TempDir dir;
  std::string out;
  int rc = run(std::string("timeout 400 python3 ") + FR_SOURCE_DIR +
                   "/tests/e2e/torch_incident_run.py " + FR_BUILD_DIR + " " + dir.path + " --nccl",
               &out);
  if (rc == 77) FR_SKIP("python3 cannot import torch (scripts/install-deps.sh installs it)");
  INFO(out);
  REQUIRE(rc == 0);
  json r = json::parse(out.substr(out.rfind("\n{") == std::string::npos ? 0 : out.rfind("\n{")));
  REQUIRE(r["incident"].is_object());
  const std::string set = r["incident"]["dir"];
  CHECK(count_suffix(set, ".torchfr") == 4);
  std::string analysis;
  REQUIRE(run(std::string(FR_BUILD_DIR) + "/bin/fr-analyze --json " + set, &analysis) == 0);
  json a = json::parse(analysis);
  const json& v = a["verdict"];
  INFO(v.dump(1).substr(0, 4000));
  // fr's view decides: rank 3 never called NCCL's all_reduce #6, on fr's communicator.
  CHECK(v["kind"] == "not_entered");
  CHECK(v["culprit_ranks"] == json::array({3}));
  CHECK(v["seq"] == 6);
  CHECK(v["comm"]["id"].get<std::string>().find("0x") == 0);
  // torch's view joined into it: the default group, the line of the job that issued it, and
  // rank 3 between torch and NCCL.
  REQUIRE(v.contains("torch"));
  CHECK(v["torch"]["joined"] == true);
  CHECK(v["torch"]["pg_desc"] == "default_pg");
  CHECK(v["torch"]["seq"] == 6);
  CHECK(v["torch"]["call_site"]["function"] == "step");
  CHECK(v["torch"]["call_site"]["file"].get<std::string>().find("torch_nccl_job.py") !=
        std::string::npos);
  CHECK(v["torch"]["issued_in_torch_only"] == json::array({3}));
  CHECK(v["summary"].get<std::string>().find("torch process group default_pg") !=
        std::string::npos);
  CHECK(v["summary"].get<std::string>().find("torch_nccl_job.py:") != std::string::npos);
}
