// NIXL transfers in frd: the watcher's summary of a log's transfer table per agent pair, the
// heartbeat field's round trip and bounds, and the coordinator that opens a stall incident for a
// transfer in flight past the threshold (and learns the pair as it learns a communicator).
#include <catch2/catch.hpp>

#include <cstring>

#include "coordinator_fixture.h"
#include "daemon/rpc/convert.h"
#include "daemon/logic/coordinator.h"
#include "daemon/host/watcher.h"
#include "fixture.h"
#include "testing/clock.h"

using namespace fr::daemon;
using namespace fr::daemon::test;
using fr::test::kSec;

namespace {

fr_xfer_entry entry(uint64_t id, const char* local, const char* remote, uint32_t state,
                    uint64_t post_ns, uint64_t done_ns, uint64_t posts = 1) {
  fr_xfer_entry x{};
  x.id = id;
  x.bytes = 4096 * id;
  x.op = FR_XFER_OP_WRITE;
  std::strncpy(x.local_agent, local, sizeof x.local_agent - 1);
  std::strncpy(x.remote_agent, remote, sizeof x.remote_agent - 1);
  x.state = state;
  x.status = state == FR_XFER_DONE ? 0 : FR_NIXL_IN_PROG;
  x.posts = posts;
  x.post_ns = post_ns;
  x.done_ns = done_ns;
  return x;
}

ProcessReport nixl_proc(int rank, int64_t age_ns, uint64_t completed, uint32_t in_flight = 1) {
  ProcessReport p = proc(rank, true, 0);
  XferProgress x;
  x.local_agent = "prefill-" + std::to_string(rank);
  x.remote_agent = "decode-0";
  x.in_flight = age_ns ? in_flight : 0;
  x.oldest_age_ns = age_ns;
  x.oldest_key = (7ull << 24) | 1;
  x.oldest_op = FR_XFER_OP_WRITE;
  x.oldest_bytes = 1 << 20;
  x.oldest_status = FR_NIXL_IN_PROG;
  x.completed = completed;
  p.xfers.push_back(x);
  return p;
}

}  // namespace

TEST_CASE("the watcher summarizes NIXL transfers per agent pair", "[daemon][nixl]") {
  FakeLog f;
  f.ops = {{FR_OP_ALLREDUCE, 1, 1, 5 * kSec, true, false}};
  auto log = make_log(f);
  const uint64_t now = uint64_t(real_ns());
  log.xfers.push_back(entry(1, "a", "b", FR_XFER_IN_PROGRESS, now - 9 * kSec, 0, 3));
  log.xfers.push_back(entry(2, "a", "b", FR_XFER_POSTED, now - 2 * kSec, 0));
  log.xfers.push_back(entry(3, "a", "b", FR_XFER_DONE, now - 20 * kSec, now - 19 * kSec, 5));
  log.xfers.push_back(entry(4, "a", "c", FR_XFER_RELEASED, now - 20 * kSec, now - 19 * kSec));
  log.xfers.push_back(entry(5, "a", "d", FR_XFER_CREATED, 0, 0, 0));
  ProcessReport p = summarize_log(log, "a.frlog", real_ns());
  REQUIRE(p.xfers.size() == 3);
  CHECK(p.xfers[0].remote_agent == "b");
  CHECK(p.xfers[0].in_flight == 2);
  CHECK(p.xfers[0].completed == 2 + 0 + 5);
  CHECK(p.xfers[0].oldest_key == ((1ull << 24) | 3));
  CHECK(p.xfers[0].oldest_age_ns >= 9 * kSec - kSec / 10);
  CHECK(p.xfers[1].in_flight == 0);
  CHECK(p.xfers[1].oldest_age_ns == 0);
  CHECK(p.oldest_age_ns() >= 9 * kSec - kSec / 10);  // the watcher's urgent crossing sees it

  SECTION("a post failed by a remote disconnect stays in flight until released") {
    log.xfers.clear();
    fr_xfer_entry x = entry(1, "a", "gone", FR_XFER_ERROR, now - 6 * kSec, now - 5 * kSec);
    x.status = FR_NIXL_ERR_REMOTE_DISCONNECT;
    log.xfers.push_back(x);
    ProcessReport q = summarize_log(log, "a.frlog", real_ns());
    REQUIRE(q.xfers.size() == 1);
    CHECK(q.xfers[0].in_flight == 1);
    CHECK(q.xfers[0].oldest_status == FR_NIXL_ERR_REMOTE_DISCONNECT);
    CHECK(q.oldest_age_ns() >= 6 * kSec - kSec / 10);
    log.xfers[0].state = FR_XFER_RELEASED;
    CHECK(summarize_log(log, "a.frlog", real_ns()).oldest_age_ns() == 0);
  }
  SECTION("hostile names are made printable and the pairs bounded") {
    log.xfers.clear();
    for (uint64_t i = 1; i <= 300; ++i) {
      fr_xfer_entry x = entry(i, "a", "", FR_XFER_POSTED, now - kSec, 0);
      std::snprintf(x.remote_agent, sizeof x.remote_agent, "\x1b]0;r%llu",
                    static_cast<unsigned long long>(i));
      log.xfers.push_back(x);
    }
    ProcessReport q = summarize_log(log, "a.frlog", real_ns());
    CHECK(q.xfers.size() == ProcessReport::kMaxXferPairs);
    for (const auto& x : q.xfers) CHECK(x.remote_agent.find('\x1b') == std::string::npos);
  }
}

