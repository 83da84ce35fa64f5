// The reactor of one node's control stream (server_impl.h), shared by the units that use it:
// server_streams.cpp (the service creates it), server_threads.cpp (the fan-out threads send to
// it, the applier takes its heartbeats). It reads the hello, hands heartbeats to the applier as
// the bytes they came in (the applier decodes them: wire.h), applies dump statuses, and writes
// what it is sent, already encoded, one message at a time, in order.
#pragma once

#include <deque>
#include <memory>
#include <mutex>

#include "daemon/server_impl.h"

namespace fr::daemon {

class NodeStream : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  NodeStream(CoordinatorServer::Impl* impl, grpc::CallbackServerContext* ctx)
      : impl_(impl), ctx_(ctx) {
    StartRead(&in_);
  }

  // Queues a message; called with impl->mu held, or pinned (or before the stream is known to
  // anyone).
  void send(const CoordinatorMessage& m) { send(to_wire(m)); }
  void send(std::shared_ptr<const grpc::ByteBuffer> m) {
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

  // Starts the read that on_heartbeat deferred during a fan-out; called pinned, from a fan-out
  // thread. The stream may be closed meanwhile: no read then. Finish is held back while the read
  // is being started (a read started after Finish could outlive the call), and the read's
  // reaction may run inside StartRead, so no lock is held across it.
  void resume_read() {
    {
      std::lock_guard<std::mutex> lk(wmu_);
      if (finished_ || finish_pending_ || done_) return;
      resuming_ = true;
    }
    StartRead(&in_);
    bool finish = false;
    {
      std::lock_guard<std::mutex> lk(wmu_);
      resuming_ = false;
      if (finish_pending_ && !writing_ && !finished_) finish = finished_ = true;
    }
    if (finish) Finish(final_status_);
  }

  // A stream whose read is deferred has no operation to fail when the call is cancelled.
  void OnCancel() override { close(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled")); }

  // The heartbeat waiting for the applier, taken with impl->hb_mu held.
  std::unique_ptr<grpc::ByteBuffer> take_heartbeat(int64_t* t4) {
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
    // A heartbeat goes to the applier as bytes; the rest is decoded here.
    if (starts_with_heartbeat(in_)) {
      if (on_heartbeat(now, t4)) StartRead(&in_);
      return;
    }
    NodeMessage m;
    if (!decode(in_, &m)) {
      close(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "a message that does not decode"));
      return;
    }
    bool keep_reading = true;
    switch (m.body_case()) {
      case NodeMessage::kHello: keep_reading = on_hello(m.hello(), now); break;
      case NodeMessage::kHeartbeat: keep_reading = on_heartbeat(now, t4); break;
      case NodeMessage::kDumpStatus: {
        std::lock_guard<std::mutex> lk(impl_->mu);
        const auto& d = m.dump_status();
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
      writing_ = false;
      if (resuming_) return;  // resume_read finishes it
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
    if (writing_ || resuming_) {
      finish_pending_ = true;
      final_status_ = std::move(st);
      ctx_->TryCancel();
      return;
    }
    finished_ = true;
    Finish(st);
  }

  bool on_hello(const fr::v1::Hello& h, int64_t now) {
    if (session_) {
      close(grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "hello sent twice"));
      return false;
    }
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
    send(w);
    send_ping();
    Actions a;
    impl_->state.resend_requests(s, &a);
    impl_->dispatch(a);
    return true;
  }

  // Hands the heartbeat to the applier (applier_loop) and reads on: decoding it and the state's
  // work happen there, off gRPC's threads. A heartbeat still waiting is replaced by this newer one.
  // While a fan-out is being sent, the next read waits for its end (reads_deferred).
  bool on_heartbeat(int64_t now, int64_t t4) {
    if (!session_) {
      close(grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "heartbeat before hello"));
      return false;
    }
    auto m = std::make_unique<grpc::ByteBuffer>();
    m->Swap(&in_);
    std::unique_ptr<grpc::ByteBuffer> replaced;  // freed outside the lock
    bool first, defer, wake = false;
    {
      std::lock_guard<std::mutex> lk(impl_->hb_mu);
      defer = impl_->hb_fanout && !impl_->hb_stopping;
      if (defer) {
        pin();
        impl_->reads_deferred.push_back(this);
      }
      first = !hb_;
      if (first) {
        pin();
        // Only the heartbeat that finds the queue empty wakes the applier: it takes them all.
        wake = impl_->hb_ready.empty();
        impl_->hb_ready.push_back(this);
      } else {
        impl_->heartbeats_replaced++;
      }
      replaced = std::move(hb_);
      hb_ = std::move(m);
      hb_t4_ = t4;
    }
    if (wake) impl_->hb_cv.notify_one();
    // A clock ping waits for the next heartbeat after a fan-out: the requests come first.
    if (!defer && (pings_ < 4 || now - last_ping_ >= 5'000'000'000)) send_ping();
    return !defer;
  }

  void send_ping() {
    CoordinatorMessage p;
    p.mutable_ping()->set_t1_ns(real_ns());
    last_ping_ = mono_ns();
    pings_++;
    send(p);
  }

  CoordinatorServer::Impl* impl_;
  grpc::CallbackServerContext* ctx_;
  grpc::ByteBuffer in_;  // what the pending read fills
  uint64_t session_ = 0;
  std::unique_ptr<grpc::ByteBuffer> hb_;  // the heartbeat waiting for the applier (impl->hb_mu)
  int64_t hb_t4_ = 0;                // ... and when it arrived (real time, for the clock)
  int64_t last_ping_ = 0;
  int pings_ = 0;
  std::mutex wmu_;
  std::deque<std::shared_ptr<const grpc::ByteBuffer>> out_;
  int pins_ = 0;
  bool done_ = false;
  bool writing_ = false;
  bool finished_ = false;
  bool finish_pending_ = false;
  bool resuming_ = false;  // resume_read is starting a read: Finish waits for it
  grpc::Status final_status_;
};

}  // namespace fr::daemon
