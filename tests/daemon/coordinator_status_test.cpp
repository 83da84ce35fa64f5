// The coordinator's status document and metrics (daemon/logic/coordinator_status.cpp).
#include <catch2/catch.hpp>

#include "coordinator_fixture.h"
#include "daemon/logic/coordinator.h"
#include "fixture.h"
#include "status_golden.h"
#include "testing/clock.h"

using namespace fr::daemon;
using namespace fr::daemon::test;
using fr::test::kSec;

TEST_CASE("status and metrics describe nodes, ranks and incidents", "[daemon]") {
  TempDir dir;
  CoordinatorState st(config(dir.path));
  std::string err;
  uint64_t s0 = st.connect("n0", "h0", "job1", 0, &err);
  NodeReport r0 = report({proc(0, true, 0), proc(1, false, 0)});
  r0.gpu_alerts = {"GPU 0000:3b:00.0 reported Xid 79"};
  st.heartbeat(s0, r0, 0);
  auto js = st.status(kSec);
  CHECK(js["schema"] == "frd-status/1");
  CHECK(js["nodes"][0]["gpu_alerts"] ==
        nlohmann::json::array({"GPU 0000:3b:00.0 reported Xid 79"}));
  CHECK(js["ranks"]["alive"] == 1);
  CHECK(js["ranks"]["dead"] == 1);
  CHECK(js["nodes"][0]["name"] == "n0");
  std::string m = st.metrics(kSec);
  CHECK(m.find("frd_nodes{state=\"connected\"} 1") != std::string::npos);
  CHECK(m.find("frd_ranks{state=\"alive\"} 1") != std::string::npos);
  CHECK(m.find("frd_incidents_total{kind=\"stall\"} 0") != std::string::npos);
}

TEST_CASE("status: a snapshot taken under the lock renders alone, after the state has moved on",
          "[daemon]") {
  // The pages render the status outside the state's lock (#37): what they render must be copied
  // out whole, so that a heartbeat applied (or the state gone) meanwhile changes nothing.
  TempDir dir;
  std::string err, text;
  CoordinatorStatus snap;
  {
    CoordinatorState st(config(dir.path));
    const uint64_t s0 = st.connect("n0", "h0", "job1", 0, &err);
    const uint64_t s1 = st.connect("n1", "h1", "job1", 0, &err);
    st.heartbeat(s0, report({proc(0, true, 0), proc(1, true, 0)}), 0);
    st.heartbeat(s1, report({proc(2, true, 0)}), 0);
    text = st.status_text(kSec, StatusQuery{});
    snap = st.status_snapshot(kSec, StatusQuery{});
    st.heartbeat(s1, report({proc(2, false, 0), proc(3, true, 0)}), kSec / 2);
    CHECK(st.status_text(kSec, StatusQuery{}) != text);
  }
  CHECK(to_json_text(snap) == text);
  const auto js = nlohmann::json::parse(to_json_text(snap));
  CHECK(js["nodes"].size() == 2);
  CHECK(js["ranks"]["alive"] == 3);
  // A page of one node, and a summary: the same as the state would render.
  StatusQuery one{1, 1, true};
  TempDir dir2;
  CoordinatorState st(config(dir2.path));
  const uint64_t s0 = st.connect("n0", "h0", "job1", 0, &err);
  st.connect("n1", "h1", "job1", 0, &err);
  st.heartbeat(s0, report({proc(0, true, 0)}), 0);
  const auto page = nlohmann::json::parse(to_json_text(st.status_snapshot(kSec, one)));
  CHECK(page["nodes"].size() == 1);
  CHECK(page["nodes"][0]["name"] == "n1");
  CHECK(page["page"]["next_offset"].is_null());
  CHECK(nlohmann::json::parse(
            to_json_text(st.status_snapshot(kSec, {0, 1, true})))["page"]["next_offset"] == 1);
}

TEST_CASE("status: the typed status renders the same text as the document built before it",
          "[daemon]") {
  // frd-status/1 is read by scripts and pinned by docs: field names, values and the order of the
  // text stay as they were when the status was built as a JSON tree (status_golden.inc).
  static const std::vector<std::pair<std::string, std::string>> golden = {
#include "status_golden.inc"
  };
  TempDir dir;
  const auto texts = golden_status_texts(dir.path);
  REQUIRE(texts.size() == golden.size());
  for (size_t i = 0; i < texts.size(); ++i) {
    INFO(texts[i].first);
    CHECK(texts[i].first == golden[i].first);
    CHECK(texts[i].second == golden[i].second);
  }
}

TEST_CASE("status: read back from its JSON, the typed status renders the same JSON", "[daemon]") {
  // What `frd status` and the pages read (from_json) holds everything the document says.
  TempDir dir;
  for (const auto& [name, text] : golden_status_texts(dir.path)) {
    INFO(name);
    const CoordinatorStatus back = nlohmann::json::parse(text).get<CoordinatorStatus>();
    CoordinatorStatus whole = back;
    whole.query.max_bytes = SIZE_MAX;  // what was read fits: no node cut again
    CHECK(to_json_text(whole) == text);
  }
}

