// frd node: the sidecar on each node (daemon/rpc/node.h). Turns the flags into NodeOptions, holds the
// node lock of the log directory, serves the metrics when asked, and runs until SIGINT or SIGTERM,
// or with --exit-when-idle until no live flight log and no fr-run has used the directory for that
// long.
#include "commands.h"

#include <time.h>

#include <cerrno>
#include <cstdio>
#include <thread>

#include "daemon/base/logger.h"
#include "daemon/http/metrics_http.h"
#include "daemon/rpc/node.h"
#include "daemon/base/node_lock.h"
#include "daemon/rpc/server.h"
#include "daemon/host/stacks.h"

namespace frd {

namespace {

// "65536", "512K", "1.5M", "2G" (powers of 1024): a positive byte count.
bool parse_rate(const std::string& text, uint64_t* out) {
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || !(v > 0)) return false;
  std::string unit(end);
  double mult = 1;
  if (unit == "K" || unit == "k")
    mult = 1024;
  else if (unit == "M" || unit == "m")
    mult = 1024.0 * 1024;
  else if (unit == "G" || unit == "g")
    mult = 1024.0 * 1024 * 1024;
  else if (!unit.empty())
    return false;
  v *= mult;
  if (v < 1 || v > 1e15) return false;
  *out = uint64_t(v);
  return true;
}

// "60 s", "1.5 s".
std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g s", s);
  return buf;
}

int usage(const std::string& error) {
  std::fprintf(stderr, "frd node: %s\n", error.c_str());
  return 2;
}

int failed(const std::string& error) {
  std::fprintf(stderr, "frd node: %s\n", error.c_str());
  return 1;
}

}  // namespace

void NodeCommand::add(CLI::App& parent) {
  app = parent.add_subcommand("node", "run the node sidecar");
  client.add(app, true);
  app->add_option("--log-dir", log_dir, "directory holding the flight logs")->required();
  app->add_option("--log-owner", owners, kOwnerHelp);
  app->add_option("--node-name", node_name, "this node's name (default: the host name)");
  app->add_option("--heartbeat-interval", heartbeat_interval, "seconds between heartbeats")
      ->capture_default_str()
      ->check(number_range(0.05, 3600.0));
  app->add_option("--stall-after", stall_after,
                  "seconds in flight before an op is reported at once")
      ->capture_default_str()
      ->check(number_range(0.1, 1e6));
  app->add_option("--gpu-sample-us", gpu_sample_us,
                  "microseconds between samples of each live flight log's GPU progress markers, "
                  "which time each collective on its GPU (fail-slow); 0: off")
      ->capture_default_str()
      ->check(CLI::Range(int64_t(0), int64_t(1'000'000)));
  app->add_option("--dump-dir", dump_dir, "spool: dumps wait here until delivered");
  app->add_option("--upload-rate", upload_rate,
                  "most bytes per second an upload may send, e.g. 50M (default: no limit)");
  app->add_option("--metrics-listen", metrics_listen,
                  "HOST:PORT for this node daemon's Prometheus metrics over HTTP");
  app->add_option("--shared-dump-dir", shared_dump_dir,
                  "the coordinator's --dump-dir as mounted on this node: write dumps there "
                  "instead of uploading them");
  app->add_option("--exit-when-idle", exit_when_idle,
                  "exit once no live flight log (and no fr-run) has used the log directory for "
                  "this many seconds; 0: never (fr-run passes 60)")
      ->capture_default_str()
      ->check(number_range(0.0, 1e7))
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  context.add(app);
}

