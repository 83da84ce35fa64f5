// Hostile and broken peers against the coordinator, each doing what a red-team pass did, bounded
// in count and time: heartbeats of the largest legal size and a status blow-up, a name taken
// over, a first speaker naming the job, idle upload streams, uploads under another node's name or
// into a closed incident, a placed file swapped for a FIFO, a restart mid-incident, partial
// uploads left behind, addresses that only look like loopback, idle HTTP connections, the
// coordinator's own files taken as foreign, and the default token file.
#include <catch2/catch.hpp>
#include <google/protobuf/stubs/logging.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <sstream>
#include <thread>

#include "daemon/logic/assembly.h"
#include "common/files.h"
#include "daemon/rpc/client.h"
#include "daemon/logic/coordinator.h"
#include "daemon/rpc/server.h"
#include "fixture.h"
#include "log/snapshot.h"
#include "peer.h"
#include "skip.h"
#include "testing/clock.h"
#include "testing/files.h"
#include "testing/wait.h"

using namespace fr::daemon;
using fr::daemon::test::FakeLog;
using fr::daemon::test::loopback_config;
using fr::daemon::test::loopback_options;
using fr::daemon::test::Peer;
using fr::daemon::test::rss_mib;
using fr::daemon::test::TempDir;
using fr::daemon::test::UploadFile;
using fr::test::exists_no_follow;
using fr::test::kSec;
using fr::test::slurp;
using fr::test::wait_for;

namespace {

ClientOptions client(int port, const std::string& token = "") {
  ClientOptions c;
  c.address = "127.0.0.1:" + std::to_string(port);
  c.token = token;
  return c;
}

// A legal heartbeat of `procs` processes with `comms` communicators each.
NodeReport report(const std::string& node, int procs, int comms, int64_t stalled_ns = 0,
                  const std::string& job = "job1") {
  NodeReport r;
  for (int k = 0; k < procs; ++k) {
    ProcessReport p;
    p.log = "fr." + node + "." + std::to_string(k) + ".frlog";
    p.rank = k;
    p.world_size = procs;
    p.pid = 1000 + k;
    p.alive = true;
    p.job_id = job;
    p.host = node;
    for (int c = 0; c < comms; ++c) {
      CommProgress cp;
      cp.comm_id = 0x1000 + uint64_t(c);
      cp.size = procs;
      cp.rank = k;
      cp.coll_seq = cp.enqueued = cp.started = 100;
      cp.completed = stalled_ns && k == 0 && c == 0 ? 99 : 100;
      cp.oldest_age_ns = stalled_ns && k == 0 && c == 0 ? stalled_ns : 0;
      cp.oldest_seq = 100;
      cp.name = "communicator-with-a-long-name-" + std::to_string(c);
      p.comms.push_back(cp);
    }
    r.processes.push_back(p);
  }
  return r;
}

std::string flight_log(const std::string& dir, const std::string& name, int rank) {
  FakeLog f;
  f.rank = rank;
  f.pid = 100 + rank;
  f.ops = {{FR_OP_ALLREDUCE, 1, 1, kSec, true, false}};
  fr::daemon::test::write_log(dir, name, f);
  return slurp(dir + "/" + name);
}

}  // namespace

