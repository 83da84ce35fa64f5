// The cross-rank analysis, pass by pass (passes.h): match every communicator's members by
// sequence number and turn what does not line up into stalls; rank the stalls so the one that
// explains the others becomes the verdict and the rest findings; let dead writers and lost nodes
// override it; then write the evidence, the skew and the context. Culprits always come from the
// whole group (the minority, the members that never came), never from read order.
#include "analyzer/analyze.h"

#include <algorithm>

#include "analyzer/passes.h"

namespace fr::analyzer {
namespace {

using nlohmann::json;

json inputs_json(const Model& m, const Options& opts) {
  json skipped = json::array();
  for (const auto& s : m.skipped) skipped.push_back({{"file", s.file}, {"error", s.error}});
  json warnings = json::array();  // files that were read: remarks, not failures
  for (const auto& w : m.warnings) warnings.push_back({{"file", w.file}, {"warning", w.error}});
  json inputs = {{"paths", m.paths},
                 {"files_read", m.files_read},
                 {"skipped", skipped},
                 {"warnings", warnings},
                 {"clock", m.clock_aligned ? "aligned" : "per_host"}};
  if (!m.job_id.empty()) inputs["job_id"] = m.job_id;
  if (!opts.ranks.empty() || !opts.comm.empty()) inputs["filters"] = {{"ranks", opts.ranks}, {"comm", opts.comm}};
  return inputs;
}

// The matching passes over every communicator; returns the communicators the --comm filter
// keeps, each with its frontier summary.
json match_communicators(AnalysisState& state) {
  const Model& m = state.model;
  state.coll_frontiers.assign(m.comms.size(), {});
  state.p2p_frontiers.assign(m.comms.size(), {});
  json comms = json::array();
  for (int ci = 0; ci < static_cast<int>(m.comms.size()); ++ci) {
    json coll = nullptr, p2p = nullptr;
    const size_t before = state.stalls.size();
    analyze_collectives(state, ci, &coll);
    analyze_p2p(state, ci, &p2p);
    analyze_joining(state, ci);
    if (!comm_matches(m.comms[ci], state.opts.comm)) continue;
    json entry = communicator_json(m, m.comms[ci]);
    entry["frontier"] = {{"coll", coll}, {"p2p", p2p}, {"stalled", state.stalls.size() > before}};
    const auto missing = missing_members(m, m.comms[ci], state.job_missing);
    if (!missing.empty()) entry["missing_members"] = missing_json(missing);
    comms.push_back(std::move(entry));
  }
  return comms;
}

// The verdict when no stall made one: ranks without a dump leave it open, else there is no hang.
json quiet_verdict(const RankCensus& census, const std::vector<json>& findings) {
  if (!census.missing.empty())
    return {{"kind", verdict_name(VerdictKind::kIncomplete)},
            {"summary", "no hang among the " + std::to_string(census.found.size()) + " ranks found, but " +
                            ranks_word(census.missing.size()) + rank_list_text(census.missing) +
                            (census.missing.size() > 1 ? " have" : " has") + " no dump"},
            {"culprit_ranks", census.missing},
            {"evidence", json::array()}};
  std::string straggler;
  for (const auto& f : findings)
    if (is_verdict(f.value("kind", std::string()), VerdictKind::kSkew)) straggler = "; " + f["summary"].get<std::string>();
  return {{"kind", verdict_name(VerdictKind::kNoHang)},
          {"summary", "no hang: every communicator's members agree and nothing is left waiting" + straggler},
          {"culprit_ranks", json::array()},
          {"evidence", json::array()}};
}

json ranks_json(const RankCensus& census, bool any_stall) {
  // A job whose every rank is gone and nothing waits has exited: its ranks are not dead.
  const bool exited = census.all_dead && !any_stall;
  json ranks = {{"expected", census.expected},
                {"found", census.found},
                {"missing", census.missing},
                {"dead", exited ? std::vector<int>{} : census.dead}};
  if (exited) ranks["exited"] = census.dead;
  return ranks;
}

}  // namespace

json analyze_model(const Model& m, const Options& opts) {
  AnalysisState state{m, opts, {}, {}, {opts.ranks.begin(), opts.ranks.end()}, {}, {}, {}};
  const RankCensus census = take_census(m);
  state.job_missing.insert(census.missing.begin(), census.missing.end());

  json doc;
  doc["schema"] = "fr-analysis/1";
  doc["inputs"] = inputs_json(m, opts);
  json comms = match_communicators(state);
  rank_stalls(state);
  const bool any_stall = !state.stalls.empty();
  std::vector<Stall> ranked = std::move(state.stalls);
  apply_overrides(m, census, &ranked);

  // The first stall is the verdict, the others findings (--comm keeps the findings on that
  // communicator).
  json verdict;
  std::vector<json> findings;
  for (size_t i = 0; i < ranked.size(); ++i) {
    const Stall& s = ranked[i];
    if (!opts.comm.empty() && s.comm >= 0 && i > 0 && !comm_matches(m.comms[s.comm], opts.comm)) continue;
    json item = stall_json(state, s);
    if (i == 0) verdict = std::move(item);
    else findings.push_back(std::move(item));
  }
  SkewResult skew = measure_skew(state);
  if (!skew.straggler.is_null()) findings.push_back(std::move(skew.straggler));
  if (verdict.is_null()) verdict = quiet_verdict(census, findings);

  doc["ranks"] = ranks_json(census, any_stall);
  add_recent_ops(m, &verdict);
  mark_consequences(verdict, &findings);
  doc["verdict"] = verdict;
  doc["findings"] = findings;
  doc["communicators"] = comms;
  doc["skew"] = skew.table;
  add_context(m, &doc);
  return doc;
}

json analyze_paths(const std::vector<std::string>& paths, const Options& opts, std::string* fatal_error) {
  if (paths.empty()) {
    if (fatal_error) *fatal_error = "no input: give a dump-set directory, a dump file or a PyTorch dump";
    return nullptr;
  }
  Model m = load_model(paths, opts.threads);
  if (m.procs.empty()) {
    if (fatal_error) {
      std::string why = m.skipped.empty() ? "no dump files found" : m.skipped.front().file + ": " + m.skipped.front().error;
      if (m.skipped.size() > 1) why += " (and " + std::to_string(m.skipped.size() - 1) + " more)";
      *fatal_error = "nothing readable in the input: " + why;
    }
    return nullptr;
  }
  return analyze_model(m, opts);
}

}  // namespace fr::analyzer
