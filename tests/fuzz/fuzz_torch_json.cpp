// Fuzz target: the PyTorch Flight Recorder dump reader on arbitrary bytes (JSON mostly; bytes
// starting with a pickle PROTO go through the unpickler). Every log it returns must be a valid
// flight log.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "analyzer/torch/torch_detail.h"
#include "fuzz_common.h"
#include "fuzz_torch.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  fr::analyzer::torch::sniff_torch_dump(bytes);
  auto r = fr::analyzer::torch::read_torch_dump_bytes(bytes, "dir/nccl_trace_rank_3");
  if (r.logs.empty() && r.error.empty()) __builtin_trap();
  for (size_t i = 0; i < r.logs.size(); ++i) {
    fr::fuzz::touch(r.logs[i]);
    fr::fuzz::check_reencodes(r.logs[i]);
    fr::fuzz::check_torch_round_trip(r.logs, i);
  }
  return 0;
}
