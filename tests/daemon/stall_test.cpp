// Adaptive stall detection without sockets: the latency histogram, what one member's heartbeats
// teach (latency lower bounds, gap, waiting), the threshold max(floor, k x p99) capped, and the
// coordinator's state machine under --stall-after auto: detection at the learned threshold, no
// incident for a slow communicator or a pause, and a slow rank reported as a finding.
#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>

#include "daemon/logic/coordinator.h"
#include "daemon/logic/stall.h"
#include "fixture.h"
#include "testing/clock.h"

using namespace fr::daemon;
using fr::daemon::test::TempDir;
using fr::test::kMs;
using fr::test::kSec;

namespace {

StallPolicy auto_policy() {
  StallPolicy p;
  p.automatic = true;
  return p;
}

// Teaches a model `n` ops that were each seen in flight at `age` and done at the next heartbeat.
void teach(CommModel& m, int n, int64_t age) {
  MemberTrack t = observe(m, nullptr, 1, 0, 7, 0, 0, 0, 0);
  uint64_t done = 0;
  int64_t now = 0;
  for (int i = 0; i < n; ++i) {
    now += kSec;
    t = observe(m, &t, 1, 0, 7, done + 1, age, done, now);  // op done+1 in flight
    now += kSec;
    ++done;
    t = observe(m, &t, 1, 0, 7, 0, 0, done, now);  // and done
  }
}

struct Ranks {
  // One process per rank on one communicator; age 0: nothing in flight.
  static ProcessReport proc(int rank, uint64_t completed, int64_t age, uint64_t comm = 0x42) {
    ProcessReport p;
    p.log = "rank" + std::to_string(rank) + ".frlog";
    p.rank = rank;
    p.world_size = 4;
    p.pid = 100 + rank;
    p.alive = true;
    p.job_id = "job1";
    CommProgress c;
    c.comm_id = comm;
    c.size = 4;
    c.rank = rank;
    c.completed = completed;
    c.enqueued = completed + (age ? 1 : 0);
    c.oldest_age_ns = age;
    c.oldest_seq = age ? completed + 1 : 0;
    c.oldest_op = age ? FR_OP_ALLREDUCE : 0;
    c.name = "dp0";
    p.comms.push_back(c);
    return p;
  }
};

CoordinatorConfig auto_config(const std::string& dir) {
  CoordinatorConfig c;
  c.dump_dir = dir;
  c.job_id = "job1";
  c.stall_auto = true;
  c.heartbeat_timeout_ns = 3600 * kSec;
  c.dump_deadline_ns = 10 * kSec;
  return c;
}

size_t stall_incidents(const CoordinatorState& st) {
  size_t n = 0;
  for (const auto& i : st.incidents()) n += i.kind == IncidentKind::kStall;
  return n;
}

// A node with four ranks heartbeating once a second: every op completes within the second and
// was seen in flight at `age`. Returns the time after `seconds` heartbeats.
int64_t healthy(CoordinatorState& st, uint64_t s, int64_t now, int seconds, uint64_t* done,
                int64_t age) {
  for (int i = 0; i < seconds; ++i) {
    now += kSec;
    ++*done;
    std::vector<ProcessReport> ps;
    for (int r = 0; r < 4; ++r) ps.push_back(Ranks::proc(r, *done, (i + r) % 2 ? age : 0));
    NodeReport rep;
    rep.processes = ps;
    REQUIRE(st.heartbeat(s, rep, now));
    st.tick(now);
  }
  return now;
}

}  // namespace

TEST_CASE("the latency histogram gives quantiles as bucket edges and forgets slowly", "[daemon]") {
  LatencyHistogram h;
  CHECK(h.quantile(0.99) == 0);
  for (int i = 0; i < 1000; ++i) h.add(100 * kMs);
  int64_t p99 = h.quantile(0.99);
  CHECK(p99 >= 100 * kMs);
  CHECK(p99 <= 142 * kMs);  // within one bucket (two to an octave)
  h.add(10 * kSec);         // one outlier in a thousand is not the p99 ...
  CHECK(h.quantile(0.99) == p99);
  for (int i = 0; i < 30; ++i) h.add(10 * kSec);  // ... three percent are
  CHECK(h.quantile(0.99) >= 10 * kSec);
  // Older counts decay: enough new fast ops push the slow ones out of the p99.
  for (int i = 0; i < 20000; ++i) h.add(100 * kMs);
  CHECK(h.quantile(0.99) == p99);
  // Out of range values land in the end buckets.
  LatencyHistogram e;
  e.add(-5);
  e.add(int64_t(1) << 62);
  CHECK(e.quantile(0.5) == 1 * kMs);
  CHECK(e.quantile(1.0) > 3600 * kSec);
}

