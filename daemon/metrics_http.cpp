// See metrics_http.h.
#include "daemon/metrics_http.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "daemon/model.h"

namespace fr::daemon {

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

MetricsServer::~MetricsServer() { stop(); }

bool MetricsServer::start(const std::string& addr, Render render, std::string* error) {
  std::string host;
  int port = 0;
  if (!split_host_port(addr, &host, &port)) {
    *error = "bad metrics address '" + addr + "' (want HOST:PORT)";
    return false;
  }
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res) != 0 || !res) {
    *error = "cannot resolve metrics address '" + addr + "'";
    return false;
  }
  int fd = ::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  if (fd >= 0) ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (fd < 0 || ::bind(fd, res->ai_addr, res->ai_addrlen) != 0 || ::listen(fd, 64) != 0) {
    *error = "metrics listen on " + addr + ": " + std::strerror(errno);
    if (fd >= 0) ::close(fd);
    freeaddrinfo(res);
    return false;
  }
  freeaddrinfo(res);
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
  port_ = ss.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port)
                                   : ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  if (::pipe2(wake_, O_CLOEXEC) != 0) {
    ::close(fd);
    *error = "pipe: " + std::string(std::strerror(errno));
    return false;
  }
  listen_fd_ = fd;
  render_ = std::move(render);
  thread_ = std::thread([this] { loop(); });
  return true;
}

void MetricsServer::stop() {
  if (!thread_.joinable()) return;
  char c = 0;
  (void)!::write(wake_[1], &c, 1);
  thread_.join();
  ::close(listen_fd_);
  ::close(wake_[0]);
  ::close(wake_[1]);
  listen_fd_ = wake_[0] = wake_[1] = -1;
}

void MetricsServer::loop() {
  for (;;) {
    pollfd p[2] = {{listen_fd_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
    if (::poll(p, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (p[1].revents) return;
    if (!(p[0].revents & POLLIN)) continue;
    int c = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (c < 0) continue;
    serve(c);
    ::close(c);
  }
}

void MetricsServer::serve(int fd) {
  // Read the request head: at most 8 KiB, at most one second in all.
  std::string req;
  int64_t deadline = mono_ns() + 1'000'000'000;
  while (req.find("\r\n\r\n") == std::string::npos && req.find("\n\n") == std::string::npos) {
    int64_t left_ms = (deadline - mono_ns()) / 1'000'000;
    if (left_ms <= 0 || req.size() > 8192) return;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, int(left_ms)) <= 0) return;
    char buf[1024];
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) return;
    req.append(buf, size_t(n));
  }
  std::string status = "200 OK", type = "text/plain; version=0.0.4", body;
  if (req.rfind("GET /metrics ", 0) == 0 || req.rfind("GET /metrics?", 0) == 0) {
    body = render_();
  } else if (req.rfind("GET / ", 0) == 0) {
    body = "frd coordinator: metrics at /metrics\n";
  } else {
    status = "404 Not Found";
    body = "not found\n";
  }
  std::string resp = "HTTP/1.0 " + status + "\r\nContent-Type: " + type +
                     "\r\nContent-Length: " + std::to_string(body.size()) +
                     "\r\nConnection: close\r\n\r\n" + body;
  size_t off = 0;
  while (off < resp.size()) {
    int64_t left_ms = (deadline - mono_ns()) / 1'000'000;
    if (left_ms <= 0) return;
    pollfd p{fd, POLLOUT, 0};
    if (::poll(&p, 1, int(left_ms)) <= 0) return;
    ssize_t n = ::send(fd, resp.data() + off, resp.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return;
    off += size_t(n);
  }
}

}  // namespace fr::daemon
