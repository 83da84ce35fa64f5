// Reads PyTorch Flight Recorder dumps (the per-rank JSON or pickle files) into our flight-log
// model, so that fr-analyze can analyse jobs that ran without our agent.
//
// Schema followed: PyTorch Flight Recorder dump version "2.10" (c10d FlightRecorder.hpp,
// FlightRecorderDetail.hpp: dump_json() and dump_dict(); fr_trace's loader and types.py). Older
// 2.x dumps differ only by missing fields, which get the defaults noted below. A dump is a dict:
//
//   version            "2.10"                           -> checked; major > 2 gives a warning
//   comm_lib_version   "2.21.5"                         -> header.nccl_version (NCCL_VERSION code);
//                      "nccl_version" in dumps up to 2.7
//   pg_config          {pg_name: {name, desc, ranks}}   -> one fr_comm_entry per process group:
//                      ranks is a string "[0, 1]" (both forms) or a list
//                        id   = torch_pg_comm_id(name, ranks): all members agree without talking
//                        size = len(ranks), rank = position of our global rank in ranks
//                        name = desc, origin unknown, state live
//                        the default group (name "0" or desc "default_pg") gives world_size
//                      PyTorch 2.15 with gloo writes one nameless entry {"": {"name": "",
//                      "ranks": ...}} whatever groups exist, holding the ranks of the group
//                      created last (a new_group's in its own numbering): no group's
//                      membership. A list 0..n-1 there only hints the world size; the default
//                      group named by entries is the world (rank = global rank); any other group
//                      it does not list has unknown members (a warning per dump)
//   pg_status          {pg_id: {last_enqueued_collective, last_started_collective,
//                      last_completed_collective}} -> collectives of that group up to the last
//                      started / completed one are started / completed; last enqueued -> comm
//                      coll_seq (at least), with the progress counters when entries fell out
//   entries            list of records, oldest first    -> fr_record each:
//     record_id          -> id (renumbered with a warning when not ascending)
//     process_group      (name, desc) -> comm_id of that group
//     profiling_name     "nccl:all_reduce", "gloo:all_reduce", "nccl:send 0->1", "nccl:recv 1<-0"
//                        -> op (any backend prefix); peer for
//                        p2p (the other side's rank in the group)
//     is_p2p             -> seq = p2p_seq_id when true, collective_seq_id otherwise (absent in
//                        old dumps: true for send/recv)
//     op_id              ordering inside coalesced groups, not kept
//     input_sizes        count = sum over tensors of the product of dims (output sizes for
//                        reduce_scatter and scatter, whose NCCL count is the receive count)
//     input_dtypes       dtype (ncclDataType_t of the first input's c10 name)
//     state              scheduled -> enqueued, started, completed; the discovered-started /
//                        completed timestamps raise it too, and retired: true means completed
//                        (gloo leaves every entry "scheduled"; retired is its only sign). When
//                        nothing in the dump reports a start (gloo, NCCL without timing), the
//                        oldest unfinished op per group and kind counts as started (see
//                        apply_progress)
//     time_created_ns    -> call_ns (create_ns / heartbeat_ns / snapshot_ns from the min and max
//                        of all timestamps)
//     thread_id          -> tid (low 32 bits when numeric)
//     duration_ms, timeout_ms, frames, thread_name, op_id: not kept (a pickle's are never
//                        even turned into values); output_dtypes only when inputs have none
//   nccl_comm_state    NCCL's per-communicator dump strings: not kept
//
// Coalesced groups: every op of a group carries the same sequence number, and PyTorch adds a
// "nccl:coalesced" entry after them that holds the CUDA events of the whole group (the member
// entries stay "scheduled"). Entries of one process group with the same kind and sequence number
// become one group (FR_REC_F_IN_GROUP, a shared group_id) and take the marker's state; the
// marker itself is dropped.
//
// The rank comes from a top-level "rank" when present (our exports write it), else from the
// trailing digits of the file name (<prefix><rank>, as PyTorch names the files). Header: job id
// empty, FR_LOG_F_SNAPSHOT | FR_LOG_F_GPU_EVENTS (PyTorch learns GPU progress by polling CUDA
// events), writer_alive 1 unless "writer_alive" says otherwise. "rank", "world_size",
// "hostname", "pid", "writer_alive" and fields starting with "fr_" are extras PyTorch does not
// write and export_torch_json does, so that our own logs survive the round trip (group ids,
// communicator size and rank when membership is partial, snapshot time); process groups named
// with 16 hex digits (our exports) keep that communicator id.
//
// One file holds one dump; a list of dumps or a dict {rank: dump} (several ranks gathered in one
// file) is read as one log per dump.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <unordered_map>

#include "analyzer/torch/torch_detail.h"
#include "analyzer/torch/unpickle.h"
#include "log/safe_file.h"

namespace fr::analyzer::torch {

using nlohmann::json;

namespace {

constexpr uint64_t kMaxFileBytes = uint64_t{1} << 30;
constexpr size_t kSniffBytes = size_t{1} << 20;
constexpr size_t kMaxJsonDepth = 128;
constexpr size_t kMaxWarnings = 24;
constexpr int64_t kMaxRanks = int64_t{1} << 24;

// Collects warnings, one line per distinct message with a repeat count.
class Warnings {
 public:
  void add(const std::string& msg) {
    auto it = index_.find(msg);
    if (it != index_.end()) {
      ++items_[it->second].second;
      return;
    }
    index_.emplace(msg, items_.size());
    items_.emplace_back(msg, 1);
  }
  void flush(std::vector<std::string>* out) {
    size_t shown = 0;
    for (auto& [msg, n] : items_) {
      if (shown++ == kMaxWarnings) {
        out->push_back("... and " + std::to_string(items_.size() - kMaxWarnings) +
                       " more kinds of warnings");
        break;
      }
      out->push_back(n > 1 ? msg + " (" + std::to_string(n) + " times)" : msg);
    }
    items_.clear();
    index_.clear();
  }

