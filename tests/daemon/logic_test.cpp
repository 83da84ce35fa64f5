// The daemon's protocol-free logic, without sockets: checksums, names, clock offsets, the log
// watcher, the coordinator's state machine (detection, one incident per hang, deadlines, transient
// closing, uploads) and dump assembly.
#include <catch2/catch.hpp>

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "daemon/assembly.h"
#include "files/files.h"
#include "daemon/clock.h"
#include "daemon/coordinator.h"
#include "daemon/crc32c.h"
#include "daemon/names.h"
#include "daemon/watcher.h"
#include "fixture.h"

using namespace fr::daemon;
using fr::daemon::test::FakeLog;
using fr::daemon::test::FakeOp;
using fr::daemon::test::TempDir;
using fr::daemon::test::config;
using fr::daemon::test::slurp;

namespace {

constexpr int64_t kSec = 1'000'000'000;

bool exists(const std::string& p) {
  struct stat st;
  return stat(p.c_str(), &st) == 0;
}

ProcessReport proc(int rank, bool alive, int64_t oldest_age_ns, uint64_t completed = 10,
                   bool clean = false) {
  ProcessReport p;
  p.log = "rank" + std::to_string(rank) + ".frlog";
  p.rank = rank;
  p.world_size = 4;
  p.pid = 100 + rank;
  p.alive = alive;
  p.exited_cleanly = clean;
  p.job_id = "job1";
  CommProgress c;
  c.comm_id = 0x42;
  c.size = 4;
  c.rank = rank;
  c.enqueued = completed + (oldest_age_ns ? 1 : 0);
  c.completed = completed;
  c.oldest_age_ns = oldest_age_ns;
  if (oldest_age_ns) {
    c.oldest_op = FR_OP_ALLREDUCE;
    c.oldest_seq = completed + 1;
  }
  c.name = "dp0";
  p.comms.push_back(c);
  return p;
}

NodeReport report(std::vector<ProcessReport> ps) {
  NodeReport r;
  r.processes = std::move(ps);
  return r;
}

DumpHeader header(const std::string& incident, const std::string& node) {
  DumpHeader h;
  h.incident_id = incident;
  h.node_name = node;
  return h;
}

}  // namespace

TEST_CASE("crc32c matches the standard check value", "[daemon]") {
  const char* s = "123456789";
  CHECK(crc32c(0, s, 9) == 0xE3069283u);
  // Incremental equals one shot.
  CHECK(crc32c(crc32c(0, s, 4), s + 4, 5) == 0xE3069283u);
}

TEST_CASE("peer names are made safe path components", "[daemon]") {
  CHECK(sanitize_name("node-7.a_b") == "node-7.a_b");
  for (std::string bad : std::vector<std::string>{"../../etc", "..", ".", "", "a/b", std::string("x\0y", 3), "\n"}) {
    std::string s = sanitize_name(bad);
    INFO(s);
    CHECK(!s.empty());
    CHECK(s[0] != '.');
    CHECK(s.find('/') == std::string::npos);
    CHECK(is_safe_name(s));
  }
  CHECK(sanitize_name(std::string(500, 'a')).size() == kMaxNameLen);
  CHECK_FALSE(is_safe_name("../x"));
  CHECK_FALSE(is_safe_name(".hidden"));
  CHECK(printable("a\x01" "b") == "a?b");
  CHECK(equal_secret("token", "token"));
  CHECK_FALSE(equal_secret("token", "tokem"));
  CHECK_FALSE(equal_secret("token", "token2"));
}

