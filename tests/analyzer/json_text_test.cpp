// write_json (analyzer/json_text.h): the text made in parts on several threads is nlohmann's dump
// byte for byte, for wide and deep documents, odd keys and values, every indent and thread count,
// and the analyzer's own documents; a failing stream is reported.
#include <catch2/catch.hpp>

#include <sstream>
#include <string>

#include "analyzer/analyze.h"
#include "analyzer/json_text.h"
#include "synth/synth.h"
#include "temp_dir.h"

using nlohmann::json;

namespace {

std::string written(const json& doc, int indent, unsigned threads) {
  std::ostringstream out;
  REQUIRE(fr::analyzer::write_json(doc, indent, out, threads));
  return out.str();
}

void check_same(const json& doc) {
  // The document is valid UTF-8 here, so the text is dump's own.
  for (int indent : {-1, 0, 2, 4})
    for (unsigned threads : {0u, 1u, 2u, 3u, 16u}) {
      INFO("indent " << indent << ", threads " << threads);
      CHECK(written(doc, indent, threads) == doc.dump(indent));
    }
}

// A finding-like row: nested objects, strings, numbers of every kind, nulls.
json row(int i) {
  return {{"rank", i},
          {"host", "node" + std::to_string(i / 8)},
          {"alive", i % 3 != 0},
          {"late", i * 0.125 - 3.5},
          {"big", uint64_t{1} << 63},
          {"neg", -int64_t(i) * 1000000007},
          {"last", i % 5 ? json{{"seq", i}, {"op", "AllReduce"}} : json(nullptr)},
          {"empty_list", json::array()},
          {"empty_obj", json::object()}};
}

}  // namespace

TEST_CASE("write_json: small and scalar documents are nlohmann's dump") {
  check_same(json(nullptr));
  check_same(json(42));
  check_same(json("text"));
  check_same(json::object());
  check_same(json::array());
  check_same(json{{"a", 1}, {"b", json::array({1, 2, 3})}});
}

TEST_CASE("write_json: wide arrays, deep nesting and odd keys") {
  json doc = json::object();
  json rows = json::array();
  for (int i = 0; i < 1000; ++i) rows.push_back(row(i));
  doc["findings"] =
      json::array({json{{"kind", "hang"}, {"evidence", rows}}, json{{"kind", "skew"}}});
  doc["verdict"] = {{"evidence", rows}, {"summary", "quote \" backslash \\ tab \t newline \n"}};
  doc["k\u00e9y \"quoted\"\n"] = "snowman \u2603, control \x01";
  json wide_object = json::object();
  for (int i = 0; i < 200; ++i) wide_object["member" + std::to_string(i)] = row(i);
  doc["wide_object"] = wide_object;
  json deep = json::array({1});
  for (int i = 0; i < 12; ++i) deep = json::array({deep, json::array()});
  doc["deep"] = deep;
  doc["wide_of_empties"] = json::array();
  for (int i = 0; i < 100; ++i) doc["wide_of_empties"].push_back(json::array());
  check_same(doc);
  check_same(rows);  // a wide array at the top
}

TEST_CASE("write_json: the analyzer's documents") {
  // 4,100 ranks: each evidence list of the world communicator is made on two threads
  // (evidence.cpp): its rows come in member order, every member once.
  fr::test::TempDir t;
  fr::synth::Spec spec;
  std::string error;
  REQUIRE(fr::synth::add_fault("rank=2071,kind=hang-host", &spec, &error));
  spec.ranks = 4100, spec.entries = 24, spec.ranks_per_host = 256;
  REQUIRE(fr::synth::write_dump_set(spec, t.sub("set"), &error));
  const json doc = fr::analyzer::analyze_paths({t.sub("set")}, {}, &error);
  INFO(error);
  REQUIRE(doc.is_object());
  const json& rows = doc.at("verdict").at("evidence");
  REQUIRE(rows.size() == 4100);
  for (size_t i = 0; i < rows.size(); ++i) {
    INFO("row " << i);
    REQUIRE(rows[i].at("rank_in_comm") == i);
    CHECK(rows[i].value("culprit", false) == (i == 2071));
  }
  check_same(doc);
}

TEST_CASE("write_json: a stream that fails is reported") {
  json doc = json::array();
  for (int i = 0; i < 500; ++i) doc.push_back(row(i));
  std::ostringstream out;
  out.setstate(std::ios::badbit);
  CHECK_FALSE(fr::analyzer::write_json(doc, 2, out, 2));
}

TEST_CASE("write_json: bytes that are not UTF-8 are written as U+FFFD, in any part") {
  json doc = json::object();
  json rows = json::array();
  for (int i = 0; i < 3000; ++i) rows.push_back(row(i));
  rows[2500]["host"] = std::string("bad \xff\xfe byte");  // in a late part, on a worker thread
  doc["rows"] = rows;
  doc["bad key \xc3"] = std::string("\x80");
  REQUIRE_THROWS_AS(doc.dump(2), json::type_error);
  const std::string want = doc.dump(2, ' ', false, json::error_handler_t::replace);
  REQUIRE(want.find("bad \xef\xbf\xbd\xef\xbf\xbd byte") != std::string::npos);
  for (unsigned threads : {1u, 2u, 4u}) {
    INFO("threads " << threads);
    CHECK(written(doc, 2, threads) == want);
  }
  CHECK(written(doc, -1, 2) == doc.dump(-1, ' ', false, json::error_handler_t::replace));
}
