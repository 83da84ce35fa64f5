// Names and secrets from peers (daemon/base/names.h): safe path components, printable text,
// constant-time token comparison.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "daemon/base/names.h"

using namespace fr::daemon;

TEST_CASE("peer names are made safe path components", "[daemon]") {
  CHECK(sanitize_name("node-7.a_b") == "node-7.a_b");
  for (std::string bad :
       std::vector<std::string>{"../../etc", "..", ".", "", "a/b", std::string("x\0y", 3), "\n"}) {
    std::string s = sanitize_name(bad);
    INFO(s);
    CHECK(!s.empty());
    CHECK(s[0] != '.');
    CHECK(s.find('/') == std::string::npos);
    CHECK(is_safe_name(s));
  }
  CHECK(sanitize_name(std::string(500, 'a')).size() == kMaxNameLen);
  CHECK_FALSE(is_safe_name("../x"));
  CHECK_FALSE(is_safe_name(".hidden"));
  CHECK(printable("a\x01"
                  "b") == "a?b");
  CHECK(equal_secret("token", "token"));
  CHECK_FALSE(equal_secret("token", "tokem"));
  CHECK_FALSE(equal_secret("token", "token2"));
}

TEST_CASE("names and text made into a used string equal what a fresh one gets", "[daemon]") {
  const std::vector<std::string> inputs = {"",
                                           ".x",
                                           "node-7",
                                           std::string(300, 'z'),
                                           "a/b\x01",
                                           std::string(65, 'q'),
                                           std::string(64, 'q')};
  for (const auto& before : inputs) {
    for (const auto& in : inputs) {
      INFO(before.size() << " then " << in.size());
      std::string out = before;
      sanitize_name_into(in, kMaxNameLen, &out);
      CHECK(out == sanitize_name(in));
      out = before;
      printable_into(in, 64, &out);
      CHECK(out == printable(in, 64));
    }
  }
  CHECK(printable(std::string(65, 'q'), 64) == std::string(64, 'q') + "...");
  CHECK(printable(std::string(64, 'q'), 64) == std::string(64, 'q'));
}