TEST_CASE("a stalled transfer in the last of 200 agent pairs is in the heartbeat, the rest counted",
          "[daemon][nixl]") {
  // A prefill worker talking to 200 decode agents (#37): every pair has a young transfer in
  // flight, the last pair in table order one posted an hour ago.
  FakeLog f;
  f.ops = {{FR_OP_ALLREDUCE, 1, 1, 5 * kSec, true, false}};
  auto log = make_log(f);
  const uint64_t now = uint64_t(real_ns());
  for (uint64_t i = 0; i < 200; ++i) {
    const std::string remote = "decode-" + std::to_string(i);
    const uint64_t posted = i == 199 ? now - 3600 * kSec : now - kSec / 10;
    log.xfers.push_back(entry(i + 1, "prefill", remote.c_str(), FR_XFER_IN_PROGRESS, posted, 0));
  }
  ProcessReport p = summarize_log(log, "a.frlog", real_ns());
  REQUIRE(p.xfers.size() == ProcessReport::kMaxXferPairs);
  CHECK(p.xfers[0].remote_agent == "decode-199");
  CHECK(p.xfers[0].oldest_age_ns >= 3600 * kSec);
  CHECK(p.xfer_pairs_cut == 200 - ProcessReport::kMaxXferPairs);
  CHECK(p.oldest_age_ns() >= 3600 * kSec);  // what makes the node report at once
  // The count crosses the wire.
  fr::v1::Heartbeat hb;
  to_proto(report({p}), &hb);
  NodeReport back = from_proto(hb);
  REQUIRE(back.processes.size() == 1);
  CHECK(back.processes[0].xfer_pairs_cut == 200 - ProcessReport::kMaxXferPairs);
  CHECK(back.processes[0].xfers[0].remote_agent == "decode-199");
}

TEST_CASE("the heartbeat carries NIXL agent pairs, bounded on the way in", "[daemon][nixl]") {
  NodeReport r = report({nixl_proc(0, 5 * kSec, 3)});
  fr::v1::Heartbeat hb;
  to_proto(r, &hb);
  NodeReport back = from_proto(hb);
  REQUIRE(back.processes.size() == 1);
  REQUIRE(back.processes[0].xfers.size() == 1);
  const XferProgress& x = back.processes[0].xfers[0];
  CHECK(x.local_agent == "prefill-0");
  CHECK(x.remote_agent == "decode-0");
  CHECK(x.oldest_age_ns == 5 * kSec);
  CHECK(x.completed == 3);
  CHECK(x.oldest_bytes == 1 << 20);

  auto* q = hb.mutable_processes(0);
  for (int i = 0; i < 1000; ++i) {
    auto* d = q->add_xfers();
    d->set_remote_agent(std::string(5000, '\x07'));
    d->set_oldest_in_flight_age_ns(-5);
  }
  back = from_proto(hb);
  CHECK(back.processes[0].xfers.size() == ProcessReport::kMaxXferPairs);
  for (const auto& y : back.processes[0].xfers) {
    CHECK(y.remote_agent.size() <= 64 + 3);  // cut, with an ellipsis
    CHECK(y.remote_agent.find('\x07') == std::string::npos);
    CHECK(y.oldest_age_ns >= 0);
  }
}

