// Writes our flight logs in PyTorch's Flight Recorder schema (version 2.10), one file per rank
// named as PyTorch names its dumps (<prefix><rank>, prefix "nccl_trace_rank_"), for teams whose
// tooling already reads that schema: the JSON form (FlightRecorder::dump_json()), or the pickle
// form (dump_dict() through torch's pickler), which is the one PyTorch's fr_trace script loads.
//
// What the schema cannot say, and how it is filled:
//   - process group names: PyTorch's are "0", "1", ... in creation order; ours are the 16 hex
//     digits of the communicator id, which every rank's file agrees on (read back as the id).
//   - ranks of a group: the global ranks of its members in group-rank order, learned from all
//     the logs exported together; members whose log is absent are left out, and the extra
//     "fr_size" / "fr_rank" fields keep the group's size and this rank's place in it.
//   - group descriptions: the communicator's name; an unnamed world communicator is
//     "default_pg", as PyTorch describes its world group; other unnamed ones "undefined".
//   - both sequence counters per entry: the op's own one, and the other kind's last value on that
//     communicator at that point (as PyTorch records them).
//   - sizes: one tensor per side, shaped so that PyTorch's size checks hold (all_gather output =
//     count x group size, reduce_scatter input = count x group size).
//   - discovered-started / completed times are unknown (0, as the JSON form writes absent ones);
//     timeout_ms 0; duration_ms left out; retired = completed.
//   - API calls (init, split, destroy, ...) have no entry form and are left out.
//   - extras PyTorch's readers ignore: "rank", "world_size", "hostname", "pid", "writer_alive",
//     "fr_snapshot_ns", per entry "fr_group_id" for grouped ops.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <set>

#include "analyzer/torch/torch_detail.h"
#include "common/files.h"

namespace fr::analyzer::torch {

using nlohmann::json;

namespace {

std::string hex_id(uint64_t id) {
  char buf[17];
  snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(id));
  return buf;
}

// Names from the fixed C fields are whatever bytes the writer stored: invalid UTF-8 becomes
// U+FFFD, so both the JSON text and the pickle's str values stay decodable.
std::string c_name(const char* s) {
  std::string in(s, strnlen(s, FR_NAME_LEN)), out;
  for (size_t i = 0; i < in.size();) {
    unsigned char c = static_cast<unsigned char>(in[i]);
    size_t len = c < 0x80             ? 1
                 : (c & 0xE0) == 0xC0 ? 2
                 : (c & 0xF0) == 0xE0 ? 3
                 : (c & 0xF8) == 0xF0 ? 4
                                      : 0;
    bool ok = len > 0 && i + len <= in.size();
    uint32_t cp = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
    for (size_t k = 1; ok && k < len; ++k) {
      unsigned char cc = static_cast<unsigned char>(in[i + k]);
      ok = (cc & 0xC0) == 0x80;
      cp = (cp << 6) | (cc & 0x3F);
    }
    if (ok && len > 1)
      ok = !((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
             cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF));
    if (ok) {
      out.append(in, i, len);
      i += len;
    } else {
      out += "\xEF\xBF\xBD";
      ++i;
    }
  }
  return out;
}

std::string version_text(int code) {
  if (code <= 0) return {};
  int x, y, z;
  if (code >= 10000) {
    x = code / 10000, y = (code % 10000) / 100, z = code % 100;
  } else {
    x = code / 1000, y = (code % 1000) / 100, z = code % 100;
  }
  return std::to_string(x) + "." + std::to_string(y) + "." + std::to_string(z);
}

struct Membership {
  int32_t size = -1;
  std::map<int32_t, int32_t> members;  // rank in the communicator -> global rank
};

std::string ranks_text(const std::vector<int32_t>& ranks) {
  std::string s = "[";
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(ranks[i]);
  }
  return s + "]";
}

const char* state_text(uint32_t s) {
  if (s >= FR_GPU_COMPLETED) return "completed";
  if (s == FR_GPU_STARTED) return "started";
  return "scheduled";
}

json sizes(uint64_t count) { return json::array({json::array({count})}); }

// A group's description: the communicator's name; an unnamed communicator that spans the world
// in global-rank order is PyTorch's default group ("default_pg", as PyTorch describes its world
// group, decided from every exported log so all ranks agree); any other unnamed one "undefined".
std::string group_desc(const fr_comm_entry* c, const Membership* m, int32_t world_size) {
  if (c && c->name[0]) return c_name(c->name);
  if (!m || world_size <= 0 || m->size != world_size || m->members.empty()) return "undefined";
  for (const auto& [crank, grank] : m->members)
    if (crank != grank) return "undefined";
  return "default_pg";
}

