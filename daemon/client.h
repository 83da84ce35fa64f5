// The client side of the protocol shared by `frd node`, `frd status` and `frd dump`: channels
// (plain on loopback, TLS or mutual TLS when given certificates), the shared token, and the two
// one-shot calls.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

namespace grpc {
class Channel;
class ClientContext;
}  // namespace grpc

namespace fr::daemon {

struct ClientOptions {
  std::string address = "127.0.0.1:7470";
  std::string token;     // sent as "authorization: Bearer <token>" when set
  std::string tls_ca;    // PEM contents; TLS when set
  std::string tls_cert;  // PEM contents of the client certificate (mutual TLS)
  std::string tls_key;
};

// Reads a whole small file (token, certificates). Trailing whitespace is cut for tokens.
bool read_text_file(const std::string& path, std::string* out, std::string* error,
                    bool trim = false);

std::shared_ptr<grpc::Channel> make_channel(const ClientOptions& opts);
void add_auth(grpc::ClientContext* ctx, const ClientOptions& opts);

bool fetch_status(const ClientOptions& opts, nlohmann::json* out, std::string* error);
bool trigger_dump(const ClientOptions& opts, const std::string& reason, std::string* incident_id,
                  std::string* error);

// Human view of a frd-status/1 document.
std::string render_status(const nlohmann::json& status);

}  // namespace fr::daemon