TEST_CASE("the threshold is max(floor, k x p99), capped, and the cap until learned", "[daemon]") {
  StallPolicy fixed;
  fixed.fixed_ns = 7 * kSec;
  CommModel m;
  CHECK(m.threshold_ns(fixed) == 7 * kSec);
  CHECK(unlearned_threshold_ns(fixed) == 7 * kSec);

  StallPolicy p = auto_policy();
  CHECK(unlearned_threshold_ns(p) == 30 * kSec);
  CHECK(m.threshold_ns(p) == 30 * kSec);  // nothing learned yet
  teach(m, int(p.warmup) - 1, 100 * kMs);
  CHECK_FALSE(m.warm(p));
  CHECK(m.threshold_ns(p) == 30 * kSec);
  teach(m, 1, 100 * kMs);
  CHECK(m.warm(p));
  CHECK(m.threshold_ns(p) == 3 * kSec);  // 5 x 0.14 s is under the floor

  CommModel slow;
  teach(slow, 50, 2 * kSec);
  int64_t t = slow.threshold_ns(p);
  CHECK(t >= 10 * kSec);  // 5 x p99, p99 >= 2 s
  CHECK(t <= 15 * kSec);
  CommModel very_slow;
  teach(very_slow, 50, 20 * kSec);
  CHECK(very_slow.threshold_ns(p) == 30 * kSec);
  p.factor = 2;
  CHECK(slow.threshold_ns(p) < t);
}

TEST_CASE("the threshold is max(floor, k x p99) over a spread of latencies, not their median",
          "[daemon]") {
  // Nine ops in ten take 100 ms, one in ten takes 2 s: the p99 is the slow ones' bucket (2 s to
  // 2.05 s), the median the fast ones' (100 ms to 128 ms). A wide policy, so that neither the
  // floor nor the cap decides: 5 x p99 is 10 s to 10.3 s, where 5 x the median would be under 1 s.
  StallPolicy p = auto_policy();
  p.floor_ns = 1 * kMs;
  p.cap_ns = 3600 * kSec;
  CommModel m;
  for (int i = 0; i < 10; ++i) {
    teach(m, 9, 100 * kMs);
    teach(m, 1, 2 * kSec);
  }
  REQUIRE(m.warm(p));
  CHECK(m.latency.quantile(0.5) <= 128 * kMs);
  CHECK(m.latency.quantile(0.99) >= 2 * kSec);
  CHECK(m.threshold_ns(p) >= 10 * kSec);
  CHECK(m.threshold_ns(p) <= 11 * kSec);
}

TEST_CASE("learned thresholds keep their units from milliseconds to minutes", "[daemon]") {
  // A wide policy, so that neither the floor nor the cap decides: what is learned does. Ops that
  // take 40 s give a threshold of 5 x their p99 (200 s to 283 s: the p99 is a bucket's upper
  // edge, two buckets to an octave); ops of 2 ms give 10 ms to 15 ms. A unit slip anywhere between
  // nanoseconds and the buckets (a microsecond taken for a millisecond) moves these by a factor
  // of a thousand, or pins them to the buckets' ends.
  StallPolicy p = auto_policy();
  p.floor_ns = 1 * kMs;
  p.cap_ns = 3600 * kSec;
  CommModel slow;
  teach(slow, 50, 40 * kSec);
  CHECK(slow.threshold_ns(p) >= 200 * kSec);
  CHECK(slow.threshold_ns(p) <= 283 * kSec);
  CommModel fast;
  teach(fast, 50, 2 * kMs);
  CHECK(fast.threshold_ns(p) >= 10 * kMs);
  CHECK(fast.threshold_ns(p) <= 15 * kMs);
  // The floor and the cap in their own units.
  p.floor_ns = 90 * kSec;
  CHECK(fast.threshold_ns(p) == 90 * kSec);
  p.cap_ns = 120 * kSec;
  CHECK(slow.threshold_ns(p) == 120 * kSec);
}

