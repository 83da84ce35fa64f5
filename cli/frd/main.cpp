// frd: one binary for every role.
//   frd snapshot     snapshot the flight logs of a directory into a dump set (no network)
//   frd node         the sidecar on each node: heartbeats up, dumps on request
//   frd coordinator  one per job: detects hangs, gathers the dump set, writes the verdict
//   frd status       what the coordinator knows: nodes, ranks, progress, incidents
//   frd dump         open an incident by hand: every node dumps now
//   frd stacks       the stack capture helper that snapshot and node run (one line per process)
// Exit codes: 0 done, 1 the work failed (cannot listen, cannot reach the coordinator, dump set not
// written), 2 bad usage.
//
// Credentials: without --token-file and without --insecure, every role uses the per-user default
// token file (daemon/client.h): the coordinator creates it (random, 0600) or reuses it; the
// others read it. --insecure on a side means no token there.
#include <CLI/CLI.hpp>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include <sys/stat.h>

#include "daemon/assembly.h"
#include "files/files.h"
#include "daemon/client.h"
#include "daemon/logger.h"
#include "daemon/metrics_http.h"
#include "daemon/node.h"
#include "daemon/node_lock.h"
#include "daemon/nvml.h"
#include "daemon/server.h"
#include "daemon/stacks.h"
#include "fr/version.h"
#include "log/snapshot.h"

namespace {

// --log-owner USER (repeated): whose logs are read; without it, this user's (any user's as root).
bool log_owners(const std::vector<std::string>& users, fr::log::LogOwners* out, std::string* error) {
  if (users.empty()) return true;
  fr::log::LogOwners o;
  for (const auto& u : users)
    if (!o.add(u, error)) return false;
  *out = o;
  return true;
}

// How `frd snapshot` and `frd node` take stacks and GPU health (docs/frd.md, "Stacks").
struct ContextFlags {
  std::string py_spy;
  double stack_budget = 5;
  bool no_stacks = false;
  std::string nvml_lib = "libnvidia-ml.so.1";

  void add(CLI::App* app) {
    app->add_option("--py-spy", py_spy,
                    "py-spy to run for the Python frames of Python processes (default: py-spy on PATH)");
    app->add_option("--stack-budget", stack_budget,
                    "seconds all stacks of one dump may take together (0: no stacks)")
        ->capture_default_str()->check(CLI::Range(0.0, 600.0));
    app->add_flag("--no-stacks", no_stacks, "take no stacks");
    app->add_option("--nvml-lib", nvml_lib, "the NVML library to read GPU health from")
        ->capture_default_str();
  }
};

int run_snapshot(const std::string& log_dir, const std::string& out, const std::string& job,
                 const std::vector<std::string>& owners, const ContextFlags& ctx) {
  fr::log::SnapshotOptions opts;
  std::string error;
  if (!log_owners(owners, &opts.owners, &error)) {
    std::fprintf(stderr, "frd snapshot: --log-owner: %s\n", error.c_str());
    return 2;
  }
  opts.log_dir = log_dir;
  opts.out_dir = out;
  opts.job_id = job;
  fr::log::SnapshotResult res = fr::log::snapshot_dir(opts);
  for (const auto& skip : res.skipped)
    std::fprintf(stderr, "frd snapshot: skipped %s: %s\n", skip.file.c_str(), skip.error.c_str());
  if (!res.ok()) {
    std::fprintf(stderr, "frd snapshot: %s\n", res.error.c_str());
    return 1;
  }
  std::vector<fr::daemon::StackTarget> targets;
  for (const auto& p : res.processes) targets.push_back({p.pid, p.rank, p.file, p.alive, p.source});
  fr::daemon::StacksTaken st = fr::daemon::take_stacks(
      fr::daemon::stack_options(ctx.py_spy, ctx.stack_budget, ctx.no_stacks), targets, out);
  for (const auto& n : st.notes) std::fprintf(stderr, "frd snapshot: no stacks for %s\n", n.c_str());
  // GPU health: Xid events are only those that arrive while we watch, so none here.
  fr::daemon::GpuMonitor gpus;
  std::string why;
  gpus.open(ctx.nvml_lib, &why);
  fr::log::NodeGpus g = gpus.read(true);
  g.node = res.processes.empty() ? std::string() : res.processes.front().host;
  if (g.node.empty()) g.node = "localhost";
  std::string err;
  if (!fr::files::write_atomic(out + "/" + g.node + fr::log::kGpuSuffix, fr::log::gpus_to_text(g), &err))
    std::fprintf(stderr, "frd snapshot: %s\n", err.c_str());
  std::printf("frd snapshot: %zu process(es) into %s", res.processes.size(), out.c_str());
  if (!res.skipped.empty()) std::printf(" (%zu skipped)", res.skipped.size());
  std::printf("; stacks of %zu in %.2f s; %s\n", st.taken, double(st.took_ns) / 1e9,
              g.error.empty() ? (std::to_string(g.gpus.size()) + " GPU(s)").c_str() : g.error.c_str());
  return 0;
}

// SIGINT and SIGTERM are taken synchronously by the main thread (sigwait), so no handler runs
// inside gRPC or the daemons' threads. Block them before any thread starts.
sigset_t block_stop_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::signal(SIGPIPE, SIG_IGN);
  return set;
}

