// The coordinator's uploads on their own (daemon/logic/upload_tracker.h), over a node table and
// an incident book built for the test: who may upload, where a dump goes or why not, what an
// arrival, a late one or a failure does to its incident.
#include <catch2/catch.hpp>

#include "common/files.h"
#include "coordinator_fixture.h"
#include "daemon/logic/upload_tracker.h"
#include "testing/clock.h"

using namespace fr::daemon;
using namespace fr::daemon::test;
using fr::test::kSec;

namespace {

struct Parts {
  TempDir dir;
  CoordinatorConfig cfg = config(dir.path);
  NodeTable nodes{cfg};
  IncidentBook incidents{cfg.dump_dir, "c0ffee"};
  Recovery recovery{cfg};
  UploadTracker uploads{&incidents, &nodes, &recovery};
  uint64_t session = 0;

  Parts() {
    std::string err;
    session = nodes.connect("n0", "h0", "job1", PeerAuth{true, "a"}, 0, &err);
  }
  // An incident that asked n0.
  Incident& asked() {
    Incident& inc = incidents.open(IncidentKind::kManual, "m", "job1", 0, 10 * kSec);
    inc.asked = {"n0"};
    return inc;
  }
  DumpHeader from_n0(const std::string& incident) {
    DumpHeader h = header(incident, "n0");
    h.upload_key = nodes.upload_key(session);
    return h;
  }
};

}  // namespace

TEST_CASE("upload tracker: only the asked node's connection may upload, its own files",
          "[daemon]") {
  Parts p;
  Incident& inc = p.asked();
  std::string err;
  const PeerAuth a{true, "a"};
  DumpHeader h = p.from_n0(inc.id);
  CHECK(p.uploads.check_uploader(h, a, &err));
  CHECK_FALSE(p.uploads.check_uploader(h, PeerAuth{true, "b"}, &err));
  CHECK(err == "this upload does not come from node n0's connection");
  DumpHeader wrong_key = h;
  wrong_key.upload_key = "x";
  CHECK_FALSE(p.uploads.check_uploader(wrong_key, a, &err));
  DumpHeader other = header(inc.id, "n9");
  CHECK_FALSE(p.uploads.check_uploader(other, a, &err));
  CHECK(err == "node n9 is not connected");
  DumpHeader file = h;
  file.files.push_back({});
  file.files.back().name = "n1-rank0.frlog";
  CHECK_FALSE(p.uploads.check_uploader(file, a, &err));
  CHECK(err.find("is not named after node n0") != std::string::npos);
  inc.asked = {"n1"};
  CHECK_FALSE(p.uploads.check_uploader(h, a, &err));
  CHECK(err == "node n0 was not asked to dump for " + inc.id);
}

TEST_CASE("upload tracker: where a dump goes, or why not", "[daemon]") {
  Parts p;
  Incident& inc = p.asked();
  std::string dir, err;
  bool dup = true;
  CHECK(p.uploads.begin_upload(p.from_n0(inc.id), "job1", true, &dir, &dup, &err));
  CHECK(dir == inc.dir);
  CHECK_FALSE(dup);
  CHECK_FALSE(p.uploads.begin_upload(header("../x", "n0"), "job1", true, &dir, &dup, &err));
  CHECK(err == "bad incident id or node name");
  DumpHeader other_job = p.from_n0(inc.id);
  other_job.job_id = "job2";
  CHECK_FALSE(p.uploads.begin_upload(other_job, "job1", true, &dir, &dup, &err));
  CHECK(err.find("dump of job job2") == 0);
  CHECK_FALSE(
      p.uploads.begin_upload(header("incident-0077", "n0"), "job1", true, &dir, &dup, &err));
  CHECK(err == "unknown incident incident-0077");
  p.uploads.upload_done(p.from_n0(inc.id), kSec, false);
  CHECK(p.uploads.begin_upload(p.from_n0(inc.id), "job1", true, &dir, &dup, &err));
  CHECK(dup);
  inc.state = IncidentState::kClosed;
  DumpHeader n1 = header(inc.id, "n1");
  CHECK_FALSE(p.uploads.begin_upload(n1, "job1", true, &dir, &dup, &err));
  CHECK(err == inc.id + " is closed");
}

TEST_CASE("upload tracker: a dump of a previous run's incident is taken into it", "[daemon]") {
  Parts p;
  std::string err;
  REQUIRE(fr::files::make_dirs(p.dir.path + "/job1/incident-0005", &err));
  std::string dir;
  bool dup = false;
  REQUIRE(p.uploads.begin_upload(header("incident-0005", "n0"), "job1", true, &dir, &dup, &err));
  CHECK(dir == p.dir.path + "/job1/incident-0005");
  REQUIRE(p.incidents.find("incident-0005") != nullptr);
  CHECK(p.incidents.find("incident-0005")->recovered);
}

TEST_CASE("upload tracker: an arrival, a late one and failures", "[daemon]") {
  Parts p;
  Incident& inc = p.asked();
  DumpHeader h = p.from_n0(inc.id);
  h.processes.resize(2);
  h.processes[0].file = "n0-rank0.frlog";
  h.processes[1].file = "n0-rank0.frlog";  // the same file twice: once in the incident
  p.uploads.upload_done(h, kSec, true);
  CHECK(inc.uploaded.count("n0"));
  CHECK(inc.placed.count("n0"));
  CHECK(inc.processes.size() == 1);
  CHECK(inc.dirty);
  // A node's own failure to dump counts; after its dump is in, it does not.
  p.uploads.dump_failed(inc.id, "n0", "late");
  CHECK(inc.failed.empty());
  p.uploads.dump_failed(inc.id, "n1", "no space");
  CHECK(inc.failed.at("n1") == "no space");
  p.uploads.upload_failed(inc.id, "n2", "reset");
  CHECK(inc.error == "n2: reset");
  CHECK(p.uploads.failures() == 2);
  // Late, after its deadline: the incident collects again and its set is written anew.
  inc.state = IncidentState::kOpen;
  DumpHeader late = header(inc.id, "n3");
  p.uploads.upload_done(late, 20 * kSec, false);
  CHECK(inc.state == IncidentState::kCollecting);
  CHECK(inc.asked.count("n3"));
  CHECK(inc.deadline_mono == 20 * kSec);
  // While it is analysed: assembled again afterwards.
  inc.state = IncidentState::kAnalyzing;
  p.uploads.upload_done(header(inc.id, "n4"), 21 * kSec, false);
  CHECK(inc.reassemble);
}
