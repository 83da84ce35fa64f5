// The NIXL verdicts (analyzer/nixl.cpp) on synthetic dump sets: a healthy NCCL job from the
// synthesizer, with NIXL transfer entries planted in its ranks' logs (and processes without a
// rank that only use NIXL). A transfer in flight past the threshold to a stopped remote, a
// remote disconnect, a remote outside the set, healthy transfers, many transfers to one remote,
// and hostile entries (names without NUL, huge byte counts, states out of range).
#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "analyzer/analyze.h"
#include "analyzer/html.h"
#include "analyzer/model.h"
#include "synth/synth.h"
#include "analyzer/trace.h"
#include "log/snapshot.h"
#include "temp_dir.h"
#include "testing/clock.h"

namespace fs = std::filesystem;
using fr::synth::Spec;
using fr::test::kSec;
using nlohmann::json;

namespace {

constexpr uint64_t kSnapNs = 1796205700000000000ull;

struct Planted {
  std::vector<fr::log::LogFile> logs;
  std::vector<bool> alive;
};

Planted healthy_job(int ranks) {
  Spec s;
  s.ranks = ranks;
  s.tp = 1;
  s.entries = 64;
  s.ranks_per_host = 1;
  Planted p;
  p.logs = fr::synth::make_logs(s);
  p.alive.assign(p.logs.size(), true);
  return p;
}

fr_xfer_entry xfer(uint64_t id, const char* local, const char* remote, uint32_t op, uint64_t bytes,
                   uint32_t state, int32_t status, uint64_t post_ns, uint64_t done_ns) {
  fr_xfer_entry x{};
  x.id = id;
  x.create_ns = post_ns - kSec;
  x.bytes = bytes;
  x.descs = 4;
  x.op = op;
  std::strncpy(x.local_agent, local, sizeof x.local_agent - 1);
  std::strncpy(x.remote_agent, remote, sizeof x.remote_agent - 1);
  std::strncpy(x.backend, "UCX", sizeof x.backend - 1);
  x.state = state;
  x.status = status;
  x.posts = 1;
  x.post_ns = post_ns;
  x.done_ns = done_ns;
  x.status_ns = post_ns + kSec;
  x.status_calls = 7;
  return x;
}

void mark_nixl(fr::log::LogFile& log) { log.header.flags |= FR_LOG_F_NIXL; }

// A process that only used NIXL (no communicator, no rank): a copy of `like` emptied.
fr::log::LogFile nixl_only(const fr::log::LogFile& like, int pid, const char* host) {
  fr::log::LogFile log = like;
  log.comms.clear();
  log.records.clear();
  log.chans.clear();
  log.graphs.clear();
  log.captures.clear();
  log.header.record_counter = 1;  // the one record below, id 0
  log.header.global_rank = -1;
  log.header.world_size = -1;
  log.header.pid = pid;
  std::memset(log.header.hostname, 0, sizeof log.header.hostname);
  std::strncpy(log.header.hostname, host, sizeof log.header.hostname - 1);
  fr_record r{};
  r.op = FR_OP_NIXL_CREATE_AGENT;
  r.call_ns = kSnapNs - 90 * kSec;
  r.redop = r.peer = -1;
  log.records.push_back({r, FR_GPU_NONE});
  mark_nixl(log);
  return log;
}

json analyze(const Planted& planted, const fr::test::TempDir& t, std::string* text = nullptr) {
  const std::string dir = t.sub("set");
  fs::create_directories(dir);
  std::vector<fr::log::SnapshotProcess> procs;
  int n = 0;
  for (size_t i = 0; i < planted.logs.size(); ++i) {
    fr::log::LogFile log = planted.logs[i];
    log.writer_alive = planted.alive[i];
    fr::log::SnapshotProcess p;
    p.rank = log.header.global_rank;
    p.world_size = log.header.world_size;
    p.pid = log.header.pid;
    p.host = log.hostname();
    p.job_id = log.job_id();
    p.file = "proc" + std::to_string(n++) + ".frlog";
    p.alive = planted.alive[i];
    const std::string bytes = fr::log::encode_snapshot(log, kSnapNs);
    std::ofstream(fs::path(dir) / p.file, std::ios::binary)
        .write(bytes.data(), std::streamsize(bytes.size()));
    procs.push_back(p);
  }
  std::string err;
  int ranked = 0;
  for (const auto& l : planted.logs) ranked += l.header.global_rank >= 0;
  REQUIRE(fr::log::write_manifest(dir, "synthetic", kSnapNs, procs, {}, {}, "test", ranked, &err));
  std::optional<fr::analyzer::Analysis> a = fr::analyzer::analyze({dir}, {}, &err);
  INFO(err);
  REQUIRE(a);
  if (text) *text = fr::analyzer::render_text(*a, false);
  json doc = a->to_json();
  // The document reads back as it was written (the coordinator stores it).
  REQUIRE(fr::analyzer::Analysis::from_json(doc).to_json() == doc);
  return doc;
}

}  // namespace