TEST_CASE("clock offsets come from the round trip with the least delay", "[daemon]") {
  ClockEstimator c;
  CHECK_FALSE(c.has_offset());
  // Node 5 ms ahead, 2 ms each way.
  const int64_t ms = 1'000'000, ahead = 5 * ms;
  CHECK(c.add(1000 * ms, 1000 * ms + 2 * ms + ahead, 1000 * ms + 3 * ms + ahead, 1000 * ms + 5 * ms));
  CHECK(c.offset_ns() == -ahead);
  CHECK(c.delay_ns() == 4 * ms);
  // A sample with a long asymmetric delay does not win.
  CHECK(c.add(2000 * ms, 2000 * ms + 40 * ms + ahead, 2000 * ms + 41 * ms + ahead, 2000 * ms + 43 * ms));
  CHECK(c.offset_ns() == -ahead);
  // Impossible samples are refused.
  CHECK_FALSE(c.add(10, 5, 4, 20));
  CHECK_FALSE(c.add(10, 5, 6, 9));
}

TEST_CASE("a log is reduced to progress and the oldest op in flight", "[daemon]") {
  FakeLog f;
  f.ops = {{FR_OP_ALLREDUCE, 1, 1, 5 * kSec, true, false},
           {FR_OP_ALLREDUCE, 2, 2, 3 * kSec, false, false},
           {FR_OP_ALLREDUCE, 3, 3, 1 * kSec, false, false}};
  auto log = fr::daemon::test::make_log(f);
  ProcessReport p = summarize_log(log, "a.frlog", real_ns());
  CHECK(p.rank == 0);
  CHECK(p.alive);
  REQUIRE(p.comms.size() == 1);
  CHECK(p.comms[0].enqueued == 3);
  CHECK(p.comms[0].completed == 1);
  CHECK(p.comms[0].oldest_seq == 2);
  CHECK(p.comms[0].oldest_age_ns >= 3 * kSec - kSec / 10);
  CHECK(p.comms[0].oldest_age_ns < 4 * kSec);

  SECTION("nothing in flight when every op completed") {
    f.ops = {{FR_OP_ALLREDUCE, 1, 1, 5 * kSec, true, false}};
    CHECK(summarize_log(fr::daemon::test::make_log(f), "a", real_ns()).oldest_age_ns() == 0);
  }
  SECTION("without GPU tracking only a host call still running counts") {
    f.flags = FR_LOG_F_NO_GPU_TRACKING;
    f.ops = {{FR_OP_ALLREDUCE, 1, 1, 5 * kSec, false, false}};
    CHECK(summarize_log(fr::daemon::test::make_log(f), "a", real_ns()).oldest_age_ns() == 0);
    f.ops = {{FR_OP_ALLREDUCE, 1, 1, 5 * kSec, false, true}};
    CHECK(summarize_log(fr::daemon::test::make_log(f), "a", real_ns()).oldest_age_ns() > 4 * kSec);
  }
  SECTION("a shrink or grow still in the call is in flight; one that returned is not") {
    for (uint16_t op : {uint16_t(FR_OP_COMM_SHRINK), uint16_t(FR_OP_COMM_GROW)}) {
      f.ops = {{op, 0, 0, 5 * kSec, false, true}};
      ProcessReport r = summarize_log(fr::daemon::test::make_log(f), "a", real_ns());
      CHECK(r.oldest_age_ns() > 4 * kSec);
      CHECK(r.comms[0].oldest_op == op);
      f.ops = {{op, 0, 0, 5 * kSec, true, false}};
      CHECK(summarize_log(fr::daemon::test::make_log(f), "a", real_ns()).oldest_age_ns() == 0);
    }
    f.ops = {{FR_OP_COMM_SPLIT, 0, 0, 5 * kSec, false, true}};  // other creations: not watched
    CHECK(summarize_log(fr::daemon::test::make_log(f), "a", real_ns()).oldest_age_ns() == 0);
  }
  SECTION("a dead writer with its communicators destroyed exited cleanly") {
    f.alive = false;
    f.comm_state = FR_COMM_DESTROYED;
    CHECK(summarize_log(fr::daemon::test::make_log(f), "a", real_ns()).exited_cleanly);
    f.comm_state = FR_COMM_LIVE;
    CHECK_FALSE(summarize_log(fr::daemon::test::make_log(f), "a", real_ns()).exited_cleanly);
  }
}