TEST_CASE("a member teaches lower bounds of finished ops, the gap and its waiting", "[daemon]") {
  CommModel m;
  MemberTrack t = observe(m, nullptr, 9, 3, 7, 11, 400 * kMs, 10, 1 * kSec);
  CHECK(m.latency.count() == 0);
  CHECK(t.waiting == 1.0f);
  CHECK(m.waiting_members == 1);
  // Still the same op, older: nothing learned (a stall never raises its own threshold).
  t = observe(m, &t, 9, 3, 7, 11, 1400 * kMs, 10, 2 * kSec);
  CHECK(m.latency.count() == 0);
  CHECK(m.progress == 0);
  // Done, and ten more ops completed over the second: 1.4 s learned, a gap of 0.1 s.
  t = observe(m, &t, 9, 3, 7, 0, 0, 20, 3 * kSec);
  CHECK(m.latency.count() == 1);
  CHECK(m.latency.quantile(1) >= 1400 * kMs);
  CHECK(m.progress == 1);
  CHECK(m.gap_ns == 100 * kMs);
  CHECK(t.waiting < 1.0f);
  CHECK(m.waiting_sum == Approx(double(t.waiting)));
  // Another op is the oldest now: the one seen before is done.
  t = observe(m, &t, 9, 3, 7, 25, 50 * kMs, 24, 4 * kSec);
  t = observe(m, &t, 9, 3, 7, 30, 80 * kMs, 29, 5 * kSec);
  CHECK(m.latency.count() == 2);
  leave(m, t);
  CHECK(m.waiting_members == 0);
  CHECK(m.waiting_sum == 0);
}

TEST_CASE("auto: a stall opens at the floor once learned, never before the cap when not",
          "[daemon]") {
  TempDir dir;
  CoordinatorState st(auto_config(dir.path));
  std::string err;
  uint64_t s = st.connect("n1", "h1", "job1", 0, &err);
  REQUIRE(s);
  uint64_t done = 0;

  SECTION("unlearned: an early stall waits for the cap") {
    int64_t now = kSec;
    NodeReport rep;
    rep.processes = {Ranks::proc(0, 0, 29 * kSec)};
    REQUIRE(st.heartbeat(s, rep, now));
    st.tick(now);
    CHECK(stall_incidents(st) == 0);
    CHECK(st.stall_threshold_ns(0x42) == 30 * kSec);
    rep.processes = {Ranks::proc(0, 0, 30 * kSec)};
    REQUIRE(st.heartbeat(s, rep, now + kSec));
    Actions a = st.tick(now + kSec);
    REQUIRE(stall_incidents(st) == 1);
    CHECK(st.incidents()[0].reason.find("not learned yet") != std::string::npos);
  }

  SECTION("learned from 100 ms ops: the floor, and the stalled op does not move it") {
    int64_t now = healthy(st, s, 0, 12, &done, 100 * kMs);
    REQUIRE(st.comm_model(0x42));
    CHECK(st.comm_model(0x42)->warm(st.stall_policy()));
    CHECK(st.stall_threshold_ns(0x42) == 3 * kSec);
    CHECK(st.comm_model(0x42)->gap_ns == kSec);
    // Every member is found again at each heartbeat: 4 ranks x 11 heartbeats after the first.
    CHECK(st.comm_model(0x42)->progress == 44);
    CHECK(st.comm_model(0x42)->waiting_members == 4);
    // Rank 2 hangs on the host: the others wait in the next op, older at every heartbeat.
    for (int64_t age = 500 * kMs; age < 3 * kSec; age += 500 * kMs) {
      now += 500 * kMs;
      NodeReport rep;
      for (int r = 0; r < 4; ++r) rep.processes.push_back(Ranks::proc(r, done, r == 2 ? 0 : age));
      REQUIRE(st.heartbeat(s, rep, now));
      st.tick(now);
      CHECK(stall_incidents(st) == 0);
      CHECK(st.stall_threshold_ns(0x42) == 3 * kSec);
    }
    now += 500 * kMs;
    NodeReport rep;
    for (int r = 0; r < 4; ++r)
      rep.processes.push_back(Ranks::proc(r, done, r == 2 ? 0 : 3 * kSec));
    REQUIRE(st.heartbeat(s, rep, now));
    Actions a = st.tick(now);
    REQUIRE(stall_incidents(st) == 1);
    CHECK(a.dumps.size() == 1);
    CHECK(st.incidents()[0].reason.find("learned p99") != std::string::npos);
  }

  SECTION("learned from 2 s ops: a 5 s op is normal, the learned threshold opens") {
    int64_t now = healthy(st, s, 0, 30, &done, 2 * kSec);
    int64_t t = st.stall_threshold_ns(0x42);
    CHECK(t >= 10 * kSec);
    CHECK(t <= 15 * kSec);
    NodeReport rep;
    rep.processes = {Ranks::proc(0, done, 5 * kSec)};
    REQUIRE(st.heartbeat(s, rep, now + kSec));
    st.tick(now + kSec);
    CHECK(stall_incidents(st) == 0);
    rep.processes = {Ranks::proc(0, done, t)};
    REQUIRE(st.heartbeat(s, rep, now + 2 * kSec));
    st.tick(now + 2 * kSec);
    CHECK(stall_incidents(st) == 1);
  }

  SECTION("a pause with nothing in flight opens nothing") {
    int64_t now = healthy(st, s, 0, 12, &done, 100 * kMs);
    for (int i = 0; i < 10; ++i) {
      now += kSec;
      NodeReport rep;
      for (int r = 0; r < 4; ++r) rep.processes.push_back(Ranks::proc(r, done, 0));
      REQUIRE(st.heartbeat(s, rep, now));
      st.tick(now);
    }
    now = healthy(st, s, now, 5, &done, 100 * kMs);
    CHECK(st.incidents().empty());
    CHECK(st.findings().empty());
  }
}

