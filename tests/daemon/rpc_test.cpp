// The gRPC adapters on loopback: a node and a coordinator find a stall and write the dump set;
// manual dumps and status; the token; TLS refusal paths; hostile peers (garbage bytes, oversized
// and out-of-order messages, path tricks in uploads); metrics over HTTP; a restarted coordinator
// receiving the dumps a node kept.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "daemon/logic/assembly.h"
#include "common/files.h"
#include "daemon/rpc/client.h"
#include "daemon/base/crc32c.h"
#include "daemon/rpc/node.h"
#include "daemon/rpc/server.h"
#include "fixture.h"
#include "fr/v1/frd.grpc.pb.h"
#include "skip.h"
#include "peer.h"
#include "testing/clock.h"
#include "testing/files.h"
#include "testing/wait.h"

using namespace fr::daemon;
using fr::daemon::test::FakeLog;
using fr::daemon::test::FakeOp;
using fr::daemon::test::loopback_config;
using fr::daemon::test::loopback_options;
using fr::daemon::test::node_options;
using fr::daemon::test::RunningNode;
using fr::daemon::test::TempDir;
using fr::test::exists;
using fr::test::kSec;
using fr::test::slurp;
using fr::test::wait_for;

namespace {

ClientOptions client(int port) {
  ClientOptions c;
  c.address = "127.0.0.1:" + std::to_string(port);
  return c;
}

int connected_nodes(CoordinatorServer& s) {
  int n = 0;
  auto st = s.status();
  for (const auto& node : st["nodes"]) n += node["connected"].get<bool>();
  if (getenv("FR_DEBUG")) fprintf(stderr, "%s\n", st.dump().c_str());
  return n;
}

void write_two_ranks(const std::string& logs, int64_t stalled_for_ns) {
  FakeLog r0;
  r0.rank = 0;
  r0.pid = 11;
  r0.ops = {{FR_OP_ALLREDUCE, 1, 1, 10 * kSec, true, false},
            {FR_OP_ALLREDUCE, 2, 2, stalled_for_ns, stalled_for_ns == 0, false}};
  FakeLog r1 = r0;
  r1.rank = 1;
  r1.pid = 12;
  r1.ops = {{FR_OP_ALLREDUCE, 1, 1, 10 * kSec, true, false}};
  fr::daemon::test::write_log(logs, "fr.job1.r0.frlog", r0);
  fr::daemon::test::write_log(logs, "fr.job1.r1.frlog", r1);
}

// A dump a node took for `job`/`incident` and has not delivered: one file, rank 0's log.
void spool_entry(const std::string& spool, const std::string& job, const std::string& incident,
                 const std::string& log_file, const std::string& file_name) {
  std::string err;
  std::string d = spool + "/" + job + "/" + incident;
  REQUIRE(fr::files::make_dirs(d, &err));
  std::string bytes = slurp(log_file);
  std::ofstream(d + "/" + file_name, std::ios::binary) << bytes;
  nlohmann::json h = {{"incident_id", incident},
                      {"node_name", "n0"},
                      {"job_id", job},
                      {"snapshot_time_ns", 1},
                      {"files",
                       {{{"name", file_name},
                         {"size", bytes.size()},
                         {"crc32c", crc32c(0, bytes.data(), bytes.size())}}}},
                      {"processes",
                       {{{"rank", 0},
                         {"world_size", 2},
                         {"pid", 11},
                         {"host", "n0"},
                         {"job_id", job},
                         {"file", file_name},
                         {"source", "x"},
                         {"alive", true},
                         {"records", 2},
                         {"overwritten", 0},
                         {"torn", 0}}}},
                      {"skipped", nlohmann::json::array()}};
  std::ofstream(d + "/dump.json") << h.dump();
}

nlohmann::json read_json(const std::string& path) {
  return nlohmann::json::parse(slurp(path), nullptr, false);
}

int count_frlogs(const std::string& dir) {
  int n = 0;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      std::string name = e->d_name;
      n += name.size() > 6 && name.compare(name.size() - 6, 6, ".frlog") == 0;
    }
    closedir(d);
  }
  return n;
}

}  // namespace

TEST_CASE("a stall seen by a node becomes a written dump set", "[daemon][rpc]") {
  TempDir logs, dumps, spool;
  write_two_ranks(logs.path, 5 * kSec);
  CoordinatorServer server(loopback_config(dumps.path), loopback_options());
  std::string err;
  REQUIRE(server.start(&err));
  RunningNode node(node_options(server.port(), logs.path, spool.path));

  std::string dir = dumps.path + "/job1/incident-0001";
  REQUIRE(wait_for([&] { return exists(dir + "/analysis.json"); }));
  auto manifest = nlohmann::json::parse(slurp(dir + "/manifest.json"));
  CHECK(manifest["source"] == "frd coordinator");
  CHECK(manifest["job_id"] == "job1");
  REQUIRE(manifest["processes"].size() == 2);
  for (const auto& p : manifest["processes"]) {
    std::string f = p["file"];
    CHECK(f.rfind("n0-", 0) == 0);
    CHECK(exists(dir + "/" + f));
    CHECK(p["host"] == "n0");
  }
  REQUIRE(manifest["nodes"].size() == 1);
  CHECK(manifest["nodes"][0]["host"] == "n0");
  CHECK(exists(dir + "/report.txt"));
  CHECK(exists(dir + "/incident.json"));
  auto inc = nlohmann::json::parse(slurp(dir + "/incident.json"));
  CHECK(inc["kind"] == "stall");

  auto st = server.status();
  REQUIRE(st["incidents"].size() == 1);
  CHECK(st["incidents"][0]["kind"] == "stall");
  CHECK(st["incidents"][0]["uploaded"] == 1);
  // The node drops its copy once delivered.
  CHECK(wait_for([&] { return !exists(spool.path + "/job1/incident-0001"); }, 10));
  // Still one incident while the hang lasts: three more heartbeats, each still reporting it.
  const uint64_t beats = server.status()["nodes"][0]["heartbeats"].get<uint64_t>();
  REQUIRE(wait_for(
      [&] { return server.status()["nodes"][0]["heartbeats"].get<uint64_t>() >= beats + 3; }, 10));
  CHECK(server.status()["incidents"].size() == 1);

  // The op completes: the incident closes as transient.
  write_two_ranks(logs.path, 0);
  CHECK(
      wait_for([&] { return server.status()["incidents"][0]["state"] == "closed_transient"; }, 10));
}

