// What a restarted coordinator recovers (daemon/logic/recovery.cpp): incident ids of a
// previous run, its incidents when the job is not known yet, and when it judges them.
#include <catch2/catch.hpp>

#include "coordinator_fixture.h"
#include "daemon/logic/coordinator.h"
#include "common/files.h"
#include "fixture.h"
#include "testing/clock.h"

using namespace fr::daemon;
using namespace fr::daemon::test;
using fr::test::kSec;

TEST_CASE("incident ids left by a previous run are never reused", "[daemon]") {
  TempDir dir;
  std::string err;
  REQUIRE(fr::files::make_dirs(dir.path + "/job1/incident-0001", &err));
  CoordinatorState st(config(dir.path));
  Actions a;
  CHECK(st.trigger("x", 0, &a) == "incident-0002");
  // A node delivering a dump of the old incident after a restart is accepted into it.
  std::string where;
  bool dup = false;
  CHECK(st.begin_upload(header("incident-0001", "n0"), &where, &dup, &err));
  CHECK(where == dir.path + "/job1/incident-0001");
}

TEST_CASE("a restarted coordinator that does not know the job yet finds the incident", "[daemon]") {
  TempDir dir;
  std::string err;
  REQUIRE(fr::files::make_dirs(dir.path + "/jobX/incident-0003", &err));
  CoordinatorConfig cfg = config(dir.path);
  cfg.job_id.clear();
  CoordinatorState st(cfg);
  std::string where;
  bool dup = false;
  REQUIRE(st.begin_upload(header("incident-0003", "n0"), &where, &dup, &err));
  CHECK(where == dir.path + "/jobX/incident-0003");
  CHECK_FALSE(st.begin_upload(header("incident-0004", "n0"), &where, &dup, &err));
}

TEST_CASE("a recovered incident is not judged before its nodes report", "[daemon]") {
  TempDir dir;
  std::string err;
  REQUIRE(fr::files::make_dirs(dir.path + "/job1/incident-0001", &err));
  CoordinatorState st(config(dir.path));
  auto state_of = [&](int64_t now) {
    const nlohmann::json status = st.status(now);
    for (const auto& i : status["incidents"])
      if (i["id"] == "incident-0001") return i["state"].get<std::string>();
    return std::string("none");
  };
  // The node is connected (its hello) and delivers its kept dump before its first heartbeat is
  // applied: a tick meanwhile sees no live rank, yet must not close the incident.
  uint64_t s = st.connect("n0", "h0", "job1", 0, &err);
  REQUIRE(s);
  std::string where;
  bool dup = false;
  REQUIRE(st.begin_upload(header("incident-0001", "n0"), &where, &dup, &err));
  st.tick(kSec);
  CHECK(state_of(kSec) == "open");
  // Once it reports, the incident is judged on what it reports: its ranks are dead.
  REQUIRE(st.heartbeat(s, report({proc(0, false, 0), proc(1, false, 0)}), 2 * kSec));
  st.tick(2 * kSec);
  CHECK(state_of(2 * kSec) != "open");
}

TEST_CASE("a restarted coordinator reads the dumped processes of an older incident.json",
          "[daemon]") {
  TempDir dir;
  std::string err;
  const std::string inc_dir = dir.path + "/job1/incident-0001";
  REQUIRE(fr::files::make_dirs(inc_dir, &err));
  // As a coordinator of a previous version wrote it, with what a damaged file may hold besides:
  // a rank of the wrong type, a host with a control character, a file that leaves the directory.
  const nlohmann::json inc = {{"schema", "frd-incident/1"},
                              {"id", "incident-0001"},
                              {"kind", "stall"},
                              {"state", "collecting"},
                              {"reason", "x"},
                              {"processes",
                               {{{"rank", 3},
                                 {"world_size", 16},
                                 {"pid", 4245},
                                 {"host", "node0"},
                                 {"job_id", "job1"},
                                 {"file", "node0-rank3.node0.4245.frlog"},
                                 {"source", "/dev/shm/fr.job1.node0.4245.frlog"},
                                 {"alive", true},
                                 {"records", 18446744073709551615ull},
                                 {"overwritten", 311},
                                 {"torn", 2}},
                                {{"rank", "four"},
                                 {"pid", 77},
                                 {"host",
                                  "no\x01"
                                  "de1"},
                                 {"file", "node1-rank4.frlog"}},
                                {{"rank", 5}, {"file", "../../etc/passwd"}}}}};
  REQUIRE(fr::files::write_atomic(inc_dir + "/incident.json", inc.dump(), &err));
  CoordinatorState st(config(dir.path));
  REQUIRE(st.incidents().size() == 1);
  const auto& procs = st.incidents()[0].processes;
  REQUIRE(procs.size() == 2);
  CHECK(procs[0].rank == 3);
  CHECK(procs[0].world_size == 16);
  CHECK(procs[0].pid == 4245);
  CHECK(procs[0].host == "node0");
  CHECK(procs[0].job_id == "job1");
  CHECK(procs[0].file == "node0-rank3.node0.4245.frlog");
  CHECK(procs[0].source == "/dev/shm/fr.job1.node0.4245.frlog");
  CHECK(procs[0].alive);
  CHECK(procs[0].records == 18446744073709551615ull);
  CHECK(procs[0].overwritten == 311);
  CHECK(procs[0].torn == 2);
  CHECK(procs[1].rank == -1);  // not a number: unknown, and the rest is read
  CHECK(procs[1].pid == 77);
  CHECK(procs[1].host == "no?de1");
  CHECK(procs[1].file == "node1-rank4.frlog");
}