// The process groups of one log as exported: the communicator table, then any communicator only
// records mention; pg_id numbers them in that order.
struct ExportGroups {
  std::vector<uint64_t> order;
  std::map<uint64_t, const fr_comm_entry*> table;  // nullptr: known from records only
  std::map<uint64_t, size_t> pg_id;
};

ExportGroups export_groups(const fr::log::LogFile& log) {
  ExportGroups g;
  for (const auto& c : log.comms) {
    if (g.table.emplace(c.id, &c).second) g.order.push_back(c.id);
  }
  for (const auto& r : log.records)
    if (torch_op_name(r.raw.op) && !g.table.count(r.raw.comm_id)) {
      g.table.emplace(r.raw.comm_id, nullptr);
      g.order.push_back(r.raw.comm_id);
    }
  for (uint64_t id : g.order) g.pg_id[id] = g.pg_id.size();
  return g;
}

json pg_config_json(const ExportGroups& g, const std::map<uint64_t, Membership>& members,
                    int32_t world_size) {
  json pg_config = json::object();
  for (uint64_t id : g.order) {
    const fr_comm_entry* c = g.table.at(id);
    auto m = members.find(id);
    int32_t size = c ? c->size : -1;
    if (m != members.end()) size = std::max(size, m->second.size);
    std::vector<int32_t> ranks;
    if (m != members.end())
      for (const auto& [crank, grank] : m->second.members) ranks.push_back(grank);
    json pg = json::object();
    std::string name = hex_id(id);
    pg["name"] = name;
    pg["desc"] = group_desc(c, m != members.end() ? &m->second : nullptr, world_size);
    pg["ranks"] = ranks_text(ranks);
    pg["fr_size"] = std::to_string(size);
    pg["fr_rank"] = std::to_string(c ? c->rank : -1);
    pg_config[name] = std::move(pg);
  }
  return pg_config;
}

// Per process group while its entries are written: the pg_status counters and the numbering.
struct Progress {
  int64_t enqueued = -1, started = -1, completed = -1;
  uint64_t coll = 0, p2p = 0, op_id = 0;
};

// One record as an entry; `p` is its group's progress, advanced by it.
json entry_json(const fr::log::Record& rec, const fr_comm_entry* c, const Membership* m,
                size_t pg_id, const json& desc, Progress& p, bool pickle_form) {
  const fr_record& r = rec.raw;
  bool p2p = r.op == FR_OP_SEND || r.op == FR_OP_RECV;
  if (p2p) {
    p.p2p = std::max(p.p2p, r.seq);
  } else {
    p.coll = std::max(p.coll, r.seq);
    p.enqueued = std::max(p.enqueued, int64_t(r.seq));
    if (rec.gpu_state >= FR_GPU_STARTED) p.started = std::max(p.started, int64_t(r.seq));
    if (rec.gpu_state >= FR_GPU_COMPLETED) p.completed = std::max(p.completed, int64_t(r.seq));
  }
  int32_t self = c ? c->rank : -1;
  int64_t gsize = 1;
  if (c && c->size > 0) gsize = c->size;
  if (gsize <= 1 && m && m->size > 0) gsize = m->size;
  uint64_t wide = r.count > UINT64_MAX / uint64_t(gsize) ? UINT64_MAX : r.count * uint64_t(gsize);

  std::string pname = std::string("nccl:") + torch_op_name(r.op);
  if (r.op == FR_OP_SEND)
    pname += " " + std::to_string(self) + "->" + std::to_string(r.peer);
  else if (r.op == FR_OP_RECV)
    pname += " " + std::to_string(self) + "<-" + std::to_string(r.peer);

  json in = sizes(r.count), out = sizes(r.count);
  if (r.op == FR_OP_ALLGATHER || r.op == FR_OP_GATHER) out = sizes(wide);
  if (r.op == FR_OP_REDUCESCATTER || r.op == FR_OP_SCATTER) in = sizes(wide);
  const char* dt = nccl_dtype_to_torch(r.dtype);
  std::string dtype = dt ? dt : "Undefined";

  json e = json::object();
  e["record_id"] = r.id;
  e["pg_id"] = pg_id;
  e["process_group"] = json::array({hex_id(r.comm_id), desc});
  e["thread_name"] = "";
  e["thread_id"] = std::to_string(r.tid);
  e["collective_seq_id"] = p2p ? p.coll : r.seq;
  e["p2p_seq_id"] = p2p ? r.seq : p.p2p;
  e["op_id"] = ++p.op_id;
  e["profiling_name"] = pname;
  e["time_created_ns"] = r.call_ns;
  e["input_sizes"] = std::move(in);
  e["input_dtypes"] = json::array({dtype});
  e["output_sizes"] = std::move(out);
  e["output_dtypes"] = json::array({dtype});
  e["state"] = state_text(rec.gpu_state);
  e["time_discovered_started_ns"] = pickle_form ? json(nullptr) : json(0);
  e["time_discovered_completed_ns"] = pickle_form ? json(nullptr) : json(0);
  e["retired"] = rec.gpu_state >= FR_GPU_COMPLETED;
  e["timeout_ms"] = 0;
  e["is_p2p"] = p2p;
  if (r.group_id) e["fr_group_id"] = r.group_id;
  return e;
}

