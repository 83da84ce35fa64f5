// PyTorch's own Flight Recorder test scenarios (test/distributed/flight_recorder/
// test_fr_analysis.py: match_one_event, test_all_events, testBuildDB cases 1-6; test_loader.py;
// the dump tests of test_c10d_nccl.py), each a per-rank dump set in the layout of a genuine
// PyTorch 2.15 dump, written by scenarios/make_scenarios.py into data/torch-scenarios. Each case
// holds what torch's test expects (and its fr_trace reports) beside what fr-analyze must say.
// Where fr judges differently on purpose, `why` says why.
#include <sys/wait.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "analyzer/analyze.h"
#include "analyzer/html.h"
#include "skip.h"
#include "temp_dir.h"

using nlohmann::json;

namespace {

struct Case {
  const char* name;
  const char* torch;  // what torch's test expects, and fr_trace's outcome on the same files
  const char* kind;   // fr-analyze's verdict
  std::set<int> culprits;
  const char* field;  // mismatch.field, "" when not a mismatch
  // Ranks of the `inconsistent` finding (an output unlike its input, mixed versions); empty:
  // no such finding.
  std::set<int> inconsistent;
  const char* why;  // where fr's verdict differs from torch's on purpose, the reason
};

const Case kCases[] = {
    // match_one_event (4 ranks: the odd one in the middle, so a minority can be told).
    {"match_matched", "FULLY_MATCHED", "no_hang", {}, "", {}, ""},
    {"match_type", "COLLECTIVE_TYPE_MISMATCH, culprit rank 2", "mismatch", {2}, "op", {}, ""},
    {"match_alltoall_even",
     "UNDECIDED, totals agree: no error found",
     "stuck_in_collective",
     {},
     "",
     {},
     "all entered and none finished: said so, nobody blamed"},
    {"match_input_size",
     "SIZE_OR_SYNTAX_MISMATCH, culprit rank 1",
     "mismatch",
     {1},
     "count",
     {1},
     ""},
    {"match_output_size",
     "SIZE_OR_SYNTAX_MISMATCH, culprit rank 1",
     "stuck_in_collective",
     {},
     "",
     {1},
     "NCCL's all_reduce moves the input's count: an output of another size cannot hang it, so it "
     "is a finding and the verdict says where the job waits"},
    {"match_output_size_all",
     "SIZE_OR_SYNTAX_MISMATCH (input vs output on every rank)",
     "no_hang",
     {},
     "",
     {0, 1, 2, 3},
     "every all_reduce finished: no hang; the output sizes are a finding"},
    {"match_state",
     "COLLECTIVE_STATE_MISMATCH, culprit rank 1",
     "stuck_in_collective",
     {0, 2, 3},
     "",
     {},
     "rank 1 finished an all_reduce that needs every member; the others never did: they are "
     "where the job waits, not rank 1"},
    {"match_dtype",
     "COLLECTIVE_DTYPE_MISMATCH, culprit rank 1",
     "stuck_in_collective",
     {},
     "",
     {1},
     "NCCL moves the input's dtype (the same on every rank): an output dtype cannot hang it, so "
     "it is a finding"},
    {"match_gather_nonroot", "FULLY_MATCHED", "no_hang", {}, "", {}, ""},
    {"match_gather_one_output", "FULLY_MATCHED", "no_hang", {}, "", {}, ""},
    // test_all_events: every op torch's COLLECTIVES names, matched (2 ranks).
    {"all_events", "FULLY_MATCHED for each (all_to_all UNDECIDED)", "no_hang", {}, "", {}, ""},
    // testBuildDB (2 ranks; sub_pg holds only the dumping rank).
    {"builddb_1_all_reduce", "pass_check on all 3", "no_hang", {}, "", {}, ""},
    {"builddb_2_allreduce_coalesced", "pass_check", "no_hang", {}, "", {}, ""},
    {"builddb_3_coalesced",
     "pass_check (one collective: the coalesced group)",
     "no_hang",
     {},
     "",
     {},
     ""},
    {"builddb_4_uneven_all_gather_mismatch",
     "pass_check false at the second _broadcast_oop, culprit rank 1",
     "mismatch",
     {0, 1},
     "count",
     {},
     "two members, 25 elements against 16: nothing tells which is right, so both are named (torch "
     "names rank 1 because it compares everyone with rank 0)"},
    {"builddb_5_uneven_reduce_scatter", "pass_check", "no_hang", {}, "", {}, ""},
    {"builddb_6_empty_coalesced_on_rank_0",
     "pass_check on the _reduce_oop rank 1 recorded",
     "not_entered",
     {0},
     "",
     {},
     "rank 1's dump shows a reduce_scatter finished that rank 0 never entered, which NCCL cannot "
     "complete without it: rank 0 is named, and nobody is said to wait"},
    // test_loader.py: a dump without entries is read.
    {"loader_empty", "read", "no_hang", {}, "", {}, ""},
    // test_c10d_nccl.py's dump shapes, and the faults around them.
    {"c10d_short", "recorded, matched", "no_hang", {}, "", {}, ""},
    {"c10d_trace_while_stuck",
     "Not all ranks joining collective: missing rank 3",
     "not_entered",
     {3},
     "",
     {},
     ""},
    {"c10d_trace_while_stuck_timing",
     "Not all ranks joining collective: missing rank 3",
     "not_entered",
     {3},
     "",
     {},
     ""},
    {"c10d_individual_send_recv", "matched", "no_hang", {}, "", {}, ""},
    {"c10d_batched_send_recv",
     "matched in torch's test; fr_trace stops in its p2p table",
     "no_hang",
     {},
     "",
     {},
     ""},
    {"c10d_send_then_all_reduce",
     "matched send/recv, all_reduce pending",
     "stuck_in_collective",
     {},
     "",
     {},
     ""},
    {"c10d_coalescing_manager", "matched (one coalesced collective)", "no_hang", {}, "", {}, ""},
    {"c10d_allgather_uneven", "matched (ALLGATHER_coalesced group)", "no_hang", {}, "", {}, ""},
    {"c10d_reduce_scatter_uneven",
     "matched (REDUCE_SCATTER_coalesced group)",
     "no_hang",
     {},
     "",
     {},
     ""},
    {"c10d_allgather_uneven_missing_rank",
     "Not all ranks joining collective: missing rank 1",
     "not_entered",
     {1},
     "",
     {},
     ""},
    {"c10d_allgather_uneven_count",
     "SIZE_OR_SYNTAX_MISMATCH, culprit rank 2",
     "mismatch",
     {2},
     "count",
     {},
     ""},
    {"c10d_reduce_scatter_uneven_count",
     "SIZE_OR_SYNTAX_MISMATCH, culprits ranks 2 and 3 (compared with rank 0, the odd one)",
     "mismatch",
     {0},
     "count",
     {},
     "rank 0 alone reduces 49 elements where the three others reduce 36: the minority is rank 0"},
    {"c10d_alltoall_totals",
     "Input/output mismatch (totals 32 in, 34 out), no culprit",
     "mismatch",
     {2},
     "count",
     {},
     "rank 2 alone receives another count than it sends: it is named"},
    {"c10d_alltoall_uneven_ok",
     "totals agree: no error found",
     "stuck_in_collective",
     {},
     "",
     {},
     ""},
    {"missing_rank",
     "AssertionError: Missing dump files from ranks {2}",
     "incomplete",
     {2},
     "",
     {},
     ""},
    {"missing_rank_timing",
     "AssertionError: Missing dump files from ranks {2}",
     "incomplete",
     {2},
     "",
     {},
     ""},
    {"missing_rank_timing_held",
     "AssertionError: Missing dump files from ranks {3}",
     "stuck_in_collective",
     {2},
     "",
     {},
     "ranks 0 and 1's GPUs started all_reduce #3 and rank 2's never did: its stream is held "
     "before the op, which no member without a dump explains"},
    {"mixed_versions",
     "AssertionError: Rank 2 has different version 2.9",
     "not_entered",
     {3},
     "",
     {2},
     "the versions are a finding; the dumps still show rank 3 never entered #3"},
};

std::set<int> ranks_of(const json& list) {
  std::set<int> s;
  for (const auto& r : list) s.insert(r.get<int>());
  return s;
}

bool has(const json& f, const std::string& text) {
  return f["summary"].get<std::string>().find(text) != std::string::npos;
}

// The ranks of every starred (culprit) row of the text view's tables: "  * 0,2-3: ...".
std::set<int> starred_ranks(const std::string& text) {
  std::set<int> out;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("  * ", 0) != 0) continue;
    std::istringstream list(line.substr(4, line.find(':') - 4));
    for (std::string part; std::getline(list, part, ',');) {
      const size_t dash = part.find('-');
      const int lo = std::stoi(part.substr(0, dash));
      const int hi = dash == std::string::npos ? lo : std::stoi(part.substr(dash + 1));
      for (int r = lo; r <= hi; ++r) out.insert(r);
    }
  }
  return out;
}

}  // namespace

