// A dump set's records and its manifest.json: one to_json and one from_json per record, which the
// manifest and every daemon file that carries a process use, so the writers and the readers name
// the same fields. from_json takes what is there, of the right type and in range (json_fields.h's
// rules); the caller decides what must be.
#include "log/manifest.h"

#include <cstdio>
#include <ctime>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/files.h"
#include "log/json_fields.h"
#include "log/safe_file.h"

namespace fr::log {

namespace {

using nlohmann::json;

constexpr size_t kMaxManifestBytes = 256u << 20;

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

// A manifest's file entry must stay inside the dump set.
bool safe_relative_path(const std::string& p) {
  if (p.empty() || p[0] == '/' || p.size() > 4096) return false;
  std::stringstream ss(p);
  std::string part;
  while (std::getline(ss, part, '/'))
    if (part.empty() || part == "." || part == "..") return false;
  return p.find('\0') == std::string::npos;
}

// A rank, size or pid: read from -1 (unknown) to INT32_MAX. Another integer is there with the right
// type (true) but unknown: *dst is left as it was.
bool take_id(const json& o, const char* k, int* dst) {
  const json* v = field_of(o, k);
  if (v == nullptr || !v->is_number_integer()) return false;
  read_value(*v, dst, -1, INT32_MAX);
  return true;
}

json to_json(const ManifestNode& n) {
  json e = {{"host", n.host}};
  if (n.has_offset) e["clock_offset_ns"] = n.clock_offset_ns;
  return e;
}

ManifestNode node_from_json(const json& n) {
  ManifestNode node;
  read_field(n, "host", &node.host);
  node.has_offset = read_field(n, "clock_offset_ns", &node.clock_offset_ns);
  return node;
}

template <typename T>
json array_of(const std::vector<T>& items) {
  json a = json::array();
  for (const auto& i : items) a.push_back(i);
  return a;
}
json array_of(const std::vector<ManifestNode>& nodes) {
  json a = json::array();
  for (const auto& n : nodes) a.push_back(to_json(n));
  return a;
}
// The manifest's own fields: schema (which must be ours), job, source, time, expected ranks.
bool header_from_json(const json& m, Manifest* r, std::string* error) {
  read_field(m, "schema", &r->schema);
  if (r->schema != kDumpSetSchema) {
    *error = "manifest.json: unknown schema \"" + r->schema.substr(0, 64) + "\" (expected " +
             kDumpSetSchema + ")";
    return false;
  }
  read_field(m, "job_id", &r->job_id);
  read_field(m, "source", &r->source);
  read_field(m, "time_ns", &r->time_ns);
  // A value that is not a rank count is left out, and said so (in the skipped list), not dropped
  // silently.
  if (const json* v = field_of(m, "expected_ranks"); v != nullptr && !v->is_null()) {
    if (!read_value(*v, &r->expected_ranks, 0, 1 << 24))
      r->skipped.push_back({"manifest.json", "expected_ranks " + v->dump().substr(0, 32) +
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
  const json* procs = array_field(m, "processes");
  if (procs == nullptr) {
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
    SnapshotProcess sp;
    from_json(p, &sp);
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
  if (const json* nodes = array_field(m, "nodes"))
    for (const auto& n : *nodes)
      if (n.is_object()) r->nodes.push_back(node_from_json(n));
  if (!processes_from_json(m, &r->processes, error)) return false;
  if (const json* skipped = array_field(m, "skipped"))
    for (const auto& sk : *skipped)
      if (sk.is_object()) from_json(sk, &r->skipped.emplace_back());
  return true;
}

}  // namespace

void to_json(json& j, const SnapshotProcess& p) {
  j = {{"rank", p.rank},       {"world_size", p.world_size},
       {"pid", p.pid},         {"host", p.host},
       {"job_id", p.job_id},   {"file", p.file},
       {"source", p.source},   {"alive", p.alive},
       {"records", p.records}, {"overwritten", p.overwritten},
       {"torn", p.torn}};
}

bool from_json(const json& j, SnapshotProcess* p) {
  // Every field is read, whatever came before: & rather than &&.
  return take_id(j, "rank", &p->rank) & take_id(j, "world_size", &p->world_size) &
         take_id(j, "pid", &p->pid) & read_field(j, "host", &p->host) &
         read_field(j, "job_id", &p->job_id) & read_field(j, "file", &p->file) &
         read_field(j, "source", &p->source) & read_field(j, "alive", &p->alive) &
         read_field(j, "records", &p->records) & read_field(j, "overwritten", &p->overwritten) &
         read_field(j, "torn", &p->torn);
}

void to_json(json& j, const SnapshotSkip& s) { j = {{"file", s.file}, {"error", s.error}}; }

bool from_json(const json& j, SnapshotSkip* s) {
  return read_field(j, "file", &s->file) & read_field(j, "error", &s->error);
}

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
