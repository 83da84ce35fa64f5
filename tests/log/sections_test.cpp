// The section directory (version 7) and the logs of every version before it: a generator lays out
// a log of each version 1 to 7 with every table that version has, one entry in each, and the
// reader must find each table and only those; then hostile directories (tables that overlap or
// leave the file, entries smaller than the version defines, counts past capacity, unknown or
// repeated kinds, a directory out of place), each refused with a clear error.
#include <catch2/catch.hpp>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "legacy_layout.h"
#include "log/reader.h"

namespace {

constexpr uint64_t kComm = 0xC0FFEE, kGraph = 0x6A, kXfer = 7;
constexpr uint32_t kRecords = 4;

// The tables a version has (flight_log.h: graphs from 2, transfers from 4, channels from 5).
bool has(uint32_t version, fr_section_kind kind) {
  switch (kind) {
    case FR_SECTION_GRAPHS:
    case FR_SECTION_CAPTURES: return version >= 2;
    case FR_SECTION_XFERS: return version >= 4;
    case FR_SECTION_CHANS: return version >= 5;
    default: return true;
  }
}

// A log of `version`: 2 communicator entries, a ring of 8, and 1 entry in each other table the
// version has, laid out as that version's writer did (legacy_layout.h up to 6, fr_log_layout
// from 7). One entry of each table is written.
class VersionLog {
 public:
  explicit VersionLog(uint32_t version) : version_(version) {
    uint32_t cap[FR_SECTION_KINDS] = {};
    cap[FR_SECTION_COMMS] = 2;
    cap[FR_SECTION_RING] = 8;
    for (uint32_t k = FR_SECTION_GRAPHS; k < FR_SECTION_KINDS; ++k)
      cap[k] = has(version, fr_section_kind(k)) ? 1 : 0;
    fr_log_header h{};
    h.magic = FR_LOG_MAGIC;
    h.version = version;
    h.header_size = sizeof(fr_log_header);
    h.record_counter = kRecords;
    h.global_rank = 3;
    std::strcpy(h.job_id, "job-sections");
    if (version >= 7) {
      h.file_size = fr_log_layout(cap, dir_);
      fr_log_header_set_directory(&h);
      for (uint32_t k = 0; k < FR_SECTION_KINDS; ++k)
        dir_[k].count = k == FR_SECTION_RING ? 0 : (k == FR_SECTION_COMMS ? 1 : cap[k]);
      dir_[FR_SECTION_COMMS].dropped = 5;
    } else {
      legacy_rows(cap, &h);
    }
    bytes_.assign(h.file_size, 0);
    std::memcpy(bytes_.data(), &h, sizeof h);
    if (version >= 7) std::memcpy(bytes_.data() + h.section_offset, dir_, sizeof dir_);
    put_entries();
  }

  fr_log_header* header() { return reinterpret_cast<fr_log_header*>(bytes_.data()); }
  // Row `i` of the directory (version 7), as stored.
  fr_log_section* row(uint32_t i) {
    return reinterpret_cast<fr_log_section*>(bytes_.data() + header()->section_offset) + i;
  }
  std::vector<uint8_t>& bytes() { return bytes_; }

  fr::log::ReadResult read() const {
    return fr::log::read_log_bytes(bytes_.data(), bytes_.size(), "sections.frlog");
  }

