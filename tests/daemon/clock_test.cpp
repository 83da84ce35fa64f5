// Clock offsets between the coordinator and a node (daemon/logic/clock.h).
#include <catch2/catch.hpp>
#include <cstdint>

#include "daemon/logic/clock.h"

using namespace fr::daemon;

TEST_CASE("clock offsets come from the round trip with the least delay", "[daemon]") {
  ClockEstimator c;
  CHECK_FALSE(c.has_offset());
  // Node 5 ms ahead, 2 ms each way.
  const int64_t ms = 1'000'000, ahead = 5 * ms;
  CHECK(
      c.add(1000 * ms, 1000 * ms + 2 * ms + ahead, 1000 * ms + 3 * ms + ahead, 1000 * ms + 5 * ms));
  CHECK(c.offset_ns() == -ahead);
  CHECK(c.delay_ns() == 4 * ms);
  // A sample with a long asymmetric delay does not win.
  CHECK(c.add(2000 * ms, 2000 * ms + 40 * ms + ahead, 2000 * ms + 41 * ms + ahead,
              2000 * ms + 43 * ms));
  CHECK(c.offset_ns() == -ahead);
  // Impossible samples are refused.
  CHECK_FALSE(c.add(10, 5, 4, 20));
  CHECK_FALSE(c.add(10, 5, 6, 9));
  // A hostile node's times, whose differences would overflow, are refused too.
  CHECK_FALSE(c.add(10, INT64_MIN, INT64_MAX, 20));
  CHECK_FALSE(c.add(10, -5, 4, 20));
  CHECK_FALSE(c.add(10, INT64_MAX - 1, INT64_MAX, 20));
  // Times that are times, but a node more than 2^60 ns (36 years) off.
  const int64_t far = (int64_t(1) << 60) + 1000 * ms;
  CHECK_FALSE(c.add(1000 * ms, 1000 * ms + far, 1000 * ms + far, 1001 * ms));
  CHECK(c.offset_ns() == -ahead);
}
