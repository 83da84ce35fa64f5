// ncclCommGrow gives one communicator per NCCL communicator: members derive the grown
// communicator's id from their parent, the joining rank hashes the unique id it was given, and
// the coordinating member's ncclCommGetUniqueId ties the two. A hang after the grow is decided on
// the grown communicator at full size.
#include <unistd.h>

#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "analyzer/analyze.h"
#include "log/snapshot.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr uint64_t kParent = 0x1111, kDerived = 0x2222, kUid = 0x3333;
constexpr uint64_t kBase = 1796205600000000000ull;

fr_comm_entry comm(uint64_t id, uint64_t parent, int size, int rank, uint32_t origin,
                   uint64_t coll_seq) {
  fr_comm_entry c{};
  c.id = id;
  c.parent_id = parent;
  c.size = size;
  c.rank = rank;
  c.origin = origin;
  c.state = FR_COMM_LIVE;
  c.coll_seq = coll_seq;
  std::strcpy(c.name, id == kParent ? "world" : "world_grown");
  return c;
}

fr_record rec(uint64_t id, uint16_t op, uint64_t comm_id, uint64_t seq, uint64_t aux,
              fr_gpu_state gpu) {
  fr_record r{};
  r.id = id;
  r.op = op;
  r.comm_id = comm_id;
  r.seq = seq;
  r.aux = aux;
  r.count = 16;
  r.dtype = 7;
  r.redop = 0;
  r.peer = -1;
  r.call_ns = kBase + id * 1000;
  r.flags = seq ? FR_REC_F_LAUNCHED : 0u;
  r.gpu_state = static_cast<uint8_t>(gpu);
  return r;
}

// A communicator call still inside NCCL (in its call, result pending), as a blocked grow or shrink
// looks; `count` is the new communicator's size.
fr_record pending(uint64_t id, uint16_t op, uint64_t count) {
  fr_record r = rec(id, op, kParent, 0, kDerived, FR_GPU_NONE);
  r.count = count;
  r.flags = FR_REC_F_IN_CALL;
  r.result = FR_RESULT_PENDING;
  return r;
}

fr::log::LogFile proc(int rank) {
  fr::log::LogFile l;
  l.header.magic = FR_LOG_MAGIC;
  l.header.version = FR_LOG_VERSION;
  l.header.global_rank = rank;
  l.header.world_size = 4;
  l.header.pid = 100 + rank;
  l.header.flags = FR_LOG_F_GPU_MARKERS;
  std::strcpy(l.header.job_id, "grow");
  std::strcpy(l.header.hostname, "node0");
  l.writer_alive = true;
  return l;
}

void add(fr::log::LogFile& l, fr_record r) {
  l.records.push_back(fr::log::Record{r, static_cast<fr_gpu_state>(r.gpu_state)});
}

// Ranks 0-2 had a world of 3 and grew it to 4 (rank 0 coordinating); rank 3 joined. Then the
// members all-reduce on the grown communicator: `joiner_enters` says whether rank 3 did too.
std::vector<fr::log::LogFile> grown_job(bool joiner_enters) {
  std::vector<fr::log::LogFile> logs;
  for (int r = 0; r < 3; ++r) {
    auto l = proc(r);
    l.comms.push_back(comm(kParent, 0, 3, r, FR_ORIGIN_INIT_RANK, 1));
    l.comms.push_back(comm(kDerived, kParent, 4, r, FR_ORIGIN_GROW, 1));
    uint64_t id = 0;
    add(l, rec(id++, FR_OP_ALLREDUCE, kParent, 1, 0, FR_GPU_COMPLETED));
    if (r == 0) add(l, rec(id++, FR_OP_COMM_GET_UNIQUE_ID, kParent, 0, kUid, FR_GPU_NONE));
    add(l, rec(id++, FR_OP_COMM_GROW, kParent, 0, kDerived, FR_GPU_NONE));
    add(l, rec(id++, FR_OP_ALLREDUCE, kDerived, 1, 0,
               joiner_enters ? FR_GPU_COMPLETED : FR_GPU_STARTED));
    l.header.record_counter = id;
    logs.push_back(l);
  }
  auto l = proc(3);
  l.comms.push_back(comm(kUid, 0, 4, 3, FR_ORIGIN_GROW, joiner_enters ? 1 : 0));
  add(l, rec(0, FR_OP_COMM_GROW, kUid, 0, 0, FR_GPU_NONE));
  if (joiner_enters) add(l, rec(1, FR_OP_ALLREDUCE, kUid, 1, 0, FR_GPU_COMPLETED));
  l.header.record_counter = joiner_enters ? 2 : 1;
  logs.push_back(l);
  return logs;
}

