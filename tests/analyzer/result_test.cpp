// The typed analysis (analyzer/result.h): its JSON is the fr-analysis/1 document byte for byte as
// the analyzer wrote it before the type existed (tests/analyzer/data/*.json, written by that
// analyzer from the same synthetic dump sets), a document read back writes the same document,
// and the text view reads the same from the type as from the JSON.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "analyzer/analyze.h"
#include "analyzer/html.h"
#include "synth/synth.h"
#include "testing/files.h"

namespace fs = std::filesystem;
using fr::analyzer::Analysis;
using fr::test::slurp;
using nlohmann::json;

namespace {

struct Fixture {
  const char* name;   // tests/analyzer/data/<name>.json
  const char* fault;  // as fr-gendumps --ranks 4 --entries 16 --ranks-per-host 2 --fault <fault>
};

const Fixture kFixtures[] = {{"stuck", "rank=2,kind=gpu-stall"},
                             {"mismatch", "rank=1,kind=mismatch-count"},
                             {"node_lost", "rank=3,kind=node-lost"},
                             {"straggler", "rank=0,kind=slow,ms=200"},
                             {"p2p", "rank=1,kind=p2p-skip"}};

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t p = 0; (p = s.find(from, p)) != std::string::npos; p += to.size())
    s.replace(p, from.size(), to);
  return s;
}

// The analysis of the fixture's dump set, written into a fresh directory.
struct Analysed {
  std::string root, dir;
  Analysis analysis;
  explicit Analysed(const Fixture& f) {
    std::string tmpl = (fs::temp_directory_path() / "fr-result-test.XXXXXX").string();
    root = mkdtemp(tmpl.data());
    dir = root + "/set";
    fr::synth::Spec spec;
    std::string err;
    REQUIRE(fr::synth::add_fault(f.fault, &spec, &err));
    spec.ranks = 4, spec.entries = 16, spec.ranks_per_host = 2;
    REQUIRE(fr::synth::write_dump_set(spec, dir, &err));
    auto a = fr::analyzer::analyze({dir}, {}, &err);
    INFO(err);
    REQUIRE(a.has_value());
    analysis = std::move(*a);
  }
  ~Analysed() {
    std::error_code ec;
    fs::remove_all(root, ec);
  }
};

}  // namespace

TEST_CASE("typed analysis: to_json writes the document the analyzer wrote before, byte for byte",
          "[analyzer]") {
  for (const Fixture& f : kFixtures) {
    INFO(f.name);
    Analysed got(f);
    const std::string want =
        slurp(std::string(FR_SOURCE_DIR) + "/tests/analyzer/data/" + f.name + ".json");
    REQUIRE(!want.empty());
    CHECK(replace_all(got.analysis.to_json().dump(2) + "\n", got.dir, "DIR") == want);
    // take_json writes the same document, and leaves the findings without their evidence.
    CHECK(replace_all(got.analysis.take_json().dump(2) + "\n", got.dir, "DIR") == want);
    CHECK(got.analysis.verdict.evidence.is_null());
    for (const auto& finding : got.analysis.findings) CHECK(finding.evidence.is_null());
  }
}

TEST_CASE("typed analysis: a document read back writes the same document", "[analyzer]") {
  for (const Fixture& f : kFixtures) {
    INFO(f.name);
    const json doc =
        json::parse(slurp(std::string(FR_SOURCE_DIR) + "/tests/analyzer/data/" + f.name + ".json"));
    const Analysis back = Analysis::from_json(doc);
    CHECK(back.to_json() == doc);
    json converted = back;  // nlohmann's conversions give the same
    CHECK(converted == doc);
    CHECK(doc.get<Analysis>().to_json() == doc);
    // The views read the type and the stored document alike.
    CHECK(fr::analyzer::render_text(back, false) == fr::analyzer::render_text(doc, false));
    CHECK(fr::analyzer::render_incident_html(back, {}) ==
          fr::analyzer::render_incident_html(doc, {}));
  }
}

TEST_CASE("typed analysis: a document that only says why there is no analysis", "[analyzer]") {
  Analysis none;
  none.complete = false;
  none.verdict.summary = "nothing readable in the input: no dump files found";
  const json doc = none.to_json();
  CHECK(doc == json{{"schema", "fr-analysis/1"},
                    {"verdict",
                     {{"kind", "incomplete"},
                      {"summary", none.verdict.summary},
                      {"culprit_ranks", json::array()}}},
                    {"findings", json::array()}});
  CHECK(Analysis::from_json(doc).to_json() == doc);
  CHECK(fr::analyzer::render_text(none, false).rfind("verdict: incomplete - nothing readable", 0) ==
        0);
  CHECK_THROWS(Analysis::from_json(json{{"verdict", {{"kind", "hung"}}}}));
}
