// What a restarted coordinator recovers (daemon/coordinator_recovery.cpp): incident ids of a
// previous run, and its incidents when the job is not known yet.
#include <catch2/catch.hpp>

#include "coordinator_fixture.h"
#include "daemon/coordinator.h"
#include "files/files.h"
#include "fixture.h"

using namespace fr::daemon;
using namespace fr::daemon::test;

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