// The pickle form (FlightRecorder::dump_dict) differs from the JSON form only in value types:
// pg_status counters are ints, absent discovered times are None, process_group is a tuple.
json dump_one(const fr::log::LogFile& log, const std::map<uint64_t, Membership>& members,
              bool pickle_form) {
  const fr_log_header& h = log.header;
  json d = json::object();
  d["version"] = kTorchExportVersion;
  d["comm_lib_version"] = version_text(h.nccl_version);
  d["rank"] = h.global_rank;
  d["world_size"] = h.world_size;
  d["hostname"] = c_name(h.hostname);
  d["pid"] = h.pid;
  d["writer_alive"] = log.writer_alive;
  d["fr_snapshot_ns"] = h.snapshot_ns;

  ExportGroups groups = export_groups(log);
  json pg_config = pg_config_json(groups, members, h.world_size);
  d["pg_config"] = pg_config;  // entries below take their groups' descriptions from it
  std::map<uint64_t, Progress> prog;
  for (const auto& [id, c] : groups.table)
    if (c && c->coll_seq) prog[id].enqueued = int64_t(c->coll_seq);

  json entries = json::array();
  for (const auto& rec : log.records) {
    const fr_record& r = rec.raw;
    if (!torch_op_name(r.op)) continue;
    auto m = members.find(r.comm_id);
    entries.push_back(entry_json(rec, groups.table[r.comm_id],
                                 m != members.end() ? &m->second : nullptr, groups.pg_id[r.comm_id],
                                 pg_config[hex_id(r.comm_id)]["desc"], prog[r.comm_id],
                                 pickle_form));
  }
  if (!entries.empty()) d["entries"] = std::move(entries);

  json status = json::object();
  for (uint64_t id : groups.order) {
    const Progress& p = prog[id];
    auto num = [&](int64_t v) { return pickle_form ? json(v) : json(std::to_string(v)); };
    status[std::to_string(groups.pg_id[id])] = {
        {"last_enqueued_collective", num(p.enqueued)},
        {"last_started_collective", num(p.started)},
        {"last_completed_collective", num(p.completed)},
    };
  }
  d["pg_status"] = std::move(status);
  return d;
}

// Protocol 2 pickle of plain values, as torch's C++ pickler writes its dumps (without the memo:
// readers do not need it). Arrays become lists, except process_group, which is a tuple.
class PickleWriter {
 public:
  std::string take(const json& v) {
    out_ = "\x80\x02";
    value(v, false);
    out_ += '.';
    return std::move(out_);
  }

 private:
  std::string out_;

