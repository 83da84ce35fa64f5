// Fuzz target: the safe unpickler, then the dump converter on whatever plain data it built.
#include <cstddef>
#include <cstdint>
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
  for (size_t i = 0; i < r.logs.size(); ++i) {
    fr::fuzz::touch(r.logs[i]);
    fr::fuzz::check_reencodes(r.logs[i]);
    fr::fuzz::check_torch_round_trip(r.logs, i);
  }
  return 0;
}