int64_t to_ns(double seconds) { return int64_t(seconds * 1e9); }

// --stall-after: "auto" (learned per communicator) or seconds (0.1 to 1e6), as before.
bool parse_stall_after(const std::string& text, fr::daemon::CoordinatorConfig* cfg,
                       std::string* error) {
  if (text == "auto") {
    cfg->stall_auto = true;
    return true;
  }
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  if (text.empty() || !end || *end != '\0' || !(v >= 0.1 && v <= 1e6)) {
    *error = "'" + text + "' is neither auto nor a number of seconds from 0.1 to 1000000";
    return false;
  }
  cfg->stall_auto = false;
  cfg->stall_after_ns = to_ns(v);
  return true;
}

// "65536", "512K", "1.5M", "2G" (powers of 1024): a positive byte count.
bool parse_rate(const std::string& text, uint64_t* out) {
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || !(v > 0)) return false;
  std::string unit(end);
  double mult = 1;
  if (unit == "K" || unit == "k") mult = 1024;
  else if (unit == "M" || unit == "m") mult = 1024.0 * 1024;
  else if (unit == "G" || unit == "g") mult = 1024.0 * 1024 * 1024;
  else if (!unit.empty()) return false;
  v *= mult;
  if (v < 1 || v > 1e15) return false;
  *out = uint64_t(v);
  return true;
}

void warn_loose(const char* who, const std::string& path) {
  fr::daemon::log_line(fr::daemon::LogLevel::kWarn, std::string(who) + ": token file " + path +
                                                        " is readable by other users; chmod 600 it");
}

struct ClientFlags {
  std::string coordinator = "127.0.0.1:7470";
  std::string token_file, tls_ca, tls_cert, tls_key;
  bool insecure = false;

  void add(CLI::App* app, bool required_coordinator) {
    auto* o = app->add_option("--coordinator", coordinator, "coordinator address HOST:PORT");
    if (required_coordinator) o->required();
    else o->capture_default_str();
    app->add_option("--token-file", token_file,
                    "file holding the shared token (default: the per-user token file the "
                    "coordinator writes)");
    app->add_flag("--insecure", insecure, "send no token (for a coordinator run with --insecure)");
    app->add_option("--tls-ca", tls_ca, "CA certificate (PEM) to verify the coordinator: TLS");
    app->add_option("--tls-cert", tls_cert, "client certificate (PEM) for mutual TLS");
    app->add_option("--tls-key", tls_key, "client key (PEM) for mutual TLS");
  }