 private:
  // Versions 1 to 6: the rows in the header's fields, the tables in that version's order.
  void legacy_rows(const uint32_t cap[], fr_log_header* h) {
    namespace v6 = fr::test::v6;
    const uint32_t c = cap[FR_SECTION_COMMS], r = cap[FR_SECTION_RING];
    const uint32_t g = cap[FR_SECTION_GRAPHS], k = cap[FR_SECTION_CAPTURES];
    const uint32_t ch = cap[FR_SECTION_CHANS], x = cap[FR_SECTION_XFERS];
    auto set = [&](fr_section_kind kind, uint64_t offset, uint32_t capacity, uint32_t size) {
      dir_[kind] = fr_log_section{uint32_t(kind), size, offset, capacity, 0, 0, 0};
    };
    set(FR_SECTION_COMMS, v6::comm_offset(), c, sizeof(fr_comm_entry));
    set(FR_SECTION_RING, v6::ring_offset(c), r, sizeof(fr_record));
    set(FR_SECTION_GRAPHS, v6::graph_offset(c, r), g, sizeof(fr_graph_entry));
    set(FR_SECTION_CAPTURES, v6::capture_offset(c, r, g), k, sizeof(fr_record));
    set(FR_SECTION_CHANS, v6::chan_offset(c, r, g, k), ch, sizeof(fr_chan_entry));
    set(FR_SECTION_XFERS, v6::xfer_offset(c, r, g, k, ch), x, sizeof(fr_xfer_entry));
    h->file_size = v6::file_size(c, r, g, k, ch, x);
    h->comm_size = sizeof(fr_comm_entry);
    h->record_size = sizeof(fr_record);
    h->comm_capacity = c, h->comm_offset = dir_[FR_SECTION_COMMS].offset, h->comm_count = 1;
    h->comm_dropped = 5;
    h->ring_capacity = r, h->ring_offset = dir_[FR_SECTION_RING].offset;
    if (g != 0) {
      h->graph_offset = dir_[FR_SECTION_GRAPHS].offset, h->graph_capacity = g;
      h->graph_size = sizeof(fr_graph_entry), h->graph_count = 1;
      h->capture_offset = dir_[FR_SECTION_CAPTURES].offset, h->capture_capacity = k;
      h->capture_count = 1;
    }
    if (x != 0) {
      h->xfer_offset = dir_[FR_SECTION_XFERS].offset, h->xfer_capacity = x;
      h->xfer_size = sizeof(fr_xfer_entry), h->xfer_count = 1;
    }
    if (ch != 0) {
      h->chan_offset = dir_[FR_SECTION_CHANS].offset, h->chan_capacity = ch;
      h->chan_size = sizeof(fr_chan_entry), h->chan_count = 1;
    }
  }

  template <typename T>
  void put(fr_section_kind kind, uint32_t i, T e) {
    if (dir_[kind].capacity == 0) return;
    e.lock = 2;
    std::memcpy(bytes_.data() + dir_[kind].offset + uint64_t{i} * sizeof e, &e, sizeof e);
  }

  void put_entries() {
    fr_comm_entry c{};
    c.id = kComm;
    c.size = 2;
    c.rank = 1;
    c.gpu_completed = kRecords;
    put(FR_SECTION_COMMS, 0, c);
    for (uint32_t id = 0; id < kRecords; ++id) {
      fr_record r{};
      r.id = id;
      r.comm_id = kComm;
      r.op = FR_OP_ALLREDUCE;
      r.op_index = id + 1;
      r.peer = -1;
      put(FR_SECTION_RING, id, r);
    }
    fr_graph_entry g{};
    g.id = kGraph;
    g.ordinal = 1;
    put(FR_SECTION_GRAPHS, 0, g);
    fr_record k{};
    k.comm_id = kComm;
    k.flags = FR_REC_F_CAPTURED;
    k.aux = kGraph;
    put(FR_SECTION_CAPTURES, 0, k);
    fr_chan_entry ch{};
    ch.nranks = 2;
    ch.peer = -1;
    ch.channel = 3;
    put(FR_SECTION_CHANS, 0, ch);
    fr_xfer_entry x{};
    x.id = kXfer;
    x.state = FR_XFER_POSTED;
    put(FR_SECTION_XFERS, 0, x);
  }

  uint32_t version_;
  fr_log_section dir_[FR_SECTION_KINDS] = {};
  std::vector<uint8_t> bytes_;
};

// What a log of `version` must read back: one entry of each table it has, none of the others.
void check_tables(const fr::log::LogFile& log, uint32_t version) {
  CHECK(log.header.global_rank == 3);
  CHECK(log.job_id() == "job-sections");
  REQUIRE(log.comms.size() == 1);
  CHECK(log.comms[0].id == kComm);
  CHECK(log.header.comm_count == 1);
  CHECK(log.header.comm_dropped == 5);
  CHECK(log.header.ring_capacity >= kRecords);  // a dump keeps the ring's records, not its size
  REQUIRE(log.records.size() == kRecords);
  CHECK(log.records[3].raw.id == 3);
  CHECK(log.records[3].gpu_state == FR_GPU_COMPLETED);
  CHECK(log.graphs.size() == (has(version, FR_SECTION_GRAPHS) ? 1u : 0u));
  CHECK(log.captures.size() == (has(version, FR_SECTION_CAPTURES) ? 1u : 0u));
  CHECK(log.chans.size() == (has(version, FR_SECTION_CHANS) ? 1u : 0u));
  CHECK(log.xfers.size() == (has(version, FR_SECTION_XFERS) ? 1u : 0u));
  CHECK(log.header.xfer_capacity == (has(version, FR_SECTION_XFERS) ? 1u : 0u));
  CHECK(log.header.chan_count == (has(version, FR_SECTION_CHANS) ? 1u : 0u));
  if (!log.xfers.empty()) CHECK(log.xfers[0].id == kXfer);
  if (!log.chans.empty()) CHECK(log.chans[0].channel == 3);
  CHECK(log.torn == 0);
}

// A version 7 log changed by `change` is refused as corrupt, with `words` in its message.
void check_refused(const std::function<void(VersionLog&)>& change, const std::string& words,
                   fr::log::ReadError want = fr::log::ReadError::kCorrupt) {
  VersionLog log(7);
  change(log);
  auto r = log.read();
  INFO(r.message);
  CHECK_FALSE(r.ok());
  CHECK(r.error == want);
  CHECK(r.message.find("sections.frlog") != std::string::npos);
  CHECK(r.message.find(words) != std::string::npos);
}

}  // namespace