TEST_CASE("hostile: heartbeats of the largest legal size keep memory bounded, status paged",
          "[daemon][hostile]") {
  TempDir dumps;
  CoordinatorConfig cfg = loopback_config(dumps.path);
  cfg.max_node_bytes = 256 << 10;
  cfg.max_retained_bytes = 2 << 20;
  CoordinatorServer server(cfg, loopback_options());
  std::string err;
  REQUIRE(server.start(&err));
  const double before = rss_mib();
  // 20 nodes, each one heartbeat of 1,024 processes x 40 communicators (about 700 KB on the wire).
  std::vector<std::unique_ptr<Peer>> peers;
  NodeReport big = report("x", 1024, 40);
  for (int i = 0; i < 20; ++i) {
    peers.push_back(std::make_unique<Peer>(client(server.port()), "big" + std::to_string(i)));
    REQUIRE(peers.back()->welcomed);
    REQUIRE(peers.back()->heartbeat(big));
  }
  REQUIRE(wait_for([&] {
    auto st = server.status();
    int beats = 0;
    for (const auto& n : st["nodes"]) beats += n["heartbeats"].get<int>();
    return beats == 20;
  }));
  const double after = rss_mib();
  // Every Status page stays small, however much the nodes sent.
  nlohmann::json st;
  size_t largest = 0;
  for (int i = 0; i < 3; ++i) {
    REQUIRE(fetch_status(client(server.port()), &st, &err));
    largest = std::max(largest, st.dump().size());
  }
  const double after_status = rss_mib();
  std::printf(
      "hostile heartbeats: RSS %.1f MiB before, %.1f MiB after 20 x 1024x40 heartbeats, "
      "%.1f MiB after 3 Status calls (largest reply %zu bytes); reports kept: %zu bytes "
      "(bound %zu); the RSS includes this test's own 20 peers\n",
      before, after, after_status, largest, st["retained_report_bytes"].get<size_t>(),
      cfg.max_retained_bytes);
  CHECK(st["retained_report_bytes"].get<size_t>() <= cfg.max_retained_bytes);
  CHECK(largest < (8u << 20));
  CHECK(st["node_counts"]["known"] == 20);
  // What is kept stays within the bounds: each report was cut, and says so.
  bool all_trimmed = true;
  for (const auto& n : st["nodes"]) all_trimmed &= n["trimmed"].get<bool>();
  CHECK(all_trimmed);
  // The metrics say how much is kept.
  // Pages: two nodes at a time, each page pointing at the next.
  size_t offset = 0, seen = 0;
  for (int pages = 0; pages < 20; ++pages) {
    REQUIRE(fetch_status(client(server.port()), &st, &err, offset, 2, true));
    seen += st["nodes"].size();
    if (st["page"]["next_offset"].is_null()) break;
    offset = st["page"]["next_offset"].get<size_t>();
  }
  CHECK(seen == 20);
  CHECK_FALSE(render_status(st).empty());
}

TEST_CASE("hostile: nodes gone and needed by no incident are forgotten", "[daemon][hostile]") {
  TempDir dumps;
  CoordinatorConfig cfg = loopback_config(dumps.path);
  cfg.forget_after_ns = kSec;
  CoordinatorState st(cfg);
  std::string err;
  for (int i = 0; i < 100; ++i) {
    uint64_t s = st.connect("n" + std::to_string(i), "h", "job1", 0, &err);
    REQUIRE(s);
    st.heartbeat(s, report("n", 2, 2), 0);
    st.disconnect(s, 0);
  }
  CHECK(st.known_nodes() == 100);
  CHECK(st.retained_bytes() > 0);
  st.tick(cfg.heartbeat_timeout_ns + 1);         // lost
  st.tick(cfg.heartbeat_timeout_ns + 2 * kSec);  // and forgotten
  CHECK(st.known_nodes() == 0);
  CHECK(st.retained_bytes() == 0);
}

TEST_CASE("hostile: a name held by a live connection is not taken over", "[daemon][hostile]") {
  TempDir dumps;
  CoordinatorServer server(loopback_config(dumps.path), loopback_options());
  std::string err;
  REQUIRE(server.start(&err));
  Peer real(client(server.port()), "n0");
  REQUIRE(real.welcomed);
  REQUIRE(real.heartbeat(report("n0", 2, 1)));
  // Without credentials, another peer cannot take the live name; it tries a few times.
  for (int i = 0; i < 5; ++i) {
    Peer thief(client(server.port()), "n0");
    CHECK_FALSE(thief.welcomed);
    CHECK(thief.status.error_code() == grpc::StatusCode::PERMISSION_DENIED);
  }
  REQUIRE(real.heartbeat(report("n0", 2, 1)));
  auto st = server.status();
  REQUIRE(st["nodes"].size() == 1);
  CHECK(st["nodes"][0]["connected"] == true);
  // Once the holder is gone, the name is free again.
  real.close();
  REQUIRE(wait_for([&] { return server.status()["nodes"][0]["connected"] == false; }, 10));
  Peer back(client(server.port()), "n0");
  CHECK(back.welcomed);
}

