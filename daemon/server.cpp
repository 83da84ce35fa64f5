// See server.h. Locking: Impl::mu guards the state, the stream and upload registries and the
// queues; each NodeStream has its own write lock, always taken after Impl::mu, never before, and
// so is the fan-out queue's lock. Fan-out threads take a stream's write lock alone.
#include "daemon/server.h"
#include "files/files.h"

#include <arpa/inet.h>
#include <malloc.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <grpcpp/grpcpp.h>
#include <grpcpp/security/server_credentials.h>

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "daemon/convert.h"
#include "daemon/hook.h"
#include "daemon/logger.h"
#include "daemon/metrics_http.h"
#include "daemon/names.h"
#include "daemon/web.h"
#include "fr/v1/frd.grpc.pb.h"

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

namespace {

using fr::v1::CoordinatorMessage;
using fr::v1::NodeMessage;
using fr::v1::UploadChunk;
using fr::v1::UploadReply;

class NodeStream;
class UploadStream;

}  // namespace

struct CoordinatorServer::Impl {
  CoordinatorConfig cfg;
  ServerOptions opts;

  std::mutex mu;
  std::condition_variable tick_cv, assemble_cv;
  bool poke = false;
  bool stopping = false;
  CoordinatorState state;
  std::map<uint64_t, NodeStream*> streams;
  std::set<UploadStream*> uploads;           // every upload stream, with a header or not
  size_t uploads_active = 0;                 // of those, past a valid header: the slots
  std::set<std::string> uploading;           // incident/node pairs with an upload in flight
  std::map<std::string, int> waiting_by_peer;  // streams without a header yet, by peer host
  std::deque<AssemblyJob> assembly_queue;
  // incident.json writes, in order, one pending entry per file (the latest contents).
  std::deque<std::pair<std::string, std::string>> persist_queue;
  std::condition_variable persist_cv;
  // Dumps nodes wrote into a shared dump dir, waiting for their files to be checked.
  struct PlacedCall {
    grpc::ServerUnaryReactor* reactor;
    DumpHeader header;
    UploadReply* reply;
    PeerAuth auth;
  };
  std::deque<PlacedCall> placed_queue;
  std::condition_variable placed_cv;

  // Dump requests go out from a few fan-out threads, in slices of streams, outside `mu`: a
  // fan-out to every node is neither serialized on one thread nor holding up the heartbeats.
  struct FanoutSlice {
    std::shared_ptr<const CoordinatorMessage> message;
    std::vector<NodeStream*> streams;        // pinned: they stay alive until sent to
  };
  std::mutex fanout_mu;
  std::condition_variable fanout_cv;
  std::deque<FanoutSlice> fanout_queue;
  bool fanout_stopping = false;
  std::vector<std::thread> fanout_threads;
  // Per incident being sent: when its requests were listed, slices left, streams in all.
  struct FanoutRound {
    int64_t listed_mono = 0;
    size_t slices_left = 0;
    size_t streams = 0;
  };
  std::map<std::string, FanoutRound> fanout_rounds;
  double last_fanout_seconds = 0;                  // the last round: listed to handed to gRPC

  std::unique_ptr<grpc::Service> service;  // declared before the server: outlives it
  std::unique_ptr<grpc::Server> server;
  int port = 0;
  HttpServer metrics;
  std::thread ticker, assembler, placed_checker, persister;
  bool started = false;

  VerdictHook hook;

  Impl(CoordinatorConfig c, ServerOptions o)
      : cfg(c), opts(std::move(o)), state(std::move(c)),
        hook(opts.on_verdict, opts.on_verdict_timeout_ns) {}

  // The credentials a call presented (checked already by authorized()).
  PeerAuth peer_auth(grpc::CallbackServerContext* ctx) const {
    PeerAuth a;
    a.authenticated = !opts.token.empty() || !opts.tls_client_ca.empty();
    if (!opts.tls_client_ca.empty()) {
      auto ac = ctx->auth_context();
      if (ac)
        for (const auto& v : ac->GetPeerIdentity())
          a.principal += std::string(v.data(), v.size()) + ";";
      a.principal = "cert:" + a.principal;
    } else if (!opts.token.empty()) {
      a.principal = "token";
    }
    return a;
  }

  bool authorized(grpc::CallbackServerContext* ctx) const {
    if (opts.token.empty()) return true;
    const auto& md = ctx->client_metadata();
    auto it = md.find("authorization");
    if (it == md.end()) return false;
    std::string_view got(it->second.data(), it->second.size());
    return equal_secret(got, "Bearer " + opts.token);
  }

  void log(const std::string& line, LogLevel level = LogLevel::kInfo) {
    if (!opts.quiet) log_line(level, line);
  }

  // Carries out what the state asked for. Called with mu held.
  void dispatch(Actions& a);
  void ticker_loop();
  void assembler_loop();
  void placed_loop();
  void persist_loop();
  void fanout_loop();
};

