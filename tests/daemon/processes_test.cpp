// Processes that record nothing of fr's own (daemon/base/proc_file.h, daemon/host/registrations.cpp,
// daemon/logic/coordinator_processes.cpp): fr-run's registration read back, the node's listing
// of the processes it registered, the coordinator's counts and the stall of a job seen only
// through torch's recorder.
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <fstream>

#include "coordinator_fixture.h"
#include "daemon/base/proc_file.h"
#include "daemon/host/watcher.h"
#include "daemon/logic/coordinator.h"
#include "fixture.h"
#include "testing/clock.h"

using namespace fr::daemon;
using namespace fr::daemon::test;
using fr::test::kSec;

namespace {

UnrecordedProcess unrecorded(int rank, bool torch, int64_t idle_ns) {
  UnrecordedProcess u;
  u.pid = 200 + rank;
  u.rank = rank;
  u.world_size = 4;
  u.job_id = "job1";
  u.torch = torch;
  u.torch_seq = 6;
  u.torch_idle_ns = idle_ns;
  return u;
}

NodeReport unrecorded_report(std::vector<UnrecordedProcess> us) {
  NodeReport r;
  r.unrecorded = std::move(us);
  return r;
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

}  // namespace

TEST_CASE("a registration reads back as written, and a damaged one is refused", "[daemon]") {
  ProcFile p;
  p.pid = 4242;
  p.start_ticks = 987654;
  p.rank = 3;
  p.world_size = 4;
  p.job_id = "job1";
  ProcFile q;
  std::string err;
  REQUIRE(parse_proc_file(proc_file_text(p), &q, &err));
  CHECK(q.pid == 4242);
  CHECK(q.start_ticks == 987654);
  CHECK(q.rank == 3);
  CHECK(q.world_size == 4);
  CHECK(q.job_id == "job1");
  CHECK_FALSE(parse_proc_file("fr-proc/1\nrank 3\n", &q, &err));  // no pid, no start
  CHECK(err.find("pid") != std::string::npos);
  CHECK_FALSE(parse_proc_file("fr-proc/1\npid -3\nstart 1\n", &q, &err));
  CHECK_FALSE(parse_proc_file("something else\n", &q, &err));
  CHECK(proc_file_pid("fr-proc.123") == 123);
  CHECK(proc_file_pid("fr-proc.123.torch") == 0);
  CHECK(proc_file_pid("fr-proc.") == 0);
  uint64_t seq = 0;
  CHECK(parse_torch_progress("fr-torch/1 seq 17\n", &seq));
  CHECK(seq == 17);
  CHECK_FALSE(parse_torch_progress("fr-torch/1 seq x\n", &seq));
}

TEST_CASE("the launcher's rank, world size and job come from the environment", "[daemon]") {
  std::map<std::string, std::string> env = {
      {"OMPI_COMM_WORLD_RANK", "5"}, {"WORLD_SIZE", "8"}, {"TORCHELASTIC_RUN_ID", "te"}};
  ProcFile p = proc_file_from_env([&](const char* n) {
    auto it = env.find(n);
    return it == env.end() ? std::string() : it->second;
  });
  CHECK(p.rank == 5);
  CHECK(p.world_size == 8);
  CHECK(p.job_id == "te");
  env["RANK"] = "2";
  env["FR_JOB_ID"] = "mine";
  p = proc_file_from_env([&](const char* n) {
    auto it = env.find(n);
    return it == env.end() ? std::string() : it->second;
  });
  CHECK(p.rank == 2);
  CHECK(p.job_id == "mine");
}

TEST_CASE("the node lists running registered processes without a flight log", "[daemon]") {
  TempDir dir;
  ProcFile me;
  me.pid = int(::getpid());
  me.start_ticks = process_start_ticks(me.pid);
  REQUIRE(me.start_ticks > 0);
  me.rank = 1;
  me.world_size = 2;
  me.job_id = "job1";
  write_file(proc_file_path(dir.path, me.pid), proc_file_text(me));
  // A reused pid: the registered start time is not the process's.
  ProcFile reused = me;
  reused.pid = int(::getppid());
  reused.start_ticks = 1;
  write_file(proc_file_path(dir.path, reused.pid), proc_file_text(reused));
  // A link planted under a registration's name is never followed.
  REQUIRE(::symlink(proc_file_path(dir.path, me.pid).c_str(),
                    proc_file_path(dir.path, 1).c_str()) == 0);
  const auto owners = fr::log::LogOwners::defaults();
  auto listed = scan_registrations(dir.path, owners, "", {}, fr::daemon::real_ns());
  REQUIRE(listed.size() == 1);
  CHECK(listed[0].pid == me.pid);
  CHECK(listed[0].rank == 1);
  CHECK_FALSE(listed[0].torch);
  // torch's progress, as fr-run's hook writes it.
  write_file(proc_file_path(dir.path, me.pid) + kTorchProgressSuffix, "fr-torch/1 seq 11\n");
  listed = scan_registrations(dir.path, owners, "", {}, fr::daemon::real_ns() + 3 * kSec);
  REQUIRE(listed.size() == 1);
  CHECK(listed[0].torch);
  CHECK(listed[0].torch_seq == 11);
  CHECK(listed[0].torch_idle_ns >= 3 * kSec);
  // Another job's, or one with a flight log, is not listed.
  CHECK(scan_registrations(dir.path, owners, "job2", {}, fr::daemon::real_ns()).empty());
  ProcessReport logged;
  logged.pid = me.pid;
  logged.alive = true;
  CHECK(scan_registrations(dir.path, owners, "", {logged}, fr::daemon::real_ns()).empty());
}

TEST_CASE("status counts processes under fr-run whether they record or not", "[daemon]") {
  TempDir dir;
  CoordinatorState st(config(dir.path));
  std::string err;
  uint64_t s0 = st.connect("n0", "h0", "job1", 0, &err);
  REQUIRE(s0);
  auto none = st.status(0);
  CHECK(none["processes"]["total"] == 0);
  st.heartbeat(s0,
               unrecorded_report({unrecorded(0, false, 0), unrecorded(1, false, 0),
                                  unrecorded(2, false, 0), unrecorded(3, false, 0)}),
               0);
  auto js = st.status(kSec);
  CHECK(js["processes"]["total"] == 4);
  CHECK(js["processes"]["recording"] == 0);
  CHECK(js["processes"]["summary"] ==
        "4 processes under fr-run on 1 node; none has called NCCL or NIXL yet");
  CHECK(js["ranks"]["known"] == 0);
  CHECK(js["nodes"][0]["unrecorded"].size() == 4);
  // Two of them make their first NCCL call: their flight logs report them from then on.
  NodeReport mixed = report({proc(0, true, 0), proc(1, true, 0)});
  mixed.unrecorded = {unrecorded(2, false, 0), unrecorded(3, false, 0)};
  st.heartbeat(s0, mixed, kSec);
  js = st.status(2 * kSec);
  CHECK(js["processes"]["total"] == 4);
  CHECK(js["processes"]["recording"] == 2);
  CHECK(js["processes"]["summary"] ==
        "4 processes under fr-run on 1 node; 2 record NCCL or NIXL calls, 2 have not called "
        "either yet");
}

TEST_CASE("a job that records nothing stalls when torch's process groups stop moving", "[daemon]") {
  TempDir dir;
  CoordinatorState st(config(dir.path));  // --stall-after 2
  std::string err;
  uint64_t s0 = st.connect("n0", "h0", "job1", 0, &err);
  REQUIRE(s0);
  // Moving (one rank's groups moved just now): no incident, however long the others wait.
  st.heartbeat(s0,
               unrecorded_report({unrecorded(0, true, 9 * kSec), unrecorded(1, true, kSec / 2),
                                  unrecorded(2, true, 9 * kSec), unrecorded(3, true, 9 * kSec)}),
               kSec);
  CHECK(st.tick(kSec).dumps.empty());
  // Without torch's progress there is nothing to judge: counted, never called stalled.
  st.heartbeat(s0, unrecorded_report({unrecorded(0, false, 0), unrecorded(1, false, 0)}), 2 * kSec);
  CHECK(st.tick(2 * kSec).dumps.empty());
  // Every process still for the threshold: an incident, every node asked to dump.
  st.heartbeat(s0,
               unrecorded_report({unrecorded(0, true, 3 * kSec), unrecorded(1, true, 2 * kSec),
                                  unrecorded(2, true, 3 * kSec), unrecorded(3, true, 3 * kSec)}),
               3 * kSec);
  Actions a = st.tick(3 * kSec);
  REQUIRE(a.dumps.size() == 1);
  REQUIRE(st.incidents().size() == 1);
  CHECK(st.incidents()[0].kind == IncidentKind::kStall);
  CHECK(st.incidents()[0].reason.find("none has called NCCL or NIXL") != std::string::npos);
  CHECK(st.incidents()[0].reason.find("torch") != std::string::npos);
  CHECK(st.status(3 * kSec)["incidents"][0]["processes_seen"] ==
        "4 processes under fr-run on 1 node; none has called NCCL or NIXL yet; torch's recorder "
        "watched in 4 processes");
}

TEST_CASE("a job that records is judged by its flight logs, not by torch's progress", "[daemon]") {
  TempDir dir;
  CoordinatorState st(config(dir.path));
  std::string err;
  uint64_t s0 = st.connect("n0", "h0", "job1", 0, &err);
  NodeReport r = report({proc(0, true, 0), proc(1, true, 0)});
  r.unrecorded = {unrecorded(2, true, 30 * kSec)};
  st.heartbeat(s0, r, kSec);
  CHECK(st.tick(kSec).dumps.empty());
}
