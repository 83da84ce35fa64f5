// A coordinator's HTTP listener under 1,100 hostile connections, held for several seconds from 40
// loopback addresses (25 each, under the per-peer cap) plus 100 more from 127.0.0.2 (over the cap,
// so that its connections keep evicting each other): a third say nothing, a third trickle their headers a
// byte at a time, a third announce a large body and trickle it. Every connection the server
// closes is opened again at once. Meanwhile `/metrics` and `/` are fetched over and over from
// 127.0.0.1, and each must answer within a generous 1 s (the figures are printed). Afterwards: no
// hostile connection outlived the head deadline by much, and the coordinator's memory stayed
// bounded.
#include <catch2/catch.hpp>

#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "daemon/server.h"
#include "fixture.h"
#include "peer.h"

using namespace fr::daemon;
using fr::daemon::test::connect_loopback;
using fr::daemon::test::loopback_config;
using fr::daemon::test::loopback_options;
using fr::daemon::test::rss_mib;
using fr::daemon::test::TempDir;

namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

enum class Kind { kSilent, kSlowHead, kSlowBody };

struct Hostile {
  Kind kind;
  std::string source;
  int fd = -1;
  size_t sent = 0;
  Clock::time_point opened;
};

const std::string kSlowHead = "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Trickle: " + std::string(4000, 'a');
const std::string kSlowBody = "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n" + std::string(4000, 'b');

// Holds every hostile connection open (opening again what the server closes) and trickles bytes,
// until `stop`. Counts what the server closed, and the longest a connection lived.
struct Horde {
  std::vector<Hostile> conns;
  int port;
  size_t reopened = 0, failed_connects = 0;
  double longest_s[3] = {0, 0, 0};

  Horde(int port_, size_t per_source, int sources, size_t crowd) : port(port_) {
    for (int s = 0; s < sources; ++s)
      for (size_t i = 0; i < per_source; ++i)
        conns.push_back(hostile(Kind(i % 3), "127.0.0." + std::to_string(3 + s)));
    for (size_t i = 0; i < crowd; ++i) conns.push_back(hostile(Kind(i % 3), "127.0.0.2"));
    for (Hostile& h : conns) open(h);
  }

  static Hostile hostile(Kind kind, std::string source) {
    Hostile h;
    h.kind = kind;
    h.source = std::move(source);
    return h;
  }

  void open(Hostile& h) {
    h.fd = connect_loopback(port, h.source);
    failed_connects += h.fd < 0;
    h.sent = 0;
    h.opened = Clock::now();
  }

  void run(const std::atomic<bool>& stop) {
    auto last_trickle = Clock::now();
    std::vector<pollfd> fds(conns.size());
    while (!stop) {
      // A pass every 20 ms at most: thousands of reconnects a second, and CPU left for the server.
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      for (size_t i = 0; i < conns.size(); ++i) fds[i] = {conns[i].fd, POLLIN, 0};
      poll(fds.data(), fds.size(), 30);
      for (size_t i = 0; i < conns.size(); ++i) {
        Hostile& h = conns[i];
        char buf[4096];
        if (h.fd >= 0 && !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        if (h.fd >= 0 && read(h.fd, buf, sizeof buf) > 0) continue;  // a 413: the close follows
        if (h.fd >= 0) {
          double& longest = longest_s[int(h.kind)];
          longest = std::max(longest, since(h.opened));
          close(h.fd);
        }
        ++reopened;
        open(h);
      }
      if (since(last_trickle) < 0.25) continue;
      last_trickle = Clock::now();
      for (Hostile& h : conns) {
        const std::string& text = h.kind == Kind::kSlowHead ? kSlowHead : kSlowBody;
        if (h.kind == Kind::kSilent || h.fd < 0 || h.sent >= text.size()) continue;
        // The body's head goes at once, then the body a byte at a time; a head a byte at a time.
        const size_t n = h.kind == Kind::kSlowBody && h.sent == 0 ? text.find("\r\n\r\n") + 5 : 1;
        if (send(h.fd, text.data() + h.sent, n, MSG_NOSIGNAL) > 0) h.sent += n;
      }
    }
    for (Hostile& h : conns) {
      if (h.fd >= 0) longest_s[int(h.kind)] = std::max(longest_s[int(h.kind)], since(h.opened));
    }
  }

  ~Horde() {
    for (Hostile& h : conns)
      if (h.fd >= 0) close(h.fd);
  }
};

// One GET from 127.0.0.1: the status line, and the time it took (a 5 s limit on every read).
std::pair<std::string, double> timed_get(int port, const std::string& path, std::string* body) {
  const auto t0 = Clock::now();
  const int fd = connect_loopback(port);
  if (fd < 0) return {"no connection", since(t0)};
  timeval tv{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  const std::string req = "GET " + path + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  (void)!write(fd, req.data(), req.size());
  std::string resp;
  char buf[8192];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0) resp.append(buf, size_t(n));
  close(fd);
  *body = resp;
  return {resp.substr(0, resp.find("\r\n")), since(t0)};
}

}  // namespace

TEST_CASE("hostile: 1,000 silent, trickling and body-announcing HTTP connections do not hold up a scrape",
          "[daemon][hostile][http]") {
  // Both ends of 1,100 connections live in this process.
  rlimit rl{};
  getrlimit(RLIMIT_NOFILE, &rl);
  if (rl.rlim_cur < 8192 && rl.rlim_max > rl.rlim_cur) {
    rl.rlim_cur = std::min<rlim_t>(rl.rlim_max, 8192);
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  REQUIRE(rl.rlim_cur >= 3000);
  TempDir dumps;
  ServerOptions so = loopback_options();
  so.metrics_listen = "127.0.0.1:0";
  CoordinatorServer server(loopback_config(dumps.path), so);
  std::string err;
  REQUIRE(server.start(&err));
  const double rss_before = rss_mib();

  Horde horde(server.metrics_port(), 25, 40, 100);
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
      auto [status, seconds] = timed_get(server.metrics_port(), path, &body);
      ++asked;
      latencies.push_back(seconds);
      const bool good = status == "HTTP/1.1 200 OK" &&
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
  std::printf("http under 1,100 hostile connections: %zu/%zu pages answered, latency median %.1f ms, "
              "worst %.1f ms; hostile connections reopened after the server closed them: %zu; longest "
              "held: silent %.2f s, slow head %.2f s, slow body %.2f s; test process RSS %.0f -> %.0f MiB\n",
              ok, asked, median * 1e3, worst * 1e3, horde.reopened, horde.longest_s[0], horde.longest_s[1],
              horde.longest_s[2], rss_before, rss_peak);
  CHECK(ok == asked);
  CHECK(worst < 1.0);
  // The head deadline is 5 s and silence is dropped after 2 s (slack for a loaded machine).
  CHECK(horde.longest_s[int(Kind::kSilent)] < 4.5);
  CHECK(horde.longest_s[int(Kind::kSlowHead)] < 7.5);
  CHECK(horde.longest_s[int(Kind::kSlowBody)] < 2.0);  // refused at once
  CHECK(rss_peak - rss_before < 200);
}