// The host part of a gRPC peer ("ipv4:127.0.0.1:5000" -> "ipv4:127.0.0.1").
std::string peer_host(const std::string& peer) {
  size_t c = peer.rfind(':');
  return c == std::string::npos ? peer : peer.substr(0, c);
}

namespace {

grpc::Status unauthenticated() {
  return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "missing or wrong token");
}

// A stream refused before it started (wrong token, too many uploads).
template <class Base>
class Refused : public Base {
 public:
  explicit Refused(grpc::Status st) { this->Finish(st); }
  void OnDone() override { delete this; }
};

class NodeStream : public grpc::ServerBidiReactor<NodeMessage, CoordinatorMessage> {
 public:
  NodeStream(CoordinatorServer::Impl* impl, grpc::CallbackServerContext* ctx)
      : impl_(impl), ctx_(ctx) {
    StartRead(&in_);
  }

  // Queues a message; called with impl->mu held, or pinned (or before the stream is known to
  // anyone).
  void send(CoordinatorMessage m) { send(std::make_shared<const CoordinatorMessage>(std::move(m))); }
  void send(std::shared_ptr<const CoordinatorMessage> m) {
    std::lock_guard<std::mutex> lk(wmu_);
    if (finished_ || finish_pending_ || done_) return;
    // A peer that does not read its commands gets dropped rather than grow our memory.
    if (out_.size() >= kMaxQueued) {
      close_locked(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "not reading commands"));
      return;
    }
    out_.push_back(std::move(m));
    if (!writing_) {
      writing_ = true;
      StartWrite(out_.front().get());
    }
  }

  // A fan-out thread holds the stream alive while it sends to it: pin() with impl->mu held while
  // the stream is registered, unpin() when done with it (the last one out deletes it).
  void pin() {
    std::lock_guard<std::mutex> lk(wmu_);
    pins_++;
  }
  void unpin() {
    bool last;
    {
      std::lock_guard<std::mutex> lk(wmu_);
      last = --pins_ == 0 && done_;
    }
    if (last) delete this;
  }

  void close(grpc::Status st) {
    std::lock_guard<std::mutex> lk(wmu_);
    close_locked(std::move(st));
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      close(grpc::Status::OK);
      return;
    }
    int64_t now = mono_ns();
    int64_t t4 = real_ns();
    bool keep_reading = true;
    switch (in_.body_case()) {
      case NodeMessage::kHello: keep_reading = on_hello(now); break;
      case NodeMessage::kHeartbeat: keep_reading = on_heartbeat(now, t4); break;
      case NodeMessage::kDumpStatus: {
        std::lock_guard<std::mutex> lk(impl_->mu);
        const auto& d = in_.dump_status();
        impl_->state.dump_status(session_, printable(d.incident_id(), 64), d.ok(),
                                 printable(d.error(), 256), now);
        impl_->poke = true;
        impl_->tick_cv.notify_one();
        break;
      }
      default:
        close(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "empty or unknown message"));
        keep_reading = false;
    }
    if (keep_reading) StartRead(&in_);
  }

  void OnWriteDone(bool ok) override {
    std::lock_guard<std::mutex> lk(wmu_);
    out_.pop_front();
    if (finish_pending_) {
      finished_ = true;
      Finish(final_status_);
      return;
    }
    if (!ok) {
      // The peer is gone; the read side will see it too.
      writing_ = false;
      out_.clear();
      return;
    }
    if (!out_.empty()) {
      StartWrite(out_.front().get());
    } else {
      writing_ = false;
    }
  }

  void OnDone() override {
    {
      std::lock_guard<std::mutex> lk(impl_->mu);
      if (session_) {
        impl_->state.disconnect(session_, mono_ns());
        auto it = impl_->streams.find(session_);
        if (it != impl_->streams.end() && it->second == this) impl_->streams.erase(it);
      }
    }
    bool last;
    {
      std::lock_guard<std::mutex> lk(wmu_);
      done_ = true;
      last = pins_ == 0;
    }
    if (last) delete this;
  }

 private:
  static constexpr size_t kMaxQueued = 256;

  void close_locked(grpc::Status st) {
    if (finished_ || finish_pending_) return;
    if (writing_) {
      finish_pending_ = true;
      final_status_ = std::move(st);
      ctx_->TryCancel();
      return;
    }
    finished_ = true;
    Finish(st);
  }

  bool on_hello(int64_t now) {
    if (session_) {
      close(grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "hello sent twice"));
      return false;
    }
    const auto& h = in_.hello();
    std::string error;
    std::lock_guard<std::mutex> lk(impl_->mu);
    uint64_t s = impl_->state.connect(h.node_name(), h.host(), h.job_id(),
                                      impl_->peer_auth(ctx_), now, &error);
    if (!s) {
      close(grpc::Status(grpc::StatusCode::PERMISSION_DENIED, error));
      return false;
    }
    session_ = s;
    impl_->streams[s] = this;
    CoordinatorMessage w;
    w.mutable_welcome()->set_coordinator_id(impl_->state.coordinator_id());
    w.mutable_welcome()->set_job_id(impl_->cfg.job_id);
    w.mutable_welcome()->set_heartbeat_interval_ms(
        uint32_t(impl_->cfg.heartbeat_interval_ns / 1'000'000));
    // Nodes report an op at once when it crosses the lowest threshold an op can have.
    w.mutable_welcome()->set_stall_after_ms(uint32_t(std::min<int64_t>(
        impl_->state.stall_policy().report_at_once_ns() / 1'000'000, int64_t(UINT32_MAX))));
    w.mutable_welcome()->set_upload_key(impl_->state.upload_key(s));
    send(std::move(w));
    send_ping();
    Actions a;
    impl_->state.resend_requests(s, &a);
    impl_->dispatch(a);
    return true;
  }

  bool on_heartbeat(int64_t now, int64_t t4) {
    if (!session_) {
      close(grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "heartbeat before hello"));
      return false;
    }
    const auto& hb = in_.heartbeat();
    NodeReport report = from_proto(hb);
    bool urgent = false;
    std::lock_guard<std::mutex> lk(impl_->mu);
    const int64_t at_once = impl_->state.stall_policy().report_at_once_ns();
    for (const auto& p : report.processes)
      if ((!p.alive && !p.exited_cleanly) || p.oldest_age_ns() >= at_once) urgent = true;
    if (!impl_->state.heartbeat(session_, std::move(report), now)) {
      close(grpc::Status(grpc::StatusCode::ABORTED, "superseded by a newer connection"));
      return false;
    }
    if (hb.has_echo() && hb.echo().t1_ns() != 0)
      impl_->state.clock_sample(session_, hb.echo().t1_ns(), hb.echo().t2_ns(),
                                hb.echo().t3_ns(), t4);
    if (pings_ < 4 || now - last_ping_ >= 5'000'000'000) send_ping();
    if (urgent) {
      impl_->poke = true;
      impl_->tick_cv.notify_one();
    }
    return true;
  }

  void send_ping() {
    CoordinatorMessage p;
    p.mutable_ping()->set_t1_ns(real_ns());
    last_ping_ = mono_ns();
    pings_++;
    send(std::move(p));
  }

  CoordinatorServer::Impl* impl_;
  grpc::CallbackServerContext* ctx_;
  NodeMessage in_;
  uint64_t session_ = 0;
  int64_t last_ping_ = 0;
  int pings_ = 0;
  std::mutex wmu_;
  std::deque<std::shared_ptr<const CoordinatorMessage>> out_;
  int pins_ = 0;
  bool done_ = false;
  bool writing_ = false;
  bool finished_ = false;
  bool finish_pending_ = false;
  grpc::Status final_status_;
};

