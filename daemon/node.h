// `frd node`: the sidecar on each node. It watches the local flight logs (LogWatcher), holds one
// stream to the coordinator with a heartbeat every interval (at once when a process dies or an op
// crosses the stall threshold), and answers a dump request by snapshotting every local log into
// its spool (`<spool>/<job>/<incident>/`) and delivering it, keeping it until the coordinator has
// it. Delivery is an upload, or, with a shared dump dir, writing the files straight into the
// incident's directory and telling the coordinator (which checks them; if it cannot see them the
// node uploads after all). When the coordinator is away it reconnects with backoff; dumps not yet
// delivered go out after the reconnect, so a coordinator restart loses nothing.
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
#include "daemon/logger.h"
#include "daemon/model.h"
#include "daemon/nvml.h"
#include "daemon/stacks.h"
#include "log/local_logs.h"
#include "log/snapshot.h"

namespace fr::daemon {

struct NodeOptions {
  ClientOptions client;
  std::string log_dir = "/dev/shm";
  // Whose logs count: default this daemon's user, every user when it runs as root (--log-owner).
  fr::log::LogOwners log_owners = fr::log::LogOwners::defaults();
  std::string node_name;             // default: the host name
  std::string spool_dir;             // where dumps wait for delivery; default under /tmp
  std::string shared_dump_dir;       // the coordinator's --dump-dir as mounted here; empty: upload
  int64_t heartbeat_interval_ns = 1'000'000'000;
  int64_t stall_after_ns = 30'000'000'000;
  std::string metrics_listen;        // HOST:PORT for Prometheus text (frd's main serves it)
  size_t chunk_bytes = 1 << 20;
  uint64_t upload_bytes_per_sec = 0; // 0: as fast as the network goes
  bool quiet = false;
  StackOptions stacks;               // every rank's stacks at each dump (stacks.h)
  std::string nvml_lib = "libnvidia-ml.so.1";  // GPU health at each dump and heartbeat (nvml.h)
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
  // Prometheus text for `frd node --metrics-listen` (safe from any thread).
  std::string metrics() const;

  // One dump: incident ids repeat across jobs, so the job is part of its name.
  struct Key {
    std::string job;
    std::string incident;
    bool operator<(const Key& o) const {
      return job != o.job ? job < o.job : incident < o.incident;
    }
    bool operator==(const Key& o) const { return job == o.job && incident == o.incident; }
  };

 private:
  struct Stream;
  void connect_once(bool* welcomed);
  void dump_loop();
  std::string spool_of(const Key& k) const;
  bool take_dump(const Key& k, std::string* error);
  // The stacks and GPU health beside a dump's logs; returns the files written.
  std::vector<DumpFile> take_context(const std::string& dir,
                                     const std::vector<fr::log::SnapshotProcess>& procs);
  // The cheap GPU reading of a heartbeat: its problems, one line each; new Xid events are also
  // logged at once.
  std::vector<std::string> check_gpus();
  // 1 delivered, 0 try again later, -1 refused for good.
  int deliver(const Key& k, std::string* error);
  int upload(const Key& k, const DumpHeader& h, std::string* error);
  // As upload, and 2: the coordinator cannot see the shared dir (upload instead).
  int place(const Key& k, const DumpHeader& h, std::string* error);
  void send_dump_status(const std::string& incident, bool ok, const std::string& error);
  void log(const std::string& line, LogLevel level = LogLevel::kInfo);
  // Says at once, then at a bounded rate, that the log directory cannot be read; and when it can
  // again.
  void check_log_dir();
  bool sleep_for(int64_t ns);

  NodeOptions opts_;
  std::string host_;
  std::atomic<bool> stopping_{false};
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Key> queue_;               // dumps to take or to deliver
  std::set<Key> pending_;               // taken or queued, not yet delivered
  std::set<Key> delivered_;
  std::set<Key> warned_foreign_;       // other jobs' dumps already named in the log
  std::string job_filter_;
  int64_t coordinator_stall_ns_ = 0;    // the coordinator's threshold, from its Welcome
  std::string upload_key_;  // the current connection's (Welcome.upload_key)
  Stream* stream_ = nullptr;            // the live control stream, guarded by mu_
  std::thread dumper_;
  // Conditions that persist, said at a bounded rate (guarded by mu_).
  LogThrottle unreachable_{30'000'000'000}, log_dir_missing_{30'000'000'000};
  // For metrics.
  std::atomic<bool> connected_{false};
  std::atomic<uint64_t> heartbeats_{0}, connects_{0}, connect_failures_{0}, dumps_delivered_{0},
      dumps_failed_{0}, processes_{0}, processes_alive_{0};
  GpuMonitor gpus_;
  size_t xids_seen_ = 0;
};

}  // namespace fr::daemon