TEST_CASE("status and a manual dump over the wire", "[daemon][rpc]") {
  TempDir logs, dumps, spool;
  write_two_ranks(logs.path, 0);
  CoordinatorServer server(loopback_config(dumps.path), loopback_options());
  std::string err;
  REQUIRE(server.start(&err));
  RunningNode node(node_options(server.port(), logs.path, spool.path));
  REQUIRE(wait_for([&] { return connected_nodes(server) == 1; }));

  nlohmann::json st;
  REQUIRE(wait_for(
      [&] { return fetch_status(client(server.port()), &st, &err) && st["ranks"]["alive"] == 2; }));
  CHECK(st["nodes"][0]["name"] == "n0");
  CHECK(render_status(st).find("node n0") != std::string::npos);

  std::string id;
  REQUIRE(trigger_dump(client(server.port()), "operator asked", &id, &err));
  CHECK(id == "incident-0001");
  REQUIRE(wait_for([&] { return exists(dumps.path + "/job1/" + id + "/analysis.json"); }));
  // On one machine the true offset is 0, and the estimate is off by at most half the round trip
  // of the sample it came from.
  const nlohmann::json status_now = server.status();
  const auto& n0 = status_now["nodes"][0];
  REQUIRE(n0["clock_rtt_ns"].get<int64_t>() >= 0);
  CHECK(std::abs(n0["clock_offset_ns"].get<int64_t>()) <=
        n0["clock_rtt_ns"].get<int64_t>() / 2 + 1);

  ClientOptions nowhere;
  nowhere.address = "127.0.0.1:1";
  CHECK_FALSE(fetch_status(nowhere, &st, &err));
  CHECK(!err.empty());
}

TEST_CASE(
    "the token is required when set, and off loopback (a wrong token joins no node in 800 ms)",
    "[daemon][rpc]") {
  TempDir logs, dumps, spool;
  write_two_ranks(logs.path, 0);
  ServerOptions so = loopback_options();
  so.token = "s3cret-token";
  CoordinatorServer server(loopback_config(dumps.path), so);
  std::string err;
  REQUIRE(server.start(&err));

  nlohmann::json st;
  CHECK_FALSE(fetch_status(client(server.port()), &st, &err));
  CHECK(err.find("token") != std::string::npos);
  ClientOptions wrong = client(server.port());
  wrong.token = "s3cret-tokem";
  CHECK_FALSE(fetch_status(wrong, &st, &err));
  std::string id;
  CHECK_FALSE(trigger_dump(wrong, "x", &id, &err));
  ClientOptions right = client(server.port());
  right.token = "s3cret-token";
  CHECK(fetch_status(right, &st, &err));

  {
    NodeOptions no = node_options(server.port(), logs.path, spool.path);
    no.client.token = "wrong";
    RunningNode bad(no);
    std::this_thread::sleep_for(std::chrono::milliseconds(800));
    CHECK(server.status()["nodes"].empty());
  }
  NodeOptions no = node_options(server.port(), logs.path, spool.path);
  no.client.token = "s3cret-token";
  RunningNode good(no);
  CHECK(wait_for([&] { return connected_nodes(server) == 1; }));

  ServerOptions open = loopback_options();
  open.listen = "0.0.0.0:0";
  CoordinatorServer exposed(loopback_config(dumps.path), open);
  CHECK_FALSE(exposed.start(&err));
  CHECK(err.find("token") != std::string::npos);
  open.token = "t";
  CoordinatorServer exposed_ok(loopback_config(dumps.path), open);
  CHECK(exposed_ok.start(&err));

  ServerOptions half = loopback_options();
  half.tls_cert = "not a certificate";
  CoordinatorServer half_tls(loopback_config(dumps.path), half);
  CHECK_FALSE(half_tls.start(&err));
}