// An upload takes one of the limited slots only once a valid header from the node that was
// asked has arrived; until then it is a waiting stream, bounded in number per peer host and
// given a short deadline for its header.
class UploadStream : public grpc::ServerReadReactor<UploadChunk> {
 public:
  // Called with impl->mu held.
  UploadStream(CoordinatorServer::Impl* impl, grpc::CallbackServerContext* ctx, UploadReply* reply,
               std::string peer)
      : impl_(impl), ctx_(ctx), reply_(reply), peer_(std::move(peer)) {
    last_activity_ = opened_ = mono_ns();
    impl_->uploads.insert(this);
    impl_->waiting_by_peer[peer_]++;
    StartRead(&chunk_);
  }

  // Cancels an upload that stopped sending, or never sent its header (called by the ticker with
  // impl->mu held).
  void cancel_if_idle(int64_t now, int64_t idle_ns, int64_t header_ns) {
    if (!slot_ && now - opened_ > header_ns) ctx_->TryCancel();
    else if (now - last_activity_.load() > idle_ns) ctx_->TryCancel();
  }

  void OnReadDone(bool ok) override {
    last_activity_ = mono_ns();
    if (!ok) {
      end();
      return;
    }
    if (chunk_.has_header()) {
      if (have_header_) return fail(grpc::StatusCode::INVALID_ARGUMENT, "second header");
      have_header_ = true;
      hdr_ = from_proto(chunk_.header());
      std::string dir, error;
      bool dup = false;
      grpc::StatusCode refused = grpc::StatusCode::OK;
      {
        std::lock_guard<std::mutex> lk(impl_->mu);
        const std::string key = hdr_.incident_id + "/" + hdr_.node_name;
        if (!check_dump_header(hdr_, impl_->opts.limits, &error)) {
          refused = grpc::StatusCode::INVALID_ARGUMENT;
        } else if (!impl_->state.begin_upload(hdr_, &dir, &dup, &error)) {
          refused = grpc::StatusCode::FAILED_PRECONDITION;
        } else if (!impl_->state.check_uploader(hdr_, impl_->peer_auth(ctx_), &error)) {
          refused = grpc::StatusCode::PERMISSION_DENIED;
        } else if (!dup && impl_->uploads_active >= size_t(impl_->opts.max_uploads)) {
          error = "too many uploads at once";
          refused = grpc::StatusCode::RESOURCE_EXHAUSTED;
        } else if (!dup && impl_->uploading.count(key)) {
          error = "an upload of this dump is already in progress";
          refused = grpc::StatusCode::RESOURCE_EXHAUSTED;
        } else if (!dup) {
          take_slot(key);
        }
      }
      if (refused != grpc::StatusCode::OK) return fail(refused, error, false);
      if (dup) {
        reply_->set_ok(true);
        reply_->set_duplicate(true);
        Finish(grpc::Status::OK);
        return;
      }
      if (!receiver_.begin(dir, hdr_, impl_->opts.limits, &error))
        return fail(data_error(), error);
    } else if (chunk_.has_data()) {
      if (!have_header_) return fail(grpc::StatusCode::INVALID_ARGUMENT, "data before header");
      const auto& d = chunk_.data();
      std::string error;
      if (!receiver_.write(d.file_index(), d.offset(), d.data().data(), d.data().size(), &error))
        return fail(data_error(), error);
    } else {
      return fail(grpc::StatusCode::INVALID_ARGUMENT, "empty chunk");
    }
    StartRead(&chunk_);
  }

