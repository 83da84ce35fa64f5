// See side_files.h. JSON through nlohmann; every reader bound is applied here, once.
#include "log/side_files.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "log/json_fields.h"
#include "log/slow_history.h"

namespace fr::log {
namespace {

using json = nlohmann::json;
constexpr size_t kMaxText = 1024;
constexpr size_t kMaxList = 1024;

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Every text of these files is cut to kMaxText; the other rules are json_fields.h's.
std::string str(const json& j, const char* key) {
  return field_or(j, key, std::string(), kMaxText);
}

// An NVLink error counter: NVML's unsigned, or -1 read as that unsigned (UINT64_MAX), as older
// writers put it.
uint64_t counter(const json& j, const char* key) {
  uint64_t u = 0;
  if (read_field(j, key, &u)) return u;
  int64_t s = 0;
  return read_field(j, key, &s) ? uint64_t(s) : 0;
}

bool parse_doc(const std::string& text, const char* schema, json* out, std::string* error) {
  *out = json::parse(text, nullptr, false);
  if (out->is_discarded() || !out->is_object()) {
    *error = "not a JSON object";
    return false;
  }
  std::string s = str(*out, "schema");
  if (s != schema) {
    *error = s.empty() ? std::string("no schema (expected ") + schema + ")"
                       : "schema '" + s + "', expected " + schema;
    return false;
  }
  return true;
}

// An optional count: written when known (>= 0), so an absent key reads back as unknown (-1).
void opt(json& j, const char* key, int64_t v) {
  if (v >= 0) j[key] = v;
}

// Declared first so that the templates below find them (an unnamed namespace is out of ADL's reach).
json to_json(const StackFrame& f);
json to_json(const ThreadStack& t);
json to_json(const XidEvent& x);
json to_json(const NvLinkState& l);
json to_json(const GpuHealth& d);
void from_json(const json& j, StackFrame* f);
void from_json(const json& j, ThreadStack* t);
void from_json(const json& j, XidEvent* x);
void from_json(const json& j, NvLinkState* l);
void from_json(const json& j, GpuHealth* d);

// At most `cap` of the objects in j[key], each read by its from_json; other elements are dropped.
template <typename T>
void objects(const json& j, const char* key, size_t cap, std::vector<T>* out) {
  if (const json* a = array_field(j, key))
    for (const auto& e : *a) {
      if (out->size() >= cap) break;
      if (!e.is_object()) continue;
      T item;
      from_json(e, &item);
      out->push_back(std::move(item));
    }
}

template <typename T>
json array_of(const std::vector<T>& items) {
  json a = json::array();
  for (const auto& i : items) a.push_back(to_json(i));
  return a;
}

// ---- one to_json and one from_json per type --------------------------------------------------
// The writer and the reader of each format name the same fields here and nowhere else. from_json
// takes what is there, of the right type and within the bounds, and leaves the rest at the type's
// default; the documents' own checks (JSON object, schema) are parse_doc's.

json to_json(const StackFrame& f) {
  json j = {{"function", f.function},
            {"file", f.file},
            {"line", f.line},
            {"module", f.module},
            {"kind", f.kind}};
  if (f.pc) j["pc"] = f.pc;
  return j;
}

void from_json(const json& j, StackFrame* f) {
  f->function = str(j, "function");
  f->file = str(j, "file");
  f->line = field_or(j, "line", 0, 0, 1 << 30);
  f->module = str(j, "module");
  f->kind = str(j, "kind");
  if (f->kind != "python" && f->kind != "kernel") f->kind = "native";
  f->pc = field_or<uint64_t>(j, "pc", 0);
}

json to_json(const ThreadStack& t) {
  json j = {{"tid", t.tid}, {"name", t.name}, {"state", t.state}, {"frames", array_of(t.frames)}};
  if (!t.error.empty()) j["error"] = t.error;
  return j;
}

void from_json(const json& j, ThreadStack* t) {
  t->tid = field_or(j, "tid", 0);
  t->name = str(j, "name");
  t->state = str(j, "state");
  t->error = str(j, "error");
  objects(j, "frames", kMaxStackFrames, &t->frames);
}

json to_json(const ProcessStacks& s) {
  json j = {{"schema", kStacksSchema}, {"pid", s.pid},
            {"rank", s.rank},          {"taker", s.taker},
            {"python", s.python},      {"time_ns", s.time_ns},
            {"took_ns", s.took_ns},    {"threads", array_of(s.threads)}};
  if (!s.error.empty()) j["error"] = s.error;
  if (!s.python_error.empty()) j["python_error"] = s.python_error;
  return j;
}

void from_json(const json& j, ProcessStacks* s) {
  s->pid = field_or(j, "pid", 0);
  s->rank = field_or(j, "rank", -1);
  s->taker = str(j, "taker");
  s->python = field_or(j, "python", false);
  s->error = str(j, "error");
  s->python_error = str(j, "python_error");
  s->time_ns = field_or<int64_t>(j, "time_ns", 0);
  s->took_ns = field_or<int64_t>(j, "took_ns", 0);
  objects(j, "threads", kMaxStackThreads, &s->threads);
}

json to_json(const XidEvent& x) { return {{"xid", x.xid}, {"time_ns", x.time_ns}}; }

void from_json(const json& j, XidEvent* x) {
  x->xid = field_or<uint64_t>(j, "xid", 0);
  x->time_ns = field_or<int64_t>(j, "time_ns", 0);
}

json to_json(const NvLinkState& l) {
  return {{"link", l.link},
          {"active", l.active},
          {"replay_errors", l.replay_errors},
          {"recovery_errors", l.recovery_errors},
          {"crc_flit_errors", l.crc_flit_errors},
          {"crc_data_errors", l.crc_data_errors}};
}

void from_json(const json& j, NvLinkState* l) {
  l->link = field_or(j, "link", 0);
  l->active = field_or(j, "active", false);
  l->replay_errors = counter(j, "replay_errors");
  l->recovery_errors = counter(j, "recovery_errors");
  l->crc_flit_errors = counter(j, "crc_flit_errors");
  l->crc_data_errors = counter(j, "crc_data_errors");
}

json to_json(const GpuHealth& d) {
  json j = {{"index", d.index},
            {"pci_bus_id", d.pci_bus_id},
            {"uuid", d.uuid},
            {"name", d.name},
            {"xids", array_of(d.xids)},
            {"nvlinks", array_of(d.nvlinks)},
            {"throttle_names", d.throttle_names},
            {"pids", d.pids},
            {"own_pids", d.own_pids},
            {"unavailable", d.unavailable}};
  opt(j, "ecc_volatile_corrected", d.ecc_volatile_corrected);
  opt(j, "ecc_volatile_uncorrected", d.ecc_volatile_uncorrected);
  opt(j, "retired_pages_pending", d.retired_pages_pending);
  opt(j, "remapped_rows_pending", d.remapped_rows_pending);
  opt(j, "remapped_rows_failed", d.remapped_rows_failed);
  opt(j, "throttle_reasons", d.throttle_reasons);
  opt(j, "temperature_c", d.temperature_c);
  opt(j, "power_mw", d.power_mw);
  opt(j, "pcie_replays", d.pcie_replays);
  return j;
}

void from_json(const json& j, GpuHealth* d) {
  d->index = field_or(j, "index", -1);
  d->pci_bus_id = str(j, "pci_bus_id");
  d->uuid = str(j, "uuid");
  d->name = str(j, "name");
  objects(j, "xids", kMaxList, &d->xids);
  objects(j, "nvlinks", kMaxList, &d->nvlinks);
  read_list(j, "throttle_names", &d->throttle_names, 64, size_t(64));
  read_list(j, "pids", &d->pids, kMaxList);
  read_list(j, "own_pids", &d->own_pids, kMaxList);
  read_list(j, "unavailable", &d->unavailable, 64, size_t(200));
  d->ecc_volatile_corrected = field_or<int64_t>(j, "ecc_volatile_corrected", -1);
  d->ecc_volatile_uncorrected = field_or<int64_t>(j, "ecc_volatile_uncorrected", -1);
  d->retired_pages_pending = field_or<int64_t>(j, "retired_pages_pending", -1);
  d->remapped_rows_pending = field_or<int64_t>(j, "remapped_rows_pending", -1);
  d->remapped_rows_failed = field_or<int64_t>(j, "remapped_rows_failed", -1);
  d->throttle_reasons = field_or<int64_t>(j, "throttle_reasons", -1);
  d->temperature_c = field_or<int64_t>(j, "temperature_c", -1);
  d->power_mw = field_or<int64_t>(j, "power_mw", -1);
  d->pcie_replays = field_or<int64_t>(j, "pcie_replays", -1);
}

json to_json(const NodeGpus& g) {
  json j = {{"schema", kGpuSchema},
            {"node", g.node},
            {"time_ns", g.time_ns},
            {"driver_version", g.driver_version},
            {"gpus", array_of(g.gpus)}};
  if (!g.error.empty()) j["error"] = g.error;
  return j;
}

void from_json(const json& j, NodeGpus* g) {
  g->node = str(j, "node");
  g->time_ns = field_or<int64_t>(j, "time_ns", 0);
  g->error = str(j, "error");
  g->driver_version = str(j, "driver_version");
  objects(j, "gpus", kMaxList, &g->gpus);
}

}  // namespace

// ---- the edge: text in, text out ---------------------------------------------------------------

std::string stacks_to_text(const ProcessStacks& s) { return to_json(s).dump() + "\n"; }

bool parse_stacks(const std::string& text, ProcessStacks* out, std::string* error) {
  json j;
  if (!parse_doc(text, kStacksSchema, &j, error)) return false;
  ProcessStacks s;
  from_json(j, &s);
  *out = std::move(s);
  return true;
}

std::string gpus_to_text(const NodeGpus& g) { return to_json(g).dump(1) + "\n"; }

bool parse_gpus(const std::string& text, NodeGpus* out, std::string* error) {
  json j;
  if (!parse_doc(text, kGpuSchema, &j, error)) return false;
  NodeGpus g;
  from_json(j, &g);
  *out = std::move(g);
  return true;
}

std::string stacks_file_for(const std::string& dump_file) { return dump_file + kStacksSuffix; }

bool is_side_file(const std::string& name) {
  return ends_with(name, kStacksSuffix) || ends_with(name, kGpuSuffix) ||
         ends_with(name, kSlowHistorySuffix);
}

}  // namespace fr::log
