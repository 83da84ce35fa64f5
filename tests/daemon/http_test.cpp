// frd's HTTP listener: the request head parsed without sockets (whole, partial, malformed,
// oversize, bodies announced, keep-alive by version and header), then the front on loopback with
// short limits: a whole-head deadline against a trickle, silence dropped, the per-peer cap that
// evicts the peer's own oldest waiting connection, 413 for bodies, 431, 400, 405, 404, HEAD,
// keep-alive with pipelined requests, and the token rules.
#include <catch2/catch.hpp>

#include <openssl/bio.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "daemon/http/http_request.h"
#include "daemon/http/metrics_http.h"
#include "fixture.h"
#include "horde.h"
#include "skip.h"
#include "temp_dir.h"
#include "testing/files.h"
#include "testing/wait.h"

using namespace fr::daemon;
using fr::daemon::test::connect_loopback;
using fr::daemon::test::http_get;
using fr::test::wait_for;

namespace {

HeadStatus parse(const std::string& text, HttpHead* h, size_t max = 8192) {
  size_t used = 0;
  return parse_head(text, max, h, &used);
}

// Whether the server closed `fd`: EOF (after any reply bytes) within `seconds`.
bool closed_within(int fd, double seconds, std::string* got = nullptr) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  char buf[4096];
  do {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, seconds > 0 ? 50 : 0) <= 0) continue;
    const ssize_t n = read(fd, buf, sizeof buf);
    if (n <= 0) return true;
    if (got) got->append(buf, size_t(n));
  } while (std::chrono::steady_clock::now() < end);
  return false;
}

std::string send_and_read(int fd, const std::string& bytes) {
  (void)!write(fd, bytes.data(), bytes.size());
  std::string got;
  closed_within(fd, 5, &got);
  close(fd);
  return got;
}

struct Served {
  HttpServer http;
  explicit Served(HttpLimits lim, const std::string& token = "", HttpSecurity sec = {}) {
    http.get("/metrics", [](const HttpServer::Request&) {
      HttpServer::Response r;
      r.body = "frd_up 1\n";
      return r;
    });
    http.get_under("/incidents/", [](const HttpServer::Request& req) {
      HttpServer::Response r;
      r.body =
          "incident " + req.tail + (req.query.count("x") ? " x=" + req.query.at("x") : "") + "\n";
      return r;
    });
    http.set_limits(lim);
    std::string err;
    sec.token = token;
    REQUIRE(http.start("127.0.0.1:0", sec, &err));
  }
};

HttpLimits short_limits() {
  HttpLimits lim;
  lim.head_ms = 1000;
  lim.idle_ms = 600;
  lim.per_peer = 4;
  return lim;
}

}  // namespace

TEST_CASE("http head: whole, partial, malformed and oversize", "[daemon][http]") {
  HttpHead h;
  CHECK(parse("GET /metrics HTTP/1.1\r\nHost: x\r\n", &h) == HeadStatus::kIncomplete);
  REQUIRE(parse("GET /a%20b?token=t%2Bu&x=1+2&x=3 HTTP/1.1\r\nHost: x\r\nCookie:  a=b \r\n\r\n",
                &h) == HeadStatus::kComplete);
  CHECK(h.method == "GET");
  CHECK(h.path == "/a b");
  CHECK(h.query.at("token") == "t+u");
  CHECK(h.query.at("x") == "1 2");  // the first of a repeated key
  CHECK(h.header("cookie") == "a=b");
  CHECK(h.keep_alive);
  CHECK_FALSE(h.has_body);
  CHECK(parse("GET / HTTP/1.0\r\n\r\n", &h) == HeadStatus::kComplete);
  CHECK_FALSE(h.keep_alive);
  CHECK(parse("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n", &h) == HeadStatus::kComplete);
  CHECK(h.keep_alive);
  CHECK(parse("GET / HTTP/1.1\r\nConnection: close\r\n\r\n", &h) == HeadStatus::kComplete);
  CHECK_FALSE(h.keep_alive);
  CHECK(parse("POST / HTTP/1.1\r\nContent-Length: 10\r\n\r\n", &h) == HeadStatus::kComplete);
  CHECK(h.has_body);
  CHECK(parse("GET / HTTP/1.1\r\nContent-Length: 0\r\n\r\n", &h) == HeadStatus::kComplete);
  CHECK_FALSE(h.has_body);
  CHECK(parse("GET / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", &h) == HeadStatus::kComplete);
  CHECK(h.has_body);
  for (const char* bad :
       {"GET\r\n\r\n", "GET / HTTP/2\r\n\r\n", "GET nopath HTTP/1.1\r\n\r\n",
        "GET / HTTP/1.1 extra\r\n\r\n", "G(T / HTTP/1.1\r\n\r\n",
        "GET / HTTP/1.1\r\nno colon\r\n\r\n", "GET / HTTP/1.1\r\n: empty name\r\n\r\n",
        "GET / HTTP/1.1\r\nA\nB: c\r\n\r\n"}) {
    INFO(bad);
    CHECK(parse(bad, &h) == HeadStatus::kMalformed);
  }
  CHECK(parse(std::string("GET / HTTP/1.1\r\nX: a\0b\r\n\r\n", 27), &h) == HeadStatus::kMalformed);
  const std::string big = "GET / HTTP/1.1\r\nX: " + std::string(9000, 'a') + "\r\n\r\n";
  CHECK(parse(big, &h) == HeadStatus::kTooLarge);
  CHECK(parse(big.substr(0, 8192), &h) == HeadStatus::kTooLarge);  // no end in sight within the cap
  CHECK(percent_decode("%zz%4", false) == "%zz%4");
}

