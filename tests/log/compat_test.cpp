// The flight log's compatibility rule (flight_log.h), built and held: logs written at other
// layouts than this reader's. A version 1 writer with the smallest structures version 1 defines,
// version 2 and version 3 writers at their smallest, a writer of the next layout (version 4:
// every structure bigger, with fields this reader does not know after its own) and structures
// smaller than their version defines. The reader copies min(stored size, its own size) of each
// structure, reads what the stored version did not define as zero, refuses a newer version and a
// structure too small.
#include <catch2/catch.hpp>
#include <cstring>
#include <string>
#include <vector>

#include "log/reader.h"

namespace {

constexpr uint64_t kCommA = 0xA11CE, kCommB = 0xB0B;
constexpr uint32_t kComms = 3, kRing = 8, kGraphs = 2, kCaptures = 3;
constexpr uint8_t kForeign = 0xEE;  // what a bigger writer puts in the fields we do not know

// One writer's layout: its version and the size of each of its structures.
struct Layout {
  uint32_t version, header, comm, record, graph;
};

// Writes a log at `lay`: each structure is our own struct cut to the writer's size, or our own
// struct followed by fields of a newer writer (kForeign bytes). The writer fills every field we
// know, even those its version does not define, so a test sees whether the reader ignores them.
class LayoutWriter {
 public:
  explicit LayoutWriter(Layout lay) {
    const bool graphs = lay.graph != 0;
    uint64_t comm_off = lay.header;
    uint64_t ring_off = comm_off + uint64_t{kComms} * lay.comm;
    uint64_t graph_off = ring_off + uint64_t{kRing} * lay.record;
    uint64_t capture_off = graph_off + (graphs ? uint64_t{kGraphs} * lay.graph : 0);
    uint64_t end = capture_off + (graphs ? uint64_t{kCaptures} * lay.record : 0);
    bytes_.assign(end, 0);

    fr_log_header h{};
    h.magic = FR_LOG_MAGIC;
    h.version = lay.version;
    h.header_size = lay.header;
    h.comm_size = lay.comm;
    h.record_size = lay.record;
    h.comm_capacity = kComms;
    h.ring_capacity = kRing;
    h.comm_offset = comm_off;
    h.ring_offset = ring_off;
    h.file_size = end;
    h.global_rank = 5;
    h.world_size = 8;
    h.record_counter = 6;
    h.comm_count = 2;
    std::strcpy(h.job_id, "job-compat");
    std::strcpy(h.hostname, "hostC");
    std::strcpy(h.exe, "train");
    h.graph_offset = graphs ? graph_off : 0xDEAD;  // a version 1 writer left bytes there
    h.graph_capacity = graphs ? kGraphs : 7;
    h.graph_size = lay.graph;
    h.graph_count = graphs ? 1 : 0;
    h.capture_offset = capture_off;
    h.capture_capacity = graphs ? kCaptures : 9;
    h.capture_count = graphs ? 1 : 0;
    h.gpu_error = 801;  // version 6 on; a writer of an older version left bytes there
    h.gpu_error_call = FR_GPU_CALL_STREAM_WRITE_VALUE64;
    h.gpu_event_streams = 2;
    put(0, &h, sizeof h, lay.header);

    put(comm_off, comm(kCommA, 0), sizeof(fr_comm_entry), lay.comm);
    put(comm_off + lay.comm, comm(kCommB, 1), sizeof(fr_comm_entry), lay.comm);
    for (uint64_t id = 0; id < 6; ++id)
      put(ring_off + id * lay.record, record(id, id % 2 ? kCommB : kCommA), sizeof(fr_record),
          lay.record);
    if (graphs) {
      fr_graph_entry g{};
      g.lock = 2;
      g.id = 0x6A;
      g.ordinal = 1;
      g.n_ops = 1;
      g.replays = 4;
      g.last_launch_ns = 777;
      g.gpu_replays = 3;  // version 3 on
      put(graph_off, &g, sizeof g, lay.graph);
      fr_record* c = record(100, kCommA);
      c->flags |= FR_REC_F_CAPTURED;
      c->aux = 0x6A;
      put(capture_off, c, sizeof *c, lay.record);
    }
  }

  fr::log::ReadResult read() const {
    return fr::log::read_log_bytes(bytes_.data(), bytes_.size(), "compat.frlog");
  }

