// The coordinator's HTTP listener, on cpp-httplib: a small server that answers GET routes
// (Prometheus text at /metrics, and whatever pages are added next to it). Connections are served
// by a pool of threads with short read and write timeouts, so idle or slow clients cannot hold
// up a scrape, and requests are bounded in size.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>

namespace fr::daemon {

class HttpServer {
 public:
  struct Response {
    int status = 200;
    std::string content_type = "text/plain; charset=utf-8";
    std::string body;
  };
  using Handler = std::function<Response()>;

  HttpServer();
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Routes are added before start(): an exact path, answered for GET.
  void get(const std::string& path, Handler handler);
  // addr is HOST:PORT (IPv4, [IPv6] or a name; port 0 picks one). False with *error set.
  bool start(const std::string& addr, std::string* error);
  void stop();
  int port() const { return port_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::map<std::string, Handler> routes_;
  std::thread thread_;
  int port_ = 0;
};

// Splits HOST:PORT (also [v6]:PORT). False when malformed.
bool split_host_port(const std::string& addr, std::string* host, int* port);

}  // namespace fr::daemon
