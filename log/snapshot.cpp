// Snapshots of a directory of flight logs into a dump set, and the dump set's manifest.json.
// Which files are taken is decided by list_local_logs (links, FIFOs, devices, foreign owners,
// copies and duplicate ranks are refused); a log that cannot be read is named in `skipped` and
// the others are still taken; every file is written to a temporary name and renamed, so a full
// disk never leaves a half dump behind.
#include "log/snapshot.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "log/local_logs.h"
#include "log/reader.h"
#include "common/files.h"
#include "log/safe_file.h"

namespace fr::log {

namespace {

using nlohmann::json;

constexpr size_t kMaxManifestBytes = 256u << 20;

uint64_t realtime_ns() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

std::string iso_time(uint64_t ns) {
  time_t secs = static_cast<time_t>(ns / 1000000000ull);
  tm t{};
  gmtime_r(&secs, &t);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03uZ", t.tm_year + 1900,
                t.tm_mon + 1, t.tm_mday, t.tm_hour, t.tm_min, t.tm_sec,
                unsigned((ns / 1000000ull) % 1000));
  return buf;
}

std::string this_host() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0 || !buf[0]) return "localhost";
  return buf;
}

// File-name-safe form of a name that came from a log (hostile writers can put anything there).
std::string safe_name(const std::string& s) {
  std::string out;
  for (char c : s.substr(0, 64))
    out +=
        (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.') ? c : '_';
  if (out.empty() || out == "." || out == "..") out = "unknown";
  return out;
}

// A manifest's file entry must stay inside the dump set.
bool safe_relative_path(const std::string& p) {
  if (p.empty() || p[0] == '/' || p.size() > 4096) return false;
  std::stringstream ss(p);
  std::string part;
  while (std::getline(ss, part, '/'))
    if (part.empty() || part == "." || part == "..") return false;
  return p.find('\0') == std::string::npos;
}

}  // namespace

SnapshotResult snapshot_dir(const SnapshotOptions& opts) {
  SnapshotResult res;
  res.time_ns = realtime_ns();
  if (!files::make_dirs(opts.out_dir, &res.error)) return res;

  LocalLogOptions lo;
  lo.dir = opts.log_dir;
  lo.owners = opts.owners;
  lo.job_id = opts.job_id;
  LocalLogs listed = list_local_logs(lo);
  if (!listed.error.empty()) {
    res.error = listed.error;
    return res;
  }
  for (const LocalRefusal& r : listed.refused)
    res.skipped.push_back({opts.log_dir + "/" + r.name, r.why});

  std::set<std::string> used;
  std::string job_id = opts.job_id;
  for (const LocalLog& local : listed.logs) {
    std::string path = opts.log_dir + "/" + local.name;
    ReadResult rr = read_local_log(opts.log_dir, local);
    if (!rr.ok()) {
      res.skipped.push_back({path, rr.message});
      continue;
    }
    LogFile& log = *rr.log;
    if (!opts.job_id.empty() && log.job_id() != opts.job_id) continue;
    if (job_id.empty()) job_id = log.job_id();

    std::string host = opts.host.empty() ? log.hostname() : opts.host;
    if (host.empty()) host = this_host();
    // The dump names the host the caller says it is on, so a dump set stays self-consistent.
    std::memset(log.header.hostname, 0, FR_NAME_LEN);
    std::memcpy(log.header.hostname, host.data(), std::min<size_t>(host.size(), FR_NAME_LEN - 1));

    int rank = log.header.global_rank;
    std::string base = opts.file_prefix + "rank" + (rank >= 0 ? std::to_string(rank) : "unknown") +
                       "." + safe_name(host) + "." + std::to_string(log.header.pid);
    std::string file = base + FR_LOG_FILE_SUFFIX;
    for (int n = 1; used.count(file); ++n)
      file = base + "." + std::to_string(n) + FR_LOG_FILE_SUFFIX;

    std::string error;
    if (!files::write_atomic(opts.out_dir + "/" + file, encode_snapshot(log, res.time_ns),
                             &error)) {
      res.skipped.push_back({path, error});
      continue;
    }
    used.insert(file);

    SnapshotProcess p;
    p.rank = rank;
    p.world_size = log.header.world_size;
    p.pid = log.header.pid;
    p.host = host;
    p.job_id = log.job_id();
    p.file = file;
    p.source = path;
    p.alive = log.writer_alive;
    p.records = log.records.size();
    p.overwritten = log.header.overwritten;
    p.torn = log.torn;
    res.processes.push_back(std::move(p));
  }

  if (opts.write_manifest) {
    std::vector<ManifestNode> nodes;
    std::set<std::string> hosts;
    for (const auto& p : res.processes)
      if (hosts.insert(p.host).second) nodes.push_back({p.host, 0, false});
    if (!write_manifest(opts.out_dir, job_id, res.time_ns, res.processes, res.skipped, nodes,
                        "frd snapshot", -1, &res.error))
      return res;
  }
  return res;
}

