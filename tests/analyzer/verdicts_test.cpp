// The verdict kinds list (analyzer/verdicts.h): every kind has its own name and meaning, names
// parse back to their kind, the analysis writes no kind the list does not have, and its order
// ranks two independent problems.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <set>
#include <string>

#include "analyzer/analyze.h"
#include "synth/synth.h"
#include "analyzer/verdicts.h"

namespace fs = std::filesystem;
using fr::analyzer::VerdictKind;
using nlohmann::json;

namespace {

const VerdictKind kAll[] = {
#define FR_TEST_KIND(e, name, meaning) VerdictKind::e,
    FR_VERDICT_KINDS(FR_TEST_KIND)
#undef FR_TEST_KIND
};

// Every `kind` the document holds: the verdict's and each finding's.
std::vector<std::string> kinds_in(const json& doc) {
  std::vector<std::string> out{doc["verdict"]["kind"].get<std::string>()};
  for (const auto& f : doc["findings"]) out.push_back(f["kind"].get<std::string>());
  return out;
}

}  // namespace

TEST_CASE("verdict kinds: distinct names and meanings that parse back", "[analyzer]") {
  STATIC_REQUIRE(sizeof kAll / sizeof kAll[0] == fr::analyzer::kVerdictKindCount);
  std::set<std::string> names, meanings;
  for (VerdictKind k : kAll) {
    const std::string name = fr::analyzer::verdict_name(k);
    INFO(name);
    CHECK(names.insert(name).second);
    CHECK(meanings.insert(fr::analyzer::verdict_meaning(k)).second);
    VerdictKind back{};
    REQUIRE(fr::analyzer::verdict_from_name(name, &back));
    CHECK(back == k);
    CHECK(fr::analyzer::is_verdict(name, k));
  }
  VerdictKind none{};
  CHECK_FALSE(fr::analyzer::verdict_from_name("hung", &none));
  // The order is the ranking; "verdict ranking" below checks it through analyses, not the enum.
}

TEST_CASE("verdict kinds: the analysis writes only listed kinds", "[analyzer]") {
  const std::string faults[] = {"",
                                "kind=hang-host,rank=2",
                                "kind=crash,rank=1",
                                "kind=gpu-stall,rank=3",
                                "kind=mismatch-count,rank=4",
                                "kind=p2p-skip,rank=5",
                                "kind=slow,rank=6,ms=200",
                                "kind=node-lost,rank=5"};
  std::string tmpl = (fs::temp_directory_path() / "fr-verdicts-test.XXXXXX").string();
  const std::string root = mkdtemp(tmpl.data());
  std::set<std::string> seen;
  int n = 0;
  for (const auto& fault : faults) {
    fr::synth::Spec spec;
    spec.ranks = 8;
    spec.entries = 96;
    if (!fault.empty()) {
      fr::synth::Fault f;
      std::string err;
      REQUIRE(fr::synth::parse_fault(fault, &f, &err));
      spec.faults.push_back(f);
    }
    const std::string dir = root + "/set" + std::to_string(n++);
    std::string err;
    REQUIRE(fr::synth::write_dump_set(spec, dir, &err));
    json doc = fr::analyzer::analyze_paths({dir}, {}, &err);
    REQUIRE(doc.is_object());
    for (const auto& kind : kinds_in(doc)) {
      INFO(fault << ": " << kind);
      VerdictKind k{};
      CHECK(fr::analyzer::verdict_from_name(kind, &k));
      seen.insert(kind);
    }
  }
  std::error_code ec;
  fs::remove_all(root, ec);
  // The faults above reach most kinds; the rest are covered by the analyzer's own tests.
  CHECK(seen.size() >= 6);
}

namespace {

// The verdict and the findings' kinds of a synthetic job with two faults on different
// communicators that do not explain each other (each culprit waits nowhere else).
json two_faults(const std::string& a, const std::string& b, const std::string& dir) {
  fr::synth::Spec spec;
  spec.ranks = 8;
  spec.entries = 96;
  for (const auto& f : {a, b}) {
    std::string err;
    REQUIRE(fr::synth::add_fault(f, &spec, &err));
  }
  std::string err;
  REQUIRE(fr::synth::write_dump_set(spec, dir, &err));
  json doc = fr::analyzer::analyze_paths({dir}, {}, &err);
  INFO(err);
  REQUIRE(doc.is_object());
  return doc;
}

bool has_finding(const json& doc, const std::string& kind, int rank) {
  for (const auto& f : doc["findings"])
    if (f["kind"] == kind)
      for (const auto& r : f["culprit_ranks"])
        if (r == rank) return true;
  return false;
}

}  // namespace

TEST_CASE("verdict ranking: of two independent problems, the kind that explains more wins",
          "[analyzer]") {
  // Each pair puts its faults on two different tensor-parallel groups ({0,1} ... {6,7}) at the
  // same step, once in each placement, so that neither the rank order nor the communicators' ids
  // decide: only the order of the kinds does. The other problem stays a finding.
  struct Pair {
    const char* first_kind;   // the verdict
    const char* first_fault;  // fault syntax without the rank
    const char* second_kind;  // a finding
    const char* second_fault;
  };
  const Pair pairs[] = {
      {"mismatch", "kind=mismatch-count,comm=tp,step=20", "not_entered",
       "kind=skip,comm=tp,step=20"},
      {"not_entered", "kind=skip,comm=tp,step=20", "stuck_in_collective",
       "kind=gpu-stall,comm=tp,step=20"},
      {"mismatch", "kind=mismatch-count,comm=tp,step=20", "stuck_in_collective",
       "kind=gpu-stall,comm=tp,step=20"},
  };
  std::string tmpl = (fs::temp_directory_path() / "fr-ranking-test.XXXXXX").string();
  const std::string root = mkdtemp(tmpl.data());
  int n = 0;
  for (const Pair& p : pairs) {
    for (auto [r1, r2] : {std::pair{1, 6}, std::pair{6, 1}}) {
      const std::string fa = std::string(p.first_fault) + ",rank=" + std::to_string(r1);
      const std::string fb = std::string(p.second_fault) + ",rank=" + std::to_string(r2);
      INFO(fa << " and " << fb);
      json doc = two_faults(fa, fb, root + "/set" + std::to_string(n++));
      INFO(doc["verdict"].dump() << "\nfindings: " << doc["findings"].dump());
      CHECK(doc["verdict"]["kind"] == p.first_kind);
      CHECK(doc["verdict"]["culprit_ranks"] == json({r1}));
      CHECK(has_finding(doc, p.second_kind, r2));
    }
  }
  std::error_code ec;
  fs::remove_all(root, ec);
}
