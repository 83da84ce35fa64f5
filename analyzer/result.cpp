// The fr-analysis/1 document from the typed result and back (see result.h). The keys of the
// document are written here and nowhere else.
#include "analyzer/result.h"

#include <stdexcept>
#include <utility>

namespace fr::analyzer {
namespace {

using nlohmann::json;

// The keys a finding has as fields; every other key of a finding is a detail.
const char* const kFindingKeys[] = {"kind",          "summary",  "comm",          "seq",
                                    "seq_kind",      "op",       "culprit_ranks", "culprit_pids",
                                    "blocked_ranks", "mismatch", "consequence",   "consequence_of",
                                    "evidence"};

json comm_to_json(const CommRef& c) { return {{"id", c.id}, {"name", c.name}, {"size", c.size}}; }

CommRef comm_from_json(const json& j) {
  return {j.at("id").get<std::string>(), j.value("name", std::string()), j.value("size", -1)};
}

VerdictKind kind_from_json(const json& j) {
  const std::string name = j.get<std::string>();
  VerdictKind k{};
  if (!verdict_from_name(name, &k))
    throw std::invalid_argument("unknown verdict kind '" + name + "'");
  return k;
}

json finding_to_json(const Finding& f) {
  json j = f.details.is_object() ? f.details : json::object();
  j["kind"] = verdict_name(f.kind);
  j["summary"] = f.summary;
  if (f.comm) {
    j["comm"] = comm_to_json(*f.comm);
    j["seq"] = f.seq;
    j["seq_kind"] = f.seq_kind;
    j["op"] = f.op;
  }
  j["culprit_ranks"] = f.culprit_ranks;
  if (!f.culprit_pids.empty() || f.kind == VerdictKind::kNixlStalled ||
      f.kind == VerdictKind::kNixlDisconnected)
    j["culprit_pids"] = f.culprit_pids;
  if (!f.blocked_ranks.empty()) j["blocked_ranks"] = f.blocked_ranks;
  if (f.mismatch) {
    json values = json::array();
    for (const auto& v : f.mismatch->values)
      values.push_back({{"value", v.value}, {"ranks", v.ranks}});
    j["mismatch"] = {{"field", f.mismatch->field}, {"values", values}};
    if (!f.mismatch->expected.empty()) j["mismatch"]["expected"] = f.mismatch->expected;
  }
  if (f.consequence) j["consequence"] = true;
  if (f.consequence_of) j["consequence_of"] = verdict_name(*f.consequence_of);
  if (!f.evidence.is_null()) j["evidence"] = f.evidence;
  return j;
}

Finding finding_from_json(const json& j) {
  Finding f;
  f.kind = kind_from_json(j.at("kind"));
  f.summary = j.value("summary", std::string());
  if (j.contains("comm") && j["comm"].is_object()) {
    f.comm = comm_from_json(j["comm"]);
    f.seq = j.value("seq", uint64_t{0});
    f.seq_kind = j.value("seq_kind", std::string());
    f.op = j.value("op", std::string());
  }
  if (j.contains("culprit_ranks")) f.culprit_ranks = j["culprit_ranks"].get<std::vector<int>>();
  if (j.contains("culprit_pids")) f.culprit_pids = j["culprit_pids"].get<std::vector<int>>();
  if (j.contains("blocked_ranks")) f.blocked_ranks = j["blocked_ranks"].get<std::vector<int>>();
  if (j.contains("mismatch") && j["mismatch"].is_object()) {
    const json& m = j["mismatch"];
    Mismatch mismatch{m.value("field", std::string()), {}, m.value("expected", std::string())};
    for (const auto& v : m.value("values", json::array()))
      mismatch.values.push_back(
          {v.at("value").get<std::string>(), v.at("ranks").get<std::vector<int>>()});
    f.mismatch = std::move(mismatch);
  }
  f.consequence = j.value("consequence", false);
  if (j.contains("consequence_of")) f.consequence_of = kind_from_json(j["consequence_of"]);
  if (j.contains("evidence")) f.evidence = j["evidence"];
  for (const auto& [key, value] : j.items()) {
    bool known = false;
    for (const char* k : kFindingKeys) known = known || key == k;
    if (!known) f.details[key] = value;
  }
  return f;
}

json notes_json(const std::vector<FileNote>& notes, const char* text_key) {
  json out = json::array();
  for (const auto& n : notes) out.push_back({{"file", n.file}, {text_key, n.text}});
  return out;
}

std::vector<FileNote> notes_from_json(const json& j, const char* text_key) {
  std::vector<FileNote> out;
  for (const auto& n : j)
    out.push_back({n.value("file", std::string()), n.value(text_key, std::string())});
  return out;
}

json spread_json(const std::optional<Spread>& s) {
  if (!s) return nullptr;
  json j = {{"min_enqueued", s->min_enqueued},
            {"max_enqueued", s->max_enqueued},
            {"min_completed", s->min_completed},
            {"max_completed", s->max_completed}};
  if (s->stalled_seq) j["stalled_seq"] = *s->stalled_seq;
  return j;
}

std::optional<Spread> spread_from_json(const json& j) {
  if (!j.is_object()) return std::nullopt;
  Spread s{j.at("min_enqueued").get<uint64_t>(), j.at("max_enqueued").get<uint64_t>(),
           j.at("min_completed").get<uint64_t>(), j.at("max_completed").get<uint64_t>(),
           std::nullopt};
  if (j.contains("stalled_seq")) s.stalled_seq = j["stalled_seq"].get<uint64_t>();
  return s;
}

json members_json(const std::vector<std::pair<int, int>>& members, bool null_unknown) {
  json out = json::array();
  for (const auto& [in_comm, global] : members)
    out.push_back({{"rank_in_comm", in_comm},
                   {"global_rank", null_unknown && global < 0 ? json(nullptr) : json(global)}});
  return out;
}

std::vector<std::pair<int, int>> members_from_json(const json& j) {
  std::vector<std::pair<int, int>> out;
  for (const auto& m : j)
    out.emplace_back(m.at("rank_in_comm").get<int>(),
                     m["global_rank"].is_number() ? m["global_rank"].get<int>() : -1);
  return out;
}

json communicator_to_json(const Communicator& c) {
  json j = comm_to_json(c.comm);
  j["origin"] = c.origin;
  j["parent"] = c.parent.empty() ? json(nullptr) : json(c.parent);
  j["members"] = members_json(c.members, false);
  j["frontier"] = {
      {"coll", spread_json(c.coll)}, {"p2p", spread_json(c.p2p)}, {"stalled", c.stalled}};
  if (!c.missing_members.empty()) j["missing_members"] = members_json(c.missing_members, true);
  return j;
}

Communicator communicator_from_json(const json& j) {
  Communicator c;
  c.comm = comm_from_json(j);
  c.origin = j.value("origin", std::string());
  if (j.contains("parent") && j["parent"].is_string()) c.parent = j["parent"].get<std::string>();
  c.members = members_from_json(j.value("members", json::array()));
  const json frontier = j.value("frontier", json::object());
  c.coll = spread_from_json(frontier.value("coll", json()));
  c.p2p = spread_from_json(frontier.value("p2p", json()));
  c.stalled = frontier.value("stalled", false);
  c.missing_members = members_from_json(j.value("missing_members", json::array()));
  return c;
}

json inputs_to_json(const Inputs& in) {
  json j = {{"paths", in.paths},
            {"files_read", in.files_read},
            {"skipped", notes_json(in.skipped, "error")},
            {"warnings", notes_json(in.warnings, "warning")},
            {"clock", in.clock}};
  if (!in.job_id.empty()) j["job_id"] = in.job_id;
  if (!in.other_jobs.empty()) {
    j["other_jobs"] = json::array();
    for (const auto& o : in.other_jobs)
      j["other_jobs"].push_back({{"job_id", o.job_id}, {"files", o.files}});
  }
  if (in.filtered) j["filters"] = {{"ranks", in.filter_ranks}, {"comm", in.filter_comm}};
  return j;
}

Inputs inputs_from_json(const json& j) {
  Inputs in;
  in.paths = j.value("paths", std::vector<std::string>{});
  in.files_read = j.value("files_read", uint64_t{0});
  in.skipped = notes_from_json(j.value("skipped", json::array()), "error");
  in.warnings = notes_from_json(j.value("warnings", json::array()), "warning");
  in.clock = j.value("clock", std::string());
  in.job_id = j.value("job_id", std::string());
  for (const auto& o : j.value("other_jobs", json::array()))
    if (o.is_object())
      in.other_jobs.push_back({o.value("job_id", std::string()), o.value("files", uint64_t{0})});
  if (j.contains("filters")) {
    in.filtered = true;
    in.filter_ranks = j["filters"].value("ranks", std::vector<int>{});
    in.filter_comm = j["filters"].value("comm", std::string());
  }
  return in;
}

json ranks_to_json(const Ranks& r) {
  json j = {{"expected", r.expected}, {"found", r.found}, {"missing", r.missing}, {"dead", r.dead}};
  if (r.exited) j["exited"] = *r.exited;
  return j;
}

Ranks ranks_from_json(const json& j) {
  Ranks r;
  r.expected = j.value("expected", 0);
  r.found = j.value("found", std::vector<int>{});
  r.missing = j.value("missing", std::vector<int>{});
  r.dead = j.value("dead", std::vector<int>{});
  if (j.contains("exited")) r.exited = j["exited"].get<std::vector<int>>();
  return r;
}

}  // namespace

json Analysis::to_json() const {
  json doc = complete && context.is_object() ? context : json::object();
  doc["schema"] = "fr-analysis/1";
  doc["verdict"] = finding_to_json(verdict);
  json found = json::array();
  for (const auto& f : findings) found.push_back(finding_to_json(f));
  doc["findings"] = std::move(found);
  if (!complete) return doc;
  doc["inputs"] = inputs_to_json(inputs);
  doc["ranks"] = ranks_to_json(ranks);
  json comms = json::array();
  for (const auto& c : communicators) comms.push_back(communicator_to_json(c));
  doc["communicators"] = std::move(comms);
  json rows = json::array();
  for (const auto& r : skew)
    rows.push_back({{"rank", r.rank},
                    {"mean_late_ns", r.mean_late_ns},
                    {"max_late_ns", r.max_late_ns},
                    {"collectives", r.collectives}});
  doc["skew"] = std::move(rows);
  return doc;
}

json Analysis::take_json() {
  std::vector<json> evidence;  // the verdict's, then each finding's
  evidence.push_back(std::exchange(verdict.evidence, nullptr));
  for (auto& f : findings) evidence.push_back(std::exchange(f.evidence, nullptr));
  json doc = to_json();  // writes no evidence where it is null
  auto put = [](json& finding, json&& e) {
    if (!e.is_null()) finding["evidence"] = std::move(e);
  };
  put(doc["verdict"], std::move(evidence[0]));
  for (size_t i = 0; i < findings.size(); ++i) put(doc["findings"][i], std::move(evidence[i + 1]));
  return doc;
}

Analysis Analysis::from_json(const json& doc) {
  Analysis a;
  a.verdict = finding_from_json(doc.at("verdict"));
  for (const auto& f : doc.value("findings", json::array()))
    a.findings.push_back(finding_from_json(f));
  a.complete = doc.contains("ranks");
  if (!a.complete) return a;
  a.inputs = inputs_from_json(doc.value("inputs", json::object()));
  a.ranks = ranks_from_json(doc["ranks"]);
  for (const auto& c : doc.value("communicators", json::array()))
    a.communicators.push_back(communicator_from_json(c));
  for (const auto& r : doc.value("skew", json::array()))
    a.skew.push_back({r.value("rank", -1), r.value("mean_late_ns", int64_t{0}),
                      r.value("max_late_ns", int64_t{0}), r.value("collectives", uint64_t{0})});
  for (const char* k :
       {"stack_groups", "stacks_unavailable", "gpus", "gpus_unavailable", "torch_joins"})
    if (doc.contains(k)) a.context[k] = doc[k];
  return a;
}

}  // namespace fr::analyzer