 private:
  std::vector<std::pair<std::string, uint64_t>> items_;
  std::unordered_map<std::string, size_t> index_;
};

const json* field(const json& obj, const char* key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(key);
  return it == obj.end() ? nullptr : &*it;
}

bool parse_int_text(std::string_view s, int64_t* out) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  bool neg = false;
  if (!s.empty() && (s.front() == '-' || s.front() == '+')) {
    neg = s.front() == '-';
    s.remove_prefix(1);
  }
  if (s.empty() || s.size() > 18) return false;
  int64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  *out = neg ? -v : v;
  return true;
}

// Integers arrive as JSON numbers, pickle ints, or (JSON pg_status) decimal strings.
bool as_int(const json* v, int64_t* out) {
  if (!v) return false;
  switch (v->type()) {
    case json::value_t::number_integer: *out = v->get<int64_t>(); return true;
    case json::value_t::number_unsigned: {
      uint64_t u = v->get<uint64_t>();
      *out = u > uint64_t(INT64_MAX) ? INT64_MAX : int64_t(u);
      return true;
    }
    case json::value_t::number_float: {
      double d = v->get<double>();
      if (!std::isfinite(d) || d > 9.2e18 || d < -9.2e18) return false;
      *out = static_cast<int64_t>(d);
      return true;
    }
    case json::value_t::boolean: *out = v->get<bool>() ? 1 : 0; return true;
    case json::value_t::string: return parse_int_text(v->get_ref<const std::string&>(), out);
    default: return false;
  }
}

int64_t int_or(const json& obj, const char* key, int64_t dflt) {
  int64_t v;
  return as_int(field(obj, key), &v) ? v : dflt;
}

std::string as_text(const json* v) {
  if (!v) return {};
  if (v->is_string()) return v->get<std::string>();
  if (v->is_binary()) {
    const auto& b = v->get_binary();
    return std::string(b.begin(), b.end());
  }
  if (v->is_number_integer() || v->is_number_unsigned()) return v->dump();
  return {};
}

bool as_bool(const json* v, bool dflt) {
  if (!v) return dflt;
  if (v->is_boolean()) return v->get<bool>();
  int64_t i;
  if (v->is_number() && as_int(v, &i)) return i != 0;
  if (v->is_string()) {
    const std::string& s = v->get_ref<const std::string&>();
    if (s == "true" || s == "True" || s == "1") return true;
    if (s == "false" || s == "False" || s == "0") return false;
  }
  return dflt;
}

void copy_name(char* dst, const std::string& s) {
  size_t n = std::min(s.size(), size_t(FR_NAME_LEN - 1));
  std::memcpy(dst, s.data(), n);
  dst[n] = '\0';
}

// Trailing decimal digits of a file's base name (extension .json/.pkl/.pickle ignored), -1 if
// there are none.
int rank_from_name(const std::string& name) {
  std::string base = name.substr(name.find_last_of('/') == std::string::npos
                                     ? 0
                                     : name.find_last_of('/') + 1);
  for (const char* ext : {".json", ".pkl", ".pickle"}) {
    size_t n = std::strlen(ext);
    if (base.size() > n && base.compare(base.size() - n, n, ext) == 0) {
      base.resize(base.size() - n);
      break;
    }
  }
  size_t end = base.size(), start = end;
  while (start > 0 && base[start - 1] >= '0' && base[start - 1] <= '9') --start;
  if (start == end || end - start > 9) return -1;
  return std::stoi(base.substr(start));
}

// "[0, 1, 2]", "[0..5]" or a list of ints.
bool parse_ranks(const json* v, std::vector<int64_t>* out) {
  out->clear();
  if (!v) return false;
  if (v->is_array()) {
    for (const auto& x : *v) {
      int64_t r;
      if (!as_int(&x, &r) || r < 0 || r >= kMaxRanks) return false;
      out->push_back(r);
    }
    return true;
  }
  if (!v->is_string()) return false;
  std::string_view s = v->get_ref<const std::string&>();
  size_t i = 0;
  auto skip_ws = [&] { while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i; };
  skip_ws();
  if (i >= s.size() || s[i] != '[') return false;
  ++i;
  skip_ws();
  if (i < s.size() && s[i] == ']') return true;
  while (i < s.size()) {
    skip_ws();
    size_t start = i;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
    int64_t r;
    if (!parse_int_text(s.substr(start, i - start), &r) || r >= kMaxRanks) return false;
    out->push_back(r);
    skip_ws();
    if (s.substr(i, 2) == "..") {  // a range "a..b", as some versions print a long list
      i += 2;
      skip_ws();
      size_t end_start = i;
      while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
      int64_t last;
      if (!parse_int_text(s.substr(end_start, i - end_start), &last) || last < r ||
          last >= kMaxRanks || out->size() + size_t(last - r) > size_t(kMaxRanks))
        return false;
      for (int64_t x = r + 1; x <= last; ++x) out->push_back(x);
      skip_ws();
    }
    if (i < s.size() && s[i] == ',') { ++i; continue; }
    if (i < s.size() && s[i] == ']') return true;
    return false;
  }
  return false;
}

uint64_t fnv1a(uint64_t h, const void* data, size_t n) {
  const unsigned char* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

int nccl_version_code(const std::string& v) {
  int x = 0, y = 0, z = 0;
  if (sscanf(v.c_str(), "%d.%d.%d", &x, &y, &z) < 2 || x < 0 || y < 0 || z < 0 || x > 99 ||
      y > 99 || z > 99)
    return 0;
  return (x <= 2 && y <= 8) ? x * 1000 + y * 100 + z : x * 10000 + y * 100 + z;
}

// Sum over tensors of the product of their dims; saturates instead of overflowing.
uint64_t element_count(const json* sizes, bool* ok) {
  *ok = false;
  if (!sizes || !sizes->is_array()) return 0;
  uint64_t total = 0;
  for (const auto& t : *sizes) {
    if (!t.is_array()) return 0;
    uint64_t prod = 1;
    for (const auto& d : t) {
      uint64_t dim;
      int64_t sdim;
      if (d.is_number_unsigned())
        dim = d.get<uint64_t>();
      else if (as_int(&d, &sdim) && sdim >= 0)
        dim = uint64_t(sdim);
      else
        return 0;
      if (dim != 0 && prod > UINT64_MAX / dim)
        prod = UINT64_MAX;
      else
        prod *= dim;
    }
    total = (total > UINT64_MAX - prod) ? UINT64_MAX : total + prod;
  }
  *ok = !sizes->empty();
  return total;
}

struct Group {
  std::string name;
  std::string desc;
  std::vector<int64_t> ranks;
  bool ranks_known = false;
  int32_t size = -1;
  int32_t rank = -1;
  uint64_t id = 0;
  size_t comm_index = 0;
};

// One entry, parsed, before grouping.
struct Entry {
  int64_t record_id = -1;
  size_t group = 0;     // index into groups
  int op = -1;          // fr_op, or -2 for the coalesced marker
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
};

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
  int64_t created_ns = 0, started_ns = 0, completed_ns = 0;
  std::string state;
  bool retired = false;
  bool has_tid = false;
  int64_t tid = 0;
  uint64_t group_id = 0;  // "fr_group_id" when a positive int
  bool in_ok = false, out_ok = false;
  uint64_t in_count = 0, out_count = 0;  // element counts of input_sizes and output_sizes
  bool has_dtype = false;
  std::string dtype;  // the first input dtype, else the first output dtype
};

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
  x.in_count = element_count(field(e, "input_sizes"), &x.in_ok);
  x.out_count = element_count(field(e, "output_sizes"), &x.out_ok);
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
using PType = PickleDoc::Type;
using PRef = PickleDoc::Ref;

bool p_int(const PickleDoc& d, PRef v, int64_t* out) {
  switch (d.type(v)) {
    case PType::kBool: case PType::kInt: *out = d.int_value(v); return true;
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
    case PType::kStr: case PType::kBytes: return std::string(d.text(v));
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

// What unpickle() turns into a JSON array.
bool p_is_seq(PType t) { return t == PType::kList || t == PType::kTuple || t == PType::kSet; }

// element_count() of a pickled list of shapes. `tmp` and `dims` are scratch lists.
uint64_t p_element_count(const PickleDoc& d, PRef sizes, bool* ok, std::vector<PRef>* tmp,
                         std::vector<PRef>* dims) {
  *ok = false;
  if (!p_is_seq(d.type(sizes))) return 0;
  d.items(sizes, tmp);
  uint64_t total = 0;
  for (PRef t : *tmp) {
    if (!p_is_seq(d.type(t))) return 0;
    d.items(t, dims);
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
      if (dim != 0 && prod > UINT64_MAX / dim)
        prod = UINT64_MAX;
      else
        prod *= dim;
    }
    total = (total > UINT64_MAX - prod) ? UINT64_MAX : total + prod;
  }
  *ok = !tmp->empty();
  return total;
}

// Pulls an entry's fields out of a pickled dict in one pass over its items (its stack frames
// and other unkept fields were never built: see read_torch_dump_bytes).
class PickleEntryReader {
 public:
  explicit PickleEntryReader(const PickleDoc& d) : d_(d) {}

  RawEntry read(PRef e) {
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
      PType kt = d_.type(kv_[i]);
      if (kt != PType::kStr && kt != PType::kBytes) continue;
      std::string_view k = d_.text(kv_[i]);
      PRef v = kv_[i + 1];
      int64_t n;
      switch (k.size() ? k[0] : 0) {
        case 'c':
          if (k == "collective_seq_id") x.coll_seq = p_int(d_, v, &n) ? n : 0;
          break;
        case 'f':
          if (k == "fr_group_id") {
            PType t = d_.type(v);
            x.group_id = t == PType::kUint ? d_.uint_value(v)
                         : (t == PType::kInt && d_.int_value(v) > 0) ? uint64_t(d_.int_value(v))
                                                                      : 0;
          }
          break;
        case 'i':
          if (k == "input_sizes") { in_sz = v; has_in_sz = true; }
          else if (k == "input_dtypes") { in_dt = v; has_in_dt = true; }
          else if (k == "is_p2p")
            x.is_p2p = p_bool(d_, v, true) == p_bool(d_, v, false) ? int(p_bool(d_, v, false)) : -1;
          break;
        case 'o':
          if (k == "output_sizes") { out_sz = v; has_out_sz = true; }
          else if (k == "output_dtypes") { out_dt = v; has_out_dt = true; }
          break;
        case 'p':
          if (k == "profiling_name") {
            x.profiling_name = p_text(d_, v);
          } else if (k == "process_group") {
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
          } else if (k == "pg_id") {
            x.pg_id = p_int(d_, v, &n) ? n : -1;
          } else if (k == "p2p_seq_id") {
            x.has_p2p_seq = true;
            x.p2p_seq = p_int(d_, v, &n) ? n : 0;
          }
          break;
        case 'r':
          if (k == "record_id") x.record_id = p_int(d_, v, &n) ? n : -1;
          else if (k == "retired") x.retired = p_bool(d_, v, false);
          break;
        case 's':
          if (k == "state") x.state = p_text(d_, v);
          break;
        case 't':
          if (k == "time_created_ns") x.created_ns = p_int(d_, v, &n) ? n : 0;
          else if (k == "time_discovered_started_ns") x.started_ns = p_int(d_, v, &n) ? n : 0;
          else if (k == "time_discovered_completed_ns") x.completed_ns = p_int(d_, v, &n) ? n : 0;
          else if (k == "thread_id") x.has_tid = p_int(d_, v, &x.tid);
          break;
        default:
          break;
      }
    }
    x.in_count = has_in_sz ? p_element_count(d_, in_sz, &x.in_ok, &tmp_, &dims_) : 0;
    x.out_count = has_out_sz ? p_element_count(d_, out_sz, &x.out_ok, &tmp_, &dims_) : 0;
    bool has = has_in_dt && p_is_seq(d_.type(in_dt)) && (d_.items(in_dt, &tmp_), !tmp_.empty());
    if (!has) {
      has = has_out_dt && p_is_seq(d_.type(out_dt)) && (d_.items(out_dt, &tmp_), !tmp_.empty());
    }
    if (has) {
      x.has_dtype = true;
      x.dtype = p_text(d_, tmp_[0]);
    }
    return x;
  }

 private:
  const PickleDoc& d_;
  std::vector<PRef> kv_, tmp_, dims_;
};

fr_gpu_state state_from(const RawEntry& e, Warnings* w) {
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
  if (e.retired) st = FR_GPU_COMPLETED;
  return st;
}

bool is_dump(const json& j) {
  return j.is_object() && (j.contains("pg_config") || j.contains("entries"));
}

class DumpConverter {
 public:
  // `raw`: the entries already pulled out of a pickle (then `d` has no "entries").
  DumpConverter(const json& d, std::string path, int name_rank, Warnings* w,
                const std::vector<RawEntry>* raw = nullptr)
      : d_(d), path_(std::move(path)), name_rank_(name_rank), w_(*w), raw_(raw) {}