TEST_CASE("a transfer in flight to a stopped remote is nixl_stalled, culprit the remote's process",
          "[analyzer][nixl]") {
  Planted j = healthy_job(2);
  mark_nixl(j.logs[0]);
  mark_nixl(j.logs[1]);
  j.logs[0].xfers.push_back(xfer(1, "prefill-0", "decode-1", FR_XFER_OP_WRITE, 64ull << 20,
                                 FR_XFER_IN_PROGRESS, FR_NIXL_IN_PROG, kSnapNs - 42 * kSec, 0));
  // The remote names itself by a transfer of its own, done long ago; its log went quiet since.
  j.logs[1].xfers.push_back(xfer(1, "decode-1", "prefill-0", FR_XFER_OP_READ, 4096,
                                 FR_XFER_RELEASED, 0, kSnapNs - 80 * kSec, kSnapNs - 79 * kSec));
  j.logs[1].header.heartbeat_ns = kSnapNs - 41 * kSec;
  fr::test::TempDir t;
  std::string text;
  const json doc = analyze(j, t, &text);
  const json& v = doc["verdict"];
  INFO(v.dump(2));
  CHECK(v["kind"] == "nixl_stalled");
  CHECK(v["nixl"]["remote_agent"] == "decode-1");
  CHECK(v["nixl"]["local_agent"] == "prefill-0");
  CHECK(v["nixl"]["op"] == "WRITE");
  CHECK(v["nixl"]["bytes"] == 64ull << 20);
  CHECK(v["nixl"]["state"] == "in_progress");
  CHECK(v["nixl"]["status_name"] == "NIXL_IN_PROG");
  CHECK(v["nixl"]["age_ns"] == 42 * kSec);
  CHECK(v["nixl"]["remote"]["found_by"] == "agent_name");
  CHECK(v["culprit_ranks"] == json::array({1}));
  CHECK(v["culprit_pids"] == json::array({j.logs[1].header.pid}));
  CHECK(v["blocked_ranks"] == json::array({0}));
  CHECK(v["summary"].get<std::string>().find("silent") != std::string::npos);
  CHECK(text.find("verdict: nixl_stalled") != std::string::npos);
  CHECK(text.find("decode-1") != std::string::npos);
  CHECK(text.find("* remote rank 1 pid") != std::string::npos);
  CHECK(text.find("transfer: WRITE 67108864 bytes") != std::string::npos);
  bool remote_row = false;
  for (const auto& e : v["evidence"])
    if (e["role"] == "remote")
      remote_row = e["culprit"] == true && e["rank"] == 1 && e["silent_ns"] == 41 * kSec;
  CHECK(remote_row);
}

TEST_CASE("a remote disconnect is nixl_disconnected and names the dead remote",
          "[analyzer][nixl]") {
  Planted j = healthy_job(2);
  mark_nixl(j.logs[0]);
  j.logs[0].xfers.push_back(xfer(3, "a", "b", FR_XFER_OP_READ, 1 << 20, FR_XFER_ERROR,
                                 FR_NIXL_ERR_REMOTE_DISCONNECT, kSnapNs - 5 * kSec,
                                 kSnapNs - 4 * kSec));
  j.logs[1].xfers.push_back(xfer(1, "b", "a", FR_XFER_OP_READ, 8, FR_XFER_DONE, 0,
                                 kSnapNs - 50 * kSec, kSnapNs - 50 * kSec + 1));
  j.alive[1] = false;  // killed
  fr::test::TempDir t;
  const json v = analyze(j, t)["verdict"];
  INFO(v.dump(2));
  CHECK(v["kind"] == "nixl_disconnected");  // not rank_dead: the verdict names the dead process
  CHECK(v["nixl"]["status_name"] == "NIXL_ERR_REMOTE_DISCONNECT");
  CHECK(v["nixl"]["op"] == "READ");
  CHECK(v["culprit_ranks"] == json::array({1}));
  CHECK(v["nixl"]["remote"]["alive"] == false);
  CHECK(v["summary"].get<std::string>().find("dead") != std::string::npos);
}

