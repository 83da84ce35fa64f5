// Internals of the PyTorch Flight Recorder reader and exporter that tests and fuzz targets use
// directly (in-memory parsing, name tables). Not part of the analyzer's public surface.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "analyzer/torch/torch_dump.h"
#include "analyzer/torch/torch_schema.h"

namespace fr::analyzer::torch {

// PyTorch's default dump file prefix (TORCH_NCCL_DEBUG_INFO_TEMP_FILE = /tmp/nccl_trace_rank_):
// each rank writes <prefix><rank>.
inline constexpr const char* kTorchFilePrefix = "nccl_trace_rank_";

// A dump already in memory (JSON text or pickle bytes). `name` names it in messages and gives
// the rank when the dump does not (trailing digits of its base name).
TorchReadResult read_torch_dump_bytes(std::string_view bytes, const std::string& name);

// A dump already parsed (a JSON document, or the result of unpickle()).
TorchReadResult convert_torch_document(const nlohmann::json& doc, const std::string& name);

// The file export_torch_json (pickle_form false) or export_torch_pickle (true) writes for
// logs[index], in memory; membership of communicators is learned from all of `logs`.
std::string torch_export_text(const std::vector<fr::log::LogFile>& logs, size_t index,
                              bool pickle_form);

// Whether JSON text nests deeper than the reader accepts (128 levels); checked before parsing.
bool torch_json_too_deep(std::string_view text);

// Whether the first bytes of a file look like a Flight Recorder dump (JSON or pickle).
bool sniff_torch_dump(std::string_view head);

// fr_op for the operation part of a profiling name ("all_reduce", "send", ...); -1 when
// unknown, -2 (kCoalescedEnd) for "coalesced" (the end marker PyTorch adds after a coalesced
// group; the per-op markers are told by their empty shapes, torch_convert.h).
int torch_op_from_name(std::string_view op);
// The profiling-name operation PyTorch uses for one of our ops, nullptr when it has none.
const char* torch_op_name(uint16_t op);
// ncclDataType_t for a c10 ScalarType name ("Float", "BFloat16", ...); -1 when NCCL has none.
int torch_dtype_to_nccl(std::string_view name);
// The c10 ScalarType name for an ncclDataType_t value, nullptr when unknown.
const char* nccl_dtype_to_torch(int dtype);

// Our communicator id for a process group: 16 hex digits as a name are taken as the id itself
// (that is how export_torch_json names groups); anything else is a stable hash of the name and
// the sorted member ranks, which every member computes alike. Never 0.
uint64_t torch_pg_comm_id(std::string_view pg_name, const std::vector<int64_t>& ranks);

}  // namespace fr::analyzer::torch
