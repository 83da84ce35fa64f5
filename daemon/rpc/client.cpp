// See client.h.
#include "daemon/rpc/client.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <absl/synchronization/mutex.h>
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
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

std::string default_token_file() {
  if (const char* f = std::getenv("FR_TOKEN_FILE"); f && *f) return f;
  const char* run = std::getenv("XDG_RUNTIME_DIR");
  std::string base = run && *run ? run : "/tmp";
  return base + "/frd-" + std::to_string(::getuid()) + "/token";
}

bool read_token_file(const std::string& path, std::string* token, bool* loose, std::string* error) {
  int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    *error = "cannot read token file " + path + ": " + std::strerror(errno);
    return false;
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > 4096) {
    ::close(fd);
    *error = "token file " + path + " is not a small regular file";
    return false;
  }
  if (st.st_uid != ::getuid() && ::getuid() != 0) {
    ::close(fd);
    *error =
        "token file " + path + " belongs to another user (uid " + std::to_string(st.st_uid) + ")";
    return false;
  }
  *loose = (st.st_mode & 077) != 0;
  std::string text(size_t(st.st_size), '\0');
  ssize_t n = ::read(fd, text.data(), text.size());
  ::close(fd);
  text.resize(n > 0 ? size_t(n) : 0);
  while (!text.empty() && isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
  if (text.empty()) {
    *error = "token file " + path + " is empty";
    return false;
  }
  *token = text;
  return true;
}

bool ensure_token_file(const std::string& path, std::string* token, bool* created,
                       std::string* error) {
  *created = false;
  size_t slash = path.rfind('/');
  std::string dir = slash == std::string::npos ? "." : path.substr(0, slash);
  if (!dir.empty() && ::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    *error = "cannot create " + dir + ": " + std::strerror(errno);
    return false;
  }
  // The directory must be ours and closed to others: in /tmp anyone could have made it first.
  struct stat st;
  if (::lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || (st.st_uid != ::getuid()) ||
      (st.st_mode & 022) != 0) {
    *error = dir + " must be a directory of this user that others cannot write (mode 0700)";
    return false;
  }
  bool loose = false;
  if (::access(path.c_str(), F_OK) == 0) return read_token_file(path, token, &loose, error);
  std::random_device rd;
  std::string t;
  char b[9];
  for (int i = 0; i < 8; ++i) {
    std::snprintf(b, sizeof b, "%08x", rd());
    t += b;
  }
  // Written whole under a temporary name, then linked into place: two coordinators starting at
  // once agree on the one that got there first.
  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    *error = "cannot create " + tmp + ": " + std::strerror(errno);
    return false;
  }
  std::string text = t + "\n";
  bool ok = ::write(fd, text.data(), text.size()) == ssize_t(text.size()) && ::fsync(fd) == 0;
  ::close(fd);
  if (ok && ::link(tmp.c_str(), path.c_str()) == 0) {
    ::unlink(tmp.c_str());
    *created = true;
    *token = t;
    return true;
  }
  int e = errno;
  ::unlink(tmp.c_str());
  if (ok && e == EEXIST) return read_token_file(path, token, &loose, error);
  *error = "cannot write " + path + ": " + std::strerror(e);
  return false;
}

void setup_grpc_process() { absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore); }

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
  std::string token = opts.token, error;
  bool loose = false;
  if (token.empty() && !opts.token_file.empty() &&
      !read_token_file(opts.token_file, &token, &loose, &error))
    token.clear();
  if (!token.empty()) ctx->AddMetadata("authorization", "Bearer " + token);
}

std::string status_text(const grpc::Status& st, const ClientOptions& opts) {
  if (st.error_code() != grpc::StatusCode::UNAUTHENTICATED) return st.error_message();
  const std::string file = !opts.token_from.empty() ? opts.token_from : opts.token_file;
  std::string token, unread;
  const bool sent = !opts.token.empty() ||
                    (!opts.token_file.empty() &&
                     read_text_file(opts.token_file, &token, &unread, true) && !token.empty());
  if (!sent)
    return "UNAUTHENTICATED: no token sent" +
           (file.empty() ? std::string(" (--insecure)") : " (no token file at " + file + ")") +
           "; give the coordinator's --token-file";
  return "UNAUTHENTICATED: wrong token (file " + file +
         "); the coordinator's token file holds another";
}

bool fetch_status(const ClientOptions& opts, nlohmann::json* out, std::string* error,
                  size_t node_offset, size_t node_limit, bool summary) {
  auto stub = fr::v1::Coordinator::NewStub(make_channel(opts));
  grpc::ClientContext ctx;
  add_auth(&ctx, opts);
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  fr::v1::StatusRequest req;
  req.set_node_offset(uint32_t(std::min<size_t>(node_offset, UINT32_MAX)));
  req.set_node_limit(uint32_t(std::min<size_t>(node_limit, UINT32_MAX)));
  req.set_summary(summary);
  fr::v1::StatusReply rep;
  grpc::Status st = stub->Status(&ctx, req, &rep);
  if (!st.ok()) {
    *error = opts.address + ": " + status_text(st, opts);
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
    *error = opts.address + ": " + status_text(st, opts);
    return false;
  }
  if (!rep.ok()) {
    *error = rep.error();
    return false;
  }
  *incident_id = rep.incident_id();
  return true;
}

std::string render_status(const CoordinatorStatus& s) {
  std::ostringstream o;
  const StatusRanks& r = s.ranks;
  o << "job " << s.job_id << "  ranks: " << r.alive << " alive, " << r.dead << " dead, " << r.known
    << " known";
  if (r.expected > 0) o << " of " << r.expected << " expected";
  o << "\n";
  // What fr sees: the processes, recording NCCL or NIXL calls or not (an older coordinator sends
  // none).
  if (s.processes && !s.processes->summary.empty())
    o << "processes: " << s.processes->summary << "\n";
  for (const auto& n : s.nodes) {
    o << "node " << n.name << " (" << n.host << "): "
      << (n.lost        ? "LOST"
          : n.connected ? "connected"
                        : "away")
      << ", heartbeat " << double(n.heartbeat_age_ns) / 1e9 << " s ago, clock offset "
      << n.clock_offset_ns / 1000 << " us\n";
    for (const auto& p : n.processes) {
      o << "  rank " << p.rank << " pid " << p.pid << " "
        << (p.alive            ? "alive"
            : p.exited_cleanly ? "exited"
                               : "DEAD");
      for (const auto& c : p.comms) {
        std::string label = c.name.empty() ? status_hex_id(c.id).substr(0, 8) : c.name;
        o << "  [" << label << " coll " << c.coll_seq << " gpu " << c.completed << "/"
          << c.enqueued;
        const double age = double(c.oldest_in_flight_ns) / 1e9;
        if (age > 0) o << " oldest " << age << " s";
        o << "]";
      }
      o << "\n";
    }
  }
  if (s.page.next_offset)
    o << "... more nodes: frd status --offset " << *s.page.next_offset << "\n";
  for (const auto& i : s.incidents) {
    o << "incident " << i.id << " " << i.kind << " " << i.state << ": " << i.reason;
    if (!i.verdict.empty()) o << " -> " << i.verdict << ": " << i.summary;
    o << " (" << i.dir << ")\n";
  }
  return o.str();
}

std::string render_status(const nlohmann::json& s) {
  return render_status(s.get<CoordinatorStatus>());
}

}  // namespace fr::daemon