TEST_CASE("a transfer in flight from a dead process is no NIXL stall", "[analyzer][nixl]") {
  // Rank 1 died, after its collectives completed, with a write to rank 0's agent still in flight
  // long past the threshold: a dead process waits for nothing, so its transfer is no stall.
  Planted j = healthy_job(2);
  mark_nixl(j.logs[0]);
  mark_nixl(j.logs[1]);
  j.logs[0].xfers.push_back(xfer(1, "a", "b", FR_XFER_OP_READ, 8, FR_XFER_DONE, 0,
                                 kSnapNs - 80 * kSec, kSnapNs - 80 * kSec + 1));
  j.logs[1].xfers.push_back(xfer(1, "b", "a", FR_XFER_OP_WRITE, 1 << 20, FR_XFER_IN_PROGRESS,
                                 FR_NIXL_IN_PROG, kSnapNs - 60 * kSec, 0));
  j.alive[1] = false;
  fr::test::TempDir t;
  const json doc = analyze(j, t);
  const json& v = doc["verdict"];
  INFO(doc.dump(2));
  CHECK(v["kind"] == "no_hang");
  for (const auto& f : doc["findings"]) CHECK(f["kind"] != "nixl_stalled");
}

TEST_CASE("a transfer done before its remote went away is no disconnect", "[analyzer][nixl]") {
  // The last status read of a transfer that had already completed (or been released) says the
  // remote disconnected: the data arrived, nothing waits on it.
  Planted j = healthy_job(2);
  mark_nixl(j.logs[0]);
  j.logs[0].xfers.push_back(xfer(1, "a", "gone", FR_XFER_OP_WRITE, 1 << 20, FR_XFER_DONE,
                                 FR_NIXL_ERR_REMOTE_DISCONNECT, kSnapNs - 30 * kSec,
                                 kSnapNs - 29 * kSec));
  j.logs[0].xfers.push_back(xfer(2, "a", "gone", FR_XFER_OP_READ, 4096, FR_XFER_RELEASED,
                                 FR_NIXL_ERR_REMOTE_DISCONNECT, kSnapNs - 20 * kSec,
                                 kSnapNs - 19 * kSec));
  fr::test::TempDir t;
  const json doc = analyze(j, t);
  INFO(doc.dump(2));
  CHECK(doc["verdict"]["kind"] == "no_hang");
  CHECK(doc["findings"].empty());
}

TEST_CASE("a remote agent outside the dump set is said to be so", "[analyzer][nixl]") {
  Planted j = healthy_job(2);
  mark_nixl(j.logs[0]);
  j.logs[0].xfers.push_back(xfer(1, "a", "elsewhere", FR_XFER_OP_WRITE, 10, FR_XFER_POSTED,
                                 FR_NIXL_IN_PROG, kSnapNs - 30 * kSec, 0));
  // The other rank used no NIXL at all: it is no candidate.
  fr::test::TempDir t;
  const json v = analyze(j, t)["verdict"];
  INFO(v.dump(2));
  CHECK(v["kind"] == "nixl_stalled");
  CHECK(v["culprit_ranks"].empty());
  CHECK(v["culprit_pids"].empty());
  CHECK(v["nixl"]["remote"]["found"] == false);
  CHECK(v["summary"].get<std::string>().find("no process in the dump set hosts") !=
        std::string::npos);
}

TEST_CASE("healthy transfers give no NIXL verdict", "[analyzer][nixl]") {
  Planted j = healthy_job(2);
  mark_nixl(j.logs[0]);
  j.logs[0].xfers.push_back(xfer(1, "a", "b", FR_XFER_OP_WRITE, 10, FR_XFER_DONE, 0,
                                 kSnapNs - 30 * kSec, kSnapNs - 29 * kSec));
  j.logs[0].xfers.push_back(xfer(2, "a", "b", FR_XFER_OP_WRITE, 10, FR_XFER_RELEASED, 0,
                                 kSnapNs - 20 * kSec, kSnapNs - 19 * kSec));
  // In flight, but young: in progress, not stalled.
  j.logs[0].xfers.push_back(xfer(3, "a", "b", FR_XFER_OP_READ, 10, FR_XFER_IN_PROGRESS,
                                 FR_NIXL_IN_PROG, kSnapNs - kSec / 10, 0));
  j.logs[0].xfers.push_back(
      xfer(4, "a", "b", FR_XFER_OP_READ, 10, FR_XFER_CREATED, 0, kSnapNs - 60 * kSec, 0));
  fr::test::TempDir t;
  const json doc = analyze(j, t);
  CHECK(doc["verdict"]["kind"] == "no_hang");
  CHECK(doc["findings"].empty());
}

