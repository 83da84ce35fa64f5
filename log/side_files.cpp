// See side_files.h. JSON through nlohmann; every reader bound is applied here, once.
#include "log/side_files.h"

#include <algorithm>

#include <nlohmann/json.hpp>

namespace fr::log {
namespace {

using json = nlohmann::json;
constexpr size_t kMaxText = 1024;
constexpr size_t kMaxList = 1024;

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Bounded getters: a missing or mistyped optional field reads as its default.
std::string str(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_string()) return {};
  std::string s = it->get<std::string>();
  if (s.size() > kMaxText) s.resize(kMaxText);
  return s;
}

int64_t num(const json& j, const char* key, int64_t dflt) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number_integer()) return dflt;
  return it->get<int64_t>();
}

bool flag(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_boolean() && it->get<bool>();
}

const json* array(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_array() ? &*it : nullptr;
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

void opt(json& j, const char* key, int64_t v) {
  if (v >= 0) j[key] = v;
}

}  // namespace

std::string stacks_to_text(const ProcessStacks& s) {
  json threads = json::array();
  for (const auto& t : s.threads) {
    json frames = json::array();
    for (const auto& f : t.frames) {
      json fj = {{"function", f.function}, {"file", f.file}, {"line", f.line},
                 {"module", f.module}, {"kind", f.kind}};
      if (f.pc) fj["pc"] = f.pc;
      frames.push_back(std::move(fj));
    }
    json tj = {{"tid", t.tid}, {"name", t.name}, {"state", t.state}, {"frames", frames}};
    if (!t.error.empty()) tj["error"] = t.error;
    threads.push_back(std::move(tj));
  }
  json j = {{"schema", kStacksSchema}, {"pid", s.pid},         {"rank", s.rank},
            {"taker", s.taker},        {"python", s.python},   {"time_ns", s.time_ns},
            {"took_ns", s.took_ns},    {"threads", threads}};
  if (!s.error.empty()) j["error"] = s.error;
  if (!s.python_error.empty()) j["python_error"] = s.python_error;
  return j.dump() + "\n";
}

bool parse_stacks(const std::string& text, ProcessStacks* out, std::string* error) {
  json j;
  if (!parse_doc(text, kStacksSchema, &j, error)) return false;
  ProcessStacks s;
  s.pid = int(num(j, "pid", 0));
  s.rank = int(num(j, "rank", -1));
  s.taker = str(j, "taker");
  s.python = flag(j, "python");
  s.error = str(j, "error");
  s.python_error = str(j, "python_error");
  s.time_ns = num(j, "time_ns", 0);
  s.took_ns = num(j, "took_ns", 0);
  if (const json* threads = array(j, "threads")) {
    for (const auto& tj : *threads) {
      if (!tj.is_object()) continue;
      if (s.threads.size() >= kMaxStackThreads) break;
      ThreadStack t;
      t.tid = int(num(tj, "tid", 0));
      t.name = str(tj, "name");
      t.state = str(tj, "state");
      t.error = str(tj, "error");
      if (const json* frames = array(tj, "frames"))
        for (const auto& fj : *frames) {
          if (!fj.is_object()) continue;
          if (t.frames.size() >= kMaxStackFrames) break;
          StackFrame f;
          f.function = str(fj, "function");
          f.file = str(fj, "file");
          f.line = int(std::clamp<int64_t>(num(fj, "line", 0), 0, 1 << 30));
          f.module = str(fj, "module");
          f.kind = str(fj, "kind");
          if (f.kind != "python" && f.kind != "kernel") f.kind = "native";
          f.pc = uint64_t(num(fj, "pc", 0));
          t.frames.push_back(std::move(f));
        }
      s.threads.push_back(std::move(t));
    }
  }
  *out = std::move(s);
  return true;
}

