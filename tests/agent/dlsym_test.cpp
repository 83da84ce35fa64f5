// Programs that reach NCCL only through dlsym on its own handle are recorded like linked ones:
// a C program (bound to dlsym@GLIBC_2.34 and to dlsym@GLIBC_2.2.5), a lazy trampoline table
// filled on first call (XLA), Python's ctypes (vLLM, SGLang), all on the emulation; and the calls
// that work without a GPU on the real NCCL 2.28.9, 2.30.7 and 2.32.3. Lookups whose answer must not
// change (other libraries, names NCCL lacks, dlvsym, RTLD_NEXT from the program) are checked too.
//
// The probe bound to dlsym@GLIBC_2.2.5 links the agent (ahead of everything, as LD_PRELOAD puts
// it), so it also runs in sanitizer builds; the GLIBC_2.34 one and Python run with the agent
// preloaded, in plain builds only.
#include <nccl.h>

#include <catch2/catch.hpp>
#include <string>

#include "skip.h"
#include "test_util.h"

using fr::agent_test::Env;
using fr::agent_test::env_for;
using fr::agent_test::only_log;
using fr::agent_test::records_of;
using fr::agent_test::run;
using fr::agent_test::RunResult;
using fr::agent_test::slurp;
using fr::agent_test::TempDir;

namespace {

const std::string kDir = FR_AGENT_TEST_DIR;
const std::string kProbeNew = kDir + "/fr_agent_dlsym_probe";      // dlsym@GLIBC_2.34, preloaded
const std::string kProbeOld = kDir + "/fr_agent_dlsym_probe_old";  // dlsym@GLIBC_2.2.5, linked
const std::string kSimNccl = FR_SIM_NCCL;
constexpr bool kSanitized = FR_AGENT_SANITIZED != 0;

std::string dlsym_version_of(const std::string& exe) {
  FILE* p = popen(("objdump -T '" + exe + "' 2>&1 | grep -w dlsym").c_str(), "r");
  REQUIRE(p != nullptr);
  std::string out = slurp(p);
  pclose(p);
  return out;
}

// The one AllReduce of a one-rank communicator made through dlsym'ed pointers, in the log.
void check_recorded(const TempDir& dir) {
  auto log = only_log(dir);
  CHECK(records_of(log, FR_OP_GET_UNIQUE_ID).size() == 1);
  auto inits = records_of(log, FR_OP_COMM_INIT_RANK);
  REQUIRE(inits.size() == 1);
  CHECK(inits[0].result == ncclSuccess);
  auto ars = records_of(log, FR_OP_ALLREDUCE);
  REQUIRE(ars.size() == 1);
  CHECK(ars[0].comm_id == inits[0].comm_id);
  CHECK(ars[0].seq == 1);
  CHECK(ars[0].count == 16);
  CHECK(ars[0].dtype == ncclFloat32);
  CHECK(records_of(log, FR_OP_COMM_DESTROY).size() == 1);
  bool live_entry = false;
  for (const auto& c : log.comms) live_entry |= c.id == inits[0].comm_id;
  CHECK(live_entry);
}

}  // namespace

TEST_CASE("the probes are bound to the dlsym versions they stand for", "[agent]") {
  CHECK(dlsym_version_of(kProbeNew).find("GLIBC_2.34") != std::string::npos);
  CHECK(dlsym_version_of(kProbeOld).find("GLIBC_2.2.5") != std::string::npos);
}

TEST_CASE("a C program calling through dlsym on NCCL's handle is recorded", "[agent]") {
  for (const std::string& probe : {kProbeOld, kProbeNew}) {
    if (probe == kProbeNew && kSanitized) continue;  // needs LD_PRELOAD: checked in plain builds
    TempDir dir;
    Env env = probe == kProbeNew ? Env{{"LD_PRELOAD", FR_AGENT_LIB}} : Env{};
    RunResult r = run({probe, "direct", kSimNccl}, env_for(dir, env));
    INFO(probe << "\n" << r.out << r.err);
    REQUIRE(r.exit_code == 0);
    CHECK(r.values["owner_get_unique_id"] == "agent");
    CHECK(r.values["owner_init"] == "agent");
    CHECK(r.values["owner_all_reduce"] == "agent");
    CHECK(r.values["owner_destroy"] == "agent");
    CHECK(r.values["init"] == "0");
    CHECK(r.values["all_reduce"] == "0");
    check_recorded(dir);
  }
}