  void OnDone() override {
    {
      std::lock_guard<std::mutex> lk(impl_->mu);
      impl_->uploads.erase(this);
      if (slot_) {
        impl_->uploads_active--;
        impl_->uploading.erase(key_);
      } else if (!released_ && --impl_->waiting_by_peer[peer_] <= 0) {
        impl_->waiting_by_peer.erase(peer_);
      }
    }
    delete this;
  }

 private:
  // With impl->mu held.
  void take_slot(const std::string& key) {
    slot_ = true;
    key_ = key;
    impl_->uploads_active++;
    impl_->uploading.insert(key);
    if (--impl_->waiting_by_peer[peer_] <= 0) impl_->waiting_by_peer.erase(peer_);
  }

  void end() {
    if (!have_header_) return fail(grpc::StatusCode::INVALID_ARGUMENT, "no header");
    std::string error;
    if (!receiver_.finish(&error))
      return fail(receiver_.io_failure() ? grpc::StatusCode::UNAVAILABLE
                                         : grpc::StatusCode::DATA_LOSS,
                  error);
    {
      std::lock_guard<std::mutex> lk(impl_->mu);
      impl_->state.upload_done(hdr_, mono_ns());
      impl_->poke = true;
      impl_->tick_cv.notify_one();
    }
    reply_->set_ok(true);
    Finish(grpc::Status::OK);
  }

  // A full or failing disk is worth a retry (UNAVAILABLE); bad data from the peer is not.
  grpc::StatusCode data_error() const {
    return receiver_.io_failure() ? grpc::StatusCode::UNAVAILABLE
                                  : grpc::StatusCode::INVALID_ARGUMENT;
  }

  void fail(grpc::StatusCode code, const std::string& error, bool note = true) {
    receiver_.abort();
    {
      std::lock_guard<std::mutex> lk(impl_->mu);
      if (note && have_header_)
        impl_->state.upload_failed(hdr_.incident_id, hdr_.node_name, error, mono_ns());
      // The upload is over once its files are gone: the node may retry at once, before the
      // stream is done.
      if (slot_) {
        slot_ = false;
        released_ = true;
        impl_->uploads_active--;
        impl_->uploading.erase(key_);
      }
    }
    reply_->set_ok(false);
    reply_->set_error(error);
    Finish(grpc::Status(code, error));
  }

  CoordinatorServer::Impl* impl_;
  grpc::CallbackServerContext* ctx_;
  UploadReply* reply_;
  std::string peer_;
  UploadChunk chunk_;
  DumpHeader hdr_;
  bool have_header_ = false;
  bool slot_ = false;
  bool released_ = false;   // the slot was given back early (fail)
  std::string key_;
  DumpReceiver receiver_;
  int64_t opened_ = 0;
  std::atomic<int64_t> last_activity_{0};
};

class Service final : public fr::v1::Coordinator::CallbackService {
 public:
  explicit Service(CoordinatorServer::Impl* impl) : impl_(impl) {}

  grpc::ServerBidiReactor<NodeMessage, CoordinatorMessage>* Connect(
      grpc::CallbackServerContext* ctx) override {
    if (!impl_->authorized(ctx))
      return new Refused<grpc::ServerBidiReactor<NodeMessage, CoordinatorMessage>>(
          unauthenticated());
    return new NodeStream(impl_, ctx);
  }