TEST_CASE("http reply: status line, length, headers, no body for HEAD", "[daemon][http]") {
  HttpReply r{404, "text/plain", "gone\n", {{"X-A", "b"}}};
  CHECK(
      write_reply(r, false, false) ==
      "HTTP/1.1 404 Not Found\r\nContent-Type: text/plain\r\nContent-Length: 5\r\nX-A: b\r\nConnection: close\r\n\r\ngone\n");
  CHECK(write_reply(r, true, true)
            .find("Content-Length: 5\r\nX-A: b\r\nConnection: keep-alive\r\n\r\n") !=
        std::string::npos);
  CHECK(write_reply(r, true, true).find("gone") == std::string::npos);
}

TEST_CASE("http front: answers, 404, 405, 413, 431, 400 and HEAD", "[daemon][http]") {
  Served s(short_limits());
  const int port = s.http.port();
  CHECK(http_get(port, "/metrics").find("frd_up 1") != std::string::npos);
  CHECK(http_get(port, "/incidents/inc-1?x=%41").find("incident inc-1 x=A") != std::string::npos);
  CHECK(http_get(port, "/incidents/../etc").rfind("HTTP/1.1 404", 0) == 0);
  CHECK(http_get(port, "/incidents/").rfind("HTTP/1.1 404", 0) == 0);
  CHECK(http_get(port, "/nothing").rfind("HTTP/1.1 404", 0) == 0);
  CHECK(send_and_read(connect_loopback(port), "DELETE /metrics HTTP/1.1\r\n\r\n")
            .rfind("HTTP/1.1 405", 0) == 0);
  CHECK(send_and_read(connect_loopback(port),
                      "POST /metrics HTTP/1.1\r\nContent-Length: 100000\r\n\r\nab")
            .rfind("HTTP/1.1 413", 0) == 0);
  CHECK(
      send_and_read(connect_loopback(port), "GET /metrics HTTP/1.1\r\nX: " + std::string(9000, 'a'))
          .rfind("HTTP/1.1 431", 0) == 0);
  CHECK(send_and_read(connect_loopback(port), "GET metrics\r\n\r\n").rfind("HTTP/1.1 400", 0) == 0);
  const std::string head = send_and_read(connect_loopback(port), "HEAD /metrics HTTP/1.0\r\n\r\n");
  CHECK(head.rfind("HTTP/1.1 200", 0) == 0);
  CHECK(head.find("Content-Length: 9") != std::string::npos);
  CHECK(head.find("frd_up") == std::string::npos);
}

TEST_CASE("http front: keep-alive serves pipelined requests in order, then closes on request",
          "[daemon][http]") {
  Served s(short_limits());
  const std::string one = "GET /incidents/a HTTP/1.1\r\nHost: x\r\n\r\n";
  const std::string got =
      send_and_read(connect_loopback(s.http.port()),
                    one +
                        "GET /incidents/b HTTP/1.1\r\nHost: x\r\n\r\n"
                        "GET /incidents/c HTTP/1.1\r\nConnection: close\r\n\r\n");
  const size_t a = got.find("incident a"), b = got.find("incident b"), c = got.find("incident c");
  REQUIRE(a != std::string::npos);
  REQUIRE(b != std::string::npos);
  REQUIRE(c != std::string::npos);
  CHECK((a < b && b < c));
  CHECK(got.find("Connection: close") != std::string::npos);
}

