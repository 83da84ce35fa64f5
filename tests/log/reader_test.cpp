// Reader tests: round trips, torn records under a concurrent writer in another process, liveness
// through the writer's lock, and every kind of bad file.
#include <signal.h>
#include <sys/wait.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <thread>

#include "log/reader.h"
#include "test_log.h"
#include "testing/files.h"

using fr::test::slurp;
using fr::test::spit;
using fr::test::TempDir;
using fr::test::TestLog;

namespace {

constexpr uint64_t kComm = 0xC0FFEE;

}  // namespace

TEST_CASE("a log reads back whole, oldest record first, with GPU state resolved") {
  TempDir dir;
  TestLog w;
  REQUIRE(w.create(dir.path + "/a.frlog", 4, 16, 3));
  w.add_comm(0, kComm, 8, 3, /*started=*/5, /*completed=*/3);
  for (int i = 0; i < 10; ++i) w.append(kComm);

  auto r = fr::log::read_log(w.path);
  REQUIRE(r.ok());
  const auto& log = *r.log;
  CHECK(log.header.global_rank == 3);
  CHECK(log.job_id() == "job-test");
  CHECK(log.hostname() == "hostA");
  REQUIRE(log.comms.size() == 1);
  CHECK(log.comms[0].size == 8);
  REQUIRE(log.records.size() == 10);
  CHECK(log.torn == 0);
  for (size_t i = 0; i < log.records.size(); ++i) {
    CHECK(log.records[i].raw.id == i);
    CHECK(TestLog::consistent(log.records[i].raw, kComm));
  }
  // op_index = id + 1: 1..3 completed, 4..5 started, the rest only enqueued.
  CHECK(log.records[2].gpu_state == FR_GPU_COMPLETED);
  CHECK(log.records[3].gpu_state == FR_GPU_STARTED);
  CHECK(log.records[4].gpu_state == FR_GPU_STARTED);
  CHECK(log.records[5].gpu_state == FR_GPU_ENQUEUED);
  CHECK_FALSE(log.is_snapshot);
}

TEST_CASE("a wrapped ring keeps the newest records and counts the overwritten, at least its laps") {
  TempDir dir;
  TestLog w;
  REQUIRE(w.create(dir.path + "/a.frlog", 1, 8, 0));
  w.add_comm(0, kComm, 2, 0, 0, 0);
  for (int i = 0; i < 21; ++i) w.append(kComm);
  auto r = fr::log::read_log(w.path);
  REQUIRE(r.ok());
  REQUIRE(r.log->records.size() == 8);
  CHECK(r.log->records.front().raw.id == 13);
  CHECK(r.log->records.back().raw.id == 20);
  CHECK(r.log->header.overwritten == 13);

  // The agent stores its lost-record count rather than adding to it (one locked instruction less
  // per record), so with several writer threads the header can trail record_counter -
  // ring_capacity; the reader takes the larger. A count above the laps (records lost to busy
  // slots) is kept.
  w.header()->overwritten = 11;
  r = fr::log::read_log(w.path);
  REQUIRE(r.ok());
  CHECK(r.log->header.overwritten == 13);
  w.header()->overwritten = 15;
  r = fr::log::read_log(w.path);
  REQUIRE(r.ok());
  CHECK(r.log->header.overwritten == 15);
}

TEST_CASE("a reader never accepts a torn record from a concurrent writer in another process") {
  TempDir dir;
  TestLog w;
  REQUIRE(w.create(dir.path + "/hammer.frlog", 1, 64, 0));
  w.add_comm(0, kComm, 2, 0, 0, 0);

  pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {  // the writer: append as fast as it can until killed
    for (;;) w.append(kComm);
  }
  uint64_t accepted = 0, torn = 0, reads = 0;
  auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(1500);
  bool all_consistent = true;
  while (std::chrono::steady_clock::now() < until) {
    auto r = fr::log::read_log(w.path);
    REQUIRE(r.ok());
    ++reads;
    torn += r.log->torn;
    for (const auto& rec : r.log->records) {
      ++accepted;
      if (!TestLog::consistent(rec.raw, kComm)) all_consistent = false;
    }
    // Also hammer single slots, the tightest race.
    for (uint64_t id = 0; id < 64; ++id) {
      fr_record out;
      if (fr_record_read(w.slot(id), &out) && !TestLog::consistent(out, kComm))
        all_consistent = false;
    }
  }
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  INFO("reads " << reads << ", accepted " << accepted << ", refused " << torn);
  CHECK(all_consistent);
  CHECK(accepted > 0);
}

