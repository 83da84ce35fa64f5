// frd snapshot and frd stacks: a dump set from a local directory, without any daemon, and the stack
// capture helper that both snapshot and the node daemon run (daemon/host/stacks.h).
#include "commands.h"

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>

#include <set>

#include "daemon/base/proc_file.h"
#include "daemon/host/nvml.h"
#include "daemon/host/stacks.h"
#include "daemon/host/torch_dumps.h"
#include "common/files.h"
#include "log/snapshot.h"

namespace frd {

void SnapshotCommand::add(CLI::App& parent) {
  app =
      parent.add_subcommand("snapshot", "snapshot every flight log in a directory into a dump set");
  app->add_option("--log-dir", log_dir, "directory holding the flight logs")->capture_default_str();
  app->add_option("--out", out, "dump set directory to write")->required();
  app->add_option("--job-id", job, "only logs of this job");
  app->add_option("--log-owner", owners, kOwnerHelp);
  context.add(app);
}

int SnapshotCommand::run() const {
  const ContextFlags& ctx = context;
  fr::log::SnapshotOptions opts;
  std::string error;
  if (!log_owners(owners, &opts.owners, &error)) {
    std::fprintf(stderr, "frd snapshot: --log-owner: %s\n", error.c_str());
    return 2;
  }
  opts.log_dir = log_dir;
  opts.out_dir = out;
  opts.job_id = job;
  // torch's own recorder of the processes fr-run started, asked first (daemon/host/torch_dumps.h).
  const fr::daemon::TorchAsked torch = fr::daemon::ask_torch_dumps(log_dir, opts.owners, job);
  fr::log::SnapshotResult res = fr::log::snapshot_dir(opts);
  for (const auto& skip : res.skipped)
    std::fprintf(stderr, "frd snapshot: skipped %s: %s\n", skip.file.c_str(), skip.error.c_str());
  if (!res.ok()) {
    std::fprintf(stderr, "frd snapshot: %s\n", res.error.c_str());
    return 1;
  }
  const std::string node = res.processes.empty() || res.processes.front().host.empty()
                               ? std::string("localhost")
                               : res.processes.front().host;
  fr::daemon::TorchGathered tg =
      fr::daemon::gather_torch_dumps(log_dir, torch, node, out, 10'000'000'000);
  for (const auto& n : tg.notes)
    std::fprintf(stderr, "frd snapshot: no torch dump for %s\n", n.c_str());
  std::vector<fr::daemon::StackTarget> targets;
  std::set<int> logged;
  for (const auto& p : res.processes) {
    targets.push_back({p.pid, p.rank, p.file, p.alive, p.source});
    logged.insert(p.pid);
  }
  size_t unrecorded = 0;
  for (const auto& u : torch.registered)
    if (!logged.count(u.pid)) {
      ++unrecorded;
      targets.push_back({u.pid, u.rank, fr::daemon::torch_dump_name(node, u), true,
                         fr::daemon::proc_file_path(log_dir, u.pid)});
    }
  fr::daemon::StacksTaken st = fr::daemon::take_stacks(
      fr::daemon::stack_options(ctx.py_spy, ctx.stack_budget, ctx.no_stacks), targets, out);
  for (const auto& n : st.notes)
    std::fprintf(stderr, "frd snapshot: no stacks for %s\n", n.c_str());
  // GPU health: Xid events are only those that arrive while we watch, so none here.
  fr::daemon::GpuMonitor gpus;
  std::string why;
  gpus.open(ctx.nvml_lib, &why);
  fr::log::NodeGpus g = gpus.read(true);
  g.node = res.processes.empty() ? std::string() : res.processes.front().host;
  if (g.node.empty()) g.node = "localhost";
  std::string err;
  if (!fr::files::write_atomic(out + "/" + g.node + fr::log::kGpuSuffix, fr::log::gpus_to_text(g),
                               &err))
    std::fprintf(stderr, "frd snapshot: %s\n", err.c_str());
  std::printf("frd snapshot: %zu process(es) into %s", res.processes.size(), out.c_str());
  if (!res.skipped.empty()) std::printf(" (%zu skipped)", res.skipped.size());
  // Processes fr-run started that have no flight log: said, not passed over.
  if (unrecorded > 0)
    std::printf("; %zu process(es) under fr-run that have not called NCCL or NIXL", unrecorded);
  if (!torch.asked.empty())
    std::printf("; torch's recorder of %zu of %zu", tg.files.size(), torch.asked.size());
  std::printf(
      "; stacks of %zu in %.2f s; %s\n", st.taken, double(st.took_ns) / 1e9,
      g.error.empty() ? (std::to_string(g.gpus.size()) + " GPU(s)").c_str() : g.error.c_str());
  return 0;
}

void StacksCommand::add(CLI::App& parent) {
  app = parent.add_subcommand(
      "stacks", "print the stacks of processes as fr-stacks/1 lines (run by snapshot and node)");
  app->add_option("--pid", pids, "PID or PID:RANK (repeat)")->required();
  app->add_option("--budget-ms", budget_ms, "milliseconds for all of them")
      ->capture_default_str()
      ->check(CLI::Range(int64_t(1), int64_t(600000)));
  app->add_option("--py-spy", py_spy, "py-spy for Python processes (default: on PATH)");
  app->add_option("--hold-ms", hold_ms, "keep each process stopped this long (tests)")
      ->check(CLI::Range(int64_t(0), int64_t(600000)));
}

int StacksCommand::run() const {
  std::vector<int> pid_list, ranks;
  for (const auto& p : pids) {
    // errno catches a number past long (strtol's LONG_MAX, which as an int is -1: every process).
    char* end = nullptr;
    errno = 0;
    long pid = std::strtol(p.c_str(), &end, 10);
    long rank = -1;
    if (end && *end == ':') rank = std::strtol(end + 1, &end, 10);
    if (errno != 0 || pid <= 0 || pid > INT_MAX || rank < -1 || rank > INT_MAX || !end || *end) {
      std::fprintf(stderr, "frd stacks: --pid: '%s' is not PID or PID:RANK\n", p.c_str());
      return 2;
    }
    pid_list.push_back(int(pid));
    ranks.push_back(int(rank));
  }
  return fr::daemon::run_stacks_helper(pid_list, ranks, budget_ms * 1'000'000, py_spy,
                                       hold_ms * 1'000'000);
}

}  // namespace frd
