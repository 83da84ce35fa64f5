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