TEST_CASE("hostile peers cannot crash, stall or fill the coordinator", "[daemon][rpc]") {
  TempDir dumps;
  CoordinatorServer server(loopback_config(dumps.path), loopback_options());
  std::string err;
  REQUIRE(server.start(&err));
  const int port = server.port();
  nlohmann::json st;

  SECTION("garbage bytes on the socket") {
    for (int i = 0; i < 20; ++i) {
      int fd = socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_port = htons(uint16_t(port));
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      REQUIRE(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
      std::string junk(4096 * (i + 1), char(i * 37));
      (void)!write(fd, junk.data(), junk.size());
      close(fd);
    }
    CHECK(fetch_status(client(port), &st, &err));
  }

  auto stub = fr::v1::Coordinator::NewStub(make_channel(client(port)));

  SECTION("an oversized message is refused and the stream dropped") {
    grpc::ClientContext ctx;
    auto rw = stub->Connect(&ctx);
    fr::v1::NodeMessage m;
    m.mutable_hello()->set_node_name("big");
    rw->Write(m);
    fr::v1::NodeMessage big;
    big.mutable_heartbeat()->add_unreadable(std::string(6 << 20, 'x'));
    rw->Write(big);
    fr::v1::CoordinatorMessage in;
    while (rw->Read(&in)) {
    }
    grpc::Status s = rw->Finish();
    CHECK_FALSE(s.ok());
    CHECK(fetch_status(client(port), &st, &err));
  }

  SECTION("messages out of order end the stream") {
    grpc::ClientContext ctx;
    auto rw = stub->Connect(&ctx);
    fr::v1::NodeMessage hb;
    hb.mutable_heartbeat()->set_seq(1);
    rw->Write(hb);
    fr::v1::CoordinatorMessage in;
    while (rw->Read(&in)) {
    }
    CHECK(rw->Finish().error_code() == grpc::StatusCode::FAILED_PRECONDITION);
    CHECK(server.status()["nodes"].empty());
  }

  SECTION("hostile names are sanitized") {
    grpc::ClientContext ctx;
    auto rw = stub->Connect(&ctx);
    fr::v1::NodeMessage m;
    m.mutable_hello()->set_protocol(1);
    m.mutable_hello()->set_node_name("../../etc/\x01passwd");
    rw->Write(m);
    fr::v1::CoordinatorMessage in;
    REQUIRE(rw->Read(&in));
    CHECK(in.has_welcome());
    std::string name = server.status()["nodes"][0]["name"];
    CHECK(name.find('/') == std::string::npos);
    CHECK(name[0] != '.');
    ctx.TryCancel();
    rw->Finish();
  }

  SECTION("uploads cannot escape the dump directory") {
    std::string id;
    REQUIRE(trigger_dump(client(port), "x", &id, &err));
    for (std::string name : {"../../escape.frlog", "../escape.frlog", "/tmp/escape.frlog"}) {
      grpc::ClientContext ctx;
      fr::v1::UploadReply reply;
      auto w = stub->Upload(&ctx, &reply);
      fr::v1::UploadChunk c;
      c.mutable_header()->set_incident_id(id);
      c.mutable_header()->set_node_name("evil");
      auto* f = c.mutable_header()->add_files();
      f->set_name(name);
      f->set_size(4);
      w->Write(c);
      fr::v1::UploadChunk d;
      d.mutable_data()->set_data("evil");
      w->Write(d);
      w->WritesDone();
      grpc::Status s = w->Finish();
      CHECK(s.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
      CHECK(s.error_message().find("refused file name") != std::string::npos);
    }
    CHECK_FALSE(exists(dumps.path + "/escape.frlog"));
    CHECK_FALSE(exists(dumps.path + "/job1/escape.frlog"));
    CHECK_FALSE(exists("/tmp/escape.frlog"));

    // A declared size larger than the bound is refused before any byte is written.
    grpc::ClientContext ctx;
    fr::v1::UploadReply reply;
    auto w = stub->Upload(&ctx, &reply);
    fr::v1::UploadChunk c;
    c.mutable_header()->set_incident_id(id);
    c.mutable_header()->set_node_name("evil");
    auto* f = c.mutable_header()->add_files();
    f->set_name("evil-rank0.frlog");
    f->set_size(uint64_t(1) << 40);
    w->Write(c);
    w->WritesDone();
    grpc::Status s = w->Finish();
    CHECK_FALSE(s.ok());
    CHECK(s.error_message().find("too large") != std::string::npos);
  }

  SECTION("an upload cut off midway leaves nothing, and a full one then succeeds") {
    fr::daemon::test::Peer n5(client(port), "n5");
    std::string id;
    REQUIRE(trigger_dump(client(port), "x", &id, &err));
    std::string data(100000, 'd');
    auto start = [&](grpc::ClientContext* ctx, fr::v1::UploadReply* reply) {
      auto w = stub->Upload(ctx, reply);
      fr::v1::UploadChunk c;
      c.mutable_header()->set_incident_id(id);
      c.mutable_header()->set_node_name("n5");
      c.mutable_header()->set_upload_key(n5.key);
      auto* f = c.mutable_header()->add_files();
      f->set_name("n5-rank0.frlog");
      f->set_size(data.size());
      f->set_crc32c(crc32c(0, data.data(), data.size()));
      w->Write(c);
      return w;
    };
    {
      grpc::ClientContext ctx;
      fr::v1::UploadReply reply;
      auto w = start(&ctx, &reply);
      fr::v1::UploadChunk d;
      d.mutable_data()->set_data(data.substr(0, 30000));
      w->Write(d);
      ctx.TryCancel();  // the node dies here
      w->Finish();
    }
    std::string dir = dumps.path + "/job1/" + id;
    REQUIRE(wait_for(
        [&] {
          bool clean = true;
          if (DIR* d = opendir(dir.c_str())) {
            while (dirent* e = readdir(d)) clean &= std::string(e->d_name).rfind(".upload", 0) != 0;
            closedir(d);
          }
          return clean;
        },
        10));
    CHECK_FALSE(exists(dir + "/n5-rank0.frlog"));
    // The coordinator removes the cut upload's files, then gives its slot back: a retry in between
    // is told the upload is still in progress (RESOURCE_EXHAUSTED, which a node retries), so this
    // one retries too, for a bounded time.
    fr::v1::UploadReply reply;
    grpc::Status fin;
    REQUIRE(wait_for(
        [&] {
          grpc::ClientContext ctx;
          reply.Clear();
          auto w = start(&ctx, &reply);
          fr::v1::UploadChunk d;
          d.mutable_data()->set_data(data);
          w->Write(d);
          w->WritesDone();
          fin = w->Finish();
          return fin.error_code() != grpc::StatusCode::RESOURCE_EXHAUSTED;
        },
        10));
    INFO(fin.error_message());
    REQUIRE(fin.ok());
    CHECK(reply.ok());
    CHECK_FALSE(reply.duplicate());
    CHECK(slurp(dir + "/n5-rank0.frlog") == data);
  }

  SECTION("a bad checksum is refused") {
    fr::daemon::test::Peer n9(client(port), "n9");
    std::string id;
    REQUIRE(trigger_dump(client(port), "x", &id, &err));
    grpc::ClientContext ctx;
    fr::v1::UploadReply reply;
    auto w = stub->Upload(&ctx, &reply);
    fr::v1::UploadChunk c;
    c.mutable_header()->set_incident_id(id);
    c.mutable_header()->set_node_name("n9");
    c.mutable_header()->set_upload_key(n9.key);
    auto* f = c.mutable_header()->add_files();
    f->set_name("n9-rank0.frlog");
    f->set_size(4);
    f->set_crc32c(crc32c(0, "good", 4));
    w->Write(c);
    fr::v1::UploadChunk d;
    d.mutable_data()->set_data("evil");
    w->Write(d);
    w->WritesDone();
    CHECK(w->Finish().error_code() == grpc::StatusCode::DATA_LOSS);
    CHECK_FALSE(exists(dumps.path + "/job1/" + id + "/n9-rank0.frlog"));
  }
  CHECK(fetch_status(client(port), &st, &err));
}

TEST_CASE("metrics are served as Prometheus text", "[daemon][rpc]") {
  TempDir dumps;
  ServerOptions so = loopback_options();
  so.metrics_listen = "127.0.0.1:0";
  CoordinatorServer server(loopback_config(dumps.path), so);
  std::string err;
  REQUIRE(server.start(&err));
  REQUIRE(server.metrics_port() > 0);
  auto get = [&](const std::string& path) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(uint16_t(server.metrics_port()));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    std::string req = "GET " + path + " HTTP/1.0\r\n\r\n";
    REQUIRE(write(fd, req.data(), req.size()) == ssize_t(req.size()));
    std::string resp;
    char buf[4096];
    ssize_t n;
    while ((n = read(fd, buf, sizeof buf)) > 0) resp.append(buf, size_t(n));
    close(fd);
    return resp;
  };
  std::string m = get("/metrics");
  CHECK(m.rfind("HTTP/1.1 200", 0) == 0);
  CHECK(m.find("frd_nodes{state=\"connected\"} 0") != std::string::npos);
  CHECK(m.find("frd_incidents_open 0") != std::string::npos);
  CHECK(get("/nope").rfind("HTTP/1.1 404", 0) == 0);
  // A client that connects and says nothing does not block the next scrape for long.
  int idle = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(server.metrics_port()));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(connect(idle, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  CHECK(get("/metrics").rfind("HTTP/1.1 200", 0) == 0);
  close(idle);
}

TEST_CASE("a restarted coordinator receives the dumps a node kept", "[daemon][rpc]") {
  TempDir logs, dumps, spool;
  write_two_ranks(logs.path, 0);
  // The previous coordinator opened incident-0001 and went away before the node could deliver.
  std::string err;
  REQUIRE(fr::files::make_dirs(dumps.path + "/job1/incident-0001", &err));
  {
    std::string d = spool.path + "/job1/incident-0001";
    REQUIRE(fr::files::make_dirs(d, &err));
    std::string bytes = slurp(logs.path + "/fr.job1.r0.frlog");
    std::ofstream(d + "/n0-rank0.n0.11.frlog", std::ios::binary) << bytes;
    nlohmann::json h = {{"incident_id", "incident-0001"},
                        {"node_name", "n0"},
                        {"snapshot_time_ns", 1},
                        {"files",
                         {{{"name", "n0-rank0.n0.11.frlog"},
                           {"size", bytes.size()},
                           {"crc32c", crc32c(0, bytes.data(), bytes.size())}}}},
                        {"processes",
                         {{{"rank", 0},
                           {"world_size", 2},
                           {"pid", 11},
                           {"host", "n0"},
                           {"job_id", "job1"},
                           {"file", "n0-rank0.n0.11.frlog"},
                           {"source", "x"},
                           {"alive", true},
                           {"records", 2},
                           {"overwritten", 0},
                           {"torn", 0}}}},
                        {"skipped", nlohmann::json::array()}};
    std::ofstream(d + "/dump.json") << h.dump();
  }
  CoordinatorServer server(loopback_config(dumps.path), loopback_options());
  REQUIRE(server.start(&err));
  RunningNode node(node_options(server.port(), logs.path, spool.path));
  std::string dir = dumps.path + "/job1/incident-0001";
  REQUIRE(wait_for([&] { return exists(dir + "/analysis.json"); }));
  CHECK(exists(dir + "/n0-rank0.n0.11.frlog"));
  auto manifest = nlohmann::json::parse(slurp(dir + "/manifest.json"));
  CHECK(manifest["processes"].size() == 1);
  CHECK(wait_for([&] { return !exists(spool.path + "/job1/incident-0001"); }, 10));
  // analysis.json is written before the coordinator takes the result: until then incident-0001 is
  // still being analysed, and a dump asked for meanwhile is that one.
  std::string incidents;
  bool taken = wait_for(
      [&] {
        nlohmann::json all = server.status()["incidents"];
        incidents = all.dump();
        for (const auto& i : all)
          if (i["id"] == "incident-0001")
            return i["state"] != "collecting" && i["state"] != "analyzing";
        return false;
      },
      10);
  INFO("incidents: " << incidents);
  CHECK(taken);
  // New incidents do not reuse the id.
  std::string id;
  REQUIRE(trigger_dump(client(server.port()), "x", &id, &err));
  CHECK(id == "incident-0002");
}

TEST_CASE("a node reconnects to a coordinator that comes back on the same port", "[daemon][rpc]") {
  TempDir logs, dumps, spool;
  write_two_ranks(logs.path, 0);
  int port = 0;
  std::string err;
  auto first = std::make_unique<CoordinatorServer>(loopback_config(dumps.path), loopback_options());
  REQUIRE(first->start(&err));
  port = first->port();
  RunningNode node(node_options(port, logs.path, spool.path));
  REQUIRE(wait_for([&] { return connected_nodes(*first) == 1; }));
  first->shutdown();
  first.reset();
  ServerOptions so = loopback_options();
  so.listen = "127.0.0.1:" + std::to_string(port);
  CoordinatorServer second(loopback_config(dumps.path), so);
  REQUIRE(second.start(&err));
  CHECK(wait_for([&] { return connected_nodes(second) == 1; }, 20));
}

TEST_CASE("TLS and mutual TLS", "[daemon][rpc]") {
  TempDir certs, logs, dumps, spool;
  const std::string d = certs.path;
  std::string script =
      "cd " + d +
      " && "
      "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout ca.key "
      "-out ca.pem -days 2 -subj /CN=fr-test-ca && "
      "openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout server.key "
      "-out server.csr -subj /CN=localhost && "
      "printf 'subjectAltName=IP:127.0.0.1,DNS:localhost' > ext && "
      "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out server.pem "
      "-days 2 -extfile ext && "
      "openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout client.key "
      "-out client.csr -subj /CN=node0 && "
      "openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out client.pem "
      "-days 2";
  if (std::system((script + " >/dev/null 2>&1").c_str()) != 0) {
    FR_SKIP("no openssl: it could not make test certificates");
  }
  std::string err;
  ServerOptions so = loopback_options();
  REQUIRE(read_text_file(d + "/server.pem", &so.tls_cert, &err));
  REQUIRE(read_text_file(d + "/server.key", &so.tls_key, &err));
  ClientOptions tls = client(0);
  REQUIRE(read_text_file(d + "/ca.pem", &tls.tls_ca, &err));
  nlohmann::json st;

  SECTION("TLS") {
    CoordinatorServer server(loopback_config(dumps.path), so);
    REQUIRE(server.start(&err));
    tls.address = "127.0.0.1:" + std::to_string(server.port());
    CHECK(fetch_status(tls, &st, &err));
    CHECK_FALSE(fetch_status(client(server.port()), &st, &err));  // plain text is refused
  }
  SECTION("mutual TLS") {
    REQUIRE(read_text_file(d + "/ca.pem", &so.tls_client_ca, &err));
    CoordinatorServer server(loopback_config(dumps.path), so);
    REQUIRE(server.start(&err));
    tls.address = "127.0.0.1:" + std::to_string(server.port());
    CHECK_FALSE(fetch_status(tls, &st, &err));  // no client certificate
    ClientOptions mtls = tls;
    REQUIRE(read_text_file(d + "/client.pem", &mtls.tls_cert, &err));
    REQUIRE(read_text_file(d + "/client.key", &mtls.tls_key, &err));
    CHECK(fetch_status(mtls, &st, &err));
    write_two_ranks(logs.path, 0);
    NodeOptions no = node_options(server.port(), logs.path, spool.path);
    no.client = mtls;
    RunningNode node(no);
    CHECK(wait_for([&] { return connected_nodes(server) == 1; }));
  }
}

TEST_CASE("idle uploads are cancelled and cannot hold every upload slot", "[daemon][rpc]") {
  TempDir dumps;
  ServerOptions so = loopback_options();
  so.max_uploads = 2;
  so.upload_idle_ns = kSec;
  CoordinatorServer server(loopback_config(dumps.path), so);
  std::string err;
  REQUIRE(server.start(&err));
  std::map<std::string, std::unique_ptr<fr::daemon::test::Peer>> peers;
  for (const char* n : {"a", "b", "c", "d"})
    peers[n] = std::make_unique<fr::daemon::test::Peer>(client(server.port()), n);
  std::string id;
  REQUIRE(trigger_dump(client(server.port()), "x", &id, &err));
  auto stub = fr::v1::Coordinator::NewStub(make_channel(client(server.port())));
  auto header = [&](const std::string& node) {
    fr::v1::UploadChunk c;
    c.mutable_header()->set_incident_id(id);
    c.mutable_header()->set_node_name(node);
    c.mutable_header()->set_upload_key(peers[node]->key);
    auto* f = c.mutable_header()->add_files();
    f->set_name(node + "-rank0.frlog");
    f->set_size(10);
    return c;
  };
  // Two peers open uploads and go silent.
  grpc::ClientContext c1, c2;
  fr::v1::UploadReply r1, r2;
  auto w1 = stub->Upload(&c1, &r1);
  auto w2 = stub->Upload(&c2, &r2);
  REQUIRE(w1->Write(header("a")));
  REQUIRE(w2->Write(header("b")));
  // Both are registered once the coordinator has read their headers: their staging folders exist.
  auto staging = [&](const std::string& node) {
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(dumps.path + "/job1/" + id, ec))
      if (e.path().filename().string().rfind(".upload-" + node + "-", 0) == 0) return true;
    return false;
  };
  REQUIRE(wait_for([&] { return staging("a") && staging("b"); }, 10));
  {
    grpc::ClientContext c3;
    fr::v1::UploadReply r3;
    auto w3 = stub->Upload(&c3, &r3);
    w3->Write(header("c"));
    w3->WritesDone();
    CHECK(w3->Finish().error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED);
  }
  // The coordinator cancels them; the slots free up.
  CHECK(w1->Finish().error_code() == grpc::StatusCode::CANCELLED);
  CHECK(w2->Finish().error_code() == grpc::StatusCode::CANCELLED);
  std::string data = "0123456789";
  bool ok = wait_for(
      [&] {
        grpc::ClientContext c4;
        fr::v1::UploadReply r4;
        auto w4 = stub->Upload(&c4, &r4);
        fr::v1::UploadChunk c = header("d");
        c.mutable_header()->mutable_files(0)->set_crc32c(crc32c(0, data.data(), data.size()));
        w4->Write(c);
        fr::v1::UploadChunk d;
        d.mutable_data()->set_data(data);
        w4->Write(d);
        w4->WritesDone();
        return w4->Finish().ok() && r4.ok();
      },
      10);
  CHECK(ok);
}

TEST_CASE("a node with a shared dump dir writes its dump there and the coordinator checks it",
          "[daemon][rpc]") {
  TempDir logs, dumps, spool;
  write_two_ranks(logs.path, 5 * kSec);
  CoordinatorServer server(loopback_config(dumps.path), loopback_options());
  std::string err;
  REQUIRE(server.start(&err));
  NodeOptions o = node_options(server.port(), logs.path, spool.path);
  o.shared_dump_dir = dumps.path;
  RunningNode node(o);

  std::string dir = dumps.path + "/job1/incident-0001";
  REQUIRE(wait_for([&] { return exists(dir + "/analysis.json"); }));
  auto inc = read_json(dir + "/incident.json");
  CHECK(inc["nodes_uploaded"] == nlohmann::json::array({"n0"}));
  CHECK(inc["nodes_placed"] == nlohmann::json::array({"n0"}));
  auto manifest = read_json(dir + "/manifest.json");
  REQUIRE(manifest["processes"].size() == 2);
  for (const auto& p : manifest["processes"])
    CHECK(exists(dir + "/" + p["file"].get<std::string>()));
  // Rank 1 never called the op that rank 0 is stuck in.
  CHECK(read_json(dir + "/analysis.json")["verdict"]["kind"] == "not_entered");
  // No staging left behind, and the spool is emptied once the coordinator has the dump. The
  // coordinator writes incident.json once more after analysis.json (its state and verdict), so a
  // hidden temporary file may still be on its way to its name: wait for it; one left behind stays.
  std::string hidden;
  bool none_hidden = wait_for(
      [&] {
        hidden.clear();
        if (DIR* d = opendir(dir.c_str())) {
          while (dirent* e = readdir(d))
            if (e->d_name[0] == '.' && std::string(e->d_name).size() > 2)
              hidden += std::string(e->d_name) + " ";
          closedir(d);
        }
        return hidden.empty();
      },
      10);
  INFO("hidden: " << hidden);
  CHECK(none_hidden);
  CHECK(wait_for([&] { return !exists(spool.path + "/job1/incident-0001"); }, 10));
}

TEST_CASE("a node killed while writing into the shared dump dir finishes the job after its restart",
          "[daemon][rpc]") {
  TempDir logs, dumps, spool;
  write_two_ranks(logs.path, 0);
  std::string err;
  // The node took its dump of incident-0001 and died while copying it: its spool entry is whole,
  // its staging folder in the incident's directory is not. Another node is still staging.
  std::string dir = dumps.path + "/job1/incident-0001";
  spool_entry(spool.path, "job1", "incident-0001", logs.path + "/fr.job1.r0.frlog",
              "n0-rank0.n0.11.frlog");
  REQUIRE(fr::files::make_dirs(dir + "/.placing-n0-123", &err));
  std::ofstream(dir + "/.placing-n0-123/n0-rank0.n0.11.frlog") << "half";
  REQUIRE(fr::files::make_dirs(dir + "/.placing-n0-x-456", &err));
  CoordinatorServer server(loopback_config(dumps.path), loopback_options());
  REQUIRE(server.start(&err));
  NodeOptions o = node_options(server.port(), logs.path, spool.path);
  o.shared_dump_dir = dumps.path;
  RunningNode node(o);
  REQUIRE(wait_for([&] { return exists(dir + "/analysis.json"); }));
  CHECK(read_json(dir + "/incident.json")["nodes_placed"] == nlohmann::json::array({"n0"}));
  CHECK(slurp(dir + "/n0-rank0.n0.11.frlog") == slurp(logs.path + "/fr.job1.r0.frlog"));
  CHECK_FALSE(exists(dir + "/.placing-n0-123"));
  CHECK(exists(dir + "/.placing-n0-x-456"));
  CHECK(wait_for([&] { return !exists(spool.path + "/job1/incident-0001"); }, 10));
}

TEST_CASE("a shared dump dir the coordinator cannot see falls back to uploading", "[daemon][rpc]") {
  TempDir logs, dumps, spool, elsewhere;
  write_two_ranks(logs.path, 5 * kSec);
  std::string err;
  // Same path layout, another file system: the node sees an incident directory, the coordinator
  // never sees what the node writes there.
  REQUIRE(fr::files::make_dirs(elsewhere.path + "/job1/incident-0001", &err));
  CoordinatorServer server(loopback_config(dumps.path), loopback_options());
  REQUIRE(server.start(&err));
  NodeOptions o = node_options(server.port(), logs.path, spool.path);
  o.shared_dump_dir = elsewhere.path;
  RunningNode node(o);

  std::string dir = dumps.path + "/job1/incident-0001";
  REQUIRE(wait_for([&] { return exists(dir + "/analysis.json"); }));
  auto inc = read_json(dir + "/incident.json");
  CHECK(inc["nodes_uploaded"] == nlohmann::json::array({"n0"}));
  CHECK(inc["nodes_placed"].empty());
  CHECK(read_json(dir + "/manifest.json")["processes"].size() == 2);
  CHECK(count_frlogs(dir) == 2);
  // What the node wrote into the wrong place is taken back.
  CHECK(count_frlogs(elsewhere.path + "/job1/incident-0001") == 0);

  // The op completes: nothing else depends on where the dump went.
  write_two_ranks(logs.path, 0);
  REQUIRE(
      wait_for([&] { return server.status()["incidents"][0]["state"] == "closed_transient"; }, 10));
}

TEST_CASE("a dump of another job left in the spool is never delivered as this job's",
          "[daemon][rpc]") {
  TempDir logs, dumps, spool, other;
  write_two_ranks(logs.path, 5 * kSec);
  // An earlier job's node, under the same name and spool, took incident-0001 and never
  // delivered it. Its file has a name this job's dump will not have.
  FakeLog stale;
  stale.rank = 0;
  stale.pid = 99;
  stale.job = "job0";
  stale.ops = {{FR_OP_BROADCAST, 1, 1, 10 * kSec, true, false}};
  std::string stale_log = fr::daemon::test::write_log(other.path, "fr.job0.r0.frlog", stale);
  spool_entry(spool.path, "job0", "incident-0001", stale_log, "n0-stale.frlog");

  CoordinatorServer server(loopback_config(dumps.path), loopback_options());
  std::string err;
  REQUIRE(server.start(&err));
  RunningNode node(node_options(server.port(), logs.path, spool.path));
  std::string dir = dumps.path + "/job1/incident-0001";
  REQUIRE(wait_for([&] { return exists(dir + "/analysis.json"); }));
  auto manifest = read_json(dir + "/manifest.json");
  REQUIRE(manifest["processes"].size() == 2);
  for (const auto& p : manifest["processes"]) CHECK(p["job_id"] == "job1");
  CHECK_FALSE(exists(dir + "/n0-stale.frlog"));
  CHECK_FALSE(exists(dumps.path + "/job0"));
  // The other job's dump is still kept for its own coordinator.
  CHECK(exists(spool.path + "/job0/incident-0001/n0-stale.frlog"));
}

TEST_CASE("hostile Placed calls change nothing", "[daemon][rpc]") {
  TempDir logs, dumps, outside;
  write_two_ranks(logs.path, 0);
  CoordinatorServer server(loopback_config(dumps.path), loopback_options());
  std::string err, id;
  REQUIRE(server.start(&err));
  fr::daemon::test::Peer evil(client(server.port()), "evil");
  REQUIRE(trigger_dump(client(server.port()), "x", &id, &err));
  std::string dir = dumps.path + "/job1/" + id;
  REQUIRE(exists(dir));
  auto stub = fr::v1::Coordinator::NewStub(make_channel(client(server.port())));
  std::string secret = "not for peers\n";
  std::ofstream(outside.path + "/secret", std::ios::binary) << secret;
  auto placed = [&](const std::string& incident, const std::string& job, const std::string& file,
                    uint64_t size, uint32_t crc) {
    fr::v1::UploadHeader h;
    h.set_incident_id(incident);
    h.set_node_name("evil");
    h.set_upload_key(evil.key);
    h.set_job_id(job);
    auto* f = h.add_files();
    f->set_name(file);
    f->set_size(size);
    f->set_crc32c(crc);
    grpc::ClientContext ctx;
    fr::v1::UploadReply reply;
    return stub->Placed(&ctx, h, &reply).error_code();
  };
  uint32_t crc = crc32c(0, secret.data(), secret.size());
  CHECK(placed("incident-0099", "job1", "evil-a.frlog", secret.size(), crc) ==
        grpc::StatusCode::FAILED_PRECONDITION);
  CHECK(placed(id, "job2", "evil-a.frlog", secret.size(), crc) ==
        grpc::StatusCode::FAILED_PRECONDITION);
  CHECK(placed(id, "job1", "../../../secret", secret.size(), crc) ==
        grpc::StatusCode::INVALID_ARGUMENT);
  REQUIRE(::symlink((outside.path + "/secret").c_str(), (dir + "/evil-a.frlog").c_str()) == 0);
  CHECK(placed(id, "job1", "evil-a.frlog", secret.size(), crc) == grpc::StatusCode::NOT_FOUND);
  REQUIRE(::mkfifo((dir + "/evil-b.frlog").c_str(), 0644) == 0);
  CHECK(placed(id, "job1", "evil-b.frlog", 0, 0) == grpc::StatusCode::NOT_FOUND);
  CHECK(placed(id, "job1", "evil-c.frlog", 10, 0) == grpc::StatusCode::NOT_FOUND);
  auto st = server.status();
  REQUIRE(st["incidents"].size() == 1);
  CHECK(st["incidents"][0]["uploaded"] == 0);

  // With a token, a Placed call without it is refused like any other.
  TempDir dumps2;
  ServerOptions so = loopback_options();
  so.token = "sesame";
  CoordinatorServer locked(loopback_config(dumps2.path), so);
  REQUIRE(locked.start(&err));
  auto stub2 = fr::v1::Coordinator::NewStub(make_channel(client(locked.port())));
  grpc::ClientContext ctx;
  fr::v1::UploadHeader h;
  fr::v1::UploadReply reply;
  CHECK(stub2->Placed(&ctx, h, &reply).error_code() == grpc::StatusCode::UNAUTHENTICATED);
}

TEST_CASE(
    "the --on-verdict command runs once per dump set (no second run in 500 ms) with the verdict, and is bounded",
    "[daemon][rpc]") {
  TempDir logs, dumps, spool, out;
  write_two_ranks(logs.path, 5 * kSec);
  ServerOptions so = loopback_options();
  // Stop signals are blocked in frd's threads (it sigwaits); the command must not inherit that.
  sigset_t block, old;
  sigemptyset(&block);
  sigaddset(&block, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &block, &old);
  so.on_verdict =
      "echo \"$FR_INCIDENT_ID $FR_INCIDENT_KIND $FR_VERDICT [$FR_CULPRITS] $FR_JOB_ID\" "
      ">> " +
      out.path + "/calls; echo \"$FR_INCIDENT_DIR\" > " + out.path +
      "/dir; grep SigBlk /proc/self/status > " + out.path + "/sigblk";
  CoordinatorServer server(loopback_config(dumps.path), so);
  std::string err;
  REQUIRE(server.start(&err));
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  RunningNode node(node_options(server.port(), logs.path, spool.path));
  std::string dir = dumps.path + "/job1/incident-0001";
  // The command's last step writes this file: wait until it has content, not just exists.
  REQUIRE(wait_for([&] { return !slurp(out.path + "/sigblk").empty(); }));
  CHECK(slurp(out.path + "/calls") == "incident-0001 stall not_entered [1] job1\n");
  CHECK(slurp(out.path + "/dir") == dir + "\n");
  CHECK(slurp(out.path + "/sigblk") == "SigBlk:\t0000000000000000\n");
  CHECK(exists(dir + "/analysis.json"));  // the dump set is whole before the command runs
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  CHECK(slurp(out.path + "/calls") == "incident-0001 stall not_entered [1] job1\n");
}

TEST_CASE("an --on-verdict command past its time is killed with everything it started",
          "[daemon][rpc]") {
  TempDir dumps, out;
  ServerOptions so = loopback_options();
  so.on_verdict = "sleep 1000 & echo $! > " + out.path + "/child; wait";
  so.on_verdict_timeout_ns = kSec / 2;
  CoordinatorServer server(loopback_config(dumps.path), so);
  std::string err, id;
  REQUIRE(server.start(&err));
  REQUIRE(trigger_dump(client(server.port()), "x", &id, &err));
  REQUIRE(wait_for([&] { return !slurp(out.path + "/child").empty(); }));
  pid_t child = pid_t(std::stol(slurp(out.path + "/child")));
  // The grandchild (sleep) goes with the command's process group; nobody reaps it here, so
  // it is gone when it is a zombie or no longer exists.
  auto gone = [&] {
    std::string st = slurp("/proc/" + std::to_string(child) + "/stat");
    return st.empty() || st.find(") Z ") != std::string::npos;
  };
  CHECK(wait_for(gone, 10));
  // The coordinator keeps serving and a new incident runs the command again.
  ::unlink((out.path + "/child").c_str());
  REQUIRE(trigger_dump(client(server.port()), "y", &id, &err));
  CHECK(id == "incident-0002");
  REQUIRE(wait_for([&] { return !slurp(out.path + "/child").empty(); }));
  // Commands outlive the coordinator (a stop-the-job script must finish): wait for this one's
  // limit, so that it does not hold the test's output open.
  child = pid_t(std::stol(slurp(out.path + "/child")));
  CHECK(wait_for(gone, 10));
}

// While a fan-out is handed to gRPC, a stream that reads a heartbeat reads no further until it
// is out (server_node_stream.h); every such read must start again. Nodes heartbeat without pause
// through several fan-outs, so reads arrive during each; afterwards every node's heartbeats are
// still applied, and every node got every request.
TEST_CASE("heartbeats read during a fan-out keep being applied after it", "[daemon][rpc]") {
  TempDir dumps;
  auto cfg = loopback_config(dumps.path);
  cfg.dump_deadline_ns = kSec;  // the peers never upload: each incident ends at its deadline
  CoordinatorServer server(cfg, loopback_options());
  std::string err;
  REQUIRE(server.start(&err));
  constexpr int kNodes = 48;
  std::vector<std::unique_ptr<fr::daemon::test::Peer>> peers;
  for (int i = 0; i < kNodes; ++i) {
    peers.push_back(
        std::make_unique<fr::daemon::test::Peer>(client(server.port()), "n" + std::to_string(i)));
    REQUIRE(peers.back()->welcomed);
  }
  std::atomic<bool> stop{false};
  std::vector<std::thread> senders;
  struct Join {  // the senders stop however the test ends
    std::atomic<bool>& stop;
    std::vector<std::thread>& threads;
    ~Join() {
      stop = true;
      for (auto& t : threads) t.join();
    }
  } join{stop, senders};
  for (int t = 0; t < 4; ++t)
    senders.emplace_back([&, t] {
      NodeReport r;
      ProcessReport p;
      p.alive = true;
      p.job_id = "job1";
      p.world_size = kNodes;
      r.processes.push_back(p);
      // Bounded: 60 s at most, whatever happens.
      const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(60);
      while (!stop && std::chrono::steady_clock::now() < end)
        for (int i = t; i < kNodes; i += 4) {
          r.processes[0].rank = i;
          r.processes[0].pid = 100 + i;
          r.processes[0].host = "n" + std::to_string(i);
          r.processes[0].log = "fr.job1.r" + std::to_string(i) + ".frlog";
          peers[size_t(i)]->heartbeat(r);
        }
    });
  auto heartbeats = [&] {
    std::map<std::string, int64_t> n;
    const nlohmann::json st = server.status();
    for (const auto& node : st["nodes"])
      n[node["name"].get<std::string>()] = node["heartbeats"].get<int64_t>();
    return n;
  };
  REQUIRE(wait_for([&] { return heartbeats().size() == size_t(kNodes); }));
  for (int round = 1; round <= 3; ++round) {
    std::string id;
    REQUIRE(wait_for([&] {
      return trigger_dump(client(server.port()), "fan-out", &id, &err) &&
             id == "incident-000" + std::to_string(round);
    }));
    REQUIRE(wait_for([&] {
      for (auto& p : peers)
        if (p->requests().size() < size_t(round)) return false;
      return true;
    }));
    // Every node's count moves on after the fan-out: no read was left deferred.
    const auto before = heartbeats();
    REQUIRE(wait_for(
        [&] {
          const auto now = heartbeats();
          for (const auto& [name, count] : before)
            if (now.at(name) <= count + 2) return false;
          return true;
        },
        20));
    REQUIRE(wait_for([&] {
      return exists(dumps.path + "/job1/" + id + "/incident.json") &&
             read_json(dumps.path + "/job1/" + id + "/incident.json").value("state", "") !=
                 "collecting";
    }));
  }
  for (auto& p : peers) CHECK(p->requests().size() == 3);
}
