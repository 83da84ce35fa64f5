// Writes our flight logs in PyTorch's Flight Recorder JSON schema (version 2.10, the form
// FlightRecorder::dump_json() produces), one file per rank named as PyTorch names its dumps
// (<prefix><rank>, prefix "nccl_trace_rank_"), for teams whose tooling already reads that schema.
//
// What the schema cannot say, and how it is filled:
//   - process group names: PyTorch's are "0", "1", ... in creation order; ours are the 16 hex
//     digits of the communicator id, which every rank's file agrees on (read back as the id).
//   - ranks of a group: the global ranks of its members in group-rank order, learned from all
//     the logs exported together; members whose log is absent are left out, and the extra
//     "fr_size" / "fr_rank" fields keep the group's size and this rank's place in it.
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

namespace fr::analyzer::torch {

using nlohmann::json;

namespace {

std::string hex_id(uint64_t id) {
  char buf[17];
  snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(id));
  return buf;
}

std::string c_name(const char* s) { return std::string(s, strnlen(s, FR_NAME_LEN)); }

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

bool make_dirs(const std::string& dir, std::string* error) {
  std::string cur;
  size_t i = 0;
  while (i <= dir.size()) {
    size_t next = dir.find('/', i);
    if (next == std::string::npos) next = dir.size();
    cur = dir.substr(0, next);
    if (!cur.empty() && mkdir(cur.c_str(), 0755) != 0 && errno != EEXIST) {
      *error = dir + ": cannot create: " + std::strerror(errno);
      return false;
    }
    i = next + 1;
  }
  struct stat st{};
  if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    *error = dir + ": not a directory";
    return false;
  }
  return true;
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

json dump_one(const fr::log::LogFile& log, const std::map<uint64_t, Membership>& members) {
  const fr_log_header& h = log.header;
  json d = json::object();
  d["version"] = kTorchSchemaVersion;
  d["comm_lib_version"] = version_text(h.nccl_version);
  d["rank"] = h.global_rank;
  d["world_size"] = h.world_size;
  d["hostname"] = c_name(h.hostname);
  d["pid"] = h.pid;
  d["writer_alive"] = log.writer_alive;
  d["fr_snapshot_ns"] = h.snapshot_ns;

  // Process groups: the communicator table, then any communicator only records mention.
  std::vector<uint64_t> order;
  std::map<uint64_t, const fr_comm_entry*> table;
  for (const auto& c : log.comms) {
    if (table.emplace(c.id, &c).second) order.push_back(c.id);
  }
  for (const auto& r : log.records)
    if (torch_op_name(r.raw.op) && !table.count(r.raw.comm_id)) {
      table.emplace(r.raw.comm_id, nullptr);
      order.push_back(r.raw.comm_id);
    }
  std::map<uint64_t, size_t> pg_id;
  json pg_config = json::object();
  for (uint64_t id : order) {
    const fr_comm_entry* c = table[id];
    pg_id[id] = pg_id.size();
    auto m = members.find(id);
    int32_t size = c ? c->size : -1;
    if (m != members.end()) size = std::max(size, m->second.size);
    std::vector<int32_t> ranks;
    if (m != members.end())
      for (const auto& [crank, grank] : m->second.members) ranks.push_back(grank);
    json pg = json::object();
    std::string name = hex_id(id);
    std::string desc = c ? c_name(c->name) : std::string();
    pg["name"] = name;
    pg["desc"] = desc.empty() ? "undefined" : desc;
    pg["ranks"] = ranks_text(ranks);
    pg["fr_size"] = std::to_string(size);
    pg["fr_rank"] = std::to_string(c ? c->rank : -1);
    pg_config[name] = std::move(pg);
  }
  d["pg_config"] = std::move(pg_config);

  struct Progress {
    int64_t enqueued = -1, started = -1, completed = -1;
    uint64_t coll = 0, p2p = 0, op_id = 0;
  };
  std::map<uint64_t, Progress> prog;
  for (const auto& [id, c] : table)
    if (c && c->coll_seq) prog[id].enqueued = int64_t(c->coll_seq);

  json entries = json::array();
  for (const auto& rec : log.records) {
    const fr_record& r = rec.raw;
    const char* opname = torch_op_name(r.op);
    if (!opname) continue;
    const fr_comm_entry* c = table[r.comm_id];
    Progress& p = prog[r.comm_id];
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
    auto m = members.find(r.comm_id);
    if (gsize <= 1 && m != members.end() && m->second.size > 0) gsize = m->second.size;
    uint64_t wide = r.count > UINT64_MAX / uint64_t(gsize) ? UINT64_MAX : r.count * uint64_t(gsize);

    std::string pname = std::string("nccl:") + opname;
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
    e["pg_id"] = pg_id[r.comm_id];
    e["process_group"] = json::array({hex_id(r.comm_id), c && c->name[0] ? c_name(c->name)
                                                                           : std::string("undefined")});
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
    e["time_discovered_started_ns"] = 0;
    e["time_discovered_completed_ns"] = 0;
    e["retired"] = rec.gpu_state >= FR_GPU_COMPLETED;
    e["timeout_ms"] = 0;
    e["is_p2p"] = p2p;
    if (r.group_id) e["fr_group_id"] = r.group_id;
    entries.push_back(std::move(e));
  }
  if (!entries.empty()) d["entries"] = std::move(entries);

  json status = json::object();
  for (uint64_t id : order) {
    const Progress& p = prog[id];
    status[std::to_string(pg_id[id])] = {
        {"last_enqueued_collective", std::to_string(p.enqueued)},
        {"last_started_collective", std::to_string(p.started)},
        {"last_completed_collective", std::to_string(p.completed)},
    };
  }
  d["pg_status"] = std::move(status);
  return d;
}

bool write_atomic(const std::string& path, const std::string& text, std::string* error) {
  std::string tmp = path + ".tmp." + std::to_string(getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) {
      *error = tmp + ": cannot create: " + std::strerror(errno);
      return false;
    }
    out.write(text.data(), std::streamsize(text.size()));
    out.flush();
    if (!out) {
      *error = tmp + ": write failed";
      std::remove(tmp.c_str());
      return false;
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    *error = path + ": cannot rename into place: " + std::strerror(errno);
    std::remove(tmp.c_str());
    return false;
  }
  return true;
}

}  // namespace

bool export_torch_json(const std::vector<fr::log::LogFile>& logs, const std::string& out_dir,
                       std::string* error) {
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
  // Membership of every communicator, from all the logs together.
  std::map<uint64_t, Membership> members;
  for (const auto& log : logs) {
    for (const auto& c : log.comms) {
      Membership& m = members[c.id];
      m.size = std::max(m.size, c.size);
      if (c.rank >= 0 && (c.size < 0 || c.rank < c.size)) m.members[c.rank] = log.header.global_rank;
    }
  }
  if (!make_dirs(out_dir, error)) return false;
  for (const auto& log : logs) {
    json d = dump_one(log, members);
    std::string text = d.dump(-1, ' ', false, json::error_handler_t::replace);
    std::string path = out_dir + "/" + kTorchFilePrefix + std::to_string(log.header.global_rank);
    if (!write_atomic(path, text, error)) return false;
  }
  return true;
}

}  // namespace fr::analyzer::torch