TEST_CASE("a lazy trampoline table filled through dlsym on first call is recorded", "[agent]") {
  TempDir dir;
  RunResult r = run({kProbeOld, "trampoline", kSimNccl}, env_for(dir));
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(r.values["resolved_before"] == "0");
  CHECK(r.values["resolved_after"] == "4");
  CHECK(r.values["owner_all_reduce"] == "agent");
  check_recorded(dir);
}

TEST_CASE(
    "lookups NCCL does not answer, on other libraries, or relative to the caller are "
    "unchanged",
    "[agent]") {
  TempDir dir;
  RunResult r = run({kProbeOld, "lookups", kSimNccl}, env_for(dir));
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(r.values["missing"] == "null");
  CHECK(r.values["missing_error"] == "names_it");
  CHECK(r.values["error_after_read"] == "(null)");
  CHECK(r.values["clean_after_success"] == "yes");
  CHECK(r.values["owner_pnccl"] == "libnccl.so.2");
  CHECK(r.values["dlvsym"] == "null");
  CHECK(r.values["owner_cos"].find("libm") == 0);
  CHECK(r.values["libm_missing"] == "null");
  CHECK(r.values["agent_handle"] == "yes");
  CHECK(r.values["owner_agent_lookup"] == "agent");
  CHECK(r.values["owner_default"] == "agent");
  CHECK(r.values["owner_next"] == "agent");  // RTLD_NEXT from the program, not from the agent
  CHECK(r.values["next_getpid"] == "same");
  // The emulation lacks ncclCommQueryProperties (NCCL 2.29's device API): looked up on its handle
  // it is absent; called through the agent's export it answers ncclInvalidUsage, as NCCL answers
  // a missing feature.
  CHECK(r.values["nccl_query"] == "null");
  CHECK(r.values["owner_query"] == "agent");
  CHECK(r.values["missing_call"] == "5");
  // Lookups alone record nothing (and start nothing).
  CHECK(dir.logs().empty());
}

TEST_CASE("a Python ctypes program (pynccl's shape) is recorded", "[agent]") {
  if (kSanitized) FR_SKIP("sanitizer build: a sanitized agent cannot be preloaded into python");
  const std::string python = FR_PYTHON;
  if (python.empty() || access(python.c_str(), X_OK) != 0)
    FR_SKIP("no python3 interpreter found at configure time");
  TempDir dir;
  RunResult r = run({python, FR_SOURCE_DIR "/tests/agent/dlsym_ctypes.py", kSimNccl},
                    env_for(dir, {{"LD_PRELOAD", FR_AGENT_LIB}}));
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(r.values["init"] == "0");
  CHECK(r.values["all_reduce"] == "0");
  // The emulation is NCCL 2.28.9: newer functions are absent, as without the agent.
  CHECK(r.values["has_query_properties"] == "0");
  CHECK(r.values["has_all_reduce_config"] == "0");
  check_recorded(dir);
}

TEST_CASE("on the real NCCL 2.28.9, 2.30.7 and 2.32.3, dlsym'ed calls that need no GPU are wrapped",
          "[agent]") {
  struct Real {
    std::string lib;
    std::string version;
  };
  int tried = 0;
  std::string absent;
  for (const Real& real : {Real{FR_REAL_NCCL_228, "22809"}, Real{FR_REAL_NCCL_230, "23007"},
                           Real{FR_REAL_NCCL_232, "23203"}}) {
    if (real.lib.empty() || access(real.lib.c_str(), R_OK) != 0) {
      absent += " " + real.lib;
      continue;
    }
    ++tried;
    TempDir dir;
    RunResult r = run({kProbeOld, "real", real.lib}, env_for(dir, {{"NCCL_DEBUG", ""}}));
    INFO(real.lib << "\n" << r.out << r.err);
    REQUIRE(r.exit_code == 0);
    CHECK(r.values["owner_get_version"] == "agent");
    CHECK(r.values["owner_error_string"] == "agent");
    CHECK(r.values["owner_get_unique_id"] == "agent");
    CHECK(r.values["get_version"] == "0");
    CHECK(r.values["version"] == real.version);
    CHECK(!r.values["error_string"].empty());
    CHECK(r.values["error_string"].find("fr:") == std::string::npos);
    // ncclGetUniqueId may fail without a network or GPU; either way it is recorded as it ended.
    auto log = only_log(dir);
    auto ids = records_of(log, FR_OP_GET_UNIQUE_ID);
    REQUIRE(ids.size() == 1);
    CHECK(std::to_string(ids[0].result) == r.values["get_unique_id"]);
    CHECK(std::to_string(log.header.nccl_version) == real.version);
  }
  if (tried == 0) FR_SKIP("no real NCCL library here:" << absent);
}
