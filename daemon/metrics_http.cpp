// See metrics_http.h.
#include "daemon/metrics_http.h"

#include <httplib.h>

#include <chrono>
#include <cstdlib>

namespace fr::daemon {

namespace {
constexpr int kThreads = 16;          // connections served at once
constexpr time_t kTimeoutSec = 2;     // per read or write, and for an idle kept-alive connection
constexpr size_t kMaxRequest = 8192;  // request line and headers
}  // namespace

bool split_host_port(const std::string& addr, std::string* host, int* port) {
  size_t colon = addr.rfind(':');
  if (colon == std::string::npos || colon + 1 >= addr.size()) return false;
  std::string h = addr.substr(0, colon), p = addr.substr(colon + 1);
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  char* end = nullptr;
  long v = std::strtol(p.c_str(), &end, 10);
  if (*end != '\0' || v < 0 || v > 65535) return false;
  *host = h.empty() ? "0.0.0.0" : h;
  *port = int(v);
  return true;
}

struct HttpServer::Impl {
  httplib::Server server;
};

HttpServer::HttpServer() : impl_(std::make_unique<Impl>()) {}

HttpServer::~HttpServer() { stop(); }

void HttpServer::get(const std::string& path, Handler handler) {
  routes_[path] = std::move(handler);
}

bool HttpServer::start(const std::string& addr, std::string* error) {
  std::string host;
  int port = 0;
  if (!split_host_port(addr, &host, &port)) {
    *error = "bad HTTP address '" + addr + "' (want HOST:PORT)";
    return false;
  }
  auto& s = impl_->server;
  s.new_task_queue = [] { return new httplib::ThreadPool(kThreads); };
  s.set_read_timeout(kTimeoutSec, 0);
  s.set_write_timeout(kTimeoutSec, 0);
  s.set_idle_interval(0, 100'000);
  s.set_keep_alive_timeout(kTimeoutSec);
  s.set_keep_alive_max_count(16);
  s.set_payload_max_length(kMaxRequest);
  for (const auto& [path, handler] : routes_) {
    Handler h = handler;
    s.Get(path, [h](const httplib::Request&, httplib::Response& res) {
      Response r = h();
      res.status = r.status;
      res.set_content(r.body, r.content_type.c_str());
    });
  }
  s.set_error_handler([](const httplib::Request&, httplib::Response& res) {
    if (res.status == 404) res.set_content("not found\n", "text/plain; charset=utf-8");
  });
  port_ = port == 0 ? s.bind_to_any_port(host) : (s.bind_to_port(host, port) ? port : -1);
  if (port_ <= 0) {
    port_ = 0;
    *error = "cannot listen for HTTP on " + addr;
    return false;
  }
  thread_ = std::thread([this] { impl_->server.listen_after_bind(); });
  // stop() only stops a server that runs: wait for it to.
  for (int i = 0; i < 500 && !s.is_running(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  return true;
}

void HttpServer::stop() {
  if (!thread_.joinable()) return;
  impl_->server.stop();
  thread_.join();
}

}  // namespace fr::daemon