TEST_CASE("the writer's advisory lock tells a live writer from a dead one") {
  TempDir dir;
  std::string path = dir.path + "/live.frlog";
  int ready[2], done[2];
  REQUIRE(pipe(ready) == 0);
  REQUIRE(pipe(done) == 0);
  pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    TestLog w;
    bool ok = w.create(path, 1, 4, 1, /*lock=*/true);
    char c = ok ? 'y' : 'n';
    (void)!write(ready[1], &c, 1);
    (void)!read(done[0], &c, 1);
    _exit(0);
  }
  char c = 0;
  REQUIRE(read(ready[0], &c, 1) == 1);
  REQUIRE(c == 'y');
  CHECK(fr::log::writer_alive(path) == true);
  auto r = fr::log::read_log(path);
  REQUIRE(r.ok());
  CHECK(r.log->writer_alive);
  (void)!write(done[1], &c, 1);
  waitpid(child, nullptr, 0);
  CHECK(fr::log::writer_alive(path) == false);
  r = fr::log::read_log(path);
  REQUIRE(r.ok());  // the log outlives its writer
  CHECK_FALSE(r.log->writer_alive);
  CHECK(fr::log::writer_alive(dir.path + "/missing.frlog") == std::nullopt);
}

TEST_CASE("bad files get one clear error each") {
  TempDir dir;
  TestLog w;
  REQUIRE(w.create(dir.path + "/good.frlog", 2, 8, 0));
  w.add_comm(0, kComm, 2, 0, 0, 0);
  for (int i = 0; i < 5; ++i) w.append(kComm);
  w.close();
  const std::string good = slurp(dir.path + "/good.frlog");
  auto check = [&](const std::string& name, const std::string& data, fr::log::ReadError want) {
    spit(dir.path + "/" + name, data);
    auto r = fr::log::read_log(dir.path + "/" + name);
    INFO(name << ": " << r.message);
    CHECK_FALSE(r.ok());
    CHECK(r.error == want);
    CHECK(r.message.find(name) != std::string::npos);
  };
  check("empty.frlog", "", fr::log::ReadError::kTooSmall);
  check("tiny.frlog", "FLGHT", fr::log::ReadError::kTooSmall);
  check("foreign.frlog", std::string(4096, 'x'), fr::log::ReadError::kBadMagic);
  check("truncated.frlog", good.substr(0, good.size() - 100), fr::log::ReadError::kTruncated);
  check("half-header.frlog", good.substr(0, 200), fr::log::ReadError::kTruncated);

  std::string newer = good;
  uint32_t v = FR_LOG_VERSION + 1;
  std::memcpy(newer.data() + 8, &v, 4);
  check("newer.frlog", newer, fr::log::ReadError::kNewerVersion);

  std::string corrupt = good;
  uint32_t huge = 0xFFFFFFFFu;
  // The ring's row of the section directory (version 7 on), which the writer puts at its kind.
  const size_t ring_row = sizeof(fr_log_header) + FR_SECTION_RING * sizeof(fr_log_section);
  std::memcpy(corrupt.data() + ring_row + offsetof(fr_log_section, capacity), &huge, 4);
  check("capacity.frlog", corrupt, fr::log::ReadError::kCorrupt);

  corrupt = good;
  uint64_t off = 3;
  std::memcpy(corrupt.data() + ring_row + offsetof(fr_log_section, offset), &off, 8);
  check("offset.frlog", corrupt, fr::log::ReadError::kCorrupt);

  auto missing = fr::log::read_log(dir.path + "/nope.frlog");
  CHECK(missing.error == fr::log::ReadError::kIo);
  auto d = fr::log::read_log(dir.path);
  CHECK(d.error == fr::log::ReadError::kIo);
}

TEST_CASE("garbage inside a well-formed log costs only the bad entries") {
  TempDir dir;
  TestLog w;
  REQUIRE(w.create(dir.path + "/g.frlog", 2, 8, 0));
  w.add_comm(0, kComm, 2, 0, 0, 0);
  for (int i = 0; i < 8; ++i) w.append(kComm);
  // Slot of id 3 now claims to be id 99 (stale), slot of id 5 is mid-write (odd lock).
  w.slot(3)->id = 99;
  w.slot(5)->lock |= 1;
  // Slot of id 6 holds a GPU state no version defines: kept, read as unknown.
  w.slot(6)->gpu_state = 7;
  // A communicator entry with a rank outside its size.
  fr_comm_entry bad{};
  bad.id = 42;
  bad.size = 2;
  bad.rank = 7;
  fr_comm_publish_fixed(w.comm(1), &bad);
  // An absurd record counter must not make the reader walk past the ring.
  auto r = fr::log::read_log(w.path);
  REQUIRE(r.ok());
  CHECK(r.log->records.size() == 6);
  CHECK(r.log->torn == 2);
  CHECK(r.log->comms.size() == 1);
  CHECK(r.log->comms_torn == 1);
  int seen = 0;
  for (const auto& rec : r.log->records)
    if (rec.raw.id == 6) {
      CHECK(rec.gpu_state == FR_GPU_NONE);
      ++seen;
    }
  CHECK(seen == 1);
  w.header()->record_counter = ~0ull;
  r = fr::log::read_log(w.path);
  REQUIRE(r.ok());
  CHECK(r.log->records.empty());
}

