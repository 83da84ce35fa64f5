// See coordinator_pages.h.
#include "daemon/http/coordinator_pages.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <mutex>

#include "common/prometheus.h"
#include "daemon/base/model.h"
#include "daemon/http/web.h"

namespace fr::daemon {

bool parse_status_query(const HttpServer::Request& req, StatusQuery* q) {
  auto number = [&](const char* key, size_t* out) {
    auto it = req.query.find(key);
    if (it == req.query.end()) return true;
    char* end = nullptr;
    errno = 0;
    unsigned long long v = std::strtoull(it->second.c_str(), &end, 10);
    if (it->second.empty() || *end != '\0' || it->second[0] == '-' || errno != 0) return false;
    *out = size_t(v);
    return true;
  };
  size_t limit = q->node_limit;
  if (!number("offset", &q->node_offset) || !number("limit", &limit)) return false;
  if (limit > 0) q->node_limit = std::min(limit, q->node_limit);
  q->summary = req.query.count("summary") && req.query.at("summary") != "0";
  return true;
}

void CoordinatorPages::add_routes(HttpServer* http) {
  http->get("/metrics", [this](const HttpServer::Request&) { return metrics_response(); });
  // Paged as `frd status` is: ?offset=N&limit=N&summary=1.
  http->get("/api/v1/status",
            [this](const HttpServer::Request& req) { return status_response(req); });
  http->get("/", [this](const HttpServer::Request&) {
    HttpServer::Response r;
    r.content_type = "text/html; charset=utf-8";
    r.body = *live_page();
    return r;
  });
  http->get_under("/incidents/",
                  [this](const HttpServer::Request& req) { return incident_response(req.tail); });
}

HttpServer::Response CoordinatorPages::metrics_response() {
  HttpServer::Response r;
  r.content_type = "text/plain; version=0.0.4";
  r.body = source_->metrics_text();
  PrometheusText o;
  o.counter("frd_live_page_builds_total",
            "Times the live page was built (at most once per 2 s, however many clients reload "
            "it).",
            live_page_builds());
  r.body += o.str();
  return r;
}

HttpServer::Response CoordinatorPages::status_response(const HttpServer::Request& req) {
  HttpServer::Response r;
  r.content_type = "application/json";
  StatusQuery q;
  if (!parse_status_query(req, &q)) {
    r.status = 400;
    r.body = "{\"error\":\"offset and limit are non-negative integers\"}\n";
    return r;
  }
  r.body = to_json_text(source_->status(q)) + "\n";
  return r;
}

HttpServer::Response CoordinatorPages::incident_response(const std::string& id) {
  HttpServer::Response r;
  r.content_type = "text/html; charset=utf-8";
  const std::optional<StatusIncident> incident = source_->incident(id);
  if (!incident) {
    r.status = 404;
    r.body = render_missing_incident_page(id);
    return r;
  }
  // The analysis is on disk once the dump set is analysed; read outside every lock.
  nlohmann::json analysis;
  if (incident->analysed()) {
    std::ifstream in(incident->dir + "/analysis.json");
    if (in) analysis = nlohmann::json::parse(in, nullptr, false);
    if (analysis.is_discarded()) analysis = nullptr;
  }
  r.body = render_incident_page(*incident, analysis);
  return r;
}

// The live page built less than kLivePageNs ago (or any, when `stale_ok`); null when none.
std::shared_ptr<const std::string> CoordinatorPages::cached_live_page(int64_t now, bool stale_ok) {
  std::lock_guard<RankedMutex> pl(page_mu_);
  if (live_page_ && (stale_ok || now - live_page_mono_ < kLivePageNs)) return live_page_;
  return nullptr;
}

std::shared_ptr<const std::string> CoordinatorPages::live_page() {
  const int64_t now = mono_ns();
  std::shared_ptr<const std::string> page = cached_live_page(now, false);
  if (page) return page;
  std::unique_lock<RankedMutex> building(page_build_mu_, std::try_to_lock);
  if (!building.owns_lock()) {
    if ((page = cached_live_page(now, true))) return page;  // another builds it
    building.lock();  // none yet: wait for the one being built
    if ((page = cached_live_page(mono_ns(), false))) return page;
  }
  // Copied under the state's lock, drawn outside it: heartbeats and /metrics never wait on a page.
  CoordinatorStatus status = source_->status(StatusQuery{});
  fit_page(&status);  // the nodes /api/v1/status would give, and its page
  page = std::make_shared<const std::string>(render_live_page(status));
  live_page_builds_.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard<RankedMutex> pl(page_mu_);
  live_page_ = page;
  live_page_mono_ = mono_ns();
  return page;
}

}  // namespace fr::daemon
