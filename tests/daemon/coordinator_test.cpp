// The coordinator's state machine without sockets (daemon/logic/coordinator.h, coordinator.cpp and
// coordinator_incidents.cpp): detection, one incident per hang, deadlines, transient closing, and
// nodes that come back.
#include <catch2/catch.hpp>

#include "coordinator_fixture.h"
#include "daemon/logic/coordinator.h"
#include "fixture.h"
#include "testing/clock.h"

using namespace fr::daemon;
using namespace fr::daemon::test;
using fr::test::kSec;

TEST_CASE("a healthy job and a slow one raise no incident", "[daemon]") {
  TempDir dir;
  CoordinatorState st(config(dir.path));
  std::string err;
  uint64_t s0 = st.connect("n0", "h0", "job1", 0, &err);
  uint64_t s1 = st.connect("n1", "h1", "job1", 0, &err);
  REQUIRE(s0);
  REQUIRE(s1);
  for (int64_t t = 0; t < 60 * kSec; t += kSec / 2) {
    // Ops in flight, but never for as long as the threshold (a slow rank included).
    CHECK(st.heartbeat(s0, report({proc(0, true, kSec / 10), proc(1, true, 0)}), t));
    CHECK(st.heartbeat(s1, report({proc(2, true, kSec + kSec / 2), proc(3, true, 0)}), t));
    Actions a = st.tick(t);
    CHECK(a.dumps.empty());
  }
  CHECK(st.incidents().empty());
}

TEST_CASE("a heartbeat given by pointer hands the node's previous report back", "[daemon]") {
  TempDir dir;
  CoordinatorState st(config(dir.path));
  std::string err;
  uint64_t s0 = st.connect("n0", "h0", "job1", 0, &err);
  REQUIRE(s0);
  NodeReport r = report({proc(0, true, 0, 10), proc(1, true, 0, 10)});
  CHECK(st.heartbeat(s0, &r, kSec));
  CHECK(r.processes.empty());  // nothing came before
  r = report({proc(0, true, 0, 11)});
  CHECK(st.heartbeat(s0, &r, 2 * kSec));
  REQUIRE(r.processes.size() == 2);  // the first report, back
  CHECK(r.processes[1].comms[0].completed == 10);
  // The node's view is the newest report, and progress was learned from both.
  CHECK(st.status(3 * kSec)["nodes"][0]["ranks"] == 1);
  // An unknown session keeps the report as it was.
  r = report({proc(2, true, 0)});
  CHECK_FALSE(st.heartbeat(s0 + 99, &r, 3 * kSec));
  CHECK(r.processes.size() == 1);
}

