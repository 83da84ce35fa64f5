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
// token file (daemon/rpc/client.h): the coordinator creates it (random, 0600) or reuses it; the
// others read it. --insecure on a side means no token there.
//
// Each role is a command of its own (commands.h): snapshot.cpp, node.cpp, coordinator.cpp and
// status.cpp; this file only picks the one named on the command line.
#include "commands.h"

#include "daemon/rpc/client.h"
#include "fr/version.h"

int main(int argc, char** argv) {
  fr::daemon::setup_grpc_process();
  CLI::App app{"frd: flight-recorder daemon for hung NCCL jobs"};
  app.require_subcommand(1);
  app.set_version_flag("--version", FR_VERSION_LINE("frd"));
  frd::SnapshotCommand snapshot;
  frd::NodeCommand node;
  frd::StacksCommand stacks;
  frd::CoordinatorCommand coordinator;
  frd::StatusCommand status;
  frd::DumpCommand dump;
  snapshot.add(app);
  node.add(app);
  stacks.add(app);
  coordinator.add(app);
  status.add(app);
  dump.add(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);  // prints help or the error
    return rc == 0 ? 0 : 2;
  }
  if (snapshot.app->parsed()) return snapshot.run();
  if (stacks.app->parsed()) return stacks.run();
  if (node.app->parsed()) return node.run();
  if (coordinator.app->parsed()) return coordinator.run();
  if (status.app->parsed()) return status.run();
  if (dump.app->parsed()) return dump.run();
  return 2;
}
