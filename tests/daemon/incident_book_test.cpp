// The coordinator's incidents on their own (daemon/logic/incident_book.h): ids that skip what a
// previous run left, which incident is active or holds back detection, incident.json and when
// it is written, the verdict hook's once-only flag, the steps collected and analysed, and the
// index by id.
#include <catch2/catch.hpp>

#include <filesystem>

#include "common/files.h"
#include "daemon/logic/incident_book.h"
#include "fixture.h"
#include "testing/clock.h"

using namespace fr::daemon;
using namespace fr::daemon::test;
using fr::test::kMs;
using fr::test::kSec;

TEST_CASE("incident book: a new incident gets the next id no run left, and its directory",
          "[daemon]") {
  TempDir dir;
  std::string err;
  REQUIRE(fr::files::make_dirs(dir.path + "/job1/incident-0001", &err));
  IncidentBook book(dir.path, "c0ffee");
  Incident& inc = book.open(IncidentKind::kManual, "why\x01", "job1", 5 * kSec, 10 * kSec);
  CHECK(inc.id == "incident-0002");
  CHECK(inc.dir == dir.path + "/job1/incident-0002");
  CHECK(std::filesystem::is_directory(inc.dir));
  CHECK(inc.state == IncidentState::kCollecting);
  CHECK(inc.reason.find('\x01') == std::string::npos);
  CHECK(inc.opened_mono == 5 * kSec);
  CHECK(inc.deadline_mono == 15 * kSec);
  CHECK(book.open(IncidentKind::kStall, "s", "job1", 0, 0).id == "incident-0003");
  CHECK(book.size() == 2);
  CHECK(book.find("incident-0003") != nullptr);
  CHECK(book.find("incident-0009") == nullptr);
}

TEST_CASE("incident book: active, blocking and collecting", "[daemon]") {
  TempDir dir;
  IncidentBook book(dir.path, "c0ffee");
  CHECK(book.active() == nullptr);
  CHECK(book.blocking() == nullptr);
  CHECK_FALSE(book.busy());
  // A reference into the book holds until the next incident opens: found again by id.
  const std::string slow_id = book.open(IncidentKind::kSlow, "slow", "job1", 0, kSec).id;
  CHECK(book.blocking() == book.find(slow_id));  // collecting: holds detection back
  book.find(slow_id)->state = IncidentState::kOpen;
  CHECK(book.active() == book.find(slow_id));
  CHECK(book.blocking() == nullptr);  // an open slow incident does not hide a hang
  CHECK(book.collecting() == nullptr);
  const std::string stall_id = book.open(IncidentKind::kStall, "stall", "job1", 0, kSec).id;
  Incident& stall = *book.find(stall_id);
  CHECK(book.collecting() == &stall);
  stall.state = IncidentState::kOpen;
  CHECK(book.blocking() == &stall);
  stall.state = IncidentState::kClosedTransient;
  book.find(slow_id)->state = IncidentState::kClosed;
  CHECK(book.active() == nullptr);
}

TEST_CASE("incident book: incident.json says what the incident is", "[daemon]") {
  TempDir dir;
  IncidentBook book(dir.path, "c0ffee");
  Incident& inc = book.open(IncidentKind::kStall, "stuck", "job1", 0, kSec);
  inc.asked = {"n0", "n1"};
  inc.uploaded = {"n0"};
  inc.failed["n1"] = "disk full";
  inc.trigger_node = "n0";
  inc.trigger_comm = 0x42;
  Actions a;
  book.persist(inc, &a);
  REQUIRE(a.persist.size() == 1);
  CHECK(a.persist[0].first == inc.dir + "/incident.json");
  auto j = nlohmann::json::parse(a.persist[0].second);
  CHECK(j == book.to_json(inc));
  CHECK(j.at("schema") == "frd-incident/1");
  CHECK(j.at("coordinator_id") == "c0ffee");
  CHECK(j.at("kind") == "stall");
  CHECK(j.at("state") == "collecting");
  CHECK(j.at("nodes_asked") == nlohmann::json({"n0", "n1"}));
  CHECK(j.at("nodes_failed").at("n1") == "disk full");
  CHECK(j.at("trigger").at("comm") == 0x42);
  CHECK(j.at("slow").is_null());
}

TEST_CASE("incident book: a change is written at once, progress at most once a second",
          "[daemon]") {
  TempDir dir;
  IncidentBook book(dir.path, "c0ffee");
  Incident& inc = book.open(IncidentKind::kManual, "m", "job1", 0, kSec);
  Actions a;
  inc.dirty = true;
  book.persist_changed(kSec, &a);
  CHECK(a.persist.size() == 1);
  inc.dirty = true;
  book.persist_changed(kSec + 500 * kMs, &a);
  CHECK(a.persist.size() == 1);  // collecting: not yet
  book.persist_changed(2 * kSec, &a);
  CHECK(a.persist.size() == 2);
  CHECK_FALSE(inc.dirty);
  inc.dirty = true;
  inc.state = IncidentState::kAnalyzing;
  book.persist_changed(2 * kSec + kMs, &a);
  CHECK(a.persist.size() == 3);  // not collecting: at once
}

