// Version 2's CUDA-graph sections: a log with a graph table and a capture table reads whole and
// survives a snapshot; a version 1 log (no graph sections) still reads; hostile geometry of the
// new sections is refused as corrupt.
#include <cstring>
#include <vector>

#include <catch2/catch.hpp>

#include "fr/flight_log.h"
#include "log/reader.h"
#include "test_log.h"

namespace {

constexpr uint32_t kComms = 2, kRing = 8, kGraphs = 2, kCaptures = 4;
constexpr uint64_t kCommId = 0xc0ffee, kGraphId = 0x9a9a;

// A log made in memory with the format's own primitives: one communicator, one eager all-reduce,
// a graph of two captured ops and two replays of it.
std::vector<uint8_t> make_log(uint32_t version) {
  const bool graphs = version >= 2;
  std::vector<uint8_t> buf(graphs ? fr::test::v6::file_size(kComms, kRing, kGraphs, kCaptures)
                                  : fr::test::v6::graph_offset(kComms, kRing));
  auto* h = reinterpret_cast<fr_log_header*>(buf.data());
  fr::test::fill_layout(h, version, kComms, kRing, graphs ? kGraphs : 0, kCaptures, buf.size());
  h->global_rank = 0;
  h->world_size = 1;
  h->flags = FR_LOG_F_SNAPSHOT | FR_LOG_F_GPU_MARKERS;
  h->writer_alive = 0;
  fr::test::put_graph_comm(buf.data(), h, kCommId, 5);  // 1 eager + 2 replays x 2 ops
  auto* ring = reinterpret_cast<fr_record*>(buf.data() + h->ring_offset);
  auto put = [&](fr_record* slot, fr_record r) { REQUIRE(fr_record_publish(slot, &r)); };
  fr_record eager{};
  eager.id = 0;
  eager.comm_id = kCommId;
  eager.seq = 1;
  eager.op = FR_OP_ALLREDUCE;
  eager.flags = FR_REC_F_LAUNCHED;
  put(&ring[0], eager);
  uint64_t next = 1;
  if (graphs) {
    h->graph_count = 1;
    h->capture_count = 2;
    fr_record ops[2];
    REQUIRE(fr::test::put_two_op_graph(buf.data(), h, kGraphId, kCommId, 0, 0, ops));
    auto* g = reinterpret_cast<fr_graph_entry*>(buf.data() + h->graph_offset);
    g[0].flags = FR_GRAPH_F_GPU_POSITION;
    g[0].replays = 2;
    for (uint32_t k = 1; k <= 2; ++k) {
      const fr_record& r = ops[k - 1];
      put(&ring[next], fr_record{r.lock, next, r.comm_id, 0, k, r.count, 0,  0, 0,       0,       0,
                                 0,      0,    r.op,      0, 0, -1,      -1, 0, r.flags, kGraphId});
      ++next;
    }
    for (uint64_t n = 1; n <= 2; ++n) {
      fr_record l{};
      l.id = next;
      l.op = FR_OP_GRAPH_LAUNCH;
      l.seq = n;
      l.aux = kGraphId;
      l.count = 2;
      l.op_index = 1;
      l.flags = FR_REC_F_LAUNCHED;
      put(&ring[next], l);
      ++next;
    }
  }
  h->record_counter = next;
  return buf;
}

}  // namespace

TEST_CASE("a version 2 log with graph sections reads whole and survives a snapshot", "[proto]") {
  auto buf = make_log(2);
  auto rr = fr::log::read_log_bytes(buf.data(), buf.size(), "v2");
  INFO(rr.message);
  REQUIRE(rr.ok());
  const auto& log = *rr.log;
  REQUIRE(log.graphs.size() == 1);
  CHECK(log.graphs[0].id == kGraphId);
  CHECK(log.graphs[0].replays == 2);
  CHECK(log.graphs[0].n_ops == 2);
  REQUIRE(log.captures.size() == 2);
  CHECK(log.captures[1].op == FR_OP_BROADCAST);
  CHECK(log.records.size() == 5);
  REQUIRE(log.comms.size() == 1);
  CHECK(log.comms[0].graph_started == FR_GRAPH_POS(1, 2));
  // A captured record's op_index is a position, never resolved against the op-index counters.
  CHECK(log.records[1].gpu_state == FR_GPU_NONE);

  std::string snap = fr::log::encode_snapshot(log, 42);
  auto again = fr::log::read_log_bytes(snap.data(), snap.size(), "snap");
  INFO(again.message);
  REQUIRE(again.ok());
  CHECK(again.log->header.version == FR_LOG_VERSION);
  REQUIRE(again.log->graphs.size() == 1);
  CHECK(again.log->graphs[0].replays == 2);
  REQUIRE(again.log->captures.size() == 2);
  CHECK(again.log->captures[0].aux == kGraphId);
  CHECK(again.log->comms[0].graph_completed == FR_GRAPH_POS(1, 1));
}

TEST_CASE("a version 1 log still reads, with no graphs", "[proto]") {
  auto buf = make_log(1);
  auto rr = fr::log::read_log_bytes(buf.data(), buf.size(), "v1");
  INFO(rr.message);
  REQUIRE(rr.ok());
  CHECK(rr.log->header.version == 1);
  CHECK(rr.log->graphs.empty());
  CHECK(rr.log->captures.empty());
  CHECK(rr.log->records.size() == 1);
}

TEST_CASE("hostile graph sections are refused as corrupt", "[proto]") {
  auto check_corrupt = [](std::vector<uint8_t> buf, auto spoil) {
    spoil(reinterpret_cast<fr_log_header*>(buf.data()));
    auto rr = fr::log::read_log_bytes(buf.data(), buf.size(), "bad");
    INFO(rr.message);
    CHECK(rr.error == fr::log::ReadError::kCorrupt);
  };
  check_corrupt(make_log(2), [](fr_log_header* h) { h->graph_offset = h->ring_offset; });
  check_corrupt(make_log(2), [](fr_log_header* h) { h->capture_offset = h->graph_offset; });
  check_corrupt(make_log(2),
                [](fr_log_header* h) { h->graph_capacity = FR_MAX_GRAPH_CAPACITY + 1; });
  check_corrupt(make_log(2), [](fr_log_header* h) { h->graph_size = 8; });
  check_corrupt(make_log(2), [](fr_log_header* h) { h->capture_capacity = 1u << 30; });
}
