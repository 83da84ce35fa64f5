// Out-of-process tests of the agent: each runs a probe program in a fresh temporary log directory
// and reads what it left behind with the project's reader.
#include <cuda.h>
#include <nccl.h>
#include <stdio.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <set>

#include "fr/nccl_api.h"
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
const std::string kProbe = kDir + "/fr_agent_probe";
const std::string kProbePlain = kDir + "/fr_agent_probe_plain";
constexpr bool kSanitized = FR_AGENT_SANITIZED != 0;

}  // namespace

TEST_CASE("a recorded run leaves a valid log that outlives the process", "[agent]") {
  TempDir dir;
  RunResult r = run({kProbe, "basic"}, env_for(dir, {{"FR_JOB_ID", "job/with spaces"},
                                                     {"RANK", "3"},
                                                     {"WORLD_SIZE", "8"},
                                                     {"LOCAL_RANK", "1"}}));
  INFO(r.out);
  REQUIRE(r.exit_code == 0);
  CHECK(r.err.empty());  // silent without FR_DEBUG
  auto logs = dir.logs();
  REQUIRE(logs.size() == 1);
  std::string name = logs[0].substr(dir.path().size() + 1);
  CHECK(name.rfind("fr.job_with_spaces.", 0) == 0);
  CHECK(name.find("." + r.values["pid"] + ".") != std::string::npos);
  auto log = only_log(dir);
  CHECK(log.header.pid == std::stoi(r.values["pid"]));
  CHECK(log.header.global_rank == 3);
  CHECK(log.header.world_size == 8);
  CHECK(log.header.local_rank == 1);
  CHECK((log.header.flags & FR_LOG_F_RANK_FROM_COMM) == 0);
  CHECK(log.job_id() == "job_with_spaces");
  CHECK(log.header.ring_capacity == FR_DEFAULT_RING_CAPACITY);
  CHECK(log.header.file_size <= 1024 * 1024);
  CHECK_FALSE(log.writer_alive);  // the writer is gone; the log stays
  CHECK(records_of(log, FR_OP_ALLREDUCE).size() == 5);
  REQUIRE(log.comms.size() == 1);
  CHECK(log.comms[0].state == FR_COMM_DESTROYED);
}

TEST_CASE("without launcher variables the rank comes from the largest communicator", "[agent]") {
  TempDir dir;
  RunResult r = run({kProbe, "ring", "3"}, env_for(dir));
  REQUIRE(r.exit_code == 0);
  auto log = only_log(dir);
  CHECK(log.header.global_rank == 0);
  CHECK(log.header.world_size == 2);
  CHECK((log.header.flags & FR_LOG_F_RANK_FROM_COMM) != 0);
  CHECK(log.job_id() == "nojob");
}

TEST_CASE("LD_PRELOAD records an unmodified program", "[agent]") {
  if (kSanitized) {
    FR_SKIP(
        "sanitizer build: sanitized libraries cannot be preloaded (the linked-in probes "
        "cover the agent)");
  }
  TempDir dir;
  RunResult r = run({kProbePlain, "basic"}, env_for(dir, {{"LD_PRELOAD", FR_AGENT_LIB}}));
  INFO(r.out);
  REQUIRE(r.exit_code == 0);
  auto log = only_log(dir);
  CHECK(records_of(log, FR_OP_ALLREDUCE).size() == 5);
  CHECK(records_of(log, FR_OP_COMM_INIT_RANK).size() == 1);
  // The same program without the agent leaves nothing.
  TempDir plain;
  REQUIRE(run({kProbePlain, "basic"}, env_for(plain)).exit_code == 0);
  CHECK(plain.files().empty());
}

TEST_CASE("NCCL_COMM_BLOCKING=0 makes every communicator nonblocking, as in NCCL", "[agent]") {
  for (const char* value : {"", "0", "1"}) {
    TempDir dir;
    RunResult r = run({kProbe, "blocking"}, env_for(dir, {{"NCCL_COMM_BLOCKING", value}}));
    INFO("NCCL_COMM_BLOCKING=" << value << "\n" << r.out << r.err);
    REQUIRE(r.exit_code == 0);
    auto log = only_log(dir);
    REQUIRE(log.comms.size() == 2);
    for (const auto& c : log.comms) {
      INFO("communicator " << c.name);
      CHECK(((c.flags & FR_COMM_F_NONBLOCKING) != 0) == (std::string(value) == "0"));
    }
    auto ars = records_of(log, FR_OP_ALLREDUCE);
    REQUIRE(ars.size() == 2);
    for (const auto& rec : ars)
      CHECK(((rec.flags & FR_REC_F_NONBLOCKING) != 0) == (std::string(value) == "0"));
  }
}