TEST_CASE("torch scenarios: the text view stars culprits only, and says what was not recorded",
          "[torch][analysis][scenarios]") {
  const std::string data =
      std::string(FR_SOURCE_DIR) + "/tests/analyzer/torch/data/torch-scenarios/";
  size_t shared_state = 0;  // scenarios where a culprit's row reads like its peers'
  for (const Case& c : kCases) {
    INFO(c.name);
    std::string fatal;
    json doc = fr::analyzer::analyze_paths({data + c.name}, fr::analyzer::Options{}, &fatal);
    REQUIRE(doc.is_object());
    const std::string text = fr::analyzer::render_text(doc, false);
    INFO(text);
    const std::set<int> culprits = ranks_of(doc["verdict"]["culprit_ranks"]);
    for (int r : starred_ranks(text)) CHECK(culprits.count(r) == 1);
    // torch records neither the reduction nor (gloo) the root: never "none" or "comm rank -1".
    CHECK(text.find(", none") == std::string::npos);
    CHECK(text.find("rank -1") == std::string::npos);
    const std::string page = fr::analyzer::render_incident_html(doc, fr::analyzer::HtmlPage{});
    CHECK(page.find(", none") == std::string::npos);
    CHECK(page.find("rank -1") == std::string::npos);
    if (std::string(c.name) == "c10d_alltoall_totals") {
      // All four ranks are in AlltoAll #3 alike; rank 2 alone is the culprit and has its own row.
      CHECK(text.find("  * 2: started") != std::string::npos);
      CHECK(text.find("    0,1,3: started") != std::string::npos);
      ++shared_state;
    }
  }
  CHECK(shared_state == 1);
}