std::string gpus_to_text(const NodeGpus& g) {
  json gpus = json::array();
  for (const auto& d : g.gpus) {
    json xids = json::array(), links = json::array();
    for (const auto& x : d.xids) xids.push_back({{"xid", x.xid}, {"time_ns", x.time_ns}});
    for (const auto& l : d.nvlinks)
      links.push_back({{"link", l.link}, {"active", l.active}, {"replay_errors", l.replay_errors},
                       {"recovery_errors", l.recovery_errors},
                       {"crc_flit_errors", l.crc_flit_errors},
                       {"crc_data_errors", l.crc_data_errors}});
    json dj = {{"index", d.index}, {"pci_bus_id", d.pci_bus_id}, {"uuid", d.uuid},
               {"name", d.name},   {"xids", xids},               {"nvlinks", links},
               {"throttle_names", d.throttle_names}, {"pids", d.pids},
               {"unavailable", d.unavailable}};
    opt(dj, "ecc_volatile_corrected", d.ecc_volatile_corrected);
    opt(dj, "ecc_volatile_uncorrected", d.ecc_volatile_uncorrected);
    opt(dj, "retired_pages_pending", d.retired_pages_pending);
    opt(dj, "remapped_rows_pending", d.remapped_rows_pending);
    opt(dj, "remapped_rows_failed", d.remapped_rows_failed);
    opt(dj, "throttle_reasons", d.throttle_reasons);
    opt(dj, "temperature_c", d.temperature_c);
    opt(dj, "power_mw", d.power_mw);
    opt(dj, "pcie_replays", d.pcie_replays);
    gpus.push_back(std::move(dj));
  }
  json j = {{"schema", kGpuSchema}, {"node", g.node}, {"time_ns", g.time_ns},
            {"driver_version", g.driver_version}, {"gpus", gpus}};
  if (!g.error.empty()) j["error"] = g.error;
  return j.dump(1) + "\n";
}

bool parse_gpus(const std::string& text, NodeGpus* out, std::string* error) {
  json j;
  if (!parse_doc(text, kGpuSchema, &j, error)) return false;
  NodeGpus g;
  g.node = str(j, "node");
  g.time_ns = num(j, "time_ns", 0);
  g.error = str(j, "error");
  g.driver_version = str(j, "driver_version");
  if (const json* gpus = array(j, "gpus"))
    for (const auto& dj : *gpus) {
      if (!dj.is_object() || g.gpus.size() >= kMaxList) continue;
      GpuHealth d;
      d.index = int(num(dj, "index", -1));
      d.pci_bus_id = str(dj, "pci_bus_id");
      d.uuid = str(dj, "uuid");
      d.name = str(dj, "name");
      if (const json* xs = array(dj, "xids"))
        for (const auto& x : *xs)
          if (x.is_object() && d.xids.size() < kMaxList)
            d.xids.push_back({uint64_t(num(x, "xid", 0)), num(x, "time_ns", 0)});
      if (const json* ls = array(dj, "nvlinks"))
        for (const auto& l : *ls)
          if (l.is_object() && d.nvlinks.size() < kMaxList)
            d.nvlinks.push_back({int(num(l, "link", 0)), flag(l, "active"),
                                 uint64_t(num(l, "replay_errors", 0)),
                                 uint64_t(num(l, "recovery_errors", 0)),
                                 uint64_t(num(l, "crc_flit_errors", 0)),
                                 uint64_t(num(l, "crc_data_errors", 0))});
      if (const json* ts = array(dj, "throttle_names"))
        for (const auto& t : *ts)
          if (t.is_string() && d.throttle_names.size() < 64) d.throttle_names.push_back(t.get<std::string>().substr(0, 64));
      if (const json* ps = array(dj, "pids"))
        for (const auto& p : *ps)
          if (p.is_number_integer() && d.pids.size() < kMaxList) d.pids.push_back(p.get<int>());
      if (const json* us = array(dj, "unavailable"))
        for (const auto& u : *us)
          if (u.is_string() && d.unavailable.size() < 64) d.unavailable.push_back(u.get<std::string>().substr(0, 200));
      d.ecc_volatile_corrected = num(dj, "ecc_volatile_corrected", -1);
      d.ecc_volatile_uncorrected = num(dj, "ecc_volatile_uncorrected", -1);
      d.retired_pages_pending = num(dj, "retired_pages_pending", -1);
      d.remapped_rows_pending = num(dj, "remapped_rows_pending", -1);
      d.remapped_rows_failed = num(dj, "remapped_rows_failed", -1);
      d.throttle_reasons = num(dj, "throttle_reasons", -1);
      d.temperature_c = num(dj, "temperature_c", -1);
      d.power_mw = num(dj, "power_mw", -1);
      d.pcie_replays = num(dj, "pcie_replays", -1);
      g.gpus.push_back(std::move(d));
    }
  *out = std::move(g);
  return true;
}

std::string stacks_file_for(const std::string& dump_file) { return dump_file + kStacksSuffix; }

bool is_side_file(const std::string& name) {
  return ends_with(name, kStacksSuffix) || ends_with(name, kGpuSuffix);
}

}  // namespace fr::log
