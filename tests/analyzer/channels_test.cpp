// The localization inside an all-entered collective (analyzer/channels.cpp) on synthetic dump
// sets: a gpu-stall leaves a stuck_in_collective, and channel slots written into the members'
// logs describe where it stopped. The rule must follow a stall upstream (a sender that waits
// itself is not the cause), prefer the earliest step over the lower channel, tell a lost link
// from a stopped kernel, and ignore slots of other communicators or ops.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "analyzer/analyze.h"
#include "synth/synth.h"
#include "log/snapshot.h"
#include "temp_dir.h"

namespace fs = std::filesystem;
using fr::synth::Spec;
using nlohmann::json;

namespace {

struct Slot {
  int rank, channel, kind, peer;
  uint32_t step;
  uint32_t state;
};

json analyze(std::vector<fr::log::LogFile> logs, const fr::test::TempDir& t) {
  const std::string dir = t.sub("set");
  fs::create_directories(dir);
  std::vector<fr::log::SnapshotProcess> procs;
  for (const auto& log : logs) {
    fr::log::SnapshotProcess p;
    p.rank = log.header.global_rank;
    p.world_size = log.header.world_size;
    p.pid = log.header.pid;
    p.host = log.hostname();
    p.job_id = log.job_id();
    p.file = "rank" + std::to_string(p.rank) + ".frlog";
    p.alive = true;
    const std::string bytes = fr::log::encode_snapshot(log, 1796205700000000000ull);
    std::ofstream(fs::path(dir) / p.file, std::ios::binary)
        .write(bytes.data(), std::streamsize(bytes.size()));
    procs.push_back(p);
  }
  std::string err;
  REQUIRE(fr::log::write_manifest(dir, "synthetic", 1796205700000000000ull, procs, {}, {}, "test",
                                  static_cast<int>(logs.size()), &err));
  json doc = fr::analyzer::analyze_paths({dir}, {}, &err);
  INFO(err);
  REQUIRE(doc.is_object());
  return doc;
}

std::vector<fr::log::LogFile> stuck_logs(json* verdict, bool rank1_started = true) {
  Spec s;
  s.ranks = 4;
  s.tp = 1;
  s.entries = 96;
  s.ranks_per_host = 1;
  fr::synth::Fault f;
  std::string err;
  REQUIRE(fr::synth::parse_fault("rank=1,kind=gpu-stall", &f, &err));
  s.faults.push_back(f);
  auto logs = fr::synth::make_logs(s);
  // Rank 1's GPU stopped inside the op, not before it: every member's GPU started it, so the
  // channels may name anyone (with a GPU that never started it, only that one: see
  // "a GPU that never started the op is not blamed on its neighbours" below).
  for (auto& log : logs) {
    if (log.header.global_rank != 1 || !rank1_started) continue;
    for (auto& c : log.comms) {
      uint64_t first = 0;
      for (auto& rec : log.records)
        if (rec.raw.comm_id == c.id && rec.gpu_state == FR_GPU_ENQUEUED && rec.raw.op_index != 0 &&
            (first == 0 || rec.raw.op_index < first))
          first = rec.raw.op_index;
      for (auto& rec : log.records)
        if (rec.raw.comm_id == c.id && first != 0 && rec.raw.op_index == first) {
          rec.gpu_state = FR_GPU_STARTED;
          rec.raw.gpu_state = static_cast<uint8_t>(rec.gpu_state);
        }
      if (first != 0) c.gpu_started = std::max<uint64_t>(c.gpu_started, first);
    }
  }
  fr::test::TempDir t;
  *verdict = analyze(logs, t)["verdict"];
  REQUIRE((*verdict)["kind"] == "stuck_in_collective");
  return logs;
}

uint16_t op_code(const std::string& name) {
  for (uint16_t v = 0; v < 128; ++v)
    if (name == fr::log::op_name(v)) return v;
  return FR_OP_NONE;
}

void plant(std::vector<fr::log::LogFile>& logs, const json& verdict, const std::vector<Slot>& slots,
           uint64_t comm_override = 0) {
  const uint64_t comm = comm_override
                            ? comm_override
                            : std::stoull(verdict["comm"]["id"].get<std::string>(), nullptr, 16);
  const uint16_t op = op_code(verdict["op"]);
  for (const Slot& s : slots)
    for (auto& log : logs) {
      if (log.header.global_rank != s.rank) continue;
      fr_chan_entry e{};
      e.lock = 2;
      e.comm_id = comm;
      e.rank = s.rank;
      e.nranks = 4;
      e.peer = s.kind == FR_CHAN_KERNEL ? -1 : s.peer;
      e.channel = uint16_t(s.channel);
      e.kind = uint8_t(s.kind);
      e.ctx_ordinal = 1;
      e.op = op;
      e.state = s.state;
      e.nsteps = 16;
      e.posted = s.step + 1;
      e.done = s.step;
      e.state_step = s.step;
      e.ops_started = 3;
      e.ops_done = 2;
      log.chans.push_back(e);
    }
}

}  // namespace