TEST_CASE("a process that never calls NCCL creates no file", "[agent]") {
  TempDir dir;
  RunResult r = run({kProbe, "none"}, env_for(dir));
  REQUIRE(r.exit_code == 0);
  CHECK(dir.files().empty());
  if (!kSanitized) {
    REQUIRE(run({kProbePlain, "none"}, env_for(dir, {{"LD_PRELOAD", FR_AGENT_LIB}})).exit_code ==
            0);
    CHECK(dir.files().empty());
  }
}

TEST_CASE("FR_DISABLE=1 forwards everything and records nothing", "[agent]") {
  TempDir dir;
  RunResult r = run({kProbe, "basic"}, env_for(dir, {{"FR_DISABLE", "1"}, {"FR_DEBUG", "1"}}));
  INFO(r.out);
  REQUIRE(r.exit_code == 0);
  CHECK(r.err.find("FR_DISABLE is set") != std::string::npos);
  CHECK(r.values["rc.CommDestroy"] == "0");
  CHECK(dir.files().empty());
}

// Non-zero codes: a disabled agent is a plain forward, and a wrapper that answered ncclSuccess (or
// any code of its own) would hide the application's errors. `probe codes` exits 0 only when every
// call, the re-entrant one included, returned the code the double was told to return.
TEST_CASE("FR_DISABLE=1 hands back every non-zero NCCL code unchanged", "[agent]") {
  TempDir dir;
  RunResult r = run({kProbe, "codes"}, env_for(dir, {{"FR_DISABLE", "1"}}));
  INFO(r.out << r.err);
  CHECK(r.exit_code == 0);
  CHECK(r.values["rc.AllReduce"] == std::to_string(ncclUnhandledCudaError));
  CHECK(r.values["rc.BcastInner"] == std::to_string(ncclRemoteError));
  CHECK(r.values["rc.CommDestroy"] == std::to_string(ncclInvalidArgument));
  CHECK(dir.files().empty());
  if (!kSanitized) {
    RunResult p = run({kProbePlain, "codes"},
                      env_for(dir, {{"FR_DISABLE", "1"}, {"LD_PRELOAD", FR_AGENT_LIB}}));
    INFO(p.out << p.err);
    CHECK(p.exit_code == 0);
    CHECK(dir.files().empty());
  }
}

TEST_CASE("a recording agent hands back every non-zero NCCL code unchanged", "[agent]") {
  TempDir dir;
  RunResult r = run({kProbe, "codes"}, env_for(dir));
  INFO(r.out << r.err);
  CHECK(r.exit_code == 0);
  auto log = only_log(dir);
  auto ars = records_of(log, FR_OP_ALLREDUCE);
  REQUIRE(ars.size() == 1);
  CHECK(ars[0].result == ncclUnhandledCudaError);
  // The re-entrant ncclBroadcast is not recorded; the outer ncclBcast is, with the inner code.
  CHECK(records_of(log, FR_OP_BROADCAST).empty());
  auto bc = records_of(log, FR_OP_BCAST);
  REQUIRE(bc.size() == 1);
  CHECK(bc[0].result == ncclRemoteError);
}

TEST_CASE("an unwritable FR_LOG_DIR leaves the program running, unrecorded", "[agent]") {
  TempDir dir;
  for (std::string bad : {std::string("/dev/null/fr"), dir.path() + "/missing/deeper"}) {
    RunResult r = run({kProbe, "basic"}, env_for(dir, {{"FR_LOG_DIR", bad}, {"FR_DEBUG", "1"}}));
    INFO(r.out);
    INFO(r.err);
    CHECK(r.exit_code == 0);
    CHECK(r.values["rc.AllReduce"] == "0");
    // FR_DEBUG=1 says why, in one line.
    CHECK(r.err.find("cannot create " + bad) != std::string::npos);
    CHECK(r.err.find("not recording") != std::string::npos);
  }
  CHECK(dir.files().empty());
}