TEST_CASE("many transfers in flight to one remote are one verdict with their count",
          "[analyzer][nixl]") {
  Planted j = healthy_job(3);
  for (auto& l : j.logs) mark_nixl(l);
  for (uint64_t i = 1; i <= 40; ++i)
    j.logs[0].xfers.push_back(xfer(i, "p0", "target", FR_XFER_OP_WRITE, 1000, FR_XFER_IN_PROGRESS,
                                   FR_NIXL_IN_PROG, kSnapNs - (10 + i) * kSec, 0));
  for (uint64_t i = 1; i <= 5; ++i)
    j.logs[1].xfers.push_back(xfer(i, "p1", "target", FR_XFER_OP_READ, 1000, FR_XFER_POSTED,
                                   FR_NIXL_IN_PROG, kSnapNs - 5 * kSec, 0));
  // The target's log names no agent (it made no transfer): the only other NIXL process.
  j.logs[2].xfers.clear();
  fr::test::TempDir t;
  const json doc = analyze(j, t);
  const json& v = doc["verdict"];
  INFO(v.dump(2));
  CHECK(v["kind"] == "nixl_stalled");
  CHECK(v["nixl"]["transfers_to_remote"] == 45);
  CHECK(v["nixl"]["others_to_remote"] == 44);
  CHECK(v["nixl"]["posting_processes"] == 2);
  CHECK(v["nixl"]["age_ns"] == 50 * kSec);  // the oldest stands for them
  CHECK(v["nixl"]["transfers"].size() == 16);
  CHECK(v["nixl"]["remote"]["found_by"] == "only_unnamed_nixl_process");
  CHECK(v["culprit_ranks"] == json::array({2}));
  CHECK(v["blocked_ranks"] == json::array({0, 1}));
  size_t nixl_findings = 0;
  for (const auto& f : doc["findings"]) nixl_findings += f["kind"] == "nixl_stalled";
  CHECK(nixl_findings == 0);
}

TEST_CASE("a NIXL stall beside a healthy NCCL job, between processes without a rank",
          "[analyzer][nixl]") {
  Planted j = healthy_job(2);
  j.logs.push_back(nixl_only(j.logs[0], 9001, "infer-a"));
  j.logs.push_back(nixl_only(j.logs[0], 9002, "infer-b"));
  j.alive.push_back(true);
  j.alive.push_back(true);
  j.logs[2].xfers.push_back(xfer(1, "prefill", "decode", FR_XFER_OP_WRITE, 123, FR_XFER_IN_PROGRESS,
                                 FR_NIXL_IN_PROG, kSnapNs - 20 * kSec, 0));
  j.logs[3].xfers.push_back(xfer(1, "decode", "prefill", FR_XFER_OP_READ, 1, FR_XFER_DONE, 0,
                                 kSnapNs - 70 * kSec, kSnapNs - 69 * kSec));
  fr::test::TempDir t;
  std::string text;
  const json doc = analyze(j, t, &text);
  const json& v = doc["verdict"];
  INFO(v.dump(2));
  CHECK(v["kind"] == "nixl_stalled");
  CHECK(v["culprit_ranks"].empty());  // no rank: named by its pid
  CHECK(v["culprit_pids"] == json::array({9002}));
  CHECK(v["nixl"]["poster"]["pid"] == 9001);
  CHECK(v["nixl"]["poster"]["rank"].is_null());
  CHECK(doc["ranks"]["found"] == json::array({0, 1}));  // the census is the NCCL job's
  CHECK(text.find("pid 9001 on infer-a") != std::string::npos);
  const std::string page = fr::analyzer::render_incident_html(doc, {});
  CHECK(page.find("NIXL <b>WRITE 123 bytes</b>") != std::string::npos);
  CHECK(page.find("remote pid <b style=\"color:var(--bad)\">9002</b>") != std::string::npos);
}

