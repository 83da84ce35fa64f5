// Fuzz target: the safe unpickler, then the dump converter on whatever plain data it built; and
// the reader that takes a pickle's entries in place, which must give the same logs and warnings
// whenever both read the file.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "analyzer/torch/torch_detail.h"
#include "analyzer/torch/unpickle.h"
#include "fuzz_common.h"
#include "fuzz_torch.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  fr::analyzer::torch::UnpickleLimits lim;
  lim.max_objects = 1 << 20;
  lim.max_output_nodes = 1 << 20;
  lim.max_output_bytes = 64 << 20;
  auto u = fr::analyzer::torch::unpickle(bytes, lim);
  if (!u.ok()) return 0;
  auto r = fr::analyzer::torch::convert_torch_document(u.value, "nccl_trace_rank_1");
  auto fast = fr::analyzer::torch::read_torch_dump_bytes(bytes, "nccl_trace_rank_1");
  bool same = fast.logs.size() == r.logs.size() && fast.warnings == r.warnings;
  for (size_t i = 0; same && i < r.logs.size(); ++i) {
    const auto& a = fast.logs[i];
    const auto& b = r.logs[i];
    same = std::memcmp(&a.header, &b.header, sizeof a.header) == 0 &&
           a.comms.size() == b.comms.size() && a.records.size() == b.records.size();
    for (size_t k = 0; same && k < a.comms.size(); ++k)
      same = std::memcmp(&a.comms[k], &b.comms[k], sizeof a.comms[k]) == 0;
    for (size_t k = 0; same && k < a.records.size(); ++k)
      same = std::memcmp(&a.records[k].raw, &b.records[k].raw, sizeof(fr_record)) == 0;
  }
  if (!same) {
    std::fprintf(stderr, "entries read in place differ from the JSON document's reading\n");
    std::abort();
  }
  for (size_t i = 0; i < r.logs.size(); ++i) {
    fr::fuzz::touch(r.logs[i]);
    fr::fuzz::check_reencodes(r.logs[i]);
    fr::fuzz::check_torch_round_trip(r.logs, i);
  }
  return 0;
}