namespace {

// One to_json and one from_json per manifest entry, so the writer and the reader name the same
// fields. from_json takes what is there and of the right type; the caller decides what must be.
json to_json(const ManifestNode& n) {
  json e = {{"host", n.host}};
  if (n.has_offset) e["clock_offset_ns"] = n.clock_offset_ns;
  return e;
}

json to_json(const SnapshotProcess& p) {
  return {{"rank", p.rank},       {"world_size", p.world_size},
          {"pid", p.pid},         {"host", p.host},
          {"job_id", p.job_id},   {"file", p.file},
          {"source", p.source},   {"alive", p.alive},
          {"records", p.records}, {"overwritten", p.overwritten},
          {"torn", p.torn}};
}

json to_json(const SnapshotSkip& s) { return {{"file", s.file}, {"error", s.error}}; }

void take(const json& o, const char* k, std::string* dst) {
  auto it = o.find(k);
  if (it != o.end() && it->is_string()) *dst = it->get<std::string>();
}
void take(const json& o, const char* k, uint64_t* dst) {
  auto it = o.find(k);
  if (it != o.end() && it->is_number_unsigned()) *dst = it->get<uint64_t>();
}
// A rank, size or pid: -1 to INT32_MAX, else left as it was.
void take(const json& o, const char* k, int* dst) {
  auto it = o.find(k);
  if (it != o.end() && it->is_number_integer()) {
    int64_t v = it->get<int64_t>();
    if (v >= -1 && v <= INT32_MAX) *dst = int(v);
  }
}

ManifestNode node_from_json(const json& n) {
  ManifestNode node;
  take(n, "host", &node.host);
  if (auto o = n.find("clock_offset_ns"); o != n.end() && o->is_number_integer()) {
    node.clock_offset_ns = o->get<int64_t>();
    node.has_offset = true;
  }
  return node;
}

SnapshotProcess process_from_json(const json& p) {
  SnapshotProcess sp;
  take(p, "file", &sp.file);
  take(p, "rank", &sp.rank);
  take(p, "world_size", &sp.world_size);
  take(p, "pid", &sp.pid);
  take(p, "host", &sp.host);
  take(p, "job_id", &sp.job_id);
  take(p, "source", &sp.source);
  if (auto it = p.find("alive"); it != p.end() && it->is_boolean()) sp.alive = it->get<bool>();
  take(p, "records", &sp.records);
  take(p, "overwritten", &sp.overwritten);
  take(p, "torn", &sp.torn);
  return sp;
}

SnapshotSkip skip_from_json(const json& s) {
  SnapshotSkip sk;
  take(s, "file", &sk.file);
  take(s, "error", &sk.error);
  return sk;
}

template <typename T>
json array_of(const std::vector<T>& items) {
  json a = json::array();
  for (const auto& i : items) a.push_back(to_json(i));
  return a;
}

// The manifest's own fields: schema (which must be ours), job, source, time, expected ranks.
bool header_from_json(const json& m, Manifest* r, std::string* error) {
  take(m, "schema", &r->schema);
  if (r->schema != kDumpSetSchema) {
    *error = "manifest.json: unknown schema \"" + r->schema.substr(0, 64) + "\" (expected " +
             kDumpSetSchema + ")";
    return false;
  }
  take(m, "job_id", &r->job_id);
  take(m, "source", &r->source);
  take(m, "time_ns", &r->time_ns);
  // A value that is not a rank count is left out, and said so (in the skipped list), not dropped
  // silently.
  if (auto it = m.find("expected_ranks"); it != m.end() && !it->is_null()) {
    int64_t v = -1;
    if (it->is_number_integer()) v = it->get<int64_t>();
    if (v >= 0 && v <= (1 << 24))
      r->expected_ranks = int(v);
    else
      r->skipped.push_back({"manifest.json", "expected_ranks " + it->dump().substr(0, 32) +
                                                 " is not a rank count (0 to 16777216): ignored"});
  }
  return true;
}

// The whole manifest; "time" is time_ns for people, written and never read.
json to_json(const Manifest& m) {
  json j;
  j["schema"] = m.schema;
  j["job_id"] = m.job_id;
  j["source"] = m.source;
  j["time_ns"] = m.time_ns;
  j["time"] = iso_time(m.time_ns);
  if (m.expected_ranks >= 0) j["expected_ranks"] = m.expected_ranks;
  j["nodes"] = array_of(m.nodes);
  j["processes"] = array_of(m.processes);
  j["skipped"] = array_of(m.skipped);
  return j;
}

// Every process must be an object whose file stays inside the dump set.
bool processes_from_json(const json& m, std::vector<SnapshotProcess>* out, std::string* error) {
  auto procs = m.find("processes");
  if (procs == m.end() || !procs->is_array()) {
    *error = "manifest.json: missing \"processes\" array";
    return false;
  }
  size_t index = 0;
  for (const auto& p : *procs) {
    const std::string at = "manifest.json: processes[" + std::to_string(index++) + "]";
    if (!p.is_object()) {
      *error = at + " is not an object";
      return false;
    }
    SnapshotProcess sp = process_from_json(p);
    if (!safe_relative_path(sp.file)) {
      *error = at + ".file is missing or leaves the dump set";
      return false;
    }
    out->push_back(std::move(sp));
  }
  return true;
}

// The whole manifest, the reverse of to_json(Manifest): false, with the first problem, when a
// required part is missing or bad (an entry of "nodes" or "skipped" that is not an object is
// dropped; the processes must all be good).
bool from_json(const json& m, Manifest* r, std::string* error) {
  if (!header_from_json(m, r, error)) return false;
  if (auto it = m.find("nodes"); it != m.end() && it->is_array())
    for (const auto& n : *it)
      if (n.is_object()) r->nodes.push_back(node_from_json(n));
  if (!processes_from_json(m, &r->processes, error)) return false;
  if (auto it = m.find("skipped"); it != m.end() && it->is_array())
    for (const auto& sk : *it)
      if (sk.is_object()) r->skipped.push_back(skip_from_json(sk));
  return true;
}

}  // namespace

