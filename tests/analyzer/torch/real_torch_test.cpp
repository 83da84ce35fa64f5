// fr-analyze on what a real PyTorch writes: small gloo jobs (real/fr_torch_job.py, 127.0.0.1
// only, bounded in time) with one planted fault each, dumped by torch itself in its three forms
// (_dump_fr_trace_file, _dump_fr_trace bytes, _dump_fr_trace_json as rank_N.json). Every form
// must give the right kind and culprits, or `incomplete` naming what is missing; a rank that did
// nothing wrong is never a culprit. Skipped (exit 77) where python3 cannot import torch.
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "real_torch_checks.h"
#include "skip.h"
#include "temp_dir.h"

namespace {

using fr::test::TempDir;

// Output and exit status of a shell command.
int run(const std::string& cmd, std::string* out) {
  out->clear();
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return -1;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out->append(buf, n);
  int st = pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

// Runs one faulty job; its dumps land in DIR/<fault>/{file,bytes,json}. The script exits 77
// when torch cannot be imported.
std::string run_job(const TempDir& dir, const std::string& fault) {
  std::string out;
  int rc = run(std::string("timeout 280 python3 ") + FR_SOURCE_DIR +
                   "/tests/analyzer/torch/real/fr_torch_job.py " + dir.path + " " + fault,
               &out);
  if (rc == 77)
    FR_SKIP("python3 cannot import torch (scripts/install-deps.sh installs it): " << out);
  INFO(out);
  REQUIRE(rc == 0);
  return dir.path + "/" + fault;
}

}  // namespace

TEST_CASE(
    "real torch: a rank that stays on the host is named, with the collective it never entered",
    "[real_torch]") {
  TempDir dir;
  fr_real_torch::check_forms("hang", run_job(dir, "hang"));
}

TEST_CASE("real torch: a rank that skips a collective is named", "[real_torch]") {
  TempDir dir;
  fr_real_torch::check_forms("skip", run_job(dir, "skip"));
}

TEST_CASE("real torch: a rank that calls a collective with another size is named", "[real_torch]") {
  TempDir dir;
  fr_real_torch::check_forms("size", run_job(dir, "size"));
}

TEST_CASE("real torch: a rank that calls another op is named", "[real_torch]") {
  TempDir dir;
  fr_real_torch::check_forms("op", run_job(dir, "op"));
}

TEST_CASE("real torch: a hang in a new_group is placed in that group, blaming none of its waiters",
          "[real_torch]") {
  TempDir dir;
  fr_real_torch::check_forms("group", run_job(dir, "group"));
}

TEST_CASE("real torch: a rank killed before it dumps leaves the verdict incomplete, naming it",
          "[real_torch]") {
  TempDir dir;
  fr_real_torch::check_forms("kill", run_job(dir, "kill"));
}

TEST_CASE(
    "real torch: gloo's unrecorded send/recv are read as such, and the verdict says what "
    "they leave undecided",
    "[real_torch]") {
  TempDir dir;
  fr_real_torch::check_forms("p2p", run_job(dir, "p2p"));
}

TEST_CASE("real torch: in a group of two, the rank that never matched an unrecorded send is named",
          "[real_torch]") {
  TempDir dir;
  fr_real_torch::check_forms("p2p_pair", run_job(dir, "p2p_pair"));
}

TEST_CASE("real torch: a skipped send whose victim waits in recv is said to be undecidable",
          "[real_torch]") {
  TempDir dir;
  fr_real_torch::check_forms("p2p_skip", run_job(dir, "p2p_skip"));
}

TEST_CASE("real torch: a rank whose dump is empty is the world's member that never entered #1",
          "[real_torch]") {
  TempDir dir;
  fr_real_torch::check_forms("empty", run_job(dir, "empty"));
}

TEST_CASE("real torch: the member of a group no dump lists is inferred, and blamed on its op",
          "[real_torch]") {
  TempDir dir;
  fr_real_torch::check_forms("unreached", run_job(dir, "unreached"));
}

TEST_CASE("real torch: a stale dump names its rank as dead or stale where the others wait",
          "[real_torch]") {
  TempDir dir;
  fr_real_torch::check_forms("stale", run_job(dir, "stale"));
}

TEST_CASE("real torch: a collective that raised is shown raised, never completed", "[real_torch]") {
  TempDir dir;
  fr_real_torch::check_forms("raised", run_job(dir, "raised"));
}

TEST_CASE("real torch: a root mismatch gloo cannot show is said to be undecidable, nobody blamed",
          "[real_torch]") {
  TempDir dir;
  fr_real_torch::check_forms("root", run_job(dir, "root"));
}

TEST_CASE(
    "real torch: a rank held on the host is blamed in its own group, never in one whose ops it "
    "never recorded",
    "[real_torch]") {
  TempDir dir;
  fr_real_torch::check_forms("subgroups", run_job(dir, "subgroups"));
}

TEST_CASE("real torch: a rank that sleeps before every collective is named slow, on its host",
          "[real_torch]") {
  TempDir dir;
  fr_real_torch::check_forms("slow", run_job(dir, "slow"));
}
