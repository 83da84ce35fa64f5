// The reactor of one node's control stream (server_impl.h), shared by the units that use it:
// server_streams.cpp (the service creates it), server_threads.cpp (the fan-out threads send to
// it, the applier takes its heartbeats). It reads the hello (and agrees on the protocol version,
// daemon/base/model.h), hands heartbeats to the applier as the bytes they came in (the applier decodes
// them: wire.h), applies dump statuses, counts and skips messages it does not know, and writes
// what it is sent, already encoded, one message at a time, in order. The reactor's reactions are
// in server_node_stream.cpp.
#pragma once

#include <atomic>
#include <deque>
#include <memory>
#include <mutex>

#include "daemon/rpc/server_impl.h"

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
  // Every message to the node goes out here, and only when the version agreed with it has the
  // message's kind (gate.h): an older node never receives a newer message. One held back is
  // counted (held_back()).
  void send(std::shared_ptr<const WireMessage> m);
  uint64_t held_back() const { return held_back_.load(std::memory_order_relaxed); }

  // A fan-out thread holds the stream alive while it sends to it: pin() with impl->mu held while
  // the stream is registered, unpin() when done with it (the last one out deletes it).
  void pin() {
    std::lock_guard<RankedMutex> lk(wmu_);
    pins_++;
  }
  void unpin();

  void close(grpc::Status st) {
    std::lock_guard<RankedMutex> lk(wmu_);
    close_locked(std::move(st));
  }

  // Starts the read that on_heartbeat deferred during a fan-out; called pinned, from a fan-out
  // thread. The stream may be closed meanwhile: no read then. Finish is held back while the read
  // is being started (a read started after Finish could outlive the call), and the read's
  // reaction may run inside StartRead, so no lock is held across it.
  void resume_read();

  // A stream whose read is deferred has no operation to fail when the call is cancelled.
  void OnCancel() override { close(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled")); }

  // The heartbeat waiting for the applier, taken with impl->queue_mu held.
  std::unique_ptr<grpc::ByteBuffer> take_heartbeat(int64_t* t4) {
    *t4 = hb_t4_;
    return std::move(hb_);
  }
  // Set once, by the hello, before any heartbeat is handed over.
  uint64_t session() const { return session_; }
  // The protocol version agreed with the node (0 before its hello).
  uint32_t protocol() const { return protocol_; }

  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override;
  void OnDone() override;

 private:
  static constexpr size_t kMaxQueued = 256;

  void close_locked(grpc::Status st);
  bool on_hello(const fr::v1::Hello& h, int64_t now);
  bool on_heartbeat(int64_t now, int64_t t4);
  void on_dump_status(const fr::v1::DumpStatus& d, int64_t now);
  void send_ping();

  CoordinatorServer::Impl* impl_;
  grpc::CallbackServerContext* ctx_;
  grpc::ByteBuffer in_;  // what the pending read fills
  uint64_t session_ = 0;
  uint32_t protocol_ = 0;
  std::unique_ptr<grpc::ByteBuffer> hb_;  // the heartbeat waiting for the applier (impl->queue_mu)
  int64_t hb_t4_ = 0;                     // ... and when it arrived (real time, for the clock)
  int64_t last_ping_ = 0;
  int pings_ = 0;
  RankedMutex wmu_{lock_order::kStreamWrite, "NodeStream::wmu"};
  std::deque<std::shared_ptr<const WireMessage>> out_;
  std::atomic<uint64_t> held_back_{0};
  int pins_ = 0;
  bool done_ = false;
  bool writing_ = false;
  bool finished_ = false;
  bool finish_pending_ = false;
  bool resuming_ = false;  // resume_read is starting a read: Finish waits for it
  grpc::Status final_status_;
};

}  // namespace fr::daemon
