// The flags and helpers several of frd's roles share (commands.h).
#include "commands.h"

#include <filesystem>

#include <pthread.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "daemon/base/logger.h"

namespace frd {

const char* const kOwnerHelp =
    "read only logs owned by this user (name or uid; repeat for several). "
    "Default: the user frd runs as; any user when frd runs as root";

bool log_owners(const std::vector<std::string>& users, fr::log::LogOwners* out,
                std::string* error) {
  if (users.empty()) return true;
  fr::log::LogOwners o;
  for (const auto& u : users)
    if (!o.add(u, error)) return false;
  *out = o;
  return true;
}

int64_t to_ns(double seconds) { return int64_t(seconds * 1e9); }

CLI::Validator number_range(double lo, double hi) {
  auto text = [](double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", v);
    return std::string(buf);
  };
  const std::string range = text(lo) + " to " + text(hi);
  return CLI::Validator(
      [lo, hi, range](std::string& s) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(s.c_str(), &end);
        if (s.empty() || *end != '\0' || !std::isfinite(v) || v < lo || v > hi)
          return "'" + s + "' is not a number from " + range;
        return std::string();
      },
      "NUMBER in [" + range + "]");
}

sigset_t block_stop_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::signal(SIGPIPE, SIG_IGN);
  return set;
}

void warn_loose(const char* who, const std::string& path) {
  fr::daemon::log_line(
      fr::daemon::LogLevel::kWarn,
      std::string(who) + ": token file " + path + " is readable by other users; chmod 600 it");
}

void ContextFlags::add(CLI::App* app) {
  app->add_option(
      "--py-spy", py_spy,
      "py-spy to run for the Python frames of Python processes (default: py-spy on PATH)");
  app->add_option("--stack-budget", stack_budget,
                  "seconds all stacks of one dump may take together (0: no stacks)")
      ->capture_default_str()
      ->check(number_range(0.0, 600.0));
  app->add_flag("--no-stacks", no_stacks, "take no stacks");
  app->add_option("--nvml-lib", nvml_lib, "the NVML library to read GPU health from")
      ->capture_default_str();
}

void ClientFlags::add(CLI::App* app, bool required_coordinator) {
  auto* o = app->add_option("--coordinator", coordinator, "coordinator address HOST:PORT");
  if (required_coordinator)
    o->required();
  else
    o->capture_default_str();
  app->add_option("--token-file", token_file,
                  "file holding the shared token (default: the per-user token file the "
                  "coordinator writes)");
  app->add_flag("--insecure", insecure, "send no token (for a coordinator run with --insecure)");
  app->add_option("--tls-ca", tls_ca, "CA certificate (PEM) to verify the coordinator: TLS");
  app->add_option("--tls-cert", tls_cert, "client certificate (PEM) for mutual TLS");
  app->add_option("--tls-key", tls_key, "client key (PEM) for mutual TLS");
}

bool ClientFlags::resolve(const char* who, fr::daemon::ClientOptions* out,
                          std::string* error) const {
  out->address = coordinator;
  if (insecure && !token_file.empty()) {
    *error = "--insecure and --token-file exclude each other";
    return false;
  }
  bool loose = false;
  if (!token_file.empty()) {
    if (!fr::daemon::read_token_file(token_file, &out->token, &loose, error)) return false;
    if (loose) warn_loose(who, token_file);
    std::error_code ec;
    const auto abs = std::filesystem::absolute(token_file, ec);
    out->token_from = ec ? token_file : abs.string();
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
}  // namespace frd