TEST_CASE(
    "torch scenarios: every scenario of PyTorch's Flight Recorder tests, as torch expects "
    "or better",
    "[torch][analysis][scenarios]") {
  const std::string data =
      std::string(FR_SOURCE_DIR) + "/tests/analyzer/torch/data/torch-scenarios/";
  for (const Case& c : kCases) {
    INFO(c.name << " (torch: " << c.torch << ")" << (*c.why ? std::string("; fr: ") + c.why : ""));
    std::string fatal;
    json doc = fr::analyzer::analyze_paths({data + c.name}, fr::analyzer::Options{}, &fatal);
    INFO(fatal);
    REQUIRE(doc.is_object());
    INFO(fr::analyzer::render_text(doc, false));
    const json& v = doc["verdict"];
    CHECK(v["kind"] == c.kind);
    CHECK(ranks_of(v["culprit_ranks"]) == c.culprits);
    if (*c.field) CHECK(v["mismatch"]["field"] == c.field);
    // Every file is read; no entry is dropped as an unknown op or a stray marker.
    CHECK(doc["inputs"]["skipped"].empty());
    for (const auto& w : doc["inputs"]["warnings"]) {
      CHECK(w["warning"].get<std::string>().find("unknown operation") == std::string::npos);
      CHECK(w["warning"].get<std::string>().find("marker") == std::string::npos);
    }
    std::set<int> inconsistent;
    for (const auto& f : doc["findings"]) {
      CHECK(!has(f, " 0 of "));
      if (f["kind"] == "inconsistent") {
        CHECK(f.value("consequence", false) == false);  // stands on its own
        for (int r : ranks_of(f["culprit_ranks"])) inconsistent.insert(r);
      }
    }
    CHECK(inconsistent == c.inconsistent);
    CHECK(!has(v, " 0 of "));
    // A member without a dump never entered anything.
    if (!doc["ranks"]["missing"].empty()) {
      CHECK(!has(v, "all members entered"));
      CHECK(has(v, "no dump"));
    }
  }
}