TEST_CASE("a transfer in flight past the threshold opens a stall incident that names it",
          "[daemon][nixl]") {
  TempDir dir;
  CoordinatorState st(config(dir.path));
  std::string err;
  uint64_t s0 = st.connect("n0", "h0", "job1", 0, &err);
  uint64_t s1 = st.connect("n1", "h1", "job1", 0, &err);
  // Young transfers, and a healthy NCCL job: nothing.
  st.heartbeat(s0, report({nixl_proc(0, kSec / 2, 3), proc(1, true, 0)}), kSec);
  st.heartbeat(s1, report({proc(2, true, 0), proc(3, true, 0)}), kSec);
  CHECK(st.tick(kSec).dumps.empty());
  // Past the threshold (2 s in the fixture's config): every node is asked to dump.
  st.heartbeat(s0, report({nixl_proc(0, 4 * kSec, 3, 5), proc(1, true, 0)}), 2 * kSec);
  Actions a = st.tick(2 * kSec);
  REQUIRE(a.dumps.size() == 2);
  REQUIRE(st.incidents().size() == 1);
  const Incident& inc = st.incidents()[0];
  CHECK(inc.kind == IncidentKind::kStall);
  INFO(inc.reason);
  CHECK(inc.reason.find(
            "rank 0 on node n0: NIXL WRITE of 1048576 bytes from agent 'prefill-0' to agent "
            "'decode-0' in flight for 4.000 s") != std::string::npos);
  CHECK(inc.reason.find("5 in flight to it") != std::string::npos);
  CHECK(inc.trigger_comm == nixl_model_id("prefill-0", "decode-0"));
}

TEST_CASE("NIXL agent pairs are learned like communicators, apart from NCCL's", "[daemon][nixl]") {
  TempDir dir;
  CoordinatorConfig cfg = config(dir.path);
  cfg.stall_auto = true;
  cfg.stall_floor_ns = kSec;
  cfg.stall_cap_ns = 30 * kSec;
  cfg.stall_warmup = 4;
  CoordinatorState st(cfg);
  std::string err;
  uint64_t s0 = st.connect("n0", "h0", "job1", 0, &err);
  const uint64_t id = nixl_model_id("prefill-0", "decode-0");
  CHECK(id != nixl_model_id("decode-0", "prefill-0"));
  CHECK(st.stall_threshold_ns(id) == 30 * kSec);  // not learned: the cap
  // Transfers seen in flight for 100 ms, then done, heartbeat after heartbeat.
  uint64_t done = 0;
  for (int i = 0; i < 40; ++i) {
    ProcessReport p = nixl_proc(0, i % 2 ? 0 : kSec / 10, done);
    p.xfers[0].oldest_key = uint64_t(i);
    st.heartbeat(s0, report({p}), (i + 1) * kSec);
    CHECK(st.tick((i + 1) * kSec).dumps.empty());
    done += 2;
  }
  REQUIRE(st.comm_model(id) != nullptr);
  CHECK(st.comm_model(id)->warm(st.stall_policy()));
  CHECK(st.stall_threshold_ns(id) == kSec);  // max(floor, 5 x p99 of ~100 ms)
  ProcessReport p = nixl_proc(0, 2 * kSec, done);
  st.heartbeat(s0, report({p}), 41 * kSec);
  CHECK(st.tick(41 * kSec).dumps.size() == 1);
  REQUIRE(st.incidents().size() == 1);
  CHECK(st.incidents()[0].reason.find("learned p99") != std::string::npos);
}

TEST_CASE("a transfer failed by a remote disconnect opens an incident that says so",
          "[daemon][nixl]") {
  TempDir dir;
  CoordinatorState st(config(dir.path));
  std::string err;
  uint64_t s0 = st.connect("n0", "h0", "job1", 0, &err);
  ProcessReport p = nixl_proc(0, 3 * kSec, 3);
  p.rank = -1;  // a NIXL process without a launcher's rank
  p.xfers[0].oldest_status = FR_NIXL_ERR_REMOTE_DISCONNECT;
  st.heartbeat(s0, report({p}), kSec);
  REQUIRE(st.tick(kSec).dumps.size() == 1);
  REQUIRE(st.incidents().size() == 1);
  INFO(st.incidents()[0].reason);
  CHECK(st.incidents()[0].reason.find("pid 100 on node n0: NIXL WRITE") == 0);
  CHECK(st.incidents()[0].reason.find("failed (its remote went away), posted 3.000 s ago "
                                      "(NIXL_ERR_REMOTE_DISCONNECT") != std::string::npos);
}
