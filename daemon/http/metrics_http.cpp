// See metrics_http.h.
#include "daemon/http/metrics_http.h"

#include <netdb.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "daemon/base/names.h"

namespace fr::daemon {

namespace {
constexpr const char* kCookie = "fr_token";

// The token a request carries: the Authorization header, else the cookie.
bool has_token(const HttpHead& req, const std::string& token) {
  const std::string auth = req.header("authorization");
  if (!auth.empty() && bearer_matches(auth, token)) return true;
  const std::string cookies = req.header("cookie");
  for (size_t pos = 0; pos < cookies.size();) {
    size_t end = cookies.find(';', pos);
    if (end == std::string::npos) end = cookies.size();
    std::string c = cookies.substr(pos, end - pos);
    while (!c.empty() && c.front() == ' ') c.erase(0, 1);
    const std::string key = std::string(kCookie) + "=";
    if (c.compare(0, key.size(), key) == 0 && equal_secret(c.substr(key.size()), token))
      return true;
    pos = end + 1;
  }
  return false;
}

// Loads PEM text into the server's TLS context: certificate, key, and the CA client
// certificates must chain to (then required).
bool setup_tls(SSL_CTX& ctx, const HttpSecurity& sec) {
  auto bio = [](const std::string& pem) { return BIO_new_mem_buf(pem.data(), int(pem.size())); };
  BIO* cb = bio(sec.tls_cert);
  X509* cert = PEM_read_bio_X509(cb, nullptr, nullptr, nullptr);
  BIO_free(cb);
  BIO* kb = bio(sec.tls_key);
  EVP_PKEY* key = PEM_read_bio_PrivateKey(kb, nullptr, nullptr, nullptr);
  BIO_free(kb);
  bool ok = cert && key && SSL_CTX_use_certificate(&ctx, cert) == 1 &&
            SSL_CTX_use_PrivateKey(&ctx, key) == 1 && SSL_CTX_check_private_key(&ctx) == 1;
  X509_free(cert);
  EVP_PKEY_free(key);
  if (ok && !sec.tls_client_ca.empty()) {
    X509_STORE* store = SSL_CTX_get_cert_store(&ctx);
    BIO* ab = bio(sec.tls_client_ca);
    int added = 0;
    while (X509* ca = PEM_read_bio_X509(ab, nullptr, nullptr, nullptr)) {
      added += X509_STORE_add_cert(store, ca) == 1;
      X509_free(ca);
    }
    BIO_free(ab);
    ERR_clear_error();  // the end of the PEM list reads as an error
    ok = added > 0;
    SSL_CTX_set_verify(&ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  }
  return ok;
}

// A TLS context of our own settings around the PEM text: TLS 1.2 at least, no compression,
// no renegotiation, client certificate chains of 32 KiB at most. Null when the certificate, key or client CA is not usable.
SSL_CTX* make_tls_context(const HttpSecurity& sec) {
  SSL_CTX* ctx = SSL_CTX_new(TLS_server_method());
  if (!ctx) return nullptr;
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  SSL_CTX_set_options(ctx, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION);
  // A client's certificate chain is held while it is checked: 32 KiB (not OpenSSL's 100 KiB)
  // bounds what one handshake can make the listener keep.
  SSL_CTX_set_max_cert_list(ctx, 32 << 10);
  if (!setup_tls(*ctx, sec)) {
    SSL_CTX_free(ctx);
    ERR_clear_error();
    return nullptr;
  }
  return ctx;
}

// A listening, non-blocking socket on host:port (port 0: any); -1 with *error set.
int listen_socket(const std::string& host, int port, int* bound, std::string* error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  if (getaddrinfo(host.c_str(), service.c_str(), &hints, &res) != 0 || !res) {
    *error = "cannot listen for HTTP on " + host + ":" + service + " (the name does not resolve)";
    return -1;
  }
  int fd = -1;
  for (addrinfo* a = res; a && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    int yes = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 || listen(fd, SOMAXCONN) != 0) {
      *error = "cannot listen for HTTP on " + host + ":" + service + ": " + strerror(errno);
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(res);
  if (fd < 0) return -1;
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
  *bound = ss.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6&>(ss).sin6_port)
                                    : ntohs(reinterpret_cast<sockaddr_in&>(ss).sin_port);
  return fd;
}

// One segment of letters, digits and - _ . (what an incident id is made of).
bool plain_segment(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-')
      return false;
  return true;
}

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
  std::unique_ptr<HttpFront> front;
  SSL_CTX* tls = nullptr;
  HttpLimits limits;
  std::string token;
};

HttpServer::HttpServer() : impl_(std::make_unique<Impl>()) {}

HttpServer::~HttpServer() {
  stop();
  if (impl_->tls) SSL_CTX_free(impl_->tls);
}

void HttpServer::get(const std::string& path, Handler handler) {
  routes_[path] = std::move(handler);
}

void HttpServer::get_under(const std::string& prefix, Handler handler) {
  prefix_routes_[prefix] = std::move(handler);
}

void HttpServer::set_limits(const HttpLimits& limits) { impl_->limits = limits; }

HttpStats HttpServer::stats() const { return impl_->front ? impl_->front->stats() : HttpStats{}; }

// The route, then the token (a route unknown is 404 with or without it), then the handler.
HttpReply HttpServer::answer(const HttpHead& head) const {
  HttpReply res;
  const Handler* handler = nullptr;
  Request r{head.path, "", head.query};
  if (auto it = routes_.find(head.path); it != routes_.end()) handler = &it->second;
  for (const auto& [prefix, h] : prefix_routes_) {
    if (handler) break;
    if (head.path.compare(0, prefix.size(), prefix) == 0 &&
        plain_segment(head.path.substr(prefix.size()))) {
      handler = &h;
      r.tail = head.path.substr(prefix.size());
    }
  }
  if (!handler) {
    res.status = 404;
    res.body = "not found\n";
    return res;
  }
  const std::string& token = impl_->token;
  if (auto t = head.query.find("token");
      !token.empty() && t != head.query.end() && equal_secret(t->second, token)) {
    // A browser's way in: the token from the link becomes a cookie, and leaves the address bar.
    res.status = 303;
    // Over TLS the cookie is Secure: a browser never sends it back over plain HTTP.
    res.headers = {
        {"Set-Cookie", std::string(kCookie) + "=" + token + "; Path=/; HttpOnly; SameSite=Strict" +
                           (impl_->tls != nullptr ? "; Secure" : "")},
        {"Location", head.path}};
    return res;
  }
  res.headers.emplace_back("Cache-Control", "no-store");
  if (!token.empty() && !has_token(head, token)) {
    res.status = 401;
    res.headers.emplace_back("WWW-Authenticate", "Bearer realm=\"frd\"");
    res.body =
        "this listener needs the coordinator's token: send 'Authorization: Bearer TOKEN', "
        "or open the page once with ?token=TOKEN\n";
    return res;
  }
  Response out = (*handler)(r);
  res.status = out.status;
  res.content_type = out.content_type;
  res.body = std::move(out.body);
  return res;
}

bool HttpServer::start(const std::string& addr, const HttpSecurity& sec, std::string* error) {
  std::string host;
  int port = 0;
  if (!split_host_port(addr, &host, &port)) {
    *error = "bad HTTP address '" + addr + "' (want HOST:PORT, a port from 0 to 65535)";
    return false;
  }
  if (!sec.tls_cert.empty()) {
    impl_->tls = make_tls_context(sec);
    if (!impl_->tls) {
      *error = "HTTP listener: the TLS certificate, key or client CA is not usable";
      return false;
    }
  }
  impl_->token = sec.token;
  int bound = 0;
  const int fd = listen_socket(host, port, &bound, error);
  if (fd < 0) return false;
  impl_->front =
      std::make_unique<HttpFront>(impl_->limits, [this](const HttpHead& h) { return answer(h); });
  if (!impl_->front->start(fd, impl_->tls, error)) {
    impl_->front.reset();
    close(fd);
    return false;
  }
  port_ = bound;
  return true;
}

void HttpServer::stop() {
  if (impl_->front) impl_->front->stop();
}

}  // namespace fr::daemon