TEST_CASE("auto: the nodes are told the floor, a fixed threshold stays as it was", "[daemon]") {
  TempDir dir;
  CoordinatorConfig c = auto_config(dir.path);
  CHECK(CoordinatorState(c).stall_policy().report_at_once_ns() == 3 * kSec);
  c.stall_auto = false;
  c.stall_after_ns = 2 * kSec;
  CoordinatorState st(c);
  CHECK(st.stall_policy().report_at_once_ns() == 2 * kSec);
  std::string err;
  uint64_t s = st.connect("n1", "h1", "job1", 0, &err);
  uint64_t done = 0;
  int64_t now = healthy(st, s, 0, 12, &done, 100 * kMs);
  CHECK(st.stall_threshold_ns(0x42) == 2 * kSec);
  NodeReport rep;
  rep.processes = {Ranks::proc(0, done, 2 * kSec)};
  REQUIRE(st.heartbeat(s, rep, now + kSec));
  st.tick(now + kSec);
  CHECK(stall_incidents(st) == 1);
  CHECK(st.incidents()[0].reason.find("threshold") == std::string::npos);
  CHECK(st.status(now).at("stall").at("mode") == "fixed");
}

TEST_CASE("a rank its peers keep waiting for is a slow-rank finding, not a hang", "[daemon]") {
  TempDir dir;
  CoordinatorState st(auto_config(dir.path));
  std::string err;
  // Two nodes, so that peers are compared across nodes.
  uint64_t s1 = st.connect("n1", "h1", "job1", 0, &err);
  uint64_t s2 = st.connect("n2", "h2", "job1", 0, &err);
  uint64_t done = 0;
  int64_t now = 0;
  std::string findings_file;
  std::vector<std::string> logs;
  for (int i = 0; i < 40; ++i) {
    now += kSec;
    done += 3;
    // Ranks 0, 1, 2 wait up to 0.8 s in every step; rank 3 computes and rarely has an op out.
    NodeReport a, b;
    a.processes = {Ranks::proc(0, done, 800 * kMs), Ranks::proc(1, done, 600 * kMs)};
    b.processes = {Ranks::proc(2, done, 700 * kMs),
                   Ranks::proc(3, done, i % 10 == 5 ? 5 * kMs : 0)};
    REQUIRE(st.heartbeat(s1, a, now));
    REQUIRE(st.heartbeat(s2, b, now + 100 * kMs));
    Actions act = st.tick(now + 100 * kMs);
    for (auto& [path, text] : act.persist)
      if (path.size() >= 13 && path.substr(path.size() - 13) == "findings.json")
        findings_file = text;
    for (auto& l : act.log) logs.push_back(l);
    // Judged from 15 heartbeats on, reported only once it held for 10 in a row.
    if (i == 20) CHECK(st.findings().empty());
  }
  CHECK(st.incidents().empty());
  REQUIRE(st.findings().size() == 1);
  const Finding& f = st.findings()[0];
  CHECK(f.kind == "slow_rank");
  CHECK(f.rank == 3);
  CHECK(f.node == "n2");
  CHECK(f.active);
  CHECK(f.peers_waiting > 0.9);
  CHECK(f.rank_waiting < 0.2);
  REQUIRE_FALSE(findings_file.empty());
  auto j = nlohmann::json::parse(findings_file);
  CHECK(j.at("schema") == "frd-findings/1");
  CHECK(j.at("findings").at(0).at("rank") == 3);
  bool logged = false;
  for (const auto& l : logs) logged |= l.find("slow rank 3") != std::string::npos;
  CHECK(logged);
  CHECK(st.status(now).at("findings").size() == 1);
  CHECK(st.metrics(now).find("frd_slow_ranks 1") != std::string::npos);

  // Once it keeps up again, the finding turns inactive.
  for (int i = 0; i < 60; ++i) {
    now += kSec;
    done += 3;
    NodeReport a, b;
    a.processes = {Ranks::proc(0, done, i % 2 ? 10 * kMs : 0),
                   Ranks::proc(1, done, i % 2 ? 0 : 10 * kMs)};
    b.processes = {Ranks::proc(2, done, i % 2 ? 10 * kMs : 0),
                   Ranks::proc(3, done, i % 2 ? 0 : 10 * kMs)};
    REQUIRE(st.heartbeat(s1, a, now));
    REQUIRE(st.heartbeat(s2, b, now));
    st.tick(now);
  }
  CHECK_FALSE(st.findings()[0].active);
  CHECK(st.incidents().empty());
}