TEST_CASE("the watcher reports deaths and new stalls at once", "[daemon]") {
  TempDir dir;
  FakeLog a;
  a.ops = {{FR_OP_ALLREDUCE, 1, 1, kSec / 2, false, false}};
  fr::daemon::test::write_log(dir.path, "r0.frlog", a);
  {
    std::ofstream junk(dir.path + "/junk.frlog");
    junk << "not a flight log";
  }
  LogWatcher w(dir.path, 2 * kSec);
  ScanResult s = w.scan();
  CHECK(s.processes.size() == 1);
  CHECK(s.unreadable.size() == 1);
  CHECK_FALSE(s.urgent);
  CHECK_FALSE(w.scan().urgent);

  a.ops = {{FR_OP_ALLREDUCE, 1, 1, 3 * kSec, false, false}};
  fr::daemon::test::write_log(dir.path, "r0.frlog", a);
  CHECK(w.scan().urgent);   // crossed the stall threshold
  CHECK_FALSE(w.scan().urgent);

  a.alive = false;
  fr::daemon::test::write_log(dir.path, "r0.frlog", a);
  CHECK(w.scan().urgent);   // died

  SECTION("the job filter hides other jobs' logs") {
    w.set_job_filter("other");
    CHECK(w.scan().processes.empty());
  }
}

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
                {proc(2, true, 3 * kSec, 11), proc(3, true, 0, 11)}, 4 * kSec) ==
        IncidentState::kOpen);
  // Nothing is past the threshold, but the triggering communicator has not moved: still open.
  CHECK(o.after({proc(0, true, kSec / 10, 10), proc(1, true, 0, 10)},
                {proc(2, true, 0, 10), proc(3, true, 0, 10)}, 5 * kSec) == IncidentState::kOpen);
  // It moved, nothing is stalled, but a rank died uncleanly meanwhile: still open.
  CHECK(o.after({proc(0, true, 0, 11), proc(1, false, 0, 11)},
                {proc(2, true, 0, 11), proc(3, true, 0, 11)}, 6 * kSec) == IncidentState::kOpen);
  // Moved, nothing stalled, everyone alive: transient.
  CHECK(o.after({proc(0, true, 0, 12), proc(1, true, 0, 12)},
                {proc(2, true, 0, 12), proc(3, true, 0, 12)}, 7 * kSec) ==
        IncidentState::kClosedTransient);
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
                {proc(2, false, 0, 10, true), proc(3, false, 0, 10, true)}, 21 * kSec) ==
        IncidentState::kClosed);
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

