// What fr-analyze must say about each faulty PyTorch 2.15 gloo job of real/fr_torch_job.py, in
// every form torch dumps it (file, bytes, json). Shared by the test that runs fresh jobs with the
// installed torch and the one that reads the dumps committed under data/torch-2.15-gloo (made by
// that script), so the real format stays covered where torch is absent.
#pragma once

#include <catch2/catch.hpp>
#include <set>
#include <string>

#include "analyzer/analyze.h"

namespace fr_real_torch {

using nlohmann::json;

inline const char* const kFaults[] = {"hang", "skip", "size", "op", "group", "kill"};

inline std::set<int> culprits(const json& doc) {
  std::set<int> s;
  for (const auto& r : doc["verdict"]["culprit_ranks"]) s.insert(r.get<int>());
  return s;
}

inline void check_fault(const std::string& fault, const json& doc) {
  const json& v = doc["verdict"];
  // Files torch wrote are read, never skipped; remarks on them are warnings.
  CHECK(doc["inputs"]["skipped"].empty());
  if (fault == "hang") {
    CHECK(v["kind"] == "not_entered");
    CHECK(culprits(doc) == std::set<int>{3});
    CHECK(v["seq"] == 11);
    CHECK(v["op"] == "AllReduce");
    CHECK(v["comm"]["name"] == "default_pg");
    CHECK(v["comm"]["size"] == 6);
    CHECK(doc["ranks"]["missing"].empty());
    CHECK(doc["ranks"]["expected"] == 6);
    CHECK(doc["inputs"]["warnings"].empty());
  } else if (fault == "skip" || fault == "op") {
    // skip: rank 3's #11 is the broadcast the others call as #12; op: a broadcast instead.
    CHECK(v["kind"] == "mismatch");
    CHECK(v["mismatch"]["field"] == "op");
    CHECK(culprits(doc) == std::set<int>{3});
    CHECK(v["seq"] == 11);
  } else if (fault == "size") {
    CHECK(v["kind"] == "mismatch");
    CHECK(v["mismatch"]["field"] == "count");
    CHECK(v["op"] == "Broadcast");
    CHECK(culprits(doc) == std::set<int>{3});
    CHECK(v["seq"] == 11);
  } else if (fault == "group") {
    // torch 2.15 does not list the group's members (pg_config holds one nameless entry) and rank
    // 3's dump has no trace of the group: the members that wait are known, the one that never
    // came cannot be told. The verdict says so and blames nobody, least of all 1, 2 and 4.
    CHECK(v["kind"] == "incomplete");
    CHECK(culprits(doc).empty());
    CHECK(v["comm"]["name"] == "sub_ranks");
    CHECK(v["seq"] == 1);
    CHECK(v["summary"].get<std::string>().find("members no dump lists") != std::string::npos);
    std::set<int> waiting;
    for (const auto& e : v["evidence"]) waiting.insert(e["rank"].get<int>());
    CHECK(waiting == std::set<int>{1, 2, 4});
    bool warned = false;
    for (const auto& w : doc["inputs"]["warnings"])
      warned |= w["warning"].get<std::string>().find("sub_ranks") != std::string::npos;
    CHECK(warned);
    // The text view keeps them apart too: a remark on a file read, never "skipped".
    std::string text = fr::analyzer::render_text(doc, false);
    CHECK(text.find("\nskipped ") == std::string::npos);
    CHECK(text.find("warning (read, analysed) ") != std::string::npos);
  } else if (fault == "kill") {
    CHECK(v["kind"] == "incomplete");
    CHECK(culprits(doc) == std::set<int>{3});
    CHECK(doc["ranks"]["missing"] == json::array({3}));
    CHECK(v["summary"].get<std::string>().find("no dump") != std::string::npos);
  } else {
    FAIL("unknown fault " << fault);
  }
}

// Analyses DIR/<form> for each form and checks the verdict.
inline void check_forms(const std::string& fault, const std::string& dir) {
  for (const char* form : {"file", "bytes", "json"}) {
    std::string err;
    json doc = fr::analyzer::analyze_paths({dir + "/" + form}, fr::analyzer::Options{}, &err);
    INFO(fault << ", form " << form << ": " << err);
    REQUIRE(!doc.is_null());
    INFO(fr::analyzer::render_text(doc, false));
    check_fault(fault, doc);
  }
}

}  // namespace fr_real_torch