TEST_CASE("a stall opens one incident, gathers every node and closes as transient", "[daemon]") {
  TempDir dir;
  CoordinatorState st(config(dir.path));
  std::string err;
  uint64_t s0 = st.connect("n0", "h0", "job1", 0, &err);
  uint64_t s1 = st.connect("n1", "h1", "job1", 0, &err);
  st.heartbeat(s0, report({proc(0, true, 3 * kSec), proc(1, true, 0)}), kSec);
  st.heartbeat(s1, report({proc(2, true, 0), proc(3, true, 0)}), kSec);
  Actions a = st.tick(kSec);
  REQUIRE(a.dumps.size() == 2);
  REQUIRE(st.incidents().size() == 1);
  const std::string id = st.incidents()[0].id;
  CHECK(st.incidents()[0].kind == IncidentKind::kStall);
  CHECK(a.dumps[0].incident_id == id);
  CHECK(st.incidents()[0].dir == dir.path + "/job1/" + id);
  // The reason names the op and the communicator a person knows.
  CHECK(st.incidents()[0].reason.find("rank 0 on node n0: AllReduce #11 on communicator dp0 (") !=
        std::string::npos);

  // No storm: the same hang seen again and again opens nothing new.
  for (int64_t t = kSec; t < 5 * kSec; t += kSec / 10) {
    st.heartbeat(s0, report({proc(0, true, 3 * kSec + t), proc(1, true, 0)}), t);
    CHECK(st.tick(t).dumps.empty());
  }
  CHECK(st.incidents().size() == 1);

  // Uploads: a duplicate is recognized; the set is complete once both arrived.
  std::string where;
  bool dup = false;
  REQUIRE(st.begin_upload(header(id, "n0"), &where, &dup, &err));
  CHECK(where == st.incidents()[0].dir);
  DumpHeader h0 = header(id, "n0");
  h0.processes.push_back({0, 4, 100, "n0", "job1", "n0-rank0.n0.100.frlog", "src", true, 5, 0, 0});
  st.upload_done(h0, 5 * kSec);
  REQUIRE(st.begin_upload(header(id, "n0"), &where, &dup, &err));
  CHECK(dup);
  CHECK(st.tick(5 * kSec).assemble.empty());
  st.upload_done(header(id, "n1"), 5 * kSec);
  a = st.tick(5 * kSec);
  REQUIRE(a.assemble.size() == 1);
  CHECK(a.assemble[0].processes.size() == 1);
  CHECK(a.assemble[0].expected_ranks == 4);
  CHECK(a.assemble[0].nodes.size() == 2);
  CHECK(st.incidents()[0].state == IncidentState::kAnalyzing);

  AssemblyResult r;
  r.ok = true;
  r.verdict_kind = "stuck_in_collective";
  r.culprits = {0};
  Actions b;
  st.assembled(id, r, 6 * kSec, &b);
  CHECK(st.incidents()[0].state == IncidentState::kOpen);
  REQUIRE(b.log.size() == 1);
  CHECK(b.log[0].find("stuck_in_collective") != std::string::npos);

  // The stalled op completes: transient.
  st.heartbeat(s0, report({proc(0, true, 0, 11), proc(1, true, 0, 11)}), 7 * kSec);
  st.heartbeat(s1, report({proc(2, true, 0, 11), proc(3, true, 0, 11)}), 7 * kSec);
  st.tick(7 * kSec);
  CHECK(st.incidents()[0].state == IncidentState::kClosedTransient);

  // A later hang is a new incident.
  st.heartbeat(s1, report({proc(2, true, 9 * kSec, 11), proc(3, true, 0, 11)}), 8 * kSec);
  CHECK(st.tick(8 * kSec).dumps.size() == 2);
  CHECK(st.incidents().size() == 2);
  CHECK(st.incidents()[1].id != id);
}

namespace {

// Two nodes, two ranks each; rank 0 stalls on comm 0x42 (10 completed) and the incident is taken
// through collection and analysis to kOpen. Returns its index.
struct OpenStall {
  TempDir dir;
  CoordinatorState st{config(dir.path)};
  std::string err;
  uint64_t s0 = 0, s1 = 0;
  OpenStall() {
    s0 = st.connect("n0", "h0", "job1", 0, &err);
    s1 = st.connect("n1", "h1", "job1", 0, &err);
    st.heartbeat(s0, report({proc(0, true, 3 * kSec), proc(1, true, 0)}), kSec);
    st.heartbeat(s1, report({proc(2, true, 0), proc(3, true, 0)}), kSec);
    REQUIRE(st.tick(kSec).dumps.size() == 2);
    REQUIRE(st.incidents().size() == 1);
    const std::string id = st.incidents()[0].id;
    st.upload_done(header(id, "n0"), 2 * kSec);
    st.upload_done(header(id, "n1"), 2 * kSec);
    REQUIRE(st.tick(2 * kSec).assemble.size() == 1);
    AssemblyResult r;
    r.ok = true;
    Actions b;
    st.assembled(id, r, 3 * kSec, &b);
    REQUIRE(st.incidents()[0].state == IncidentState::kOpen);
  }
  IncidentState after(std::vector<ProcessReport> n0, std::vector<ProcessReport> n1, int64_t t) {
    REQUIRE(st.heartbeat(s0, report(std::move(n0)), t));
    REQUIRE(st.heartbeat(s1, report(std::move(n1)), t));
    st.tick(t);
    REQUIRE(st.incidents().size() == 1);  // never a second incident while this one is open
    return st.incidents()[0].state;
  }
};

}  // namespace

