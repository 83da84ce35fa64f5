// Chrome trace / Perfetto timeline of a dump set: one track per rank per communicator, the stall
// highlighted. Open the file in ui.perfetto.dev or chrome://tracing.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "analyzer/model.h"

namespace fr::analyzer {

// Writes every op of the model (filtered by opts.ranks / opts.comm) as trace events. `analysis`
// is analyze_model's result: its verdict and findings decide what is highlighted.
bool write_trace(const Model& model, const Analysis& analysis, const Options& opts,
                 const std::string& path, std::string* error);

}  // namespace fr::analyzer
