// The node stream's reactions (server_node_stream.h): reading the hello, heartbeats and dump
// statuses, writing the coordinator's messages in order, and ending the stream once.
#include "daemon/rpc/server_node_stream.h"

#include <algorithm>

#include "daemon/rpc/convert.h"

namespace fr::daemon {

void NodeStream::send(std::shared_ptr<const WireMessage> m) {
  // protocol_ is set by the hello, before the stream is known to anyone who sends to it.
  if (!m || !deliverable(*m, protocol_)) {
    held_back_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  std::lock_guard<RankedMutex> lk(wmu_);
  if (finished_ || finish_pending_ || done_) return;
  // A peer that does not read its commands gets dropped rather than grow our memory.
  if (out_.size() >= kMaxQueued) {
    close_locked(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "not reading commands"));
    return;
  }
  out_.push_back(std::move(m));
  if (!writing_) {
    writing_ = true;
    StartWrite(&out_.front()->bytes);
  }
}

void NodeStream::unpin() {
  bool last;
  {
    std::lock_guard<RankedMutex> lk(wmu_);
    last = --pins_ == 0 && done_;
  }
  if (last) delete this;
}

void NodeStream::resume_read() {
  {
    std::lock_guard<RankedMutex> lk(wmu_);
    if (finished_ || finish_pending_ || done_) return;
    resuming_ = true;
  }
  StartRead(&in_);
  bool finish = false;
  {
    std::lock_guard<RankedMutex> lk(wmu_);
    resuming_ = false;
    if (finish_pending_ && !writing_ && !finished_) finish = finished_ = true;
  }
  if (finish) Finish(final_status_);
}

void NodeStream::OnReadDone(bool ok) {
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
    case NodeMessage::kDumpStatus: on_dump_status(m.dump_status(), now); break;
    default:
      // A body this version does not know (a newer node's message) or none: counted and skipped,
      // as protocol 2 promises; before the hello the stream has nothing to skip it for.
      impl_->unknown_messages.fetch_add(1, std::memory_order_relaxed);
      if (!session_) {
        close(grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "a message before hello"));
        keep_reading = false;
      }
  }
  if (keep_reading) StartRead(&in_);
}

void NodeStream::OnWriteDone(bool ok) {
  std::lock_guard<RankedMutex> lk(wmu_);
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
    StartWrite(&out_.front()->bytes);
  } else {
    writing_ = false;
  }
}

void NodeStream::OnDone() {
  {
    std::lock_guard<RankedMutex> lk(impl_->mu);
    if (session_) {
      impl_->state.disconnect(session_, mono_ns());
      auto it = impl_->streams.find(session_);
      if (it != impl_->streams.end() && it->second == this) impl_->streams.erase(it);
    }
  }
  bool last;
  {
    std::lock_guard<RankedMutex> lk(wmu_);
    done_ = true;
    last = pins_ == 0;
  }
  if (last) delete this;
}

void NodeStream::close_locked(grpc::Status st) {
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

bool NodeStream::on_hello(const fr::v1::Hello& wire_hello, int64_t now) {
  if (session_) {
    close(grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "hello sent twice"));
    return false;
  }
  const NodeHello h = from_proto(wire_hello);
  std::string error;
  const uint32_t agreed = agree_protocol(h.protocol, &error);
  if (!agreed) {
    close(grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, error));
    return false;
  }
  std::lock_guard<RankedMutex> lk(impl_->mu);
  uint64_t s =
      impl_->state.connect(h.node_name, h.host, h.job_id, impl_->peer_auth(ctx_), now, &error);
  if (!s) {
    close(grpc::Status(grpc::StatusCode::PERMISSION_DENIED, error));
    return false;
  }
  session_ = s;
  protocol_ = agreed;
  impl_->streams[s] = this;
  CoordinatorMessage w;
  auto* welcome = w.mutable_welcome();
  welcome->set_coordinator_id(impl_->state.coordinator_id());
  welcome->set_job_id(impl_->cfg.job_id);
  welcome->set_heartbeat_interval_ms(uint32_t(impl_->cfg.heartbeat_interval_ns / 1'000'000));
  // Nodes report an op at once when it crosses the lowest threshold an op can have.
  welcome->set_stall_after_ms(uint32_t(std::min<int64_t>(
      impl_->state.stall_policy().report_at_once_ns() / 1'000'000, int64_t(UINT32_MAX))));
  welcome->set_upload_key(impl_->state.upload_key(s));
  welcome->set_protocol(agreed);
  send(w);
  send_ping();
  Actions a;
  impl_->state.resend_requests(s, &a);
  impl_->dispatch(a);
  return true;
}

void NodeStream::on_dump_status(const fr::v1::DumpStatus& wire_status, int64_t now) {
  const DumpStatusReport d = from_proto(wire_status);
  std::lock_guard<RankedMutex> lk(impl_->mu);
  impl_->state.dump_status(session_, d.incident_id, d.ok, d.error, now);
  impl_->poke = true;
  impl_->tick_cv.notify_one();
}

// Hands the heartbeat to the applier (applier_loop) and reads on: decoding it and the state's
// work happen there, off gRPC's threads. A heartbeat still waiting is replaced by this newer one.
// While a fan-out is being sent, the next read waits for its end (reads_deferred).
bool NodeStream::on_heartbeat(int64_t now, int64_t t4) {
  if (!session_) {
    close(grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "heartbeat before hello"));
    return false;
  }
  auto m = std::make_unique<grpc::ByteBuffer>();
  m->Swap(&in_);
  std::unique_ptr<grpc::ByteBuffer> replaced;  // freed outside the lock
  bool first, defer, wake = false;
  {
    std::lock_guard<RankedMutex> lk(impl_->queue_mu);
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

void NodeStream::send_ping() {
  CoordinatorMessage p;
  p.mutable_ping()->set_t1_ns(real_ns());
  last_ping_ = mono_ns();
  pings_++;
  send(p);
}

}  // namespace fr::daemon