TEST_CASE("a stall incident closes as transient only when nothing is stalled any more",
          "[daemon]") {
  OpenStall o;
  // The triggering op completed, but rank 2 is now stalled past the threshold: still hung.
  CHECK(o.after({proc(0, true, 0, 11), proc(1, true, 0, 11)},
                {proc(2, true, 3 * kSec, 11), proc(3, true, 0, 11)},
                4 * kSec) == IncidentState::kOpen);
  // Nothing is past the threshold, but the triggering communicator has not moved: still open.
  CHECK(o.after({proc(0, true, kSec / 10, 10), proc(1, true, 0, 10)},
                {proc(2, true, 0, 10), proc(3, true, 0, 10)}, 5 * kSec) == IncidentState::kOpen);
  // It moved, nothing is stalled, but a rank died uncleanly meanwhile: still open.
  CHECK(o.after({proc(0, true, 0, 11), proc(1, false, 0, 11)},
                {proc(2, true, 0, 11), proc(3, true, 0, 11)}, 6 * kSec) == IncidentState::kOpen);
  // Moved, nothing stalled, everyone alive: transient.
  CHECK(o.after({proc(0, true, 0, 12), proc(1, true, 0, 12)},
                {proc(2, true, 0, 12), proc(3, true, 0, 12)},
                7 * kSec) == IncidentState::kClosedTransient);
}

TEST_CASE("a stall incident stays open while the stalled op stays in flight", "[daemon]") {
  OpenStall o;
  for (int64_t t = 4 * kSec; t < 20 * kSec; t += kSec) {
    INFO("t=" << t / kSec << " s");
    CHECK(o.after({proc(0, true, t, 10), proc(1, true, 0, 10)},
                  {proc(2, true, 0, 10), proc(3, true, 0, 10)}, t) == IncidentState::kOpen);
  }
  // Every rank gone: closed, not transient.
  CHECK(o.after({proc(0, false, 0, 10, true), proc(1, false, 0, 10, true)},
                {proc(2, false, 0, 10, true), proc(3, false, 0, 10, true)},
                21 * kSec) == IncidentState::kClosed);
}

TEST_CASE("a node_lost incident closes as transient only when the node is back and nothing stalls",
          "[daemon]") {
  TempDir dir;
  CoordinatorState st(config(dir.path));
  std::string err;
  uint64_t s0 = st.connect("n0", "h0", "job1", 0, &err);
  uint64_t s1 = st.connect("n1", "h1", "job1", 0, &err);
  st.heartbeat(s0, report({proc(0, true, 0)}), 0);
  st.heartbeat(s1, report({proc(1, true, 0)}), 0);
  for (int64_t t = kSec; t <= 6 * kSec; t += kSec) {
    st.heartbeat(s0, report({proc(0, true, 0)}), t);
    st.tick(t);
  }
  REQUIRE(st.incidents().size() == 1);
  const std::string id = st.incidents()[0].id;
  REQUIRE(st.incidents()[0].kind == IncidentKind::kNodeLost);
  st.upload_done(header(id, "n0"), 7 * kSec);
  REQUIRE(st.tick(7 * kSec).assemble.size() == 1);
  AssemblyResult r;
  r.ok = true;
  Actions b;
  st.assembled(id, r, 7 * kSec, &b);
  REQUIRE(st.incidents()[0].state == IncidentState::kOpen);
  // Back, but with an op stalled past the threshold: still open.
  st.heartbeat(s0, report({proc(0, true, 0)}), 8 * kSec);
  st.heartbeat(s1, report({proc(1, true, 3 * kSec)}), 8 * kSec);
  st.tick(8 * kSec);
  CHECK(st.incidents()[0].state == IncidentState::kOpen);
  // Back and nothing stalled: transient.
  st.heartbeat(s0, report({proc(0, true, 0)}), 9 * kSec);
  st.heartbeat(s1, report({proc(1, true, 0, 11)}), 9 * kSec);
  st.tick(9 * kSec);
  CHECK(st.incidents()[0].state == IncidentState::kClosedTransient);
  CHECK(st.incidents().size() == 1);
}

