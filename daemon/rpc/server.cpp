// See server.h. Starting and stopping the coordinator server: the listeners' rules (loopback,
// token, TLS), the gRPC listener, the HTTP listener with the pages (daemon/http/coordinator_pages.h)
// and what they ask of the state, and the threads; the reactors are in
// server_streams.cpp and server_node_stream.h, the fan-out and heartbeat threads in
// server_threads.cpp, the threads that write in server_writers.cpp (server_impl.h).
#include "daemon/rpc/server.h"
#include "daemon/rpc/server_impl.h"
#include "common/files.h"
#include "common/prometheus.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>

#include <grpcpp/grpcpp.h>
#include <grpcpp/security/server_credentials.h>

#include <thread>
#include <utility>

#include "daemon/base/logger.h"
#include "daemon/http/metrics_http.h"

namespace fr::daemon {

bool is_loopback_address(const std::string& addr) {
  std::string host;
  int port = 0;
  if (!split_host_port(addr, &host, &port)) return false;
  // What the name resolves to, not how it is spelled: every address must be loopback.
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0 || !res) return false;
  bool all = true;
  for (addrinfo* a = res; a; a = a->ai_next) {
    if (a->ai_family == AF_INET) {
      auto* in = reinterpret_cast<sockaddr_in*>(a->ai_addr);
      all &= (ntohl(in->sin_addr.s_addr) >> 24) == 127;
    } else if (a->ai_family == AF_INET6) {
      auto* in6 = reinterpret_cast<sockaddr_in6*>(a->ai_addr);
      all &= IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr) != 0;
    } else {
      all = false;
    }
  }
  freeaddrinfo(res);
  return all;
}

CoordinatorStatus CoordinatorServer::Impl::status(const StatusQuery& query) {
  std::lock_guard<RankedMutex> lk(mu);
  return state.status_snapshot(mono_ns(), query);
}

std::optional<StatusIncident> CoordinatorServer::Impl::incident(const std::string& id) {
  std::lock_guard<RankedMutex> lk(mu);
  return state.incident_status(id);
}

std::string CoordinatorServer::Impl::metrics_text() {
  std::string text;
  double fanout;
  uint64_t replaced;
  {
    std::lock_guard<RankedMutex> lk(mu);
    text = state.metrics(mono_ns());
    std::lock_guard<RankedMutex> ql(queue_mu);
    fanout = last_fanout_seconds;
    replaced = heartbeats_replaced;
  }
  PrometheusText o;
  // std::to_string's six decimals, as this line always printed them.
  o.gauge("frd_fanout_seconds",
          "Last incident: from listing its dump requests to handing the last one to its node's "
          "stream.",
          std::to_string(fanout));
  o.counter("frd_heartbeats_replaced_total",
            "Heartbeats replaced by a newer one from the same node before they were applied (the "
            "coordinator short of CPU).",
            replaced);
  o.counter("frd_unknown_messages_total",
            "Node messages of a kind this coordinator does not know (a newer node's), skipped.",
            unknown_messages.load(std::memory_order_relaxed));
  return text + o.str();
}

CoordinatorServer::CoordinatorServer(CoordinatorConfig cfg, ServerOptions opts)
    : impl_(std::make_unique<Impl>(std::move(cfg), std::move(opts))) {}

CoordinatorServer::~CoordinatorServer() { shutdown(); }

int CoordinatorServer::port() const { return impl_->port; }
int CoordinatorServer::metrics_port() const { return impl_->metrics.port(); }

