// Every table of the flight log (communicators, ring, graphs and captures, channels, transfers)
// checked against the end of the file: a header whose table runs past the file it sits in is
// corrupt, even when the header's own file size agrees with the file's. Each case makes that table
// the last one of an otherwise well-formed log, so that the bound of that table alone catches it
// (a 2 KiB log whose header claims a ring of a million records, not garbage read as records).
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "log/reader.h"
#include "test_log.h"

namespace {

// Capacities of a log's tables; 0 leaves a table out (not the communicators or the ring).
struct Shape {
  uint32_t comms = 2, ring = 8, graphs = 0, captures = 0, chans = 0, xfers = 0;
};

struct Log {
  std::vector<uint64_t> words;
  uint8_t* base() { return reinterpret_cast<uint8_t*>(words.data()); }
  fr_log_header* h() { return reinterpret_cast<fr_log_header*>(base()); }
  fr::log::ReadResult read() {
    return fr::log::read_log_bytes(base(), words.size() * 8, "bounds.frlog");
  }
};

// A well-formed, empty log of this shape at the current version, as big as its tables.
Log make_log(const Shape& s) {
  const uint64_t size =
      fr::test::v6::file_size(s.comms, s.ring, s.graphs, s.captures, s.chans, s.xfers);
  Log log;
  log.words.assign(size / 8, 0);
  fr_log_header* h = log.h();
  fr::test::fill_layout(h, fr::test::v6::kVersion, s.comms, s.ring, s.graphs, s.captures, size);
  h->global_rank = 0;
  h->world_size = 1;
  if (s.graphs) h->capture_offset = fr::test::v6::capture_offset(s.comms, s.ring, s.graphs);
  if (s.chans) {
    h->chan_offset = fr::test::v6::chan_offset(s.comms, s.ring, s.graphs, s.captures);
    h->chan_capacity = s.chans;
    h->chan_size = sizeof(fr_chan_entry);
  }
  if (s.xfers) {
    h->xfer_offset = fr::test::v6::xfer_offset(s.comms, s.ring, s.graphs, s.captures, s.chans);
    h->xfer_capacity = s.xfers;
    h->xfer_size = sizeof(fr_xfer_entry);
  }
  return log;
}

// The log read as corrupt, its message naming the file.
void check_corrupt(Log& log, const char* what) {
  INFO(what);
  REQUIRE(log.h()->file_size == log.words.size() * 8);  // the header agrees with the file
  auto r = log.read();
  INFO(r.message);
  CHECK_FALSE(r.ok());
  CHECK(r.error == fr::log::ReadError::kCorrupt);
  CHECK(r.message.find("bounds.frlog") != std::string::npos);
}

}  // namespace

TEST_CASE("bounds: each table's well-formed log reads", "[proto]") {
  for (Shape s : {Shape{}, Shape{2, 8, 2, 4}, Shape{2, 8, 0, 0, 2}, Shape{2, 8, 0, 0, 0, 2},
                  Shape{2, 8, 2, 4, 2, 2}}) {
    Log log = make_log(s);
    auto r = log.read();
    INFO(r.message);
    CHECK(r.ok());
  }
}

TEST_CASE("bounds: a ring that runs past the file is corrupt", "[proto]") {
  Log log = make_log(Shape{});
  REQUIRE(log.words.size() * 8 < 4096);
  log.h()->ring_capacity = 1000000;
  check_corrupt(log, "a small log claiming a million records");
  log = make_log(Shape{});
  log.h()->ring_capacity += 1;
  check_corrupt(log, "one record past the end");
}

TEST_CASE("bounds: a communicator table that runs past the file is corrupt", "[proto]") {
  Log log = make_log(Shape{});
  log.h()->comm_capacity = FR_MAX_COMM_CAPACITY;
  log.h()->ring_offset =
      log.h()->comm_offset + uint64_t{FR_MAX_COMM_CAPACITY} * sizeof(fr_comm_entry);
  check_corrupt(log, "communicators past the end, the ring after them");
}

TEST_CASE("bounds: graph and capture tables that run past the file are corrupt", "[proto]") {
  Log log = make_log(Shape{2, 8, 2, 4});
  log.h()->capture_capacity += 1;
  check_corrupt(log, "one capture past the end");
  log = make_log(Shape{2, 8, 2, 4});
  log.h()->graph_capacity = 1000;
  log.h()->capture_offset = log.h()->graph_offset + 1000ull * sizeof(fr_graph_entry);
  check_corrupt(log, "graphs past the end, the captures after them");
}

TEST_CASE("bounds: a channel table that runs past the file is corrupt", "[proto]") {
  Log log = make_log(Shape{2, 8, 0, 0, 2});
  log.h()->chan_capacity += 1;
  check_corrupt(log, "one channel slot past the end");
  log = make_log(Shape{2, 8, 0, 0, 2});
  log.h()->chan_offset += 8;
  check_corrupt(log, "the table moved past the end");
}

TEST_CASE("bounds: a transfer table that runs past the file is corrupt", "[proto]") {
  Log log = make_log(Shape{2, 8, 0, 0, 0, 2});
  log.h()->xfer_capacity += 1;
  check_corrupt(log, "one transfer past the end");
  log = make_log(Shape{2, 8, 0, 0, 0, 2});
  log.h()->xfer_offset += 8;
  check_corrupt(log, "the table moved past the end");
}