TEST_CASE("thresholds: a stall, a lost node and a dead rank open exactly at their limit",
          "[daemon]") {
  TempDir dir;
  const CoordinatorConfig cfg = config(dir.path);
  std::string err;
  SECTION("stall_after") {
    CoordinatorState st(cfg);
    uint64_t s = st.connect("n0", "h0", "job1", 0, &err);
    st.heartbeat(s, report({proc(0, true, cfg.stall_after_ns - 1)}), kSec);
    CHECK(st.tick(kSec).dumps.empty());
    st.heartbeat(s, report({proc(0, true, cfg.stall_after_ns)}), kSec + 1);
    CHECK(st.tick(kSec + 1).dumps.size() == 1);
    REQUIRE(st.incidents().size() == 1);
    CHECK(st.incidents()[0].kind == IncidentKind::kStall);
  }
  SECTION("heartbeat_timeout") {
    CoordinatorState st(cfg);
    uint64_t s0 = st.connect("n0", "h0", "job1", 0, &err);
    uint64_t s1 = st.connect("n1", "h1", "job1", 0, &err);
    st.heartbeat(s1, report({proc(1, true, 0)}), 0);
    st.heartbeat(s0, report({proc(0, true, 0)}), cfg.heartbeat_timeout_ns - 1);
    CHECK(st.tick(cfg.heartbeat_timeout_ns - 1).dumps.empty());
    st.heartbeat(s0, report({proc(0, true, 0)}), cfg.heartbeat_timeout_ns);
    CHECK(st.tick(cfg.heartbeat_timeout_ns).dumps.size() == 1);
    REQUIRE(st.incidents().size() == 1);
    CHECK(st.incidents()[0].kind == IncidentKind::kNodeLost);
  }
  SECTION("heartbeat_timeout, for a node back and silent again, among nodes that tick often") {
    CoordinatorState st(cfg);
    const int64_t t = cfg.heartbeat_timeout_ns;
    uint64_t s0 = st.connect("n0", "h0", "job1", 0, &err);
    uint64_t s1 = st.connect("n1", "h1", "job1", 0, &err);
    auto lost = [&](int64_t now) { return st.status(now)["nodes"][1]["lost"] == true; };
    // n0 heartbeats and the coordinator ticks often; n1 reports once at 0, then at 3t.
    st.heartbeat(s1, report({proc(1, true, 0)}), 0);
    for (int64_t now = 0; now <= 6 * t; now += t / 8) {
      st.heartbeat(s0, report({proc(0, true, 0)}), now);
      if (now == 3 * t) st.heartbeat(s1, report({proc(1, true, 0)}), now);
      st.tick(now);
      INFO(now / (t / 8));
      CHECK(lost(now) == ((now >= t && now < 3 * t) || now >= 4 * t));
      CHECK(st.status(now)["nodes"][0]["lost"] == false);
    }
    // Every node lost, then one back: it is watched again.
    CoordinatorState one(cfg);
    uint64_t s = one.connect("n0", "h0", "job1", 0, &err);
    one.heartbeat(s, report({proc(0, true, 0)}), 0);
    one.tick(t);
    CHECK(one.status(t)["nodes"][0]["lost"] == true);
    one.heartbeat(s, report({proc(0, true, 0)}), 2 * t);
    one.tick(2 * t);
    CHECK(one.status(2 * t)["nodes"][0]["lost"] == false);
    one.tick(3 * t);
    CHECK(one.status(3 * t)["nodes"][0]["lost"] == true);
  }
  SECTION("dead_grace") {
    CoordinatorState st(cfg);
    uint64_t s = st.connect("n0", "h0", "job1", 0, &err);
    st.heartbeat(s, report({proc(0, false, 0), proc(1, true, 0)}), kSec);
    st.heartbeat(s, report({proc(0, false, 0), proc(1, true, 0)}), kSec + cfg.dead_grace_ns - 1);
    CHECK(st.tick(kSec + cfg.dead_grace_ns - 1).dumps.empty());
    st.heartbeat(s, report({proc(0, false, 0), proc(1, true, 0)}), kSec + cfg.dead_grace_ns);
    CHECK(st.tick(kSec + cfg.dead_grace_ns).dumps.size() == 1);
    REQUIRE(st.incidents().size() == 1);
    CHECK(st.incidents()[0].kind == IncidentKind::kRankDead);
  }
}

