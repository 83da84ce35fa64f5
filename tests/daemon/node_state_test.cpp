// The node daemon's decisions without sockets (daemon/logic/node_state.h): the welcome, the job filter,
// which dump requests count, re-queueing after a failed delivery, and the reconnect backoff.
#include <catch2/catch.hpp>

#include <algorithm>

#include "daemon/logic/node_state.h"
#include "testing/clock.h"

using namespace fr::daemon;
using fr::test::kSec;

namespace {

NodeStateConfig config() {
  NodeStateConfig c;
  c.address = "coord:1";
  c.spool_dir = "/spool";
  c.stall_after_ns = 30 * kSec;
  c.heartbeat_interval_ns = kSec;
  return c;
}

bool said(const NodeActions& a, const std::string& part) {
  return std::any_of(a.log.begin(), a.log.end(), [&](const NodeActions::Line& l) {
    return l.text.find(part) != std::string::npos;
  });
}

std::vector<DumpKey> drain(NodeState& s) {
  std::vector<DumpKey> out;
  while (auto k = s.next_dump()) out.push_back(*k);
  return out;
}

}  // namespace

TEST_CASE("node state: the welcome sets the job, the threshold and the upload key", "[daemon]") {
  NodeState s(config());
  s.connecting();
  CHECK_FALSE(s.welcomed());
  NodeActions a = s.welcome("job/1", 5000, "key1");
  CHECK(s.welcomed());
  CHECK(said(a, "connected to coord:1"));
  CHECK(s.job_filter() == "job_1");  // sanitized
  CHECK(s.upload_key() == "key1");
  CHECK(s.stall_after_ns() == 5 * kSec);  // the coordinator's, lower than ours
  CHECK(s.counters().connects == 1);
  // A second welcome on the same stream is not a new connection.
  a = s.welcome("job1", 60'000, "key2");
  CHECK_FALSE(said(a, "connected to"));
  CHECK(s.counters().connects == 1);
  CHECK(s.stall_after_ns() == 30 * kSec);  // ours, lower than the coordinator's
  CHECK(s.upload_key() == "key2");
  // A welcome without a job clears the filter.
  s.welcome("", 0, "k");
  CHECK(s.job_filter().empty());
  CHECK(s.stall_after_ns() == 30 * kSec);
}

TEST_CASE("node state: a dump request is queued once, repeats and delivered dumps are dropped",
          "[daemon]") {
  NodeState s(config());
  s.connecting();
  s.welcome("job1", 0, "k");
  NodeActions a = s.dump_request("job1", "inc-1", "stall");
  CHECK(a.wake);
  CHECK(said(a, "dump requested for inc-1: stall"));
  CHECK(s.is_pending({"job1", "inc-1"}));
  // Asked again while pending: dropped.
  a = s.dump_request("job1", "inc-1", "stall");
  CHECK(a.log.empty());
  CHECK_FALSE(a.wake);
  CHECK(s.queue().size() == 1);
  auto k = s.next_dump();
  REQUIRE(k);
  s.delivery_done(*k, DeliveryOutcome::kDelivered, "");
  CHECK(s.is_delivered(*k));
  CHECK_FALSE(s.is_pending(*k));
  // Asked again once delivered: dropped too.
  a = s.dump_request("job1", "inc-1", "stall");
  CHECK_FALSE(a.wake);
  CHECK_FALSE(s.has_work());
}

TEST_CASE("node state: unsafe incident ids are ignored, a request without a job takes ours",
          "[daemon]") {
  NodeState s(config());
  s.connecting();
  CHECK_FALSE(s.dump_request("job1", "../etc", "x").wake);
  CHECK_FALSE(s.dump_request("job1", "", "x").wake);
  CHECK(s.pending_count() == 0);
  // No job known yet: "job".
  s.dump_request("", "inc-1", "x");
  CHECK(s.is_pending({"job", "inc-1"}));
  s.welcome("job7", 0, "k");
  s.dump_request("", "inc-2", "x");
  CHECK(s.is_pending({"job7", "inc-2"}));
  // A job name from the peer is sanitized.
  s.dump_request("a b", "inc-3", "x");
  CHECK(s.is_pending({"a_b", "inc-3"}));
}

TEST_CASE("node state: the welcome queues undelivered dumps again, except other jobs'",
          "[daemon]") {
  NodeState s(config());
  NodeActions a = s.recovered({{"job1", "inc-1"}, {"job2", "inc-9"}});
  CHECK(said(a, "2 undelivered dump(s) in the spool"));
  CHECK(s.pending_incidents().size() == 2);  // both named in the Hello
  drain(s);  // the dump thread tried them before the coordinator answered
  s.connecting();
  a = s.welcome("job1", 0, "k");
  CHECK(said(a, "keeping dump job2/inc-9 of another job in the spool"));
  std::vector<DumpKey> queued = drain(s);
  REQUIRE(queued.size() == 1);
  CHECK(queued[0] == DumpKey{"job1", "inc-1"});
  CHECK(s.is_pending({"job2", "inc-9"}));  // kept
  // The other job's dump is named once, not at every welcome; nothing is queued twice.
  s.connecting();
  a = s.welcome("job1", 0, "k");
  CHECK_FALSE(said(a, "of another job"));
  s.welcome("job1", 0, "k");
  CHECK(s.queue().size() == 1);
}

TEST_CASE("node state: a dump not delivered is queued again with a growing backoff", "[daemon]") {
  NodeState s(config());
  s.dump_request("job1", "inc-1", "x");
  auto k = s.next_dump();
  REQUIRE(k);
  NodeActions a = s.delivery_done(*k, DeliveryOutcome::kRetryLater, "unavailable");
  CHECK(said(a, "dump inc-1 not delivered yet: unavailable"));
  CHECK(a.wait_ns == 200'000'000);
  CHECK_FALSE(a.remove_spool);
  CHECK(s.is_pending(*k));
  REQUIRE(s.next_dump());
  a = s.delivery_done(*k, DeliveryOutcome::kRetryLater, "unavailable");
  CHECK(a.wait_ns == 400'000'000);
  for (int i = 0; i < 10; ++i) {
    REQUIRE(s.next_dump());
    a = s.delivery_done(*k, DeliveryOutcome::kRetryLater, "unavailable");
  }
  CHECK(a.wait_ns == 5 * kSec);  // capped
  // Delivered at last: the spool goes and the backoff starts again.
  REQUIRE(s.next_dump());
  a = s.delivery_done(*k, DeliveryOutcome::kDelivered, "");
  CHECK(a.remove_spool);
  CHECK(a.wait_ns == 0);
  CHECK(s.counters().dumps_delivered == 1);
  s.dump_request("job1", "inc-2", "x");
  auto k2 = s.next_dump();
  REQUIRE(k2);
  CHECK(s.delivery_done(*k2, DeliveryOutcome::kRetryLater, "again").wait_ns == 200'000'000);
}

TEST_CASE("node state: a refused dump stays in the spool and leaves the queue", "[daemon]") {
  NodeState s(config());
  s.dump_request("job1", "inc-1", "x");
  auto k = s.next_dump();
  REQUIRE(k);
  NodeActions a = s.delivery_done(*k, DeliveryOutcome::kRefused, "wrong job");
  CHECK(said(a, "dump inc-1 refused: wrong job (kept in /spool/job1/inc-1)"));
  CHECK_FALSE(a.remove_spool);
  CHECK_FALSE(s.is_pending(*k));
  CHECK_FALSE(s.has_work());
  CHECK(s.counters().dumps_failed == 1);
}

TEST_CASE("node state: a dump that cannot be taken is dropped, one dropped while queued is skipped",
          "[daemon]") {
  NodeState s(config());
  s.dump_request("job1", "inc-1", "x");
  s.dump_request("job1", "inc-2", "x");
  auto k = s.next_dump();
  REQUIRE(k);
  NodeActions a = s.dump_failed(*k, "no space");
  CHECK(said(a, "dump inc-1 failed: no space"));
  CHECK(s.counters().dumps_failed == 1);
  CHECK(s.pending_count() == 1);
  // Queued twice (a welcome while the dump thread held it), delivered once: the copy is skipped.
  auto k2 = s.next_dump();
  REQUIRE(k2);
  s.welcome("job1", 0, "k");
  s.delivery_done(*k2, DeliveryOutcome::kDelivered, "");
  CHECK(s.has_work());
  CHECK_FALSE(s.next_dump());
}

TEST_CASE("node state: a connection never welcomed is a failure, said at a bounded rate",
          "[daemon]") {
  NodeState s(config());
  s.connecting();
  NodeActions a = s.stream_closed("connection refused", 0);
  CHECK(said(a, "cannot reach the coordinator at coord:1: connection refused; retrying"));
  CHECK(a.wait_ns == 200'000'000);
  CHECK(s.counters().connect_failures == 1);
  s.connecting();
  a = s.stream_closed("connection refused", kSec);
  CHECK(a.log.empty());  // within 30 s of the last report
  CHECK(a.wait_ns == 400'000'000);
  s.connecting();
  a = s.stream_closed("", 31 * kSec);
  CHECK(said(a,
             "closed before its welcome; retrying (1 more failed attempts since the last report)"));
  for (int i = 0; i < 10; ++i) {
    s.connecting();
    a = s.stream_closed("refused", 32 * kSec);
  }
  CHECK(a.wait_ns == 5 * kSec);
  // Welcomed at last: reachable again, and a later disconnect retries soon.
  s.connecting();
  a = s.welcome("job1", 0, "k");
  CHECK(said(a, "the coordinator at coord:1 is reachable again"));
  a = s.stream_closed("", 40 * kSec);
  CHECK(said(a, "disconnected from coord:1: closed"));
  CHECK(a.wait_ns == 100'000'000);
  CHECK(s.counters().connect_failures == 13);
}

TEST_CASE("node state: heartbeats at once on a new stream, then by interval or when urgent",
          "[daemon]") {
  NodeState s(config());
  s.connecting();
  CHECK(s.heartbeat_due(false, 0));
  std::optional<PingEcho> echo;
  CHECK(s.heartbeat_sent(0, &echo) == 1);
  CHECK_FALSE(echo);
  CHECK_FALSE(s.heartbeat_due(false, kSec / 2));
  CHECK(s.heartbeat_due(true, kSec / 2));
  CHECK(s.heartbeat_due(false, kSec));
  s.ping(100, 200);
  CHECK(s.heartbeat_sent(kSec, &echo) == 2);
  REQUIRE(echo);
  CHECK(echo->t1_ns == 100);
  CHECK(echo->t2_ns == 200);
  CHECK(s.heartbeat_sent(2 * kSec, &echo) == 3);
  CHECK_FALSE(echo);  // echoed once
  // A new stream starts the sequence again.
  s.connecting();
  CHECK(s.heartbeat_due(false, 2 * kSec));
  CHECK(s.heartbeat_sent(2 * kSec, &echo) == 1);
}

TEST_CASE("node state: an unreadable log directory is said at once, then rarely, then its end",
          "[daemon]") {
  NodeState s(config());
  NodeActions a = s.log_dir_checked("/logs", "", 0);
  CHECK(a.log.empty());
  CHECK(s.log_dir_readable());
  a = s.log_dir_checked("/logs", "No such file or directory", kSec);
  CHECK(said(a, "cannot read the log directory /logs: No such file or directory"));
  CHECK_FALSE(s.log_dir_readable());
  CHECK(s.log_dir_checked("/logs", "No such file or directory", 2 * kSec).log.empty());
  a = s.log_dir_checked("/logs", "", 3 * kSec);
  CHECK(said(a, "the log directory /logs is readable again"));
  CHECK(s.log_dir_readable());
}