TEST_CASE("a full ring overwrites the oldest records and counts them", "[agent]") {
  TempDir dir;
  RunResult r = run({kProbe, "ring", "100"}, env_for(dir, {{"FR_BUFFER_ENTRIES", "16"}}));
  REQUIRE(r.exit_code == 0);
  auto log = only_log(dir);
  CHECK(log.header.ring_capacity == 16);
  uint64_t total = log.header.record_counter;
  CHECK(total == 102);  // GetUniqueId, CommInitRank, 100 all-reduces
  CHECK(log.header.overwritten == total - 16);
  REQUIRE(log.records.size() == 16);
  auto ars = records_of(log, FR_OP_ALLREDUCE);
  REQUIRE(ars.size() == 16);
  for (size_t i = 0; i < ars.size(); ++i) {
    CHECK(ars[i].id == total - 16 + i);
    CHECK(ars[i].seq == 85 + i);
    CHECK(ars[i].result == 0);
  }
  // Bad values of FR_BUFFER_ENTRIES fall back to the default, or are bounded.
  TempDir dir2;
  REQUIRE(run({kProbe, "ring", "3"}, env_for(dir2, {{"FR_BUFFER_ENTRIES", "lots"}})).exit_code ==
          0);
  CHECK(only_log(dir2).header.ring_capacity == FR_DEFAULT_RING_CAPACITY);
  TempDir dir3;
  REQUIRE(run({kProbe, "ring", "3"}, env_for(dir3, {{"FR_BUFFER_ENTRIES", "1"}})).exit_code == 0);
  CHECK(only_log(dir3).header.ring_capacity == 16);
}

TEST_CASE("communicators beyond the table capacity are counted and their calls still recorded",
          "[agent]") {
  TempDir dir;
  RunResult r = run({kProbe, "manycomms", "300"}, env_for(dir));
  REQUIRE(r.exit_code == 0);
  auto log = only_log(dir);
  CHECK(log.header.comm_count == FR_DEFAULT_COMM_CAPACITY);
  CHECK(log.header.comm_dropped == 300 - FR_DEFAULT_COMM_CAPACITY);
  auto ars = records_of(log, FR_OP_ALLREDUCE);
  REQUIRE(ars.size() == 300);
  CHECK(ars.front().comm_id != 0);
  CHECK(ars.back().comm_id == 0);  // unattributed: its communicator is not in the table
  CHECK(ars.back().result == 0);
}

TEST_CASE("a forked child never writes into its parent's log", "[agent]") {
  for (std::string mode : {"child-calls", "child-silent"}) {
    INFO(mode);
    TempDir dir;
    RunResult r = run({kProbe, "fork", mode}, env_for(dir));
    INFO(r.out);
    REQUIRE(r.exit_code == 0);
    int parent = std::stoi(r.values["parent_pid"]), child = std::stoi(r.values["child_pid"]);
    CHECK(r.values["parent_log_locked"] == "1");  // the writer lock shows a live writer
    auto logs = dir.logs();
    REQUIRE(logs.size() == (mode == "child-calls" ? 2u : 1u));
    for (const auto& path : logs) {
      auto rr = fr::log::read_log(path);
      REQUIRE(rr.ok());
      const auto& log = *rr.log;
      auto ars = records_of(log, FR_OP_ALLREDUCE);
      if (log.header.pid == parent) {
        REQUIRE(ars.size() == 4);  // 3 before the fork, 1 after: nothing of the child's
        for (size_t i = 0; i < ars.size(); ++i) CHECK(ars[i].seq == i + 1);
        CHECK(log.header.record_counter == 6);
      } else {
        CHECK(log.header.pid == child);
        CHECK(ars.size() == 2);
        CHECK(records_of(log, FR_OP_COMM_INIT_RANK).size() == 1);
      }
    }
  }
}

TEST_CASE("NCCL loaded late with dlopen(RTLD_LOCAL) is found and recorded", "[agent]") {
  std::vector<std::pair<std::string, std::string>> variants = {{kDir + "/fr_agent_late_probe", ""}};
  if (!kSanitized) variants.push_back({kDir + "/fr_agent_late_probe_plain", FR_AGENT_LIB});
  for (const auto& [probe, preload] : variants) {
    INFO(probe);
    TempDir dir;
    RunResult r = run({probe, FR_USER_LIB}, env_for(dir, {{"LD_PRELOAD", preload}}));
    INFO(r.out);
    REQUIRE(r.exit_code == 0);
    CHECK(r.values["result"] == "0");
    auto log = only_log(dir);
    CHECK(records_of(log, FR_OP_ALLREDUCE).size() == 3);
    CHECK(records_of(log, FR_OP_SEND).size() == 1);
    CHECK(log.header.nccl_version == 22809);  // found through the fallback, like every call
  }
}