TEST_CASE("a dead rank while others run opens rank_dead after a grace", "[daemon]") {
  TempDir dir;
  CoordinatorState st(config(dir.path));
  std::string err;
  uint64_t s0 = st.connect("n0", "h0", "job1", 0, &err);
  st.heartbeat(s0, report({proc(0, false, 0), proc(1, true, 0)}), kSec);
  CHECK(st.tick(kSec).dumps.empty());
  st.heartbeat(s0, report({proc(0, false, 0), proc(1, true, 0)}), kSec + kSec / 2);
  CHECK(st.tick(kSec + kSec / 2).dumps.empty());
  st.heartbeat(s0, report({proc(0, false, 0), proc(1, true, 0)}), 2 * kSec + kSec / 10);
  Actions a = st.tick(2 * kSec + kSec / 10);
  CHECK(a.dumps.size() == 1);
  REQUIRE(st.incidents().size() == 1);
  CHECK(st.incidents()[0].kind == IncidentKind::kRankDead);

  SECTION("ranks that finished cleanly are no incident") {
    CoordinatorState st2(config(dir.path));
    uint64_t s = st2.connect("n0", "h0", "job1", 0, &err);
    for (int64_t t = 0; t < 10 * kSec; t += kSec) {
      st2.heartbeat(s, report({proc(0, false, 0, 10, true), proc(1, true, 0)}), t);
      st2.tick(t);
    }
    CHECK(st2.incidents().empty());
  }
}

TEST_CASE("a frozen node's last report does not age into a stall", "[daemon]") {
  TempDir dir;
  CoordinatorState st(config(dir.path));
  std::string err;
  uint64_t s0 = st.connect("n0", "h0", "job1", 0, &err);
  uint64_t s1 = st.connect("n1", "h1", "job1", 0, &err);
  st.heartbeat(s1, report({proc(1, true, kSec / 10)}), 0);  // then silence
  for (int64_t t = 0; t <= 6 * kSec; t += kSec / 5) {
    st.heartbeat(s0, report({proc(0, true, kSec / 10)}), t);
    st.tick(t);
  }
  REQUIRE(st.incidents().size() == 1);
  CHECK(st.incidents()[0].kind == IncidentKind::kNodeLost);
}

TEST_CASE("a silent node is lost and the others are asked to dump", "[daemon]") {
  TempDir dir;
  CoordinatorState st(config(dir.path));
  std::string err;
  uint64_t s0 = st.connect("n0", "h0", "job1", 0, &err);
  uint64_t s1 = st.connect("n1", "h1", "job1", 0, &err);
  st.heartbeat(s0, report({proc(0, true, 0)}), 0);
  st.heartbeat(s1, report({proc(1, true, 0)}), 0);
  for (int64_t t = kSec; t <= 6 * kSec; t += kSec) {
    st.heartbeat(s0, report({proc(0, true, 0)}), t);  // n1 stays silent (SIGSTOP)
    Actions a = st.tick(t);
    if (t < 5 * kSec) CHECK(a.dumps.empty());
  }
  REQUIRE(st.incidents().size() == 1);
  const Incident& inc = st.incidents()[0];
  CHECK(inc.kind == IncidentKind::kNodeLost);
  CHECK(inc.asked == std::set<std::string>{"n0"});
  // n0's dump completes the set at once: the lost node is not waited for.
  st.upload_done(header(inc.id, "n0"), 7 * kSec);
  CHECK(st.tick(7 * kSec).assemble.size() == 1);
  AssemblyResult r;
  r.ok = true;
  Actions b;
  st.assembled(inc.id, r, 7 * kSec, &b);
  CHECK(st.incidents()[0].state == IncidentState::kOpen);
  // It comes back (SIGCONT): known again, the incident closes, no second incident.
  CHECK(st.heartbeat(s1, report({proc(1, true, 0)}), 8 * kSec));
  CHECK(st.status(8 * kSec)["nodes"][1]["lost"] == false);
  CHECK(st.tick(8 * kSec).dumps.empty());
  CHECK(st.incidents()[0].state == IncidentState::kClosedTransient);
  CHECK(st.incidents().size() == 1);
}

