// The log's file mode (0600 unless FR_LOG_MODE says otherwise, whatever the umask) and the
// agent's one-time diagnostics about its settings: a bad FR_LOG_MODE, and an FR_BUFFER_ENTRIES
// above the cap, which silently costs 512 MiB per process unless the agent says so.
#include <sys/stat.h>

#include <catch2/catch.hpp>

#include "test_util.h"

using fr::agent_test::Env;
using fr::agent_test::env_for;
using fr::agent_test::run;
using fr::agent_test::RunResult;
using fr::agent_test::TempDir;

namespace {

const std::string kProbe = std::string(FR_AGENT_TEST_DIR) + "/fr_agent_probe";

// test_util.h's environment, with the log mode unset too.
Env mode_env(const TempDir& dir, Env extra = {}) {
  Env env = env_for(dir, {{"FR_LOG_MODE", ""}});
  for (auto& e : extra) env.push_back(e);
  return env;
}

mode_t only_log_mode(const TempDir& dir) {
  auto logs = dir.logs();
  REQUIRE(logs.size() == 1);
  struct stat st {};
  REQUIRE(stat(logs[0].c_str(), &st) == 0);
  return st.st_mode & 07777;
}

size_t count(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("flight logs are 0600 unless FR_LOG_MODE says otherwise", "[agent]") {
  mode_t old = umask(0);  // a permissive umask must not widen the default
  TempDir a;
  REQUIRE(run({kProbe, "basic"}, mode_env(a)).exit_code == 0);
  CHECK(only_log_mode(a) == 0600);

  umask(077);  // nor narrow an explicit mode
  TempDir b;
  REQUIRE(run({kProbe, "basic"}, mode_env(b, {{"FR_LOG_MODE", "0640"}})).exit_code == 0);
  CHECK(only_log_mode(b) == 0640);

  // The owner keeps read and write; a bad value is said once and ignored.
  TempDir c;
  REQUIRE(run({kProbe, "basic"}, mode_env(c, {{"FR_LOG_MODE", "0044"}})).exit_code == 0);
  CHECK(only_log_mode(c) == 0644);
  TempDir d;
  RunResult r =
      run({kProbe, "basic"}, mode_env(d, {{"FR_LOG_MODE", "rw-r--r--"}, {"FR_DEBUG", "1"}}));
  umask(old);
  REQUIRE(r.exit_code == 0);
  CHECK(only_log_mode(d) == 0600);
  INFO(r.err);
  CHECK(count(r.err, "FR_LOG_MODE=rw-r--r-- is not an octal file mode") == 1);
}

TEST_CASE("an FR_BUFFER_ENTRIES above the cap is capped and said once", "[agent]") {
  TempDir dir;
  RunResult r = run({kProbe, "ring", "3"},
                    mode_env(dir, {{"FR_BUFFER_ENTRIES", "1000000000000"}, {"FR_DEBUG", "1"}}));
  REQUIRE(r.exit_code == 0);
  INFO(r.err);
  CHECK(count(r.err, "FR_BUFFER_ENTRIES=1000000000000 is above the maximum") == 1);
  CHECK(count(r.err, "512 MiB") == 1);
  auto logs = dir.logs();
  REQUIRE(logs.size() == 1);
  auto log = fr::log::read_log(logs[0]);
  REQUIRE(log.ok());
  CHECK(log.log->header.ring_capacity == FR_MAX_RING_CAPACITY);
  // Without FR_DEBUG the program's stderr stays untouched.
  TempDir quiet;
  RunResult q =
      run({kProbe, "ring", "3"}, mode_env(quiet, {{"FR_BUFFER_ENTRIES", "1000000000000"}}));
  REQUIRE(q.exit_code == 0);
  CHECK(q.err.empty());
}

TEST_CASE("settings too large for a number clamp to their cap, not to the default", "[agent]") {
  // 20 digits: past any long. The ring and the transfer table take their maximum, as a large
  // number that fits does.
  TempDir dir;
  RunResult r =
      run({kProbe, "ring", "3"}, mode_env(dir, {{"FR_BUFFER_ENTRIES", "99999999999999999999"},
                                                {"FR_XFER_ENTRIES", "99999999999999999999"}}));
  REQUIRE(r.exit_code == 0);
  auto logs = dir.logs();
  REQUIRE(logs.size() == 1);
  auto log = fr::log::read_log(logs[0]);
  REQUIRE(log.ok());
  CHECK(log.log->header.ring_capacity == FR_MAX_RING_CAPACITY);
  CHECK(log.log->header.xfer_capacity == FR_MAX_XFER_CAPACITY);
  // What is not a number at all still falls back to the default.
  TempDir other;
  r = run({kProbe, "ring", "3"}, mode_env(other, {{"FR_XFER_ENTRIES", "nope"}}));
  REQUIRE(r.exit_code == 0);
  logs = other.logs();
  REQUIRE(logs.size() == 1);
  log = fr::log::read_log(logs[0]);
  REQUIRE(log.ok());
  CHECK(log.log->header.xfer_capacity == FR_DEFAULT_XFER_CAPACITY);
}