TEST_CASE("sections: a log of every version reads its tables, and reencodes as version 7",
          "[proto]") {
  for (uint32_t version = 1; version <= FR_LOG_VERSION; ++version) {
    INFO("version " << version);
    auto r = VersionLog(version).read();
    INFO(r.message);
    REQUIRE(r.ok());
    check_tables(*r.log, version);
    // A dump of it is a log of this version, with the same tables.
    const std::string dump = fr::log::encode_snapshot(*r.log, 9);
    auto again = fr::log::read_log_bytes(dump.data(), dump.size(), "again");
    INFO(again.message);
    REQUIRE(again.ok());
    CHECK(again.log->header.version == FR_LOG_VERSION);
    CHECK(again.log->header.section_count == FR_SECTION_KINDS);
    check_tables(*again.log, version);
  }
}

TEST_CASE("sections: a version 7 writer leaves the header's old table fields zero", "[proto]") {
  const VersionLog w(7);
  fr_log_header h;
  auto r = w.read();
  REQUIRE(r.ok());
  const std::string dump = fr::log::encode_snapshot(*r.log, 9);
  std::memcpy(&h, dump.data(), sizeof h);
  CHECK(h.comm_offset == 0);
  CHECK(h.ring_capacity == 0);
  CHECK(h.xfer_capacity == 0);
  CHECK(h.comm_dropped == 0);
  // The rows carry them.
  fr_log_section row;
  std::memcpy(&row, dump.data() + h.section_offset + FR_SECTION_COMMS * sizeof row, sizeof row);
  CHECK(row.kind == FR_SECTION_COMMS);
  CHECK(row.count == 1);
  CHECK(row.dropped == 5);
}

TEST_CASE("sections: rows are found by kind, in any order, at the writer's row size", "[proto]") {
  VersionLog w(7);
  std::swap(*w.row(0), *w.row(5));  // the transfers' row first, the communicators' last
  std::swap(*w.row(1), *w.row(3));
  auto r = w.read();
  INFO(r.message);
  REQUIRE(r.ok());
  check_tables(*r.log, 7);

  // A writer with bigger rows (fields this reader does not know after its own): read by its
  // stride, its own fields kept.
  VersionLog big(7);
  fr_log_section rows[FR_SECTION_KINDS];
  for (uint32_t i = 0; i < FR_SECTION_KINDS; ++i) rows[i] = *big.row(i);
  const uint32_t stride = sizeof(fr_log_section) + 16;
  // Room for the bigger rows: every table moves 256 bytes further.
  const uint64_t start = fr_log_sections_start();
  big.bytes().insert(big.bytes().begin() + long(start), 256, 0);
  big.header()->file_size += 256;
  for (fr_log_section& s : rows) s.offset += 256;
  big.header()->section_size = stride;
  REQUIRE(sizeof(fr_log_header) + FR_SECTION_KINDS * stride <= start + 256);
  for (uint32_t i = 0; i < FR_SECTION_KINDS; ++i) {
    uint8_t* at = big.bytes().data() + sizeof(fr_log_header) + i * stride;
    std::memcpy(at, &rows[i], sizeof rows[i]);
    std::memset(at + sizeof rows[i], 0xEE, stride - sizeof rows[i]);
  }
  r = big.read();
  INFO(r.message);
  REQUIRE(r.ok());
  check_tables(*r.log, 7);
}