json analyze(const std::vector<fr::log::LogFile>& logs) {
  char tmpl[] = "/tmp/fr-grow-test.XXXXXX";
  REQUIRE(mkdtemp(tmpl) != nullptr);
  std::string dir = tmpl;
  for (const auto& l : logs) {
    std::string bytes = fr::log::encode_snapshot(l, kBase + 1000000);
    std::ofstream(dir + "/rank" + std::to_string(l.header.global_rank) + ".frlog", std::ios::binary)
        .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  std::string err;
  json doc = fr::analyzer::analyze_paths({dir}, {}, &err);
  fs::remove_all(dir);
  INFO(err);
  REQUIRE(doc.is_object());
  return doc;
}

}  // namespace

TEST_CASE("grow: members and the joining rank share one communicator", "[analyzer]") {
  json doc = analyze(grown_job(true));
  INFO(doc.dump(1));
  CHECK(doc["verdict"]["kind"] == "no_hang");
  int grown = 0;
  for (const auto& c : doc["communicators"])
    if (c["id"] == "0x0000000000002222") {
      ++grown;
      CHECK(c["members"].size() == 4);
    }
  CHECK(grown == 1);
  for (const auto& c : doc["communicators"]) CHECK(c["id"] != "0x0000000000003333");
}

TEST_CASE("grow: a hang after the grow is decided on the grown communicator at full size",
          "[analyzer]") {
  json doc = analyze(grown_job(false));
  const json& v = doc["verdict"];
  INFO(v.dump(1));
  CHECK(v["kind"] == "not_entered");
  CHECK(v["culprit_ranks"] == json::array({3}));
  CHECK(v["comm"]["id"] == "0x0000000000002222");
  CHECK(v["comm"]["size"] == 4);
}

TEST_CASE("revoke shows in the evidence: the member's state and its revoke call", "[analyzer]") {
  std::vector<fr::log::LogFile> logs;
  for (int r = 0; r < 2; ++r) {
    auto l = proc(r);
    l.header.world_size = 2;
    auto c = comm(kParent, 0, 2, r, FR_ORIGIN_INIT_RANK, r == 0 ? 2 : 1);
    if (r == 1) c.state = FR_COMM_REVOKED;
    l.comms.push_back(c);
    add(l, rec(0, FR_OP_ALLREDUCE, kParent, 1, 0, FR_GPU_COMPLETED));
    if (r == 0) add(l, rec(1, FR_OP_ALLREDUCE, kParent, 2, 0, FR_GPU_STARTED));
    if (r == 1) add(l, rec(1, FR_OP_COMM_REVOKE, kParent, 0, 0, FR_GPU_NONE));
    l.header.record_counter = 2;
    logs.push_back(l);
  }
  json doc = analyze(logs);
  const json& v = doc["verdict"];
  INFO(v.dump(1));
  CHECK(v["kind"] == "not_entered");
  CHECK(v["culprit_ranks"] == json::array({1}));
  bool seen = false;
  for (const auto& e : v["evidence"])
    if (e["rank"] == 1) {
      seen = true;
      CHECK(e["comm_state"] == "revoked");
      CHECK(e["last_lifecycle_call"]["op"] == "CommRevoke");
    } else {
      CHECK(!e.contains("comm_state"));
    }
  CHECK(seen);
}

TEST_CASE("grow: a joiner that never calls it is named, not_entered in CommGrow", "[analyzer]") {
  // Ranks 0-2 (a shrunk world of 3) grow it to 4; the process that should take rank 3 never
  // calls NCCL, so it leaves no dump. The members wait inside ncclCommGrow.
  std::vector<fr::log::LogFile> logs;
  for (int r = 0; r < 3; ++r) {
    auto l = proc(r);
    l.comms.push_back(comm(kParent, 0, 3, r, FR_ORIGIN_SHRINK, 1));
    uint64_t id = 0;
    add(l, rec(id++, FR_OP_ALLREDUCE, kParent, 1, 0, FR_GPU_COMPLETED));
    if (r == 0) add(l, rec(id++, FR_OP_COMM_GET_UNIQUE_ID, kParent, 0, kUid, FR_GPU_NONE));
    fr_record g = pending(id++, FR_OP_COMM_GROW, 4);
    add(l, g);
    l.header.record_counter = id;
    logs.push_back(l);
  }
  json doc = analyze(logs);
  const json& v = doc["verdict"];
  INFO(doc.dump(1));
  CHECK(v["kind"] == "not_entered");
  CHECK(v["op"] == "CommGrow");
  CHECK(v["seq_kind"] == "api");
  CHECK(v["culprit_ranks"] == json::array({3}));
  CHECK(v["blocked_ranks"].size() == 3);
}