  grpc::ServerReadReactor<UploadChunk>* Upload(grpc::CallbackServerContext* ctx,
                                               UploadReply* reply) override {
    if (!impl_->authorized(ctx))
      return new Refused<grpc::ServerReadReactor<UploadChunk>>(unauthenticated());
    std::string peer = peer_host(ctx->peer());
    std::lock_guard<std::mutex> lk(impl_->mu);
    // Streams that have not said what they carry are cheap but bounded: per peer host, and in
    // all. They take no upload slot.
    size_t waiting = impl_->uploads.size() - impl_->uploads_active;
    auto it = impl_->waiting_by_peer.find(peer);
    if (waiting >= size_t(impl_->opts.max_waiting_uploads) ||
        (it != impl_->waiting_by_peer.end() &&
         it->second >= impl_->opts.max_waiting_uploads_per_peer))
      return new Refused<grpc::ServerReadReactor<UploadChunk>>(grpc::Status(
          grpc::StatusCode::RESOURCE_EXHAUSTED, "too many uploads without a header"));
    return new UploadStream(impl_, ctx, reply, peer);
  }

  // The files are read and checksummed on their own thread, not on gRPC's.
  grpc::ServerUnaryReactor* Placed(grpc::CallbackServerContext* ctx,
                                   const fr::v1::UploadHeader* req, UploadReply* reply) override {
    auto* r = ctx->DefaultReactor();
    if (!impl_->authorized(ctx)) {
      r->Finish(unauthenticated());
      return r;
    }
    std::lock_guard<std::mutex> lk(impl_->mu);
    if (impl_->stopping || impl_->placed_queue.size() >= size_t(impl_->opts.max_uploads)) {
      r->Finish(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "too many dumps at once"));
      return r;
    }
    impl_->placed_queue.push_back({r, from_proto(*req), reply, impl_->peer_auth(ctx)});
    impl_->placed_cv.notify_one();
    return r;
  }

  grpc::ServerUnaryReactor* Status(grpc::CallbackServerContext* ctx,
                                   const fr::v1::StatusRequest* req,
                                   fr::v1::StatusReply* reply) override {
    auto* r = ctx->DefaultReactor();
    if (!impl_->authorized(ctx)) {
      r->Finish(unauthenticated());
      return r;
    }
    StatusQuery q;
    q.node_offset = req->node_offset();
    if (req->node_limit() > 0) q.node_limit = std::min<size_t>(req->node_limit(), 4096);
    q.summary = req->summary();
    std::string text;
    {
      std::lock_guard<std::mutex> lk(impl_->mu);
      text = impl_->state.status_text(mono_ns(), q);
    }
    const bool big = text.size() > (1 << 20);
    reply->set_json(std::move(text));
    r->Finish(grpc::Status::OK);
    // A large page leaves freed memory behind in the allocator: give it back to the system.
    if (big) malloc_trim(0);
    return r;
  }

  grpc::ServerUnaryReactor* TriggerDump(grpc::CallbackServerContext* ctx,
                                        const fr::v1::TriggerRequest* req,
                                        fr::v1::TriggerReply* reply) override {
    auto* r = ctx->DefaultReactor();
    if (!impl_->authorized(ctx)) {
      r->Finish(unauthenticated());
      return r;
    }
    {
      std::lock_guard<std::mutex> lk(impl_->mu);
      Actions a;
      std::string id = impl_->state.trigger(printable(req->reason(), 256), mono_ns(), &a);
      impl_->dispatch(a);
      reply->set_ok(true);
      reply->set_incident_id(id);
    }
    r->Finish(grpc::Status::OK);
    return r;
  }

 private:
  CoordinatorServer::Impl* impl_;
};

}  // namespace

void CoordinatorServer::Impl::dispatch(Actions& a) {
  // One message per incident, shared by every stream it goes to; slices of streams to the
  // fan-out threads.
  constexpr size_t kSlice = 256;
  std::deque<FanoutSlice> slices;
  for (auto& d : a.dumps) {
    auto it = streams.find(d.session);
    if (it == streams.end()) continue;
    if (slices.empty() || slices.back().streams.size() >= kSlice ||
        slices.back().message->dump_request().incident_id() != d.incident_id) {
      auto m = std::make_shared<CoordinatorMessage>();
      m->mutable_dump_request()->set_incident_id(d.incident_id);
      m->mutable_dump_request()->set_reason(d.reason);
      m->mutable_dump_request()->set_deadline_ms(d.deadline_ms);
      m->mutable_dump_request()->set_job_id(d.job_id);
      // A slice of the same incident shares the message of the previous one.
      if (!slices.empty() && slices.back().message->dump_request().incident_id() == d.incident_id)
        slices.push_back({slices.back().message, {}});
      else
        slices.push_back({std::move(m), {}});
    }
    it->second->pin();
    slices.back().streams.push_back(it->second);
  }
  if (!slices.empty()) {
    int64_t now = mono_ns();
    std::lock_guard<std::mutex> fl(fanout_mu);
    for (auto& sl : slices) {
      FanoutRound& r = fanout_rounds[sl.message->dump_request().incident_id()];
      if (!r.slices_left) r.listed_mono = now;
      r.slices_left++;
      r.streams += sl.streams.size();
      fanout_queue.push_back(std::move(sl));
    }
    fanout_cv.notify_all();
  }
  for (auto& j : a.assemble) assembly_queue.push_back(std::move(j));
  if (!a.assemble.empty()) assemble_cv.notify_one();
  for (auto& entry : a.persist) {
    const std::string& path = entry.first;
    auto same = std::find_if(persist_queue.begin(), persist_queue.end(),
                             [&](const auto& e) { return e.first == path; });
    if (same != persist_queue.end()) same->second = std::move(entry.second);
    else persist_queue.emplace_back(path, std::move(entry.second));
  }
  if (!a.persist.empty()) persist_cv.notify_one();
  for (const auto& l : a.log) log(l);
  a = Actions{};
}

