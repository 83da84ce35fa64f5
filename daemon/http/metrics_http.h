// frd's HTTP listener: a small server that answers GET routes (Prometheus text at /metrics, the
// coordinator's pages and its JSON). Connections are held by an event loop that bounds every
// request head in time and size and caps the connections of each peer (http_front.h), so idle,
// trickling or crowding clients cannot hold up a scrape; only complete requests reach the routes.
//
// Credentials follow the gRPC listener's rules (docs/frd.md, Security): with a token, every
// request must carry it (`Authorization: Bearer TOKEN`, or the `fr_token` cookie that visiting
// any page with `?token=TOKEN` sets); with a certificate the listener speaks TLS, and with a client
// CA it demands client certificates.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "daemon/http/http_front.h"

namespace fr::daemon {

struct HttpSecurity {
  std::string token;                             // empty: none asked for
  std::string tls_cert, tls_key, tls_client_ca;  // PEM contents; empty: plain HTTP
};

class HttpServer {
 public:
  struct Request {
    std::string path;
    std::string tail;                          // for a prefix route: what follows the prefix
    std::map<std::string, std::string> query;  // ?key=value (the first of a repeated key)
  };
  struct Response {
    int status = 200;
    std::string content_type = "text/plain; charset=utf-8";
    std::string body;
  };
  using Handler = std::function<Response(const Request&)>;

  HttpServer();
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Routes are added before start(), answered for GET: an exact path, or every path under a
  // prefix ending in '/' (one more path segment, in Request::tail).
  void get(const std::string& path, Handler handler);
  void get_under(const std::string& prefix, Handler handler);
  // The front's bounds (the defaults are documented in docs/frd.md); before start().
  void set_limits(const HttpLimits& limits);
  // addr is HOST:PORT (IPv4, [IPv6] or a name; port 0 picks one). False with *error set.
  bool start(const std::string& addr, const HttpSecurity& security, std::string* error);
  void stop();
  int port() const { return port_; }
  HttpStats stats() const;

 private:
  HttpReply answer(const HttpHead& head) const;

  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::map<std::string, Handler> routes_, prefix_routes_;
  int port_ = 0;
};

// Splits HOST:PORT (also [v6]:PORT). False when malformed.
bool split_host_port(const std::string& addr, std::string* host, int* port);

}  // namespace fr::daemon
