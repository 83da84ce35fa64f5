// The coordinator's gRPC side (server_impl.h): a reactor per node stream (hello, heartbeats,
// dump status, pings) and per upload (header, chunks, verified and moved into place), the
// Placed call for dumps written into a shared dump dir, and the threads that drive them: the
// ticker (the state's clock, idle uploads), the fan-out threads that send dump requests, and the
// applier that applies heartbeats to the state.
#include "daemon/server_impl.h"

#include <malloc.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <ctime>

#include "daemon/convert.h"

namespace fr::daemon {

namespace {

// CPU time of the calling thread, for what a fan-out costs apart from how long it waited.
int64_t thread_cpu_ns() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// The host part of a gRPC peer ("ipv4:127.0.0.1:5000" -> "ipv4:127.0.0.1").
std::string peer_host(const std::string& peer) {
  size_t c = peer.rfind(':');
  return c == std::string::npos ? peer : peer.substr(0, c);
}

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

}  // namespace

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

  // The heartbeat waiting for the applier, taken with impl->hb_mu held.
  std::unique_ptr<NodeMessage> take_heartbeat(int64_t* t4) {
    *t4 = hb_t4_;
    return std::move(hb_);
  }
  // Set once, by the hello, before any heartbeat is handed over.
  uint64_t session() const { return session_; }

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
    if (finished_ || finish_pending_ || done_) return;
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