TEST_CASE("a snapshot encodes to a dump that reads back identically") {
  TempDir dir;
  TestLog w;
  REQUIRE(w.create(dir.path + "/s.frlog", 4, 16, 2));
  w.add_comm(0, kComm, 4, 2, 7, 6);
  for (int i = 0; i < 40; ++i) w.append(kComm);
  w.slot(30)->lock = 0;  // one record lost in flight
  auto live = fr::log::read_log(w.path);
  REQUIRE(live.ok());
  std::string bytes = fr::log::encode_snapshot(*live.log, 123456789);
  auto dump = fr::log::read_log_bytes(bytes.data(), bytes.size(), "dump");
  REQUIRE(dump.ok());
  CHECK(dump.log->is_snapshot);
  CHECK(dump.log->header.snapshot_ns == 123456789);
  CHECK(dump.log->header.torn_skipped == 1);
  REQUIRE(dump.log->records.size() == live.log->records.size());
  for (size_t i = 0; i < dump.log->records.size(); ++i) {
    CHECK(dump.log->records[i].raw.id == live.log->records[i].raw.id);
    CHECK(dump.log->records[i].gpu_state == live.log->records[i].gpu_state);
    CHECK(TestLog::consistent(dump.log->records[i].raw, kComm));
  }
  CHECK(dump.log->torn == 0);
  // Unaligned input is accepted too (fuzzers and network buffers are not aligned).
  std::string shifted = " " + bytes;
  auto again = fr::log::read_log_bytes(shifted.data() + 1, bytes.size(), "dump");
  REQUIRE(again.ok());
  CHECK(again.log->records.size() == dump.log->records.size());
  // Every truncation of a dump is refused cleanly.
  for (size_t cut :
       {size_t(0), size_t(7), size_t(100), size_t(511), bytes.size() / 2, bytes.size() - 1}) {
    auto t = fr::log::read_log_bytes(bytes.data(), cut, "cut");
    CHECK_FALSE(t.ok());
  }
}

TEST_CASE("names come from the format's lists") {
  CHECK(std::string(fr::log::op_name(FR_OP_ALLREDUCE)) == "AllReduce");
  CHECK(std::string(fr::log::op_name(999)) == "op(999)");
  CHECK(fr::log::op_is_collective(FR_OP_BROADCAST));
  CHECK(fr::log::op_is_p2p(FR_OP_RECV));
  CHECK_FALSE(fr::log::op_is_collective(FR_OP_SEND));
  CHECK_FALSE(fr::log::op_is_p2p(FR_OP_GROUP_END));
  CHECK(std::string(fr::log::dtype_name(9)) == "bfloat16");
  CHECK(std::string(fr::log::redop_name(4)) == "avg");
  CHECK(std::string(fr::log::comm_state_name(FR_COMM_ABORTED)) == "aborted");
  CHECK(std::string(fr::log::origin_name(FR_ORIGIN_SPLIT)) == "split");
  CHECK(std::string(fr::log::gpu_state_name(FR_GPU_STARTED)) == "started");
}

TEST_CASE("the documented size of a default log is the format's") {
  const uint32_t capacity[FR_SECTION_KINDS] = {
      FR_DEFAULT_COMM_CAPACITY,    FR_DEFAULT_RING_CAPACITY, FR_DEFAULT_GRAPH_CAPACITY,
      FR_DEFAULT_CAPTURE_CAPACITY, FR_DEFAULT_CHAN_CAPACITY, FR_DEFAULT_XFER_CAPACITY};
  fr_log_section dir[FR_SECTION_KINDS];
  const uint64_t size = fr_log_layout(capacity, dir);
  CHECK(size == 680704);
  // Written with a thousands separator, as the docs write it.
  char digits[32];
  std::snprintf(digits, sizeof digits, "%llu,%03llu", (unsigned long long)(size / 1000),
                (unsigned long long)(size % 1000));
  const std::string text = digits;
  for (const char* doc : {"docs/agent.md", "docs/flight-log-format.md"}) {
    INFO(doc << " should say " << text << " bytes");
    CHECK(slurp(std::string(FR_SOURCE_DIR) + "/" + doc).find(text + " bytes") != std::string::npos);
  }
}