TEST_CASE("shrink: a member that died before it is named, the excluded rank that left is not",
          "[analyzer]") {
  // A world of 4: rank 3 destroyed its communicators and left; ranks 0 and 2 shrink the world
  // without it (its record excludes rank 3) and wait for rank 1, which died before calling it.
  std::vector<fr::log::LogFile> logs;
  for (int r = 0; r < 4; ++r) {
    auto l = proc(r);
    auto c = comm(kParent, 0, 4, r, FR_ORIGIN_INIT_RANK, 1);
    uint64_t id = 0;
    add(l, rec(id++, FR_OP_ALLREDUCE, kParent, 1, 0, FR_GPU_COMPLETED));
    if (r == 3) {
      c.state = FR_COMM_DESTROYED;
      add(l, rec(id++, FR_OP_COMM_DESTROY, kParent, 0, 0, FR_GPU_NONE));
    } else if (r != 1) {
      add(l, rec(id++, FR_OP_COMM_REVOKE, kParent, 0, 0, FR_GPU_NONE));
      c.state = FR_COMM_REVOKED;
      fr_record s = pending(id++, FR_OP_COMM_SHRINK, 3);
      s.sendbuff = 1ull << 3;
      add(l, s);
    }
    l.comms.push_back(c);
    l.writer_alive = r == 0 || r == 2;
    l.header.record_counter = id;
    logs.push_back(l);
  }
  json doc = analyze(logs);
  const json& v = doc["verdict"];
  INFO(doc.dump(1));
  CHECK(v["kind"] == "rank_dead");
  CHECK(v["op"] == "CommShrink");
  CHECK(v["culprit_ranks"] == json::array({1}));
  bool named = false;
  for (const auto& f : doc["findings"])
    if (f["op"] == "CommShrink") {
      named = true;
      CHECK(f["kind"] == "not_entered");
      CHECK(f["culprit_ranks"] == json::array({1}));
      CHECK(f["shrink_excluded"] == json::array({3}));
    }
  CHECK(named);
}

TEST_CASE("shrink: without the excluded ranks (an older writer) the rank that left is named too",
          "[analyzer]") {
  // The same job from a writer that did not record the exclusion: nothing tells rank 3 apart.
  std::vector<fr::log::LogFile> logs;
  for (int r = 0; r < 3; ++r) {
    auto l = proc(r);
    l.header.world_size = 3;
    l.comms.push_back(comm(kParent, 0, 3, r, FR_ORIGIN_INIT_RANK, 1));
    uint64_t id = 0;
    add(l, rec(id++, FR_OP_ALLREDUCE, kParent, 1, 0, FR_GPU_COMPLETED));
    if (r != 2) {
      fr_record s = pending(id++, FR_OP_COMM_SHRINK, 0);
      add(l, s);
    }
    l.header.record_counter = id;
    logs.push_back(l);
  }
  json doc = analyze(logs);
  const json& v = doc["verdict"];
  INFO(doc.dump(1));
  CHECK(v["kind"] == "not_entered");
  CHECK(v["op"] == "CommShrink");
  CHECK(v["culprit_ranks"] == json::array({2}));
  CHECK(!v.contains("shrink_excluded"));
}

TEST_CASE("shrink: excluded ranks from 128 on come from the CommShrinkExcluded records",
          "[analyzer]") {
  // A world of 200 that shrinks to 3: ranks 0 and 1 call the shrink, excluding 3..199 but 150;
  // rank 2 never calls it and rank 150 left no dump. Only ranks 0-2 have dumps. The shrink record
  // names the excluded ranks below 128 (3..127), two CommShrinkExcluded records the others, as
  // the agent writes them (flight_log.h): 128..191 but 150, and 192..199.
  std::vector<fr::log::LogFile> logs;
  for (int r = 0; r < 3; ++r) {
    auto l = proc(r);
    l.header.world_size = 200;
    l.comms.push_back(comm(kParent, 0, 200, r, FR_ORIGIN_INIT_RANK, 1));
    uint64_t id = 0;
    add(l, rec(id++, FR_OP_ALLREDUCE, kParent, 1, 0, FR_GPU_COMPLETED));
    if (r != 2) {
      fr_record s = pending(id++, FR_OP_COMM_SHRINK, 4);
      s.sendbuff = ~0ull << 3;
      s.recvbuff = ~0ull;
      add(l, s);
      fr_record x = rec(id++, FR_OP_COMM_SHRINK_EXCLUDED, kParent, 0, kDerived, FR_GPU_NONE);
      x.peer = 128;
      x.sendbuff = ~(1ull << (150 - 128));
      x.recvbuff = 0xff;
      add(l, x);
      x = rec(id++, FR_OP_COMM_SHRINK_EXCLUDED, kParent, 0, kDerived, FR_GPU_NONE);
      x.peer = 7 * 128;  // a block no rank of this communicator is in: harmless
      x.sendbuff = 1;
      x.recvbuff = 0;
      add(l, x);
    }
    l.header.record_counter = id;
    logs.push_back(l);
  }
  json doc = analyze(logs);
  const json& v = doc["verdict"];
  INFO(doc.dump(1));
  CHECK(v["kind"] == "not_entered");
  CHECK(v["op"] == "CommShrink");
  CHECK(v["culprit_ranks"] == json::array({2, 150}));
  json excluded = json::array();
  for (int r = 3; r < 200; ++r)
    if (r != 150) excluded.push_back(r);
  excluded.push_back(7 * 128);
  CHECK(v["shrink_excluded"] == excluded);
  // The extension records are part of their shrink, not calls of their own.
  for (const auto& e : v["evidence"])
    CHECK(e.dump().find("CommShrinkExcluded") == std::string::npos);
}
