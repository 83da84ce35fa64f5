// The two entry readers (torch_entries.h): from a JSON dict, and in place from a pickled dict.
// The pickle readings (p_int, p_text, ...) give what the JSON helpers (torch_values.h) give for
// the value unpickle() would make of it; they sit here, beside their one caller, so that the hot
// loop over a dump's entries stays in one unit.
#include "analyzer/torch/torch_entries.h"

#include <cmath>
#include <string_view>

#include "analyzer/torch/torch_values.h"
#include "analyzer/torch/unpickle_machine.h"

namespace fr::analyzer::torch {

using nlohmann::json;

RawEntry raw_from_json(const json& e) {
  RawEntry x;
  if (!e.is_object()) {
    x.is_dict = false;
    return x;
  }
  x.profiling_name = as_text(field(e, "profiling_name"));
  if (const json* pg = field(e, "process_group"); pg && pg->is_array() && !pg->empty()) {
    x.has_pg = true;
    x.pg_name = as_text(&(*pg)[0]);
    if (pg->size() > 1) x.pg_desc = as_text(&(*pg)[1]);
  } else if (pg) {
    x.has_pg = true;
    x.pg_name = as_text(pg);
  }
  x.pg_id = int_or(e, "pg_id", -1);
  if (const json* p = field(e, "is_p2p"))
    x.is_p2p = as_bool(p, true) == as_bool(p, false) ? int(as_bool(p, false)) : -1;
  x.has_p2p_seq = field(e, "p2p_seq_id") != nullptr;
  x.p2p_seq = int_or(e, "p2p_seq_id", 0);
  x.coll_seq = int_or(e, "collective_seq_id", 0);
  x.record_id = int_or(e, "record_id", -1);
  x.op_id = int_or(e, "op_id", -1);
  x.created_ns = int_or(e, "time_created_ns", 0);
  x.started_ns = int_or(e, "time_discovered_started_ns", 0);
  x.completed_ns = int_or(e, "time_discovered_completed_ns", 0);
  x.state = as_text(field(e, "state"));
  x.retired = as_bool(field(e, "retired"), false);
  x.has_tid = as_int(field(e, "thread_id"), &x.tid);
  if (const json* gid = field(e, "fr_group_id"); gid && gid->is_number_unsigned())
    x.group_id = gid->get<uint64_t>();
  else if (gid && gid->is_number_integer() && gid->get<int64_t>() > 0)
    x.group_id = uint64_t(gid->get<int64_t>());
  x.in_count = element_count(field(e, "input_sizes"), &x.in_ok, &x.dims);
  x.out_count = element_count(field(e, "output_sizes"), &x.out_ok, &x.dims);
  for (auto [key, out] : {std::pair{"input_dtypes", &x.in_dtype}, {"output_dtypes", &x.out_dtype}})
    if (const json* l = field(e, key); l && l->is_array() && !l->empty()) *out = as_text(&(*l)[0]);
  const json* dts = field(e, "input_dtypes");
  if (!dts || !dts->is_array() || dts->empty()) dts = field(e, "output_dtypes");
  if (dts && dts->is_array() && !dts->empty()) {
    x.has_dtype = true;
    x.dtype = as_text(&(*dts)[0]);
  }
  return x;
}

// The same readings of a value held in a pickle, in place; each gives what the JSON helpers
// above give for the value unpickle() would make of it.

namespace {

using PType = PickleDoc::Type;
using PRef = PickleDoc::Ref;

bool p_int(const PickleDoc& d, PRef v, int64_t* out) {
  switch (d.type(v)) {
    case PType::kBool:
    case PType::kInt: *out = d.int_value(v); return true;
    case PType::kUint: {
      uint64_t u = d.uint_value(v);
      *out = u > uint64_t(INT64_MAX) ? INT64_MAX : int64_t(u);
      return true;
    }
    case PType::kFloat: {
      double f = d.float_value(v);
      if (!std::isfinite(f) || f > 9.2e18 || f < -9.2e18) return false;
      *out = static_cast<int64_t>(f);
      return true;
    }
    case PType::kStr: return parse_int_text(d.text(v), out);
    default: return false;
  }
}

std::string p_text(const PickleDoc& d, PRef v) {
  switch (d.type(v)) {
    case PType::kStr:
    case PType::kBytes: return std::string(d.text(v));
    case PType::kInt: return std::to_string(d.int_value(v));
    case PType::kUint: return std::to_string(d.uint_value(v));
    default: return {};
  }
}

bool p_bool(const PickleDoc& d, PRef v, bool dflt) {
  PType t = d.type(v);
  if (t == PType::kBool) return d.int_value(v) != 0;
  int64_t i;
  if ((t == PType::kInt || t == PType::kUint || t == PType::kFloat) && p_int(d, v, &i))
    return i != 0;
  if (t == PType::kStr) {
    std::string_view s = d.text(v);
    if (s == "true" || s == "True" || s == "1") return true;
    if (s == "false" || s == "False" || s == "0") return false;
  }
  return dflt;
}

// element_count() of a pickled list of shapes, adding its dimensions to *ndims. `tmp` and `dims`
// are scratch lists.
uint64_t p_element_count(const PickleDoc& d, PRef sizes, bool* ok, std::vector<PRef>* tmp,
                         std::vector<PRef>* dims, uint64_t* ndims) {
  *ok = false;
  if (!p_is_seq(d.type(sizes))) return 0;
  d.items(sizes, tmp);
  uint64_t total = 0;
  for (PRef t : *tmp) {
    if (!p_is_seq(d.type(t))) return 0;
    d.items(t, dims);
    *ndims += dims->size();
    uint64_t prod = 1;
    for (PRef x : *dims) {
      uint64_t dim;
      int64_t sdim;
      if (d.type(x) == PType::kUint)
        dim = d.uint_value(x);
      else if (p_int(d, x, &sdim) && sdim >= 0)
        dim = uint64_t(sdim);
      else
        return 0;
      prod = saturating_mul(prod, dim);
    }
    total = saturating_add(total, prod);
  }
  *ok = !tmp->empty();
  return total;
}

}  // namespace

// The field a key names. Keys are memoized strs, so the same value comes back for every entry:
// the answer is cached by value id (a small direct-mapped table) and the text compared once.
PickleEntryReader::Field PickleEntryReader::field_of(PRef key) {
  Slot& s = cache_[key.id % kCacheSlots];
  if (s.id == key.id && s.valid) return s.field;
  Field f = Field::kNone;
  PType kt = d_.type(key);
  if (kt == PType::kStr || kt == PType::kBytes) f = field_named(d_.text(key));
  s = Slot{key.id, true, f};
  return f;
}

PickleEntryReader::Field PickleEntryReader::field_named(std::string_view k) {
  static const std::pair<const char*, Field> kFields[] = {
      {"collective_seq_id", Field::kCollSeq},
      {"fr_group_id", Field::kGroupId},
      {"input_sizes", Field::kInSizes},
      {"input_dtypes", Field::kInDtypes},
      {"is_p2p", Field::kIsP2p},
      {"output_sizes", Field::kOutSizes},
      {"output_dtypes", Field::kOutDtypes},
      {"profiling_name", Field::kProfilingName},
      {"process_group", Field::kProcessGroup},
      {"pg_id", Field::kPgId},
      {"p2p_seq_id", Field::kP2pSeq},
      {"record_id", Field::kRecordId},
      {"retired", Field::kRetired},
      {"state", Field::kState},
      {"time_created_ns", Field::kCreated},
      {"time_discovered_started_ns", Field::kStarted},
      {"time_discovered_completed_ns", Field::kCompleted},
      {"thread_id", Field::kThreadId},
      {"op_id", Field::kOpId},
  };
  for (const auto& [name, f] : kFields)
    if (k == name) return f;
  return Field::kNone;
}

RawEntry PickleEntryReader::read(PRef e) {
  RawEntry x;
  if (d_.type(e) != PType::kDict) {
    x.is_dict = false;
    return x;
  }
  d_.items(e, &kv_);
  PRef in_dt{}, out_dt{};
  bool has_in_dt = false, has_out_dt = false;
  PRef in_sz{}, out_sz{};
  bool has_in_sz = false, has_out_sz = false;
  // A key given twice keeps its last value, as a dict does.
  for (size_t i = 0; i + 1 < kv_.size(); i += 2) {
    PRef v = kv_[i + 1];
    int64_t n;
    switch (field_of(kv_[i])) {
      case Field::kNone: break;
      case Field::kCollSeq: x.coll_seq = p_int(d_, v, &n) ? n : 0; break;
      case Field::kGroupId: {
        PType t = d_.type(v);
        x.group_id = t == PType::kUint                           ? d_.uint_value(v)
                     : (t == PType::kInt && d_.int_value(v) > 0) ? uint64_t(d_.int_value(v))
                                                                 : 0;
        break;
      }
      case Field::kInSizes:
        in_sz = v;
        has_in_sz = true;
        break;
      case Field::kInDtypes:
        in_dt = v;
        has_in_dt = true;
        break;
      case Field::kIsP2p:
        x.is_p2p = p_bool(d_, v, true) == p_bool(d_, v, false) ? int(p_bool(d_, v, false)) : -1;
        break;
      case Field::kOutSizes:
        out_sz = v;
        has_out_sz = true;
        break;
      case Field::kOutDtypes:
        out_dt = v;
        has_out_dt = true;
        break;
      case Field::kProfilingName: x.profiling_name = p_text(d_, v); break;
      case Field::kProcessGroup:
        x.has_pg = true;
        x.pg_name.clear();
        x.pg_desc.clear();
        if (p_is_seq(d_.type(v))) {
          d_.items(v, &tmp_);
          if (tmp_.empty()) {
            x.pg_name = p_text(d_, v);
          } else {
            x.pg_name = p_text(d_, tmp_[0]);
            if (tmp_.size() > 1) x.pg_desc = p_text(d_, tmp_[1]);
          }
        } else {
          x.pg_name = p_text(d_, v);
        }
        break;
      case Field::kPgId: x.pg_id = p_int(d_, v, &n) ? n : -1; break;
      case Field::kP2pSeq:
        x.has_p2p_seq = true;
        x.p2p_seq = p_int(d_, v, &n) ? n : 0;
        break;
      case Field::kRecordId: x.record_id = p_int(d_, v, &n) ? n : -1; break;
      case Field::kOpId: x.op_id = p_int(d_, v, &n) ? n : -1; break;
      case Field::kRetired: x.retired = p_bool(d_, v, false); break;
      case Field::kState: x.state = p_text(d_, v); break;
      case Field::kCreated: x.created_ns = p_int(d_, v, &n) ? n : 0; break;
      case Field::kStarted: x.started_ns = p_int(d_, v, &n) ? n : 0; break;
      case Field::kCompleted: x.completed_ns = p_int(d_, v, &n) ? n : 0; break;
      case Field::kThreadId: x.has_tid = p_int(d_, v, &x.tid); break;
    }
  }
  x.in_count = has_in_sz ? p_element_count(d_, in_sz, &x.in_ok, &tmp_, &dims_, &x.dims) : 0;
  x.out_count = has_out_sz ? p_element_count(d_, out_sz, &x.out_ok, &tmp_, &dims_, &x.dims) : 0;
  // The first of each dtype list; the record's dtype is the input's, else the output's.
  auto first = [&](bool has, PRef l, std::string* out) {
    if (!has || !p_is_seq(d_.type(l)) || (d_.items(l, &tmp_), tmp_.empty())) return false;
    *out = p_text(d_, tmp_[0]);
    return true;
  };
  const bool has_in = first(has_in_dt, in_dt, &x.in_dtype);
  const bool has_out = first(has_out_dt, out_dt, &x.out_dtype);
  if (has_in || has_out) {
    x.has_dtype = true;
    x.dtype = has_in ? x.in_dtype : x.out_dtype;
  }
  return x;
}

}  // namespace fr::analyzer::torch