TEST_CASE("http front: a trickled head meets its deadline, silence is dropped sooner",
          "[daemon][http][hostile]") {
  Served s(short_limits());
  const int trickle = connect_loopback(s.http.port()), quiet = connect_loopback(s.http.port());
  REQUIRE(trickle >= 0);
  REQUIRE(quiet >= 0);
  const auto t0 = std::chrono::steady_clock::now();
  auto seconds = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  // One byte every 100 ms never looks idle, but the whole head is due within 1 s; the silent
  // one is dropped after 0.6 s meanwhile.
  const std::string head = "GET /metrics HTTP/1.1\r\nX-Slow: " + std::string(200, 'a');
  bool closed = false, quiet_closed = false;
  double quiet_s = 0;
  size_t sent = 0;
  for (; sent < head.size() && !closed && seconds() < 10; ++sent) {
    closed = write(trickle, &head[sent], 1) != 1 || closed_within(trickle, 0.1);
    if (!quiet_closed && closed_within(quiet, 0)) {
      quiet_closed = true;
      quiet_s = seconds();
    }
  }
  const double trickle_s = seconds();
  std::printf(
      "http deadlines: silent connection dropped after %.2f s, trickle after %.2f s (%zu bytes)\n",
      quiet_s, trickle_s, sent);
  CHECK(quiet_closed);
  CHECK(sent > 5);  // it was not dropped as silent
  CHECK((closed || closed_within(trickle, 5)));
  CHECK(sent < head.size());
  close(trickle);
  close(quiet);
  CHECK(s.http.stats().timed_out >= 2);
}

TEST_CASE(
    "http front: a peer at its cap loses its own oldest waiting connection, others keep theirs",
    "[daemon][http][hostile]") {
  HttpLimits lim = short_limits();    // 4 per peer
  lim.idle_ms = lim.head_ms = 20000;  // nothing here is dropped for its silence
  Served s(lim);
  const int port = s.http.port();
  std::vector<int> mine, other;
  for (int i = 0; i < 4; ++i) mine.push_back(connect_loopback(port, "127.0.0.1"));
  for (int i = 0; i < 4; ++i) other.push_back(connect_loopback(port, "127.0.0.2"));
  REQUIRE(wait_for([&] { return s.http.stats().accepted == 8; }, 5));
  // A fifth from 127.0.0.1, with its request: served, and 127.0.0.1's oldest goes.
  CHECK(send_and_read(connect_loopback(port, "127.0.0.1"), "GET /metrics HTTP/1.0\r\n\r\n")
            .find("frd_up 1") != std::string::npos);
  CHECK(closed_within(mine[0], 0.3));
  for (int fd : {mine[1], mine[2], mine[3], other[0], other[1], other[2], other[3]})
    CHECK_FALSE(closed_within(fd, 0.05));
  CHECK(s.http.stats().evicted == 1);
  for (int fd : mine) close(fd);
  for (int fd : other) close(fd);
}

TEST_CASE("http front: with a token, a route asks for it, and unknown paths are 404 either way",
          "[daemon][http]") {
  Served s(short_limits(), "tok");
  const int port = s.http.port();
  const std::string bare = http_get(port, "/metrics");
  CHECK(bare.rfind("HTTP/1.1 401", 0) == 0);
  CHECK(bare.find("WWW-Authenticate: Bearer") != std::string::npos);
  CHECK(http_get(port, "/metrics", "Authorization: Bearer tok\r\n").find("frd_up 1") !=
        std::string::npos);
  CHECK(http_get(port, "/metrics", "Cookie: a=b; fr_token=tok\r\n").find("frd_up 1") !=
        std::string::npos);
  CHECK(http_get(port, "/metrics", "Authorization: Bearer tok2\r\n").rfind("HTTP/1.1 401", 0) == 0);
  // The scheme in any case, as HTTP says (#37); the token exactly.
  for (const char* scheme : {"bearer", "BEARER", "beaRer"})
    CHECK(http_get(port, "/metrics", "Authorization: " + std::string(scheme) + "  tok\r\n")
              .find("frd_up 1") != std::string::npos);
  for (const char* bad : {"Bearertok", "Basic tok", "bearer TOK", "bearer", "bearer "})
    CHECK(http_get(port, "/metrics", "Authorization: " + std::string(bad) + "\r\n")
              .rfind("HTTP/1.1 401", 0) == 0);
  const std::string login = http_get(port, "/incidents/x?token=tok");
  CHECK(login.rfind("HTTP/1.1 303", 0) == 0);
  CHECK(login.find("Location: /incidents/x\r\n") != std::string::npos);
  CHECK(login.find("Set-Cookie: fr_token=tok; Path=/; HttpOnly; SameSite=Strict") !=
        std::string::npos);
  CHECK(http_get(port, "/nothing").rfind("HTTP/1.1 404", 0) == 0);
}

