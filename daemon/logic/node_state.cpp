// See node_state.h. Every log line is worded here as the node daemon has always written it.
#include "daemon/logic/node_state.h"

#include <algorithm>

#include "daemon/base/names.h"

namespace fr::daemon {

namespace {

constexpr int64_t kConnectBackoffNs = 100'000'000;
constexpr int64_t kDeliveryBackoffNs = 200'000'000;
constexpr int64_t kMaxBackoffNs = 5'000'000'000;

}  // namespace

NodeState::NodeState(NodeStateConfig cfg) : cfg_(std::move(cfg)) {}

NodeActions NodeState::recovered(const std::vector<DumpKey>& keys) {
  NodeActions a;
  for (const DumpKey& k : keys)
    if (pending_.insert(k).second) queue_.push_back(k);
  if (!pending_.empty())
    a.log.push_back(
        {LogLevel::kInfo, std::to_string(pending_.size()) + " undelivered dump(s) in the spool"});
  a.wake = !queue_.empty();
  return a;
}

void NodeState::connecting() {
  welcomed_ = false;
  heartbeat_seq_ = 0;
  heartbeat_sent_ = false;
  ping_.reset();
}

std::vector<std::string> NodeState::pending_incidents() const {
  std::vector<std::string> out;
  for (const DumpKey& p : pending_) out.push_back(p.incident);
  return out;
}

void NodeState::queue_once(const DumpKey& k) {
  if (std::find(queue_.begin(), queue_.end(), k) == queue_.end()) queue_.push_back(k);
}

NodeActions NodeState::welcome(const std::string& job_id, uint32_t stall_after_ms,
                               const std::string& upload_key) {
  NodeActions a;
  if (!welcomed_) {
    a.log.push_back({LogLevel::kInfo, "connected to " + cfg_.address});
    if (unreachable_.clear())
      a.log.push_back(
          {LogLevel::kInfo, "the coordinator at " + cfg_.address + " is reachable again"});
    counters_.connects++;
  }
  welcomed_ = true;
  job_filter_ = job_id.empty() ? std::string() : sanitize_name(job_id);
  coordinator_stall_ns_ = int64_t(stall_after_ms) * 1'000'000;
  upload_key_ = upload_key;
  // Deliver what is still here (the coordinator may be a new one). Another job's dumps stay in
  // the spool: this coordinator would refuse them.
  for (const DumpKey& p : pending_) {
    if (!job_filter_.empty() && p.job != job_filter_) {
      if (warned_foreign_.insert(p).second)
        a.log.push_back({LogLevel::kInfo, "keeping dump " + p.job + "/" + p.incident +
                                              " of another job in the spool"});
      continue;
    }
    queue_once(p);
  }
  a.wake = true;
  return a;
}

NodeActions NodeState::dump_request(const std::string& job_id, const std::string& incident_id,
                                    const std::string& reason) {
  NodeActions a;
  if (!is_safe_name(incident_id, kMaxNameLen)) return a;
  DumpKey k{sanitize_name(job_id), incident_id};
  if (job_id.empty()) k.job = job_filter_.empty() ? "job" : job_filter_;
  if (pending_.count(k) || delivered_.count(k)) return a;
  a.log.push_back(
      {LogLevel::kInfo, "dump requested for " + incident_id + ": " + printable(reason, 200)});
  pending_.insert(k);
  queue_.push_back(k);
  a.wake = true;
  return a;
}

void NodeState::ping(int64_t t1_ns, int64_t t2_ns) { ping_ = PingEcho{t1_ns, t2_ns}; }

NodeActions NodeState::stream_closed(const std::string& error, int64_t now_mono) {
  NodeActions a;
  if (welcomed_) {
    a.log.push_back({LogLevel::kWarn, "disconnected from " + cfg_.address + ": " +
                                          (error.empty() ? std::string("closed") : error)});
    connect_backoff_ns_ = kConnectBackoffNs;
    a.wait_ns = connect_backoff_ns_;
    return a;
  }
  // Never welcomed: out of reach, or refused. Said at once, then every 30 s while it lasts.
  counters_.connect_failures++;
  uint64_t again = 0;
  if (unreachable_.due(now_mono, &again))
    a.log.push_back(
        {LogLevel::kWarn,
         (error.rfind("UNAUTHENTICATED", 0) == 0 ? "refused by the coordinator at "
                                                 : "cannot reach the coordinator at ") +
             cfg_.address + ": " +
             (error.empty() ? std::string("closed before its welcome") : error) + "; retrying" +
             (again ? " (" + std::to_string(again) + " more failed attempts since the last report)"
                    : "")});
  connect_backoff_ns_ = std::min(connect_backoff_ns_ * 2, kMaxBackoffNs);
  a.wait_ns = connect_backoff_ns_;
  return a;
}

int64_t NodeState::stall_after_ns() const {
  int64_t stall = cfg_.stall_after_ns;
  if (coordinator_stall_ns_ > 0 && coordinator_stall_ns_ < stall) stall = coordinator_stall_ns_;
  return stall;
}

bool NodeState::heartbeat_due(bool urgent, int64_t now_mono) const {
  return urgent || !heartbeat_sent_ || now_mono - last_heartbeat_ >= cfg_.heartbeat_interval_ns;
}

uint64_t NodeState::heartbeat_sent(int64_t now_mono, std::optional<PingEcho>* echo) {
  heartbeat_sent_ = true;
  last_heartbeat_ = now_mono;
  *echo = ping_;
  ping_.reset();
  return ++heartbeat_seq_;
}

NodeActions NodeState::log_dir_checked(const std::string& log_dir, const std::string& why,
                                       int64_t now_mono) {
  NodeActions a;
  if (why.empty()) {
    if (log_dir_missing_.clear())
      a.log.push_back({LogLevel::kInfo, "the log directory " + log_dir + " is readable again"});
    return a;
  }
  uint64_t again = 0;
  if (log_dir_missing_.due(now_mono, &again))
    a.log.push_back(
        {LogLevel::kWarn,
         "cannot read the log directory " + log_dir + ": " + why +
             "; no rank on this node is watched" +
             (again ? " (still so after " + std::to_string(again) + " more checks)" : "")});
  return a;
}

std::optional<DumpKey> NodeState::next_dump() {
  while (!queue_.empty()) {
    DumpKey k = queue_.front();
    queue_.pop_front();
    if (pending_.count(k)) return k;
  }
  return std::nullopt;
}

NodeActions NodeState::dump_failed(const DumpKey& k, const std::string& error) {
  NodeActions a;
  a.log.push_back({LogLevel::kError, "dump " + k.incident + " failed: " + error});
  counters_.dumps_failed++;
  pending_.erase(k);
  return a;
}

NodeActions NodeState::delivery_done(const DumpKey& k, DeliveryOutcome outcome,
                                     const std::string& error) {
  NodeActions a;
  switch (outcome) {
    case DeliveryOutcome::kDelivered:
      a.log.push_back({LogLevel::kInfo, "dump " + k.incident + " delivered"});
      counters_.dumps_delivered++;
      a.remove_spool = true;
      pending_.erase(k);
      delivered_.insert(k);
      delivery_backoff_ns_ = kDeliveryBackoffNs;
      return a;
    case DeliveryOutcome::kRefused:
      a.log.push_back({LogLevel::kError, "dump " + k.incident + " refused: " + error +
                                             " (kept in " + spool_of(k) + ")"});
      counters_.dumps_failed++;
      pending_.erase(k);
      return a;
    case DeliveryOutcome::kRetryLater:
    case DeliveryOutcome::kUploadInstead: break;
  }
  a.log.push_back({LogLevel::kWarn, "dump " + k.incident + " not delivered yet: " + error});
  queue_.push_back(k);
  a.wait_ns = delivery_backoff_ns_;
  delivery_backoff_ns_ = std::min(delivery_backoff_ns_ * 2, kMaxBackoffNs);
  return a;
}

std::string NodeState::spool_of(const DumpKey& k) const {
  return cfg_.spool_dir + "/" + k.job + "/" + k.incident;
}

}  // namespace fr::daemon