TEST_CASE("a collective hang whose culprit waits for a transfer: the transfer is the verdict",
          "[analyzer][nixl]") {
  Spec s;
  s.ranks = 2;
  s.tp = 1;
  s.entries = 64;
  s.ranks_per_host = 1;
  fr::synth::Fault f;
  std::string err;
  REQUIRE(fr::synth::parse_fault("rank=1,kind=hang-host", &f, &err));
  s.faults.push_back(f);
  Planted j;
  j.logs = fr::synth::make_logs(s);
  j.alive.assign(2, true);
  j.logs.push_back(nixl_only(j.logs[0], 7777, "store"));
  j.alive.push_back(true);
  mark_nixl(j.logs[1]);
  // Rank 1 never came to the collective: it waits, since long before, for a read from "store".
  j.logs[1].xfers.push_back(xfer(1, "trainer-1", "store", FR_XFER_OP_READ, 1 << 30,
                                 FR_XFER_IN_PROGRESS, FR_NIXL_IN_PROG, s.base_ns + 1'000'000, 0));
  fr::test::TempDir t;
  const json doc = analyze(j, t);
  std::string seen;
  for (const auto& x : doc["findings"])
    seen += x["kind"].get<std::string>() + ": " + x["summary"].get<std::string>() + "\n";
  for (const auto& x : doc["inputs"]["skipped"]) seen += "skipped " + x.dump() + "\n";
  INFO(seen);
  CHECK(doc["verdict"]["kind"] == "nixl_stalled");
  CHECK(doc["verdict"]["blocked_ranks"] == json::array({1}));
  CHECK(doc["verdict"]["culprit_pids"] == json::array({7777}));
  bool not_entered = false;
  for (const auto& x : doc["findings"]) not_entered |= x["kind"] == "not_entered";
  CHECK(not_entered);
}

TEST_CASE("hostile transfer entries: no crash, names escaped, bad states refused",
          "[analyzer][nixl]") {
  Planted j = healthy_job(2);
  mark_nixl(j.logs[0]);
  fr_xfer_entry x = xfer(1, "", "", FR_XFER_OP_WRITE, UINT64_MAX, FR_XFER_IN_PROGRESS,
                         FR_NIXL_IN_PROG, kSnapNs - 100 * kSec, 0);
  std::memset(x.local_agent, 'L', sizeof x.local_agent);     // no NUL
  std::memset(x.remote_agent, 0x1b, sizeof x.remote_agent);  // ESC bytes, no NUL
  std::memset(x.backend, 0xff, sizeof x.backend);
  std::memset(x.notif, '\r', sizeof x.notif);
  x.flags = FR_XFER_F_NOTIF | FR_XFER_F_NOTIF_CUT;
  j.logs[0].xfers.push_back(x);
  fr_xfer_entry bad_state =
      xfer(2, "a", "b", FR_XFER_OP_WRITE, 1, 77, FR_NIXL_IN_PROG, kSnapNs - 100 * kSec, 0);
  fr_xfer_entry bad_op =
      xfer(3, "a", "b", 9, 1, FR_XFER_POSTED, FR_NIXL_IN_PROG, kSnapNs - 100 * kSec, 0);
  fr_xfer_entry future = xfer(4, "a", "c", FR_XFER_OP_READ, 1, FR_XFER_POSTED, FR_NIXL_IN_PROG,
                              kSnapNs + 100 * kSec, 0);
  fr_xfer_entry no_posts = xfer(5, "a", "d", FR_XFER_OP_READ, 1, FR_XFER_POSTED, FR_NIXL_IN_PROG,
                                kSnapNs - 100 * kSec, 0);
  no_posts.posts = 0;
  for (const auto& e : {bad_state, bad_op, future, no_posts}) j.logs[0].xfers.push_back(e);
  fr::test::TempDir t;
  std::string text;
  const json doc = analyze(j, t, &text);
  const json& v = doc["verdict"];
  INFO(v.dump(2));
  REQUIRE(v["kind"] == "nixl_stalled");
  CHECK(v["nixl"]["bytes"] == UINT64_MAX);
  const std::string remote = v["nixl"]["remote_agent"];
  CHECK(remote.find('\x1b') == std::string::npos);
  CHECK(remote.rfind("\\x1b\\x1b", 0) == 0);
  CHECK(v["nixl"]["local_agent"].get<std::string>().size() == 63);  // cut to its array
  CHECK(v["nixl"]["notif"].get<std::string>().find('\r') == std::string::npos);
  CHECK(v["nixl"]["notif_cut"] == true);
  CHECK(text.find('\x1b') == std::string::npos);
  CHECK(text.find('\r') == std::string::npos);
  // Out-of-range states and ops are refused by the reader; the rest stall nothing.
  size_t nixl = 0;
  for (const auto& f : doc["findings"]) nixl += f["kind"] == "nixl_stalled";
  CHECK(nixl == 0);
}