 private:
  // Our struct's first `size` bytes, or all of it and kForeign bytes up to `size`.
  void put(uint64_t at, const void* v, size_t own, size_t size) {
    std::memcpy(bytes_.data() + at, v, std::min(own, size));
    if (size > own) std::memset(bytes_.data() + at + own, kForeign, size - own);
  }
  fr_comm_entry* comm(uint64_t id, int rank) {
    c_ = fr_comm_entry{};
    c_.lock = 2;
    c_.id = id;
    c_.size = 2;
    c_.rank = rank;
    c_.cuda_dev = rank;
    std::strcpy(c_.name, id == kCommA ? "world" : "pair");
    c_.state = FR_COMM_LIVE;
    c_.coll_seq = 3;
    c_.gpu_started = 2;
    c_.gpu_completed = 1;
    c_.graph_started = FR_GRAPH_POS(1, 1);  // version 2 on
    c_.graph_completed = FR_GRAPH_POS(1, 0);
    return &c_;
  }
  fr_record* record(uint64_t id, uint64_t comm_id) {
    r_ = fr_record{};
    r_.lock = 2;
    r_.id = id;
    r_.comm_id = comm_id;
    r_.seq = id / 2 + 1;
    r_.op_index = id / 2 + 1;
    r_.count = 1000 + id;
    r_.op = FR_OP_ALLREDUCE;
    r_.dtype = 7;
    r_.gpu_state = FR_GPU_ENQUEUED;
    r_.peer = -1;
    r_.flags = FR_REC_F_LAUNCHED;
    r_.aux = 0xA0 + id;
    return &r_;
  }

  std::vector<uint8_t> bytes_;
  fr_comm_entry c_{};
  fr_record r_{};
};

// What every layout below must read back: the fields every version defines.
void check_common(const fr::log::LogFile& log) {
  CHECK(log.header.global_rank == 5);
  CHECK(log.header.world_size == 8);
  CHECK(log.job_id() == "job-compat");
  CHECK(log.hostname() == "hostC");
  REQUIRE(log.comms.size() == 2);
  CHECK(log.comms[0].id == kCommA);
  CHECK(log.comms[1].id == kCommB);  // the writer's stride, not ours
  CHECK(log.comms[1].rank == 1);
  CHECK(std::string(log.comms[1].name) == "pair");
  CHECK(log.comms[0].coll_seq == 3);
  CHECK(log.comms[0].gpu_completed == 1);
  CHECK(log.comms_torn == 0);
  REQUIRE(log.records.size() == 6);
  for (uint64_t id = 0; id < 6; ++id) {
    const fr_record& r = log.records[id].raw;
    CHECK(r.id == id);
    CHECK(r.comm_id == (id % 2 ? kCommB : kCommA));
    CHECK(r.count == 1000 + id);
    CHECK(r.aux == 0xA0 + id);
  }
  // op_index 1 is completed on its communicator (gpu_completed 1), op_index 2 started.
  CHECK(log.records[0].gpu_state == FR_GPU_COMPLETED);
  CHECK(log.records[2].gpu_state == FR_GPU_STARTED);
  CHECK(log.torn == 0);
}

// A dump of what was read, in this reader's own layout, reads back the same.
void check_reencodes(const fr::log::LogFile& log) {
  std::string bytes = fr::log::encode_snapshot(log, 42);
  auto again = fr::log::read_log_bytes(bytes.data(), bytes.size(), "again");
  REQUIRE(again.ok());
  CHECK(again.log->header.version == FR_LOG_VERSION);
  CHECK(again.log->header.header_size == sizeof(fr_log_header));
  CHECK(again.log->comms.size() == log.comms.size());
  CHECK(again.log->records.size() == log.records.size());
  CHECK(again.log->graphs.size() == log.graphs.size());
  CHECK(again.log->captures.size() == log.captures.size());
}

}  // namespace

TEST_CASE("compat: a version 1 log at the smallest sizes version 1 defines", "[proto]") {
  LayoutWriter w({1, FR_V1_HEADER_BYTES, FR_V1_COMM_BYTES, FR_V1_RECORD_BYTES, 0});
  auto r = w.read();
  INFO(r.message);
  REQUIRE(r.ok());
  check_common(*r.log);
  // Past the stored header (336 bytes) lie the communicator table's bytes: never graph fields.
  CHECK(r.log->header.graph_capacity == 0);
  CHECK(r.log->header.capture_capacity == 0);
  CHECK(r.log->header.graph_offset == 0);
  // Past a stored entry (208 bytes) lies the next entry: never a graph position.
  CHECK(r.log->comms[0].graph_started == 0);
  CHECK(r.log->comms[0].graph_completed == 0);
  CHECK(r.log->graphs.empty());
  CHECK(r.log->captures.empty());
  check_reencodes(*r.log);
}

