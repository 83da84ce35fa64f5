// Hostile TCP clients for the daemon tests, held from one thread: each connection is opened from
// a loopback address of its own choosing, sends its first bytes at once and then trickles the rest
// a byte every 250 ms (or says nothing at all), and is opened again as soon as the server closes
// it. The horde counts the reopenings and the longest each kind of connection lived. Made for the
// HTTP listener (silent, slow headers, slow bodies) and the gRPC port (silent, a cut HTTP/2
// preface, garbage). Bounded: a pass every 20 ms at most, until told to stop.
#pragma once

#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "fixture.h"

namespace fr::daemon::test {

struct HordeKind {
  std::string name;
  std::string text;  // what it sends, all in all (empty: nothing)
  size_t first = 0;  // bytes of it sent at once, the rest one at a time
};

class Horde {
 public:
  using Clock = std::chrono::steady_clock;

  Horde(int port, std::vector<HordeKind> kinds)
      : longest_s(kinds.size(), 0), port_(port), kinds_(std::move(kinds)) {}
  ~Horde() {
    for (Conn& c : conns_)
      if (c.fd >= 0) ::close(c.fd);
  }
  Horde(const Horde&) = delete;
  Horde& operator=(const Horde&) = delete;

  // `n` connections from `source`, of the kinds in turn.
  void add(size_t n, const std::string& source) {
    for (size_t i = 0; i < n; ++i) {
      conns_.push_back({i % kinds_.size(), source});
      open(conns_.back());
    }
  }

  void run(const std::atomic<bool>& stop) {
    auto last_trickle = Clock::now();
    std::vector<pollfd> fds(conns_.size());
    while (!stop) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      for (size_t i = 0; i < conns_.size(); ++i) fds[i] = {conns_[i].fd, POLLIN, 0};
      poll(fds.data(), fds.size(), 30);
      for (size_t i = 0; i < conns_.size(); ++i) {
        Conn& c = conns_[i];
        char buf[4096];
        if (c.fd >= 0 && !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        if (c.fd >= 0 && ::read(c.fd, buf, sizeof buf) > 0)
          continue;  // an answer: the close follows
        if (c.fd >= 0) {
          note_lifetime(c);
          ::close(c.fd);
        }
        ++reopened;
        open(c);
      }
      if (since(last_trickle) < 0.25) continue;
      last_trickle = Clock::now();
      for (Conn& c : conns_) {
        const HordeKind& k = kinds_[c.kind];
        if (c.fd < 0 || c.sent >= k.text.size()) continue;
        const size_t n = c.sent == 0 ? std::max<size_t>(1, k.first) : 1;
        if (::send(c.fd, k.text.data() + c.sent, n, MSG_NOSIGNAL) > 0) c.sent += n;
      }
    }
    for (Conn& c : conns_)
      if (c.fd >= 0) note_lifetime(c);
  }

  size_t size() const { return conns_.size(); }
  const std::vector<HordeKind>& kinds() const { return kinds_; }

  size_t reopened = 0, failed_connects = 0;
  std::vector<double> longest_s;  // per kind: the longest a connection lived, in seconds

 private:
  struct Conn {
    size_t kind;
    std::string source;
    int fd = -1;
    size_t sent = 0;
    Clock::time_point opened{};
  };

  static double since(Clock::time_point t) {
    return std::chrono::duration<double>(Clock::now() - t).count();
  }

  void open(Conn& c) {
    c.fd = connect_loopback(port_, c.source);
    failed_connects += c.fd < 0;
    c.sent = 0;
    c.opened = Clock::now();
  }

  void note_lifetime(const Conn& c) {
    longest_s[c.kind] = std::max(longest_s[c.kind], since(c.opened));
  }

  int port_;
  std::vector<HordeKind> kinds_;
  std::vector<Conn> conns_;
};

// The HTTP listener's hostile clients: silent, a head trickled a byte at a time, a large body
// announced (its head at once) and trickled.
inline std::vector<HordeKind> http_horde_kinds() {
  const std::string body_head =
      "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n";
  return {
      {"silent", "", 0},
      {"slow head", "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Trickle: " + std::string(4000, 'a'), 1},
      {"slow body", body_head + std::string(4000, 'b'), body_head.size() + 1}};
}

// The gRPC port's: silent, the HTTP/2 preface cut short then trickled, and garbage.
inline std::vector<HordeKind> grpc_horde_kinds() {
  return {{"silent", "", 0},
          {"cut preface", "PRI * HTTP/2.0\r\n\r\nSM\r\n" + std::string(4000, '\0'), 10},
          {"garbage", std::string(4000, '\x17'), 64}};
}

// One GET from 127.0.0.1 (a 5 s limit on every read): the status line, and the seconds it took;
// the whole response in *response.
inline std::pair<std::string, double> timed_http_get(int port, const std::string& path,
                                                     std::string* response) {
  const auto t0 = std::chrono::steady_clock::now();
  auto took = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  const int fd = connect_loopback(port);
  if (fd < 0) return {"no connection", took()};
  timeval tv{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  const std::string req = "GET " + path + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  (void)!::write(fd, req.data(), req.size());
  std::string resp;
  char buf[8192];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof buf)) > 0) resp.append(buf, size_t(n));
  ::close(fd);
  *response = resp;
  return {resp.substr(0, resp.find("\r\n")), took()};
}

// Room for both ends of thousands of connections in one process (and its children).
inline bool raise_open_files(rlim_t want) {
  rlimit rl{};
  getrlimit(RLIMIT_NOFILE, &rl);
  if (rl.rlim_cur < want && rl.rlim_max > rl.rlim_cur) {
    rl.rlim_cur = std::min<rlim_t>(rl.rlim_max, want);
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  return rl.rlim_cur >= want / 2;
}

}  // namespace fr::daemon::test
