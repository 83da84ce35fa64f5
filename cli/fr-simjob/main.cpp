// fr-simjob: runs a small simulated training job (N nodes x R ranks on the NCCL/CUDA emulation,
// optionally under the agent and the frd daemons) with faults injected on purpose, and leaves a
// dump set and result.json behind. The end-to-end tests, the demo and the benchmarks use it.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <string>
#include <vector>

#include "fr/version.h"
#include "job.h"
#include "launcher.h"

namespace {

using namespace fr::simjob;

// What the command line gives before it is checked: the options, and the values parsed after.
struct CommandLine {
  LaunchOptions o;
  std::vector<std::string> fault_specs;
  bool no_agent = false;
  std::string pause;
};

const char kFooter[] =
    "Fault kinds (--fault rank=R,step=S,kind=K[,comm=world|tp|pp|dp][,ms=M][,xid=X][,peer=P]\n"
    "[,factor=F], steps count\n"
    "from 0; xid=X: rank R's emulated GPU reports Xid X when the fault strikes):\n"
    "  hang-host       rank R blocks forever on the host before step S's first call\n"
    "  skip            rank R skips its call on comm (default dp) at step S\n"
    "  crash           rank R dies (SIGKILL) at step S\n"
    "  gpu-stall       rank R's stream stalls before step S's op on comm (default dp);\n"
    "                  ms=M ends the stall after M ms, else it lasts forever\n"
    "  mismatch-count, mismatch-dtype, mismatch-op\n"
    "                  rank R calls step S's op on comm (world, tp or dp; default dp)\n"
    "                  with a different count, dtype or reduction\n"
    "  mismatch-root   rank R calls step S's world broadcast with another root\n"
    "  p2p-skip        rank R skips one pipeline send at step S\n"
    "  slow            rank R sleeps ms=M per step from step S on\n"
    "  gpu-slow        rank R's GPU works factor=F times slower from step S on (its collectives'\n"
    "                  own work; the peers wait for it; its NVML reports thermal throttling)\n"
    "  link-slow       what rank R transmits to global rank peer=P takes factor=F times longer\n"
    "                  per channel step from step S on (every communicator holding both)\n"
    "Transport faults (the emulation's channels, proxies and links; comm world, tp, dp; default dp):\n"
    "  chan-stall      rank R's kernel stops on channel=C (all without it) in collective nth=N\n"
    "                  of comm in step S (default 0), at channel step at=K (default 0)\n"
    "  proxy-stall     rank R's proxy stops sending to global rank peer=P, from step at=K\n"
    "  proxy-recv-stall\n"
    "                  rank R's proxy stops receiving from peer=P (posts no buffer)\n"
    "  link-down       what rank R transmits to peer=P never arrives\n"
    "\n"
    "Exit codes: 0 the job completed or a dump set was taken; 2 bad usage; 3 setup failed\n"
    "(missing build outputs, unwritable --out); 4 the job did not complete and no dump set\n"
    "was taken; 5 --daemons: no verdict from the coordinator; 128+N interrupted by signal N.";

void add_options(CLI::App& app, CommandLine& c) {
  app.add_option("--nodes", c.o.shape.nodes, "simulated nodes")
      ->required()
      ->check(CLI::Range(1, 1024));
  app.add_option("--ranks-per-node", c.o.shape.ranks_per_node, "ranks per node")
      ->required()
      ->check(CLI::Range(1, 1024));
  app.add_option("--tp", c.o.shape.tp, "tensor-parallel group size (consecutive ranks in a node)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  app.add_option("--pp", c.o.shape.pp, "pipeline stages")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  app.add_option("--steps", c.o.shape.steps, "training steps")
      ->required()
      ->check(CLI::Range(1, 10000000));
  app.add_option("--fault", c.fault_specs, "inject a fault (repeatable; see below)");
  app.add_option("--out", c.o.out_dir,
                 "output directory: nodeK/shm (flight logs), nodeK/rankR.log, dumps/, result.json; "
                 "what an earlier run left there is replaced")
      ->required();
  auto* snapshot_after =
      app.add_option("--snapshot-after", c.o.snapshot_after_s,
                     "take the dump set and stop once no rank has progressed for SEC seconds")
          ->check(CLI::PositiveNumber);
  app.add_flag("--graphs", c.o.graphs,
               "after one eager warm-up step, capture each rank's step into one CUDA graph and "
               "replay it for every later step (faults then act on replays)");
  app.add_flag("--run-ahead", c.o.run_ahead,
               "with --graphs: launch each replay before the previous one has finished on the "
               "stream (the host waits only for the replay before that), as a loop that never "
               "reads its loss does; results are then not checked")
      ->needs(app.get_option("--graphs"));
  app.add_option(
         "--elastic", c.o.shape.elastic,
         "at step STEP the highest rank leaves; the others revoke and shrink the world "
         "communicator, a fresh process takes the freed rank with ncclCommGrow, and the "
         "groups are split again (a fault on that rank at STEP or later hits the new process)")
      ->check(CLI::Range(0, 10000000));
  app.add_flag("--no-agent", c.no_agent, "run the ranks without the agent (no flight logs)");
  auto* daemons = app.add_flag("--daemons", c.o.daemons,
                               "run an frd coordinator and one frd node per simulated node, and "
                               "stop at their first verdict");
  daemons->excludes(snapshot_after);  // with the daemons, the coordinator decides when to dump
  app.add_option("--stall-after", c.o.stall_after,
                 "--daemons: the coordinator's stall threshold: auto (learned per communicator, "
                 "frd's default) or seconds")
      ->capture_default_str()
      ->check([](const std::string& v) -> std::string {
        if (v == "auto") return "";
        char* end = nullptr;
        double x = std::strtod(v.c_str(), &end);
        return !v.empty() && *end == '\0' && x > 0 ? "" : "auto or a positive number of seconds";
      })
      ->needs(daemons);
  app.add_option("--step-ms", c.o.shape.step_ms,
                 "host work per step in ms before its first call (0: none)")
      ->capture_default_str()
      ->check(CLI::Range(0, 3600000));
  app.add_option("--step-jitter", c.o.shape.jitter,
                 "J: one step in ten of each rank takes 1 to J times --step-ms")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  app.add_option("--seed", c.o.shape.seed,
                 "N: which steps of each rank --step-jitter lengthens, and by how much (the same "
                 "N gives the same draw)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 30));
  app.add_option(
      "--pause", c.pause,
      "step=S,ms=M[,every=N]: every rank pauses M ms at the start of step S (a "
      "checkpoint), and again every N steps after it; every=N,ms=M: at steps N, 2N, ...");
  app.add_option("--gpu-us", c.o.shape.gpu_us,
                 "US: each collective's own GPU work and each channel step's transmission take US "
                 "microseconds on the emulation (default 0, instantaneous; 1000 with a gpu-slow or "
                 "link-slow fault)")
      ->check(CLI::Range(0, 1000000));
  app.add_option("--verdict-timeout", c.o.verdict_timeout_s,
                 "--daemons: give up this many seconds after the stall threshold")
      ->capture_default_str()
      ->check(CLI::PositiveNumber)
      ->needs(daemons);
  app.add_flag("--shared-dump-dir", c.o.shared_dump_dir,
               "--daemons: the node daemons write their dumps straight into the coordinator's "
               "dump dir (frd node --shared-dump-dir) instead of uploading them")
      ->needs(daemons);
  app.add_option("--gpu-sample-us", c.o.gpu_sample_us,
                 "--daemons: the node daemons' frd node --gpu-sample-us (0: off)")
      ->check(CLI::Range(int64_t(0), int64_t(1'000'000)))
      ->needs(daemons);
  app.add_option("--stack-budget", c.o.stack_budget_s,
                 "time budget in seconds for all stacks of a dump: the node daemons' (frd node "
                 "--stack-budget) with --daemons, else fr-simjob's own dump set's (default: "
                 "frd's, 5 s)")
      ->check(CLI::PositiveNumber);
  app.add_flag("--python", c.o.python,
               "the ranks are Python programs calling NCCL through ctypes, as vLLM's pynccl "
               "does (bin/fr-simjob-rank.py, run by python3)");
  app.add_flag("--quiet", c.o.quiet, "print nothing but errors");
}

// The checks CLI11 cannot make: the fault specifications, --pause, and the job's shape with its
// faults. False (after one line on stderr) when the command line is wrong.
bool finish_options(CommandLine& c) {
  c.o.agent = !c.no_agent;
  if (c.o.daemons && !c.o.agent) {
    std::fprintf(stderr, "fr-simjob: --daemons needs the agent (drop --no-agent)\n");
    return false;
  }
  for (const std::string& spec : c.fault_specs) {
    Fault f;
    std::string error;
    if (!parse_fault(spec, &f, &error)) {
      std::fprintf(stderr, "fr-simjob: %s\n", error.c_str());
      return false;
    }
    c.o.faults.push_back(f);
  }
  std::string error;
  if (!c.pause.empty() && !parse_pause(c.pause, &c.o.shape, &error)) {
    std::fprintf(stderr, "fr-simjob: %s\n", error.c_str());
    return false;
  }
  if (!validate(c.o.shape, &c.o.faults, &error)) {
    std::fprintf(stderr, "fr-simjob: %s\n", error.c_str());
    return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  CommandLine c;
  CLI::App app{"fr-simjob: run a simulated NCCL training job with injected faults"};
  app.set_version_flag("--version", FR_VERSION_LINE("fr-simjob"));
  app.footer(kFooter);
  add_options(app, c);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : kExitUsage;
  }
  if (!finish_options(c)) return kExitUsage;
  return run_job(c.o);
}
