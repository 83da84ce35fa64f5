// A tiny HTTP/1.0 responder for Prometheus scrapes: GET /metrics answers with the text the
// callback returns, anything else 404. One thread, one connection at a time, each bounded in
// time and size, so a slow or hostile client can delay a scrape but never grow memory or block
// the coordinator.
#pragma once

#include <atomic>
#include <functional>
#include <string>
#include <thread>

namespace fr::daemon {

class MetricsServer {
 public:
  using Render = std::function<std::string()>;
  MetricsServer() = default;
  ~MetricsServer();

  // addr is HOST:PORT (IPv4 or a name; port 0 picks one). Returns false with *error set.
  bool start(const std::string& addr, Render render, std::string* error);
  void stop();
  int port() const { return port_; }

 private:
  void loop();
  void serve(int fd);

  Render render_;
  int listen_fd_ = -1;
  int wake_[2] = {-1, -1};
  int port_ = 0;
  std::thread thread_;
};

// Splits HOST:PORT (also [v6]:PORT). False when malformed.
bool split_host_port(const std::string& addr, std::string* host, int* port);

}  // namespace fr::daemon
