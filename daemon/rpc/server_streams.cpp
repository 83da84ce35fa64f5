// The coordinator's gRPC service (server_impl.h): the node streams' reactor
// (server_node_stream.h), a reactor per upload (header, chunks, verified and moved into place),
// the Placed call for dumps written into a shared dump dir, Status and TriggerDump, and the
// ticker (the state's clock, idle uploads). The other threads are in server_threads.cpp.
#include "daemon/rpc/server_node_stream.h"

#include <malloc.h>

#include <algorithm>
#include <atomic>

#include "daemon/rpc/convert.h"

namespace fr::daemon {

namespace {

// The host part of a gRPC peer ("ipv4:127.0.0.1:5000" -> "ipv4:127.0.0.1").
std::string peer_host(const std::string& peer) {
  size_t c = peer.rfind(':');
  return c == std::string::npos ? peer : peer.substr(0, c);
}

// A stream refused before it started (wrong token, too many uploads).
template <class Base>
class Refused : public Base {
 public:
  explicit Refused(grpc::Status st) { this->Finish(st); }
  void OnDone() override { delete this; }
};

}  // namespace

grpc::Status CoordinatorServer::Impl::refuse(grpc::CallbackServerContext* ctx, const char* call) {
  const auto& md = ctx->client_metadata();
  const bool sent = md.find("authorization") != md.end();
  const int64_t now = mono_ns(), last = refusal_logged_ns.load();
  int64_t expected = last;
  if ((last == 0 || now - last >= 10'000'000'000) &&
      refusal_logged_ns.compare_exchange_strong(expected, now)) {
    const uint64_t more = refusals_unlogged.exchange(0);
    log("frd coordinator: refused " + std::string(call) + " from " + printable(ctx->peer(), 128) +
            ": " + (sent ? "wrong token" : "no token") +
            " (the peer must use this coordinator's token file)" +
            (more ? "; " + std::to_string(more) + " more refused since the last report" : ""),
        LogLevel::kWarn);
  } else {
    refusals_unlogged.fetch_add(1);
  }
  return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, sent ? "wrong token" : "no token");
}

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
    if (!slot_ && now - opened_ > header_ns)
      ctx_->TryCancel();
    else if (now - last_activity_.load() > idle_ns)
      ctx_->TryCancel();
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
        std::lock_guard<RankedMutex> lk(impl_->mu);
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
      if (!receiver_.begin(dir, hdr_, impl_->opts.limits, &error)) return fail(data_error(), error);
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
      std::lock_guard<RankedMutex> lk(impl_->mu);
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
      return fail(
          receiver_.io_failure() ? grpc::StatusCode::UNAVAILABLE : grpc::StatusCode::DATA_LOSS,
          error);
    {
      std::lock_guard<RankedMutex> lk(impl_->mu);
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
      std::lock_guard<RankedMutex> lk(impl_->mu);
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
  bool released_ = false;  // the slot was given back early (fail)
  std::string key_;
  DumpReceiver receiver_;
  int64_t opened_ = 0;
  std::atomic<int64_t> last_activity_{0};
};

namespace {

// Connect is served raw (wire.h): heartbeats cross gRPC's threads as bytes.
using ServiceBase = fr::v1::Coordinator::WithRawCallbackMethod_Connect<
    fr::v1::Coordinator::WithCallbackMethod_Upload<fr::v1::Coordinator::WithCallbackMethod_Placed<
        fr::v1::Coordinator::WithCallbackMethod_Status<
            fr::v1::Coordinator::WithCallbackMethod_TriggerDump<fr::v1::Coordinator::Service>>>>>;

class Service final : public ServiceBase {
 public:
  explicit Service(CoordinatorServer::Impl* impl) : impl_(impl) {}

  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* Connect(
      grpc::CallbackServerContext* ctx) override {
    if (!impl_->authorized(ctx))
      return new Refused<grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>>(
          impl_->refuse(ctx, "a node's connection"));
    return new NodeStream(impl_, ctx);
  }

  grpc::ServerReadReactor<UploadChunk>* Upload(grpc::CallbackServerContext* ctx,
                                               UploadReply* reply) override {
    if (!impl_->authorized(ctx))
      return new Refused<grpc::ServerReadReactor<UploadChunk>>(impl_->refuse(ctx, "an upload"));
    std::string peer = peer_host(ctx->peer());
    std::lock_guard<RankedMutex> lk(impl_->mu);
    // Streams that have not said what they carry are cheap but bounded: per peer host, and in
    // all. They take no upload slot.
    size_t waiting = impl_->uploads.size() - impl_->uploads_active;
    auto it = impl_->waiting_by_peer.find(peer);
    if (waiting >= size_t(impl_->opts.max_waiting_uploads) ||
        (it != impl_->waiting_by_peer.end() &&
         it->second >= impl_->opts.max_waiting_uploads_per_peer))
      return new Refused<grpc::ServerReadReactor<UploadChunk>>(
          grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "too many uploads without a header"));
    return new UploadStream(impl_, ctx, reply, peer);
  }

  // The files are read and checksummed on their own thread, not on gRPC's.
  grpc::ServerUnaryReactor* Placed(grpc::CallbackServerContext* ctx,
                                   const fr::v1::UploadHeader* req, UploadReply* reply) override {
    auto* r = ctx->DefaultReactor();
    if (!impl_->authorized(ctx)) {
      r->Finish(impl_->refuse(ctx, "a placed dump"));
      return r;
    }
    std::lock_guard<RankedMutex> lk(impl_->mu);
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
      r->Finish(impl_->refuse(ctx, "a status query"));
      return r;
    }
    StatusQuery q;
    q.node_offset = req->node_offset();
    if (req->node_limit() > 0) q.node_limit = std::min<size_t>(req->node_limit(), 4096);
    q.summary = req->summary();
    CoordinatorStatus snap;
    {
      std::lock_guard<RankedMutex> lk(impl_->mu);
      snap = impl_->state.status_snapshot(mono_ns(), q);
    }
    std::string text = to_json_text(snap);  // outside the state's lock
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
      r->Finish(impl_->refuse(ctx, "a dump trigger"));
      return r;
    }
    {
      std::lock_guard<RankedMutex> lk(impl_->mu);
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

std::unique_ptr<grpc::Service> make_service(CoordinatorServer::Impl* impl) {
  return std::make_unique<Service>(impl);
}
void CoordinatorServer::Impl::ticker_loop() {
  // Pokes come in floods (every node's dump status after a fan-out), and a tick of 16k nodes holds
  // mu for milliseconds: poked ticks are at least this far apart, and while a fan-out is being
  // handed to gRPC only the regular tick runs (the requests come first).
  constexpr int64_t kMinGapNs = 20'000'000;
  constexpr int64_t kFanoutGapNs = 100'000'000;
  auto fanout_sending = [this] {
    std::lock_guard<RankedMutex> ql(queue_mu);  // taken under mu, as the lock order allows
    return hb_fanout;
  };
  std::unique_lock<RankedMutex> lk(mu);
  int64_t last_trim = mono_ns();
  int64_t last_tick = 0;
  while (!stopping) {
    tick_cv.wait_for(lk, std::chrono::milliseconds(100), [&] { return stopping || poke; });
    if (stopping) break;
    int64_t since = mono_ns() - last_tick;
    const int64_t gap = fanout_sending() ? kFanoutGapNs : kMinGapNs;
    if (since < gap &&
        tick_cv.wait_for(lk, std::chrono::nanoseconds(gap - since), [&] { return stopping; }))
      break;
    poke = false;
    int64_t now = mono_ns();
    last_tick = now;
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
}  // namespace fr::daemon