void CoordinatorServer::Impl::fanout_loop() {
  std::unique_lock<std::mutex> lk(fanout_mu);
  for (;;) {
    fanout_cv.wait(lk, [&] { return fanout_stopping || !fanout_queue.empty(); });
    if (fanout_queue.empty()) return;  // stopping, every pinned stream released
    FanoutSlice sl = std::move(fanout_queue.front());
    fanout_queue.pop_front();
    lk.unlock();
    for (NodeStream* st : sl.streams) {
      st->send(sl.message);
      st->unpin();
    }
    lk.lock();
    const std::string& id = sl.message->dump_request().incident_id();
    auto r = fanout_rounds.find(id);
    if (r != fanout_rounds.end() && --r->second.slices_left == 0) {
      last_fanout_seconds = double(mono_ns() - r->second.listed_mono) / 1e9;
      char line[200];
      std::snprintf(line, sizeof line, "%zu dump request(s) handed to the node streams in %.3f s",
                    r->second.streams, last_fanout_seconds);
      log("frd coordinator: " + id + ": " + line);
      fanout_rounds.erase(r);
    }
  }
}

void CoordinatorServer::Impl::ticker_loop() {
  std::unique_lock<std::mutex> lk(mu);
  int64_t last_trim = mono_ns();
  while (!stopping) {
    tick_cv.wait_for(lk, std::chrono::milliseconds(100), [&] { return stopping || poke; });
    if (stopping) break;
    poke = false;
    int64_t now = mono_ns();
    Actions a = state.tick(now);
    dispatch(a);
    for (auto* u : uploads) u->cancel_if_idle(now, opts.upload_idle_ns, opts.upload_header_ns);
    for (const auto& line : hook.poll(now)) log(line);
    // Decoding a large heartbeat leaves freed memory in the allocator's arenas: give it back.
    if (now - last_trim >= 10'000'000'000) {
      last_trim = now;
      lk.unlock();
      malloc_trim(0);
      lk.lock();
    }
  }
}

void CoordinatorServer::Impl::assembler_loop() {
  std::unique_lock<std::mutex> lk(mu);
  for (;;) {
    assemble_cv.wait(lk, [&] { return stopping || !assembly_queue.empty(); });
    if (assembly_queue.empty()) return;  // stopping with nothing left to write
    AssemblyJob job = std::move(assembly_queue.front());
    assembly_queue.pop_front();
    // The work runs on its own thread that owns everything it touches, so that a stop can leave
    // it behind if it is stuck in I/O.
    struct Work {
      std::mutex mu;
      std::condition_variable cv;
      bool done = false;
      AssemblyResult result;
    };
    auto work = std::make_shared<Work>();
    std::thread([work, job] {
      AssemblyResult r;
      try {
        r = assemble(job);
      } catch (const std::exception& e) {
        r.error = std::string("assembly failed: ") + e.what();
      }
      std::lock_guard<std::mutex> wl(work->mu);
      work->result = std::move(r);
      work->done = true;
      work->cv.notify_all();
    }).detach();
    lk.unlock();
    bool finished;
    {
      std::unique_lock<std::mutex> wl(work->mu);
      for (;;) {
        if (work->done) break;
        work->cv.wait_for(wl, std::chrono::milliseconds(100));
        if (work->done) break;
        bool stop;
        {
          wl.unlock();
          std::lock_guard<std::mutex> g(mu);
          stop = stopping;
          wl.lock();
        }
        if (stop && !work->cv.wait_for(wl, std::chrono::nanoseconds(opts.stop_wait_ns),
                                       [&] { return work->done; }))
          break;
      }
      finished = work->done;
    }
    lk.lock();
    if (!finished) {
      log("frd coordinator: stopping without waiting for the analysis of " + job.incident_id +
          " (stuck in I/O)");
      return;
    }
    AssemblyResult r = work->result;
    Actions a;
    state.assembled(job.incident_id, r, mono_ns(), &a);
    // The operator's command, once the dump set stands (not when it is about to be rewritten),
    // and once per incident, also across restarts.
    if (hook.enabled() && r.ok && a.assemble.empty() && state.take_hook(job.incident_id, &a)) {
      std::string culprits, error;
      for (int c : r.culprits) culprits += (culprits.empty() ? "" : ",") + std::to_string(c);
      std::map<std::string, std::string> env = {
          {"FR_INCIDENT_ID", job.incident_id}, {"FR_INCIDENT_DIR", job.dir},
          {"FR_INCIDENT_KIND", job.kind},      {"FR_JOB_ID", job.job_id},
          {"FR_VERDICT", r.verdict_kind},      {"FR_CULPRITS", culprits},
          {"FR_SUMMARY", printable(r.verdict_summary, 1024)}};
      if (!hook.start(job.incident_id, env, mono_ns(), &error))
        a.log.push_back("frd coordinator: --on-verdict for " + job.incident_id + " not run: " +
                        error);
    }
    dispatch(a);
  }
}