  bool run(fr::log::LogFile* out, std::string* error) {
    check_version();
    if (!read_pg_config(error)) return false;
    if (!read_entries(error)) return false;
    apply_progress();
    apply_groups();
    build(out);
    return true;
  }

 private:
  const json& d_;
  std::string path_;
  int name_rank_;
  Warnings& w_;
  const std::vector<RawEntry>* raw_;
  int64_t rank_ = -1;
  std::vector<Group> groups_;
  std::map<std::string, size_t> by_name_;
  std::map<int64_t, size_t> by_pg_id_;
  std::vector<Entry> entries_;
  uint64_t min_ns_ = 0, max_ns_ = 0;
  int64_t anon_world_ = -1;  // world size hinted by a nameless pg_config entry
  bool start_seen_ = false;  // some entry or pg_status reports the start of work
  // pg_status per process group (index into groups_): the last collective enqueued, started
  // and completed, -1 where the backend does not say.
  struct Status { int64_t enqueued = -1, started = -1, completed = -1; };
  std::map<size_t, Status> status_;

  void see_time(int64_t t) {
    if (t <= 0) return;
    uint64_t u = uint64_t(t);
    if (min_ns_ == 0 || u < min_ns_) min_ns_ = u;
    if (u > max_ns_) max_ns_ = u;
  }

