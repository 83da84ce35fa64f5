// An entry's progress and name (torch_convert.h): its state, its profiling name split (and
// whether it ends a coalesced group), and pg_status counters in the entries' numbering. On gloo, pg_status counts every op a process
// group issued (its op_id), collectives and point-to-point alike, while the entries'
// collective_seq_id counts collectives only; gloo records no entry for send and recv, so its
// counters run ahead of the entries by the point-to-point ops issued so far.
#include <algorithm>
#include <cstdint>

#include "analyzer/torch/torch_convert.h"
#include "analyzer/torch/torch_schema.h"

namespace fr::analyzer::torch {

fr_gpu_state state_from(const RawEntry& e, const TorchSchema& schema, Warnings* w) {
  const std::string& s = e.state;
  fr_gpu_state st = FR_GPU_ENQUEUED;
  if (s == "completed")
    st = FR_GPU_COMPLETED;
  else if (s == "started")
    st = FR_GPU_STARTED;
  else if (s == "scheduled" || s.empty())
    st = FR_GPU_ENQUEUED;
  else
    w->add("unknown entry state \"" + s.substr(0, 32) + "\" read as scheduled");
  if (e.completed_ns > 0) st = FR_GPU_COMPLETED;
  if (st < FR_GPU_STARTED && e.started_ns > 0) st = FR_GPU_STARTED;
  // Retired: the work finished and left the recorder's active set. The CPU backend (gloo) never
  // moves its entries past "scheduled"; this flag is the only per-entry sign that they finished.
  if (schema.retired && e.retired) st = FR_GPU_COMPLETED;
  return st;
}

OpName split_profiling_name(std::string_view name) {
  size_t colon = name.find(':');
  if (colon != std::string_view::npos) name.remove_prefix(colon + 1);
  size_t space = name.find(' ');
  if (space == std::string_view::npos) return {name, {}};
  return {name.substr(0, space), name.substr(space + 1)};
}

bool coalesced_end_marker(std::string_view op, const RawEntry& e) {
  if (op == "coalesced") return true;
  constexpr std::string_view kTail = "_coalesced";
  if (op.size() <= kTail.size() || op.substr(op.size() - kTail.size()) != kTail) return false;
  for (char c : op.substr(0, op.size() - kTail.size()))
    if (!((c >= 'A' && c <= 'Z') || c == '_')) return false;
  return e.dims == 0;
}

int64_t coll_seq_at(const OpIdMap& ids, int64_t counter) {
  if (ids.empty() || counter < 0) return counter;
  // The last entry at or before the counter.
  auto it = std::upper_bound(ids.begin(), ids.end(), std::make_pair(counter, INT64_MAX));
  if (it == ids.begin()) {
    // Older than every entry: the ops between were collectives the ring dropped, or not.
    return std::max<int64_t>(0, ids.front().second - (ids.front().first - counter));
  }
  --it;
  if (it->first == counter || std::next(it) != ids.end()) return it->second;
  // Beyond the last entry: the newest collectives fell out of the ring (saturating: the
  // numbers come from the dump).
  const int64_t ahead = counter - it->first;
  return it->second > INT64_MAX - ahead ? INT64_MAX : it->second + ahead;
}

}  // namespace fr::analyzer::torch