void CoordinatorServer::Impl::placed_loop() {
  std::unique_lock<std::mutex> lk(mu);
  for (;;) {
    placed_cv.wait(lk, [&] { return stopping || !placed_queue.empty(); });
    if (placed_queue.empty()) return;
    PlacedCall call = std::move(placed_queue.front());
    placed_queue.pop_front();
    const DumpHeader& h = call.header;
    std::string dir, error;
    bool dup = false;
    grpc::Status st;
    if (stopping) {
      st = grpc::Status(grpc::StatusCode::UNAVAILABLE, "the coordinator is stopping");
    } else if (!check_dump_header(h, opts.limits, &error)) {
      st = grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, error);
    } else if (!state.begin_upload(h, &dir, &dup, &error)) {
      st = grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, error);
    } else if (dup) {
      call.reply->set_duplicate(true);
    } else if (!state.check_uploader(h, call.auth, &error)) {
      st = grpc::Status(grpc::StatusCode::PERMISSION_DENIED, error);
    } else {
      lk.unlock();
      PlacedCheck c = check_placed(dir, h, opts.limits, &error);
      lk.lock();
      if (c == PlacedCheck::kBadHeader) {
        st = grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, error);
      } else if (c == PlacedCheck::kMismatch) {
        st = grpc::Status(grpc::StatusCode::NOT_FOUND, error);
      } else {
        state.upload_done(h, mono_ns(), true);
        log("frd coordinator: " + h.incident_id + ": node " + h.node_name +
            " wrote its dump into the shared dump dir");
        poke = true;
        tick_cv.notify_one();
      }
    }
    call.reply->set_ok(st.ok());
    if (!st.ok()) call.reply->set_error(st.error_message());
    call.reactor->Finish(st);
  }
}

void CoordinatorServer::Impl::persist_loop() {
  std::unique_lock<std::mutex> lk(mu);
  for (;;) {
    persist_cv.wait(lk, [&] { return stopping || !persist_queue.empty(); });
    if (persist_queue.empty()) return;
    auto [path, text] = std::move(persist_queue.front());
    persist_queue.pop_front();
    lk.unlock();
    std::string error;
    bool ok = fr::files::write_atomic(path, text, &error);
    lk.lock();
    if (!ok) log("frd coordinator: cannot write " + path + ": " + error, LogLevel::kError);
  }
}

CoordinatorServer::CoordinatorServer(CoordinatorConfig cfg, ServerOptions opts)
    : impl_(std::make_unique<Impl>(std::move(cfg), std::move(opts))) {}

CoordinatorServer::~CoordinatorServer() { shutdown(); }

int CoordinatorServer::port() const { return impl_->port; }
int CoordinatorServer::metrics_port() const { return impl_->metrics.port(); }

