// `frd node`: the sidecar on each node. It watches the local flight logs (LogWatcher), holds one
// stream to the coordinator with a heartbeat every interval (at once when a process dies or an op
// crosses the stall threshold), and answers a dump request by snapshotting every local log into
// its spool and uploading it, keeping it until the coordinator has it. When the coordinator is
// away it reconnects with backoff; dumps not yet delivered are uploaded after the reconnect, so a
// coordinator restart loses nothing.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "daemon/client.h"
#include "daemon/model.h"

namespace fr::daemon {

struct NodeOptions {
  ClientOptions client;
  std::string log_dir = "/dev/shm";
  std::string node_name;             // default: the host name
  std::string spool_dir;             // where dumps wait for delivery; default under /tmp
  int64_t heartbeat_interval_ns = 1'000'000'000;
  int64_t stall_after_ns = 30'000'000'000;
  size_t chunk_bytes = 1 << 20;
  bool quiet = false;
};

class NodeDaemon {
 public:
  explicit NodeDaemon(NodeOptions opts);
  ~NodeDaemon();

  // Prepares the spool and queues the dumps a previous run left undelivered.
  bool init(std::string* error);
  // Runs until stop() (blocking).
  void run();
  void stop();

  const std::string& node_name() const { return opts_.node_name; }

 private:
  struct Stream;
  void connect_once(bool* welcomed);
  void dump_loop();
  bool take_dump(const std::string& incident, std::string* error);
  // 1 delivered, 0 try again later, -1 refused for good.
  int upload(const std::string& incident, std::string* error);
  void send_dump_status(const std::string& incident, bool ok, const std::string& error);
  void log(const std::string& line);
  bool sleep_for(int64_t ns);

  NodeOptions opts_;
  std::string host_;
  std::atomic<bool> stopping_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::string> queue_;       // incidents to dump or to deliver
  std::set<std::string> pending_;       // taken or queued, not yet delivered
  std::set<std::string> delivered_;
  std::string job_filter_;
  int64_t coordinator_stall_ns_ = 0;    // the coordinator's threshold, from its Welcome
  Stream* stream_ = nullptr;            // the live control stream, guarded by mu_
  std::thread dumper_;
};

}  // namespace fr::daemon
