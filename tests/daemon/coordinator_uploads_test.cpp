// Uploads as the coordinator's state machine sees them (daemon/logic/upload_tracker.cpp): unknown
// incidents, unsafe names, dumps of another job.
#include <catch2/catch.hpp>

#include "coordinator_fixture.h"
#include "daemon/logic/coordinator.h"
#include "common/files.h"
#include "fixture.h"

using namespace fr::daemon;
using namespace fr::daemon::test;

TEST_CASE("uploads are refused for unknown incidents and unsafe names", "[daemon]") {
  TempDir dir;
  CoordinatorState st(config(dir.path));
  std::string where, err;
  bool dup = false;
  CHECK_FALSE(st.begin_upload(header("incident-9999", "n0"), &where, &dup, &err));
  CHECK_FALSE(st.begin_upload(header("../../etc", "n0"), &where, &dup, &err));
  CHECK_FALSE(st.begin_upload(header("incident-0001", "../n0"), &where, &dup, &err));
  // A node of another job is refused at connect.
  CHECK(st.connect("n0", "h", "other-job", 0, &err) == 0);
  CHECK(err.find("other-job") != std::string::npos);
}

TEST_CASE("a dump of another job is refused, even under an incident id this job has", "[daemon]") {
  TempDir dir;
  std::string err, where;
  bool dup = false;
  REQUIRE(fr::files::make_dirs(dir.path + "/job0/incident-0001", &err));
  CoordinatorState st(config(dir.path));
  REQUIRE(st.connect("n1", "h", "job1", 0, &err) != 0);
  Actions a;
  REQUIRE(st.trigger("x", 0, &a) == "incident-0001");
  // The request names the incident's job: incident ids repeat across jobs.
  REQUIRE(a.dumps.size() == 1);
  CHECK(a.dumps[0].job_id == "job1");
  DumpHeader h = header("incident-0001", "n0");
  h.job_id = "job0";
  CHECK_FALSE(st.begin_upload(h, &where, &dup, &err));
  CHECK(err.find("job0") != std::string::npos);
  h.incident_id = "incident-0007";
  CHECK_FALSE(st.begin_upload(h, &where, &dup, &err));
  h.job_id = "../job1";
  CHECK_FALSE(st.begin_upload(h, &where, &dup, &err));
  h.job_id = "job1";
  h.incident_id = "incident-0001";
  CHECK(st.begin_upload(h, &where, &dup, &err));
  CHECK(where == dir.path + "/job1/incident-0001");
}