  void check_version() {
    std::string v = as_text(field(d_, "version"));
    if (v.empty()) {
      w_.add(path_ + ": no schema version; read as " + kTorchSchemaVersion);
      return;
    }
    int major = 0, minor = 0;
    if (sscanf(v.c_str(), "%d.%d", &major, &minor) < 1 || major < 1) {
      w_.add(path_ + ": unreadable schema version \"" + v.substr(0, 32) + "\"");
    } else if (major > 2) {
      w_.add(path_ + ": schema version " + v.substr(0, 32) + " is newer than " +
             kTorchSchemaVersion + "; read on a best-effort basis");
    }
  }

  size_t add_group(const std::string& name, const std::string& desc, const json* ranks_field,
                   const json* extra) {
    Group g;
    g.name = name;
    g.desc = desc;
    g.ranks_known = parse_ranks(ranks_field, &g.ranks);
    if (!g.ranks_known && ranks_field)
      w_.add(path_ + ": process group " + name.substr(0, 64) + ": unreadable ranks list");
    int64_t v;
    if (extra && as_int(field(*extra, "fr_size"), &v) && v >= 0 && v < kMaxRanks)
      g.size = int32_t(v);
    else if (g.ranks_known)
      g.size = int32_t(g.ranks.size());
    if (extra && as_int(field(*extra, "fr_rank"), &v) && v >= -1 && v < kMaxRanks) {
      g.rank = int32_t(v);
    } else if (g.ranks_known && rank_ >= 0) {
      auto it = std::find(g.ranks.begin(), g.ranks.end(), rank_);
      if (it != g.ranks.end()) g.rank = int32_t(it - g.ranks.begin());
    }
    g.id = torch_pg_comm_id(name, g.ranks_known ? g.ranks : std::vector<int64_t>{});
    g.comm_index = groups_.size();
    by_name_[name] = groups_.size();
    groups_.push_back(std::move(g));
    return groups_.size() - 1;
  }

  bool read_pg_config(std::string* error) {
    // The rank first: group ranks are found by it.
    int64_t r;
    if (as_int(field(d_, "rank"), &r) && r >= 0 && r < kMaxRanks)
      rank_ = r;
    else if (name_rank_ >= 0)
      rank_ = name_rank_;
    else
      w_.add(path_ + ": rank unknown (no \"rank\" field and no digits at the end of the name)");

    const json* pgc = field(d_, "pg_config");
    if (!pgc) {
      w_.add(path_ + ": no pg_config; process groups are known only by name");
      return true;
    }
    auto one = [&](const std::string& key, const json& v) {
      if (!v.is_object()) {
        w_.add(path_ + ": pg_config entry that is not a dict skipped");
        return;
      }
      std::string name = as_text(field(v, "name"));
      if (name.empty()) name = key;
      if (name.empty()) {
        // PyTorch 2.15 with gloo writes one nameless entry whatever groups exist, holding the
        // ranks of the group registered last (for a new_group, its own numbering). It is no
        // group's membership; a list 0..n-1 is kept only as a hint of the world's size.
        std::vector<int64_t> ranks;
        if (parse_ranks(field(v, "ranks"), &ranks)) {
          bool dense = true;
          for (size_t i = 0; i < ranks.size(); ++i) dense = dense && ranks[i] == int64_t(i);
          if (dense) anon_world_ = std::max<int64_t>(anon_world_, int64_t(ranks.size()));
        }
        return;
      }
      if (by_name_.count(name)) {
        w_.add(path_ + ": process group " + name.substr(0, 64) + " listed twice; first kept");
        return;
      }
      add_group(name, as_text(field(v, "desc")), field(v, "ranks"), &v);
    };
    if (pgc->is_object()) {
      for (auto it = pgc->begin(); it != pgc->end(); ++it) one(it.key(), it.value());
    } else if (pgc->is_array()) {
      for (const auto& v : *pgc) one(std::string(), v);
    } else {
      *error = path_ + ": pg_config is neither a dict nor a list";
      return false;
    }
    return true;
  }

