// The coordinator's status document and metrics (daemon/logic/coordinator_status.cpp).
#include <catch2/catch.hpp>

#include "coordinator_fixture.h"
#include "daemon/logic/coordinator.h"
#include "fixture.h"
#include "testing/clock.h"

using namespace fr::daemon;
using namespace fr::daemon::test;
using fr::test::kSec;

TEST_CASE("status and metrics describe nodes, ranks and incidents", "[daemon]") {
  TempDir dir;
  CoordinatorState st(config(dir.path));
  std::string err;
  uint64_t s0 = st.connect("n0", "h0", "job1", 0, &err);
  NodeReport r0 = report({proc(0, true, 0), proc(1, false, 0)});
  r0.gpu_alerts = {"GPU 0000:3b:00.0 reported Xid 79"};
  st.heartbeat(s0, r0, 0);
  auto js = st.status(kSec);
  CHECK(js["schema"] == "frd-status/1");
  CHECK(js["nodes"][0]["gpu_alerts"] ==
        nlohmann::json::array({"GPU 0000:3b:00.0 reported Xid 79"}));
  CHECK(js["ranks"]["alive"] == 1);
  CHECK(js["ranks"]["dead"] == 1);
  CHECK(js["nodes"][0]["name"] == "n0");
  std::string m = st.metrics(kSec);
  CHECK(m.find("frd_nodes{state=\"connected\"} 1") != std::string::npos);
  CHECK(m.find("frd_ranks{state=\"alive\"} 1") != std::string::npos);
  CHECK(m.find("frd_incidents_total{kind=\"stall\"} 0") != std::string::npos);
}