TEST_CASE("channels: a stopped kernel is found upstream of the ranks that wait", "[analyzer]") {
  json v;
  auto logs = stuck_logs(&v);
  // Ring on channel 0: r -> r+1. Rank 2's kernel stopped at step 5 (it holds 1's data and never
  // sent to 3); rank 0 waits for 3 at step 6, but 3 waits itself: not a cause.
  plant(logs, v,
        {{3, 0, FR_CHAN_RECV, 2, 5, FR_CHANST_RECV_WAIT},
         {2, 0, FR_CHAN_SEND, 3, 5, FR_CHANST_SEND_GPU_WAIT},
         {2, 0, FR_CHAN_RECV, 1, 5, FR_CHANST_RECV_GPU_WAIT},
         {1, 0, FR_CHAN_SEND, 2, 6, FR_CHANST_DONE},
         {0, 0, FR_CHAN_RECV, 3, 4, FR_CHANST_RECV_WAIT},
         {3, 0, FR_CHAN_SEND, 0, 4, FR_CHANST_SEND_GPU_WAIT}});
  fr::test::TempDir t;
  const json w = analyze(logs, t)["verdict"];
  INFO(w.dump(2));
  REQUIRE(w.contains("where"));
  CHECK(w["where"]["channel"] == 0);
  CHECK(w["where"]["step"] == 5);
  CHECK(w["where"]["waiting_rank"] == 3);
  CHECK(w["where"]["peer_rank"] == 2);
  CHECK(w["where"]["cause"] == "kernel");
  CHECK(w["culprit_ranks"] == json::array({2}));
  CHECK(w["channel_progress"].size() == 6);
}

TEST_CASE("channels: the earliest step wins over the lower channel, a link is both ends",
          "[analyzer]") {
  json v;
  auto logs = stuck_logs(&v);
  plant(logs, v,
        {// channel 0: rank 1 waits for 0 at step 5, 0's proxy never sent it
         {1, 0, FR_CHAN_RECV, 0, 5, FR_CHANST_RECV_WAIT},
         {0, 0, FR_CHAN_SEND, 1, 5, FR_CHANST_SEND_GPU_WAIT},
         {0, 0, FR_CHAN_RECV, 3, 6, FR_CHANST_DONE},
         // channel 1 (ring r -> r-1): 3 sent step 2 to 2, which never got it
         {2, 1, FR_CHAN_RECV, 3, 2, FR_CHANST_RECV_WAIT},
         {3, 1, FR_CHAN_SEND, 2, 2, FR_CHANST_SEND_WAIT}});
  fr::test::TempDir t;
  const json w = analyze(logs, t)["verdict"];
  INFO(w.dump(2));
  REQUIRE(w.contains("where"));
  CHECK(w["where"]["channel"] == 1);
  CHECK(w["where"]["step"] == 2);
  CHECK(w["where"]["waiting_rank"] == 2);
  CHECK(w["where"]["peer_rank"] == 3);
  CHECK(w["where"]["direction"] == "recv");
  CHECK(w["where"]["cause"] == "link");
  CHECK(w["culprit_ranks"] == json::array({2, 3}));
  CHECK(w["summary"].get<std::string>().find(
            "channel 1 stopped at step 2; rank 2 waits for data from rank 3 over NET") !=
        std::string::npos);
}