  bool resolve(const char* who, fr::daemon::ClientOptions* out, std::string* error) const {
    out->address = coordinator;
    if (insecure && !token_file.empty()) {
      *error = "--insecure and --token-file exclude each other";
      return false;
    }
    bool loose = false;
    if (!token_file.empty()) {
      if (!fr::daemon::read_token_file(token_file, &out->token, &loose, error)) return false;
      if (loose) warn_loose(who, token_file);
    } else if (!insecure) {
      // Read at each call: the coordinator may create it after we start.
      out->token_file = fr::daemon::default_token_file();
    }
    if (tls_cert.empty() != tls_key.empty()) {
      *error = "--tls-cert and --tls-key go together";
      return false;
    }
    if (!tls_cert.empty() && tls_ca.empty()) {
      *error = "--tls-cert needs --tls-ca";
      return false;
    }
    if (!tls_ca.empty() && !fr::daemon::read_text_file(tls_ca, &out->tls_ca, error)) return false;
    if (!tls_cert.empty() && (!fr::daemon::read_text_file(tls_cert, &out->tls_cert, error) ||
                              !fr::daemon::read_text_file(tls_key, &out->tls_key, error)))
      return false;
    return true;
  }
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"frd: flight-recorder daemon for hung NCCL jobs"};
  app.require_subcommand(1);
  app.set_version_flag("--version", FR_VERSION_LINE("frd"));

  // snapshot
  std::string log_dir = "/dev/shm", out, job;
  CLI::App* snap = app.add_subcommand("snapshot", "snapshot every flight log in a directory into a dump set");
  snap->add_option("--log-dir", log_dir, "directory holding the flight logs")->capture_default_str();
  snap->add_option("--out", out, "dump set directory to write")->required();
  snap->add_option("--job-id", job, "only logs of this job");
  std::vector<std::string> snap_owners, node_owners;
  const char* owner_help = "read only logs owned by this user (name or uid; repeat for several). "
                           "Default: the user frd runs as; any user when frd runs as root";
  snap->add_option("--log-owner", snap_owners, owner_help);
  ContextFlags snap_ctx, node_ctx;
  snap_ctx.add(snap);

  // node
  ClientFlags node_client;
  std::string node_log_dir, node_name, node_dump_dir, node_shared_dir;
  double hb_interval = 1, node_stall_after = 30;
  CLI::App* node = app.add_subcommand("node", "run the node sidecar");
  node_client.add(node, true);
  node->add_option("--log-dir", node_log_dir, "directory holding the flight logs")->required();
  node->add_option("--log-owner", node_owners, owner_help);
  node->add_option("--node-name", node_name, "this node's name (default: the host name)");
  node->add_option("--heartbeat-interval", hb_interval, "seconds between heartbeats")
      ->capture_default_str()->check(CLI::Range(0.05, 3600.0));
  node->add_option("--stall-after", node_stall_after, "seconds in flight before an op is reported at once")
      ->capture_default_str()->check(CLI::Range(0.1, 1e6));
  node->add_option("--dump-dir", node_dump_dir, "spool: dumps wait here until delivered");
  std::string upload_rate;
  node->add_option("--upload-rate", upload_rate,
                   "most bytes per second an upload may send, e.g. 50M (default: no limit)");
  std::string node_metrics_listen;
  node->add_option("--metrics-listen", node_metrics_listen,
                   "HOST:PORT for this node daemon's Prometheus metrics over HTTP");
  node->add_option("--shared-dump-dir", node_shared_dir,
                   "the coordinator's --dump-dir as mounted on this node: write dumps there "
                   "instead of uploading them");
  node_ctx.add(node);
  // stacks (the helper)
  std::vector<std::string> stack_pids;
  int64_t stack_budget_ms = 5000, stack_hold_ms = 0;
  std::string stack_py_spy;
  CLI::App* stacks = app.add_subcommand(
      "stacks", "print the stacks of processes as fr-stacks/1 lines (run by snapshot and node)");
  stacks->add_option("--pid", stack_pids, "PID or PID:RANK (repeat)")->required();
  stacks->add_option("--budget-ms", stack_budget_ms, "milliseconds for all of them")
      ->capture_default_str()->check(CLI::Range(int64_t(1), int64_t(600000)));
  stacks->add_option("--py-spy", stack_py_spy, "py-spy for Python processes (default: on PATH)");
  stacks->add_option("--hold-ms", stack_hold_ms, "keep each process stopped this long (tests)")
      ->check(CLI::Range(int64_t(0), int64_t(600000)));

  // coordinator
  std::string listen = "127.0.0.1:7470", port_file, c_dump_dir, c_job, metrics_listen;
  std::string c_token_file, c_tls_cert, c_tls_key, c_tls_client_ca;
  int expect_ranks = -1;
  std::string c_stall_after = "auto";
  double stall_factor = 5, hb_timeout = 10, dump_deadline = 20;
  CLI::App* coord = app.add_subcommand("coordinator", "run the job coordinator");
  coord->add_option("--listen", listen, "address to serve on (port 0: any free port)")->capture_default_str();
  coord->add_option("--port-file", port_file, "write the bound port here once serving");
  coord->add_option("--dump-dir", c_dump_dir, "where incidents are written: DIR/<job>/<incident>/")->required();
  coord->add_option("--job-id", c_job, "the job (default: learned from the logs)");
  coord->add_option("--expect-ranks", expect_ranks, "how many ranks the job has")->check(CLI::Range(1, 1 << 24));
  coord->add_option("--stall-after", c_stall_after,
                    "seconds an op may be in flight before an incident, or auto: "
                    "max(3 s, factor x the communicator's learned p99), at most 30 s")
      ->capture_default_str();
  coord->add_option("--stall-factor", stall_factor,
                    "with --stall-after auto: the factor over the learned p99")
      ->capture_default_str()->check(CLI::Range(1.0, 1000.0));
  coord->add_option("--heartbeat-timeout", hb_timeout, "seconds of silence before a node counts as lost")
      ->capture_default_str()->check(CLI::Range(0.5, 1e6));
  coord->add_option("--dump-deadline", dump_deadline, "seconds to wait for every node's dump")
      ->capture_default_str()->check(CLI::Range(0.5, 3600.0));
  coord->add_option("--metrics-listen", metrics_listen,
                    "HOST:PORT for HTTP: the web page (/), incidents (/incidents/ID), status JSON "
                    "(/api/v1/status) and Prometheus metrics (/metrics)");
  std::string on_verdict;
  double on_verdict_timeout = 300;
  coord->add_option("--on-verdict", on_verdict,
                    "shell command run for every dump set written, with FR_INCIDENT_DIR, "
                    "FR_VERDICT, FR_CULPRITS, ... in its environment");
  coord->add_option("--on-verdict-timeout", on_verdict_timeout,
                    "seconds before the --on-verdict command is killed")
      ->capture_default_str()->check(CLI::Range(0.1, 86400.0));
  coord->add_option("--token-file", c_token_file,
                    "shared token every peer must present (default: the per-user token file, "
                    "created with a random token when absent)");
  bool c_insecure = false;
  coord->add_flag("--insecure", c_insecure,
                  "no token: any local user may talk to the coordinator (loopback only)");
  coord->add_option("--tls-cert", c_tls_cert, "server certificate (PEM): TLS");
  coord->add_option("--tls-key", c_tls_key, "server key (PEM)");
  coord->add_option("--tls-client-ca", c_tls_client_ca, "CA (PEM) that client certificates must chain to: mutual TLS");

  // status, dump
  ClientFlags status_client, dump_client;
  bool json = false, status_summary = false;
  size_t status_offset = 0, status_limit = 0;
  CLI::App* status = app.add_subcommand("status", "show nodes, ranks, progress and incidents");
  status_client.add(status, false);
  status->add_flag("--json", json, "print the frd-status/1 document");
  status->add_option("--offset", status_offset, "first node to show (status is paged by nodes)");
  status->add_option("--limit", status_limit, "most nodes to show (default: the coordinator's page)");
  status->add_flag("--summary", status_summary, "nodes without their processes");
  std::string reason = "manual dump";
  CLI::App* dump = app.add_subcommand("dump", "ask every node to dump now");
  dump_client.add(dump, false);
  dump->add_option("--reason", reason, "why (kept with the incident)")->capture_default_str();

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);  // prints help or the error
    return rc == 0 ? 0 : 2;
  }
  std::string error;

  if (snap->parsed()) return run_snapshot(log_dir, out, job, snap_owners, snap_ctx);
  if (stacks->parsed()) {
    std::vector<int> pids, ranks;
    for (const auto& p : stack_pids) {
      char* end = nullptr;
      long pid = std::strtol(p.c_str(), &end, 10);
      long rank = -1;
      if (end && *end == ':') rank = std::strtol(end + 1, &end, 10);
      if (pid <= 0 || !end || *end) {
        std::fprintf(stderr, "frd stacks: --pid: '%s' is not PID or PID:RANK\n", p.c_str());
        return 2;
      }
      pids.push_back(int(pid));
      ranks.push_back(int(rank));
    }
    return fr::daemon::run_stacks_helper(pids, ranks, stack_budget_ms * 1'000'000, stack_py_spy,
                                         stack_hold_ms * 1'000'000);
  }

  if (node->parsed()) {
    fr::daemon::NodeOptions o;
    if (!node_client.resolve("frd node", &o.client, &error)) {
      std::fprintf(stderr, "frd node: %s\n", error.c_str());
      return 2;
    }
    o.log_dir = node_log_dir;
    if (!log_owners(node_owners, &o.log_owners, &error)) {
      std::fprintf(stderr, "frd node: --log-owner: %s\n", error.c_str());
      return 2;
    }
    o.node_name = node_name;
    o.spool_dir = node_dump_dir;
    o.shared_dump_dir = node_shared_dir;
    if (!upload_rate.empty() && !parse_rate(upload_rate, &o.upload_bytes_per_sec)) {
      std::fprintf(stderr, "frd node: --upload-rate: '%s' is not a byte count like 65536, 512K or 50M\n",
                   upload_rate.c_str());
      return 2;
    }
    o.heartbeat_interval_ns = to_ns(hb_interval);
    o.stall_after_ns = to_ns(node_stall_after);
    o.stacks = fr::daemon::stack_options(node_ctx.py_spy, node_ctx.stack_budget, node_ctx.no_stacks);
    o.nvml_lib = node_ctx.nvml_lib;
    // One node daemon per log directory (fr-run relies on it); one that cannot make the lock
    // file (say, the directory is missing yet) runs on unlocked.
    fr::daemon::NodeLock node_lock;
    auto locked = node_lock.acquire(node_log_dir, &error);
    if (locked == fr::daemon::NodeLockOutcome::held) {
      std::fprintf(stderr, "frd node: %s\n", error.c_str());
      return 1;
    }
    if (locked == fr::daemon::NodeLockOutcome::failed)
      fr::daemon::log_line(fr::daemon::LogLevel::kWarn, "frd node: " + error + "; running without the node lock");
    // Metrics off loopback follow the coordinator's rule: only behind the job's token.
    fr::daemon::HttpSecurity http_sec;
    if (!node_metrics_listen.empty() && !fr::daemon::is_loopback_address(node_metrics_listen)) {
      if (o.client.token.empty()) {
        std::fprintf(stderr, "frd node: --metrics-listen %s is not loopback only: it needs --token-file "
                     "(scrapers then send 'Authorization: Bearer TOKEN')\n", node_metrics_listen.c_str());
        return 2;
      }
      http_sec.token = o.client.token;
    }
    sigset_t set = block_stop_signals();
    fr::daemon::NodeDaemon d(o);
    if (!d.init(&error)) {
      std::fprintf(stderr, "frd node: %s\n", error.c_str());
      return 1;
    }
    fr::daemon::HttpServer http;
    if (!node_metrics_listen.empty()) {
      http.get("/metrics", [&d](const fr::daemon::HttpServer::Request&) {
        fr::daemon::HttpServer::Response r;
        r.content_type = "text/plain; version=0.0.4";
        r.body = d.metrics();
        return r;
      });
      if (!http.start(node_metrics_listen, http_sec, &error)) {
        std::fprintf(stderr, "frd node: %s\n", error.c_str());
        return 1;
      }
      fr::daemon::log_line(fr::daemon::LogLevel::kInfo,
                           "frd node: metrics on port " + std::to_string(http.port()));
    }
    std::thread runner([&] { d.run(); });
    int sig = 0;
    sigwait(&set, &sig);
    d.stop();
    runner.join();
    return 0;
  }

  if (coord->parsed()) {
    fr::daemon::CoordinatorConfig cfg;
    cfg.dump_dir = c_dump_dir;
    cfg.job_id = c_job;
    cfg.expect_ranks = expect_ranks;
    if (!parse_stall_after(c_stall_after, &cfg, &error)) {
      std::fprintf(stderr, "frd coordinator: --stall-after: %s\n", error.c_str());
      return 2;
    }
    cfg.stall_factor = stall_factor;
    cfg.heartbeat_timeout_ns = to_ns(hb_timeout);
    cfg.dump_deadline_ns = to_ns(dump_deadline);
    cfg.dead_grace_ns = std::min<int64_t>(1'000'000'000, (cfg.stall_auto ? cfg.stall_floor_ns
                                                                          : cfg.stall_after_ns) / 2);
    fr::daemon::ServerOptions so;
    so.listen = listen;
    so.port_file = port_file;
    so.metrics_listen = metrics_listen;
    so.on_verdict = on_verdict;
    so.on_verdict_timeout_ns = to_ns(on_verdict_timeout);
    bool ok = true, loose = false;
    if (c_insecure && !c_token_file.empty()) {
      error = "--insecure and --token-file exclude each other";
      ok = false;
    } else if (!c_token_file.empty()) {
      ok = fr::daemon::read_token_file(c_token_file, &so.token, &loose, &error);
      if (ok && loose) warn_loose("frd coordinator", c_token_file);
    } else if (!c_insecure) {
      std::string path = fr::daemon::default_token_file();
      bool created = false;
      ok = fr::daemon::ensure_token_file(path, &so.token, &created, &error);
      if (ok)
        fr::daemon::log_line(fr::daemon::LogLevel::kInfo, std::string("frd coordinator: token ") +
                                                              (created ? "written to " : "read from ") + path);
    }
    if (ok && c_tls_cert.empty() != c_tls_key.empty()) {
      error = "--tls-cert and --tls-key go together";
      ok = false;
    }
    if (ok && !c_tls_client_ca.empty() && c_tls_cert.empty()) {
      error = "--tls-client-ca needs --tls-cert and --tls-key";
      ok = false;
    }
    if (ok && !c_tls_cert.empty())
      ok = fr::daemon::read_text_file(c_tls_cert, &so.tls_cert, &error) &&
           fr::daemon::read_text_file(c_tls_key, &so.tls_key, &error);
    if (ok && !c_tls_client_ca.empty())
      ok = fr::daemon::read_text_file(c_tls_client_ca, &so.tls_client_ca, &error);
    if (!ok) {
      std::fprintf(stderr, "frd coordinator: %s\n", error.c_str());
      return 2;
    }
    sigset_t set = block_stop_signals();
    fr::daemon::CoordinatorServer server(cfg, so);
    if (!server.start(&error)) {
      std::fprintf(stderr, "frd coordinator: %s\n", error.c_str());
      return 1;
    }
    fr::daemon::log_line(fr::daemon::LogLevel::kInfo,
                         "frd coordinator: serving on port " + std::to_string(server.port()) +
                             (so.tls_cert.empty() ? "" : so.tls_client_ca.empty() ? " (TLS)" : " (mutual TLS)"));
    if (server.metrics_port())
      fr::daemon::log_line(fr::daemon::LogLevel::kInfo, "frd coordinator: web page and metrics on port " +
                                                            std::to_string(server.metrics_port()));
    int sig = 0;
    sigwait(&set, &sig);
    server.shutdown();
    return 0;
  }

  if (status->parsed()) {
    fr::daemon::ClientOptions o;
    if (!status_client.resolve("frd status", &o, &error)) {
      std::fprintf(stderr, "frd status: %s\n", error.c_str());
      return 2;
    }
    nlohmann::json s;
    if (!fr::daemon::fetch_status(o, &s, &error, status_offset, status_limit, status_summary)) {
      std::fprintf(stderr, "frd status: %s\n", error.c_str());
      return 1;
    }
    if (json) std::printf("%s\n", s.dump(2).c_str());
    else std::printf("%s", fr::daemon::render_status(s).c_str());
    return 0;
  }

  if (dump->parsed()) {
    fr::daemon::ClientOptions o;
    if (!dump_client.resolve("frd dump", &o, &error)) {
      std::fprintf(stderr, "frd dump: %s\n", error.c_str());
      return 2;
    }
    std::string id;
    if (!fr::daemon::trigger_dump(o, reason, &id, &error)) {
      std::fprintf(stderr, "frd dump: %s\n", error.c_str());
      return 1;
    }
    std::printf("frd dump: %s\n", id.c_str());
    return 0;
  }
  return 2;
}