TEST_CASE("hostile: with a token, nothing is served without it", "[daemon][hostile]") {
  TempDir dumps;
  ServerOptions so = loopback_options();
  so.token = "the-token";
  CoordinatorServer server(loopback_config(dumps.path), so);
  std::string err;
  REQUIRE(server.start(&err));
  Peer anon(client(server.port()), "n0");
  CHECK_FALSE(anon.welcomed);
  CHECK(anon.status.error_code() == grpc::StatusCode::UNAUTHENTICATED);
  nlohmann::json st;
  CHECK_FALSE(fetch_status(client(server.port()), &st, &err));
  std::string id;
  CHECK_FALSE(trigger_dump(client(server.port()), "x", &id, &err));
  CHECK(server.status()["incidents"].empty());
  Peer node(client(server.port(), "the-token"), "n0");
  CHECK(node.welcomed);
}

TEST_CASE("hostile: an anonymous first heartbeat does not name the job", "[daemon][hostile]") {
  TempDir dumps;
  CoordinatorConfig cfg = loopback_config(dumps.path);
  cfg.job_id.clear();
  {
    // No token: nobody is authenticated, so nobody names the job.
    CoordinatorServer server(cfg, loopback_options());
    std::string err, id;
    REQUIRE(server.start(&err));
    Peer evil(client(server.port()), "evil", "evil-job");
    REQUIRE(evil.heartbeat(report("evil", 1, 1, 0, "evil-job")));
    REQUIRE(wait_for([&] { return server.status()["nodes"][0]["heartbeats"] == 1; }, 10));
    CHECK(server.status()["job_id"] != "evil-job");
    REQUIRE(trigger_dump(client(server.port()), "x", &id, &err));
    CHECK_FALSE(exists_no_follow(dumps.path + "/evil-job"));
  }
  {
    // With a token, the nodes that present it name the job.
    TempDir dumps2;
    cfg.dump_dir = dumps2.path;
    ServerOptions so = loopback_options();
    so.token = "t0k3n";
    CoordinatorServer server(cfg, so);
    std::string err;
    REQUIRE(server.start(&err));
    Peer node(client(server.port(), "t0k3n"), "n0");
    REQUIRE(node.heartbeat(report("n0", 1, 1, 0, "real-job")));
    CHECK(wait_for([&] { return server.status()["job_id"] == "real-job"; }, 10));
  }
}

