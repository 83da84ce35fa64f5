// frd: one binary for every role. `frd snapshot` takes a consistent snapshot of the flight logs of
// a directory into a dump set without any network; the node and coordinator roles build on it.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <string>

#include "log/snapshot.h"

namespace {

// Exit codes: 0 done (even when some logs were skipped), 1 the dump set could not be written,
// 2 bad usage (CLI11's own code for parse errors).
int run_snapshot(const std::string& log_dir, const std::string& out, const std::string& job) {
  fr::log::SnapshotOptions opts;
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
  std::printf("frd snapshot: %zu process(es) into %s", res.processes.size(), out.c_str());
  if (!res.skipped.empty()) std::printf(" (%zu skipped)", res.skipped.size());
  std::printf("\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"frd: flight-recorder daemon for hung NCCL jobs"};
  app.require_subcommand(1);

  std::string log_dir = "/dev/shm", out, job;
  CLI::App* snap = app.add_subcommand("snapshot", "snapshot every flight log in a directory into a dump set");
  snap->add_option("--log-dir", log_dir, "directory holding the flight logs")->capture_default_str();
  snap->add_option("--out", out, "dump set directory to write")->required();
  snap->add_option("--job-id", job, "only logs of this job");

  CLI11_PARSE(app, argc, argv);
  if (snap->parsed()) return run_snapshot(log_dir, out, job);
  return 2;
}
