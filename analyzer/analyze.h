// The analysis library's entry points: from dump sets, single flight logs or PyTorch Flight
// Recorder dumps to the fr-analysis/1 document (DESIGN.md), and from that document to the text a
// person reads. fr-analyze, fr-simjob and the frd coordinator all go through here.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "analyzer/result.h"

namespace fr::analyzer {

struct Options {
  std::vector<int> ranks;  // --rank filters (global ranks) for the text/trace view
  std::string comm;        // --comm filter (hex id prefix or name)
  unsigned threads = 0;    // 0 = hardware concurrency
  // A NIXL transfer still in flight this long when its log was read is stalled (nixl_stalled).
  // Low, as a dump is taken once something crossed the coordinator's threshold; a transfer
  // younger than this at the dump is in progress, not stalled.
  int64_t nixl_stall_ns = 1'000'000'000;
};

// Analyse dump sets, single log/dump files, or PyTorch Flight Recorder dumps. Unusable input as
// a whole (nothing readable) -> nothing, and *fatal_error set to one clear line.
std::optional<Analysis> analyze(const std::vector<std::string>& paths, const Options& opts,
                                std::string* fatal_error);
// The same as the fr-analysis/1 document (null json when nothing is readable), for callers that
// only pass the document on.
nlohmann::json analyze_paths(const std::vector<std::string>& paths, const Options& opts,
                             std::string* fatal_error);

// The human view of an analysis: the verdict sentence first, then per stalled communicator a
// compact rank table, then the findings. ANSI colors only when `color` is set. The second form
// reads a stored fr-analysis/1 document.
// The text view; every control byte that came from the input is written as \xNN (terminal_safe).
std::string render_text(const Analysis& analysis, bool color);
std::string render_text(const nlohmann::json& analysis, bool color);
// A dump set that mixes jobs, in one sentence ("this dump set mixes 2 jobs: ..."); empty when it
// does not. Every view says it first, above the verdict, which covers one job alone.
std::string mixed_jobs_text(const Inputs& inputs);
// A finding's `torch` object (torch's view of its op, torch_join.cpp) in words, for the text view
// and the page: "torch: process group default_pg (name 0), collective #11, called at
// train.py:42 in rank_main (rank 0's stack)", and a second line for the ranks torch shows issuing
// the op while no NCCL call came. Empty when the finding has none.
std::vector<std::string> torch_lines(const Finding& f);
// `text` with every control byte but '\n' written as \xNN; with `color`, the text view's own
// styles kept as they are.
std::string terminal_safe(const std::string& text, bool color);

}  // namespace fr::analyzer
