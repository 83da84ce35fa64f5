// See metrics_http.h.
#include "daemon/metrics_http.h"

#include <httplib.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>

#include <chrono>
#include <cstdlib>

#include "daemon/names.h"

namespace fr::daemon {

namespace {
constexpr int kThreads = 16;          // connections served at once
constexpr time_t kTimeoutSec = 2;     // per read or write, and for an idle kept-alive connection
constexpr size_t kMaxRequest = 8192;  // request line and headers
constexpr const char* kCookie = "fr_token";

// The token a request carries: the Authorization header, else the cookie.
bool has_token(const httplib::Request& req, const std::string& token) {
  const std::string auth = req.get_header_value("Authorization");
  if (!auth.empty() && equal_secret(auth, "Bearer " + token)) return true;
  const std::string cookies = req.get_header_value("Cookie");
  for (size_t pos = 0; pos < cookies.size();) {
    size_t end = cookies.find(';', pos);
    if (end == std::string::npos) end = cookies.size();
    std::string c = cookies.substr(pos, end - pos);
    while (!c.empty() && c.front() == ' ') c.erase(0, 1);
    const std::string key = std::string(kCookie) + "=";
    if (c.compare(0, key.size(), key) == 0 && equal_secret(c.substr(key.size()), token)) return true;
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
  std::unique_ptr<httplib::Server> server;
};

HttpServer::HttpServer() : impl_(std::make_unique<Impl>()) {}

HttpServer::~HttpServer() { stop(); }

void HttpServer::get(const std::string& path, Handler handler) { routes_[path] = std::move(handler); }

void HttpServer::get_under(const std::string& prefix, Handler handler) {
  prefix_routes_[prefix] = std::move(handler);
}

bool HttpServer::start(const std::string& addr, const HttpSecurity& sec, std::string* error) {
  std::string host;
  int port = 0;
  if (!split_host_port(addr, &host, &port)) {
    *error = "bad HTTP address '" + addr + "' (want HOST:PORT)";
    return false;
  }
  if (sec.tls_cert.empty()) {
    impl_->server = std::make_unique<httplib::Server>();
  } else {
    bool tls_ok = false;
    impl_->server = std::make_unique<httplib::SSLServer>([&](SSL_CTX& ctx) {
      tls_ok = setup_tls(ctx, sec);
      return tls_ok;
    });
    if (!tls_ok || !impl_->server->is_valid()) {
      *error = "HTTP listener: the TLS certificate, key or client CA is not usable";
      impl_->server.reset();
      return false;
    }
  }
  auto& s = *impl_->server;
  s.new_task_queue = [] { return new httplib::ThreadPool(kThreads); };
  s.set_read_timeout(kTimeoutSec, 0);
  s.set_write_timeout(kTimeoutSec, 0);
  s.set_idle_interval(0, 100'000);
  s.set_keep_alive_timeout(kTimeoutSec);
  s.set_keep_alive_max_count(16);
  s.set_payload_max_length(kMaxRequest);
  const std::string token = sec.token;
  auto serve = [token](const Handler& h, Request r, const httplib::Request& req, httplib::Response& res) {
    if (!token.empty() && req.has_param("token") && equal_secret(req.get_param_value("token"), token)) {
      // A browser's way in: the token from the link becomes a cookie, and leaves the address bar.
      res.set_header("Set-Cookie", std::string(kCookie) + "=" + token + "; Path=/; HttpOnly; SameSite=Strict");
      res.set_redirect(req.path, 303);
      return;
    }
    res.set_header("Cache-Control", "no-store");
    if (!token.empty() && !has_token(req, token)) {
      res.status = 401;
      res.set_header("WWW-Authenticate", "Bearer realm=\"frd\"");
      res.set_content("this listener needs the coordinator's token: send 'Authorization: Bearer TOKEN', "
                      "or open the page once with ?token=TOKEN\n",
                      "text/plain; charset=utf-8");
      return;
    }
    for (const auto& [k, v] : req.params) r.query.emplace(k, v);
    Response out = h(r);
    res.status = out.status;
    res.set_content(out.body, out.content_type.c_str());
  };
  for (const auto& [path, handler] : routes_) {
    Handler h = handler;
    std::string p = path;
    s.Get(p, [serve, h, p](const httplib::Request& req, httplib::Response& res) { serve(h, {p, "", {}}, req, res); });
  }
  for (const auto& [prefix, handler] : prefix_routes_) {
    Handler h = handler;
    std::string p = prefix;
    // One segment of letters, digits and - _ . after the prefix; anything else is not found.
    s.Get(p + "([A-Za-z0-9._-]+)", [serve, h](const httplib::Request& req, httplib::Response& res) {
      serve(h, {req.path, req.matches[1].str(), {}}, req, res);
    });
  }
  s.set_error_handler([](const httplib::Request&, httplib::Response& res) {
    if (res.status == 404) res.set_content("not found\n", "text/plain; charset=utf-8");
  });
  port_ = port == 0 ? s.bind_to_any_port(host) : (s.bind_to_port(host, port) ? port : -1);
  if (port_ <= 0) {
    port_ = 0;
    *error = "cannot listen for HTTP on " + addr;
    impl_->server.reset();
    return false;
  }
  thread_ = std::thread([this] { impl_->server->listen_after_bind(); });
  // stop() only stops a server that runs: wait for it to.
  for (int i = 0; i < 500 && !s.is_running(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  return true;
}

void HttpServer::stop() {
  if (!thread_.joinable()) return;
  impl_->server->stop();
  thread_.join();
}

}  // namespace fr::daemon