int NodeCommand::run() const {
  fr::daemon::NodeOptions o;
  std::string error;
  if (!client.resolve("frd node", &o.client, &error)) return usage(error);
  o.log_dir = log_dir;
  if (!log_owners(owners, &o.log_owners, &error)) return usage("--log-owner: " + error);
  o.node_name = node_name;
  o.spool_dir = dump_dir;
  o.shared_dump_dir = shared_dump_dir;
  if (!upload_rate.empty() && !parse_rate(upload_rate, &o.upload_bytes_per_sec))
    return usage("--upload-rate: '" + upload_rate +
                 "' is not a byte count like 65536, 512K or 50M");
  o.heartbeat_interval_ns = to_ns(heartbeat_interval);
  o.stall_after_ns = to_ns(stall_after);
  o.gpu_sample_ns = gpu_sample_us * 1000;
  o.stacks = fr::daemon::stack_options(context.py_spy, context.stack_budget, context.no_stacks);
  o.nvml_lib = context.nvml_lib;
  o.watch_idle = exit_when_idle > 0;
  // One node daemon per log directory (fr-run relies on it); one that cannot make the lock
  // file (say, the directory is missing yet) runs on unlocked.
  fr::daemon::NodeLock node_lock;
  auto locked = node_lock.acquire(log_dir, &error);
  if (locked == fr::daemon::NodeLockOutcome::held) return failed(error);
  if (locked == fr::daemon::NodeLockOutcome::failed)
    fr::daemon::log_line(fr::daemon::LogLevel::kWarn,
                         "frd node: " + error + "; running without the node lock");
  // Metrics off loopback follow the coordinator's rule: only behind the job's token.
  fr::daemon::HttpSecurity http_sec;
  std::string metrics_host;
  int metrics_port = 0;
  if (!metrics_listen.empty() &&
      !fr::daemon::split_host_port(metrics_listen, &metrics_host, &metrics_port))
    return usage("--metrics-listen " + metrics_listen +
                 ": not HOST:PORT with a port from 0 to 65535");
  if (!metrics_listen.empty() && !fr::daemon::is_loopback_address(metrics_listen)) {
    if (o.client.token.empty())
      return usage("--metrics-listen " + metrics_listen +
                   " is not loopback only: it needs --token-file (scrapers then send "
                   "'Authorization: Bearer TOKEN')");
    http_sec.token = o.client.token;
  }
  sigset_t set = block_stop_signals();
  fr::daemon::NodeDaemon d(o);
  if (!d.init(&error)) return failed(error);
  fr::daemon::HttpServer http;
  if (!metrics_listen.empty()) {
    http.get("/metrics", [&d](const fr::daemon::HttpServer::Request&) {
      fr::daemon::HttpServer::Response r;
      r.content_type = "text/plain; version=0.0.4";
      r.body = d.metrics();
      return r;
    });
    if (!http.start(metrics_listen, http_sec, &error)) return failed(error);
    fr::daemon::log_line(fr::daemon::LogLevel::kInfo,
                         "frd node: metrics on port " + std::to_string(http.port()));
  }
  std::thread runner([&d] { d.run(); });
  const int64_t idle_limit_ns = to_ns(exit_when_idle);
  const fr::daemon::ServedUsers users{o.log_owners.any, o.log_owners.uids};
  // Another user's fr-run keeps this daemon for ten idle limits at most (node_lock.h).
  fr::daemon::ForeignUse foreign{10 * idle_limit_ns, {}};
  for (;;) {
    timespec second{1, 0};
    if (sigtimedwait(&set, nullptr, &second) > 0) break;
    if (idle_limit_ns <= 0 || d.idle_ns() < idle_limit_ns) {
      foreign.since_ns.clear();  // busy: other users' fr-runs count anew once idle
      continue;
    }
    // No fr-run uses the directory: the node lock goes, so that one coming now finds no node
    // daemon and starts its own. One that found this daemon before made its users file first
    // (node_lock.h): a second look sees it, and the daemon takes its lock back and stays (unless
    // a daemon that fr-run started has it by then).
    if (!fr::daemon::claim_unused(log_dir, users, &foreign, fr::daemon::mono_ns())) continue;
    node_lock.release();
    if (!fr::daemon::claim_unused(log_dir, users, &foreign, fr::daemon::mono_ns()) &&
        node_lock.acquire(log_dir, &error, 0) == fr::daemon::NodeLockOutcome::acquired)
      continue;
    fr::daemon::log_line(fr::daemon::LogLevel::kInfo, "frd node: no live flight log in " + log_dir +
                                                          " and no fr-run using it for " +
                                                          seconds_text(exit_when_idle) +
                                                          "; exiting (--exit-when-idle)");
    break;
  }
  d.stop();
  runner.join();
  return 0;
}

}  // namespace frd
