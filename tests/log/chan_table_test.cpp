// The channel table of format version 5 (fr_chan_entry): read back, kept in a snapshot, the
// compatibility rule (an older version's bytes where the table's header fields now are read as
// zero: no table), and bad input (a table out of place, entries too small, implausible slots).
#include <catch2/catch.hpp>
#include <cstring>
#include <vector>

#include "log/reader.h"
#include "test_log.h"

namespace {

constexpr uint32_t kComms = 2, kRing = 16, kChans = 4;

struct ChanLog {
  std::vector<uint64_t> words;
  uint8_t* base() { return reinterpret_cast<uint8_t*>(words.data()); }
  fr_log_header* h() { return reinterpret_cast<fr_log_header*>(base()); }
  fr_chan_entry* chan(uint32_t i) {
    return reinterpret_cast<fr_chan_entry*>(base() + h()->chan_offset) + i;
  }

  explicit ChanLog(uint32_t version = fr::test::v6::kVersion) {
    const uint64_t size = fr::test::v6::file_size(kComms, kRing, 0, 0, kChans);
    words.assign(size / 8, 0);
    fr::test::fill_layout(h(), version, kComms, kRing, 0, 0, size);
    h()->global_rank = 0;
    h()->world_size = 2;
    h()->chan_offset = fr::test::v6::chan_offset(kComms, kRing, 0, 0);
    h()->chan_capacity = kChans;
    h()->chan_size = sizeof(fr_chan_entry);
    h()->chan_count = 2;
    put(0, FR_CHAN_RECV, 1, FR_CHANST_RECV_WAIT);
    put(1, FR_CHAN_SEND, 1, FR_CHANST_SEND_GPU_WAIT);
  }
  void put(uint32_t i, int kind, int peer, uint32_t state) {
    fr_chan_entry e{};
    e.comm_hash = 0xabc;
    e.comm_id = 0x1234;
    e.rank = 0;
    e.nranks = 2;
    e.peer = peer;
    e.channel = 3;
    e.kind = uint8_t(kind);
    e.ctx_ordinal = 1;
    REQUIRE(fr_chan_publish_fixed(chan(i), &e));
    chan(i)->op = FR_OP_ALLREDUCE;
    chan(i)->state = state;
    chan(i)->nsteps = 8;
    chan(i)->posted = 3;
    chan(i)->done = 2;
    chan(i)->ops_started = 5;
    chan(i)->ops_done = 4;
  }
  fr::log::ReadResult read() {
    return fr::log::read_log_bytes(base(), words.size() * 8, "chan.frlog");
  }
};

}  // namespace

TEST_CASE("chan table: slots read back and survive a snapshot", "[proto]") {
  ChanLog log;
  auto r = log.read();
  INFO(r.message);
  REQUIRE(r.ok());
  REQUIRE(r.log->chans.size() == 2);
  const fr_chan_entry& e = r.log->chans[0];
  CHECK(e.kind == FR_CHAN_RECV);
  CHECK(e.channel == 3);
  CHECK(e.peer == 1);
  CHECK(e.state == FR_CHANST_RECV_WAIT);
  CHECK(e.done == 2);
  CHECK(std::string(fr::log::chan_state_name(e.state)) == "recv_wait");
  std::string snap = fr::log::encode_snapshot(*r.log, 77);
  auto again = fr::log::read_log_bytes(snap.data(), snap.size(), "snap.frlog");
  INFO(again.message);
  REQUIRE(again.ok());
  REQUIRE(again.log->chans.size() == 2);
  CHECK(again.log->chans[1].state == FR_CHANST_SEND_GPU_WAIT);
  CHECK(again.log->chans[1].ops_started == 5);
}

TEST_CASE("chan table: a version 3 log's bytes at 400..423 are not a table", "[proto]") {
  ChanLog log(3);
  log.h()->header_size = sizeof(fr_log_header);
  auto r = log.read();
  INFO(r.message);
  REQUIRE(r.ok());
  CHECK(r.log->header.chan_capacity == 0);
  CHECK(r.log->chans.empty());
}

TEST_CASE("chan table: a table out of place or too small is corrupt", "[proto]") {
  auto corrupt = [](auto&& damage) {
    ChanLog log;
    damage(log);
    auto r = log.read();
    INFO(r.message);
    CHECK_FALSE(r.ok());
    CHECK(r.error == fr::log::ReadError::kCorrupt);
  };
  corrupt([](ChanLog& l) { l.h()->chan_capacity = FR_MAX_CHAN_CAPACITY + 1; });
  corrupt([](ChanLog& l) { l.h()->chan_size = FR_V5_CHAN_BYTES - 8; });
  corrupt([](ChanLog& l) { l.h()->chan_size = 129; });
  corrupt([](ChanLog& l) { l.h()->chan_offset = l.h()->ring_offset; });  // over the ring
  corrupt([](ChanLog& l) { l.h()->chan_capacity = kChans * 1000; });     // past the file
  corrupt([](ChanLog& l) { l.h()->chan_offset += 4; });                  // misaligned
}

TEST_CASE("chan table: implausible or torn slots are refused, the others kept", "[proto]") {
  ChanLog log;
  log.put(2, FR_CHAN_SEND, 7, FR_CHANST_DONE);  // peer outside the communicator
  log.put(3, FR_CHAN_RECV, 1, 99);              // unknown state: read as idle
  log.chan(0)->lock = 3;                        // being written
  auto r = log.read();
  REQUIRE(r.ok());
  CHECK(r.log->chans_torn == 2);
  REQUIRE(r.log->chans.size() == 2);
  CHECK(r.log->chans[0].kind == FR_CHAN_SEND);
  CHECK(r.log->chans[1].state == FR_CHANST_IDLE);
}