bool write_manifest(const std::string& out_dir, const std::string& job_id, uint64_t time_ns,
                    const std::vector<SnapshotProcess>& processes,
                    const std::vector<SnapshotSkip>& skipped,
                    const std::vector<ManifestNode>& nodes, const std::string& source,
                    int expected_ranks, std::string* error) {
  Manifest m;
  m.schema = kDumpSetSchema;
  m.job_id = job_id;
  m.source = source;
  m.time_ns = time_ns;
  m.expected_ranks = expected_ranks;
  m.nodes = nodes;
  m.processes = processes;
  m.skipped = skipped;
  // Names from logs may hold invalid UTF-8: replace rather than throw.
  return files::write_atomic(out_dir + "/manifest.json",
                             to_json(m).dump(2, ' ', false, json::error_handler_t::replace) + "\n",
                             error);
}

bool parse_manifest(const std::string& text, Manifest* out, std::string* error) {
  json m = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (m.is_discarded()) {
    *error = "manifest.json is not valid JSON";
    return false;
  }
  if (!m.is_object()) {
    *error = "manifest.json is not a JSON object";
    return false;
  }
  Manifest r;
  if (!from_json(m, &r, error)) return false;
  *out = std::move(r);
  return true;
}

bool read_manifest(const std::string& dump_set_dir, Manifest* out, std::string* error) {
  // Inside a dump set: a linked, FIFO or device manifest is refused, never opened.
  std::string path = dump_set_dir + "/manifest.json";
  OpenedFile f = open_beneath(dump_set_dir, "manifest.json");
  if (!f.ok()) {
    *error = f.message;
    return false;
  }
  std::string text;
  if (!read_all(f.fd.get(), kMaxManifestBytes, &text, error, path)) return false;
  if (!parse_manifest(text, out, error)) {
    *error = dump_set_dir + "/" + *error;  // parse errors start with "manifest.json"
    return false;
  }
  return true;
}

}  // namespace fr::log
