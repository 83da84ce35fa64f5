// The analysis library's entry points: from dump sets, single flight logs or PyTorch Flight
// Recorder dumps to the fr-analysis/1 document (DESIGN.md), and from that document to the text a
// person reads. fr-analyze, fr-simjob and the frd coordinator all go through here.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace fr::analyzer {

struct Options {
  std::vector<int> ranks;      // --rank filters (global ranks) for the text/trace view
  std::string comm;            // --comm filter (hex id prefix or name)
  unsigned threads = 0;        // 0 = hardware concurrency
};

// Analyse dump sets, single log/dump files, or PyTorch Flight Recorder dumps. Returns the
// fr-analysis/1 document. Unusable input as a whole (nothing readable) -> null json and
// *fatal_error set to one clear line.
nlohmann::json analyze_paths(const std::vector<std::string>& paths, const Options& opts,
                             std::string* fatal_error);

// The human view of an fr-analysis/1 document: the verdict sentence first, then per stalled
// communicator a compact rank table, then the findings. ANSI colors only when `color` is set.
std::string render_text(const nlohmann::json& analysis, bool color);

}  // namespace fr::analyzer