TEST_CASE("without any NCCL the wrappers answer ncclSystemError and record nothing", "[agent]") {
  std::vector<std::pair<std::string, std::string>> variants = {{kDir + "/fr_agent_late_probe", ""}};
  if (!kSanitized) variants.push_back({kDir + "/fr_agent_late_probe_plain", FR_AGENT_LIB});
  for (const auto& [probe, preload] : variants) {
    INFO(probe);
    TempDir dir;
    RunResult r = run({probe, "--no-nccl"}, env_for(dir, {{"LD_PRELOAD", preload}}));
    INFO(r.out);
    REQUIRE(r.exit_code == 0);
    CHECK(r.values["wrappers"] == "1");
    CHECK(r.values["GetVersion"] == "2");
    CHECK(r.values["AllReduce"] == "2");
    CHECK(!r.values["ErrorString"].empty());
    CHECK(r.values["ErrorString"] != "(null)");
    CHECK(dir.files().empty());
  }
}

TEST_CASE("against the real NCCL the agent changes no return code", "[agent]") {
  if (!FR_HAVE_REAL_NCCL) {
    FR_SKIP("no real NCCL: no libnccl.so.2 in the CUDA toolkit");
  }
  TempDir none, with, preload;
  RunResult plain = run({kDir + "/fr_agent_real_probe_plain"}, env_for(none));
  RunResult agent = run({kDir + "/fr_agent_real_probe"}, env_for(with));
  INFO(plain.out);
  INFO(agent.out);
  REQUIRE(plain.exit_code == 0);
  REQUIRE(agent.exit_code == 0);
  CHECK(plain.values["GetVersion"] == "0");
  CHECK(plain.values["CommInitRank"] != "0");  // no GPU here: the init must fail
  for (const char* key :
       {"GetVersion", "version", "GetUniqueId", "CommInitRank", "comm_null", "ErrorString"}) {
    INFO(key);
    CHECK(agent.values[key] == plain.values[key]);
  }
  CHECK(none.files().empty());
  std::vector<TempDir*> recorded = {&with};
  if (!kSanitized) {
    RunResult pre = run({kDir + "/fr_agent_real_probe_plain"},
                        env_for(preload, {{"LD_PRELOAD", FR_AGENT_LIB}}));
    INFO(pre.out);
    REQUIRE(pre.exit_code == 0);
    for (const char* key :
         {"GetVersion", "version", "GetUniqueId", "CommInitRank", "comm_null", "ErrorString"})
      CHECK(pre.values[key] == plain.values[key]);
    recorded.push_back(&preload);
  }
  for (TempDir* d : recorded) {
    auto log = only_log(*d);
    auto inits = records_of(log, FR_OP_COMM_INIT_RANK);
    REQUIRE(inits.size() == 1);
    CHECK(std::to_string(inits[0].result) == plain.values["CommInitRank"]);
    CHECK(inits[0].count == 2);
    CHECK(log.header.nccl_version == std::stoi(plain.values["version"]));
    REQUIRE(log.comms.size() == 1);
    CHECK(log.comms[0].state == FR_COMM_FAILED);
    CHECK(log.comms[0].id == inits[0].comm_id);
  }
}