namespace {

// Who may listen where: off loopback, gRPC and the HTTP pages need the token (or a client
// certificate); with a token the HTTP pages ask for it on loopback too (http_trust_loopback
// aside); the HTTP listener speaks TLS when gRPC does.
bool check_listeners(CoordinatorServer::Impl& m, HttpSecurity* http_sec, std::string* error) {
  std::string host;
  int port = 0;
  for (const auto& [flag, addr] :
       {std::pair<const char*, const std::string&>{"--listen", m.opts.listen},
        {"--metrics-listen", m.opts.metrics_listen}})
    if (!addr.empty() && !split_host_port(addr, &host, &port)) {
      *error = std::string(flag) + " " + addr + ": not HOST:PORT with a port from 0 to 65535";
      return false;
    }
  const bool loopback = is_loopback_address(m.opts.listen);
  if (!loopback && m.opts.token.empty() && m.opts.tls_client_ca.empty()) {
    *error = "listening on " + m.opts.listen +
             " (not loopback only, by what it resolves to) needs a shared token (--token-file)";
    return false;
  }
  if (!loopback && !m.opts.token.empty() && m.opts.tls_cert.empty())
    m.log("frd coordinator: the token travels in cleartext on " + m.opts.listen +
              " (not loopback) without TLS; anyone on the path can read it (use --tls-cert)",
          LogLevel::kWarn);
  // The HTTP listener (metrics, pages, status JSON) follows the gRPC listener's rules: off
  // loopback it asks for the token (or a client certificate), and it speaks TLS when gRPC does.
  *http_sec = HttpSecurity{"", m.opts.tls_cert, m.opts.tls_key, m.opts.tls_client_ca};
  // With a token, loopback asks for it too: on a shared login node any local user reaches it.
  if (!m.opts.http_trust_loopback) http_sec->token = m.opts.token;
  if (!m.opts.metrics_listen.empty() && !is_loopback_address(m.opts.metrics_listen)) {
    if (m.opts.token.empty() && m.opts.tls_client_ca.empty()) {
      *error =
          "--metrics-listen " + m.opts.metrics_listen +
          " (not loopback only) serves the job's status and incidents: it needs a shared token "
          "(--token-file) or mutual TLS";
      return false;
    }
    http_sec->token = m.opts.token;
    if (m.opts.tls_cert.empty())
      m.log("frd coordinator: the token travels in cleartext to the pages and metrics on " +
                m.opts.metrics_listen + " (not loopback) without TLS (use --tls-cert)",
            LogLevel::kWarn);
  }
  if (m.opts.tls_cert.empty() != m.opts.tls_key.empty()) {
    *error = "TLS needs both a certificate and a key";
    return false;
  }
  return true;
}

// The gRPC listener, with its keepalive and resource limits.
bool start_grpc(CoordinatorServer::Impl& m, std::string* error) {
  std::shared_ptr<grpc::ServerCredentials> creds;
  if (!m.opts.tls_cert.empty()) {
    grpc::SslServerCredentialsOptions ssl(
        m.opts.tls_client_ca.empty() ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                                     : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
    ssl.pem_key_cert_pairs.push_back({m.opts.tls_key, m.opts.tls_cert});
    ssl.pem_root_certs = m.opts.tls_client_ca;
    creds = grpc::SslServerCredentials(ssl);
  } else {
    creds = grpc::InsecureServerCredentials();
  }
  m.service = make_service(&m);
  grpc::ServerBuilder b;
  b.SetMaxReceiveMessageSize(m.opts.max_message_bytes);
  b.SetMaxSendMessageSize(16 << 20);
  b.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 20000);
  b.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10000);
  b.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  b.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 5000);
  b.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  b.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, 4096);
  // A connection that has not finished its handshake in 10 s is dropped (gRPC's default is 120 s),
  // so silent sockets do not pile up on the listener.
  b.AddChannelArgument(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS, 10000);
  grpc::ResourceQuota quota("frd-coordinator");
  quota.Resize(size_t(1) << 30);
  b.SetResourceQuota(quota);
  b.AddListeningPort(m.opts.listen, creds, &m.port);
  b.RegisterService(m.service.get());
  m.server = b.BuildAndStart();
  if (!m.server || m.port == 0) {
    *error = "cannot listen on " + m.opts.listen;
    m.server.reset();
    return false;
  }
  return true;
}

}  // namespace

bool CoordinatorServer::start(std::string* error) {
  Impl& m = *impl_;
  HttpSecurity http_sec;
  if (!check_listeners(m, &http_sec, error)) return false;
  if (!fr::files::make_dirs(m.cfg.dump_dir, error)) return false;
  if (!start_grpc(m, error)) return false;
  m.pages.add_routes(&m.metrics);
  if (!m.opts.metrics_listen.empty() && !m.metrics.start(m.opts.metrics_listen, http_sec, error)) {
    m.server->Shutdown();
    m.server.reset();
    return false;
  }
  m.ticker = std::thread([&m] { m.ticker_loop(); });
  m.assembler = std::thread([&m] { m.assembler_loop(); });
  m.placed_checker = std::thread([&m] { m.placed_loop(); });
  m.persister = std::thread([&m] { m.persist_loop(); });
  // Eight, whatever the cores: where the coordinator is short of CPU the scheduler shares it out
  // per thread, and the dump requests should get most of it ahead of gRPC's reading threads.
  constexpr unsigned fanout = 8;
  for (unsigned i = 0; i < fanout; ++i) {
    m.fanout_threads.emplace_back([&m] { m.fanout_loop(); });
    pthread_setname_np(m.fanout_threads.back().native_handle(), "frd-fanout");
  }
  m.applier = std::thread([&m] { m.applier_loop(); });
  pthread_setname_np(m.applier.native_handle(), "frd-applier");
  m.started = true;
  if (!m.opts.port_file.empty() &&
      !fr::files::write_atomic(m.opts.port_file, std::to_string(m.port) + "\n", error)) {
    shutdown();
    return false;
  }
  return true;
}

void CoordinatorServer::wait() {
  if (impl_->server) impl_->server->Wait();
}

void CoordinatorServer::shutdown() {
  Impl& m = *impl_;
  if (!m.started) return;
  m.started = false;
  m.server->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(500));
  {
    std::lock_guard<RankedMutex> lk(m.mu);
    m.stopping = true;
  }
  m.tick_cv.notify_all();
  m.assemble_cv.notify_all();
  m.placed_cv.notify_all();
  m.persist_cv.notify_all();
  m.ticker.join();
  m.assembler.join();
  m.placed_checker.join();
  m.persister.join();
  {
    std::lock_guard<RankedMutex> ql(m.queue_mu);
    m.fanout_stopping = true;
  }
  m.fanout_cv.notify_all();
  for (auto& t : m.fanout_threads) t.join();
  m.fanout_threads.clear();
  {
    std::lock_guard<RankedMutex> ql(m.queue_mu);
    m.hb_stopping = true;
  }
  m.hb_cv.notify_all();
  m.applier.join();
  m.resume_reads(false);  // releases the streams still pinned for a deferred read
  m.metrics.stop();
}

nlohmann::json CoordinatorServer::status() {
  std::lock_guard<RankedMutex> lk(impl_->mu);
  return impl_->state.status(mono_ns());
}

}  // namespace fr::daemon