TEST_CASE("a dump written into the incident's directory is checked file by file", "[daemon]") {
  TempDir dir, outside;
  std::string err;
  std::string target = dir.path + "/job1/incident-0001";
  REQUIRE(fr::files::make_dirs(target, &err));
  std::string bytes(5000, 'q');
  uint32_t crc = crc32c(0, bytes.data(), bytes.size());
  DumpHeader h = header("incident-0001", "n0");
  h.files.push_back({"n0-a.frlog", bytes.size(), crc});
  UploadLimits lim;
  // Not there yet.
  CHECK(check_placed(target, h, lim, &err) == PlacedCheck::kMismatch);
  std::ofstream(target + "/n0-a.frlog", std::ios::binary) << bytes;
  CHECK(check_placed(target, h, lim, &err) == PlacedCheck::kOk);
  // Other contents of the same size.
  std::ofstream(target + "/n0-a.frlog", std::ios::binary) << std::string(5000, 'r');
  CHECK(check_placed(target, h, lim, &err) == PlacedCheck::kMismatch);
  CHECK(err.find("checksum") != std::string::npos);
  // A link to the right bytes elsewhere is not a placed file.
  ::unlink((target + "/n0-a.frlog").c_str());
  std::ofstream(outside.path + "/real.frlog", std::ios::binary) << bytes;
  REQUIRE(::symlink((outside.path + "/real.frlog").c_str(), (target + "/n0-a.frlog").c_str()) == 0);
  CHECK(check_placed(target, h, lim, &err) == PlacedCheck::kMismatch);
  // A FIFO does not block the check.
  ::unlink((target + "/n0-a.frlog").c_str());
  REQUIRE(::mkfifo((target + "/n0-a.frlog").c_str(), 0644) == 0);
  CHECK(check_placed(target, h, lim, &err) == PlacedCheck::kMismatch);
  // Names outside the directory, or not dump files, are refused outright.
  h.files[0].name = "../real.frlog";
  CHECK(check_placed(target, h, lim, &err) == PlacedCheck::kBadHeader);
  h.files[0].name = "n0-a.txt";
  CHECK(check_placed(target, h, lim, &err) == PlacedCheck::kBadHeader);
  h.files[0].name = "n0-a.frlog";
  h.files[0].size = lim.max_file_bytes + 1;
  CHECK(check_placed(target, h, lim, &err) == PlacedCheck::kBadHeader);
}

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
  CHECK(js["nodes"][0]["gpu_alerts"] == nlohmann::json::array({"GPU 0000:3b:00.0 reported Xid 79"}));
  CHECK(js["ranks"]["alive"] == 1);
  CHECK(js["ranks"]["dead"] == 1);
  CHECK(js["nodes"][0]["name"] == "n0");
  std::string m = st.metrics(kSec);
  CHECK(m.find("frd_nodes{state=\"connected\"} 1") != std::string::npos);
  CHECK(m.find("frd_ranks{state=\"alive\"} 1") != std::string::npos);
  CHECK(m.find("frd_incidents_total{kind=\"stall\"} 0") != std::string::npos);
}

TEST_CASE("a dump's stacks and GPU health files pass the header check; other names do not", "[daemon]") {
  UploadLimits lim;
  std::string err;
  DumpHeader h = header("incident-0001", "n0");
  h.files.push_back({"n0-rank0.h.1.frlog", 10, 0});
  h.files.push_back({"n0-rank0.h.1.frlog.stacks.json", 10, 0});
  h.files.push_back({"n0.gpu.json", 10, 0});
  CHECK(check_dump_header(h, lim, &err));
  h.files.push_back({"n0-notes.txt", 10, 0});
  CHECK_FALSE(check_dump_header(h, lim, &err));
  CHECK(err == "refused file name 'n0-notes.txt'");
}