TEST_CASE("a silent node is lost without an incident when it has no live rank", "[daemon]") {
  // A node that runs no rank (its job has not started there, or ended) going silent loses no
  // rank: it is marked lost and logged, and nobody is asked to dump.
  TempDir dir;
  CoordinatorState st(config(dir.path));
  std::string err;
  uint64_t s0 = st.connect("n0", "h0", "job1", 0, &err);
  uint64_t s1 = st.connect("n1", "h1", "job1", 0, &err);
  st.heartbeat(s0, report({proc(0, true, 0)}), 0);
  st.heartbeat(s1, report({}), 0);
  bool logged = false;
  for (int64_t t = kSec; t <= 8 * kSec; t += kSec) {
    st.heartbeat(s0, report({proc(0, true, 0)}), t);  // n1 stays silent
    Actions a = st.tick(t);
    CHECK(a.dumps.empty());
    for (const auto& line : a.log) logged |= line.find("node n1 lost") != std::string::npos;
  }
  CHECK(logged);
  CHECK(st.status(8 * kSec)["nodes"][1]["lost"] == true);
  CHECK(st.incidents().empty());
}

TEST_CASE("the dump deadline ends the wait for a node that never answers", "[daemon]") {
  TempDir dir;
  CoordinatorConfig cfg = config(dir.path);
  cfg.heartbeat_timeout_ns = 60 * kSec;  // connected and not lost, just not answering
  CoordinatorState st(cfg);
  std::string err;
  uint64_t s0 = st.connect("n0", "h0", "job1", 0, &err);
  uint64_t s1 = st.connect("n1", "h1", "job1", 0, &err);
  (void)s1;
  Actions a;
  std::string id = st.trigger("by hand", kSec, &a);
  CHECK(a.dumps.size() == 2);
  // A second trigger while collecting reuses the incident.
  Actions again;
  CHECK(st.trigger("again", kSec, &again) == id);
  CHECK(again.dumps.empty());
  st.upload_done(header(id, "n0"), 2 * kSec);
  st.heartbeat(s0, report({}), 2 * kSec);
  CHECK(st.tick(5 * kSec).assemble.empty());
  a = st.tick(11 * kSec + kSec / 2);
  REQUIRE(a.assemble.size() == 1);
  CHECK(st.incidents()[0].failed.count("n1"));
  CHECK(a.assemble[0].incident["nodes_failed"].contains("n1"));
}

TEST_CASE("a node that reconnects while an incident collects is asked again", "[daemon]") {
  TempDir dir;
  CoordinatorState st(config(dir.path));
  std::string err;
  uint64_t s0 = st.connect("n0", "h0", "job1", 0, &err);
  uint64_t s1 = st.connect("n1", "h1", "job1", 0, &err);
  Actions a;
  std::string id = st.trigger("x", kSec, &a);
  st.upload_done(header(id, "n0"), kSec);
  // n1 was killed and comes back under the same name.
  st.disconnect(s1, 2 * kSec);
  uint64_t s1b = st.connect("n1", "h1", "job1", 2 * kSec, &err);
  Actions again;
  st.resend_requests(s1b, &again);
  REQUIRE(again.dumps.size() == 1);
  CHECK(again.dumps[0].incident_id == id);
  CHECK(again.dumps[0].session == s1b);
  // n0's dump is in: nothing to ask it.
  Actions none;
  st.resend_requests(s0, &none);
  CHECK(none.dumps.empty());
  // The stale session is gone for good.
  CHECK_FALSE(st.heartbeat(s1, report({}), 3 * kSec));
}