bool CoordinatorServer::start(std::string* error) {
  Impl& m = *impl_;
  const bool loopback = is_loopback_address(m.opts.listen);
  if (!loopback && m.opts.token.empty() && m.opts.tls_client_ca.empty()) {
    *error = "listening on " + m.opts.listen +
             " (not loopback only, by what it resolves to) needs a shared token (--token-file)";
    return false;
  }
  if (!loopback && !m.opts.token.empty() && m.opts.tls_cert.empty())
    m.log("frd coordinator: the token travels in cleartext on " + m.opts.listen +
        " (not loopback) without TLS; anyone on the path can read it (use --tls-cert)", LogLevel::kWarn);
  // The HTTP listener (metrics, pages, status JSON) follows the gRPC listener's rules: off
  // loopback it asks for the token (or a client certificate), and it speaks TLS when gRPC does.
  HttpSecurity http_sec{"", m.opts.tls_cert, m.opts.tls_key, m.opts.tls_client_ca};
  if (!m.opts.metrics_listen.empty() && !is_loopback_address(m.opts.metrics_listen)) {
    if (m.opts.token.empty() && m.opts.tls_client_ca.empty()) {
      *error = "--metrics-listen " + m.opts.metrics_listen +
               " (not loopback only) serves the job's status and incidents: it needs a shared token "
               "(--token-file) or mutual TLS";
      return false;
    }
    http_sec.token = m.opts.token;
    if (m.opts.tls_cert.empty())
      m.log("frd coordinator: the token travels in cleartext to the pages and metrics on " +
            m.opts.metrics_listen + " (not loopback) without TLS (use --tls-cert)", LogLevel::kWarn);
  }
  if (m.opts.tls_cert.empty() != m.opts.tls_key.empty()) {
    *error = "TLS needs both a certificate and a key";
    return false;
  }
  if (!fr::files::make_dirs(m.cfg.dump_dir, error)) return false;
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
  m.service = std::make_unique<Service>(impl_.get());
  grpc::ServerBuilder b;
  b.SetMaxReceiveMessageSize(m.opts.max_message_bytes);
  b.SetMaxSendMessageSize(16 << 20);
  b.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 20000);
  b.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10000);
  b.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  b.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 5000);
  b.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  b.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, 4096);
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
  m.metrics.get("/metrics", [&m](const HttpServer::Request&) {
    HttpServer::Response r;
    r.content_type = "text/plain; version=0.0.4";
    std::lock_guard<std::mutex> lk(m.mu);
    r.body = m.state.metrics(mono_ns());
    double fanout;
    {
      std::lock_guard<std::mutex> fl(m.fanout_mu);
      fanout = m.last_fanout_seconds;
    }
    r.body += "# HELP frd_fanout_seconds Last incident: from listing its dump requests to handing "
              "the last one to its node's stream.\n# TYPE frd_fanout_seconds gauge\n"
              "frd_fanout_seconds " + std::to_string(fanout) + "\n";
    return r;
  });
  // Paged as `frd status` is: ?offset=N&limit=N&summary=1.
  m.metrics.get("/api/v1/status", [&m](const HttpServer::Request& req) {
    HttpServer::Response r;
    r.content_type = "application/json";
    StatusQuery q;
    auto number = [&](const char* key, size_t* out) {
      auto it = req.query.find(key);
      if (it == req.query.end()) return true;
      char* end = nullptr;
      unsigned long long v = std::strtoull(it->second.c_str(), &end, 10);
      if (it->second.empty() || *end != '\0' || it->second[0] == '-') return false;
      *out = size_t(v);
      return true;
    };
    size_t limit = q.node_limit;
    if (!number("offset", &q.node_offset) || !number("limit", &limit)) {
      r.status = 400;
      r.body = "{\"error\":\"offset and limit are non-negative integers\"}\n";
      return r;
    }
    if (limit > 0) q.node_limit = std::min(limit, q.node_limit);
    q.summary = req.query.count("summary") && req.query.at("summary") != "0";
    std::lock_guard<std::mutex> lk(m.mu);
    r.body = m.state.status_text(mono_ns(), q) + "\n";
    return r;
  });
  m.metrics.get("/", [&m](const HttpServer::Request&) {
    HttpServer::Response r;
    r.content_type = "text/html; charset=utf-8";
    nlohmann::json status;
    {
      std::lock_guard<std::mutex> lk(m.mu);
      status = m.state.status(mono_ns());
    }
    r.body = render_live_page(status);
    return r;
  });
  m.metrics.get_under("/incidents/", [&m](const HttpServer::Request& req) {
    HttpServer::Response r;
    r.content_type = "text/html; charset=utf-8";
    nlohmann::json incident;
    {
      std::lock_guard<std::mutex> lk(m.mu);
      for (const auto& i : m.state.status(mono_ns(), StatusQuery{0, 0, true}).value("incidents", nlohmann::json::array()))
        if (i.value("id", std::string()) == req.tail) incident = i;
    }
    if (incident.is_null()) {
      r.status = 404;
      r.body = render_missing_incident_page(req.tail);
      return r;
    }
    // The analysis is on disk once the dump set is analysed; read outside the lock.
    nlohmann::json analysis;
    const std::string state = incident.value("state", std::string());
    if (state != "collecting" && state != "analyzing") {
      std::ifstream in(incident.value("dir", std::string()) + "/analysis.json");
      if (in) analysis = nlohmann::json::parse(in, nullptr, false);
      if (analysis.is_discarded()) analysis = nullptr;
    }
    r.body = render_incident_page(incident, analysis);
    return r;
  });
  if (!m.opts.metrics_listen.empty() && !m.metrics.start(m.opts.metrics_listen, http_sec, error)) {
    m.server->Shutdown();
    m.server.reset();
    return false;
  }
  m.ticker = std::thread([&m] { m.ticker_loop(); });
  m.assembler = std::thread([&m] { m.assembler_loop(); });
  m.placed_checker = std::thread([&m] { m.placed_loop(); });
  m.persister = std::thread([&m] { m.persist_loop(); });
  unsigned fanout = std::clamp(std::thread::hardware_concurrency(), 2u, 8u);
  for (unsigned i = 0; i < fanout; ++i) m.fanout_threads.emplace_back([&m] { m.fanout_loop(); });
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
    std::lock_guard<std::mutex> lk(m.mu);
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
    std::lock_guard<std::mutex> fl(m.fanout_mu);
    m.fanout_stopping = true;
  }
  m.fanout_cv.notify_all();
  for (auto& t : m.fanout_threads) t.join();
  m.fanout_threads.clear();
  m.metrics.stop();
}

nlohmann::json CoordinatorServer::status() {
  std::lock_guard<std::mutex> lk(impl_->mu);
  return impl_->state.status(mono_ns());
}

}  // namespace fr::daemon