TEST_CASE("the trace draws NIXL calls and transfers on their process's track", "[analyzer][nixl]") {
  Planted j = healthy_job(2);
  j.logs.push_back(nixl_only(j.logs[0], 9001, "infer-a"));
  j.alive.push_back(true);
  j.logs[2].xfers.push_back(xfer(1, "prefill", "decode", FR_XFER_OP_WRITE, 123, FR_XFER_IN_PROGRESS,
                                 FR_NIXL_IN_PROG, kSnapNs - 20 * kSec, 0));
  j.logs[2].xfers.push_back(xfer(2, "prefill", "decode", FR_XFER_OP_READ, 5, FR_XFER_DONE, 0,
                                 kSnapNs - 30 * kSec, kSnapNs - 29 * kSec));
  fr::test::TempDir t;
  const json doc = analyze(j, t);
  std::string err;
  auto model = fr::analyzer::load_model({t.sub("set")}, 2);
  auto a = fr::analyzer::analyze_model(model, {});
  REQUIRE(fr::analyzer::write_trace(model, a, {}, t.sub("trace.json"), &err));
  std::ifstream in(t.sub("trace.json"));
  const json tr = json::parse(in);
  int nixl_pid = -1;
  for (const auto& e : tr["traceEvents"])
    if (e["ph"] == "M" && e["name"] == "process_name" && e["args"]["name"] == "NIXL transfers")
      nixl_pid = e["pid"];
  REQUIRE(nixl_pid > 0);
  bool in_flight = false, done = false, call = false, track = false;
  for (const auto& e : tr["traceEvents"]) {
    if (e["pid"] != nixl_pid) continue;
    const std::string name = e["name"];
    if (e["ph"] == "b" && name == "WRITE 123 B to decode (in flight)")
      in_flight = e.value("cname", "") == "bad";
    if (e["ph"] == "b" && name == "READ 5 B from decode") done = true;
    if (e["ph"] == "X" && name == "NixlCreateAgent") call = true;
    if (e["ph"] == "M" && e["name"] == "thread_name")
      track = e["args"]["name"] == "pid 9001 infer-a";
  }
  CHECK(in_flight);
  CHECK(done);
  CHECK(call);
  CHECK(track);
  (void)doc;
}

TEST_CASE("a process with more transfers than the cap keeps those in flight and counts the rest",
          "[analyzer][nixl]") {
  // One rankless process with 1,000 transfers over the cap, each from its own local agent, all
  // done but the last in table order, which has been in flight to decode-9 for 30 s (#37).
  Planted j = healthy_job(2);
  j.logs.push_back(nixl_only(j.logs[0], 7000, "prefill-host"));
  j.alive.push_back(true);
  fr::log::LogFile& big = j.logs.back();
  const size_t n = fr::analyzer::kMaxXfersPerProc + 1000;
  big.xfers.reserve(n);
  for (size_t i = 0; i + 1 < n; ++i) {
    const std::string local = "prefill-" + std::to_string(i);
    big.xfers.push_back(xfer(i + 1, local.c_str(), "decode-0", FR_XFER_OP_WRITE, 4096,
                             FR_XFER_RELEASED, 0, kSnapNs - 60 * kSec, kSnapNs - 59 * kSec));
  }
  big.xfers.push_back(xfer(n, "prefill-last", "decode-9", FR_XFER_OP_WRITE, 4096,
                           FR_XFER_IN_PROGRESS, FR_NIXL_IN_PROG, kSnapNs - 30 * kSec, 0));
  fr::test::TempDir t;
  const json doc = analyze(j, t);
  const json& v = doc["verdict"];
  INFO(v.dump(1));
  CHECK(v["kind"] == "nixl_stalled");
  CHECK(v["nixl"]["remote_agent"] == "decode-9");
  CHECK(v["nixl"]["local_agent"] == "prefill-last");
  bool counted = false;
  for (const auto& w : doc["inputs"]["warnings"])
    counted = counted || w["warning"].get<std::string>().find("1000 NIXL transfers left out") !=
                             std::string::npos;
  INFO(doc["inputs"]["warnings"].dump(1));
  CHECK(counted);
}