TEST_CASE("compat: a version 1 log at full size reads version 2's fields as zero", "[proto]") {
  // Our own sizes, but version 1 defined nothing where the graph fields are now.
  LayoutWriter w({1, sizeof(fr_log_header), sizeof(fr_comm_entry), sizeof(fr_record), 0});
  auto r = w.read();
  INFO(r.message);
  REQUIRE(r.ok());
  check_common(*r.log);
  CHECK(r.log->header.graph_capacity == 0);
  CHECK(r.log->header.capture_capacity == 0);
  CHECK(r.log->comms[1].graph_started == 0);
}

TEST_CASE("compat: versions 3 and 4 at full size have no channel table (version 5)", "[proto]") {
  // Our own header size, but neither version defined anything at 400..423 (chan_*): those bytes
  // read as zero, so no channel table is read (chan_table_test.cpp puts a whole table under a
  // version 3 header and checks it is ignored).
  for (uint32_t version : {3u, 4u}) {
    INFO("version " << version);
    LayoutWriter w({version, sizeof(fr_log_header), sizeof(fr_comm_entry), sizeof(fr_record),
                    sizeof(fr_graph_entry)});
    auto r = w.read();
    INFO(r.message);
    REQUIRE(r.ok());
    check_common(*r.log);
    CHECK(r.log->header.chan_capacity == 0);
    CHECK(r.log->header.chan_offset == 0);
    CHECK(r.log->chans.empty());
  }
  // A version 5 header smaller than version 5 defines is corrupt.
  auto r =
      LayoutWriter({5, FR_V4_HEADER_BYTES, FR_V5_COMM_BYTES, FR_V5_RECORD_BYTES, FR_V5_GRAPH_BYTES})
          .read();
  CHECK_FALSE(r.ok());
  CHECK(r.error == fr::log::ReadError::kCorrupt);
}

TEST_CASE("compat: the GPU failure fields are read from version 6 on, as zero before", "[proto]") {
  for (uint32_t version : {5u, 6u}) {
    INFO("version " << version);
    auto r = LayoutWriter({version, sizeof(fr_log_header), sizeof(fr_comm_entry), sizeof(fr_record),
                           sizeof(fr_graph_entry)})
                 .read();
    INFO(r.message);
    REQUIRE(r.ok());
    check_common(*r.log);
    CHECK(r.log->header.gpu_error == (version >= 6 ? 801 : 0));
    CHECK(r.log->header.gpu_error_call ==
          (version >= 6 ? uint32_t(FR_GPU_CALL_STREAM_WRITE_VALUE64) : 0u));
    CHECK(r.log->header.gpu_event_streams == (version >= 6 ? 2u : 0u));
  }
  // A version 6 header smaller than version 6 defines is corrupt.
  auto r =
      LayoutWriter({6, FR_V5_HEADER_BYTES, FR_V6_COMM_BYTES, FR_V6_RECORD_BYTES, FR_V6_GRAPH_BYTES})
          .read();
  CHECK_FALSE(r.ok());
  CHECK(r.error == fr::log::ReadError::kCorrupt);
}

TEST_CASE("compat: graph tables of versions 2 and 3, at each version's smallest sizes and at ours",
          "[proto]") {
  struct Case {
    const char* what;
    Layout layout;
    uint64_t gpu_replays;  // what the reader must find: 0 where the version does not define it
  };
  const Case cases[] = {
      {"version 2 at its smallest sizes",
       {2, FR_V2_HEADER_BYTES, FR_V2_COMM_BYTES, FR_V2_RECORD_BYTES, FR_V2_GRAPH_BYTES},
       0},
      // Our own graph entry size, but version 2 defined nothing past last_launch_ns.
      {"version 2 with our graph entry size",
       {2, FR_V2_HEADER_BYTES, FR_V2_COMM_BYTES, FR_V2_RECORD_BYTES, sizeof(fr_graph_entry)},
       0},
      {"version 3 at its smallest sizes",
       {3, FR_V3_HEADER_BYTES, FR_V3_COMM_BYTES, FR_V3_RECORD_BYTES, FR_V3_GRAPH_BYTES},
       3},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    auto r = LayoutWriter(c.layout).read();
    INFO(r.message);
    REQUIRE(r.ok());
    check_common(*r.log);
    CHECK(r.log->comms[0].graph_started == FR_GRAPH_POS(1, 1));
    REQUIRE(r.log->graphs.size() == 1);
    CHECK(r.log->graphs[0].replays == 4);
    CHECK(r.log->graphs[0].last_launch_ns == 777);
    CHECK(r.log->graphs[0].gpu_replays == c.gpu_replays);
    REQUIRE(r.log->captures.size() == 1);
    CHECK(r.log->captures[0].aux == 0x6A);
    check_reencodes(*r.log);
  }
}