  void le(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out_ += char((v >> (8 * i)) & 0xFF);
  }
  void text(const std::string& s) {
    out_ += 'X';
    le(s.size(), 4);
    out_ += s;
  }
  void integer(int64_t v, bool is_unsigned, uint64_t u) {
    if (!is_unsigned && v >= 0 && v < 256) {
      out_ += 'K';
      le(uint64_t(v), 1);
    } else if (!is_unsigned && v >= 0 && v < 65536) {
      out_ += 'M';
      le(uint64_t(v), 2);
    } else if (!is_unsigned && v >= INT32_MIN && v <= INT32_MAX) {
      out_ += 'J';
      le(uint64_t(uint32_t(int32_t(v))), 4);
    } else {
      // LONG1: the shortest little-endian two's complement.
      uint64_t bits = is_unsigned ? u : uint64_t(v);
      bool neg = !is_unsigned && v < 0;
      std::string b;
      for (int i = 0; i < 8; ++i) b += char((bits >> (8 * i)) & 0xFF);
      if (is_unsigned && (bits >> 63)) b += '\0';  // keep it positive
      while (b.size() > 1) {
        unsigned char last = static_cast<unsigned char>(b.back());
        unsigned char prev = static_cast<unsigned char>(b[b.size() - 2]);
        if ((!neg && last == 0 && !(prev & 0x80)) || (neg && last == 0xFF && (prev & 0x80)))
          b.pop_back();
        else
          break;
      }
      out_ += '\x8a';
      out_ += char(b.size());
      out_ += b;
    }
  }
  void value(const json& v, bool tuple) {
    switch (v.type()) {
      case json::value_t::null: out_ += 'N'; break;
      case json::value_t::boolean: out_ += v.get<bool>() ? '\x88' : '\x89'; break;
      case json::value_t::number_integer: integer(v.get<int64_t>(), false, 0); break;
      case json::value_t::number_unsigned: {
        uint64_t u = v.get<uint64_t>();
        if (u <= uint64_t(INT64_MAX))
          integer(int64_t(u), false, 0);
        else
          integer(0, true, u);
        break;
      }
      case json::value_t::number_float: {
        double d = v.get<double>();
        uint64_t bits;
        std::memcpy(&bits, &d, sizeof bits);
        out_ += 'G';
        for (int i = 7; i >= 0; --i) out_ += char((bits >> (8 * i)) & 0xFF);
        break;
      }
      case json::value_t::string: text(v.get<std::string>()); break;
      case json::value_t::array:
        if (tuple) {
          out_ += '(';
          for (const auto& x : v) value(x, false);
          out_ += 't';
        } else {
          out_ += ']';
          if (!v.empty()) {
            out_ += '(';
            for (const auto& x : v) value(x, false);
            out_ += 'e';
          }
        }
        break;
      case json::value_t::object:
        out_ += '}';
        if (!v.empty()) {
          out_ += '(';
          for (auto it = v.begin(); it != v.end(); ++it) {
            text(it.key());
            value(it.value(), it.key() == "process_group");
          }
          out_ += 'u';
        }
        break;
      default: out_ += 'N'; break;  // binary and discarded values do not occur here
    }
  }
};

// Membership of every communicator, from all the logs together.
std::map<uint64_t, Membership> membership(const std::vector<fr::log::LogFile>& logs) {
  std::map<uint64_t, Membership> members;
  for (const auto& log : logs) {
    for (const auto& c : log.comms) {
      Membership& m = members[c.id];
      m.size = std::max(m.size, c.size);
      if (c.rank >= 0 && (c.size < 0 || c.rank < c.size))
        m.members[c.rank] = log.header.global_rank;
    }
  }
  return members;
}

std::string encode(const json& d, bool pickle_form) {
  return pickle_form ? PickleWriter().take(d)
                     : d.dump(-1, ' ', false, json::error_handler_t::replace);
}

bool export_all(const std::vector<fr::log::LogFile>& logs, const std::string& out_dir,
                bool pickle_form, std::string* error) {
  std::string err;
  if (!error) error = &err;
  error->clear();
  std::set<int32_t> seen;
  for (const auto& log : logs) {
    int32_t rank = log.header.global_rank;
    if (rank < 0) {
      *error = log.path + ": global rank unknown; PyTorch names dump files by rank";
      return false;
    }
    if (!seen.insert(rank).second) {
      *error = log.path + ": rank " + std::to_string(rank) + " appears in more than one log";
      return false;
    }
  }
  std::map<uint64_t, Membership> members = membership(logs);
  if (!fr::files::make_dirs(out_dir, error)) return false;
  for (const auto& log : logs) {
    std::string text = encode(dump_one(log, members, pickle_form), pickle_form);
    std::string path = out_dir + "/" + kTorchFilePrefix + std::to_string(log.header.global_rank);
    if (!fr::files::write_atomic(path, text, error)) return false;
  }
  return true;
}

}  // namespace

bool export_torch_json(const std::vector<fr::log::LogFile>& logs, const std::string& out_dir,
                       std::string* error) {
  return export_all(logs, out_dir, false, error);
}

std::string torch_export_text(const std::vector<fr::log::LogFile>& logs, size_t index,
                              bool pickle_form) {
  return encode(dump_one(logs.at(index), membership(logs), pickle_form), pickle_form);
}

bool export_torch_pickle(const std::vector<fr::log::LogFile>& logs, const std::string& out_dir,
                         std::string* error) {
  return export_all(logs, out_dir, true, error);
}

}  // namespace fr::analyzer::torch
