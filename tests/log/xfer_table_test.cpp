// The NIXL transfer table of format version 4 (fr_xfer_entry): read back beside the channel table
// of version 5, kept in a snapshot, the compatibility rule (a version 3 log's zeros at 376..399
// are no table), and bad input (a table out of place, entries too small, entries whose state or op
// is out of range, names without their NUL).
#include <catch2/catch.hpp>
#include <cstring>
#include <string>
#include <vector>

#include "log/reader.h"
#include "test_log.h"

namespace {

constexpr uint32_t kComms = 2, kRing = 16, kChans = 2, kXfers = 4;

struct XferLog {
  std::vector<uint64_t> words;
  uint8_t* base() { return reinterpret_cast<uint8_t*>(words.data()); }
  fr_log_header* h() { return reinterpret_cast<fr_log_header*>(base()); }
  fr_xfer_entry* xfer(uint32_t i) {
    return reinterpret_cast<fr_xfer_entry*>(base() + h()->xfer_offset) + i;
  }

  explicit XferLog(uint32_t version = fr::test::v6::kVersion) {
    const uint64_t size = fr::test::v6::file_size(kComms, kRing, 0, 0, kChans, kXfers);
    words.assign(size / 8, 0);
    fr::test::fill_layout(h(), version, kComms, kRing, 0, 0, size);
    h()->global_rank = 0;
    h()->world_size = 1;
    h()->flags |= FR_LOG_F_NIXL;
    h()->chan_offset = fr::test::v6::chan_offset(kComms, kRing, 0, 0);
    h()->chan_capacity = kChans;
    h()->chan_size = sizeof(fr_chan_entry);
    h()->xfer_offset = fr::test::v6::xfer_offset(kComms, kRing, 0, 0, kChans);
    h()->xfer_capacity = kXfers;
    h()->xfer_size = sizeof(fr_xfer_entry);
    h()->xfer_count = 2;
    put(0, 1, FR_XFER_IN_PROGRESS, FR_NIXL_IN_PROG);
    put(1, 2, FR_XFER_ERROR, FR_NIXL_ERR_REMOTE_DISCONNECT);
  }
  void put(uint32_t i, uint64_t id, uint32_t state, int32_t status,
           uint32_t op = FR_XFER_OP_WRITE) {
    fr_xfer_entry x{};
    x.id = id;
    x.handle = 0x7000 + id;
    x.create_ns = 1000;
    x.bytes = 4096 * id;
    x.descs = 1;
    x.op = op;
    x.flags = FR_XFER_F_NOTIF;
    std::strcpy(x.local_agent, "initiator");
    std::strcpy(x.remote_agent, "target");
    std::strcpy(x.backend, "UCX");
    std::memcpy(x.notif, "tag-1", 5);
    REQUIRE(fr_xfer_publish_fixed(xfer(i), &x));
    xfer(i)->state = state;
    xfer(i)->status = status;
    xfer(i)->posts = 1;
    xfer(i)->post_ns = 2000;
    xfer(i)->done_ns = state == FR_XFER_IN_PROGRESS ? 0 : 3000;
  }
  fr::log::ReadResult read() {
    return fr::log::read_log_bytes(base(), words.size() * 8, "xfer.frlog");
  }
};

}  // namespace

