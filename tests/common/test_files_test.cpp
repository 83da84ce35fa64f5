// The helpers tests share (fr_test_common): whole files in and out, the two meanings of "exists",
// which differ exactly at links, the time units and waiting for a condition.
#include <unistd.h>

#include <string>

#include <catch2/catch.hpp>

#include "temp_dir.h"
#include "testing/clock.h"
#include "testing/files.h"
#include "testing/wait.h"

using fr::test::TempDir;

TEST_CASE("slurp reads back what spit wrote, byte for byte") {
  TempDir dir("fr-test-common");
  const std::string bytes = std::string("a\0b\r\n\xff", 6) + std::string(100000, 'x');
  REQUIRE(fr::test::spit(dir.sub("f"), bytes));
  CHECK(fr::test::slurp(dir.sub("f")) == bytes);
  REQUIRE(fr::test::spit(dir.sub("f"), "short"));  // truncates
  CHECK(fr::test::slurp(dir.sub("f")) == "short");
  REQUIRE(fr::test::spit(dir.sub("empty"), ""));
  CHECK(fr::test::exists(dir.sub("empty")));
  CHECK(fr::test::slurp(dir.sub("empty")).empty());
}

TEST_CASE("slurp of what cannot be read is empty, spit where it cannot write says so") {
  TempDir dir("fr-test-common");
  CHECK(fr::test::slurp(dir.sub("missing")).empty());
  CHECK(fr::test::slurp(dir.path).empty());  // a directory
  CHECK_FALSE(fr::test::spit(dir.sub("no/such/dir/f"), "x"));
}

TEST_CASE("exists follows links, exists_no_follow does not") {
  TempDir dir("fr-test-common");
  REQUIRE(fr::test::spit(dir.sub("file"), "x"));
  REQUIRE(::symlink(dir.sub("file").c_str(), dir.sub("good").c_str()) == 0);
  REQUIRE(::symlink(dir.sub("nothing").c_str(), dir.sub("dangling").c_str()) == 0);
  CHECK(fr::test::exists(dir.sub("file")));
  CHECK(fr::test::exists_no_follow(dir.sub("file")));
  CHECK(fr::test::exists(dir.sub("good")));
  CHECK(fr::test::exists_no_follow(dir.sub("good")));
  CHECK_FALSE(fr::test::exists(dir.sub("dangling")));
  CHECK(fr::test::exists_no_follow(dir.sub("dangling")));
  CHECK_FALSE(fr::test::exists(dir.sub("nothing")));
  CHECK_FALSE(fr::test::exists_no_follow(dir.sub("nothing")));
  CHECK(fr::test::exists(dir.path));
}

TEST_CASE("time units are nanoseconds, and the wall clock is in them") {
  STATIC_REQUIRE(fr::test::kSec == 1000 * fr::test::kMs);
  STATIC_REQUIRE(fr::test::kMs == 1000 * fr::test::kUs);
  // After 2020-01-01 and before 2200: a real-time clock in nanoseconds, not seconds or a monotonic one.
  const uint64_t now = fr::test::now_real_ns();
  CHECK(now > 1577836800ull * 1000000000ull);
  CHECK(now < 7258118400ull * 1000000000ull);
}

TEST_CASE("wait_for returns as soon as the condition holds, and says when it never did") {
  int calls = 0;
  CHECK(fr::test::wait_for([&] { return ++calls == 3; }, 30, std::chrono::milliseconds(1)));
  CHECK(calls == 3);
  calls = 0;
  CHECK_FALSE(fr::test::wait_for([&] { return ++calls < 0; }, 0.05));
  CHECK(calls >= 2);  // polled, and asked once more at the deadline
}
