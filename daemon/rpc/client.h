// The client side of the protocol shared by `frd node`, `frd status` and `frd dump`: channels
// (plain on loopback, TLS or mutual TLS when given certificates), the shared token, and the two
// one-shot calls.
//
// The token: without --token-file and without --insecure, every role uses the per-user default
// file ${FR_TOKEN_FILE:-${XDG_RUNTIME_DIR:-/tmp}/frd-<uid>/token} (directory 0700, file 0600).
// The coordinator creates it with a random token when absent and reuses it when present; clients
// read it at each call, so a node started before its coordinator picks it up once it exists.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "daemon/base/status.h"

namespace grpc {
class Channel;
class ClientContext;
class Status;
}  // namespace grpc

namespace fr::daemon {

struct ClientOptions {
  std::string address = "127.0.0.1:7470";
  std::string token;       // sent as "authorization: Bearer <token>" when set
  std::string token_file;  // when `token` is empty: read at each call (absent: no token)
  std::string token_from;  // the file `token` was read from, for messages (empty: none)
  std::string tls_ca;      // PEM contents; TLS when set
  std::string tls_cert;    // PEM contents of the client certificate (mutual TLS)
  std::string tls_key;
};

// Reads a whole small file (token, certificates). Trailing whitespace is cut for tokens.
bool read_text_file(const std::string& path, std::string* out, std::string* error,
                    bool trim = false);

// The per-user default token file (see above).
std::string default_token_file();
// Reads a token file: a regular file owned by this user (not a link, FIFO or device), not empty.
// *loose is set when others may read it (group or other bits in its mode).
bool read_token_file(const std::string& path, std::string* token, bool* loose, std::string* error);
// The coordinator's default: creates the directory (0700, ours) and a random token (0600) when
// absent, else reads it. *created says which.
bool ensure_token_file(const std::string& path, std::string* token, bool* created,
                       std::string* error);

// Process-wide settings for a process that runs gRPC, called first thing in main(): gRPC's locks
// (absl::Mutex) skip the lock-order graph a debug build of absl keeps on every lock and on every
// mutex destroyed. That graph is one global lock that every gRPC thread takes, and a debugging
// aid for absl's own users; the daemon's own locks are std::mutex, which the sanitizer builds
// check.
void setup_grpc_process();

std::shared_ptr<grpc::Channel> make_channel(const ClientOptions& opts);
void add_auth(grpc::ClientContext* ctx, const ClientOptions& opts);
// A failed call's status in one line. A refused token names the file it came from:
// "UNAUTHENTICATED: wrong token (file /run/user/0/frd-0/token)", or says that none was sent.
std::string status_text(const grpc::Status& status, const ClientOptions& opts);

// One page of status: nodes from `node_offset`, at most `node_limit` (0: the coordinator's
// default page); `summary` leaves out per-process detail.
bool fetch_status(const ClientOptions& opts, nlohmann::json* out, std::string* error,
                  size_t node_offset = 0, size_t node_limit = 0, bool summary = false);
bool trigger_dump(const ClientOptions& opts, const std::string& reason, std::string* incident_id,
                  std::string* error);

// Human view of the status (`frd status`), and of a frd-status/1 document read into it.
std::string render_status(const CoordinatorStatus& status);
std::string render_status(const nlohmann::json& status);

}  // namespace fr::daemon
