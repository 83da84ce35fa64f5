// The protocol's version rules (daemon/base/model.h) held both ways on loopback: a node of the first
// protocol with this coordinator, this node with a coordinator of the first protocol (a fake one,
// from the generated service, that behaves as version 1 did), a node newer than both, one too old,
// and messages of a kind the receiver does not know, which are counted and skipped.
#include <catch2/catch.hpp>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "daemon/base/model.h"
#include "daemon/rpc/gate.h"
#include "daemon/rpc/node.h"
#include "daemon/rpc/server.h"
#include "daemon/rpc/wire.h"
#include "fixture.h"
#include "fr/v1/frd.grpc.pb.h"
#include "peer.h"
#include "testing/wait.h"

using namespace fr::daemon;
using fr::daemon::test::http_get;
using fr::daemon::test::loopback_config;
using fr::daemon::test::loopback_options;
using fr::daemon::test::node_options;
using fr::daemon::test::Peer;
using fr::daemon::test::RunningNode;
using fr::daemon::test::TempDir;
using fr::test::wait_for;

namespace {

ClientOptions client(int port) {
  ClientOptions c;
  c.address = "127.0.0.1:" + std::to_string(port);
  return c;
}

NodeReport one_process(const std::string& node) {
  NodeReport r;
  ProcessReport p;
  p.log = "fr." + node + ".0.frlog";
  p.rank = 0;
  p.world_size = 1;
  p.pid = 100;
  p.alive = true;
  p.job_id = "job1";
  p.host = node;
  r.processes.push_back(p);
  return r;
}

nlohmann::json node_status(CoordinatorServer& s, const std::string& name) {
  const nlohmann::json status = s.status();
  for (const auto& n : status["nodes"])
    if (n["name"] == name) return n;
  return nlohmann::json::object();
}

// A coordinator as protocol 1 was: it welcomes with no version, pings, counts heartbeats, and
// ends the stream on a message whose body it does not know.
class CoordinatorV1 final : public fr::v1::Coordinator::Service {
 public:
  grpc::Status Connect(
      grpc::ServerContext*,
      grpc::ServerReaderWriter<fr::v1::CoordinatorMessage, fr::v1::NodeMessage>* rw) override {
    fr::v1::NodeMessage m;
    if (!rw->Read(&m) || !m.has_hello())
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "no hello");
    hello_protocol = m.hello().protocol();
    fr::v1::CoordinatorMessage w;
    w.mutable_welcome()->set_coordinator_id("v1");
    w.mutable_welcome()->set_job_id("job1");
    w.mutable_welcome()->set_heartbeat_interval_ms(200);
    w.mutable_welcome()->set_stall_after_ms(2000);
    rw->Write(w);
    fr::v1::CoordinatorMessage p;
    p.mutable_ping()->set_t1_ns(real_ns());
    rw->Write(p);
    while (rw->Read(&m)) {
      switch (m.body_case()) {
        case fr::v1::NodeMessage::kHeartbeat: heartbeats++; break;
        case fr::v1::NodeMessage::kDumpStatus: break;
        default:
          unknown_seen = true;
          return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "empty or unknown message");
      }
    }
    return grpc::Status::OK;
  }
  std::atomic<uint32_t> hello_protocol{0};
  std::atomic<int> heartbeats{0};
  std::atomic<bool> unknown_seen{false};
};

}  // namespace

TEST_CASE("protocol: the agreed version is the lower one, below the oldest is refused",
          "[daemon][protocol]") {
  std::string err;
  CHECK(agree_protocol(1, &err) == 1);
  CHECK(agree_protocol(kProtocol, &err) == kProtocol);
  CHECK(agree_protocol(kProtocol + 5, &err) == kProtocol);
  CHECK(err.empty());
  CHECK(agree_protocol(0, &err) == 0);
  CHECK(err.find("protocol 0") != std::string::npos);
  // Every message of the first protocol may go to any peer that agreed on a version.
  for (uint32_t v = kMinProtocol; v <= kProtocol; ++v) {
    CHECK(may_send(NodeMessageKind::kHello, v));
    CHECK(may_send(NodeMessageKind::kHeartbeat, v));
    CHECK(may_send(NodeMessageKind::kDumpStatus, v));
    CHECK(may_send(CoordinatorMessageKind::kWelcome, v));
    CHECK(may_send(CoordinatorMessageKind::kPing, v));
    CHECK(may_send(CoordinatorMessageKind::kDumpRequest, v));
  }
  CHECK_FALSE(may_send(NodeMessageKind::kHeartbeat, 0));
}

