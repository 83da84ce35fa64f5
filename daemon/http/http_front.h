// The front of frd's HTTP listener: one thread with epoll accepts every connection, does the TLS
// handshake, and reads each request head itself, so that a client that says nothing, trickles
// its headers or announces a body holds no thread and no more than a few KiB. Only a complete
// request goes to the small pool of threads that run the pages' handlers; their replies are
// written back by the same event loop, without blocking on a slow reader.
//
// What bounds a hostile client (docs/frd.md, "Web page, status and metrics"):
// - a deadline on the whole request head, TLS handshake included, and a shorter one on silence
//   (which also ends a kept-alive connection left idle); a cap on the TLS handshakes in progress;
// - a cap on the connections of one peer address: a new connection from a peer at its cap
//   closes that peer's oldest one still waiting for its request, so the peer only ever competes
//   with itself; a cap on all connections does the same across peers;
// - no request bodies (413 at once), a head of at most 8 KiB (431), and when every handler
//   thread is busy and the queue is full, 503 at once instead of waiting;
// - `/metrics` (HttpLimits::priority_paths) in a lane of its own, ahead of the pages.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "daemon/http/http_request.h"

typedef struct ssl_ctx_st SSL_CTX;

namespace fr::daemon {

struct HttpLimits {
  size_t max_connections = 2048;  // all peers together (and at most half of RLIMIT_NOFILE)
  size_t per_peer = 32;           // connections of one peer address
  int64_t head_ms = 5000;         // from accept (or the last reply) to a whole request head
  int64_t idle_ms = 2000;         // not one byte for this long: dropped
  int64_t write_ms = 10000;       // to write one whole reply
  size_t max_head = 8192;         // request line and headers
  int threads = 4;                // running handlers
  size_t queue = 64;              // complete requests waiting for a handler thread (per lane)
  // Paths served ahead of the others: their own queue and a handler thread of their own (the
  // page threads take them first too), so pages being built never keep them waiting.
  std::vector<std::string> priority_paths{"/metrics"};
  int keep_alive_max = 100;  // requests on one connection
  // TLS handshakes in progress, all peers together: a new one past the cap closes the oldest
  // still in its handshake. Each holds about 40 KiB (OpenSSL's state; its buffers are released
  // while empty), so half-done handshakes hold a few MiB at most.
  size_t max_handshakes = 256;
};

// What the front has done since it started (for tests and logs).
struct HttpStats {
  uint64_t accepted = 0;
  uint64_t served = 0;     // replies handed to a handler thread
  uint64_t evicted = 0;    // closed to make room under a cap
  uint64_t timed_out = 0;  // closed by a deadline
  uint64_t refused = 0;    // closed at once: at a cap with nothing to evict
  uint64_t busy = 0;       // answered 503 (queue full)
};

class HttpFront {
 public:
  using Serve = std::function<HttpReply(const HttpHead&)>;

  HttpFront(const HttpLimits& limits, Serve serve);
  ~HttpFront();
  HttpFront(const HttpFront&) = delete;
  HttpFront& operator=(const HttpFront&) = delete;

  // Serves the bound, listening socket `listen_fd` (taken over, closed by stop()). With `tls`
  // (kept alive by the caller until stop()) every connection speaks TLS.
  bool start(int listen_fd, SSL_CTX* tls, std::string* error);
  void stop();
  HttpStats stats() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fr::daemon