TEST_CASE("http front: over TLS the token cookie is Secure", "[daemon][http]") {
  fr::test::TempDir tmp;
  const std::string script = "cd " + tmp.path +
                             " && openssl req -x509 -newkey ec -pkeyopt "
                             "ec_paramgen_curve:prime256v1 -nodes -keyout key.pem -out cert.pem "
                             "-days 2 -subj /CN=localhost 2>/dev/null";
  if (std::system(script.c_str()) != 0) FR_SKIP("no openssl: it could not make a certificate");
  HttpSecurity sec;
  sec.tls_cert = fr::test::slurp(tmp.sub("cert.pem"));
  sec.tls_key = fr::test::slurp(tmp.sub("key.pem"));
  Served s(short_limits(), "tok", sec);
  const std::string cmd =
      "printf 'GET /metrics?token=tok HTTP/1.1\\r\\nHost: localhost\\r\\nConnection: "
      "close\\r\\n\\r\\n' | timeout 10 openssl s_client -quiet -connect 127.0.0.1:" +
      std::to_string(s.http.port()) + " 2>/dev/null";
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p);
  std::string got;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) got.append(buf, n);
  pclose(p);
  INFO(got);
  CHECK(got.rfind("HTTP/1.1 303", 0) == 0);
  CHECK(got.find("Set-Cookie: fr_token=tok; Path=/; HttpOnly; SameSite=Strict; Secure\r\n") !=
        std::string::npos);
}

TEST_CASE("http front: /metrics is answered while every page thread is busy", "[daemon][http]") {
  // Pages that take long to build (#37: the live page of a 256-node job) held every handler
  // thread, and a scrape waited behind them. Here the pages never finish until released: the
  // scrape must come back all the same, from its own lane.
  std::mutex mu;
  std::condition_variable cv;
  bool release = false;
  int building = 0;
  HttpServer http;
  http.get("/", [&](const HttpServer::Request&) {
    std::unique_lock<std::mutex> lk(mu);
    ++building;
    cv.notify_all();
    cv.wait(lk, [&] { return release; });
    HttpServer::Response r;
    r.body = "page\n";
    return r;
  });
  http.get("/metrics", [](const HttpServer::Request&) {
    HttpServer::Response r;
    r.body = "frd_up 1\n";
    return r;
  });
  HttpLimits lim;
  http.set_limits(lim);
  std::string err;
  REQUIRE(http.start("127.0.0.1:0", {}, &err));
  std::vector<std::thread> pages;
  for (int i = 0; i < 2 * lim.threads; ++i) pages.emplace_back([&] { http_get(http.port(), "/"); });
  {
    std::unique_lock<std::mutex> lk(mu);
    REQUIRE(cv.wait_for(lk, std::chrono::seconds(20), [&] { return building == lim.threads; }));
  }
  // Every page thread is held, more pages wait in the queue: the scrape still comes back.
  std::string got;
  std::atomic<bool> done{false};
  std::thread scrape([&] {
    got = http_get(http.port(), "/metrics");
    done = true;
  });
  const bool answered = wait_for([&] { return done.load(); }, 20);
  {
    std::lock_guard<std::mutex> lk(mu);
    release = true;
  }
  cv.notify_all();
  scrape.join();
  for (auto& t : pages) t.join();
  CHECK(answered);
  CHECK(got.find("frd_up 1") != std::string::npos);
}