TEST_CASE("GPU markers surround launches and never touch a capturing stream", "[agent]") {
  for (bool events : {false, true}) {
    INFO((events ? "events" : "markers"));
    TempDir dir;
    Env extra = {{"LD_LIBRARY_PATH", FR_FAKE_CUDA_DIR}, {"FAKE_CUDA_NO_WRITE", events ? "1" : ""}};
    RunResult r = run({kProbe, "gpu"}, env_for(dir, extra));
    INFO(r.out);
    REQUIRE(r.exit_code == 0);
    CHECK(r.values["violations"] == "0");
    CHECK(r.values["unsafe_global"] == "0");  // the agent's own driver calls run relaxed
    CHECK(r.values["gpu_completed"] == "5");
    CHECK(r.values["gpu_started"] == "5");
    if (!events) CHECK(r.values["writes"] == "8");  // 2 ops x 2, then 2 streams of the group x 2
    auto log = only_log(dir);
    CHECK((log.header.flags & (events ? FR_LOG_F_GPU_EVENTS : FR_LOG_F_GPU_MARKERS)) != 0);
    CHECK((log.header.flags & FR_LOG_F_NO_GPU_TRACKING) == 0);
    // Each stream whose write failed went to events on its own; the failure is in the header.
    CHECK(log.header.gpu_event_streams == (events ? 2u : 0u));  // streams 0x10 and 0x20
    CHECK(log.header.gpu_error == (events ? int32_t(CUDA_ERROR_NOT_SUPPORTED) : 0));
    CHECK(log.header.gpu_error_call ==
          uint32_t(events ? FR_GPU_CALL_STREAM_WRITE_VALUE64 : FR_GPU_CALL_NONE));
    std::vector<uint64_t> indices;
    for (const auto& rec : log.records) {
      const auto& raw = rec.raw;
      if (raw.op != FR_OP_ALLREDUCE && raw.op != FR_OP_SEND && raw.op != FR_OP_RECV) continue;
      if (raw.stream == 0xBAD) {  // capture state unknown: launched, untracked, nothing enqueued
        CHECK((raw.flags & FR_REC_F_CAPTURED) == 0);
        CHECK((raw.flags & FR_REC_F_LAUNCHED) != 0);
        CHECK((raw.flags & FR_REC_F_GPU_UNTRACKED) != 0);
        CHECK(raw.op_index == 0);
        continue;
      }
      if (raw.stream == 0xCA97) {
        CHECK((raw.flags & FR_REC_F_CAPTURED) != 0);
        CHECK(raw.op_index == 0);
        CHECK((raw.flags & FR_REC_F_LAUNCHED) == 0);
        continue;
      }
      CHECK((raw.flags & FR_REC_F_LAUNCHED) != 0);
      CHECK((raw.flags & FR_REC_F_GPU_UNTRACKED) == 0);
      CHECK(rec.gpu_state == FR_GPU_COMPLETED);
      indices.push_back(raw.op_index);
    }
    CHECK(indices == std::vector<uint64_t>{1, 2, 3, 4, 5});
  }
  // A write that fails on one stream only (a stream of another context): that stream's progress
  // comes from events, the others keep their markers, and the header names the call and result.
  {
    TempDir dir;
    Env extra = {{"LD_LIBRARY_PATH", FR_FAKE_CUDA_DIR}, {"FAKE_CUDA_NO_WRITE_STREAM", "0x20"}};
    RunResult r = run({kProbe, "gpu"}, env_for(dir, extra));
    INFO(r.out);
    REQUIRE(r.exit_code == 0);
    CHECK(r.values["gpu_completed"] == "5");
    CHECK(r.values["writes"] == "6");  // the receive on 0x20: two markers become events
    auto log = only_log(dir);
    CHECK((log.header.flags & FR_LOG_F_GPU_MARKERS) != 0);
    CHECK((log.header.flags & FR_LOG_F_GPU_EVENTS) != 0);
    CHECK(log.header.gpu_event_streams == 1);
    CHECK(log.header.gpu_error == int32_t(CUDA_ERROR_INVALID_HANDLE));
    CHECK(log.header.gpu_error_call == uint32_t(FR_GPU_CALL_STREAM_WRITE_VALUE64));
    for (const auto& rec : log.records)
      if (rec.raw.op == FR_OP_RECV) CHECK(rec.gpu_state == FR_GPU_COMPLETED);
  }
  // A device without 64-bit stream memory operations: events for every stream, from the start.
  {
    TempDir dir;
    Env extra = {{"LD_LIBRARY_PATH", FR_FAKE_CUDA_DIR}, {"FAKE_CUDA_NO_MEMOPS", "1"}};
    RunResult r = run({kProbe, "gpu"}, env_for(dir, extra));
    INFO(r.out);
    REQUIRE(r.exit_code == 0);
    CHECK(r.values["gpu_completed"] == "5");
    CHECK(r.values["writes"] == "0");
    auto log = only_log(dir);
    CHECK((log.header.flags & FR_LOG_F_GPU_MARKERS) == 0);
    CHECK((log.header.flags & FR_LOG_F_GPU_EVENTS) != 0);
    CHECK(log.header.gpu_error == int32_t(CUDA_ERROR_NOT_SUPPORTED));
    CHECK(log.header.gpu_error_call == uint32_t(FR_GPU_CALL_DEVICE_GET_ATTRIBUTE));
  }
  // Without libcuda (or a CUDA context) nothing is tracked, and the records say so.
  TempDir dir;
  REQUIRE(
      run({kProbe, "ring", "2"}, env_for(dir, {{"LD_LIBRARY_PATH", "/nonexistent"}})).exit_code ==
      0);
  auto log = only_log(dir);
  CHECK((log.header.flags & (FR_LOG_F_GPU_MARKERS | FR_LOG_F_GPU_EVENTS)) == 0);
  auto ars = records_of(log, FR_OP_ALLREDUCE);
  REQUIRE(ars.size() == 2);
  for (const auto& rec : ars) {
    CHECK(rec.op_index == 0);
    CHECK((rec.flags & FR_REC_F_GPU_UNTRACKED) != 0);
    CHECK((rec.flags & FR_REC_F_LAUNCHED) != 0);
  }
}

