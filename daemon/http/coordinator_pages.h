// The coordinator's HTTP routes: `/metrics` (Prometheus text), `/api/v1/status` (frd-status/1,
// paged as `frd status` is), `/` (the live page) and `/incidents/ID`. They reach the coordinator
// only through StatusSource, a narrow interface the server answers under its state's lock with a
// copy (the typed status, daemon/base/status.h, or one incident's entry); everything is rendered
// here, outside that lock, so pages cannot keep heartbeats waiting. The gRPC server
// (daemon/rpc/server.h) implements StatusSource and adds these routes to its HTTP listener.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "common/ranked_mutex.h"
#include "daemon/base/lock_order.h"
#include "daemon/base/status.h"
#include "daemon/http/metrics_http.h"

namespace fr::daemon {

// What the pages ask of the coordinator. Each call copies what it returns and holds no lock after.
class StatusSource {
 public:
  virtual ~StatusSource() = default;
  // One page of the status, as `query` says.
  virtual CoordinatorStatus status(const StatusQuery& query) = 0;
  // One incident's entry, found by its id (no other part of the status is built); none when
  // there is no such incident.
  virtual std::optional<StatusIncident> incident(const std::string& id) = 0;
  // The coordinator's Prometheus text.
  virtual std::string metrics_text() = 0;
};

// `/api/v1/status`'s page, as `frd status` asks for it: ?offset=N&limit=N&summary=1. False for a
// number that is malformed, negative or past 64 bits.
bool parse_status_query(const HttpServer::Request& req, StatusQuery* q);

class CoordinatorPages {
 public:
  // The live page is built at most once per this long, whoever asks (frd_live_page_builds_total).
  static constexpr int64_t kLivePageNs = 2'000'000'000;

  explicit CoordinatorPages(StatusSource* source) : source_(source) {}
  CoordinatorPages(const CoordinatorPages&) = delete;
  CoordinatorPages& operator=(const CoordinatorPages&) = delete;

  // Adds the four routes; before http->start(). The pages must outlive the listener's serving.
  void add_routes(HttpServer* http);

  // `/`: the page built less than kLivePageNs ago; else, while another thread builds it, the last
  // one built; else built here.
  std::shared_ptr<const std::string> live_page();
  uint64_t live_page_builds() const { return live_page_builds_.load(std::memory_order_relaxed); }

  HttpServer::Response status_response(const HttpServer::Request& req);
  HttpServer::Response incident_response(const std::string& id);
  HttpServer::Response metrics_response();

 private:
  std::shared_ptr<const std::string> cached_live_page(int64_t now, bool stale_ok);

  StatusSource* source_;
  // Building the live page copies the status under the state's lock (a few ms at 256 nodes x 8
  // processes x 32 communicators) and renders it: one thread builds (page_build_mu_), the others
  // serve the page they find (page_mu_), stale for as long as the build takes.
  RankedMutex page_build_mu_{lock_order::kPageBuild, "CoordinatorPages::page_build_mu"};
  RankedMutex page_mu_{lock_order::kPageCache, "CoordinatorPages::page_mu"};
  std::shared_ptr<const std::string> live_page_;  // page_mu_
  int64_t live_page_mono_ = 0;                    // page_mu_
  std::atomic<uint64_t> live_page_builds_{0};
};

}  // namespace fr::daemon