TEST_CASE("a dump is received whole and verified, or not at all", "[daemon]") {
  TempDir dir;
  std::string target = dir.path + "/job1/incident-0001";
  std::string data(3000, 'x');
  DumpHeader h = header("incident-0001", "n0");
  h.files.push_back({"n0-rank0.h.1.frlog", data.size(), crc32c(0, data.data(), data.size())});
  UploadLimits lim;
  std::string err;

  SECTION("good upload") {
    DumpReceiver r;
    REQUIRE(r.begin(target, h, lim, &err));
    REQUIRE(r.write(0, 0, data.data(), 1000, &err));
    REQUIRE(r.write(0, 1000, data.data() + 1000, 2000, &err));
    REQUIRE(r.finish(&err));
    CHECK(slurp(target + "/n0-rank0.h.1.frlog") == data);
  }
  SECTION("checksum mismatch leaves nothing") {
    DumpReceiver r;
    REQUIRE(r.begin(target, h, lim, &err));
    std::string bad = data;
    bad[5] = 'y';
    REQUIRE(r.write(0, 0, bad.data(), bad.size(), &err));
    CHECK_FALSE(r.finish(&err));
    CHECK(err.find("checksum") != std::string::npos);
    r.abort();
    CHECK_FALSE(exists(target + "/n0-rank0.h.1.frlog"));
  }
  SECTION("out of order, out of bounds, unknown file") {
    DumpReceiver r;
    REQUIRE(r.begin(target, h, lim, &err));
    CHECK_FALSE(r.write(0, 10, data.data(), 10, &err));
    CHECK_FALSE(r.write(0, 0, data.data(), 4000, &err));
    CHECK_FALSE(r.write(3, 0, data.data(), 10, &err));
  }
  SECTION("hostile names and sizes are refused before anything is written") {
    for (std::string name : {"../escape.frlog", "/abs.frlog", "manifest.json", ".hidden.frlog"}) {
      DumpHeader bad = h;
      bad.files[0].name = name;
      DumpReceiver r;
      CHECK_FALSE(r.begin(target, bad, lim, &err));
    }
    DumpHeader big = h;
    big.files[0].size = lim.max_file_bytes + 1;
    DumpReceiver r1;
    CHECK_FALSE(r1.begin(target, big, lim, &err));
    DumpHeader twice = h;
    twice.files.push_back(h.files[0]);
    DumpReceiver r2;
    CHECK_FALSE(r2.begin(target, twice, lim, &err));
    DumpHeader stray = h;
    stray.processes.push_back({0, 1, 1, "h", "j", "../../etc/passwd", "", true, 0, 0, 0});
    DumpReceiver r3;
    CHECK_FALSE(r3.begin(target, stray, lim, &err));
    CHECK_FALSE(exists(dir.path + "/escape.frlog"));
  }
  SECTION("an abandoned upload leaves no staging behind") {
    {
      DumpReceiver r;
      REQUIRE(r.begin(target, h, lim, &err));
      REQUIRE(r.write(0, 0, data.data(), 100, &err));
    }
    std::string listing;
    for (auto* d = opendir(target.c_str()); d;) {
      while (auto* e = readdir(d)) listing += std::string(e->d_name) + " ";
      closedir(d);
      break;
    }
    CHECK(listing.find(".upload") == std::string::npos);
  }
}

TEST_CASE("assembly writes manifest, report and analysis last", "[daemon]") {
  TempDir dir;
  AssemblyJob j;
  j.incident_id = "incident-0001";
  j.dir = dir.path + "/job1/incident-0001";
  j.job_id = "job1";
  j.kind = "manual";
  j.time_ns = real_ns();
  j.expected_ranks = 2;
  j.nodes.push_back({"n0", -1500, true});
  j.incident = {{"id", j.incident_id}};
  // One real dump file in the set.
  FakeLog f;
  f.ops = {{FR_OP_ALLREDUCE, 1, 1, kSec, false, false}};
  std::string err;
  REQUIRE(fr::files::make_dirs(j.dir, &err));
  fr::daemon::test::write_log(j.dir, "n0-rank0.n0.1000.frlog", f);
  j.processes.push_back({0, 2, 1000, "n0", "job1", "n0-rank0.n0.1000.frlog", "src", true, 1, 0, 0});
  AssemblyResult r = assemble(j);
  REQUIRE(r.ok);
  CHECK(!r.verdict_kind.empty());
  for (const char* f : {"manifest.json", "analysis.json", "report.txt", "incident.json"})
    CHECK(exists(j.dir + "/" + f));
  auto manifest = nlohmann::json::parse(slurp(j.dir + "/manifest.json"));
  CHECK(manifest["source"] == "frd coordinator");
  CHECK(manifest["expected_ranks"] == 2);
  CHECK(manifest["nodes"][0]["clock_offset_ns"] == -1500);
  auto analysis = nlohmann::json::parse(slurp(j.dir + "/analysis.json"));
  CHECK(analysis["schema"] == "fr-analysis/1");

  SECTION("an unwritable directory is an error, not a crash") {
    AssemblyJob bad = j;
    bad.dir = "/proc/fr-cannot-write/incident";
    AssemblyResult rb = assemble(bad);
    CHECK_FALSE(rb.ok);
    CHECK(!rb.error.empty());
  }
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