TEST_CASE("under the CUDA emulation markers run on the stream in order", "[agent]") {
  if (!FR_HAVE_SIM_CUDA) {
    FR_SKIP("not built: the CUDA emulation is not part of this build");
  }
  TempDir dir;
  RunResult r = run({kDir + "/fr_agent_sim_gpu_probe"}, env_for(dir));
  INFO(r.out);
  REQUIRE(r.exit_code == 0);
  // A stalled stream has not reached the op: neither marker has run.
  CHECK(r.values["stalled.started"] == "0");
  CHECK(r.values["stalled.completed"] == "0");
  CHECK(r.values["released.started"] == "1");
  CHECK(r.values["released.completed"] == "1");
  CHECK(r.values["rc.EndCapture"] == "0");  // the capture was not broken
  CHECK(r.values["group.started"] == "4");
  CHECK(r.values["group.completed"] == "4");
  auto log = only_log(dir);
  CHECK((log.header.flags & FR_LOG_F_GPU_MARKERS) != 0);
  std::vector<uint64_t> indices;
  for (const auto& rec : log.records) {
    if (rec.raw.op != FR_OP_ALLREDUCE && rec.raw.op != FR_OP_SEND && rec.raw.op != FR_OP_RECV)
      continue;
    if (rec.raw.flags & FR_REC_F_CAPTURED) {
      CHECK(rec.raw.op_index == 1);  // its position in the graph, not a GPU op index
      CHECK(rec.raw.seq == 0);       // numbered at each replay
      continue;
    }
    indices.push_back(rec.raw.op_index);
    CHECK(rec.gpu_state == FR_GPU_COMPLETED);
  }
  CHECK(indices == std::vector<uint64_t>{1, 2, 3, 4});
}

TEST_CASE("under the strict CUDA emulation the agent never breaks another thread's global capture",
          "[agent]") {
  if (!FR_HAVE_SIM_CUDA) {
    FR_SKIP("not built: the CUDA emulation is not part of this build");
  }
  TempDir dir;
  RunResult r = run({kDir + "/fr_agent_sim_strict_probe"}, env_for(dir));
  INFO(r.out);
  REQUIRE(r.exit_code == 0);
  // The emulation is strict: an unsafe call of a global-mode thread invalidates the capture.
  CHECK(r.values["control.alloc"] == std::to_string(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED));
  CHECK(r.values["control.end"] == std::to_string(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED));
  // The agent registered its log during that kind of capture, and the capture survived.
  CHECK(r.values["rc.OtherThreadsCapture"] == "0");
  auto log = only_log(dir);
  CHECK((log.header.flags & FR_LOG_F_GPU_MARKERS) != 0);
  CHECK(log.header.gpu_error_call == FR_GPU_CALL_NONE);
  int completed = 0;
  for (const auto& rec : log.records)
    if (rec.raw.op == FR_OP_ALLREDUCE && rec.gpu_state == FR_GPU_COMPLETED) ++completed;
  CHECK(completed == 3);
}

