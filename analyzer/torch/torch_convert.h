// One PyTorch Flight Recorder dump (a dict) into one of our flight logs: what maps to what is
// written down in torch_convert.cpp. Internal to the torch reader (torch_dump.cpp calls it).
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "analyzer/torch/torch_entries.h"
#include "analyzer/torch/torch_schema.h"
#include "analyzer/torch/torch_values.h"
#include "log/reader.h"

namespace fr::analyzer::torch {

// `name_rank`: the rank the file's name gives (-1: none). `raw`: the dump's entries already read
// out of a pickle (then `dump` holds no "entries"); nullptr reads them from `dump`. Returns false
// with `error` when the dump cannot be read at all; problems that cost only part of it are
// added to `w`.
// An entry's state: "scheduled", "started", "completed", raised by the discovered timestamps,
// and (2.3 on) retired means completed: gloo never moves its entries past "scheduled".
fr_gpu_state state_from(const RawEntry& e, const TorchSchema& schema, Warnings* w);

// The operation and, for send and recv, the peer of a profiling name: "<backend>:<op>[ <meta>]",
// e.g. "nccl:all_reduce", "nccl:send 0->1", "nccl:recv 1<-0".
struct OpName {
  std::string_view op, meta;
};
OpName split_profiling_name(std::string_view name);

// A process group's gloo collective entries as (op_id, collective sequence number), ascending:
// on gloo op_id counts every op of the group (point-to-point too, which gloo records no entry
// for), and so do pg_status's counters. NCCL counts pg_status in collective numbers.
using OpIdMap = std::vector<std::pair<int64_t, int64_t>>;
// A pg_status counter (op_id numbering) in collective sequence numbers: the collective it names,
// or the last one before it when it names an op without an entry. Unchanged when no entry holds
// an op_id (older dumps count both alike) or the counter is -1; beyond the last entry, ops the
// ring no longer holds are taken to be collectives.
int64_t coll_seq_at(const OpIdMap& ids, int64_t counter);

bool convert_dump(const nlohmann::json& dump, const std::string& path, int name_rank, Warnings* w,
                  const std::vector<RawEntry>* raw, fr::log::LogFile* out, std::string* error);

}  // namespace fr::analyzer::torch
