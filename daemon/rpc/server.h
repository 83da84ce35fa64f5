// The coordinator's gRPC service: a thin adapter over CoordinatorState. It uses gRPC's callback
// API (one reactor object per stream, no thread per stream); a ticker thread runs detection and
// deadlines, one assembler thread writes and analyses dump sets, so neither slows the streams,
// an applier thread applies heartbeats to the state, so that gRPC's few callback threads only
// read and write, and eight fan-out threads send an incident's dump requests (one shared message)
// to slices of the streams outside the state's lock, ahead of heartbeat work, so that asking 16k
// nodes neither waits on one thread nor behind their heartbeats. Every call is checked against
// the shared token when one is set. The HTTP pages (--metrics-listen) are served by
// daemon/http/coordinator_pages.h, which the server answers with copies of the state.
//
// Stopping never waits on analysis I/O for long: an analysis stuck in a read (a swapped file on
// a broken shared file system) is left behind after a short wait, with nothing of the server it
// could touch. Listen addresses are judged by what they resolve to.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "daemon/logic/assembly.h"
#include "daemon/logic/coordinator.h"

namespace fr::daemon {

struct ServerOptions {
  std::string listen = "127.0.0.1:7470";
  std::string port_file;  // written atomically with the bound port once serving
  std::string token;      // required from every peer when set
  std::string tls_cert;   // PEM contents: TLS when set
  std::string tls_key;
  std::string tls_client_ca;   // PEM contents: mutual TLS when set
  std::string metrics_listen;  // HOST:PORT for Prometheus text; empty: none
  // With a token, the HTTP side asks for it on loopback too (another local user must not read
  // the job's status and incidents), unless this says loopback is trusted.
  bool http_trust_loopback = false;
  std::string on_verdict;  // shell command run for every dump set written (hook.h)
  int64_t on_verdict_timeout_ns = 300'000'000'000;
  UploadLimits limits;
  int max_message_bytes = 4 << 20;
  int max_uploads = 64;                      // concurrent uploads (past a valid header)
  int max_waiting_uploads = 1024;            // upload streams without a header yet, in all
  int max_waiting_uploads_per_peer = 256;    // ... and from one peer host
  int64_t upload_header_ns = 5'000'000'000;  // a header must come this soon
  int64_t upload_idle_ns = 30'000'000'000;
  int64_t stop_wait_ns = 2'000'000'000;  // how long stopping waits for a running analysis
  bool quiet = false;                    // no log lines on stderr (benchmarks)
};

// Whether a listen address is loopback only: every address its host resolves to is in
// 127.0.0.0/8 or ::1 (a name is resolved, not read as text). False when it does not resolve.
bool is_loopback_address(const std::string& addr);

class CoordinatorServer {
 public:
  CoordinatorServer(CoordinatorConfig cfg, ServerOptions opts);
  ~CoordinatorServer();

  // Binds, starts the threads and writes the port file. False with *error set.
  bool start(std::string* error);
  int port() const;
  int metrics_port() const;
  // Blocks until shutdown() (from another thread or a signal handler's helper).
  void wait();
  void shutdown();

  nlohmann::json status();

  struct Impl;  // server_impl.h: shared by the server's units (server*.cpp)

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace fr::daemon
