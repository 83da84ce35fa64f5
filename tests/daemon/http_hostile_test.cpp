// A coordinator's HTTP listener under 1,100 hostile connections, held for several seconds from 40
// loopback addresses (25 each, under the per-peer cap) plus 100 more from 127.0.0.2 (over the cap,
// so that its connections keep evicting each other): a third say nothing, a third trickle their headers a
// byte at a time, a third announce a large body and trickle it. Every connection the server
// closes is opened again at once. Meanwhile `/metrics` and `/` are fetched over and over from
// 127.0.0.1, and each must answer within a generous 1 s (the figures are printed). Afterwards: no
// hostile connection outlived the head deadline by much, and the coordinator's memory stayed
// bounded.
#include <catch2/catch.hpp>

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "daemon/rpc/server.h"
#include "fixture.h"
#include "horde.h"
#include "peer.h"

using namespace fr::daemon;
using fr::daemon::test::connect_loopback;
using fr::daemon::test::loopback_config;
using fr::daemon::test::loopback_options;
using fr::daemon::test::rss_mib;
using fr::daemon::test::TempDir;

namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

}  // namespace

TEST_CASE(
    "hostile: 1,000 silent, trickling and body-announcing HTTP connections do not hold up a scrape",
    "[daemon][hostile][http]") {
  // Both ends of 1,100 connections live in this process.
  REQUIRE(fr::daemon::test::raise_open_files(8192));
  TempDir dumps;
  ServerOptions so = loopback_options();
  so.metrics_listen = "127.0.0.1:0";
  CoordinatorServer server(loopback_config(dumps.path), so);
  std::string err;
  REQUIRE(server.start(&err));
  const double rss_before = rss_mib();

  fr::daemon::test::Horde horde(server.metrics_port(), fr::daemon::test::http_horde_kinds());
  for (int s = 0; s < 40; ++s) horde.add(25, "127.0.0." + std::to_string(3 + s));
  horde.add(100, "127.0.0.2");  // over its cap of 32
  REQUIRE(horde.failed_connects == 0);
  std::atomic<bool> stop{false};
  std::thread attack([&] { horde.run(stop); });

  std::vector<double> latencies;
  size_t ok = 0, asked = 0;
  double rss_peak = rss_before;
  const auto t0 = Clock::now();
  while (since(t0) < 8) {
    for (const char* path : {"/metrics", "/"}) {
      std::string body;
      auto [status, seconds] = fr::daemon::test::timed_http_get(server.metrics_port(), path, &body);
      ++asked;
      latencies.push_back(seconds);
      const bool good =
          status == "HTTP/1.1 200 OK" &&
          body.find(path[1] ? "frd_retained_report_bytes" : "<html") != std::string::npos;
      ok += good;
      if (!good) UNSCOPED_INFO(path << ": " << status);
    }
    rss_peak = std::max(rss_peak, rss_mib());
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  stop = true;
  attack.join();
  std::sort(latencies.begin(), latencies.end());
  const double median = latencies[latencies.size() / 2], worst = latencies.back();
  std::printf(
      "http under 1,100 hostile connections: %zu/%zu pages answered, latency median %.1f ms, "
      "worst %.1f ms; hostile connections reopened after the server closed them: %zu; longest "
      "held: silent %.2f s, slow head %.2f s, slow body %.2f s; test process RSS %.0f -> %.0f MiB\n",
      ok, asked, median * 1e3, worst * 1e3, horde.reopened, horde.longest_s[0], horde.longest_s[1],
      horde.longest_s[2], rss_before, rss_peak);
  CHECK(ok == asked);
  CHECK(worst < 1.0);
  // The head deadline is 5 s and silence is dropped after 2 s (slack for a loaded machine).
  CHECK(horde.longest_s[0] < 4.5);
  CHECK(horde.longest_s[1] < 7.5);
  CHECK(horde.longest_s[2] < 2.0);  // refused at once
  CHECK(rss_peak - rss_before < 200);
}

TEST_CASE("the live page is built at most once per 2 s, however many clients reload it",
          "[daemon][http]") {
  // Eight clients reloading `/` as fast as they can (#37): each build takes the state's lock, so
  // every reload used to be one more build that heartbeats and `/metrics` waited behind.
  TempDir dumps;
  ServerOptions so = loopback_options();
  so.metrics_listen = "127.0.0.1:0";
  CoordinatorServer server(loopback_config(dumps.path), so);
  std::string err;
  REQUIRE(server.start(&err));
  std::atomic<bool> stop{false};
  std::atomic<size_t> pages{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < 8; ++c)
    clients.emplace_back([&] {
      while (!stop) {
        std::string body;
        auto [status, seconds] =
            fr::daemon::test::timed_http_get(server.metrics_port(), "/", &body);
        if (status == "HTTP/1.1 200 OK" && body.find("<html") != std::string::npos) ++pages;
      }
    });
  const auto t0 = Clock::now();
  std::vector<double> scrapes;
  while (since(t0) < 3) {
    std::string body;
    scrapes.push_back(
        fr::daemon::test::timed_http_get(server.metrics_port(), "/metrics", &body).second);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  stop = true;
  for (auto& t : clients) t.join();
  const double elapsed = since(t0);
  std::string metrics;
  fr::daemon::test::timed_http_get(server.metrics_port(), "/metrics", &metrics);
  const std::string key = "\nfrd_live_page_builds_total ";
  const size_t at = metrics.find(key);
  REQUIRE(at != std::string::npos);
  const unsigned long builds = std::stoul(metrics.substr(at + key.size()));
  std::sort(scrapes.begin(), scrapes.end());
  std::printf(
      "live page: %zu pages served to 8 clients in %.1f s from %lu builds; /metrics meanwhile "
      "median %.1f ms, worst %.1f ms\n",
      pages.load(), elapsed, builds, scrapes[scrapes.size() / 2] * 1e3, scrapes.back() * 1e3);
  CHECK(pages > builds);
  CHECK(builds >= 1);
  CHECK(double(builds) <= elapsed / 2 + 2);
}