  // Hands the heartbeat to the applier (applier_loop) and reads on: decoding it and the state's
  // work happen there, off gRPC's threads. A heartbeat still waiting is replaced by this newer one.
  bool on_heartbeat(int64_t now, int64_t t4) {
    if (!session_) {
      close(grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "heartbeat before hello"));
      return false;
    }
    auto m = std::make_unique<NodeMessage>();
    m->Swap(&in_);
    std::unique_ptr<NodeMessage> replaced;  // freed outside the lock
    bool first;
    {
      std::lock_guard<std::mutex> lk(impl_->hb_mu);
      first = !hb_;
      if (first) {
        pin();
        impl_->hb_ready.push_back(this);
      } else {
        impl_->heartbeats_replaced++;
      }
      replaced = std::move(hb_);
      hb_ = std::move(m);
      hb_t4_ = t4;
    }
    if (first) impl_->hb_cv.notify_one();
    if (pings_ < 4 || now - last_ping_ >= 5'000'000'000) send_ping();
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
  std::unique_ptr<NodeMessage> hb_;  // the heartbeat waiting for the applier (impl->hb_mu)
  int64_t hb_t4_ = 0;                // ... and when it arrived (real time, for the clock)
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

namespace {

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

std::unique_ptr<grpc::Service> make_service(CoordinatorServer::Impl* impl) {
  return std::make_unique<Service>(impl);
}

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
    {
      std::lock_guard<std::mutex> hl(hb_mu);
      hb_fanout = true;
    }
    std::lock_guard<std::mutex> fl(fanout_mu);
    fanout_pending += slices.size();
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
    const int64_t cpu0 = thread_cpu_ns();
    for (NodeStream* st : sl.streams) {
      st->send(sl.message);
      st->unpin();
    }
    const int64_t cpu = thread_cpu_ns() - cpu0;
    lk.lock();
    if (--fanout_pending == 0) {
      // The last slice is out: heartbeats may be applied again.
      lk.unlock();
      {
        std::lock_guard<std::mutex> hl(hb_mu);
        hb_fanout = false;
      }
      hb_cv.notify_all();
      lk.lock();
    }
    const std::string& id = sl.message->dump_request().incident_id();
    auto r = fanout_rounds.find(id);
    if (r != fanout_rounds.end()) r->second.cpu_ns += cpu;
    if (r != fanout_rounds.end() && --r->second.slices_left == 0) {
      last_fanout_seconds = double(mono_ns() - r->second.listed_mono) / 1e9;
      char line[200];
      std::snprintf(line, sizeof line,
                    "%zu dump request(s) handed to the node streams in %.3f s (%.3f s of CPU, "
                    "%.1f us per node)",
                    r->second.streams, last_fanout_seconds, double(r->second.cpu_ns) / 1e9,
                    double(r->second.cpu_ns) / 1e3 / double(std::max<size_t>(r->second.streams, 1)));
      log("frd coordinator: " + id + ": " + line);
      fanout_rounds.erase(r);
    }
  }
}

namespace {

// One heartbeat on its way from a stream to the state.
struct Arrived {
  NodeStream* stream;  // pinned
  std::unique_ptr<NodeMessage> message;
  int64_t t4 = 0;
  NodeReport report;
};

}  // namespace

// Heartbeats applied in batches: decoded outside every lock, then applied under one hold of mu.
void CoordinatorServer::Impl::applier_loop() {
  constexpr size_t kBatch = 64;
  constexpr int64_t kFanoutFirstNs = 2'000'000'000;
  std::vector<NodeStream*> ready;
  std::vector<Arrived> batch;
  std::vector<NodeStream*> superseded;
  std::unique_lock<std::mutex> lk(hb_mu);
  for (;;) {
    hb_cv.wait(lk, [&] { return hb_stopping || !hb_ready.empty(); });
    if (hb_ready.empty()) return;  // stopping, every pinned stream released
    // The fan-out's threads get the CPU first; a heartbeat waiting meanwhile can be replaced.
    if (hb_fanout && !hb_stopping)
      hb_cv.wait_for(lk, std::chrono::nanoseconds(kFanoutFirstNs),
                     [&] { return hb_stopping || !hb_fanout; });
    ready.swap(hb_ready);
    for (size_t i = 0; i < ready.size(); i += kBatch) {
      // Taken a batch at a time, so that what waits longer can still be replaced by newer.
      if (!lk.owns_lock()) lk.lock();
      for (size_t k = i; k < std::min(ready.size(), i + kBatch); ++k) {
        batch.push_back({ready[k], nullptr, 0, {}});
        batch.back().message = ready[k]->take_heartbeat(&batch.back().t4);
      }
      lk.unlock();
      for (auto& a : batch) a.report = from_proto(a.message->heartbeat());
      {
        std::lock_guard<std::mutex> g(mu);
        const int64_t at_once = state.stall_policy().report_at_once_ns();
        bool urgent = false;
        for (auto& a : batch) {
          for (const auto& p : a.report.processes)
            if ((!p.alive && !p.exited_cleanly) || p.oldest_age_ns() >= at_once) urgent = true;
          const uint64_t session = a.stream->session();
          if (!state.heartbeat(session, std::move(a.report), mono_ns())) {
            superseded.push_back(a.stream);
            continue;
          }
          const auto& hb = a.message->heartbeat();
          if (hb.has_echo() && hb.echo().t1_ns() != 0)
            state.clock_sample(session, hb.echo().t1_ns(), hb.echo().t2_ns(), hb.echo().t3_ns(),
                               a.t4);
        }
        if (urgent) {
          poke = true;
          tick_cv.notify_one();
        }
      }
      for (NodeStream* st : superseded)
        st->close(grpc::Status(grpc::StatusCode::ABORTED, "superseded by a newer connection"));
      superseded.clear();
      for (auto& a : batch) a.stream->unpin();
      batch.clear();
    }
    ready.clear();
    if (!lk.owns_lock()) lk.lock();
  }
}

void CoordinatorServer::Impl::ticker_loop() {
  // Pokes come in floods (every node's dump status after a fan-out), and a tick of 16k nodes holds
  // mu for milliseconds: poked ticks are at least this far apart.
  constexpr int64_t kMinGapNs = 20'000'000;
  std::unique_lock<std::mutex> lk(mu);
  int64_t last_trim = mono_ns();
  int64_t last_tick = 0;
  while (!stopping) {
    tick_cv.wait_for(lk, std::chrono::milliseconds(100), [&] { return stopping || poke; });
    if (stopping) break;
    int64_t since = mono_ns() - last_tick;
    if (since < kMinGapNs &&
        tick_cv.wait_for(lk, std::chrono::nanoseconds(kMinGapNs - since), [&] { return stopping; }))
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