TEST_CASE("a healthy symmetric job gives no slow-rank finding", "[daemon]") {
  TempDir dir;
  CoordinatorState st(auto_config(dir.path));
  std::string err;
  uint64_t s = st.connect("n1", "h1", "job1", 0, &err);
  uint64_t done = 0;
  int64_t now = 0;
  for (int i = 0; i < 120; ++i) {
    now += kSec;
    done += 5;
    NodeReport rep;
    // Everyone waits at most heartbeats, in turn a little less.
    for (int r = 0; r < 4; ++r)
      rep.processes.push_back(Ranks::proc(r, done, (i + r) % 4 ? 300 * kMs : 0));
    REQUIRE(st.heartbeat(s, rep, now));
    st.tick(now);
  }
  CHECK(st.findings().empty());
  CHECK(st.incidents().empty());
}

TEST_CASE("learning is bounded: communicators past the bound keep the cap", "[daemon]") {
  TempDir dir;
  CoordinatorConfig c = auto_config(dir.path);
  c.max_comm_models = 2;
  c.max_members_per_node = 3;
  c.heartbeat_timeout_ns = 5 * kSec;
  CoordinatorState st(c);
  std::string err;
  uint64_t s = st.connect("n1", "h1", "job1", 0, &err);
  NodeReport rep;
  for (uint64_t comm = 1; comm <= 5; ++comm)
    rep.processes.push_back(Ranks::proc(int(comm), 1, 0, comm));
  REQUIRE(st.heartbeat(s, rep, kSec));
  CHECK(st.comm_model(1));
  CHECK(st.comm_model(2));
  CHECK_FALSE(st.comm_model(3));
  CHECK(st.stall_threshold_ns(3) == 30 * kSec);
  CHECK(st.status(kSec).at("stall").at("learned_communicators") == 2);
  // A node that is lost gives its members back; its communicators are forgotten in time.
  st.disconnect(s, 2 * kSec);
  st.tick(c.heartbeat_timeout_ns + 2 * kSec);
  REQUIRE(st.comm_model(1));
  CHECK(st.comm_model(1)->waiting_members == 0);
  st.tick(c.forget_after_ns + 2 * kSec);
  CHECK_FALSE(st.comm_model(1));
}
