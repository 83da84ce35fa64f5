// See slow_history.h. Collectives and links are arrays of numbers, not objects: a node of eight
// ranks keeps about a thousand samples, and the file stays a few MiB at most.
#include "log/slow_history.h"

#include <stdexcept>
#include <type_traits>

#include <nlohmann/json.hpp>

#include "common/time_ns.h"

namespace fr::log {

namespace {

using nlohmann::json;

json coll_json(const HistoryColl& c) { return json::array({c.seq, c.op, c.call_ns, c.gpu_ns}); }

json link_json(const HistoryLink& l) {
  return json::array(
      {l.comm_id, l.channel, l.peer, l.send ? 1 : 0, l.op_seq, l.steps, l.step_ns, l.state});
}

json sample_json(const HistorySample& s) {
  json comms = json::array(), links = json::array();
  for (const auto& c : s.comms) {
    json colls = json::array();
    for (const auto& k : c.colls) colls.push_back(coll_json(k));
    json comm = {
        {"id", c.id}, {"rank", c.rank}, {"size", c.size}, {"busy", c.busy}, {"colls", colls}};
    if (!c.marks.empty()) {
      json marks = json::array();
      for (const auto& k : c.marks)
        marks.push_back(json::array({k.seq, k.gpu_start_ns, k.gpu_end_ns}));
      comm["marks"] = std::move(marks);
    }
    comms.push_back(std::move(comm));
  }
  for (const auto& l : s.links) links.push_back(link_json(l));
  return {{"t_ns", s.time_ns}, {"comms", comms}, {"links", links}};
}

// An array of at most `max` entries under `key` (absent: empty); throws on anything else.
const json& bounded(const json& j, const char* key, size_t max) {
  static const json kEmpty = json::array();
  auto it = j.find(key);
  if (it == j.end()) return kEmpty;
  if (!it->is_array()) throw std::runtime_error(std::string("'") + key + "' is not an array");
  if (it->size() > max)
    throw std::runtime_error(std::string("'") + key + "' has " + std::to_string(it->size()) +
                             " entries, more than " + std::to_string(max));
  return *it;
}

// A number of type T from a JSON number (throws on another type or out of range).
template <typename T>
T num(const json& j) {
  if (!j.is_number_integer()) throw std::runtime_error("a field is not an integer");
  if constexpr (std::is_unsigned_v<T>) {
    if (j.is_number_unsigned()) return T(j.get<uint64_t>());
    const int64_t v = j.get<int64_t>();
    if (v < 0) throw std::runtime_error("a count is negative");
    return T(v);
  } else {
    return T(j.get<int64_t>());
  }
}

// A time or duration in ns: before the epoch (below 0) or past 2^62 ns it is none, 0, so the
// judges' sums and products of times stay within range.
int64_t ns(const json& j) { return fr::time_or_zero(num<int64_t>(j)); }

HistorySample sample_from(const json& j) {
  if (!j.is_object()) throw std::runtime_error("a sample is not an object");
  HistorySample s;
  s.time_ns = ns(j.at("t_ns"));
  for (const json& c : bounded(j, "comms", NodeSlowHistory::kMaxComms)) {
    HistoryComm hc;
    hc.id = num<uint64_t>(c.at("id"));
    hc.rank = num<int>(c.at("rank"));
    hc.size = num<int>(c.at("size"));
    hc.busy = c.value("busy", false);
    for (const json& k : bounded(c, "colls", NodeSlowHistory::kMaxColls)) {
      if (!k.is_array() || k.size() != 4) throw std::runtime_error("a collective is not 4 numbers");
      hc.colls.push_back({num<uint64_t>(k[0]), num<uint32_t>(k[1]), ns(k[2]), ns(k[3])});
    }
    for (const json& k : bounded(c, "marks", NodeSlowHistory::kMaxColls)) {
      if (!k.is_array() || k.size() != 3) throw std::runtime_error("a mark is not 3 numbers");
      hc.marks.push_back({num<uint64_t>(k[0]), ns(k[1]), ns(k[2])});
    }
    s.comms.push_back(std::move(hc));
  }
  for (const json& l : bounded(j, "links", NodeSlowHistory::kMaxLinks)) {
    if (!l.is_array() || l.size() != 8) throw std::runtime_error("a link is not 8 numbers");
    s.links.push_back({num<uint64_t>(l[0]), num<int32_t>(l[1]), num<int32_t>(l[2]),
                       num<int>(l[3]) != 0, num<uint64_t>(l[4]), num<uint32_t>(l[5]), ns(l[6]),
                       num<uint32_t>(l[7])});
  }
  return s;
}

ProcessHistory process_from(const json& j) {
  if (!j.is_object()) throw std::runtime_error("not an object");
  ProcessHistory p;
  p.rank = num<int>(j.at("rank"));
  p.pid = num<int>(j.at("pid"));
  const json& log = j.value("log", json(""));
  if (log.is_string()) p.log = log.get<std::string>().substr(0, 256);
  for (const json& s : bounded(j, "samples", NodeSlowHistory::kMaxSamples))
    p.samples.push_back(sample_from(s));
  return p;
}

}  // namespace

std::string slow_history_to_text(const NodeSlowHistory& h) {
  json procs = json::array();
  for (const auto& p : h.processes) {
    json samples = json::array();
    for (const auto& s : p.samples) samples.push_back(sample_json(s));
    procs.push_back({{"rank", p.rank}, {"pid", p.pid}, {"log", p.log}, {"samples", samples}});
  }
  json j = {{"schema", kSlowHistorySchema},
            {"node", h.node},
            {"time_ns", h.time_ns},
            {"processes", procs}};
  return j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
}

bool parse_slow_history(const std::string& text, NodeSlowHistory* out, std::string* error,
                        std::vector<std::string>* notes) {
  if (text.size() > NodeSlowHistory::kMaxFileBytes) {
    *error = "larger than " + std::to_string(NodeSlowHistory::kMaxFileBytes >> 20) + " MiB";
    return false;
  }
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    *error = "not a JSON object";
    return false;
  }
  const json& schema = j.value("schema", json(""));
  if (!schema.is_string() || schema.get<std::string>() != kSlowHistorySchema) {
    *error = std::string("not schema ") + kSlowHistorySchema;
    return false;
  }
  NodeSlowHistory h;
  const json& node = j.value("node", json(""));
  if (node.is_string()) h.node = node.get<std::string>().substr(0, 256);
  const json& t = j.value("time_ns", json(0));
  if (t.is_number_integer()) h.time_ns = t.get<int64_t>();
  const json& procs = j.value("processes", json::array());
  if (!procs.is_array()) {
    *error = "'processes' is not an array";
    return false;
  }
  size_t i = 0;
  for (const json& p : procs) {
    if (i++ >= NodeSlowHistory::kMaxProcesses) {
      notes->push_back("processes past the first " +
                       std::to_string(NodeSlowHistory::kMaxProcesses) + " left out");
      break;
    }
    try {
      h.processes.push_back(process_from(p));
    } catch (const std::exception& e) {
      notes->push_back("process entry " + std::to_string(i - 1) + " left out: " + e.what());
    }
  }
  *out = std::move(h);
  return true;
}

}  // namespace fr::log
