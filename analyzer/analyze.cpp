// The cross-rank analysis, pass by pass (passes.h): match every communicator's members by
// sequence number and turn what does not line up into stalls; rank the stalls so the one that
// explains the others becomes the verdict and the rest findings; let dead writers and lost nodes
// override it; then write the evidence, the skew and the context. Culprits always come from the
// whole group (the minority, the members that never came), never from read order.
#include "analyzer/analyze.h"

#include <algorithm>

#include "common/parallel.h"

#include "passes.h"

namespace fr::analyzer {
namespace {

using nlohmann::json;

Inputs inputs_of(const Model& m, const Options& opts) {
  Inputs in;
  in.paths = m.paths;
  in.files_read = m.files_read;
  for (const auto& s : m.skipped) in.skipped.push_back({s.file, s.error});
  for (const auto& w : m.warnings)
    in.warnings.push_back({w.file, w.error});  // read: remarks, not failures
  in.clock = m.clock_aligned ? "aligned" : "per_host";
  in.job_id = m.job_id;
  for (const auto& [job, files] : m.other_jobs) in.other_jobs.push_back({job, files});
  in.filtered = !opts.ranks.empty() || !opts.comm.empty();
  if (in.filtered) in.filter_ranks = opts.ranks, in.filter_comm = opts.comm;
  return in;
}

// The matching passes over every communicator; returns the communicators the --comm filter
// keeps, each with its frontier spread.
std::vector<Communicator> match_communicators(AnalysisState& state) {
  const Model& m = state.model;
  state.coll_frontiers.assign(m.comms.size(), {});
  state.p2p_frontiers.assign(m.comms.size(), {});
  std::vector<Communicator> comms;
  for (int ci = 0; ci < static_cast<int>(m.comms.size()); ++ci) {
    std::optional<Spread> coll, p2p;
    const size_t before = state.stalls.size();
    analyze_collectives(state, ci, &coll);
    analyze_alltoall_totals(state, ci);
    analyze_p2p(state, ci, &p2p);
    analyze_unrecorded_p2p(state, ci);
    analyze_joining(state, ci);
    if (!comm_matches(m.comms[ci], state.opts.comm)) continue;
    Communicator entry = communicator_of(m, m.comms[ci]);
    entry.coll = coll;
    entry.p2p = p2p;
    entry.stalled = state.stalls.size() > before;
    for (const auto& x : missing_members(m, m.comms[ci], state.job_missing))
      entry.missing_members.emplace_back(x.rank_in_comm, x.global);
    comms.push_back(std::move(entry));
  }
  return comms;
}

// The verdict when no stall made one: ranks without a dump leave it open, else there is no hang.
Finding quiet_verdict(const RankCensus& census, const std::vector<Finding>& findings) {
  Finding v;
  v.evidence = json::array();
  if (!census.missing.empty()) {
    v.kind = VerdictKind::kIncomplete;
    v.summary = "no hang among the " + std::to_string(census.found.size()) + " ranks found, but " +
                ranks_word(census.missing.size()) + rank_list_text(census.missing) +
                (census.missing.size() > 1 ? " have" : " has") + " no dump";
    v.culprit_ranks = census.missing;
    return v;
  }
  // The attributed fail-slow findings say more than the skew's average; the skew's straggler is
  // named when there is none.
  std::string straggler, slow;
  for (const auto& f : findings)
    if (f.kind == VerdictKind::kSkew)
      straggler = "; " + f.summary;
    else if (f.kind == VerdictKind::kSlow)
      slow += "; " + f.summary;
  if (!slow.empty()) straggler = slow;
  v.kind = VerdictKind::kNoHang;
  v.summary = "no hang: every communicator's members agree and nothing is left waiting" + straggler;
  return v;
}

Ranks ranks_of(const RankCensus& census, bool any_stall) {
  Ranks r{census.expected, census.found, census.missing, census.dead, std::nullopt};
  // A job whose every rank is gone and nothing waits has exited: its ranks are not dead.
  if (census.all_dead && !any_stall) {
    r.dead.clear();
    r.exited = census.dead;
  }
  return r;
}

// The matching and the ranking of stalls into a verdict and findings (into `a`). False when the
// window loaded too little for this case (the caller analyses every record instead).
bool match_and_rank(const Model& m, const Options& opts, const RankCensus& census,
                    AnalysisState& state, Analysis* a, bool* have_verdict, bool* any_stall) {
  a->inputs = inputs_of(m, opts);
  a->communicators = match_communicators(state);
  if (state.needs_history && m.windowed) return false;
  analyze_nixl(state);
  rank_stalls(state);
  *any_stall = !state.stalls.empty();
  std::vector<Stall> ranked = std::move(state.stalls);
  apply_overrides(m, census, &ranked);

  // The first stall is the verdict, the others findings (--comm keeps the findings on that
  // communicator).
  for (size_t i = 0; i < ranked.size(); ++i) {
    const Stall& s = ranked[i];
    if (!opts.comm.empty() && s.comm >= 0 && i > 0 && !comm_matches(m.comms[s.comm], opts.comm))
      continue;
    if (i == 0)
      a->verdict = finding_of(state, s), *have_verdict = true;
    else
      a->findings.push_back(finding_of(state, s));
  }
  for (auto& f : torch_arg_findings(m, opts.comm)) a->findings.push_back(std::move(f));
  return true;
}

}  // namespace

Analysis analyze_model(const Model& m, const Options& opts) {
  AnalysisState state{m, opts, {}, {}, {opts.ranks.begin(), opts.ranks.end()}, {}, {}, {}, false};
  const RankCensus census = take_census(m);
  state.job_missing.insert(census.missing.begin(), census.missing.end());

  // The skew reads every member's collective history and nothing the matching writes: it runs
  // beside the matching.
  SkewResult skew;
  std::vector<Finding> slow;
  Analysis a;
  bool have_verdict = false, any_stall = false, matched = false;
  fr::parallel::both(
      [&] {
        skew = measure_skew(state);
        slow = find_slow(state);
      },
      [&] { matched = match_and_rank(m, opts, census, state, &a, &have_verdict, &any_stall); });
  // The window loaded too little for this case: the same analysis from every record.
  if (!matched) return analyze_model(load_model(m.paths, opts.threads, LoadMode::kFull), opts);
  if (skew.straggler) a.findings.push_back(std::move(*skew.straggler));
  for (auto& f : slow) a.findings.push_back(std::move(f));
  if (!have_verdict) a.verdict = quiet_verdict(census, a.findings);

  a.ranks = ranks_of(census, any_stall);
  add_recent_ops(m, &a.verdict);
  mark_consequences(a.verdict, &a.findings);
  a.skew = std::move(skew.table);
  add_context(m, &a);
  add_torch_context(m, &a);
  return a;
}

std::optional<Analysis> analyze(const std::vector<std::string>& paths, const Options& opts,
                                std::string* fatal_error) {
  if (paths.empty()) {
    if (fatal_error)
      *fatal_error = "no input: give a dump-set directory, a dump file or a PyTorch dump";
    return std::nullopt;
  }
  Model m = load_model(paths, opts.threads, LoadMode::kWindow);
  if (m.procs.empty() && m.rankless.empty()) {
    if (fatal_error) {
      std::string why = m.skipped.empty() ? "no dump files found"
                                          : m.skipped.front().file + ": " + m.skipped.front().error;
      if (m.skipped.size() > 1) why += " (and " + std::to_string(m.skipped.size() - 1) + " more)";
      *fatal_error = "nothing readable in the input: " + why;
    }
    return std::nullopt;
  }
  return analyze_model(m, opts);
}

json analyze_paths(const std::vector<std::string>& paths, const Options& opts,
                   std::string* fatal_error) {
  std::optional<Analysis> a = analyze(paths, opts, fatal_error);
  return a ? a->to_json() : json(nullptr);
}

}  // namespace fr::analyzer