TEST_CASE("under the CUDA emulation's driver refusals GPU progress falls back and says why",
          "[agent]") {
  if (!FR_HAVE_SIM_CUDA) {
    FR_SKIP("not built: the CUDA emulation is not part of this build");
  }
  struct Case {
    const char* fail;
    uint32_t call;
    int32_t error;
  };
  const Case cases[] = {
      {"register-unsupported", FR_GPU_CALL_MEM_HOST_REGISTER, CUDA_ERROR_NOT_SUPPORTED},
      {"register-no-context", FR_GPU_CALL_MEM_HOST_REGISTER, CUDA_ERROR_INVALID_CONTEXT},
      {"write64-unsupported", FR_GPU_CALL_DEVICE_GET_ATTRIBUTE, CUDA_ERROR_NOT_SUPPORTED},
      {"write-no-context", FR_GPU_CALL_STREAM_WRITE_VALUE64, CUDA_ERROR_INVALID_CONTEXT},
  };
  for (const Case& c : cases) {
    DYNAMIC_SECTION(c.fail) {
      TempDir dir;
      RunResult r =
          run({kDir + "/fr_agent_sim_strict_probe"}, env_for(dir, {{"FRSIM_CU_FAIL", c.fail}}));
      INFO(r.out);
      REQUIRE(r.exit_code == 0);  // the program never sees the refusal
      auto log = only_log(dir);
      CHECK(log.header.gpu_error_call == c.call);
      CHECK(log.header.gpu_error == c.error);
      // Events stand in for the markers: every op still completes in the log.
      int completed = 0;
      for (const auto& rec : log.records)
        if (rec.raw.op == FR_OP_ALLREDUCE && rec.gpu_state == FR_GPU_COMPLETED) ++completed;
      CHECK(completed == 3);
    }
  }
}

