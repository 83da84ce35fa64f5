// frd's roles, one command each (main.cpp picks the one named on the command line): its flags,
// added to the CLI app, and its run(), which returns the exit code (0 done, 1 the work failed, 2 bad
// usage). What several roles share lives here too: the coordinator's address and credentials
// (ClientFlags), how dumps take stacks and GPU health (ContextFlags), and the stop signals.
#pragma once

#include <CLI/CLI.hpp>

#include <csignal>
#include <cstdint>
#include <string>
#include <vector>

#include "daemon/rpc/client.h"
#include "log/local_logs.h"

namespace frd {

// --log-owner USER (repeated): whose logs are read; without it, this user's (any user's as root).
extern const char* const kOwnerHelp;
bool log_owners(const std::vector<std::string>& users, fr::log::LogOwners* out, std::string* error);

int64_t to_ns(double seconds);

// A number of seconds (or a factor) from lo to hi: CLI11's Range lets "nan" through (every
// comparison with NaN is false) and "inf" past no bound of its own; this refuses both, and
// anything out of range, with one line naming the value and the range.
CLI::Validator number_range(double lo, double hi);

// SIGINT and SIGTERM are taken synchronously by the main thread (sigwait), so no handler runs
// inside gRPC or the daemons' threads. Block them before any thread starts.
sigset_t block_stop_signals();

void warn_loose(const char* who, const std::string& path);

// How `frd snapshot` and `frd node` take stacks and GPU health (docs/frd.md, "Stacks").
struct ContextFlags {
  std::string py_spy;
  double stack_budget = 5;
  bool no_stacks = false;
  std::string nvml_lib = "libnvidia-ml.so.1";
  void add(CLI::App* app);
};

// How `frd node`, `frd status` and `frd dump` reach the coordinator.
struct ClientFlags {
  std::string coordinator = "127.0.0.1:7470";
  std::string token_file, tls_ca, tls_cert, tls_key;
  bool insecure = false;
  void add(CLI::App* app, bool required_coordinator);
  bool resolve(const char* who, fr::daemon::ClientOptions* out, std::string* error) const;
};

// frd snapshot: every flight log in a directory into a dump set, no network (snapshot.cpp).
struct SnapshotCommand {
  CLI::App* app = nullptr;
  std::string log_dir = "/dev/shm", out, job;
  std::vector<std::string> owners;
  ContextFlags context;
  void add(CLI::App& parent);
  int run() const;
};

// frd stacks: the stack capture helper that snapshot and node run (snapshot.cpp).
struct StacksCommand {
  CLI::App* app = nullptr;
  std::vector<std::string> pids;
  int64_t budget_ms = 5000, hold_ms = 0;
  std::string py_spy;
  void add(CLI::App& parent);
  int run() const;
};

// frd node: the sidecar on each node (node.cpp).
struct NodeCommand {
  CLI::App* app = nullptr;
  ClientFlags client;
  std::string log_dir, node_name, dump_dir, shared_dump_dir, upload_rate, metrics_listen;
  std::vector<std::string> owners;
  double heartbeat_interval = 1, stall_after = 30;
  double exit_when_idle = 0;
  int64_t gpu_sample_us =
      1000;  // 0: the GPU's progress markers are not sampled  // seconds without a live flight log or an fr-run; 0: never
  ContextFlags context;
  void add(CLI::App& parent);
  int run() const;
};

// frd coordinator: one per job (coordinator.cpp).
struct CoordinatorCommand {
  CLI::App* app = nullptr;
  std::string listen = "127.0.0.1:7470", port_file, dump_dir, job, metrics_listen;
  std::string token_file, tls_cert, tls_key, tls_client_ca;
  bool insecure = false;
  bool http_trust_loopback = false;
  int expect_ranks = -1;
  std::string stall_after = "auto";
  double stall_factor = 5, heartbeat_timeout = 10, dump_deadline = 20;
  std::string on_verdict;
  double on_verdict_timeout = 300;
  void add(CLI::App& parent);
  int run() const;
};

// frd status and frd dump: asking the coordinator (status.cpp).
struct StatusCommand {
  CLI::App* app = nullptr;
  ClientFlags client;
  bool json = false, summary = false;
  size_t offset = 0, limit = 0;
  void add(CLI::App& parent);
  int run() const;
};

struct DumpCommand {
  CLI::App* app = nullptr;
  ClientFlags client;
  std::string reason = "manual dump";
  void add(CLI::App& parent);
  int run() const;
};

}  // namespace frd
