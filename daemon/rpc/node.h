// `frd node`: the sidecar on each node. It watches the local flight logs (LogWatcher), holds one
// stream to the coordinator with a heartbeat every interval (at once when a process dies or an op
// crosses the stall threshold), and answers a dump request by snapshotting every local log into
// its spool (`<spool>/<job>/<incident>/`) and delivering it, keeping it until the coordinator has
// it. Delivery is an upload, or, with a shared dump dir, writing the files straight into the
// incident's directory and telling the coordinator (which checks them; if it cannot see them the
// node uploads after all). When the coordinator is away it reconnects with backoff; dumps not yet
// delivered go out after the reconnect, so a coordinator restart loses nothing.
//
// Every decision (the welcome, the job filter, which dump requests count, re-queueing, backoff)
// is NodeState's (node_state.h); this class is its gRPC, file and thread adapter.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "daemon/rpc/client.h"
#include "daemon/base/logger.h"
#include "daemon/base/model.h"
#include "daemon/logic/node_state.h"
#include "daemon/host/nvml.h"
#include "daemon/host/slow_history.h"
#include "daemon/host/stacks.h"
#include "daemon/host/watcher.h"
#include "log/local_logs.h"
#include "log/snapshot.h"

namespace fr::daemon {

struct NodeOptions {
  ClientOptions client;
  std::string log_dir = "/dev/shm";
  // Whose logs count: default this daemon's user, every user when it runs as root (--log-owner).
  fr::log::LogOwners log_owners = fr::log::LogOwners::defaults();
  std::string node_name;        // default: the host name
  std::string spool_dir;        // where dumps wait for delivery; default under /tmp
  std::string shared_dump_dir;  // the coordinator's --dump-dir as mounted here; empty: upload
  int64_t heartbeat_interval_ns = 1'000'000'000;
  int64_t stall_after_ns = 30'000'000'000;
  // How often the GPU's progress markers of each live log are sampled to time its collectives
  // (daemon/host/gpu_sampler.h; --gpu-sample-us); 0: not sampled.
  int64_t gpu_sample_ns = 1'000'000;
  std::string metrics_listen;  // HOST:PORT for Prometheus text (frd's main serves it)
  size_t chunk_bytes = 1 << 20;
  uint64_t upload_bytes_per_sec = 0;  // 0: as fast as the network goes
  bool quiet = false;
  StackOptions stacks;                         // every rank's stacks at each dump (stacks.h)
  std::string nvml_lib = "libnvidia-ml.so.1";  // GPU health at each dump and heartbeat (nvml.h)
  // Keep idle_ns() current even while no coordinator is reachable (a scan of the log directory
  // every second when the heartbeats do not scan): for `frd node --exit-when-idle`.
  bool watch_idle = false;
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
  // The protocol version agreed with the coordinator on the current stream (0 while none).
  uint32_t protocol() const { return protocol_.load(); }
  // How long, at the last scan of the log directory, no live flight log (one whose writer holds
  // it: its process is alive) had been seen; since the start when none ever was. Scans run on a
  // stream, and with watch_idle once a second without one.
  int64_t idle_ns() const;

  using Key = DumpKey;

 private:
  struct Stream;
  static NodeOptions settle(NodeOptions o);
  // One connection to the coordinator: hello, a reader thread for its commands, heartbeats
  // until the stream ends.
  void connect_once();
  bool send_hello(Stream& s);
  void read_commands(Stream& s, std::atomic<bool>* done);
  void heartbeat_loop(Stream& s, const std::atomic<bool>& reader_done);
  bool send_heartbeat(Stream& s, ScanResult scan);
  void dump_loop();
  // With watch_idle: scans the log directory once a second when the heartbeats do not.
  void idle_loop();
  void note_scan(const ScanResult& scan);
  // Carries out what the state decided (called with mu_ held or not; logging takes no lock).
  void apply(const NodeActions& a);
  std::string spool_of(const Key& k) const;
  bool take_dump(const Key& k, std::string* error);
  // The stacks and GPU health beside a dump's logs, and the stacks of the processes under fr-run
  // without a flight log (`unrecorded`); returns the files written.
  std::vector<DumpFile> take_context(const std::string& dir,
                                     const std::vector<fr::log::SnapshotProcess>& procs,
                                     const std::vector<StackTarget>& unrecorded);
  // The cheap GPU reading of a heartbeat: its problems, one line each; new Xid events are also
  // logged at once. Gives each process its GPU's throttle reasons (ProcessReport::gpu_throttle),
  // the PIDs on each GPU read again every kGpuPidsEveryNs, and within a second of a new process.
  std::vector<std::string> check_gpus(std::vector<ProcessReport>* procs);
  DeliveryOutcome deliver(const Key& k, std::string* error);
  DeliveryOutcome upload(const Key& k, const DumpHeader& h, std::string* error);
  // Writes the files into the shared dump dir and tells the coordinator; kUploadInstead when
  // the coordinator cannot see them there.
  DeliveryOutcome place(const Key& k, const DumpHeader& h, std::string* error);
  DeliveryOutcome placed_reply(const Key& k, const DumpHeader& h, std::string* error);
  void send_dump_status(const std::string& incident, bool ok, const std::string& error);
  // Keeps LOG_DIR/frd-node.state (daemon/base/node_status.h) saying how the connection goes;
  // written when the state or its message changes.
  void note_connection(const std::string& state, const std::string& message);
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
  NodeState state_;           // every decision (guarded by mu_)
  Stream* stream_ = nullptr;  // the live control stream, guarded by mu_
  std::thread dumper_, idler_;
  std::atomic<int64_t> last_live_ns_{0}, last_scan_ns_{0};  // mono_ns
  // For metrics.
  std::atomic<bool> connected_{false};
  std::atomic<uint32_t> protocol_{0};
  std::atomic<uint64_t> unknown_commands_{0};  // coordinator messages this node does not know
  std::atomic<uint64_t> heartbeats_{0}, processes_{0}, processes_alive_{0};
  GpuMonitor gpus_;
  size_t xids_seen_ = 0;
  static constexpr int64_t kGpuPidsEveryNs = 5'000'000'000;
  std::vector<std::vector<int>> gpu_pids_;  // per GPU, NVML's and the processes' own PIDs
  int64_t gpu_pids_mono_ = 0;               // when read (0: never)
  std::set<int> gpu_pids_asked_;            // the processes' PIDs when they were read
  SlowHistory history_;                     // the heartbeats' fail-slow summaries, for the dumps
  std::string status_written_;              // the state file's last text (guarded by mu_)
};

}  // namespace fr::daemon