TEST_CASE("sections: hostile directories are refused with a clear error", "[proto]") {
  using fr::log::ReadError;
  auto row = [](VersionLog& l, fr_section_kind k) { return l.row(k); };
  // Two tables that share bytes.
  check_refused(
      [&](VersionLog& l) { row(l, FR_SECTION_XFERS)->offset = row(l, FR_SECTION_CHANS)->offset; },
      "overlapping sections");
  check_refused([&](VersionLog& l) { row(l, FR_SECTION_RING)->offset -= 128; }, "overlapping");
  // A table over the header or the directory.
  check_refused([&](VersionLog& l) { row(l, FR_SECTION_COMMS)->offset = 256; }, "header");
  // A table past the end of the file.
  check_refused([&](VersionLog& l) { row(l, FR_SECTION_XFERS)->capacity = 2; },
                "transfers table out of place");
  check_refused([&](VersionLog& l) { row(l, FR_SECTION_GRAPHS)->offset = 1ull << 39; },
                "graphs table out of place");
  // Entries smaller than the version defines, or not whole words.
  check_refused([&](VersionLog& l) { row(l, FR_SECTION_CHANS)->entry_size = FR_V7_CHAN_BYTES - 8; },
                "channels entry size 112 smaller than version 7 defines");
  check_refused([&](VersionLog& l) { row(l, FR_SECTION_COMMS)->entry_size = 8; }, "defines");
  check_refused([&](VersionLog& l) { row(l, FR_SECTION_XFERS)->entry_size = 324; },
                "misaligned or implausible transfers table");
  // Counts past the capacity; capacities past the format's maximum; no ring.
  check_refused([&](VersionLog& l) { row(l, FR_SECTION_COMMS)->count = 3; },
                "communicators count 3 past its capacity 2");
  check_refused([&](VersionLog& l) { row(l, FR_SECTION_CAPTURES)->count = 2; },
                "past its capacity");
  check_refused(
      [&](VersionLog& l) { row(l, FR_SECTION_RING)->capacity = FR_MAX_RING_CAPACITY + 1; },
      "ring capacity 4194305 out of range");
  check_refused([&](VersionLog& l) { row(l, FR_SECTION_RING)->capacity = 0; }, "ring capacity 0");
  // The directory itself: an unknown kind, a kind twice, rows too small, out of place.
  check_refused([&](VersionLog& l) { row(l, FR_SECTION_CHANS)->kind = FR_SECTION_KINDS; },
                "unknown section kind 6");
  check_refused([&](VersionLog& l) { row(l, FR_SECTION_CHANS)->kind = FR_SECTION_RING; },
                "section ring listed twice");
  check_refused([](VersionLog& l) { l.header()->section_size = 32; },
                "section row size 32 where version 7 defines 40 bytes");
  check_refused([](VersionLog& l) { l.header()->section_offset = 8; },
                "section directory out of place");
  check_refused([](VersionLog& l) { l.header()->section_offset = 4096; },
                "section directory out of place");
  // An offset so large that the directory's end wraps past zero to a small number.
  check_refused([](VersionLog& l) { l.header()->section_offset = UINT64_MAX - 199; },
                "section directory out of place");
  check_refused([](VersionLog& l) { l.header()->section_count = 0; },
                "section directory of 0 rows");
  check_refused([](VersionLog& l) { l.header()->section_count = 65; },
                "section directory of 65 rows");
  // A file cut inside its directory.
  VersionLog cut(7);
  auto r = fr::log::read_log_bytes(cut.bytes().data(), sizeof(fr_log_header) + 60, "cut.frlog");
  CHECK(r.error == ReadError::kTruncated);
  CHECK(r.message.find("section directory") != std::string::npos);
}

TEST_CASE("sections: a row with capacity 0 is no table, wherever it points", "[proto]") {
  VersionLog w(7);
  w.row(FR_SECTION_XFERS)->capacity = 0;
  w.row(FR_SECTION_XFERS)->count = 0;
  w.row(FR_SECTION_XFERS)->offset = 1ull << 50;
  w.row(FR_SECTION_GRAPHS)->capacity = 0;
  w.row(FR_SECTION_GRAPHS)->count = 0;
  w.row(FR_SECTION_GRAPHS)->entry_size = 3;
  auto r = w.read();
  INFO(r.message);
  REQUIRE(r.ok());
  CHECK(r.log->xfers.empty());
  CHECK(r.log->graphs.empty());
  CHECK(r.log->header.xfer_capacity == 0);
  CHECK(r.log->captures.size() == 1);
}
