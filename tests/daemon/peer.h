// A node as a test plays it, from the generated gRPC client: it says Hello on its own stream,
// keeps the Welcome's upload key, heartbeats when told, and collects the dump requests it gets.
// Used to act as a real node (uploads must come from the connection that was asked) and as a
// hostile one. With it, the coordinator those tests run it against on loopback (loopback_config,
// loopback_options), and a real node daemon on a thread of its own (RunningNode). Header only: the tests that use it link the gRPC adapters already.
#pragma once

#include <grpcpp/grpcpp.h>

#include <cstdlib>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "daemon/rpc/client.h"
#include "daemon/rpc/convert.h"
#include "daemon/base/crc32c.h"
#include "daemon/rpc/node.h"
#include "daemon/rpc/server.h"
#include "fr/v1/frd.grpc.pb.h"
#include "testing/clock.h"

namespace fr::daemon::test {

// A coordinator for job "job1" dumping into `dumps`: stall after 2 s, nodes lost after 10 s of
// silence, dump sets due in 10 s, heartbeats asked every 200 ms.
inline CoordinatorConfig loopback_config(const std::string& dumps) {
  using fr::test::kSec;
  CoordinatorConfig c;
  c.dump_dir = dumps;
  c.job_id = "job1";
  c.stall_after_ns = 2 * kSec;
  c.heartbeat_timeout_ns = 10 * kSec;
  c.dump_deadline_ns = 10 * kSec;
  c.heartbeat_interval_ns = kSec / 5;
  return c;
}

// Its listener: an ephemeral port on loopback, quiet.
inline ServerOptions loopback_options() {
  ServerOptions o;
  o.listen = "127.0.0.1:0";
  o.quiet = true;
  return o;
}

// A node daemon on its own thread.
struct RunningNode {
  NodeDaemon daemon;
  std::thread thread;
  explicit RunningNode(NodeOptions o) : daemon(std::move(o)) {
    std::string err;
    if (!daemon.init(&err)) throw std::runtime_error("node init: " + err);
    thread = std::thread([this] { daemon.run(); });
  }
  ~RunningNode() {
    daemon.stop();
    thread.join();
  }
};

inline NodeOptions node_options(int port, const std::string& logs, const std::string& spool,
                                const std::string& name = "n0") {
  NodeOptions o;
  o.client.address = "127.0.0.1:" + std::to_string(port);
  o.log_dir = logs;
  o.node_name = name;
  o.spool_dir = spool;
  o.heartbeat_interval_ns = 200'000'000;
  o.stall_after_ns = 2'000'000'000;
  o.quiet = !getenv("FR_DEBUG");
  return o;
}

class Peer {
 public:
  // `protocol`: the version its Hello says (1 by default: a node of the first protocol).
  Peer(const ClientOptions& c, const std::string& name, const std::string& job = "",
       uint32_t protocol = 1)
      : stub_(fr::v1::Coordinator::NewStub(make_channel(c))) {
    add_auth(&ctx_, c);
    rw_ = stub_->Connect(&ctx_);
    fr::v1::NodeMessage m;
    m.mutable_hello()->set_protocol(protocol);
    m.mutable_hello()->set_node_name(name);
    m.mutable_hello()->set_host(name);
    m.mutable_hello()->set_job_id(job);
    rw_->Write(m);
    fr::v1::CoordinatorMessage in;
    if (rw_->Read(&in) && in.has_welcome()) {
      welcomed = true;
      key = in.welcome().upload_key();
      agreed = in.welcome().protocol();
      reader_ = std::thread([this] {
        fr::v1::CoordinatorMessage msg;
        while (rw_->Read(&msg))
          if (msg.has_dump_request()) {
            std::lock_guard<std::mutex> lk(mu_);
            requests_.push_back(msg.dump_request().incident_id());
          }
      });
    } else {
      finished_ = true;
      status = rw_->Finish();
    }
  }
  ~Peer() { close(); }

  // Ends the stream (the node goes away).
  void close() {
    if (finished_) return;
    finished_ = true;
    ctx_.TryCancel();
    if (reader_.joinable()) reader_.join();
    status = rw_->Finish();
  }

  // After the coordinator ended the stream: its status, as it sent it (close() cancels first).
  void wait_end() {
    if (finished_) return;
    finished_ = true;
    if (reader_.joinable()) reader_.join();
    status = rw_->Finish();
  }

  bool heartbeat(const NodeReport& r) {
    fr::v1::NodeMessage m;
    to_proto(r, m.mutable_heartbeat());
    std::lock_guard<std::mutex> lk(wmu_);
    return !finished_ && rw_->Write(m);
  }

  bool send(const fr::v1::NodeMessage& m) {
    std::lock_guard<std::mutex> lk(wmu_);
    return !finished_ && rw_->Write(m);
  }

  std::vector<std::string> requests() {
    std::lock_guard<std::mutex> lk(mu_);
    return requests_;
  }

  bool welcomed = false;
  std::string key;
  uint32_t agreed = 0;  // the Welcome's protocol (0: the coordinator named none)
  grpc::Status status;

 private:
  std::unique_ptr<fr::v1::Coordinator::Stub> stub_;
  grpc::ClientContext ctx_;
  std::unique_ptr<grpc::ClientReaderWriter<fr::v1::NodeMessage, fr::v1::CoordinatorMessage>> rw_;
  std::thread reader_;
  std::mutex mu_, wmu_;
  std::vector<std::string> requests_;
  bool finished_ = false;
};

// One file of a dump, with its bytes.
struct UploadFile {
  std::string name;
  std::string data;
};

// Uploads a dump in one go (header, then each file in one chunk). `cut_after` > 0: the stream
// is cancelled after that many bytes, as a node that dies mid-way.
inline grpc::Status upload(const ClientOptions& c, const std::string& incident,
                           const std::string& node, const std::string& key,
                           const std::vector<UploadFile>& files, fr::v1::UploadReply* reply,
                           size_t cut_after = 0, const std::string& job = "") {
  auto stub = fr::v1::Coordinator::NewStub(make_channel(c));
  grpc::ClientContext ctx;
  add_auth(&ctx, c);
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  auto w = stub->Upload(&ctx, reply);
  fr::v1::UploadChunk h;
  h.mutable_header()->set_incident_id(incident);
  h.mutable_header()->set_node_name(node);
  h.mutable_header()->set_upload_key(key);
  h.mutable_header()->set_job_id(job);
  for (const auto& f : files) {
    auto* fi = h.mutable_header()->add_files();
    fi->set_name(f.name);
    fi->set_size(f.data.size());
    fi->set_crc32c(crc32c(0, f.data.data(), f.data.size()));
  }
  w->Write(h);
  size_t sent = 0;
  for (uint32_t i = 0; i < files.size(); ++i) {
    std::string part = files[i].data;
    if (cut_after && sent + part.size() > cut_after) part = part.substr(0, cut_after - sent);
    fr::v1::UploadChunk d;
    d.mutable_data()->set_file_index(i);
    d.mutable_data()->set_offset(0);
    d.mutable_data()->set_data(part);
    if (!w->Write(d)) break;
    sent += part.size();
    if (cut_after && sent >= cut_after) {
      ctx.TryCancel();
      return w->Finish();
    }
  }
  w->WritesDone();
  return w->Finish();
}

}  // namespace fr::daemon::test