  bool read_entries(std::string* error) {
    std::vector<RawEntry> own;
    const std::vector<RawEntry>* list = raw_;
    if (!list) {
      const json* es = field(d_, "entries");
      if (!es) return true;  // dumps taken without collectives
      if (!es->is_array()) {
        *error = path_ + ": \"entries\" is not a list";
        return false;
      }
      own.reserve(es->size());
      for (const auto& e : *es) own.push_back(raw_from_json(e));
      list = &own;
    }
    entries_.reserve(list->size());
    for (const RawEntry& e : *list) {
      if (!e.is_dict) {
        w_.add(path_ + ": entry that is not a dict skipped");
        continue;
      }
      Entry x;
      const std::string& pname = e.profiling_name;
      if (pname.empty()) {
        w_.add(path_ + ": entry without profiling_name skipped");
        continue;
      }
      // "<backend>:<op>[ <meta>]", e.g. "nccl:send 0->1".
      std::string_view rest = pname;
      size_t colon = rest.find(':');
      if (colon != std::string_view::npos) rest.remove_prefix(colon + 1);
      size_t space = rest.find(' ');
      std::string_view opname = rest.substr(0, space);
      std::string_view meta = space == std::string_view::npos ? std::string_view()
                                                              : rest.substr(space + 1);
      x.op = torch_op_from_name(opname);
      if (x.op == -1) {
        w_.add(path_ + ": entries with unknown operation \"" + std::string(opname.substr(0, 48)) +
               "\" skipped");
        continue;
      }
      // Process group: (name, desc).
      const std::string& gname = e.pg_name;
      const std::string& gdesc = e.pg_desc;
      int64_t pg_id = e.pg_id;
      if (gname.empty()) {
        w_.add(path_ + ": entry without process_group skipped");
        continue;
      }
      auto git = by_name_.find(gname);
      if (git == by_name_.end()) {
        x.group = add_group(gname, gdesc, nullptr, nullptr);
        Group& g = groups_[x.group];
        if ((gname == "0" || gdesc == "default_pg") && rank_ >= 0) {
          // The default group is the world: this process's rank in it is its global rank, and
          // its size is at least what the nameless pg_config entry and the rank itself show.
          g.rank = int32_t(rank_);
          g.size = int32_t(std::max<int64_t>(anon_world_, rank_ + 1));
          if (anon_world_ <= rank_)
            w_.add(path_ + ": the default process group is not in pg_config; its size is unknown");
        } else {
          w_.add(path_ + ": process group " + gname.substr(0, 64) +
                 (gdesc.empty() ? "" : " (" + gdesc.substr(0, 64) + ")") +
                 " is not in pg_config; its size and members are unknown");
        }
      } else {
        x.group = git->second;
      }
      if (pg_id >= 0 && !by_pg_id_.count(pg_id)) by_pg_id_[pg_id] = x.group;

      bool named_p2p = x.op == FR_OP_SEND || x.op == FR_OP_RECV;
      x.p2p = e.is_p2p < 0 ? named_p2p : e.is_p2p == 1;
      x.seq = (x.p2p && e.has_p2p_seq) ? e.p2p_seq : e.coll_seq;
      if (x.seq < 0) x.seq = 0;
      x.record_id = e.record_id;
      x.call_ns = e.created_ns > 0 ? uint64_t(e.created_ns) : 0;
      see_time(e.created_ns);
      see_time(e.started_ns);
      see_time(e.completed_ns);
      x.state = state_from(e, &w_);
      x.pg_id = pg_id;
      if (e.state == "started" || e.started_ns > 0) start_seen_ = true;
      if (e.has_tid) x.tid = uint32_t(uint64_t(e.tid));
      x.group_id = e.group_id;

      if (x.op >= 0) {
        bool by_output = x.op == FR_OP_REDUCESCATTER || x.op == FR_OP_SCATTER;
        bool ok = by_output ? e.out_ok : e.in_ok;
        x.count = by_output ? e.out_count : e.in_count;
        if (!ok) x.count = by_output ? e.in_count : e.out_count;
        if (e.has_dtype) {
          const std::string& dn = e.dtype;
          x.dtype = torch_dtype_to_nccl(dn);
          if (x.dtype < 0) w_.add(path_ + ": dtype \"" + dn.substr(0, 32) + "\" has no NCCL type");
        }
        if (named_p2p && !meta.empty()) {
          // send: "<self>-><peer>", recv: "<self><-<peer>"; ranks in the group.
          const char* sep = x.op == FR_OP_SEND ? "->" : "<-";
          size_t at = meta.find(sep);
          int64_t peer;
          if (at != std::string_view::npos && parse_int_text(meta.substr(at + 2), &peer) &&
              peer >= 0 && peer < kMaxRanks)
            x.peer = int32_t(peer);
          else
            w_.add(path_ + ": p2p entry with unreadable peer \"" + std::string(meta.substr(0, 32)) +
                   "\"");
        }
        if (x.op >= FR_OP_GET_UNIQUE_ID) x.seq = 0;  // split, windows: API calls, not counted
      }
      entries_.push_back(x);
    }
    return true;
  }

  // Progress beyond the entries' own states. pg_status (keyed by pg_id, the entries' "pg_id")
  // holds the last collective started and completed per process group: every collective at or
  // below them has started or finished, even when its entry says "scheduled".
  // A backend that never reports the start of work (gloo; NCCL without TORCH_NCCL_ENABLE_TIMING:
  // no "started" state, no start time, last_started_collective -1 everywhere) cannot show a rank
  // whose device never began an op, so no rank may be blamed for that: the oldest unfinished op of
  // each group and kind counts as started (the work a CPU backend is running, or the one a GPU
  // stream reached), the ones behind it stay enqueued.
  void apply_progress() {
    if (const json* st = field(d_, "pg_status"); st && st->is_object()) {
      for (auto it = st->begin(); it != st->end(); ++it) {
        int64_t pg_id;
        if (!parse_int_text(it.key(), &pg_id)) continue;
        auto g = by_pg_id_.find(pg_id);
        if (g == by_pg_id_.end()) continue;
        Status s;
        s.enqueued = int_or(it.value(), "last_enqueued_collective", -1);
        s.started = int_or(it.value(), "last_started_collective", -1);
        s.completed = int_or(it.value(), "last_completed_collective", -1);
        if (s.started >= 0) start_seen_ = true;
        status_[g->second] = s;
      }
    }
    for (auto& e : entries_) {
      if (e.p2p || e.seq <= 0) continue;
      auto it = status_.find(e.group);
      if (it == status_.end()) continue;
      if (e.seq <= it->second.completed) e.state = FR_GPU_COMPLETED;
      else if (e.seq <= it->second.started) e.state = std::max(e.state, FR_GPU_STARTED);
    }
    if (start_seen_) return;
    std::set<std::pair<size_t, bool>> oldest;
    for (auto& e : entries_) {
      if (e.op < 0 || e.state >= FR_GPU_COMPLETED || !oldest.insert({e.group, e.p2p}).second)
        continue;
      e.state = FR_GPU_STARTED;
    }
  }

