// Starts N rank processes of frsim_rank for one scenario and collects their exit statuses, with
// a deadline after which every remaining process is killed. Each test run gets its own shared-
// memory prefix so runs in parallel never meet, and the test can check nothing was left behind.
#pragma once

#include <string>
#include <vector>

namespace frsim_test {

struct RankResult {
  int status = -1;  // exit code, or 128 + signal, or -1 when killed at the deadline
  std::string output;
};

// Runs `frsim_rank scenario r n id [arg]` for r in 0..n-1 under the emulation.
// extra_env entries ("NAME=value") are added to every rank's environment.
std::vector<RankResult> run_ranks(const std::string& scenario, int n, const std::string& arg = "",
                                  int deadline_s = 120,
                                  const std::vector<std::string>& extra_env = {});

// The shm prefix the last run_ranks used, and the objects under /dev/shm that still carry it.
std::string last_prefix();
std::vector<std::string> leftover_shm(const std::string& prefix);

}  // namespace frsim_test