namespace {

// Runs the one-process job (small_log_probe.cpp) with FR_LOG_DIR on a tmpfs of `kib` KiB mounted in
// a private mount namespace; the logs it leaves are copied to `out`. The agent is its profiler
// plugin and asks for kernel channels (so one node's job has channel slots to fill).
RunResult run_in_small_dir(int kib, const TempDir& out, const TempDir& mnt) {
  const std::string script = "mount -t tmpfs -o size=" + std::to_string(kib) + "k tmpfs '" +
                             mnt.path() + "' || exit 90; FR_LOG_DIR='" + mnt.path() +
                             "' \"$0\"; rc=$?; cp '" + mnt.path() + "'/*.frlog '" + out.path() +
                             "/' 2>/dev/null; exit $rc";
  return run(
      {"/usr/bin/unshare", "-Urm", "/bin/sh", "-c", script, kDir + "/fr_agent_small_log_probe"},
      env_for(out, {{"NCCL_PROFILER_PLUGIN", FR_AGENT_LIB},
                    {"FR_PROFILER_KERNEL_CH", "1"},
                    {"FRSIM_SHM_PREFIX", "/frsmall" + std::to_string(getpid())}}));
}

size_t count_of(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("in a small log directory the log shrinks, then loses its channel slots, never the job",
          "[agent]") {
  if (!FR_HAVE_SIM_CUDA) {
    FR_SKIP("not built: the CUDA emulation is not part of this build");
  }
  if (std::system(
          "/usr/bin/unshare -Urm /bin/sh -c 'mount -t tmpfs -o size=64k tmpfs /mnt' 2>/dev/null") !=
      0) {
    FR_SKIP("cannot mount a private tmpfs here (unshare -Urm is not permitted)");
  }
  struct Case {
    int kib;            // the file system's size
    uint32_t records;   // the log's capacity; 0: no log
    uint32_t channels;  // its channel slots
  };
  // The configured log is 665 KiB; the smaller one 166 KiB; without channel slots 134 KiB.
  const Case cases[] = {{1024, FR_DEFAULT_RING_CAPACITY, FR_DEFAULT_CHAN_CAPACITY},
                        {512, 256, 256},
                        {160, 256, 0},
                        {64, 0, 0}};
  for (const Case& c : cases) {
    DYNAMIC_SECTION(c.kib << " KiB") {
      TempDir out, mnt;
      RunResult r = run_in_small_dir(c.kib, out, mnt);
      INFO(r.out << r.err);
      REQUIRE(r.exit_code != 90);
      CHECK(r.exit_code == 0);  // never a failed job
      CHECK(r.values["ok"] == "1");
      const bool full = c.records == FR_DEFAULT_RING_CAPACITY;
      CHECK(count_of(r.err, "no room in") == (full ? 0u : 1u));  // one notice, or none
      if (c.records == 0) {
        CHECK(out.logs().empty());
        CHECK(count_of(r.err, "runs unrecorded") == 1);
        continue;
      }
      auto log = only_log(out);
      CHECK(log.header.ring_capacity == c.records);
      CHECK(log.header.chan_capacity == c.channels);
      CHECK(((log.header.flags & FR_LOG_F_SMALL_LOG) != 0) == !full);
      CHECK(records_of(log, FR_OP_ALLREDUCE).size() == 20);
      size_t used = 0;
      for (const auto& e : log.chans) used += e.ops_done > 0;
      if (c.channels != 0) {
        CHECK((log.header.flags & FR_LOG_F_PROFILER) != 0);
        CHECK(used > 0);  // the profiler plugin's data
      } else {
        CHECK((log.header.flags & FR_LOG_F_PROFILER) == 0);  // the plugin was declined
      }
    }
  }
}

TEST_CASE(
    "libfr_agent.so exports the NCCL API, dlsym and dlvsym, the graph entries, and nothing else",
    "[agent]") {
  std::string cmd = std::string("nm -D --defined-only '") + FR_AGENT_LIB + "' 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  std::string out = slurp(p);
  REQUIRE(pclose(p) == 0);
  std::set<std::string> names;
  size_t pos = 0;
  while (pos < out.size()) {
    size_t end = out.find('\n', pos);
    if (end == std::string::npos) end = out.size();
    std::string line = out.substr(pos, end - pos);
    pos = end + 1;
    size_t sp = line.rfind(' ');
    if (sp == std::string::npos) continue;
    std::string type = line.substr(sp - 1, 1);
    std::string name = line.substr(sp + 1);
    if (type == "A") continue;  // version-script nodes
    names.insert(name);
  }
  // The NCCL API list (proto/fr/nccl_api.def): tests/agent/nccl_api_test.cpp checks it against
  // nccl.h and the other libraries.
  std::set<std::string> api;
  for (const fr::NcclFn& f : fr::kNcclApi) api.insert(f.name);
  REQUIRE(api.size() == std::size(fr::kNcclApi));
  // Beyond NCCL's API: the dynamic linker's lookups.
  const std::set<std::string> optional = {
      "dlsym", "dlvsym",
      // NCCL's profiler plugin interface (agent/profiler_v*.cpp)
      "ncclProfiler_v5", "ncclProfiler_v6", "ncclProfiler_v7",
      // CUDA graph launches (driver, runtime, and the driver
      // entries the runtime fetches)
      "cuGraphLaunch", "cuGraphLaunch_ptsz", "cuGraphInstantiateWithFlags",
      "cuGraphInstantiateWithParams", "cuGraphInstantiateWithParams_ptsz", "cuGetProcAddress",
      "cuGetProcAddress_v2", "cudaGraphLaunch", "cudaGraphLaunch_ptsz", "cudaGraphInstantiate",
      "cudaGraphInstantiateWithFlags", "cudaGraphInstantiateWithParams",
      "cudaGraphInstantiateWithParams_ptsz"};
  // NIXL 1.5's nixlAgent methods (agent/wrappers_nixl.cpp): the WRAP rows of agent/nixl_api.def
  // (nccl_api_test.cpp checks their names).
  size_t nixl_wrapped = 0;
#define FR_NIXL_FN(fn, wrap, ...) nixl_wrapped += std::string_view(#wrap) == "WRAP";
#include "nixl_api.def"
  std::set<std::string> ours = names;
  size_t nixl = 0;
  for (auto it = ours.begin(); it != ours.end();) {
    if (it->rfind("_ZN9nixlAgent", 0) == 0 || it->rfind("_ZNK9nixlAgent", 0) == 0) {
      ++nixl;
      it = ours.erase(it);
    } else {
      ++it;
    }
  }
  CHECK(nixl == nixl_wrapped);
  // Everything else (the static C++ runtime, our internals) must be local.
  std::set<std::string> expected = api;
  expected.insert(optional.begin(), optional.end());
  INFO(out);
  CHECK(ours == expected);
}
