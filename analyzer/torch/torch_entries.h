// One Flight Recorder entry's fields as the dump holds them, pulled out of a JSON dict or straight
// out of a pickle's values. The pickle path is the hot one (a dump holds thousands of entries):
// it reads the fields in one pass over a dict's items and never builds JSON for them. Both
// readers give the same RawEntry for the same entry; the dump converter (torch_convert.cpp) makes
// records of them.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "analyzer/torch/unpickle.h"

namespace fr::analyzer::torch {

// The fields of one entry that the reader keeps, as the dump holds them: pulled out of a JSON
// dict, or straight out of a pickle's values (no JSON built for the thousands of entries).
struct RawEntry {
  bool is_dict = true;
  std::string profiling_name;
  bool has_pg = false;
  std::string pg_name, pg_desc;
  int64_t pg_id = -1;
  int is_p2p = -1;  // "is_p2p": 1 true, 0 false, -1 absent or unreadable
  bool has_p2p_seq = false;
  int64_t p2p_seq = 0, coll_seq = 0, record_id = -1;
  int64_t op_id = -1;  // the group's count of every op (collectives and p2p); -1 when absent
  int64_t created_ns = 0, started_ns = 0, completed_ns = 0;
  std::string state;
  bool retired = false;
  bool has_tid = false;
  int64_t tid = 0;
  uint64_t group_id = 0;  // "fr_group_id" when a positive int
  bool in_ok = false, out_ok = false;
  uint64_t in_count = 0, out_count = 0;  // element counts of input_sizes and output_sizes
  // Dimensions over all of input_sizes and output_sizes: 0 when every shape is empty ([] or
  // [[]]), as in the end marker of a coalesced group.
  uint64_t dims = 0;
  bool has_dtype = false;
  std::string dtype;                // the first input dtype, else the first output dtype
  std::string in_dtype, out_dtype;  // the first of each list; empty when it has none
};

RawEntry raw_from_json(const nlohmann::json& e);

// What unpickle() turns into a JSON array.
inline bool p_is_seq(PickleDoc::Type t) {
  return t == PickleDoc::Type::kList || t == PickleDoc::Type::kTuple || t == PickleDoc::Type::kSet;
}

// Pulls an entry's fields out of a pickled dict in one pass over its items (its stack frames
// and other unkept fields were never built: see read_torch_dump_bytes). Keeps scratch lists
// between entries.
class PickleEntryReader {
 public:
  explicit PickleEntryReader(const PickleDoc& d) : d_(d) {}
  RawEntry read(PickleDoc::Ref e);

 private:
  enum class Field : uint8_t {
    kNone,
    kCollSeq,
    kGroupId,
    kInSizes,
    kInDtypes,
    kIsP2p,
    kOutSizes,
    kOutDtypes,
    kProfilingName,
    kProcessGroup,
    kPgId,
    kP2pSeq,
    kRecordId,
    kRetired,
    kState,
    kCreated,
    kStarted,
    kCompleted,
    kThreadId,
    kOpId,
  };
  struct Slot {
    uint32_t id = 0;
    bool valid = false;
    Field field = Field::kNone;
  };
  static constexpr size_t kCacheSlots = 64;
  Field field_of(PickleDoc::Ref key);
  static Field field_named(std::string_view key);

  const PickleDoc& d_;
  std::vector<PickleDoc::Ref> kv_, tmp_, dims_;
  Slot cache_[kCacheSlots];
};

}  // namespace fr::analyzer::torch