TEST_CASE("incident book: the verdict hook fires once per incident", "[daemon]") {
  TempDir dir;
  IncidentBook book(dir.path, "c0ffee");
  const std::string id = book.open(IncidentKind::kStall, "s", "job1", 0, kSec).id;
  Actions a;
  CHECK(book.take_hook(id, &a));
  CHECK_FALSE(book.take_hook(id, &a));
  CHECK_FALSE(book.take_hook("incident-0042", &a));
  REQUIRE(a.persist.size() == 1);
  CHECK(nlohmann::json::parse(a.persist[0].second).at("hook_fired") == true);
}

TEST_CASE("incident book: nodes and logs that an incident not closed holds", "[daemon]") {
  TempDir dir;
  IncidentBook book(dir.path, "c0ffee");
  Incident& inc = book.open(IncidentKind::kStall, "s", "job1", 0, kSec);
  inc.asked = {"n1"};
  inc.trigger_node = "n0";
  inc.trigger_log = "rank0.frlog";
  CHECK(book.needs_node("n0"));
  CHECK(book.needs_node("n1"));
  CHECK_FALSE(book.needs_node("n2"));
  std::set<std::string> logs;
  book.watched_logs("n0", &logs);
  CHECK(logs == std::set<std::string>{"rank0.frlog"});
  inc.state = IncidentState::kClosed;
  CHECK_FALSE(book.needs_node("n0"));
  logs.clear();
  book.watched_logs("n0", &logs);
  CHECK(logs.empty());
}

TEST_CASE("incident book: memory keeps the latest closed incidents", "[daemon]") {
  TempDir dir;
  IncidentBook book(dir.path, "c0ffee");
  for (int i = 0; i < 4; ++i) book.open(IncidentKind::kManual, "m", "job1", 0, kSec);
  for (auto& inc : book)
    if (inc.id != "incident-0003") inc.state = IncidentState::kClosed;
  book.trim_closed(1);
  REQUIRE(book.size() == 2);
  CHECK(book.list()[0].id == "incident-0003");  // not closed: kept
  CHECK(book.list()[1].id == "incident-0004");  // the latest closed one
}

TEST_CASE("incident book: an incident is found by its id after others are added and trimmed",
          "[daemon]") {
  TempDir dir;
  IncidentBook book(dir.path, "c0ffee");
  for (int i = 0; i < 4; ++i) book.open(IncidentKind::kManual, "m", "job1", 0, kSec);
  Incident old;
  old.id = "incident-0000";  // one a previous run left (recovery)
  book.add(old);
  REQUIRE(book.find("incident-0002"));
  CHECK(book.find("incident-0002")->id == "incident-0002");
  CHECK(book.find("incident-0000")->id == "incident-0000");
  for (auto& inc : book)
    if (inc.id != "incident-0003") inc.state = IncidentState::kClosed;
  book.trim_closed(2);  // drops incident-0001 and -0002: the others move up
  REQUIRE(book.size() == 3);
  CHECK_FALSE(book.find("incident-0001"));
  CHECK_FALSE(book.find("incident-0002"));
  const IncidentBook& read_only = book;
  for (const char* id : {"incident-0003", "incident-0004", "incident-0000"}) {
    REQUIRE(read_only.find(id));
    CHECK(read_only.find(id)->id == id);
  }
  book.open(IncidentKind::kManual, "m", "job1", 0, kSec);
  REQUIRE(book.find("incident-0005"));
  CHECK(book.find("incident-0005") == &book.back());
  CHECK_FALSE(book.find("incident-9999"));
}

TEST_CASE("incident book: collected, then analysed, or assembled again", "[daemon]") {
  TempDir dir;
  IncidentBook book(dir.path, "c0ffee");
  Incident& manual = book.open(IncidentKind::kManual, "m", "job1", kSec, kSec);
  book.mark_collected(manual, 3 * kSec);
  CHECK(manual.state == IncidentState::kAnalyzing);
  CHECK(manual.collected_mono == 3 * kSec);
  CHECK(book.last_dump_seconds() == 2.0);
  AssemblyResult r;
  r.ok = true;
  r.verdict_kind = "hang";
  r.culprits = {2};
  manual.reassemble = true;  // a dump arrived while it was analysed
  CHECK_FALSE(book.mark_analysed(manual, r, 4 * kSec));
  CHECK(manual.state == IncidentState::kAnalyzing);
  CHECK_FALSE(manual.reassemble);
  CHECK(book.mark_analysed(manual, r, 7 * kSec));
  CHECK(manual.state == IncidentState::kClosed);  // manual: closed once analysed
  CHECK(manual.verdict_kind == "hang");
  CHECK(book.last_analysis_seconds() == 4.0);

  Incident& slow = book.open(IncidentKind::kSlow, "s", "job1", 0, kSec);
  SlowFinding f;
  f.cause = SlowCause::kLink;
  f.rank = 1;
  f.peer_rank = 5;
  slow.slow = f;
  book.mark_collected(slow, kSec);
  r.ok = false;
  r.error = "disk full";
  CHECK(book.mark_analysed(slow, r, 2 * kSec));
  CHECK(slow.state == IncidentState::kOpen);
  CHECK(slow.error == "disk full");
  CHECK(slow.verdict_kind == "slow");  // the detector's verdict, not the dump set's
  CHECK(slow.culprits == std::vector<int>{5, 1});
}