TEST_CASE("xfer table: entries read back beside the channel table and survive a snapshot",
          "[proto]") {
  XferLog log;
  auto r = log.read();
  INFO(r.message);
  REQUIRE(r.ok());
  REQUIRE(r.log->xfers.size() == 2);
  const fr_xfer_entry& x = r.log->xfers[0];
  CHECK(x.id == 1);
  CHECK(x.state == FR_XFER_IN_PROGRESS);
  CHECK(x.status == FR_NIXL_IN_PROG);
  CHECK(std::string(x.remote_agent) == "target");
  CHECK(std::string(fr::log::xfer_state_name(x.state)) == "in_progress");
  CHECK(std::string(fr::log::xfer_op_name(x.op)) == "WRITE");
  CHECK(std::string(fr::log::nixl_status_name(r.log->xfers[1].status)) ==
        "NIXL_ERR_REMOTE_DISCONNECT");
  CHECK(std::string(fr::log::nixl_status_name(-99)).find("-99") != std::string::npos);
  CHECK(fr::log::op_is_nixl(FR_OP_NIXL_POST_XFER));
  CHECK_FALSE(fr::log::op_is_nixl(FR_OP_ALLREDUCE));

  std::string snap = fr::log::encode_snapshot(*r.log, 77);
  auto again = fr::log::read_log_bytes(snap.data(), snap.size(), "snap.frlog");
  INFO(again.message);
  REQUIRE(again.ok());
  REQUIRE(again.log->xfers.size() == 2);
  CHECK(again.log->xfers[1].status == FR_NIXL_ERR_REMOTE_DISCONNECT);
  CHECK(again.log->xfers[1].bytes == 8192);
  CHECK(std::string(again.log->xfers[1].backend) == "UCX");
  CHECK((again.log->header.flags & FR_LOG_F_NIXL) != 0);
  // A snapshot of a log without transfers has no table.
  r.log->xfers.clear();
  std::string none = fr::log::encode_snapshot(*r.log, 78);
  auto empty = fr::log::read_log_bytes(none.data(), none.size(), "none.frlog");
  REQUIRE(empty.ok());
  CHECK(empty.log->header.xfer_capacity == 0);
  CHECK(empty.log->header.xfer_offset == 0);
}

TEST_CASE("xfer table: a version 3 log's bytes at 376..399 are not a table", "[proto]") {
  XferLog log(3);
  log.h()->header_size = sizeof(fr_log_header);
  auto r = log.read();
  INFO(r.message);
  REQUIRE(r.ok());
  CHECK(r.log->header.xfer_capacity == 0);
  CHECK(r.log->xfers.empty());
}

TEST_CASE("xfer table: a table out of place or too small is corrupt", "[proto]") {
  auto corrupt = [](auto&& damage) {
    XferLog log;
    damage(log);
    auto r = log.read();
    INFO(r.message);
    CHECK_FALSE(r.ok());
    CHECK(r.error == fr::log::ReadError::kCorrupt);
  };
  corrupt([](XferLog& l) { l.h()->xfer_capacity = FR_MAX_XFER_CAPACITY + 1; });
  corrupt([](XferLog& l) { l.h()->xfer_size = FR_V4_XFER_BYTES - 8; });
  corrupt([](XferLog& l) { l.h()->xfer_size = 321; });
  corrupt([](XferLog& l) { l.h()->xfer_offset = l.h()->ring_offset - 8; });  // over the ring
  corrupt([](XferLog& l) { l.h()->xfer_capacity = kXfers * 1000; });         // past the file
  corrupt([](XferLog& l) { l.h()->xfer_offset += 4; });                      // misaligned
  // Laid exactly over the channel table, or over part of it (#37).
  corrupt([](XferLog& l) { l.h()->xfer_offset = l.h()->chan_offset; });
  corrupt([](XferLog& l) { l.h()->xfer_offset = l.h()->chan_offset + sizeof(fr_chan_entry); });
  corrupt([](XferLog& l) { l.h()->chan_offset = l.h()->xfer_offset; });
}

TEST_CASE("xfer table: hostile or torn entries are refused, names are cut, the others kept",
          "[proto]") {
  XferLog log;
  log.put(2, 3, 77, 0);                                      // a state out of range
  log.put(3, 4, FR_XFER_DONE, 0, 9);                         // an op out of range
  log.xfer(0)->lock = 5;                                     // being written
  std::memset(log.xfer(1)->remote_agent, 'A', FR_NAME_LEN);  // no NUL (written past the lock:
  std::memset(log.xfer(1)->backend, 'B', 16);                //  the snapshot reader copies it)
  auto r = log.read();
  REQUIRE(r.ok());
  CHECK(r.log->xfers_torn == 3);
  REQUIRE(r.log->xfers.size() == 1);
  CHECK(std::strlen(r.log->xfers[0].remote_agent) == FR_NAME_LEN - 1);
  CHECK(std::strlen(r.log->xfers[0].backend) == 15);
}