TEST_CASE("protocol: nodes of the first protocol, this one's and a newer one's are welcomed",
          "[daemon][protocol]") {
  TempDir dumps;
  CoordinatorServer server(loopback_config(dumps.path), loopback_options());
  std::string err;
  REQUIRE(server.start(&err));
  struct Case {
    const char* name;
    uint32_t says;
    uint32_t agreed;
  };
  for (const Case& c : {Case{"old", 1, 1}, Case{"same", kProtocol, kProtocol},
                        Case{"newer", kProtocol + 7, kProtocol}}) {
    INFO(c.name);
    Peer p(client(server.port()), c.name, "", c.says);
    REQUIRE(p.welcomed);
    CHECK(p.agreed == c.agreed);
    REQUIRE(p.heartbeat(one_process(c.name)));
    CHECK(wait_for([&] { return node_status(server, c.name).value("heartbeats", 0) == 1; }, 10));
  }
  // A hello that names no version (0) is below the oldest: refused, with the reason.
  Peer none(client(server.port()), "none", "", 0);
  CHECK_FALSE(none.welcomed);
  CHECK(none.status.error_code() == grpc::StatusCode::FAILED_PRECONDITION);
  CHECK(none.status.error_message().find("protocol 0") != std::string::npos);
}

TEST_CASE("protocol: a message of a kind the coordinator does not know is counted and skipped",
          "[daemon][protocol]") {
  TempDir dumps;
  ServerOptions so = loopback_options();
  so.metrics_listen = "127.0.0.1:0";
  CoordinatorServer server(loopback_config(dumps.path), so);
  std::string err;
  REQUIRE(server.start(&err));
  Peer p(client(server.port()), "n1", "", kProtocol);
  REQUIRE(p.welcomed);
  // A newer node's message: a body field this version has no case for, and an empty message.
  fr::v1::NodeMessage future;
  future.GetReflection()->MutableUnknownFields(&future)->AddLengthDelimited(40, "later");
  REQUIRE(p.send(future));
  REQUIRE(p.send(fr::v1::NodeMessage()));
  REQUIRE(p.heartbeat(one_process("n1")));
  CHECK(wait_for([&] { return node_status(server, "n1").value("heartbeats", 0) == 1; }, 10));
  CHECK(node_status(server, "n1")["connected"] == true);
  const std::string m = http_get(server.metrics_port(), "/metrics");
  CHECK(m.find("frd_unknown_messages_total 2") != std::string::npos);
  // Before the hello there is no stream to skip it for: the stream ends.
  auto stub = fr::v1::Coordinator::NewStub(make_channel(client(server.port())));
  grpc::ClientContext ctx;
  auto rw = stub->Connect(&ctx);
  rw->Write(future);
  fr::v1::CoordinatorMessage in;
  while (rw->Read(&in)) {
  }
  CHECK(rw->Finish().error_code() == grpc::StatusCode::FAILED_PRECONDITION);
}

TEST_CASE("protocol: this node with a coordinator of the first protocol speaks the first",
          "[daemon][protocol]") {
  CoordinatorV1 v1;
  grpc::ServerBuilder b;
  int port = 0;
  b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  b.RegisterService(&v1);
  std::unique_ptr<grpc::Server> server = b.BuildAndStart();
  REQUIRE(server);
  REQUIRE(port > 0);
  TempDir logs, spool;
  {
    RunningNode node(node_options(port, logs.path, spool.path));
    REQUIRE(wait_for([&] { return v1.heartbeats.load() >= 3; }, 20));
    CHECK(v1.hello_protocol == kProtocol);
    CHECK(node.daemon.protocol() == 1);
    CHECK_FALSE(v1.unknown_seen);
  }
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
}

TEST_CASE("protocol: this node and this coordinator agree on this version", "[daemon][protocol]") {
  TempDir dumps, logs, spool;
  CoordinatorServer server(loopback_config(dumps.path), loopback_options());
  std::string err;
  REQUIRE(server.start(&err));
  RunningNode node(node_options(server.port(), logs.path, spool.path));
  REQUIRE(wait_for([&] { return node.daemon.protocol() != 0; }, 20));
  CHECK(node.daemon.protocol() == kProtocol);
  CHECK(wait_for([&] { return node_status(server, "n0").value("heartbeats", 0) >= 2; }, 20));
}

namespace {

// The message list with one message more, at the version after this one: field 40 of either
// side's oneof, which this build's frd.proto does not have (as a later version's would).
constexpr int kFutureField = 40;

struct FutureRows {
  std::vector<MessageRow> rows;
  explicit FutureRows(MessageRows real) : rows(real.rows, real.rows + real.count) {
    rows.push_back({kFutureField, kProtocol + 1});
  }
  MessageRows view() const { return {rows.data(), rows.size()}; }
};

template <class Message>
Message future_message() {
  Message m;
  m.GetReflection()->MutableUnknownFields(&m)->AddLengthDelimited(kFutureField, "later");
  return m;
}

}  // namespace

