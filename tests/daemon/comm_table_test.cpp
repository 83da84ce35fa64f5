// The coordinator's communicators on their own (daemon/logic/comm_table.h): thresholds from the
// policy, models learned and bounded, members that leave, forgotten communicators, and a rank
// its peers keep waiting for becoming a slow-rank finding that ages out.
#include <catch2/catch.hpp>

#include "coordinator_fixture.h"
#include "daemon/logic/comm_table.h"
#include "testing/clock.h"

using namespace fr::daemon;
using namespace fr::daemon::test;
using fr::test::kMs;
using fr::test::kSec;

namespace {

CoordinatorConfig fixed_config() {
  CoordinatorConfig c;
  c.stall_after_ns = 2 * kSec;
  c.heartbeat_interval_ns = kSec;
  c.forget_after_ns = 60 * kSec;
  return c;
}

}  // namespace

TEST_CASE("comm table: thresholds follow the policy, learned or not", "[daemon]") {
  CommTable fixed(fixed_config());
  CHECK_FALSE(fixed.policy().automatic);
  CHECK(fixed.model(0x42) == nullptr);
  CHECK(fixed.stall_threshold_ns(0x42) == 2 * kSec);

  CoordinatorConfig a = fixed_config();
  a.stall_auto = true;
  a.stall_floor_ns = 3 * kSec;
  a.stall_cap_ns = kSec;  // below the floor: the cap is raised to it
  CommTable automatic(a);
  CHECK(automatic.policy().cap_ns == 3 * kSec);
  // Not learned yet: judged with the cap.
  CHECK(automatic.stall_threshold_ns(0x42) == 3 * kSec);
}

TEST_CASE("comm table: a heartbeat teaches a model per communicator and NIXL pair", "[daemon]") {
  CommTable t(fixed_config());
  std::vector<MemberTrack> members;
  NodeReport r = report({proc(0, true, 0), proc(1, true, 0), proc(2, false, 0)});
  XferProgress x;
  x.local_agent = "a";
  x.remote_agent = "b";
  r.processes[0].xfers.push_back(x);
  t.learn("n0", &members, r, kSec);
  // Two live processes on 0x42 (the dead one is not a member) and one NIXL pair.
  CHECK(members.size() == 3);
  CHECK(std::is_sorted(members.begin(), members.end(),
                       [](const MemberTrack& p, const MemberTrack& q) { return p.key < q.key; }));
  REQUIRE(t.model(0x42) != nullptr);
  CHECK(t.model(0x42)->name == "dp0");
  REQUIRE(t.model(nixl_model_id("a", "b")) != nullptr);
  CHECK(t.model(nixl_model_id("a", "b"))->name == "NIXL a -> b");
  CHECK(t.size() == 2);
  // The same report again: the same members, no new model.
  t.learn("n0", &members, r, 2 * kSec);
  CHECK(members.size() == 3);
  CHECK(t.size() == 2);
  t.drop_members(&members);
  CHECK(members.empty());
}

TEST_CASE("comm table: models and members are bounded", "[daemon]") {
  CoordinatorConfig c = fixed_config();
  c.max_comm_models = 1;
  c.max_members_per_node = 2;
  CommTable t(c);
  NodeReport r = report({proc(0, true, 0), proc(1, true, 0), proc(2, true, 0)});
  r.processes[0].comms.push_back(r.processes[0].comms[0]);
  r.processes[0].comms[1].comm_id = 0x43;  // a second communicator: past the cap
  std::vector<MemberTrack> members;
  t.learn("n0", &members, r, kSec);
  CHECK(t.size() == 1);
  CHECK(t.model(0x43) == nullptr);
  CHECK(members.size() == 2);
}

TEST_CASE("comm table: a communicator no member reports is forgotten after a while", "[daemon]") {
  CommTable t(fixed_config());
  std::vector<MemberTrack> members;
  t.learn("n0", &members, report({proc(0, true, 0)}), kSec);
  REQUIRE(t.size() == 1);
  t.drop_members(&members);
  t.forget(30 * kSec);
  CHECK(t.size() == 1);  // not long enough
  t.forget(kSec + 61 * kSec);
  CHECK(t.size() == 0);
}

TEST_CASE("comm table: a rank its peers wait for becomes a finding, then ages out", "[daemon]") {
  CommTable t(fixed_config());
  std::vector<MemberTrack> m1, m2;
  uint64_t done = 0;
  int64_t now = 0;
  std::vector<std::string> log;
  for (int i = 0; i < 40; ++i) {
    now += kSec;
    done += 3;
    // Ranks 0, 1, 2 wait in every step; rank 3 computes and rarely has an op out.
    t.learn("n1", &m1, report({proc(0, true, 800 * kMs, done), proc(1, true, 600 * kMs, done)}),
            now);
    t.learn(
        "n2", &m2,
        report({proc(2, true, 700 * kMs, done), proc(3, true, i % 10 == 5 ? 5 * kMs : 0, done)}),
        now);
    t.age_findings(now, &log);
    if (i == 20) CHECK(t.findings().empty());  // judged after 15 samples, reported after 10 more
  }
  REQUIRE(t.findings().size() == 1);
  const Finding& f = t.findings()[0];
  CHECK(f.rank == 3);
  CHECK(f.node == "n2");
  CHECK(f.comm_id == 0x42);
  CHECK(f.comm_name == "dp0 (0x0000000000000042)");
  CHECK(f.active);
  CHECK(f.peers_waiting > 0.9);
  REQUIRE(log.size() == 1);
  CHECK(log[0].find("slow rank 3 on node n2") != std::string::npos);
  CHECK(t.take_findings_dirty());
  CHECK_FALSE(t.take_findings_dirty());
  CHECK(t.findings_json().at(0).at("comm") == "0000000000000042");
  // Not seen for ten heartbeat intervals: inactive, and said so.
  log.clear();
  t.age_findings(now + 10 * kSec, &log);
  CHECK(t.findings()[0].active);
  t.age_findings(now + 11 * kSec, &log);
  CHECK_FALSE(t.findings()[0].active);
  REQUIRE(log.size() == 1);
  CHECK(log[0].find("no longer slow") != std::string::npos);
  CHECK(t.take_findings_dirty());
}