  // Coalesced groups: same process group, kind and sequence number; the marker's state wins.
  void apply_groups() {
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
    for (const auto& e : entries_) {
      if (e.seq <= 0) continue;
      Info& in = keys[Key{e.group, e.p2p, e.seq}];
      if (e.op == -2) {
        in.marker = true;
        in.marker_state = std::max(in.marker_state, e.state);
      } else {
        ++in.members;
      }
    }
    uint64_t next_id = 1;
    std::vector<Entry> kept;
    kept.reserve(entries_.size());
    size_t lone_markers = 0;
    for (auto& e : entries_) {
      Info* in = e.seq > 0 ? &keys[Key{e.group, e.p2p, e.seq}] : nullptr;
      if (e.op == -2) {
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
      w_.add(path_ + ": " + std::to_string(lone_markers) +
             " coalesced marker entries whose ops are not in the dump dropped");
    entries_ = std::move(kept);
  }

  void build(fr::log::LogFile* out) {
    fr::log::LogFile& f = *out;
    f = fr::log::LogFile{};
    f.path = path_;
    f.is_snapshot = true;
    f.writer_alive = as_bool(field(d_, "writer_alive"), true);

    // Communicators, at most the format's table size.
    size_t ncomm = std::min(groups_.size(), size_t(FR_MAX_COMM_CAPACITY));
    if (groups_.size() > ncomm)
      w_.add(path_ + ": " + std::to_string(groups_.size() - ncomm) +
             " process groups beyond the communicator table dropped");
    f.comms.resize(ncomm);
    for (size_t i = 0; i < ncomm; ++i) {
      const Group& g = groups_[i];
      fr_comm_entry& c = f.comms[i];
      std::memset(&c, 0, sizeof c);
      c.lock = 2;
      c.id = g.id;
      c.size = g.size;
      c.rank = g.rank;
      c.cuda_dev = -1;
      c.origin = FR_ORIGIN_UNKNOWN;
      copy_name(c.name, g.desc);
      c.state = FR_COMM_LIVE;
    }

    // Records: ids as PyTorch numbered them when they ascend and fit a ring, else renumbered.
    bool ascending = true;
    for (size_t i = 0; i < entries_.size(); ++i) {
      if (entries_[i].record_id < 0 || (i && entries_[i].record_id <= entries_[i - 1].record_id)) {
        ascending = false;
        break;
      }
    }
    uint64_t first = 0, span = entries_.size();
    if (ascending && !entries_.empty()) {
      first = uint64_t(entries_.front().record_id);
      span = uint64_t(entries_.back().record_id) - first + 1;
      if (span > FR_MAX_RING_CAPACITY || span > 4 * entries_.size() + 1024) ascending = false;
    }
    if (!ascending) {
      if (!entries_.empty()) w_.add(path_ + ": record ids not ascending (or too sparse for a ring); renumbered in file order");
      first = 0;
      span = entries_.size();
    }
    if (entries_.size() > FR_MAX_RING_CAPACITY) {
      w_.add(path_ + ": more entries than a flight log holds; the oldest dropped");
      entries_.erase(entries_.begin(),
                     entries_.end() - static_cast<std::ptrdiff_t>(FR_MAX_RING_CAPACITY));
      span = entries_.size();
      ascending = false;
    }

    f.records.reserve(entries_.size());
    for (size_t i = 0; i < entries_.size(); ++i) {
      const Entry& e = entries_[i];
      fr::log::Record rec{};
      fr_record& r = rec.raw;
      std::memset(&r, 0, sizeof r);
      r.lock = 2;
      r.id = ascending ? uint64_t(e.record_id) : uint64_t(i);
      const Group& g = groups_[e.group];
      r.comm_id = g.id;
      r.seq = uint64_t(e.seq);
      r.count = e.count;
      r.group_id = e.group_id;
      r.call_ns = e.call_ns;
      r.tid = e.tid;
      r.op = uint16_t(e.op);
      r.dtype = e.dtype < 0 ? uint8_t(255) : uint8_t(e.dtype);
      r.gpu_state = uint8_t(e.state);
      r.redop = -1;
      r.peer = e.peer;
      r.result = 0;
      r.flags = FR_REC_F_LAUNCHED | (e.group_id ? FR_REC_F_IN_GROUP : 0u);
      rec.gpu_state = e.state;
      f.records.push_back(rec);

      if (g.comm_index < ncomm) {
        fr_comm_entry& c = f.comms[g.comm_index];
        if (e.p2p) {
          c.p2p_seq = std::max<uint64_t>(c.p2p_seq, r.seq);
        } else {
          c.coll_seq = std::max<uint64_t>(c.coll_seq, r.seq);
        }
        c.last_call_ns = std::max(c.last_call_ns, r.call_ns);
        if (r.call_ns && (!c.create_ns || r.call_ns < c.create_ns)) c.create_ns = r.call_ns;
      }
    }
    // pg_status knows the last enqueued collective even when its entry was overwritten; then
    // whether everything enqueued has finished is told by the communicator's counters (in
    // collective sequence numbers here).
    for (const auto& [gi, s] : status_) {
      if (groups_[gi].comm_index >= ncomm || s.enqueued <= 0) continue;
      fr_comm_entry& c = f.comms[groups_[gi].comm_index];
      if (uint64_t(s.enqueued) > c.coll_seq) {
        c.coll_seq = uint64_t(s.enqueued);
        c.op_index = uint64_t(s.enqueued);
        c.gpu_completed = s.completed > 0 ? uint64_t(s.completed) : 0;
        c.gpu_started = std::max<uint64_t>(c.gpu_completed, s.started > 0 ? uint64_t(s.started) : 0);
      }
    }

    fr_log_header& h = f.header;
    std::memset(&h, 0, sizeof h);
    h.magic = FR_LOG_MAGIC;
    h.version = FR_LOG_VERSION;
    h.header_size = sizeof(fr_log_header);
    h.comm_size = sizeof(fr_comm_entry);
    h.record_size = sizeof(fr_record);
    h.comm_capacity = uint32_t(std::max<size_t>(ncomm, 1));
    h.ring_capacity = uint32_t(std::max<uint64_t>(span, 1));
    h.comm_offset = fr_log_comm_offset();
    h.ring_offset = fr_log_ring_offset(h.comm_capacity);
    h.file_size = fr_log_file_size(h.comm_capacity, h.ring_capacity, 0, 0);
    h.create_ns = min_ns_;
    h.pid = int32_t(int_or(d_, "pid", 0));
    h.global_rank = int32_t(rank_);
    h.world_size = int32_t(world_size());
    h.local_rank = -1;
    h.flags = FR_LOG_F_SNAPSHOT | FR_LOG_F_GPU_EVENTS;
    std::string lib = as_text(field(d_, "comm_lib_version"));
    if (lib.empty()) lib = as_text(field(d_, "nccl_version"));  // its name up to version 2.7
    h.nccl_version = nccl_version_code(lib);
    if (f.records.empty()) {
      h.record_counter = 0;
      h.overwritten = 0;
    } else {
      h.record_counter = f.records.back().raw.id + 1;
      h.overwritten = f.records.front().raw.id;
    }
    h.comm_count = uint32_t(ncomm);
    h.comm_dropped = uint32_t(groups_.size() - ncomm);
    h.heartbeat_ns = max_ns_;
    int64_t snap = int_or(d_, "fr_snapshot_ns", 0);
    h.snapshot_ns = snap > 0 ? uint64_t(snap) : max_ns_;
    h.writer_alive = f.writer_alive ? 1 : 0;
    std::string host = as_text(field(d_, "hostname"));
    if (host.empty()) host = as_text(field(d_, "host_name"));
    copy_name(h.hostname, host);
  }

  int64_t world_size() const {
    int64_t ws;
    if (as_int(field(d_, "world_size"), &ws) && ws > 0 && ws < kMaxRanks) return ws;
    for (const auto& g : groups_)
      if (g.name == "0" || g.desc == "default_pg") return g.size;
    int64_t best = -1;
    for (const auto& g : groups_) best = std::max<int64_t>(best, g.size);
    return best;
  }
};

bool json_too_deep(std::string_view text) {
  size_t depth = 0;
  bool in_str = false, esc = false;
  for (char c : text) {
    if (in_str) {
      if (esc) esc = false;
      else if (c == '\\') esc = true;
      else if (c == '"') in_str = false;
      continue;
    }
    if (c == '"') in_str = true;
    else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth) return true;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return false;
}

// Through fr::log's safe_file: a FIFO or device path is refused, never opened (it would block).
bool read_file(const std::string& path, std::string* out, std::string* error) {
  return fr::log::read_regular_file(path, kMaxFileBytes, out, error, fr::log::Links::kFollow);
}

}  // namespace

uint64_t torch_pg_comm_id(std::string_view pg_name, const std::vector<int64_t>& ranks) {
  if (pg_name.size() == 16) {
    uint64_t v = 0;
    bool hex = true;
    for (char c : pg_name) {
      int d = (c >= '0' && c <= '9') ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : -1;
      if (d < 0) {
        hex = false;
        break;
      }
      v = (v << 4) | uint64_t(d);
    }
    if (hex && v != 0) return v;
  }
  uint64_t h = 0xcbf29ce484222325ull;
  h = fnv1a(h, "torch-pg", 9);  // includes the terminating NUL as a separator
  h = fnv1a(h, pg_name.data(), pg_name.size());
  std::vector<int64_t> sorted(ranks);
  std::sort(sorted.begin(), sorted.end());
  for (int64_t r : sorted) {
    unsigned char b[8];
    for (int i = 0; i < 8; ++i) b[i] = static_cast<unsigned char>(uint64_t(r) >> (8 * i));
    h = fnv1a(h, b, 8);
  }
  return h ? h : 1;
}

int torch_op_from_name(std::string_view op) {
  static const std::pair<const char*, int> kOps[] = {
      {"all_reduce", FR_OP_ALLREDUCE}, {"allreduce", FR_OP_ALLREDUCE},
      {"allreduce_coalesced", FR_OP_ALLREDUCE}, {"all_reduce_coalesced", FR_OP_ALLREDUCE},
      {"all_reduce_barrier", FR_OP_ALLREDUCE}, {"barrier", FR_OP_ALLREDUCE},
      {"broadcast", FR_OP_BROADCAST}, {"_broadcast_oop", FR_OP_BROADCAST},
      {"reduce", FR_OP_REDUCE}, {"_reduce_oop", FR_OP_REDUCE},
      {"all_gather", FR_OP_ALLGATHER}, {"allgather", FR_OP_ALLGATHER},
      {"_all_gather_base", FR_OP_ALLGATHER}, {"_allgather_base", FR_OP_ALLGATHER},
      {"all_gather_single", FR_OP_ALLGATHER}, {"all_gather_v", FR_OP_ALLGATHER},
      {"all_gather_into_tensor_coalesced", FR_OP_ALLGATHER},
      {"allgather_into_tensor_coalesced", FR_OP_ALLGATHER},
      {"ALLGATHER_coalesced", FR_OP_ALLGATHER}, {"allgather_coalesced", FR_OP_ALLGATHER},
      {"reduce_scatter", FR_OP_REDUCESCATTER}, {"_reduce_scatter_base", FR_OP_REDUCESCATTER},
      {"reduce_scatter_single", FR_OP_REDUCESCATTER}, {"reduce_scatter_v", FR_OP_REDUCESCATTER},
      {"reduce_scatter_tensor_coalesced", FR_OP_REDUCESCATTER},
      {"reduce_scatter_base", FR_OP_REDUCESCATTER},
      {"REDUCE_SCATTER_coalesced", FR_OP_REDUCESCATTER},
      {"all_to_all", FR_OP_ALLTOALL}, {"all_to_all_single", FR_OP_ALLTOALL},
      {"all_to_all_v_single", FR_OP_ALLTOALL}, {"alltoall", FR_OP_ALLTOALL},
      {"alltoall_base", FR_OP_ALLTOALL},
      {"gather", FR_OP_GATHER}, {"scatter", FR_OP_SCATTER},
      {"send", FR_OP_SEND}, {"recv", FR_OP_RECV}, {"recvAnysource", FR_OP_RECV},
      {"split", FR_OP_COMM_SPLIT}, {"new_window", FR_OP_COMM_WINDOW_REGISTER},
      {"coalesced", -2},
  };
  for (const auto& [name, v] : kOps)
    if (op == name) return v;
  return -1;
}

const char* torch_op_name(uint16_t op) {
  switch (op) {
    case FR_OP_ALLREDUCE: return "all_reduce";
    case FR_OP_BROADCAST:
    case FR_OP_BCAST: return "broadcast";
    case FR_OP_REDUCE: return "reduce";
    case FR_OP_ALLGATHER: return "all_gather";
    case FR_OP_REDUCESCATTER: return "reduce_scatter";
    case FR_OP_ALLTOALL: return "all_to_all";
    case FR_OP_GATHER: return "gather";
    case FR_OP_SCATTER: return "scatter";
    case FR_OP_SEND: return "send";
    case FR_OP_RECV: return "recv";
    default: return nullptr;
  }
}

namespace {
// c10 ScalarType names (c10::toString) and the ncclDataType_t PyTorch uses for each.
const std::pair<const char*, int> kDtypes[] = {
    {"Char", 0},  {"Byte", 1},     {"Int", 2},       {"UInt32", 3},         {"Long", 4},
    {"UInt64", 5}, {"Half", 6},    {"Float", 7},     {"Double", 8},         {"BFloat16", 9},
    {"Float8_e4m3fn", 10},         {"Float8_e5m2", 11}, {"Bool", 1},
    {"Float8_e4m3fnuz", 10},       {"Float8_e5m2fnuz", 11},
};
}  // namespace

int torch_dtype_to_nccl(std::string_view name) {
  for (const auto& [n, v] : kDtypes)
    if (name == n) return v;
  return -1;
}

const char* nccl_dtype_to_torch(int dtype) {
  for (const auto& [n, v] : kDtypes)
    if (v == dtype) return n;  // first match: the canonical name
  return nullptr;
}

bool sniff_torch_dump(std::string_view head) {
  if (head.size() >= 2 && static_cast<unsigned char>(head[0]) == 0x80) {
    unsigned proto = static_cast<unsigned char>(head[1]);
    if (proto < 2 || proto > 5) return false;
  } else {
    size_t i = 0;
    while (i < head.size() && (head[i] == ' ' || head[i] == '\n' || head[i] == '\r' ||
                               head[i] == '\t'))
      ++i;
    if (i >= head.size() || (head[i] != '{' && head[i] != '[')) return false;
  }
  for (const char* key : {"pg_config", "profiling_name", "entries"})
    if (head.find(key) != std::string_view::npos) return true;
  return false;
}

bool looks_like_torch_dump(const std::string& path) {
  fr::log::OpenedFile f = fr::log::open_regular(path, fr::log::Links::kFollow);
  if (!f.ok()) return false;
  std::string head(kSniffBytes, '\0');
  ssize_t n = ::pread(f.fd.get(), head.data(), head.size(), 0);
  head.resize(n > 0 ? size_t(n) : 0);
  return sniff_torch_dump(head);
}

TorchReadResult convert_torch_document(const json& doc, const std::string& name) {
  TorchReadResult r;
  Warnings w;
  auto one = [&](const json& d, const std::string& path, int name_rank) {
    fr::log::LogFile f;
    std::string err;
    DumpConverter c(d, path, name_rank, &w);
    if (c.run(&f, &err))
      r.logs.push_back(std::move(f));
    else
      w.add(err);
  };
  if (is_dump(doc)) {
    one(doc, name, rank_from_name(name));
  } else if (doc.is_array() && std::any_of(doc.begin(), doc.end(), is_dump)) {
    for (size_t i = 0; i < doc.size(); ++i) {
      if (is_dump(doc[i]))
        one(doc[i], name + "[" + std::to_string(i) + "]", -1);
      else
        w.add(name + "[" + std::to_string(i) + "]: not a Flight Recorder dump; skipped");
    }
  } else if (doc.is_object() && !doc.empty() &&
             std::all_of(doc.begin(), doc.end(), [](const json& v) { return is_dump(v); })) {
    // {rank: dump, ...}: several ranks gathered in one file.
    for (auto it = doc.begin(); it != doc.end(); ++it) {
      int64_t k;
      int key_rank = parse_int_text(it.key(), &k) && k >= 0 && k < kMaxRanks ? int(k) : -1;
      one(it.value(), name + "[" + it.key().substr(0, 64) + "]", key_rank);
    }
  } else {
    r.error = name + ": not a PyTorch Flight Recorder dump (no pg_config or entries)";
    return r;
  }
  w.flush(&r.warnings);
  if (r.logs.empty() && r.error.empty())
    r.error = r.warnings.empty() ? name + ": no usable dump in the file" : r.warnings.back();
  return r;
}

namespace {

// One dump pickled as a dict with an "entries" list (how PyTorch writes every rank's file): the
// entries are read in place into RawEntry, only the small rest becomes JSON. Anything else (a
// list or dict of dumps, keys that are not str) goes through JSON whole. False when the scan of
// skipped values guessed wrong (the caller runs the pickle again, building everything).
bool convert_pickle(const PickleDoc& doc, const std::string& name, TorchReadResult* r) {
  *r = TorchReadResult{};
  PRef root = doc.root();
  std::vector<PRef> top;
  PRef entries{};
  bool has_entries = false, plain_keys = doc.type(root) == PType::kDict;
  if (plain_keys) {
    doc.items(root, &top);
    for (size_t i = 0; i + 1 < top.size() && plain_keys; i += 2) {
      plain_keys = doc.type(top[i]) == PType::kStr;
      if (plain_keys && doc.text(top[i]) == "entries") {
        entries = top[i + 1];
        has_entries = true;
      }
    }
  }
  std::string err;
  if (!plain_keys || !has_entries || !p_is_seq(doc.type(entries))) {
    json whole;
    if (!doc.to_json(root, &whole, &err)) {
      r->error = name + ": " + err;
      return !doc.wrong_guess();
    }
    *r = convert_torch_document(whole, name);
    return !doc.wrong_guess();
  }
  json rest = json::object();
  for (size_t i = 0; i + 1 < top.size(); i += 2) {
    std::string_view key = doc.text(top[i]);
    if (key == "entries") continue;
    json v;
    if (!doc.to_json(top[i + 1], &v, &err)) {
      r->error = name + ": " + err;
      return !doc.wrong_guess();
    }
    rest[std::string(key)] = std::move(v);
  }
  std::vector<RawEntry> raw;
  std::vector<PRef> list;
  doc.items(entries, &list);
  raw.reserve(list.size());
  PickleEntryReader reader(doc);
  for (PRef e : list) raw.push_back(reader.read(e));
  if (doc.wrong_guess()) return false;

  Warnings w;
  fr::log::LogFile f;
  DumpConverter c(rest, name, rank_from_name(name), &w, &raw);
  if (c.run(&f, &err))
    r->logs.push_back(std::move(f));
  else
    w.add(err);
  w.flush(&r->warnings);
  if (r->logs.empty())
    r->error = r->warnings.empty() ? name + ": no usable dump in the file" : r->warnings.back();
  return true;
}

}  // namespace

TorchReadResult read_torch_dump_bytes(std::string_view bytes, const std::string& name) {
  TorchReadResult r;
  if (bytes.empty()) {
    r.error = name + ": empty file";
    return r;
  }
  if (static_cast<unsigned char>(bytes[0]) == 0x80) {
    UnpickleLimits lim;
    // Stack traces are the bulk of a dump; these and the other fields the reader does not keep
    // are never even built.
    lim.skip_keys = {"frames", "thread_name", "duration_ms", "timeout_ms", "op_id",
                     "nccl_comm_state"};
    PickleDoc doc;
    std::string err;
    for (bool scan : {true, false}) {
      if (!doc.run(bytes, lim, scan, &err)) {
        if (scan && doc.wrong_guess()) continue;
        r.error = name + ": " + err;
        return r;
      }
      if (convert_pickle(doc, name, &r) || !scan) return r;
    }
    return r;
  }
  if (json_too_deep(bytes)) {
    r.error = name + ": JSON nested deeper than " + std::to_string(kMaxJsonDepth) + " levels";
    return r;
  }
  json doc;
  try {
    doc = json::parse(bytes.begin(), bytes.end());
  } catch (const json::exception& e) {
    r.error = name + ": not JSON or pickle: " + e.what();
    return r;
  }
  return convert_torch_document(doc, name);
}

TorchReadResult read_torch_dump(const std::string& path) {
  TorchReadResult r;
  std::string bytes;
  if (!read_file(path, &bytes, &r.error)) return r;
  return read_torch_dump_bytes(bytes, path);
}

}  // namespace fr::analyzer::torch
