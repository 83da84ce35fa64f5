// The tolerant JSON readers (log/json_fields.h): each rule of the header at its bounds, so that
// breaking one (a wrapped integer, a truncated float, a clamped rank, a cut inside a character)
// fails here.
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "log/json_fields.h"

using fr::log::field_of;
using fr::log::field_or;
using fr::log::number_in;
using fr::log::read_field;
using fr::log::read_list;
using fr::log::read_value;
using nlohmann::json;

TEST_CASE("json fields: a key of a value that is not an object is missing", "[log]") {
  int v = 7;
  for (const json& j : {json(nullptr), json(3), json("x"), json::array({1, 2})}) {
    CHECK(field_of(j, "a") == nullptr);
    CHECK_FALSE(read_field(j, "a", &v));
  }
  CHECK(v == 7);
  CHECK(fr::log::object_field(json{{"a", 1}}, "a") == nullptr);
  CHECK(fr::log::array_field(json{{"a", json::object()}}, "a") == nullptr);
  CHECK(fr::log::object_field(json{{"a", json::object()}}, "a") != nullptr);
  // By reference, an empty one of the kind asked when missing or of another kind.
  const json doc = json::parse(R"({"o": {"k": 1}, "a": [1, 2], "s": "x"})");
  CHECK(&fr::log::object_or_empty(doc, "o") == &doc["o"]);
  CHECK(&fr::log::array_or_empty(doc, "a") == &doc["a"]);
  for (const char* k : {"a", "s", "none"}) {
    CHECK(fr::log::object_or_empty(doc, k) == json::object());
  }
  for (const char* k : {"o", "s", "none"}) {
    CHECK(fr::log::array_or_empty(doc, k) == json::array());
  }
  CHECK(fr::log::object_or_empty(json(3), "o") == json::object());
}

TEST_CASE("json fields: an integer must be a JSON integer within the destination's range",
          "[log]") {
  const json j = json::parse(R"({"i32max": 2147483647, "i32over": 2147483648, "i32min": -2147483648,
      "i32under": -2147483649, "u64max": 18446744073709551615, "neg": -1, "float": 3.0,
      "str": "5", "bool": true, "i64min": -9223372036854775808})");
  int32_t i = 11;
  CHECK(read_field(j, "i32max", &i));
  CHECK(i == INT32_MAX);
  CHECK(read_field(j, "i32min", &i));
  CHECK(i == INT32_MIN);
  i = 11;
  // Past the range: never wrapped (2147483648 would read as INT32_MIN) nor clamped.
  CHECK_FALSE(read_field(j, "i32over", &i));
  CHECK_FALSE(read_field(j, "i32under", &i));
  CHECK_FALSE(read_field(j, "u64max", &i));
  // Not an integer: a float (even a whole one), a string, a boolean.
  CHECK_FALSE(read_field(j, "float", &i));
  CHECK_FALSE(read_field(j, "str", &i));
  CHECK_FALSE(read_field(j, "bool", &i));
  CHECK(i == 11);

  uint64_t u = 5;
  CHECK(read_field(j, "u64max", &u));
  CHECK(u == UINT64_MAX);
  CHECK_FALSE(read_field(j, "neg", &u));  // a negative unsigned would wrap to 2^64 - 1
  CHECK(u == UINT64_MAX);
  int64_t s = 0;
  CHECK(read_field(j, "i64min", &s));
  CHECK(s == INT64_MIN);
  CHECK_FALSE(read_field(j, "u64max", &s));  // above INT64_MAX
  uint8_t b = 0;
  CHECK_FALSE(read_field(json{{"x", 256}}, "x", &b));
  CHECK(read_field(json{{"x", 255}}, "x", &b));
  CHECK(b == 255);
}

TEST_CASE("json fields: an integer outside the caller's bounds counts as missing", "[log]") {
  int rank = 4;
  CHECK(read_field(json{{"r", -1}}, "r", &rank, -1, 1 << 24));
  CHECK(rank == -1);
  CHECK(read_field(json{{"r", 1 << 24}}, "r", &rank, -1, 1 << 24));
  CHECK(rank == 1 << 24);
  CHECK_FALSE(read_field(json{{"r", -2}}, "r", &rank, -1, 1 << 24));
  CHECK_FALSE(read_field(json{{"r", (1 << 24) + 1}}, "r", &rank, -1, 1 << 24));
  CHECK(rank == 1 << 24);
  CHECK(field_or(json{{"r", 99}}, "r", -1, 0, 10) == -1);
  CHECK(field_or(json{{"r", 9}}, "r", -1, 0, 10) == 9);
}

TEST_CASE("json fields: a string is a JSON string, cut at the bound on a character boundary",
          "[log]") {
  std::string s = "keep";
  CHECK_FALSE(read_field(json{{"s", 5}}, "s", &s));
  CHECK_FALSE(read_field(json{{"s", nullptr}}, "s", &s));
  CHECK(s == "keep");
  CHECK(read_field(json{{"s", "abcdef"}}, "s", &s));
  CHECK(s == "abcdef");
  CHECK(read_field(json{{"s", "abcdef"}}, "s", &s, size_t(6)));
  CHECK(s == "abcdef");
  CHECK(read_field(json{{"s", "abcdef"}}, "s", &s, size_t(4)));
  CHECK(s == "abcd");
  // "a" then U+00E9 (2 bytes) then U+20AC (3 bytes): a bound inside either drops the whole of it.
  const std::string text = "a\xC3\xA9\xE2\x82\xAC";
  CHECK(read_field(json{{"s", text}}, "s", &s, size_t(2)));
  CHECK(s == "a");
  CHECK(read_field(json{{"s", text}}, "s", &s, size_t(3)));
  CHECK(s == "a\xC3\xA9");
  CHECK(read_field(json{{"s", text}}, "s", &s, size_t(5)));
  CHECK(s == "a\xC3\xA9");
  CHECK(read_field(json{{"s", text}}, "s", &s, size_t(0)));
  CHECK(s.empty());
}

