// The coordinator's nodes on their own (daemon/logic/node_table.h): names, credentials and
// sessions; what a report leaves of a node (live and dead ranks, its oldest op, the job's name);
// the memory bounds on kept reports; lost and forgotten nodes; processes without a flight log.
#include <catch2/catch.hpp>

#include "coordinator_fixture.h"
#include "daemon/logic/node_table.h"
#include "testing/clock.h"

using namespace fr::daemon;
using namespace fr::daemon::test;
using fr::test::kSec;

namespace {

CoordinatorConfig node_config() {
  CoordinatorConfig c;
  c.job_id = "job1";
  c.stall_after_ns = 2 * kSec;
  c.heartbeat_timeout_ns = 5 * kSec;
  c.heartbeat_interval_ns = kSec;
  c.forget_after_ns = 60 * kSec;
  return c;
}

// One heartbeat through both steps, nothing watched by an incident.
bool beat(NodeTable& t, CommTable& comms, uint64_t session, NodeReport r, int64_t now) {
  Node* n = t.heard(session, now);
  if (!n) return false;
  t.take_report(n, &r, now, comms, [](const std::string&, std::set<std::string>*) {});
  return true;
}

PeerAuth token(const std::string& who) { return PeerAuth{true, who}; }

}  // namespace

TEST_CASE("node table: a live name is kept from other credentials, taken over by the same",
          "[daemon]") {
  NodeTable t(node_config());
  std::string err;
  uint64_t s1 = t.connect("n0", "h0", "job1", token("a"), 0, &err);
  REQUIRE(s1 != 0);
  CHECK(t.connected() == 1);
  CHECK(t.upload_key(s1).size() == 64);
  CHECK(t.connect("n0", "h0", "job1", token("b"), kSec, &err) == 0);
  CHECK(err.find("held by a live connection") != std::string::npos);
  CHECK(t.connect("n0", "h0", "job1", PeerAuth{false, ""}, kSec, &err) == 0);
  uint64_t s2 = t.connect("n0", "h0", "job1", token("a"), kSec, &err);
  REQUIRE(s2 != 0);
  CHECK(s2 != s1);
  CHECK(t.by_session(s1) == nullptr);  // the old session is stale
  CHECK(t.upload_key(s1).empty());
  CHECK(t.sessions() == std::vector<uint64_t>{s2});
  CHECK(t.size() == 1);
  // Another job's node is refused; a name is sanitised.
  CHECK(t.connect("n1", "h1", "job2", token("a"), kSec, &err) == 0);
  CHECK(err.find("belongs to job job2") != std::string::npos);
  t.disconnect(s2);
  CHECK(t.connected() == 0);
  REQUIRE(t.find("n0") != nullptr);
  CHECK_FALSE(t.find("n0")->lost);  // lost only once silent for the timeout
}

TEST_CASE("node table: the node count is bounded", "[daemon]") {
  CoordinatorConfig c = node_config();
  c.max_nodes = 1;
  NodeTable t(c);
  std::string err;
  REQUIRE(t.connect("n0", "h0", "job1", token("a"), 0, &err) != 0);
  CHECK(t.connect("n1", "h1", "job1", token("a"), 0, &err) == 0);
  CHECK(err == "too many nodes (1)");
}

