// What a restarted coordinator reads back on its own (daemon/logic/recovery.h): the incidents a
// previous run left not closed, how each resumes, the staging it left behind, and the incident
// of a previous run that a node delivers a kept dump for.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "common/files.h"
#include "coordinator_fixture.h"
#include "daemon/logic/recovery.h"
#include "testing/clock.h"

using namespace fr::daemon;
using namespace fr::daemon::test;

namespace {

void write(const std::string& path, const std::string& text) {
  std::string err;
  REQUIRE(fr::files::make_dirs(std::filesystem::path(path).parent_path().string(), &err));
  std::ofstream(path) << text;
}

std::string incident_json(const std::string& state, const std::string& kind = "stall") {
  return nlohmann::json({{"schema", "frd-incident/1"},
                         {"kind", kind},
                         {"state", state},
                         {"reason", "stuck"},
                         {"opened_ns", 1234},
                         {"nodes_asked", {"n0", "n1", "../bad"}},
                         {"nodes_uploaded", {"n0"}},
                         {"nodes_failed", {{"n1", "gone"}}},
                         {"hook_fired", true},
                         {"trigger", {{"node", "n0"}, {"log", "rank0.frlog"}, {"comm", 66}}}})
      .dump();
}

}  // namespace

TEST_CASE("recovery: incidents left not closed resume, closed ones stay closed", "[daemon]") {
  TempDir dir;
  const std::string jd = dir.path + "/job1/";
  write(jd + "incident-0001/incident.json", incident_json("closed"));
  write(jd + "incident-0002/incident.json", incident_json("analyzing"));
  write(jd + "incident-0003/incident.json", incident_json("open", "node_lost"));
  write(jd + "incident-0004/incident.json", "not json");
  write(jd + "incident-0002/.upload-n1-7/part", "half a file");
  CoordinatorConfig cfg = config(dir.path);
  Recovery rec(cfg);
  std::vector<Incident> incs = rec.open_incidents();
  REQUIRE(incs.size() == 2);
  const Incident& a = incs[0];
  CHECK(a.id == "incident-0002");
  CHECK(a.recovered);
  CHECK(a.kind == IncidentKind::kStall);
  CHECK(a.state == IncidentState::kCollecting);  // analysing: written again now
  CHECK(a.deadline_mono == a.opened_mono);
  CHECK(a.dir == jd + "incident-0002");
  CHECK(a.opened_real == 1234);
  CHECK(a.asked == std::set<std::string>{"n0", "n1"});  // names checked
  CHECK(a.uploaded == std::set<std::string>{"n0"});
  CHECK(a.failed.at("n1") == "gone");
  CHECK(a.hook_fired);
  CHECK(a.trigger_node == "n0");
  CHECK(a.trigger_comm == 66);
  CHECK_FALSE(std::filesystem::exists(jd + "incident-0002/.upload-n1-7"));
  const Incident& b = incs[1];
  CHECK(b.id == "incident-0003");
  CHECK(b.kind == IncidentKind::kNodeLost);
  CHECK(b.state == IncidentState::kOpen);
  CHECK(b.deadline_mono == b.opened_mono + cfg.dump_deadline_ns);
}

TEST_CASE("recovery: a kept dump finds its previous run's incident", "[daemon]") {
  TempDir dir;
  write(dir.path + "/job1/incident-0001/incident.json", incident_json("closed"));
  write(dir.path + "/job1/incident-0002/incident.json", incident_json("open", "manual"));
  Recovery rec(config(dir.path));
  Incident out;
  bool dup = false;
  std::string err;
  // A closed one: the node's dump already in is a duplicate; another node's is refused.
  CHECK(rec.incident_for_upload(header("incident-0001", "n0"), "job1", true, &out, &dup, &err));
  CHECK(dup);
  CHECK(out.id.empty());
  dup = false;
  CHECK_FALSE(
      rec.incident_for_upload(header("incident-0001", "n1"), "job1", true, &out, &dup, &err));
  CHECK(err == "incident-0001 is closed");
  CHECK_FALSE(
      rec.incident_for_upload(header("incident-0009", "n1"), "job1", true, &out, &dup, &err));
  CHECK(err == "unknown incident incident-0009");
  REQUIRE(rec.incident_for_upload(header("incident-0002", "n1"), "job1", true, &out, &dup, &err));
  CHECK_FALSE(dup);
  CHECK(out.id == "incident-0002");
  CHECK(out.recovered);
  CHECK(out.kind == IncidentKind::kManual);
  CHECK(out.state == IncidentState::kOpen);
  CHECK(out.reason == "stuck");
  CHECK(out.dir == dir.path + "/job1/incident-0002");
}

TEST_CASE("recovery: while the job is unknown, the one job that holds the incident", "[daemon]") {
  TempDir dir;
  std::string err;
  REQUIRE(fr::files::make_dirs(dir.path + "/jobA/incident-0004", &err));
  CoordinatorConfig cfg = config(dir.path);
  cfg.job_id.clear();
  Recovery rec(cfg);
  Incident out;
  bool dup = false;
  REQUIRE(rec.incident_for_upload(header("incident-0004", "n0"), "job", false, &out, &dup, &err));
  CHECK(out.job_id == "jobA");
  CHECK(out.reason == "recovered after a coordinator restart");
  // Known, the job's own directory only.
  CHECK_FALSE(
      rec.incident_for_upload(header("incident-0004", "n0"), "job", true, &out, &dup, &err));
  // Two jobs hold it: neither is guessed.
  REQUIRE(fr::files::make_dirs(dir.path + "/jobB/incident-0004", &err));
  CHECK_FALSE(
      rec.incident_for_upload(header("incident-0004", "n0"), "job", false, &out, &dup, &err));
}