TEST_CASE("status: one incident's entry is found by its id, as the whole status gives it",
          "[daemon]") {
  TempDir dir;
  CoordinatorState st(config(dir.path));
  std::string err;
  const uint64_t s0 = st.connect("n0", "h0", "job1", 0, &err);
  st.heartbeat(s0, report({proc(0, true, 0)}), 0);
  Actions a;
  const std::string id = st.trigger("by hand", kSec, &a);
  const auto one = st.incident_status(id);
  REQUIRE(one);
  CHECK(one->id == id);
  CHECK(one->kind == "manual");
  CHECK(one->state == "collecting");
  CHECK(one->is_open());
  CHECK_FALSE(one->analysed());
  const CoordinatorStatus whole = st.status_snapshot(kSec, StatusQuery{});
  REQUIRE(whole.incident(id));
  CHECK(nlohmann::json(*one) == nlohmann::json(*whole.incident(id)));
  CHECK_FALSE(st.incident_status("incident-9999"));
  CHECK_FALSE(whole.incident("incident-9999"));
}

TEST_CASE("status: a document of odd types reads without a throw, odd fields at their default",
          "[daemon]") {
  // `frd status` reads what a coordinator sends: a field of the wrong type, a number past its
  // type, or no field at all leaves the default.
  const auto j = nlohmann::json::parse(R"({
    "job_id": 7, "ranks": {"alive": "x", "dead": 1e300, "known": 3.0, "expected": null},
    "processes": {"total": -2, "summary": ["no"]},
    "nodes": [{"name": "n0", "heartbeat_age_s": 1e300, "processes": [{"rank": 2, "comms": [
      {"id": "zz", "completed": -1, "oldest_in_flight_s": "soon"}, 5]}, "p"]}, 3],
    "incidents": [{"id": "i1", "failed": {"a": "why", "b": 2}, "slow": {"cause": "gpu"}}],
    "page": {"next_offset": "1"}})");
  CoordinatorStatus s;
  REQUIRE_NOTHROW(s = j.get<CoordinatorStatus>());
  CHECK(s.job_id.empty());
  CHECK(s.ranks.alive == 0);
  CHECK(s.ranks.dead == 0);
  CHECK(s.ranks.known == 3);
  CHECK(s.ranks.expected == -1);
  REQUIRE(s.processes);
  CHECK(s.processes->total == -2);
  CHECK(s.processes->summary.empty());
  REQUIRE(s.nodes.size() == 1);
  CHECK(s.nodes[0].heartbeat_age_ns == INT64_MAX);
  REQUIRE(s.nodes[0].processes.size() == 1);
  CHECK(s.nodes[0].ranks == 1);
  REQUIRE(s.nodes[0].processes[0].comms.size() == 1);
  CHECK(s.nodes[0].processes[0].comms[0].id == 0);
  CHECK(s.nodes[0].processes[0].comms[0].oldest_in_flight_ns == 0);
  REQUIRE(s.incidents.size() == 1);
  CHECK(s.incidents[0].failed == std::map<std::string, std::string>{{"a", "why"}});
  REQUIRE(s.incidents[0].slow);
  CHECK(s.incidents[0].slow->cause == "gpu");
  CHECK_FALSE(s.page.next_offset);
  // Not an object at all: the defaults.
  CHECK(nlohmann::json::array().get<CoordinatorStatus>().schema == "frd-status/1");
}

TEST_CASE("status: a slow finding's every field reads back as written", "[daemon]") {
  StatusSlow s;
  s.cause = "link";
  s.factor = 10.5;
  s.culprit_ranks = {2, 3};
  s.comm = 0xab;
  s.comm_name = "dp0";
  s.evidence = "steps take 10.5x the others";
  s.value_ns = 5, s.others_ns = 6, s.step_ns = 7, s.step_without_ns = 8;
  s.loss_percent = 12.5;
  s.late_share = 0.25;
  s.share = 0.75;
  s.kernel_timed = true;
  s.gpu_sampled = true;
  s.busy_share = 0.5;
  s.peers_busy_share = 0.125;
  s.where = StatusSlow::Where{3, 2, 1};
  const nlohmann::json j = s;
  CHECK(nlohmann::json(j.get<StatusSlow>()) == j);
  CHECK(j["where"]["channel"] == 1);
  CHECK(j["gpu_sampled"] == true);
  // The optional parts are absent unless set.
  const nlohmann::json plain = StatusSlow{};
  for (const char* k : {"late_share", "busy_share", "peers_busy_share", "where", "gpu_sampled"})
    CHECK_FALSE(plain.contains(k));
}
