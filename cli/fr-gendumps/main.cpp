// fr-gendumps: large synthetic dump sets with a planted fault, for benchmarks and tests.
//
//   fr-gendumps --ranks N --entries M [--fault SPEC]... --out DIR
//
// SPEC follows fr-simjob: "rank=R,step=S,kind=K[,comm=world|tp][,ms=M]" (or just the kind).
// Exit codes: 0 written; 2 bad usage; 4 the dump set could not be written.
#include <iostream>

#include <CLI/CLI.hpp>

#include "synth/synth.h"
#include "fr/version.h"

int main(int argc, char** argv) {
  CLI::App app{"fr-gendumps: write a synthetic dump set with a planted fault"};
  app.set_version_flag("--version", FR_VERSION_LINE("fr-gendumps"));
  fr::synth::Spec spec;
  std::vector<std::string> faults;
  std::string out;
  app.add_option("--ranks", spec.ranks, "ranks in the job")
      ->required()
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--entries", spec.entries, "records kept per rank (ring capacity)")
      ->required()
      ->check(CLI::Range(1, 1 << 22));
  app.add_option("--steps", spec.steps, "training steps (default: enough to wrap every ring)");
  app.add_option("--ranks-per-host", spec.ranks_per_host, "ranks per simulated host")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--tp", spec.tp, "tensor-parallel group size (1: none)")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--fault", faults,
                 "rank=R,step=S,kind=K[,comm=world|tp][,ms=M][,factor=F] (repeatable)")
      ->allow_extra_args(false);
  app.add_option("--omit", spec.omit_ranks, "ranks whose dump is left out (repeatable)")
      ->allow_extra_args(false);
  app.add_option("--host-skew-ns", spec.host_skew_ns,
                 "clock skew per host (corrected in the manifest)");
  app.add_option("--job-id", spec.job_id, "job id written in the logs");
  app.add_option("--threads", spec.threads, "writer threads (0: one per core)");
  bool no_gpu = false;
  app.add_flag(
      "--dir-per-node", spec.dir_per_host,
      "one dump set per node (OUT/node<N>/, each with its manifest), as node daemons write them");
  app.add_flag("--no-gpu-tracking", no_gpu,
               "logs without GPU progress (as when markers are unavailable)");
  app.add_option("--out", out, "dump-set directory to write")->required();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  spec.gpu_tracking = !no_gpu;
  for (const auto& f : faults) {
    fr::synth::Fault fault;
    std::string err;
    if (!fr::synth::parse_fault(f, &fault, &err)) {
      std::cerr << "fr-gendumps: --fault " << f << ": " << err << "\n";
      return 2;
    }
    spec.faults.push_back(fault);
  }
  std::string err;
  if (!fr::synth::write_dump_set(spec, out, &err)) {
    std::cerr << "fr-gendumps: " << err << "\n";
    return 4;
  }
  std::cout << "wrote " << spec.ranks << " ranks x " << spec.entries << " entries to " << out
            << "\n";
  return 0;
}
