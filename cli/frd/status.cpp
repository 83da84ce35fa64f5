// frd status and frd dump: the two questions a person asks the coordinator (daemon/rpc/client.h).
#include "commands.h"

#include <cstdio>

namespace frd {

void StatusCommand::add(CLI::App& parent) {
  app = parent.add_subcommand("status", "show nodes, ranks, progress and incidents");
  client.add(app, false);
  app->add_flag("--json", json, "print the frd-status/1 document");
  app->add_option("--offset", offset, "first node to show (status is paged by nodes)")
      ->check(CLI::Range(size_t(0), size_t(UINT32_MAX)));
  app->add_option("--limit", limit, "most nodes to show (default: the coordinator's page)")
      ->check(CLI::Range(size_t(0), size_t(UINT32_MAX)));
  app->add_flag("--summary", summary, "nodes without their processes");
}

int StatusCommand::run() const {
  fr::daemon::ClientOptions o;
  std::string error;
  if (!client.resolve("frd status", &o, &error)) {
    std::fprintf(stderr, "frd status: %s\n", error.c_str());
    return 2;
  }
  nlohmann::json s;
  if (!fr::daemon::fetch_status(o, &s, &error, offset, limit, summary)) {
    std::fprintf(stderr, "frd status: %s\n", error.c_str());
    return 1;
  }
  if (json)
    std::printf("%s\n", s.dump(2).c_str());
  else
    std::printf("%s", fr::daemon::render_status(s.get<fr::daemon::CoordinatorStatus>()).c_str());
  return 0;
}

void DumpCommand::add(CLI::App& parent) {
  app = parent.add_subcommand("dump", "ask every node to dump now");
  client.add(app, false);
  app->add_option("--reason", reason, "why (kept with the incident)")->capture_default_str();
}

int DumpCommand::run() const {
  fr::daemon::ClientOptions o;
  std::string error;
  if (!client.resolve("frd dump", &o, &error)) {
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

}  // namespace frd