TEST_CASE("channels: a GPU that never started the op is not blamed on its neighbours",
          "[analyzer]") {
  json v;
  auto logs = stuck_logs(&v, false);  // rank 1's GPU is held before the op
  INFO(v.dump(2));
  REQUIRE(v["culprit_ranks"] == json::array({1}));
  // Waits that blame rank 2 (it started the op): the ring waits behind rank 1, not on rank 2.
  auto blaming_2 = logs;
  plant(blaming_2, v,
        {{3, 0, FR_CHAN_RECV, 2, 5, FR_CHANST_RECV_WAIT},
         {2, 0, FR_CHAN_SEND, 3, 5, FR_CHANST_SEND_GPU_WAIT},
         {2, 0, FR_CHAN_RECV, 1, 5, FR_CHANST_RECV_GPU_WAIT}});
  fr::test::TempDir t;
  json w = analyze(blaming_2, t)["verdict"];
  INFO(w.dump(2));
  CHECK(!w.contains("where"));
  CHECK(w["culprit_ranks"] == json::array({1}));
  CHECK(w["channel_progress"].size() == 3);
  // A wait that blames rank 1 itself localizes the stall.
  plant(logs, v, {{2, 1, FR_CHAN_RECV, 1, 0, FR_CHANST_RECV_WAIT}});
  fr::test::TempDir t2;
  w = analyze(logs, t2)["verdict"];
  INFO(w.dump(2));
  REQUIRE(w.contains("where"));
  CHECK(w["where"]["peer_rank"] == 1);
  CHECK(w["where"]["step"] == 0);
  CHECK(w["culprit_ranks"] == json::array({1}));
}

TEST_CASE("channels: slots of another communicator, or finished, localize nothing", "[analyzer]") {
  json v;
  auto logs = stuck_logs(&v);
  plant(logs, v, {{3, 0, FR_CHAN_RECV, 2, 5, FR_CHANST_RECV_WAIT}}, 0x1234);
  fr::test::TempDir t;
  const json w = analyze(logs, t)["verdict"];
  CHECK(w["kind"] == "stuck_in_collective");
  CHECK_FALSE(w.contains("where"));
  CHECK(w["summary"] == v["summary"]);
}

TEST_CASE("channels: a sender that finished the waited step sent it, the link lost it",
          "[analyzer]") {
  // Rank 2 waits for step 3 from rank 3 on channel 0. Rank 3 finished step 3 (its slot is past
  // it, waiting on its GPU for step 4): the data left the sender, so the link 3 -> 2 lost it. A
  // sender that had not sent the step, without a receive side here, would be the only suspect.
  json v;
  auto logs = stuck_logs(&v);
  plant(logs, v,
        {{2, 0, FR_CHAN_RECV, 3, 3, FR_CHANST_RECV_WAIT},
         {3, 0, FR_CHAN_SEND, 2, 4, FR_CHANST_SEND_GPU_WAIT}});
  fr::test::TempDir t;
  const json w = analyze(logs, t)["verdict"];
  INFO(w.dump(2));
  REQUIRE(w.contains("where"));
  CHECK(w["where"]["channel"] == 0);
  CHECK(w["where"]["step"] == 3);
  CHECK(w["where"]["waiting_rank"] == 2);
  CHECK(w["where"]["peer_rank"] == 3);
  CHECK(w["where"]["cause"] == "link");
  CHECK(w["culprit_ranks"] == json::array({2, 3}));
}
