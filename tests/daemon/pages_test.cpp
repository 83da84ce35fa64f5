// The coordinator's HTTP routes without sockets (daemon/http/coordinator_pages.h), over a
// StatusSource that counts what it is asked: the pages drawn from the typed status are the pages
// drawn before it was typed (page_golden.inc), one incident's page asks for that incident only,
// the live page is built once per interval, and a bad page query is refused.
#include <catch2/catch.hpp>

#include <string>
#include <utility>
#include <vector>

#include "daemon/http/coordinator_pages.h"
#include "daemon/http/web.h"
#include "fixture.h"
#include "status_golden.h"

using namespace fr::daemon;
using namespace fr::daemon::test;

namespace {

const std::vector<std::pair<std::string, std::string>>& page_golden() {
  static const std::vector<std::pair<std::string, std::string>> golden = {
#include "page_golden.inc"
  };
  return golden;
}

// The status of golden_status_texts' "whole" page, read back, answering as a server would.
struct FakeSource : StatusSource {
  CoordinatorStatus whole;
  int status_calls = 0, incident_calls = 0, metrics_calls = 0;
  StatusQuery last_query;

  explicit FakeSource(const std::string& text)
      : whole(nlohmann::json::parse(text).get<CoordinatorStatus>()) {}
  CoordinatorStatus status(const StatusQuery& q) override {
    status_calls++;
    last_query = q;
    CoordinatorStatus s = whole;
    s.query = q;
    return s;
  }
  std::optional<StatusIncident> incident(const std::string& id) override {
    incident_calls++;
    const StatusIncident* i = whole.incident(id);
    return i ? std::optional<StatusIncident>(*i) : std::nullopt;
  }
  std::string metrics_text() override {
    metrics_calls++;
    return "frd_nodes{state=\"known\"} 3\n";
  }
};

}  // namespace

TEST_CASE("pages: the live and incident pages drawn from the typed status are those drawn before",
          "[daemon][web]") {
  TempDir dir;
  const auto texts = golden_status_texts(dir.path);
  const auto& golden = page_golden();
  REQUIRE(golden.size() == 3);
  // What /api/v1/status would give, drawn.
  const CoordinatorStatus whole = nlohmann::json::parse(texts[0].second).get<CoordinatorStatus>();
  CHECK(render_live_page(whole) == golden[0].second);
  const CoordinatorStatus cut = nlohmann::json::parse(texts[3].second).get<CoordinatorStatus>();
  CHECK(render_live_page(cut) == golden[1].second);
  REQUIRE(whole.incidents.size() == 1);
  CHECK(render_incident_page(whole.incidents[0], nullptr) == golden[2].second);
}

TEST_CASE("pages: the live page is the status copied once and cut to the page's size",
          "[daemon][web]") {
  TempDir dir;
  const auto texts = golden_status_texts(dir.path);
  FakeSource src(texts[0].second);
  CoordinatorPages pages(&src);
  const auto page = pages.live_page();
  CHECK(*page == page_golden()[0].second);
  CHECK(src.status_calls == 1);
  CHECK(pages.live_page_builds() == 1);
  // Within the interval, the page built is served again.
  CHECK(pages.live_page() == page);
  CHECK(src.status_calls == 1);
  // A status too big for one page: the page holds what /api/v1/status would, and says so.
  struct Small : FakeSource {
    using FakeSource::FakeSource;
    CoordinatorStatus status(const StatusQuery& q) override {
      StatusQuery small = q;
      small.max_bytes = 64;
      return FakeSource::status(small);
    }
  } small(texts[0].second);
  CoordinatorPages small_pages(&small);
  CHECK(*small_pages.live_page() == page_golden()[1].second);
}

TEST_CASE("pages: /incidents/ID asks for that incident alone, 404 for an unknown one",
          "[daemon][web]") {
  TempDir dir;
  FakeSource src(golden_status_texts(dir.path)[0].second);
  CoordinatorPages pages(&src);
  const HttpServer::Response r = pages.incident_response("incident-0001");
  CHECK(r.status == 200);
  CHECK(r.body == page_golden()[2].second);
  CHECK(src.incident_calls == 1);
  CHECK(src.status_calls == 0);  // the whole status is not built for one incident
  const HttpServer::Response missing = pages.incident_response("incident-0042");
  CHECK(missing.status == 404);
  CHECK(missing.body.find("no incident incident-0042") != std::string::npos);
  CHECK(src.status_calls == 0);
}

TEST_CASE("pages: /api/v1/status pages as asked and refuses a malformed query", "[daemon][web]") {
  TempDir dir;
  const auto texts = golden_status_texts(dir.path);
  FakeSource src(texts[0].second);
  CoordinatorPages pages(&src);
  HttpServer::Request req;
  req.query = {{"offset", "1"}, {"limit", "2"}, {"summary", "1"}};
  HttpServer::Response r = pages.status_response(req);
  CHECK(r.status == 200);
  CHECK(r.content_type == "application/json");
  CHECK(src.last_query.node_offset == 1);
  CHECK(src.last_query.node_limit == 2);
  CHECK(src.last_query.summary);
  // The fake hands back its whole status: rendered as the document it was read from.
  req.query = {};
  r = pages.status_response(req);
  CHECK(r.body == texts[0].second + "\n");
  for (const char* bad : {"-1", "x", "", "99999999999999999999999"}) {
    req.query = {{"offset", bad}};
    CHECK(pages.status_response(req).status == 400);
  }
  const HttpServer::Response m = pages.metrics_response();
  CHECK(m.body.find("frd_nodes{state=\"known\"} 3\n") == 0);
  CHECK(m.body.find("\nfrd_live_page_builds_total 0\n") != std::string::npos);
}