TEST_CASE("node table: a report gives the ranks, the dead and the oldest op", "[daemon]") {
  CoordinatorConfig c = node_config();
  NodeTable t(c);
  CommTable comms(c);
  std::string err;
  uint64_t s = t.connect("n0", "h0", "job1", token("a"), 0, &err);
  CHECK(t.heard(s + 100, kSec) == nullptr);
  REQUIRE(beat(t, comms, s,
               report({proc(0, true, kSec), proc(1, true, 3 * kSec, 7), proc(2, false, 0)}), kSec));
  const Node& n = *t.find("n0");
  CHECK(n.heartbeats == 1);
  CHECK(t.heartbeats_total() == 1);
  CHECK(n.alive == 2);
  CHECK(n.world_size == 4);
  CHECK(t.expected_ranks() == 4);
  CHECK(t.total_alive() == 2);
  // The op furthest past its threshold: rank 1's, 3 s against 2 s.
  CHECK(n.oldest.age_ns == 3 * kSec);
  CHECK(n.oldest.threshold_ns == 2 * kSec);
  CHECK(n.oldest.rank == 1);
  CHECK(n.oldest.pid == 101);
  CHECK(n.oldest.log == "rank1.frlog");
  CHECK(n.oldest.comm == 0x42);
  CHECK(n.oldest.comm_name == "dp0");
  CHECK(n.oldest.op == FR_OP_ALLREDUCE);
  CHECK(n.oldest.seq == 8);
  CHECK(n.oldest.completed == 7);
  CHECK_FALSE(n.oldest.xfer);
  CHECK(n.oldest.stalled());
  CHECK(t.over_threshold_nodes() == 1);
  // Rank 2 died uncleanly: seen dead since this heartbeat, and since then at the next.
  REQUIRE(n.dead_since.count("rank2.frlog"));
  CHECK(n.dead_since.at("rank2.frlog").since == kSec);
  CHECK(n.dead_since.at("rank2.frlog").rank == 2);
  CHECK(t.dead_nodes() == 1);
  // The job's name comes from an authenticated node's live process.
  CHECK(t.learned_job() == "job1");
  REQUIRE(beat(t, comms, s, report({proc(0, true, kSec), proc(2, false, 0)}), 2 * kSec));
  CHECK(n.dead_since.at("rank2.frlog").since == kSec);
  CHECK(n.oldest.age_ns == kSec);
  CHECK_FALSE(n.oldest.stalled());
  CHECK(t.over_threshold_nodes() == 0);
  // A clean exit is no dead rank.
  REQUIRE(beat(t, comms, s, report({proc(0, true, 0), proc(2, false, 0, 10, true)}), 3 * kSec));
  CHECK(n.dead_since.empty());
  CHECK(t.dead_nodes() == 0);
  CHECK(n.oldest.age_ns == 0);
  CHECK(n.oldest.rank == -1);
}

TEST_CASE("node table: an anonymous node does not name the job", "[daemon]") {
  CoordinatorConfig c = node_config();
  c.job_id.clear();
  NodeTable t(c);
  CommTable comms(c);
  std::string err;
  uint64_t s = t.connect("n0", "h0", "", PeerAuth{false, ""}, 0, &err);
  REQUIRE(beat(t, comms, s, report({proc(0, true, 0)}), kSec));
  CHECK(t.learned_job().empty());
  uint64_t s2 = t.connect("n1", "h1", "", token("a"), 0, &err);
  REQUIRE(beat(t, comms, s2, report({proc(1, false, 0)}), kSec));
  CHECK(t.learned_job().empty());  // a dead process may be an earlier job's
  REQUIRE(beat(t, comms, s2, report({proc(1, true, 0)}), 2 * kSec));
  CHECK(t.learned_job() == "job1");
}

TEST_CASE("node table: a report past the bounds keeps the oldest op's and the watched detail",
          "[daemon]") {
  CoordinatorConfig c = node_config();
  c.max_node_bytes = 12000;  // the whole report is about 13 kB, cut to about 7 kB
  NodeTable t(c);
  CommTable comms(c);
  std::string err;
  uint64_t s = t.connect("n0", "h0", "job1", token("a"), 0, &err);
  NodeReport r;
  for (int i = 0; i < 4; ++i) {
    ProcessReport p = proc(i, true, i == 2 ? 3 * kSec : 0);
    for (int k = 0; k < 20; ++k) p.comms.push_back(p.comms[0]);
    r.processes.push_back(p);
  }
  Node* n = t.heard(s, kSec);
  REQUIRE(n);
  std::string asked_about;
  t.take_report(n, &r, kSec, comms, [&](const std::string& node, std::set<std::string>* logs) {
    asked_about = node;
    logs->insert("rank0.frlog");
  });
  CHECK(asked_about == "n0");
  CHECK(n->trimmed);
  CHECK(t.reports_trimmed() == 1);
  CHECK(n->retained <= c.max_node_bytes);
  CHECK(t.retained_bytes() == n->retained);
  for (const auto& p : n->last.processes) {
    INFO(p.log);
    CHECK(p.comms.empty() == (p.log != "rank0.frlog" && p.log != "rank2.frlog"));
  }
  // The summary was derived from the whole report, before the cut.
  CHECK(n->alive == 4);
  CHECK(n->oldest.rank == 2);
}

