// Coalesced groups in a PyTorch dump (torch_convert.h apply_coalesced_groups). Every op of a
// group carries the same sequence number, and PyTorch adds an end marker after them ("coalesced",
// or for uneven all_gather and reduce_scatter "ALLGATHER_coalesced", "REDUCE_SCATTER_coalesced")
// that holds the CUDA events of the whole group (the member entries stay "scheduled"). Entries of
// one process group with the same kind and sequence number become one group
// (FR_REC_F_IN_GROUP, a shared group_id) and take the marker's state; the marker is dropped.
#include <map>
#include <tuple>

#include "analyzer/torch/torch_convert.h"

namespace fr::analyzer::torch {
namespace {

// Whether no entry belongs to a coalesced group: no marker, no group id, and every sequence
// number used once per process group and kind (seen when they ascend, as PyTorch writes them).
bool no_groups(const std::vector<ConvEntry>& entries, size_t groups) {
  std::vector<int64_t> last(groups * 2, 0);
  for (const auto& e : entries) {
    if (e.seq <= 0) continue;
    int64_t& l = last[e.group * 2 + (e.p2p ? 1 : 0)];
    if (e.op == kCoalescedEnd || e.group_id || e.seq <= l) return false;
    l = e.seq;
  }
  return true;
}

}  // namespace

void apply_coalesced_groups(std::vector<ConvEntry>* out, size_t groups, const std::string& path,
                            Warnings* w) {
  std::vector<ConvEntry>& entries = *out;
  if (no_groups(entries, groups)) return;  // the common case, without building the map below
  struct Key {
    size_t group;
    bool p2p;
    int64_t seq;
    bool operator<(const Key& o) const {
      return std::tie(group, p2p, seq) < std::tie(o.group, o.p2p, o.seq);
    }
  };
  struct Info {
    size_t members = 0;
    bool marker = false;
    fr_gpu_state marker_state = FR_GPU_NONE;
    uint64_t id = 0;
  };
  std::map<Key, Info> keys;
  for (const auto& e : entries) {
    if (e.seq <= 0) continue;
    Info& in = keys[Key{e.group, e.p2p, e.seq}];
    if (e.op == kCoalescedEnd) {
      in.marker = true;
      in.marker_state = std::max(in.marker_state, e.state);
    } else {
      ++in.members;
    }
  }
  uint64_t next_id = 1;
  std::vector<ConvEntry> kept;
  kept.reserve(entries.size());
  size_t lone_markers = 0;
  for (auto& e : entries) {
    Info* in = e.seq > 0 ? &keys[Key{e.group, e.p2p, e.seq}] : nullptr;
    if (e.op == kCoalescedEnd) {
      if (!in || in->members == 0) ++lone_markers;
      continue;
    }
    if (in && (in->members > 1 || in->marker || e.group_id)) {
      if (in->id == 0) in->id = e.group_id ? e.group_id : (uint64_t(1) << 63) | next_id++;
      e.group_id = in->id;
      e.state = std::max(e.state, in->marker_state);
    }
    kept.push_back(e);
  }
  if (lone_markers)
    w->add(path + ": " + std::to_string(lone_markers) +
           " coalesced marker entries whose ops are not in the dump dropped");
  entries = std::move(kept);
}

}  // namespace fr::analyzer::torch