namespace {

// A client's first TLS flight (its ClientHello), made once by OpenSSL over memory BIOs: sent
// alone on a connection, it leaves the server's handshake half done.
std::string client_hello() {
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  SSL* ssl = SSL_new(ctx);
  BIO* in = BIO_new(BIO_s_mem());
  BIO* out = BIO_new(BIO_s_mem());
  SSL_set_bio(ssl, in, out);
  SSL_set_connect_state(ssl);
  SSL_do_handshake(ssl);  // wants to read the server's answer
  std::string hello;
  char buf[4096];
  for (int n; (n = BIO_read(out, buf, sizeof buf)) > 0;) hello.append(buf, size_t(n));
  SSL_free(ssl);
  SSL_CTX_free(ctx);
  return hello;
}

}  // namespace

TEST_CASE("http front: half-done TLS handshakes hold a bounded amount of memory",
          "[daemon][http]") {
  // 2,048 connections that each send a ClientHello and nothing more (#37): each used to hold
  // about 70 KiB (+140 MB in all). Now at most 256 handshakes wait at once, each with its
  // buffers let go while empty.
  REQUIRE(fr::daemon::test::raise_open_files(8192));
  fr::test::TempDir tmp;
  const std::string script = "cd " + tmp.path +
                             " && openssl req -x509 -newkey ec -pkeyopt "
                             "ec_paramgen_curve:prime256v1 -nodes -keyout key.pem -out cert.pem "
                             "-days 2 -subj /CN=localhost 2>/dev/null";
  if (std::system(script.c_str()) != 0) FR_SKIP("no openssl: it could not make a certificate");
  HttpSecurity sec;
  sec.tls_cert = fr::test::slurp(tmp.sub("cert.pem"));
  sec.tls_key = fr::test::slurp(tmp.sub("key.pem"));
  HttpLimits lim;
  lim.per_peer = 4096;
  lim.max_connections = 4096;
  lim.head_ms = 60000;
  lim.idle_ms = 60000;
  Served s(lim, "", sec);
  const std::string hello = client_hello();
  REQUIRE(hello.size() > 5);
  // One handshake first, so that what every handshake shares (the certificate's key loaded, the
  // allocator's arenas) is counted before.
  auto half_done = [&](int n) {
    std::vector<int> fds;
    for (int i = 0; i < n; ++i) {
      const int fd = connect_loopback(s.http.port());
      if (fd < 0) break;
      (void)!write(fd, hello.data(), hello.size());
      fds.push_back(fd);
    }
    return fds;
  };
  std::vector<int> first = half_done(16);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const double before = fr::daemon::test::rss_mib();
  std::vector<int> fds = half_done(2048);
  REQUIRE(fds.size() == 2048);
  // The server answers every ClientHello (its flight reaches our socket) and then waits.
  std::this_thread::sleep_for(std::chrono::seconds(2));
  const double after = fr::daemon::test::rss_mib();
  // Connections the cap closed read as closed here; the others wait with their answer.
  size_t waiting = 0;
  for (int fd : fds) {
    char buf[16384];
    pollfd p{fd, POLLIN, 0};
    bool open = true;
    while (poll(&p, 1, 0) > 0) {
      const ssize_t n = read(fd, buf, sizeof buf);
      if (n <= 0) {
        open = false;
        break;
      }
    }
    waiting += open;
  }
  std::printf(
      "2,048 half-done TLS handshakes: %zu left waiting, the listener's process grew %.1f MiB "
      "(%.1f KiB per waiting handshake)\n",
      waiting, after - before, (after - before) * 1024 / double(std::max<size_t>(waiting, 1)));
  CHECK(waiting <= lim.max_handshakes + 16);
  CHECK(after - before < 32);  // 140 MB before the cap
  for (int fd : fds) close(fd);
  for (int fd : first) close(fd);
  // The listener still serves a whole handshake.
  const std::string cmd =
      "printf 'GET /metrics HTTP/1.1\\r\\nHost: localhost\\r\\nConnection: "
      "close\\r\\n\\r\\n' | timeout 10 openssl s_client -quiet -connect 127.0.0.1:" +
      std::to_string(s.http.port()) + " 2>/dev/null";
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p);
  std::string got;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) got.append(buf, n);
  pclose(p);
  CHECK(got.find("frd_up 1") != std::string::npos);
}
