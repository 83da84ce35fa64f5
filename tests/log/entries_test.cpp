// Entries a reader must refuse, or mend, in a log read by copy (a dump, or a log whose writer is
// gone): an entry whose sequence lock is odd (written when the copy was taken), a ring slot that
// holds another record than the slot's (a stale lap, or a hostile file), a communicator whose rank
// is not below its size, and a channel slot with more steps done than posted. Each case changes
// one entry of an otherwise good log; the others stay. Each log is read from memory and as a dump
// file, the two ways the reader copies entries.
#include <catch2/catch.hpp>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "log/reader.h"
#include "test_log.h"

namespace {

constexpr uint32_t kComms = 4, kRing = 8, kChans = 2;
constexpr uint64_t kComm = 0x77;

// A log in memory (read with read_log_bytes: by copy, no writer): two communicators, records 0..5
// of kComm, and one channel slot with 3 of 8 steps posted and 2 done.
struct Log {
  std::vector<uint64_t> words;
  uint8_t* base() { return reinterpret_cast<uint8_t*>(words.data()); }
  fr_log_header* h() { return reinterpret_cast<fr_log_header*>(base()); }
  fr_comm_entry* comm(uint32_t i) {
    return reinterpret_cast<fr_comm_entry*>(base() + h()->comm_offset) + i;
  }
  fr_record* slot(uint64_t id) {
    return reinterpret_cast<fr_record*>(base() + h()->ring_offset) + id % kRing;
  }
  fr_chan_entry* chan(uint32_t i) {
    return reinterpret_cast<fr_chan_entry*>(base() + h()->chan_offset) + i;
  }

  Log() {
    const uint64_t size = fr::test::v6::file_size(kComms, kRing, 0, 0, kChans);
    words.assign(size / 8, 0);
    fr::test::fill_layout(h(), fr::test::v6::kVersion, kComms, kRing, 0, 0, size);
    h()->global_rank = 0;
    h()->world_size = 4;
    h()->chan_offset = fr::test::v6::chan_offset(kComms, kRing, 0, 0);
    h()->chan_capacity = kChans;
    h()->chan_size = sizeof(fr_chan_entry);
    add_comm(0, kComm, 4, 0);
    add_comm(1, kComm + 1, 2, 1);
    for (uint64_t id = 0; id < 6; ++id) {
      fr_record r = fr::test::TestLog::make(id, kComm);
      REQUIRE(fr_record_publish(slot(id), &r));
    }
    h()->record_counter = 6;
    fr_chan_entry e{};
    e.comm_id = kComm;
    e.rank = 0;
    e.nranks = 4;
    e.peer = 1;
    e.channel = 0;
    e.kind = FR_CHAN_SEND;
    REQUIRE(fr_chan_publish_fixed(chan(0), &e));
    chan(0)->state = FR_CHANST_SEND_WAIT;
    chan(0)->nsteps = 8;
    chan(0)->posted = 3;
    chan(0)->done = 2;
    h()->chan_count = 1;
  }
  void add_comm(uint32_t i, uint64_t id, int size, int rank) {
    fr_comm_entry c{};
    c.id = id;
    c.size = size;
    c.rank = rank;
    std::strcpy(c.name, "world");
    REQUIRE(fr_comm_publish_fixed(comm(i), &c));
    h()->comm_count = i + 1;
  }
  // Read from memory (read_log_bytes, as over memory a writer may share) and from a dump file
  // (read_log, a private copy): both must give the same answer.
  fr::log::LogFile read() {
    auto r = fr::log::read_log_bytes(base(), words.size() * 8, "entries.frlog");
    INFO(r.message);
    REQUIRE(r.ok());
    fr::test::TempDir dir;
    const std::string path = dir.path + "/entries.frlog";
    {
      // As a dump: frd's snapshot flags its copies, which are read whole into private memory.
      std::vector<uint64_t> dump = words;
      reinterpret_cast<fr_log_header*>(dump.data())->flags |= FR_LOG_F_SNAPSHOT;
      std::ofstream out(path, std::ios::binary);
      out.write(reinterpret_cast<const char*>(dump.data()), std::streamsize(dump.size() * 8));
    }
    auto from_file = fr::log::read_log(path);
    INFO(from_file.message);
    REQUIRE(from_file.ok());
    const fr::log::LogFile& a = *r.log;
    const fr::log::LogFile& b = *from_file.log;
    CHECK(a.comms.size() == b.comms.size());
    CHECK(a.comms_torn == b.comms_torn);
    REQUIRE(a.records.size() == b.records.size());
    for (size_t i = 0; i < a.records.size(); ++i) CHECK(a.records[i].raw.id == b.records[i].raw.id);
    REQUIRE(a.chans.size() == b.chans.size());
    for (size_t i = 0; i < a.chans.size(); ++i) CHECK(a.chans[i].done == b.chans[i].done);
    return b;
  }
};

bool has_comm(const fr::log::LogFile& f, uint64_t id) {
  for (const auto& c : f.comms)
    if (c.id == id) return true;
  return false;
}

}  // namespace

TEST_CASE("entries: the good log reads whole", "[proto]") {
  Log log;
  auto f = log.read();
  CHECK(f.comms.size() == 2);
  CHECK(f.comms_torn == 0);
  CHECK(f.records.size() == 6);
  REQUIRE(f.chans.size() == 1);
  CHECK(f.chans[0].done == 2);
}

TEST_CASE("entries: an entry whose sequence lock is odd is refused in a copy", "[proto]") {
  Log log;
  log.comm(1)->lock |= 1;  // the writer was inside it when the copy was taken
  log.slot(3)->lock |= 1;
  auto f = log.read();
  CHECK(has_comm(f, kComm));
  CHECK_FALSE(has_comm(f, kComm + 1));
  CHECK(f.comms_torn == 1);
  REQUIRE(f.records.size() == 5);
  for (const auto& r : f.records) CHECK(r.raw.id != 3);
}

TEST_CASE("entries: a ring slot holding another record than the slot's is refused", "[proto]") {
  Log log;
  // Slot 2 holds record 10 (a lap the counter never reached) with a good lock.
  fr_record stale = fr::test::TestLog::make(10, kComm);
  std::memset(log.slot(2), 0, sizeof(fr_record));
  REQUIRE(fr_record_publish(log.slot(2), &stale));
  auto f = log.read();
  REQUIRE(f.records.size() == 5);
  for (const auto& r : f.records) {
    CHECK(r.raw.id != 10);
    CHECK(r.raw.id != 2);
  }
  CHECK(f.torn >= 1);
}

TEST_CASE("entries: a communicator whose rank is not below its size is refused", "[proto]") {
  Log log;
  log.add_comm(2, kComm + 2, 4, 4);  // rank == size
  log.add_comm(3, kComm + 3, 4, 3);  // the last rank: good
  auto f = log.read();
  CHECK_FALSE(has_comm(f, kComm + 2));
  CHECK(has_comm(f, kComm + 3));
  CHECK(f.comms_torn == 1);
}

TEST_CASE("entries: a channel slot with more steps done than posted reads as all posted done",
          "[proto]") {
  Log log;
  log.chan(0)->done = 7;  // posted is 3
  auto f = log.read();
  REQUIRE(f.chans.size() == 1);
  CHECK(f.chans[0].posted == 3);
  CHECK(f.chans[0].done == 3);
}