TEST_CASE("torch scenarios: a coalesced group's end markers, plain and per op, read alike",
          "[torch][analysis][scenarios]") {
  // The same uneven all_gather ended by "coalesced" and by "ALLGATHER_coalesced" gives one
  // group of four broadcasts, matched on every rank.
  const std::string data =
      std::string(FR_SOURCE_DIR) + "/tests/analyzer/torch/data/torch-scenarios/";
  for (const char* name : {"c10d_allgather_uneven", "c10d_reduce_scatter_uneven",
                           "builddb_5_uneven_reduce_scatter", "builddb_3_coalesced"}) {
    INFO(name);
    std::string fatal;
    json doc = fr::analyzer::analyze_paths({data + name}, fr::analyzer::Options{}, &fatal);
    REQUIRE(doc.is_object());
    CHECK(doc["verdict"]["kind"] == "no_hang");
    CHECK(doc["findings"].empty());
  }
  std::string fatal;
  json doc = fr::analyzer::analyze_paths({data + "c10d_allgather_uneven_missing_rank"},
                                         fr::analyzer::Options{}, &fatal);
  REQUIRE(doc.is_object());
  const json& v = doc["verdict"];
  CHECK(v["seq"] == 3);
  CHECK(v["group"]["ops"].size() == 4);  // the group's four broadcasts, its marker dropped
  CHECK(has(v, "3 of 4 members wait"));
}

namespace {

std::string file_bytes(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

TEST_CASE("torch scenarios: the committed dump sets are what the generator writes",
          "[torch][analysis][scenarios]") {
  namespace fs = std::filesystem;
  const std::string root = std::string(FR_SOURCE_DIR) + "/tests/analyzer/torch";
  fr::test::TempDir tmp;
  const std::string cmd =
      "python3 " + root + "/scenarios/make_scenarios.py " + tmp.path + " > /dev/null 2>&1";
  const int st = std::system(cmd.c_str());
  const int rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  if (rc == 127) FR_SKIP("no python3 to run scenarios/make_scenarios.py");
  REQUIRE(rc == 0);
  std::set<std::string> made, kept;
  for (const auto& d : fs::directory_iterator(tmp.path)) made.insert(d.path().filename());
  for (const auto& d : fs::directory_iterator(root + "/data/torch-scenarios"))
    kept.insert(d.path().filename());
  CHECK(made == kept);
  for (const std::string& name : made) {
    for (const auto& f : fs::directory_iterator(fs::path(tmp.path) / name)) {
      INFO(name << "/" << f.path().filename().string());
      const fs::path committed =
          fs::path(root) / "data/torch-scenarios" / name / f.path().filename();
      CHECK(file_bytes(f.path()) == file_bytes(committed));
    }
  }
}
