// The node daemon's decisions, free of any protocol, shaped like the coordinator's state machine
// (coordinator.h): the gRPC adapter (node.h) feeds it what happened (a stream opened, the
// coordinator's welcome, a dump request, a dump delivered or not, the stream closed) with the
// time, and carries out what it returns (log lines, wake the dump thread, remove a delivered
// dump's spool, wait before the next attempt). It holds no socket and no thread; the adapter
// serializes the calls under its own mutex.
//
// The rules it keeps:
// - The welcome sets the job filter (whose logs and dumps count), the coordinator's stall
//   threshold and the upload key, and queues every undelivered dump again (the coordinator may be
//   a new one), except other jobs' dumps, which stay in the spool and are named once in the log.
// - A dump request with an unsafe incident id is ignored; one for a dump already pending or
//   already delivered is dropped, so a coordinator that asks again gets one dump.
// - A dump not delivered yet goes back to the end of the queue, and the dump thread waits with a
//   backoff that doubles up to 5 s; one refused for good stays in the spool, out of the queue.
// - A connection that was never welcomed is a failure: said at once, then every 30 s while it
//   lasts, and retried with a backoff that doubles up to 5 s.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "daemon/base/logger.h"

namespace fr::daemon {

// One dump: incident ids repeat across jobs, so the job is part of its name.
struct DumpKey {
  std::string job;
  std::string incident;
  bool operator<(const DumpKey& o) const {
    return job != o.job ? job < o.job : incident < o.incident;
  }
  bool operator==(const DumpKey& o) const { return job == o.job && incident == o.incident; }
};

// What became of one attempt to hand a dump to the coordinator.
enum class DeliveryOutcome {
  kDelivered,      // the coordinator has it
  kRetryLater,     // not now (coordinator away, busy, network): keep it and try again
  kRefused,        // refused for good (damaged, another job): kept in the spool, not retried
  kUploadInstead,  // only when placing into the shared dump dir: the coordinator cannot see it
};

struct NodeStateConfig {
  std::string address;    // the coordinator's, for log lines
  std::string spool_dir;  // where dumps wait: <spool>/<job>/<incident>
  int64_t stall_after_ns = 30'000'000'000;
  int64_t heartbeat_interval_ns = 1'000'000'000;
};

struct NodeActions {
  struct Line {
    LogLevel level = LogLevel::kInfo;
    std::string text;
  };
  std::vector<Line> log;
  bool wake = false;          // the dump queue changed: wake the dump thread
  bool remove_spool = false;  // the dump just delivered: its spool folder can go
  int64_t wait_ns = 0;        // wait this long before the next attempt (dump or connect)
};

// What a heartbeat echoes of the coordinator's last ping (clock offsets, clock.h).
struct PingEcho {
  int64_t t1_ns = 0;  // the coordinator's send time
  int64_t t2_ns = 0;  // our receive time
};

// Counters for the node's metrics.
struct NodeCounters {
  uint64_t connects = 0;
  uint64_t connect_failures = 0;
  uint64_t dumps_delivered = 0;
  uint64_t dumps_failed = 0;
};

class NodeState {
 public:
  explicit NodeState(NodeStateConfig cfg);

  // Dumps a previous run took and did not deliver, found in the spool at start.
  NodeActions recovered(const std::vector<DumpKey>& keys);

  // --- the control stream
  // A new stream opens: not welcomed yet, the heartbeat sequence starts again.
  void connecting();
  // What the Hello carries: the job we know and the incidents still to deliver.
  const std::string& job_filter() const { return job_filter_; }
  std::vector<std::string> pending_incidents() const;
  NodeActions welcome(const std::string& job_id, uint32_t stall_after_ms,
                      const std::string& upload_key);
  NodeActions dump_request(const std::string& job_id, const std::string& incident_id,
                           const std::string& reason);
  void ping(int64_t t1_ns, int64_t t2_ns);
  // The stream ended (not by stop()): `error` empty when it closed cleanly. Says why, counts
  // the failure and sets how long to wait before reconnecting.
  NodeActions stream_closed(const std::string& error, int64_t now_mono);
  bool welcomed() const { return welcomed_; }
  const std::string& upload_key() const { return upload_key_; }

  // --- heartbeats
  // The threshold the watcher reports: whichever is lower, ours or the coordinator's.
  int64_t stall_after_ns() const;
  // Whether a heartbeat goes out now (urgent: a death or a new stall).
  bool heartbeat_due(bool urgent, int64_t now_mono) const;
  // A heartbeat is being sent: its sequence number; the ping to echo, if any (taken once).
  uint64_t heartbeat_sent(int64_t now_mono, std::optional<PingEcho>* echo);
  // The log directory was checked: `why` empty when readable.
  NodeActions log_dir_checked(const std::string& log_dir, const std::string& why, int64_t now_mono);
  bool log_dir_readable() const { return !log_dir_missing_.active(); }

  // --- the dump thread
  bool has_work() const { return !queue_.empty(); }
  // The next dump to take or deliver (one no longer pending is skipped).
  std::optional<DumpKey> next_dump();
  NodeActions dump_failed(const DumpKey& k, const std::string& error);
  NodeActions delivery_done(const DumpKey& k, DeliveryOutcome outcome, const std::string& error);
  std::string spool_of(const DumpKey& k) const;

  size_t pending_count() const { return pending_.size(); }
  bool is_pending(const DumpKey& k) const { return pending_.count(k) > 0; }
  bool is_delivered(const DumpKey& k) const { return delivered_.count(k) > 0; }
  const std::deque<DumpKey>& queue() const { return queue_; }
  const NodeCounters& counters() const { return counters_; }

 private:
  void queue_once(const DumpKey& k);

  NodeStateConfig cfg_;
  std::deque<DumpKey> queue_;  // dumps to take or to deliver
  std::set<DumpKey> pending_;  // taken or queued, not yet delivered
  std::set<DumpKey> delivered_;
  std::set<DumpKey> warned_foreign_;  // other jobs' dumps already named in the log
  std::string job_filter_;
  int64_t coordinator_stall_ns_ = 0;  // the coordinator's threshold, from its welcome
  std::string upload_key_;            // the current connection's (Welcome.upload_key)
  bool welcomed_ = false;             // the current connection was welcomed
  uint64_t heartbeat_seq_ = 0;
  int64_t last_heartbeat_ = 0;
  bool heartbeat_sent_ = false;  // on this connection
  std::optional<PingEcho> ping_;
  int64_t connect_backoff_ns_ = 100'000'000;
  int64_t delivery_backoff_ns_ = 200'000'000;
  // Conditions that persist, said at a bounded rate.
  LogThrottle unreachable_{30'000'000'000}, log_dir_missing_{30'000'000'000};
  NodeCounters counters_;
};

}  // namespace fr::daemon