TEST_CASE("protocol: the message list has every body of frd.proto, and kind_of follows it",
          "[daemon][protocol]") {
  auto check = [](const google::protobuf::Descriptor* d, MessageRows rows) {
    const auto* body = d->FindOneofByName("body");
    REQUIRE(body);
    CHECK(size_t(body->field_count()) == rows.count);
    for (int i = 0; i < body->field_count(); ++i) {
      INFO(d->name() << "." << body->field(i)->name());
      CHECK(rows.since(body->field(i)->number()) >= kMinProtocol);
      CHECK(rows.since(body->field(i)->number()) <= kProtocol);
    }
  };
  check(fr::v1::NodeMessage::descriptor(), node_messages());
  check(fr::v1::CoordinatorMessage::descriptor(), coordinator_messages());
  fr::v1::NodeMessage m;
  m.mutable_dump_status()->set_incident_id("i");
  CHECK(kind_of(m) == NodeMessageKind::kDumpStatus);
  m.mutable_hello();
  CHECK(kind_of(m) == NodeMessageKind::kHello);
  fr::v1::CoordinatorMessage c;
  c.mutable_ping();
  CHECK(kind_of(c) == CoordinatorMessageKind::kPing);
  // No body, a body this build cannot name, a body beside unknown fields: no kind, never sent
  // (the node's kind_of took any of them for a heartbeat, and sent it at every version).
  const fr::v1::NodeMessage none, future = future_message<fr::v1::NodeMessage>();
  fr::v1::NodeMessage mixed = future;
  mixed.mutable_heartbeat()->set_seq(1);
  for (const fr::v1::NodeMessage* bad :
       {&none, &future, static_cast<const fr::v1::NodeMessage*>(&mixed)}) {
    CHECK_FALSE(kind_of(*bad).has_value());
    for (uint32_t v = 0; v <= kProtocol + 1; ++v) CHECK_FALSE(may_send(*bad, v));
  }
  CHECK_FALSE(kind_of(fr::v1::CoordinatorMessage()).has_value());
  CHECK_FALSE(deliverable(*to_wire(fr::v1::CoordinatorMessage()), kProtocol));
}

TEST_CASE("protocol: a message added at a new version never goes to a peer of an older one",
          "[daemon][protocol]") {
  const FutureRows node_rows(node_messages()), coordinator_rows(coordinator_messages());
  // The node's side: sent only once both agreed on the new version.
  const auto future = future_message<fr::v1::NodeMessage>();
  for (uint32_t v = 0; v <= kProtocol; ++v) CHECK_FALSE(may_send(future, v, node_rows.view()));
  CHECK(may_send(future, kProtocol + 1, node_rows.view()));
  // The coordinator's side: encoded once with its version, delivered only to a node that agreed
  // on it (NodeStream::send asks deliverable()).
  const auto wire = to_wire(future_message<fr::v1::CoordinatorMessage>(), coordinator_rows.view());
  CHECK(wire->since == kProtocol + 1);
  for (uint32_t v = 0; v <= kProtocol; ++v) CHECK_FALSE(deliverable(*wire, v));
  CHECK(deliverable(*wire, kProtocol + 1));
  fr::v1::CoordinatorMessage ping;
  ping.mutable_ping();
  CHECK(deliverable(*to_wire(ping, coordinator_rows.view()), 1));

  // On the wire: a node of the new version with this coordinator (which speaks kProtocol, an
  // older peer for it) sends through the check; the coordinator never receives the message.
  TempDir dumps;
  ServerOptions so = loopback_options();
  so.metrics_listen = "127.0.0.1:0";
  CoordinatorServer server(loopback_config(dumps.path), so);
  std::string err;
  REQUIRE(server.start(&err));
  Peer p(client(server.port()), "n1", "", kProtocol + 1);
  REQUIRE(p.welcomed);
  REQUIRE(p.agreed == kProtocol);
  bool sent = false;
  if (may_send(future, p.agreed, node_rows.view())) sent = p.send(future);
  CHECK_FALSE(sent);
  REQUIRE(p.heartbeat(one_process("n1")));
  REQUIRE(wait_for([&] { return node_status(server, "n1").value("heartbeats", 0) == 1; }, 10));
  CHECK(http_get(server.metrics_port(), "/metrics").find("frd_unknown_messages_total 0") !=
        std::string::npos);
  // Unchecked, as the node's old kind_of let it go (as a heartbeat), the older peer gets it.
  REQUIRE(p.send(future));
  REQUIRE(p.heartbeat(one_process("n1")));
  REQUIRE(wait_for([&] { return node_status(server, "n1").value("heartbeats", 0) == 2; }, 10));
  CHECK(http_get(server.metrics_port(), "/metrics").find("frd_unknown_messages_total 1") !=
        std::string::npos);
}