TEST_CASE("json fields: a bool is a JSON boolean only", "[log]") {
  bool b = false;
  CHECK_FALSE(read_field(json{{"b", 1}}, "b", &b));
  CHECK_FALSE(read_field(json{{"b", "true"}}, "b", &b));
  CHECK_FALSE(b);
  CHECK(read_field(json{{"b", true}}, "b", &b));
  CHECK(b);
  CHECK(field_or(json{{"b", "yes"}}, "b", false) == false);
}

TEST_CASE("json fields: a double is any finite number, number_in clamps it", "[log]") {
  double d = 0.5;
  CHECK(read_field(json{{"d", 3}}, "d", &d));
  CHECK(d == 3.0);
  CHECK(read_field(json{{"d", 2.5}}, "d", &d));
  CHECK(d == 2.5);
  CHECK_FALSE(read_field(json{{"d", "2.5"}}, "d", &d));
  CHECK_FALSE(read_field(json{{"d", std::numeric_limits<double>::quiet_NaN()}}, "d", &d));
  CHECK_FALSE(read_field(json{{"d", std::numeric_limits<double>::infinity()}}, "d", &d));
  CHECK(d == 2.5);
  CHECK(number_in(json{{"d", 7.0}}, "d", 0, 1, 0.25) == 1.0);
  CHECK(number_in(json{{"d", -7}}, "d", 0, 1, 0.25) == 0.0);
  CHECK(number_in(json{{"d", 0.5}}, "d", 0, 1, 0.25) == 0.5);
  CHECK(number_in(json{{"d", "x"}}, "d", 0, 1, 0.25) == 0.25);
  CHECK(number_in(json{{"d", std::numeric_limits<double>::infinity()}}, "d", 0, 1, 0.25) == 0.25);
  CHECK(number_in(json::object(), "d", 0, 1, 0.25) == 0.25);
}

TEST_CASE("json fields: an optional is set only by a value of its type", "[log]") {
  std::optional<double> d;
  CHECK_FALSE(read_field(json{{"d", "1"}}, "d", &d));
  CHECK_FALSE(d.has_value());
  CHECK(read_field(json{{"d", 0.25}}, "d", &d));
  CHECK(d == 0.25);
  std::optional<size_t> n;
  CHECK_FALSE(read_field(json{{"n", -3}}, "n", &n));  // would wrap to a huge offset
  CHECK_FALSE(n.has_value());
}

TEST_CASE("json fields: a list keeps the elements that read, at most max_count", "[log]") {
  const json j = json::parse(R"({"ints": [1, -1, 2.5, "3", 4294967296, 5, 6],
      "strs": ["ab", 1, "abcdef", null, "x"], "notlist": {"a": 1}})");
  std::vector<int> ints = {42};
  CHECK(read_list(j, "ints", &ints, 10));
  CHECK(ints == std::vector<int>{1, -1, 5, 6});
  CHECK(read_list(j, "ints", &ints, 3));
  CHECK(ints == std::vector<int>{1, -1, 5});
  CHECK(read_list(j, "ints", &ints, 10, 0, 5));
  CHECK(ints == std::vector<int>{1, 5});
  // Not an array: the list is left as it was.
  CHECK_FALSE(read_list(j, "notlist", &ints, 10));
  CHECK(ints == std::vector<int>{1, 5});
  std::vector<std::string> strs;
  CHECK(read_list(j, "strs", &strs, 10, size_t(3)));
  CHECK(strs == std::vector<std::string>{"ab", "abc", "x"});
}

TEST_CASE("json fields: a whole float is an integer only where the caller takes it", "[log]") {
  using fr::log::Floats;
  int i = 1;
  CHECK_FALSE(read_field(json{{"i", 3.0}}, "i", &i));
  CHECK(read_field(json{{"i", 3.0}}, "i", &i, Floats::kWholeTaken));
  CHECK(i == 3);
  CHECK(read_field(json{{"i", -2.0}}, "i", &i, Floats::kWholeTaken));
  CHECK(i == -2);
  CHECK_FALSE(read_field(json{{"i", 3.5}}, "i", &i, Floats::kWholeTaken));    // never truncated
  CHECK_FALSE(read_field(json{{"i", 1e300}}, "i", &i, Floats::kWholeTaken));  // nor clamped
  CHECK_FALSE(read_field(json{{"i", 4294967296.0}}, "i", &i, Floats::kWholeTaken));
  CHECK(i == -2);
  uint64_t u = 0;
  CHECK_FALSE(read_field(json{{"u", -1.0}}, "u", &u, Floats::kWholeTaken));
  CHECK(read_field(json{{"u", 9007199254740992.0}}, "u", &u, Floats::kWholeTaken));
  CHECK(u == 9007199254740992ull);
  CHECK_FALSE(read_field(json{{"u", 18014398509481984.0}}, "u", &u, Floats::kWholeTaken));  // 2^54
  std::vector<int> ranks;
  CHECK(read_list(json{{"r", {1, 2.0, 2.5}}}, "r", &ranks, 10, Floats::kWholeTaken));
  CHECK(ranks == std::vector<int>{1, 2});
}