TEST_CASE("hostile: idle upload streams hold no upload slot", "[daemon][hostile]") {
  TempDir dumps, logs;
  ServerOptions so = loopback_options();
  so.upload_header_ns = kSec;
  CoordinatorServer server(loopback_config(dumps.path), so);
  std::string err, id;
  REQUIRE(server.start(&err));
  Peer n0(client(server.port()), "n0");
  REQUIRE(trigger_dump(client(server.port()), "x", &id, &err));
  // 80 streams that never send anything (more than the 64 upload slots).
  auto stub = fr::v1::Coordinator::NewStub(make_channel(client(server.port())));
  struct Idle {
    grpc::ClientContext ctx;
    fr::v1::UploadReply reply;
    std::unique_ptr<grpc::ClientWriter<fr::v1::UploadChunk>> w;
  };
  std::vector<std::unique_ptr<Idle>> idle;
  for (int i = 0; i < 80; ++i) {
    idle.push_back(std::make_unique<Idle>());
    idle.back()->w = stub->Upload(&idle.back()->ctx, &idle.back()->reply);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  // The real upload goes through at once.
  std::string data = flight_log(logs.path, "r0.frlog", 0);
  fr::v1::UploadReply reply;
  grpc::Status s = fr::daemon::test::upload(client(server.port()), id, "n0", n0.key,
                                            {{"n0-rank0.frlog", data}}, &reply);
  CHECK(s.ok());
  CHECK(reply.ok());
  // The silent ones are cut off once their header is late.
  int cancelled = 0;
  for (auto& i : idle) cancelled += i->w->Finish().error_code() == grpc::StatusCode::CANCELLED;
  CHECK(cancelled == 80);
  CHECK(slurp(dumps.path + "/job1/" + id + "/n0-rank0.frlog") == data);
}

TEST_CASE("hostile: uploads are bound to the node that was asked", "[daemon][hostile]") {
  TempDir dumps, logs;
  CoordinatorServer server(loopback_config(dumps.path), loopback_options());
  std::string err, id;
  REQUIRE(server.start(&err));
  Peer a(client(server.port()), "nodeA");
  Peer b(client(server.port()), "nodeB");
  REQUIRE(trigger_dump(client(server.port()), "x", &id, &err));
  const std::string dir = dumps.path + "/job1/" + id;
  std::string da = flight_log(logs.path, "a.frlog", 0), db = flight_log(logs.path, "b.frlog", 1);
  fr::v1::UploadReply reply;
  auto c = client(server.port());

  // nodeB posing as nodeA, before nodeA delivers: refused, and nodeA's real dump is then taken.
  CHECK(fr::daemon::test::upload(c, id, "nodeA", b.key, {{"nodeA-rank0.frlog", db}}, &reply)
            .error_code() == grpc::StatusCode::PERMISSION_DENIED);
  CHECK(fr::daemon::test::upload(c, id, "nodeA", "", {{"nodeA-rank0.frlog", db}}, &reply)
            .error_code() == grpc::StatusCode::PERMISSION_DENIED);
  CHECK_FALSE(exists_no_follow(dir + "/nodeA-rank0.frlog"));
  REQUIRE(
      fr::daemon::test::upload(c, id, "nodeA", a.key, {{"nodeA-rank0.frlog", da}}, &reply).ok());
  CHECK_FALSE(reply.duplicate());
  // nodeB as itself, with a file named after nodeA: refused, nodeA's file untouched.
  CHECK(fr::daemon::test::upload(c, id, "nodeB", b.key, {{"nodeA-rank0.frlog", db}}, &reply)
            .error_code() == grpc::StatusCode::PERMISSION_DENIED);
  CHECK(slurp(dir + "/nodeA-rank0.frlog") == da);
  // nodeB's own dump completes the set.
  REQUIRE(
      fr::daemon::test::upload(c, id, "nodeB", b.key, {{"nodeB-rank1.frlog", db}}, &reply).ok());
  REQUIRE(wait_for([&] { return exists_no_follow(dir + "/analysis.json"); }));
  REQUIRE(wait_for([&] { return server.status()["incidents"][0]["state"] == "closed"; }));
  const std::string analysis = slurp(dir + "/analysis.json");
  // Into a closed incident (from a node that connected after it): refused, and the incident
  // stays closed and its analysis as it was.
  Peer late(client(server.port()), "nodeC");
  CHECK(fr::daemon::test::upload(c, id, "nodeC", late.key, {{"nodeC-rank2.frlog", db}}, &reply)
            .error_code() == grpc::StatusCode::FAILED_PRECONDITION);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  CHECK(server.status()["incidents"][0]["state"] == "closed");
  CHECK(slurp(dir + "/analysis.json") == analysis);
  CHECK_FALSE(exists_no_follow(dir + "/nodeC-rank2.frlog"));
}

TEST_CASE("hostile: a placed file swapped for a FIFO wedges neither the analysis nor the stop",
          "[daemon][hostile]") {
  TempDir dumps, logs;
  auto server =
      std::make_unique<CoordinatorServer>(loopback_config(dumps.path), loopback_options());
  std::string err, id;
  REQUIRE(server->start(&err));
  const int port = server->port();
  Peer a(client(port), "nodeA");
  Peer b(client(port), "nodeB");
  REQUIRE(trigger_dump(client(port), "x", &id, &err));
  const std::string dir = dumps.path + "/job1/" + id;
  std::string da = flight_log(logs.path, "a.frlog", 0), db = flight_log(logs.path, "b.frlog", 1);
  // nodeA writes its file into the incident's directory and says so.
  std::ofstream(dir + "/nodeA-rank0.frlog", std::ios::binary) << da;
  {
    auto stub = fr::v1::Coordinator::NewStub(make_channel(client(port)));
    fr::v1::UploadHeader h;
    h.set_incident_id(id);
    h.set_node_name("nodeA");
    h.set_upload_key(a.key);
    auto* f = h.add_files();
    f->set_name("nodeA-rank0.frlog");
    f->set_size(da.size());
    f->set_crc32c(crc32c(0, da.data(), da.size()));
    auto* p = h.add_processes();
    p->set_rank(0);
    p->set_world_size(2);
    p->set_file("nodeA-rank0.frlog");
    p->set_host("nodeA");
    grpc::ClientContext ctx;
    fr::v1::UploadReply reply;
    REQUIRE(stub->Placed(&ctx, h, &reply).ok());
  }
  // Then swaps it for a FIFO, and nodeB uploads: the set is analysed all the same.
  REQUIRE(::unlink((dir + "/nodeA-rank0.frlog").c_str()) == 0);
  REQUIRE(::mkfifo((dir + "/nodeA-rank0.frlog").c_str(), 0644) == 0);
  fr::v1::UploadReply reply;
  REQUIRE(fr::daemon::test::upload(client(port), id, "nodeB", b.key, {{"nodeB-rank1.frlog", db}},
                                   &reply)
              .ok());
  REQUIRE(wait_for([&] { return exists_no_follow(dir + "/analysis.json"); }, 30));
  auto manifest = nlohmann::json::parse(slurp(dir + "/manifest.json"));
  CHECK(manifest.dump().find("no longer a regular file") != std::string::npos);
  REQUIRE(wait_for([&] { return server->status()["incidents"][0]["state"] == "closed"; }, 10));
  // And the stop comes promptly.
  auto t0 = std::chrono::steady_clock::now();
  server.reset();
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("hostile FIFO: the coordinator stopped in %.2f s\n", took);
  CHECK(took < 20);
}

TEST_CASE("hostile: a restarted coordinator recovers its incident exactly, and hooks fire once",
          "[daemon][hostile]") {
  TempDir dumps, logs, out;
  ServerOptions so = loopback_options();
  so.on_verdict = "echo \"$FR_INCIDENT_ID\" >> " + out.path + "/hooks";
  std::string err;
  std::string da = flight_log(logs.path, "a.frlog", 0), db = flight_log(logs.path, "b.frlog", 1);
  int port = 0;
  std::string dir;
  {
    CoordinatorServer first(loopback_config(dumps.path), so);
    REQUIRE(first.start(&err));
    port = first.port();
    Peer a(client(port), "nodeA"), b(client(port), "nodeB");
    // nodeA's rank 0 is stuck: a stall incident opens and asks both nodes.
    REQUIRE(a.heartbeat(report("nodeA", 1, 1, 5 * kSec)));
    REQUIRE(b.heartbeat(report("nodeB", 1, 1)));
    REQUIRE(wait_for([&] { return a.requests().size() == 1 && b.requests().size() == 1; }));
    std::string id = a.requests()[0];
    dir = dumps.path + "/job1/" + id;
    fr::v1::UploadReply reply;
    REQUIRE(fr::daemon::test::upload(client(port), id, "nodeA", a.key, {{"nodeA-rank0.frlog", da}},
                                     &reply)
                .ok());
    REQUIRE(fr::daemon::test::upload(client(port), id, "nodeB", b.key, {{"nodeB-rank1.frlog", db}},
                                     &reply)
                .ok());
    REQUIRE(wait_for([&] { return exists_no_follow(dir + "/analysis.json"); }));
    REQUIRE(wait_for([&] {
      auto j = nlohmann::json::parse(slurp(dir + "/incident.json"), nullptr, false);
      return !j.is_discarded() && j.value("hook_fired", false) && j.value("state", "") == "open";
    }));
  }
  // The same hang, seen by a new coordinator on the same directory.
  so.listen = "127.0.0.1:" + std::to_string(port);
  CoordinatorServer second(loopback_config(dumps.path), so);
  REQUIRE(second.start(&err));
  Peer a(client(port), "nodeA"), b(client(port), "nodeB");
  for (int i = 0; i < 10; ++i) {
    REQUIRE(a.heartbeat(report("nodeA", 1, 1, (6 + i) * kSec)));
    REQUIRE(b.heartbeat(report("nodeB", 1, 1)));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  auto st = second.status();
  REQUIRE(st["incidents"].size() == 1);
  CHECK(st["incidents"][0]["state"] == "open");
  auto inc = nlohmann::json::parse(slurp(dir + "/incident.json"));
  CHECK(inc["kind"] == "stall");
  CHECK(inc["reason"].get<std::string>().find("nodeA") != std::string::npos);
  CHECK(inc["nodes_uploaded"] == nlohmann::json::array({"nodeA", "nodeB"}));
  CHECK(slurp(out.path + "/hooks") == inc["id"].get<std::string>() + "\n");
  CHECK(a.requests().empty());
}

TEST_CASE("hostile: partial uploads left by a killed coordinator are removed at start",
          "[daemon][hostile]") {
  TempDir dumps;
  std::string err;
  std::string dir = dumps.path + "/job1/incident-0001";
  REQUIRE(fr::files::make_dirs(dir + "/.upload-n0-1234", &err));
  std::ofstream(dir + "/.upload-n0-1234/n0-rank0.frlog") << "partial";
  nlohmann::json inc = {{"schema", "frd-incident/1"},
                        {"id", "incident-0001"},
                        {"kind", "manual"},
                        {"state", "collecting"},
                        {"reason", "x"},
                        {"nodes_asked", {"n0"}},
                        {"nodes_uploaded", nlohmann::json::array()}};
  std::ofstream(dir + "/incident.json") << inc.dump();
  CoordinatorState st(loopback_config(dumps.path));
  CHECK_FALSE(exists_no_follow(dir + "/.upload-n0-1234"));
  REQUIRE(st.incidents().size() == 1);
  CHECK(st.incidents()[0].state == IncidentState::kCollecting);
  CHECK(st.incidents()[0].asked.count("n0"));
}

TEST_CASE("hostile: listen addresses are judged by what they resolve to", "[daemon][hostile]") {
  CHECK(is_loopback_address("127.0.0.1:1"));
  CHECK(is_loopback_address("localhost:1"));
  CHECK(is_loopback_address("[::1]:1"));
  CHECK_FALSE(is_loopback_address("0.0.0.0:1"));
  CHECK_FALSE(is_loopback_address("127.attacker.invalid:1"));  // a name, and not even resolvable
  TempDir dumps;
  ServerOptions so = loopback_options();
  so.listen = "127.attacker.invalid:0";
  CoordinatorServer server(loopback_config(dumps.path), so);
  std::string err;
  CHECK_FALSE(server.start(&err));
  CHECK(err.find("token") != std::string::npos);
}

TEST_CASE("hostile: idle HTTP connections do not hold up a scrape", "[daemon][hostile]") {
  TempDir dumps;
  ServerOptions so = loopback_options();
  so.metrics_listen = "127.0.0.1:0";
  CoordinatorServer server(loopback_config(dumps.path), so);
  std::string err;
  REQUIRE(server.start(&err));
  auto open_socket = [&] {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(uint16_t(server.metrics_port()));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    return fd;
  };
  // Eight clients connect and say nothing (one half-sends a request).
  std::vector<int> idle;
  for (int i = 0; i < 8; ++i) idle.push_back(open_socket());
  (void)!write(idle[0], "GET /metr", 9);
  for (int round = 0; round < 3; ++round) {
    int fd = open_socket();
    timeval tv{1, 500'000};  // well under what the idle ones would cost if served in turn
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    std::string req = "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    REQUIRE(write(fd, req.data(), req.size()) == ssize_t(req.size()));
    std::string resp;
    char buf[4096];
    ssize_t n;
    while ((n = read(fd, buf, sizeof buf)) > 0) resp.append(buf, size_t(n));
    close(fd);
    CHECK(resp.rfind("HTTP/1.1 200", 0) == 0);
    CHECK(resp.find("frd_retained_report_bytes") != std::string::npos);
  }
  for (int fd : idle) close(fd);
}

TEST_CASE("hostile: with a token, the HTTP pages ask for it on loopback too", "[daemon][hostile]") {
  for (bool trust : {false, true}) {
    INFO("http_trust_loopback " << trust);
    TempDir dumps;
    ServerOptions so = loopback_options();
    so.metrics_listen = "127.0.0.1:0";
    so.token = "the-token";
    so.http_trust_loopback = trust;
    CoordinatorServer server(loopback_config(dumps.path), so);
    std::string err;
    REQUIRE(server.start(&err));
    for (const char* path : {"/", "/metrics", "/api/v1/status"}) {
      INFO(path);
      const std::string bare = fr::daemon::test::http_get(server.metrics_port(), path);
      CHECK(bare.rfind(trust ? "HTTP/1.1 200" : "HTTP/1.1 401", 0) == 0);
      CHECK(fr::daemon::test::http_get(server.metrics_port(), path,
                                       "Authorization: Bearer the-token\r\n")
                .rfind("HTTP/1.1 200", 0) == 0);
      CHECK(
          fr::daemon::test::http_get(server.metrics_port(), path, "Authorization: Bearer wrong\r\n")
              .rfind(trust ? "HTTP/1.1 200" : "HTTP/1.1 401", 0) == 0);
    }
  }
}

TEST_CASE("hostile: the coordinator's own files in a dump set are not foreign",
          "[daemon][hostile]") {
  TempDir d;
  AssemblyJob j;
  j.incident_id = "incident-0001";
  j.dir = d.path + "/incident-0001";
  j.job_id = "job1";
  j.kind = "manual";
  j.time_ns = 1;
  j.incident = {{"id", j.incident_id}};
  std::string err;
  REQUIRE(fr::files::make_dirs(j.dir, &err));
  flight_log(j.dir, "n0-rank0.frlog", 0);
  j.processes.push_back({0, 1, 100, "n0", "job1", "n0-rank0.frlog", "src", true, 1, 0, 0});
  REQUIRE(assemble(j).ok);
  // Written again over a set that already holds incident.json, analysis.json and report.txt.
  REQUIRE(assemble(j).ok);
  std::string analysis = slurp(j.dir + "/analysis.json");
  CHECK(analysis.find("foreign") == std::string::npos);
}

TEST_CASE("hostile: a connected node that cannot deliver is not called lost", "[daemon][hostile]") {
  TempDir dumps;
  CoordinatorConfig cfg = loopback_config(dumps.path);
  CoordinatorState st(cfg);
  std::string err;
  uint64_t s0 = st.connect("n0", "h", "job1", 0, &err);
  uint64_t s1 = st.connect("n1", "h", "job1", 0, &err);
  Actions a;
  std::string id = st.trigger("x", 0, &a);
  DumpHeader h;
  h.incident_id = id;
  h.node_name = "n1";
  st.upload_done(h, kSec);
  st.upload_failed(id, "n0", "No space left on device", kSec);
  for (int64_t t = 0; t <= cfg.dump_deadline_ns + kSec; t += kSec) {
    st.heartbeat(s0, report("n0", 1, 1), t);
    st.heartbeat(s1, report("n1", 1, 1), t);
    a = st.tick(t);
    if (!a.assemble.empty()) break;
  }
  REQUIRE(a.assemble.size() == 1);
  REQUIRE(a.assemble[0].undelivered.count("n0"));
  CHECK(a.assemble[0].undelivered["n0"].find("connected") != std::string::npos);
}

TEST_CASE("hostile: the default token file is private, created once and shared",
          "[daemon][hostile]") {
  TempDir d;
  std::string path = d.path + "/frd-x/token", token, again, err;
  bool created = false, loose = false;
  REQUIRE(ensure_token_file(path, &token, &created, &err));
  CHECK(created);
  struct stat st;
  REQUIRE(stat(path.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  REQUIRE(stat((d.path + "/frd-x").c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0700);
  REQUIRE(ensure_token_file(path, &again, &created, &err));
  CHECK_FALSE(created);
  CHECK(again == token);
  CHECK(token.size() >= 32);
  // Loose modes are noticed; links and FIFOs are refused.
  REQUIRE(chmod(path.c_str(), 0644) == 0);
  REQUIRE(read_token_file(path, &again, &loose, &err));
  CHECK(loose);
  REQUIRE(symlink(path.c_str(), (d.path + "/link").c_str()) == 0);
  CHECK_FALSE(read_token_file(d.path + "/link", &again, &loose, &err));
  REQUIRE(mkfifo((d.path + "/fifo").c_str(), 0600) == 0);
  CHECK_FALSE(read_token_file(d.path + "/fifo", &again, &loose, &err));
  // A directory others can write is not trusted.
  REQUIRE(fr::files::make_dirs(d.path + "/open", &err));
  REQUIRE(chmod((d.path + "/open").c_str(), 0777) == 0);
  CHECK_FALSE(ensure_token_file(d.path + "/open/token", &again, &created, &err));
}

TEST_CASE("hostile: frd's roles share the default token, and --insecure is explicit",
          "[daemon][hostile]") {
  const std::string frd = std::string(FR_BUILD_DIR) + "/bin/frd";
  if (access(frd.c_str(), X_OK) != 0) FR_SKIP(frd << " is not built");
  TempDir d;
  setenv("FR_TOKEN_FILE", (d.path + "/tok/token").c_str(), 1);
  auto spawn = [&](std::vector<std::string> args, const std::string& log) {
    pid_t pid = fork();
    if (pid == 0) {
      int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(fd, 1);
      dup2(fd, 2);
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    return pid;
  };
  auto finish = [](pid_t pid, double seconds) {
    int status = 0;
    for (int i = 0; i < int(seconds * 50); ++i) {
      if (waitpid(pid, &status, WNOHANG) == pid)
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    return -2;
  };
  pid_t coord = spawn({frd, "coordinator", "--listen", "127.0.0.1:0", "--port-file",
                       d.path + "/port", "--dump-dir", d.path + "/dumps"},
                      d.path + "/coord.log");
  REQUIRE(wait_for([&] { return !slurp(d.path + "/port").empty(); }, 30));
  std::string addr =
      "127.0.0.1:" + slurp(d.path + "/port").substr(0, slurp(d.path + "/port").find('\n'));
  CHECK(exists_no_follow(d.path + "/tok/token"));
  CHECK(finish(spawn({frd, "status", "--coordinator", addr}, d.path + "/s1.log"), 30) == 0);
  CHECK(finish(spawn({frd, "status", "--coordinator", addr, "--insecure"}, d.path + "/s2.log"),
               30) == 1);
  CHECK(slurp(d.path + "/s2.log").find("token") != std::string::npos);
  kill(coord, SIGTERM);
  CHECK(finish(coord, 30) == 0);
  unsetenv("FR_TOKEN_FILE");
  INFO(slurp(d.path + "/coord.log"));
  CHECK(slurp(d.path + "/coord.log").find("token written to") != std::string::npos);
}

TEST_CASE("hostile: bad expected_ranks in a manifest are named, not dropped silently",
          "[daemon][hostile]") {
  for (std::string bad : {"2147483647", "-5", "\"abc\"", "1.5"}) {
    std::string text = R"({"schema":"fr-dumpset/1","job_id":"j","time_ns":1,"expected_ranks":)" +
                       bad + R"(,"processes":[],"skipped":[]})";
    fr::log::Manifest m;
    std::string err;
    INFO(bad);
    REQUIRE(fr::log::parse_manifest(text, &m, &err));
    CHECK(m.expected_ranks == -1);
    REQUIRE(m.skipped.size() == 1);
    CHECK(m.skipped[0].error.find("expected_ranks") != std::string::npos);
  }
}

TEST_CASE("hostile: messages that do not decode close that node's stream, and no other",
          "[daemon][hostile]") {
  google::protobuf::LogSilencer quiet;  // protobuf logs the text that is not UTF-8, both ends
  TempDir dumps;
  CoordinatorServer server(loopback_config(dumps.path), loopback_options());
  std::string err;
  REQUIRE(server.start(&err));
  Peer good(client(server.port()), "good");
  REQUIRE(good.heartbeat(report("good", 1, 1, 0)));
  auto node = [&](const std::string& name) {
    const nlohmann::json status = server.status();
    for (const auto& n : status["nodes"])
      if (n["name"] == name) return n;
    return nlohmann::json::object();
  };
  // A heartbeat whose text is not UTF-8; a heartbeat with a hello after it in the same message
  // (the hello is then the message's body). (A message with no body this version knows is
  // skipped: protocol_test.cpp.)
  fr::v1::NodeMessage not_utf8;
  to_proto(report("bad0", 1, 1, 0), not_utf8.mutable_heartbeat());
  not_utf8.mutable_heartbeat()->mutable_processes(0)->set_log("rank\xff.frlog");
  fr::v1::NodeMessage two_bodies;
  to_proto(report("bad1", 1, 1, 0), two_bodies.mutable_heartbeat());
  fr::v1::Hello hello;
  hello.set_node_name("bad1");
  two_bodies.GetReflection()
      ->MutableUnknownFields(&two_bodies)
      ->AddLengthDelimited(1, hello.SerializeAsString());
  int i = 0;
  for (const auto* m : {&not_utf8, &two_bodies}) {
    const std::string name = "bad" + std::to_string(i++);
    INFO(name);
    Peer bad(client(server.port()), name);
    REQUIRE(bad.welcomed);
    REQUIRE(bad.send(*m));
    REQUIRE(wait_for([&] { return node(name).value("connected", true) == false; }, 10));
    bad.wait_end();
    // Refused, or cancelled when a write to it (the welcome's clock ping) was still in flight.
    CHECK((bad.status.error_code() == grpc::StatusCode::INVALID_ARGUMENT ||
           bad.status.error_code() == grpc::StatusCode::CANCELLED));
    CHECK(node(name).value("heartbeats", -1) == 0);
  }
  REQUIRE(good.heartbeat(report("good", 1, 1, 0)));
  CHECK(wait_for([&] { return node("good").value("heartbeats", 0) == 2; }, 10));
  CHECK(node("good")["connected"] == true);
}