TEST_CASE("compat: a log of the next layout (version 4, bigger structures) is refused", "[proto]") {
  const Layout next{FR_LOG_VERSION + 1, sizeof(fr_log_header) + 64, sizeof(fr_comm_entry) + 32,
                    sizeof(fr_record) + 32, sizeof(fr_graph_entry) + 16};
  auto r = LayoutWriter(next).read();
  CHECK_FALSE(r.ok());
  CHECK(r.error == fr::log::ReadError::kNewerVersion);
  CHECK(r.message.find("compat.frlog") != std::string::npos);
  CHECK(r.message.find("version " + std::to_string(FR_LOG_VERSION + 1)) != std::string::npos);
  CHECK(r.message.find("upgrade") != std::string::npos);
}

TEST_CASE("compat: bigger structures of version 6 read by our own size", "[proto]") {
  // The same bytes under the last version with the tables in the header: each structure is copied
  // at our size, the fields after it (kForeign bytes) are skipped by the writer's stride
  // (sections_test.cpp holds version 7's rows and entries to the same rule).
  const Layout bigger{6, sizeof(fr_log_header) + 64, sizeof(fr_comm_entry) + 32,
                      sizeof(fr_record) + 32, sizeof(fr_graph_entry) + 16};
  auto r = LayoutWriter(bigger).read();
  INFO(r.message);
  REQUIRE(r.ok());
  check_common(*r.log);
  CHECK(r.log->header.header_size == bigger.header);
  CHECK(r.log->comms[0].graph_started == FR_GRAPH_POS(1, 1));
  REQUIRE(r.log->graphs.size() == 1);
  CHECK(r.log->graphs[0].replays == 4);
  REQUIRE(r.log->captures.size() == 1);
  CHECK(r.log->captures[0].aux == 0x6A);
  check_reencodes(*r.log);
}

TEST_CASE("compat: a structure smaller than its version defines is corrupt", "[proto]") {
  const Layout too_small[] = {
      {1, FR_V1_HEADER_BYTES - 8, FR_V1_COMM_BYTES, FR_V1_RECORD_BYTES, 0},
      {1, FR_V1_HEADER_BYTES, FR_V1_COMM_BYTES - 8, FR_V1_RECORD_BYTES, 0},
      {1, FR_V1_HEADER_BYTES, FR_V1_COMM_BYTES, FR_V1_RECORD_BYTES - 8, 0},
      // Version 1's sizes are too small for version 2.
      {2, FR_V1_HEADER_BYTES, FR_V2_COMM_BYTES, FR_V2_RECORD_BYTES, FR_V2_GRAPH_BYTES},
      {2, FR_V2_HEADER_BYTES, FR_V1_COMM_BYTES, FR_V2_RECORD_BYTES, FR_V2_GRAPH_BYTES},
      {2, FR_V2_HEADER_BYTES, FR_V2_COMM_BYTES, FR_V2_RECORD_BYTES, FR_V2_GRAPH_BYTES - 8},
      // Version 2's graph entry is too small for version 3.
      {3, FR_V3_HEADER_BYTES, FR_V3_COMM_BYTES, FR_V3_RECORD_BYTES, FR_V2_GRAPH_BYTES},
  };
  for (const Layout& lay : too_small) {
    auto r = LayoutWriter(lay).read();
    INFO("version " << lay.version << " sizes " << lay.header << "/" << lay.comm << "/"
                    << lay.record << "/" << lay.graph << ": " << r.message);
    CHECK_FALSE(r.ok());
    CHECK(r.error == fr::log::ReadError::kCorrupt);
    CHECK(r.message.find("defines") != std::string::npos);
  }
}
