// One PyTorch Flight Recorder dump (a dict) into one of our flight logs: what maps to what is
// written down in torch_convert.cpp. Internal to the torch reader (torch_dump.cpp calls it).
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "analyzer/torch/torch_dump.h"
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

// One entry, parsed, before grouping.
struct ConvEntry {
  int64_t record_id = -1;
  size_t group = 0;  // index into the dump's process groups
  int op = -1;       // fr_op, or kCoalescedEnd for the end marker of a coalesced group
  bool p2p = false;
  int64_t seq = 0;
  uint64_t count = 0;
  int dtype = -1;
  int32_t peer = -1;
  uint64_t call_ns = 0;
  uint32_t tid = 0;
  fr_gpu_state state = FR_GPU_NONE;
  uint64_t group_id = 0;  // "fr_group_id" when present
  int64_t pg_id = -1;
  int64_t op_id = -1;  // gloo: the group's count of every op, which pg_status counts in too
  uint64_t in_count = 0, out_count = 0;
  bool out_known = false;           // output_sizes read
  std::string in_dtype, out_dtype;  // the first of each list, as the dump names them
};

// ConvEntry::op of the entry PyTorch adds after the ops of a coalesced group.
inline constexpr int kCoalescedEnd = -2;

// Whether an entry is the end marker of a coalesced group: "coalesced" (the plain marker), or
// an op type in capitals with "_coalesced" ("ALLGATHER_coalesced", "REDUCE_SCATTER_coalesced":
// the ends of uneven all_gather and reduce_scatter, whose ops are _broadcast_oop and _reduce_oop)
// with no shapes ([] or [[]]). The same names with shapes are the op itself.
bool coalesced_end_marker(std::string_view op, const RawEntry& e);

// Coalesced groups (torch_groups.cpp): the entries of one process group (`groups` of them) with
// the same kind and sequence number become one group that takes its end marker's state; the
// markers are dropped.
void apply_coalesced_groups(std::vector<ConvEntry>* entries, size_t groups, const std::string& path,
                            Warnings* w);

// `side`, when given, gets what the log has no field for (torch_dump.h TorchSide).
bool convert_dump(const nlohmann::json& dump, const std::string& path, int name_rank, Warnings* w,
                  const std::vector<RawEntry>* raw, fr::log::LogFile* out, TorchSide* side,
                  std::string* error);

}  // namespace fr::analyzer::torch