TEST_CASE("node table: a silent node is lost once, then forgotten unless needed", "[daemon]") {
  CoordinatorConfig c = node_config();
  NodeTable t(c);
  CommTable comms(c);
  std::string err;
  uint64_t s0 = t.connect("n0", "h0", "job1", token("a"), 0, &err);
  uint64_t s1 = t.connect("n1", "h1", "job1", token("a"), 0, &err);
  REQUIRE(beat(t, comms, s0, report({proc(0, true, 0)}), 0));
  REQUIRE(beat(t, comms, s1, report({}), 0));
  std::vector<std::string> log;
  CHECK(t.mark_lost(5 * kSec - 1, &comms, &log).empty());
  CHECK(log.empty());
  // Both lost; only the one with a live rank is news.
  std::vector<const Node*> lost = t.mark_lost(5 * kSec, &comms, &log);
  REQUIRE(lost.size() == 1);
  CHECK(lost[0]->name == "n0");
  CHECK(log.size() == 2);
  CHECK(t.find("n0")->members.empty());                // it left its communicators
  CHECK(t.mark_lost(6 * kSec, &comms, &log).empty());  // once
  // A heartbeat finds it again.
  REQUIRE(beat(t, comms, s0, report({proc(0, true, 0)}), 7 * kSec));
  CHECK_FALSE(t.find("n0")->lost);
  // Forgotten: lost, disconnected, silent past forget_after and needed by nobody.
  t.disconnect(s1);
  auto needed = [](const std::string& node) { return node == "n0"; };
  CHECK(t.forget(30 * kSec, &comms, needed));
  CHECK(t.size() == 2);
  CHECK_FALSE(t.forget(30 * kSec + 1, &comms, needed));  // at most one walk a second
  CHECK(t.forget(61 * kSec, &comms, needed));
  CHECK(t.size() == 1);
  CHECK(t.nodes_forgotten() == 1);
  CHECK(t.find("n1") == nullptr);
}

TEST_CASE("node table: a job whose processes all ended says so, not that none started",
          "[daemon]") {
  CoordinatorConfig c = node_config();
  NodeTable t(c);
  CommTable comms(c);
  std::string err;
  uint64_t s = t.connect("n0", "h0", "job1", token("a"), 0, &err);
  REQUIRE(beat(t, comms, s, report({proc(0, false, 0), proc(1, false, 0)}), kSec));
  ProcessCounts pc = t.process_counts();
  CHECK(pc.total == 0);
  CHECK(pc.ended == 2);
  CHECK(pc.summary() ==
        "no live process under fr-run or with the agent loaded; 2 processes ended, their flight "
        "logs kept");
  REQUIRE(beat(t, comms, s, report({proc(0, true, 0), proc(1, false, 0)}), 2 * kSec));
  CHECK(t.process_counts().summary() ==
        "1 process under fr-run on 1 node; it records NCCL or NIXL calls");
}

TEST_CASE("node table: processes without a flight log are counted and their stall judged",
          "[daemon]") {
  CoordinatorConfig c = node_config();
  NodeTable t(c);
  CommTable comms(c);
  std::string err;
  uint64_t s = t.connect("n0", "h0", "job1", token("a"), 0, &err);
  CHECK(t.process_counts().summary() == "no process under fr-run or with the agent loaded yet");
  NodeReport r;
  for (int i = 0; i < 2; ++i) {
    UnrecordedProcess u;
    u.rank = i;
    u.pid = 200 + i;
    u.torch = true;
    u.torch_idle_ns = (40 + i) * kSec;
    r.unrecorded.push_back(u);
  }
  REQUIRE(beat(t, comms, s, r, kSec));
  ProcessCounts pc = t.process_counts();
  CHECK(pc.total == 2);
  CHECK(pc.recording == 0);
  CHECK(pc.torch == 2);
  CHECK(pc.nodes == 1);
  CHECK(t.unrecorded_stall(50 * kSec).empty());  // the least idle moved 40 s ago
  std::string why = t.unrecorded_stall(30 * kSec);
  CHECK(why.find("no progress in torch's process groups for 40 s (--stall-after 30 s)") == 0);
  // One process that records: the job is not judged this way.
  r.processes.push_back(proc(0, true, 0));
  REQUIRE(beat(t, comms, s, r, 2 * kSec));
  CHECK(t.unrecorded_stall(30 * kSec).empty());
}

TEST_CASE("node table: an op at its threshold is stalled, none in flight is not", "[daemon]") {
  OldestOp o;
  CHECK_FALSE(o.stalled());  // nothing in flight, threshold 0
  o.age_ns = 2 * kSec;
  o.threshold_ns = 2 * kSec;
  CHECK(o.stalled());
  o.age_ns = 2 * kSec - 1;
  CHECK_FALSE(o.stalled());
}
