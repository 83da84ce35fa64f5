// The verdict kinds list (analyzer/verdicts.h): every kind has its own name and meaning, names
// parse back to their kind, and the analysis writes no kind the list does not have.
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
  // The order is the ranking: a mismatch explains more than a member that never entered, and so on.
  CHECK(VerdictKind::kMismatch < VerdictKind::kNotEntered);
  CHECK(VerdictKind::kNotEntered < VerdictKind::kP2pUnmatched);
  CHECK(VerdictKind::kP2pUnmatched < VerdictKind::kStuckInCollective);
  CHECK(VerdictKind::kStuckInCollective < VerdictKind::kIncomplete);
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
    fr::analyzer::synth::Spec spec;
    spec.ranks = 8;
    spec.entries = 96;
    if (!fault.empty()) {
      fr::analyzer::synth::Fault f;
      std::string err;
      REQUIRE(fr::analyzer::synth::parse_fault(fault, &f, &err));
      spec.faults.push_back(f);
    }
    const std::string dir = root + "/set" + std::to_string(n++);
    std::string err;
    REQUIRE(fr::analyzer::synth::write_dump_set(spec, dir, &err));
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
