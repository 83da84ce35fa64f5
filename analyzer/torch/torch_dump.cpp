// Reads PyTorch Flight Recorder dumps (the per-rank JSON or pickle files) into our flight-log
// model, so that fr-analyze can analyse jobs that ran without our agent. This unit opens and
// sniffs the files, runs JSON or the safe unpickler (unpickle.h), and hands each dump to the
// converter (torch_convert.cpp, where the schema is written down); it also holds the name tables
// shared with the export (ops, dtypes, process-group ids).
//
// One file holds one dump; a list of dumps or a dict {rank: dump} (several ranks gathered in one
// file) is read as one log per dump. A pickled dump's entries are read in place
// (torch_entries.cpp), never built as JSON.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "analyzer/torch/torch_convert.h"
#include "analyzer/torch/torch_detail.h"
#include "analyzer/torch/unpickle_machine.h"
#include "fr/nccl_api.h"
#include "log/safe_file.h"

namespace fr::analyzer::torch {

using nlohmann::json;

namespace {

constexpr uint64_t kMaxFileBytes = uint64_t{1} << 30;
constexpr size_t kSniffBytes = size_t{1} << 20;
constexpr size_t kMaxJsonDepth = 128;

uint64_t fnv1a(uint64_t h, const void* data, size_t n) {
  const unsigned char* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

bool is_dump(const json& j) {
  return j.is_object() && (j.contains("pg_config") || j.contains("entries"));
}

// Through fr::log's safe_file: a FIFO or device path is refused, never opened (it would block).
bool read_file(const std::string& path, std::string* out, std::string* error) {
  return fr::log::read_regular_file(path, kMaxFileBytes, out, error, fr::log::Links::kFollow);
}

}  // namespace

bool torch_json_too_deep(std::string_view text) {
  size_t depth = 0;
  bool in_str = false, esc = false;
  for (char c : text) {
    if (in_str) {
      if (esc)
        esc = false;
      else if (c == '\\')
        esc = true;
      else if (c == '"')
        in_str = false;
      continue;
    }
    if (c == '"')
      in_str = true;
    else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth) return true;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return false;
}

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
  // Torch's own names of each op first (the NCCL API list's torch column; the first op named so
  // wins: Broadcast before Bcast), then the other names torch's versions and calls use.
  for (const fr::NcclFn& f : fr::kNcclApi)
    if (f.torch != nullptr && op == f.torch) return f.op;
  static const std::pair<const char*, int> kOps[] = {
      {"allreduce", FR_OP_ALLREDUCE},
      {"allreduce_coalesced", FR_OP_ALLREDUCE},
      {"all_reduce_coalesced", FR_OP_ALLREDUCE},
      {"all_reduce_barrier", FR_OP_ALLREDUCE},
      {"barrier", FR_OP_ALLREDUCE},
      {"_broadcast_oop", FR_OP_BROADCAST},
      {"_reduce_oop", FR_OP_REDUCE},
      {"allgather", FR_OP_ALLGATHER},
      {"_all_gather_base", FR_OP_ALLGATHER},
      {"_allgather_base", FR_OP_ALLGATHER},
      {"all_gather_single", FR_OP_ALLGATHER},
      {"all_gather_v", FR_OP_ALLGATHER},
      {"all_gather_into_tensor_coalesced", FR_OP_ALLGATHER},
      {"allgather_into_tensor_coalesced", FR_OP_ALLGATHER},
      {"ALLGATHER_coalesced", FR_OP_ALLGATHER},
      {"allgather_coalesced", FR_OP_ALLGATHER},
      {"_reduce_scatter_base", FR_OP_REDUCESCATTER},
      {"reduce_scatter_single", FR_OP_REDUCESCATTER},
      {"reduce_scatter_v", FR_OP_REDUCESCATTER},
      {"reduce_scatter_tensor_coalesced", FR_OP_REDUCESCATTER},
      {"reduce_scatter_base", FR_OP_REDUCESCATTER},
      {"REDUCE_SCATTER_coalesced", FR_OP_REDUCESCATTER},
      {"all_to_all_single", FR_OP_ALLTOALL},
      {"all_to_all_v_single", FR_OP_ALLTOALL},
      {"alltoall", FR_OP_ALLTOALL},
      {"alltoall_base", FR_OP_ALLTOALL},
      {"recvAnysource", FR_OP_RECV},
      {"split", FR_OP_COMM_SPLIT},
      {"new_window", FR_OP_COMM_WINDOW_REGISTER},
      {"coalesced", -2},
  };
  for (const auto& [name, v] : kOps)
    if (op == name) return v;
  return -1;
}

// The NCCL API list's torch column: an op no row names for torch has no torch name.
const char* torch_op_name(uint16_t op) { return fr::nccl_op(op).torch; }

namespace {
// c10 ScalarType names (c10::toString) and the ncclDataType_t PyTorch uses for each.
const std::pair<const char*, int> kDtypes[] = {
    {"Char", 0},
    {"Byte", 1},
    {"Int", 2},
    {"UInt32", 3},
    {"Long", 4},
    {"UInt64", 5},
    {"Half", 6},
    {"Float", 7},
    {"Double", 8},
    {"BFloat16", 9},
    {"Float8_e4m3fn", 10},
    {"Float8_e5m2", 11},
    {"Bool", 1},
    {"Float8_e4m3fnuz", 10},
    {"Float8_e5m2fnuz", 11},
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
    while (i < head.size() &&
           (head[i] == ' ' || head[i] == '\n' || head[i] == '\r' || head[i] == '\t'))
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
    TorchSide side;
    std::string err;
    if (convert_dump(d, path, name_rank, &w, nullptr, &f, &side, &err)) {
      r.logs.push_back(std::move(f));
      r.sides.push_back(std::move(side));
    } else {
      w.add(err);
    }
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

using PType = PickleDoc::Type;
using PRef = PickleDoc::Ref;

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
  TorchSide side;
  if (convert_dump(rest, name, rank_from_name(name), &w, &raw, &f, &side, &err)) {
    r->logs.push_back(std::move(f));
    r->sides.push_back(std::move(side));
  } else {
    w.add(err);
  }
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
    lim.skip_keys = {"frames", "thread_name", "duration_ms", "timeout_ms", "nccl_comm_state"};
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
  if (torch_json_too_deep(bytes)) {
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
