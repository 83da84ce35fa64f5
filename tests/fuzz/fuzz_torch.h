// Shared by the PyTorch dump fuzz targets: what must hold for logs read from a torch dump.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "analyzer/torch/torch_detail.h"
#include "log/reader.h"

namespace fr::fuzz {

// A log read from a PyTorch dump, exported again in PyTorch's schema (both forms) and read back,
// keeps every collective and point-to-point record with its op, sequence number and count.
inline void check_torch_round_trip(const std::vector<fr::log::LogFile>& logs, size_t index) {
  const fr::log::LogFile& log = logs[index];
  for (bool pickle_form : {false, true}) {
    std::string text = fr::analyzer::torch::torch_export_text(logs, index, pickle_form);
    auto back = fr::analyzer::torch::read_torch_dump_bytes(text, "nccl_trace_rank_0");
    if (back.logs.size() != 1) {
      std::fprintf(stderr, "exported %s not readable: %s\n", pickle_form ? "pickle" : "JSON",
                   back.error.c_str());
      std::abort();
    }
    size_t k = 0;
    for (const auto& r : log.records) {
      if (!fr::analyzer::torch::torch_op_name(r.raw.op)) continue;
      const auto& recs = back.logs[0].records;
      if (k >= recs.size() || recs[k].raw.op != r.raw.op || recs[k].raw.seq != r.raw.seq ||
          recs[k].raw.count != r.raw.count) {
        std::fprintf(stderr, "record %llu changed in the %s round trip\n",
                     static_cast<unsigned long long>(r.raw.id), pickle_form ? "pickle" : "JSON");
        std::abort();
      }
      ++k;
    }
  }
}

}  // namespace fr::fuzz
