// The node's log watcher (daemon/host/watcher.h): a log reduced to progress per communicator and
// its oldest op in flight; deaths and new stalls reported at once.
#include <catch2/catch.hpp>

#include "coordinator_fixture.h"
#include "daemon/host/watcher.h"
#include "fixture.h"
#include "testing/clock.h"

using namespace fr::daemon;
using namespace fr::daemon::test;
using fr::test::kSec;

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

TEST_CASE("a log's newest collectives, kernel times and proxy steps go into its report",
          "[daemon]") {
  FakeLog f;
  for (uint64_t s = 1; s <= 20; ++s)
    f.ops.push_back({FR_OP_ALLREDUCE, s, s, int64_t(30 - s) * kSec / 10, true, false});
  auto log = fr::daemon::test::make_log(f);
  auto chan = [&](uint8_t kind, int peer, uint16_t channel, uint64_t start, uint64_t last,
                  uint32_t done, uint64_t started, uint64_t finished) {
    fr_chan_entry e{};
    e.comm_id = f.comm_id;
    e.kind = kind;
    e.peer = peer;
    e.channel = channel;
    e.op_seq = 7;
    e.op = FR_OP_ALLREDUCE;
    e.op_start_ns = start;
    e.last_ns = last;
    e.done = done;
    e.ops_started = started;
    e.ops_done = finished;
    log.chans.push_back(e);
  };
  // The kernel ran 4 ms on channel 0 and 6 ms on channel 1: the op's GPU time is 6 ms.
  chan(FR_CHAN_KERNEL, -1, 0, 1'000'000'000, 1'004'000'000, 0, 3, 3);
  chan(FR_CHAN_KERNEL, -1, 1, 1'000'000'000, 1'006'000'000, 0, 3, 3);
  // 70 receive slots of 8 steps each, the slot i taking i+1 ms in all.
  for (int i = 0; i < 70; ++i)
    chan(FR_CHAN_RECV, i % 4, uint16_t(i), 2'000'000'000,
         2'000'000'000 + uint64_t(i + 1) * 1'000'000, 8, 1, 1);
  chan(FR_CHAN_SEND, 1, 0, 3'000'000'000, 3'000'000'000, 0, 1, 0);  // no step done: left out
  ProcessReport p = summarize_log(log, "a.frlog", real_ns());
  REQUIRE(p.comms.size() == 1);
  const auto& recent = p.comms[0].recent;
  REQUIRE(recent.size() == CommProgress::kMaxRecent);
  CHECK(recent.front().seq == 5);
  CHECK(recent.back().seq == 20);
  for (size_t i = 1; i < recent.size(); ++i) CHECK(recent[i].call_ns > recent[i - 1].call_ns);
  CHECK(recent.back().gpu_ns == 6'000'000);  // the newest AllReduce takes the kernel's time
  CHECK(recent.front().gpu_ns == 0);
  REQUIRE(p.links.size() == ProcessReport::kMaxLinks);
  CHECK(p.links.front().step_ns == 70'000'000 / 8);  // the slowest first
  CHECK(p.links.front().channel == 69);
  CHECK(p.links.front().peer == 69 % 4);
  CHECK_FALSE(p.links.front().send);
  CHECK(p.links.front().steps == 8);
  CHECK(p.links.back().step_ns == 7'000'000 / 8);
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
  CHECK(w.scan().urgent);  // crossed the stall threshold
  CHECK_FALSE(w.scan().urgent);

  a.alive = false;
  fr::daemon::test::write_log(dir.path, "r0.frlog", a);
  CHECK(w.scan().urgent);  // died

  SECTION("the job filter hides other jobs' logs") {
    w.set_job_filter("other");
    CHECK(w.scan().processes.empty());
  }
}
