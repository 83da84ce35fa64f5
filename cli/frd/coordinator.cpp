// frd coordinator: one per job (daemon/rpc/server.h). Turns the flags into the state machine's config
// and the server's options (its token: given, the per-user default, or none with --insecure; TLS),
// serves, and shuts down cleanly on SIGINT or SIGTERM.
#include "commands.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include <unistd.h>

#include "daemon/base/logger.h"
#include "daemon/rpc/client.h"
#include "daemon/rpc/server.h"

namespace frd {

namespace {

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

// The token and the TLS files of the server.
bool credentials(const CoordinatorCommand& c, fr::daemon::ServerOptions* so, std::string* error) {
  bool loose = false;
  if (c.insecure && !c.token_file.empty()) {
    *error = "--insecure and --token-file exclude each other";
    return false;
  }
  if (!c.token_file.empty()) {
    if (!fr::daemon::read_token_file(c.token_file, &so->token, &loose, error)) return false;
    if (loose) warn_loose("frd coordinator", c.token_file);
  } else if (!c.insecure) {
    std::string path = fr::daemon::default_token_file();
    bool created = false;
    if (!fr::daemon::ensure_token_file(path, &so->token, &created, error)) return false;
    fr::daemon::log_line(
        fr::daemon::LogLevel::kInfo,
        std::string("frd coordinator: token ") + (created ? "written to " : "read from ") + path);
  }
  if (c.tls_cert.empty() != c.tls_key.empty()) {
    *error = "--tls-cert and --tls-key go together";
    return false;
  }
  if (!c.tls_client_ca.empty() && c.tls_cert.empty()) {
    *error = "--tls-client-ca needs --tls-cert and --tls-key";
    return false;
  }
  if (!c.tls_cert.empty() && !(fr::daemon::read_text_file(c.tls_cert, &so->tls_cert, error) &&
                               fr::daemon::read_text_file(c.tls_key, &so->tls_key, error)))
    return false;
  if (!c.tls_client_ca.empty() &&
      !fr::daemon::read_text_file(c.tls_client_ca, &so->tls_client_ca, error))
    return false;
  return true;
}

// How to open the web page: its address, and where the token it asks for is (never the token
// itself, which the log must not carry).
std::string how_to_open(const CoordinatorCommand& c, const fr::daemon::ServerOptions& so,
                        int port) {
  std::string host = c.metrics_listen.substr(0, c.metrics_listen.rfind(':'));
  if (host.empty() || host == "0.0.0.0" || host == "[::]") {
    char name[256] = {};
    host = ::gethostname(name, sizeof name - 1) == 0 && name[0] ? name : "localhost";
  }
  const std::string url = "http://" + host + ":" + std::to_string(port) + "/";
  const bool asks = !so.token.empty() &&
                    !(so.http_trust_loopback && fr::daemon::is_loopback_address(c.metrics_listen));
  if (!asks) return "open the web page at " + url;
  std::error_code ec;
  std::string file = c.token_file.empty() ? fr::daemon::default_token_file() : c.token_file;
  const auto abs = std::filesystem::absolute(file, ec);
  if (!ec) file = abs.string();
  return "open the web page at " + url + "?token=TOKEN once (a cookie keeps it), TOKEN being " +
         "the contents of " + file + ": " + url + "?token=$(cat " + file + ")";
}

}  // namespace

void CoordinatorCommand::add(CLI::App& parent) {
  app = parent.add_subcommand("coordinator", "run the job coordinator");
  app->add_option("--listen", listen, "address to serve on (port 0: any free port)")
      ->capture_default_str();
  app->add_option("--port-file", port_file, "write the bound port here once serving");
  app->add_option("--dump-dir", dump_dir, "where incidents are written: DIR/<job>/<incident>/")
      ->required();
  app->add_option("--job-id", job, "the job (default: learned from the logs)");
  app->add_option("--expect-ranks", expect_ranks, "how many ranks the job has")
      ->check(CLI::Range(1, 1 << 24));
  app->add_option("--stall-after", stall_after,
                  "seconds an op may be in flight before an incident, or auto: "
                  "max(3 s, factor x the communicator's learned p99), at most 30 s")
      ->capture_default_str();
  app->add_option("--stall-factor", stall_factor,
                  "with --stall-after auto: the factor over the learned p99")
      ->capture_default_str()
      ->check(number_range(1.0, 1000.0));
  app->add_option("--heartbeat-timeout", heartbeat_timeout,
                  "seconds of silence before a node counts as lost")
      ->capture_default_str()
      ->check(number_range(0.5, 1e6));
  app->add_option("--dump-deadline", dump_deadline, "seconds to wait for every node's dump")
      ->capture_default_str()
      ->check(number_range(0.5, 3600.0));
  app->add_option("--metrics-listen", metrics_listen,
                  "HOST:PORT for HTTP: the web page (/), incidents (/incidents/ID), status JSON "
                  "(/api/v1/status) and Prometheus metrics (/metrics)");
  app->add_option("--on-verdict", on_verdict,
                  "shell command run for every dump set written, with FR_INCIDENT_DIR, "
                  "FR_VERDICT, FR_CULPRITS, ... in its environment");
  app->add_option("--on-verdict-timeout", on_verdict_timeout,
                  "seconds before the --on-verdict command is killed")
      ->capture_default_str()
      ->check(number_range(0.1, 86400.0));
  app->add_option("--token-file", token_file,
                  "shared token every peer must present (default: the per-user token file, "
                  "created with a random token when absent)");
  app->add_flag("--insecure", insecure,
                "no token: any local user may talk to the coordinator (loopback only)");
  app->add_flag("--http-trust-loopback", http_trust_loopback,
                "the web page, status and metrics on a loopback --metrics-listen without the token "
                "(by default they ask for it when there is one)");
  app->add_option("--tls-cert", tls_cert, "server certificate (PEM): TLS");
  app->add_option("--tls-key", tls_key, "server key (PEM)");
  app->add_option("--tls-client-ca", tls_client_ca,
                  "CA (PEM) that client certificates must chain to: mutual TLS");
}

int CoordinatorCommand::run() const {
  fr::daemon::CoordinatorConfig cfg;
  std::string error;
  cfg.dump_dir = dump_dir;
  cfg.job_id = job;
  cfg.expect_ranks = expect_ranks;
  if (!parse_stall_after(stall_after, &cfg, &error)) {
    std::fprintf(stderr, "frd coordinator: --stall-after: %s\n", error.c_str());
    return 2;
  }
  cfg.stall_factor = stall_factor;
  cfg.heartbeat_timeout_ns = to_ns(heartbeat_timeout);
  cfg.dump_deadline_ns = to_ns(dump_deadline);
  cfg.dead_grace_ns = std::min<int64_t>(
      1'000'000'000, (cfg.stall_auto ? cfg.stall_floor_ns : cfg.stall_after_ns) / 2);
  fr::daemon::ServerOptions so;
  so.listen = listen;
  so.port_file = port_file;
  so.metrics_listen = metrics_listen;
  so.http_trust_loopback = http_trust_loopback;
  so.on_verdict = on_verdict;
  so.on_verdict_timeout_ns = to_ns(on_verdict_timeout);
  if (!credentials(*this, &so, &error)) {
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
                           (so.tls_cert.empty()        ? ""
                            : so.tls_client_ca.empty() ? " (TLS)"
                                                       : " (mutual TLS)"));
  if (server.metrics_port()) {
    fr::daemon::log_line(
        fr::daemon::LogLevel::kInfo,
        "frd coordinator: web page and metrics on port " + std::to_string(server.metrics_port()));
    fr::daemon::log_line(fr::daemon::LogLevel::kInfo,
                         "frd coordinator: " + how_to_open(*this, so, server.metrics_port()));
  }
  int sig = 0;
  sigwait(&set, &sig);
  server.shutdown();
  return 0;
}

}  // namespace frd
