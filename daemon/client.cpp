// See client.h.
#include "daemon/client.h"

#include <grpcpp/grpcpp.h>

#include <fstream>
#include <sstream>

#include "fr/v1/frd.grpc.pb.h"

namespace fr::daemon {

bool read_text_file(const std::string& path, std::string* out, std::string* error, bool trim) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    *error = "cannot read " + path;
    return false;
  }
  std::ostringstream s;
  s << f.rdbuf();
  *out = s.str();
  if (out->size() > (1u << 20)) {
    *error = path + " is too large";
    return false;
  }
  if (trim)
    while (!out->empty() && isspace(static_cast<unsigned char>(out->back()))) out->pop_back();
  return true;
}

std::shared_ptr<grpc::Channel> make_channel(const ClientOptions& opts) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(8 << 20);
  args.SetMaxSendMessageSize(8 << 20);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 10000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5000);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
  std::shared_ptr<grpc::ChannelCredentials> creds;
  if (!opts.tls_ca.empty()) {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = opts.tls_ca;
    ssl.pem_cert_chain = opts.tls_cert;
    ssl.pem_private_key = opts.tls_key;
    creds = grpc::SslCredentials(ssl);
  } else {
    creds = grpc::InsecureChannelCredentials();
  }
  return grpc::CreateCustomChannel(opts.address, creds, args);
}

void add_auth(grpc::ClientContext* ctx, const ClientOptions& opts) {
  if (!opts.token.empty()) ctx->AddMetadata("authorization", "Bearer " + opts.token);
}

bool fetch_status(const ClientOptions& opts, nlohmann::json* out, std::string* error) {
  auto stub = fr::v1::Coordinator::NewStub(make_channel(opts));
  grpc::ClientContext ctx;
  add_auth(&ctx, opts);
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  fr::v1::StatusRequest req;
  fr::v1::StatusReply rep;
  grpc::Status st = stub->Status(&ctx, req, &rep);
  if (!st.ok()) {
    *error = opts.address + ": " + st.error_message();
    return false;
  }
  *out = nlohmann::json::parse(rep.json(), nullptr, false);
  if (out->is_discarded()) {
    *error = "the coordinator sent malformed status";
    return false;
  }
  return true;
}

bool trigger_dump(const ClientOptions& opts, const std::string& reason, std::string* incident_id,
                  std::string* error) {
  auto stub = fr::v1::Coordinator::NewStub(make_channel(opts));
  grpc::ClientContext ctx;
  add_auth(&ctx, opts);
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  fr::v1::TriggerRequest req;
  req.set_reason(reason);
  fr::v1::TriggerReply rep;
  grpc::Status st = stub->TriggerDump(&ctx, req, &rep);
  if (!st.ok()) {
    *error = opts.address + ": " + st.error_message();
    return false;
  }
  if (!rep.ok()) {
    *error = rep.error();
    return false;
  }
  *incident_id = rep.incident_id();
  return true;
}

std::string render_status(const nlohmann::json& s) {
  std::ostringstream o;
  auto str = [](const nlohmann::json& j, const char* k) {
    return j.contains(k) && j[k].is_string() ? j[k].get<std::string>() : std::string();
  };
  const auto& r = s.value("ranks", nlohmann::json::object());
  o << "job " << str(s, "job_id") << "  ranks: " << r.value("alive", 0) << " alive, "
    << r.value("dead", 0) << " dead, " << r.value("known", 0) << " known";
  if (r.value("expected", -1) > 0) o << " of " << r.value("expected", -1) << " expected";
  o << "\n";
  for (const auto& n : s.value("nodes", nlohmann::json::array())) {
    o << "node " << str(n, "name") << " (" << str(n, "host") << "): "
      << (n.value("lost", false) ? "LOST" : n.value("connected", false) ? "connected" : "away")
      << ", heartbeat " << n.value("heartbeat_age_s", 0.0) << " s ago, clock offset "
      << n.value("clock_offset_ns", 0) / 1000 << " us\n";
    for (const auto& p : n.value("processes", nlohmann::json::array())) {
      o << "  rank " << p.value("rank", -1) << " pid " << p.value("pid", 0) << " "
        << (p.value("alive", false) ? "alive" : p.value("exited_cleanly", false) ? "exited" : "DEAD");
      for (const auto& c : p.value("comms", nlohmann::json::array())) {
        std::string label = str(c, "name").empty() ? str(c, "id").substr(0, 8) : str(c, "name");
        o << "  [" << label << " coll " << c.value("coll_seq", 0) << " gpu "
          << c.value("completed", 0) << "/" << c.value("enqueued", 0);
        double age = c.value("oldest_in_flight_s", 0.0);
        if (age > 0) o << " oldest " << age << " s";
        o << "]";
      }
      o << "\n";
    }
  }
  for (const auto& i : s.value("incidents", nlohmann::json::array())) {
    o << "incident " << str(i, "id") << " " << str(i, "kind") << " " << str(i, "state") << ": "
      << str(i, "reason");
    if (!str(i, "verdict").empty()) o << " -> " << str(i, "verdict") << ": " << str(i, "summary");
    o << " (" << str(i, "dir") << ")\n";
  }
  return o.str();
}

}  // namespace fr::daemon
