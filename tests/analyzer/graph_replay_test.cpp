// Which replay of a CUDA graph the GPU positions belong to. A log where the host launched replays
// 1, 2 and 3 of a two-op graph while the GPU is inside replay 2 (started op 2, finished op 1):
// with the graph's GPU replay counter (version 3, GPU_REPLAYS) the ops of replay 2 carry the
// positions, replay 1 is completed and replay 3 waits behind it; without it (a version 2 log, or
// the agent's fallback) the positions are read as the newest launch's, as before.
#include <catch2/catch.hpp>

#include <vector>

#include "analyzer/model.h"
#include "fr/flight_log.h"
#include "log/reader.h"
#include "log/test_log.h"

namespace {

constexpr uint32_t kComms = 2, kRing = 16, kGraphs = 2, kCaptures = 4;
constexpr uint64_t kCommId = 0xc0ffee, kGraphId = 0x9a9a;

std::vector<uint8_t> make_log(uint32_t version, bool gpu_counted) {
  std::vector<uint8_t> buf(fr::test::v6::file_size(kComms, kRing, kGraphs, kCaptures));
  auto* h = reinterpret_cast<fr_log_header*>(buf.data());
  fr::test::fill_layout(h, version, kComms, kRing, kGraphs, kCaptures, buf.size());
  h->global_rank = 0;
  h->world_size = 1;
  h->flags = FR_LOG_F_SNAPSHOT | FR_LOG_F_GPU_MARKERS |
             (gpu_counted ? FR_LOG_F_GRAPH_REPLAY_KERNEL : FR_LOG_F_GRAPH_REPLAY_HOST);
  h->writer_alive = 1;
  h->graph_count = 1;
  h->capture_count = 2;

  REQUIRE(fr::test::put_graph_comm(buf.data(), h, kCommId, 6));  // 3 replays x 2 ops

  fr_record ops[2];
  REQUIRE(fr::test::put_two_op_graph(buf.data(), h, kGraphId, kCommId, -1, -1, ops));
  auto* g = reinterpret_cast<fr_graph_entry*>(buf.data() + h->graph_offset);
  g[0].flags = FR_GRAPH_F_GPU_POSITION | (gpu_counted ? FR_GRAPH_F_GPU_REPLAYS : 0u);
  g[0].replays = 3;
  g[0].gpu_replays = 2;  // a version 2 reader's view never has it (read as zero)

  auto put = [](fr_record* slot, fr_record r) { REQUIRE(fr_record_publish(slot, &r)); };
  auto* ring = reinterpret_cast<fr_record*>(buf.data() + h->ring_offset);
  for (uint64_t n = 1; n <= 3; ++n) {
    fr_record l{};
    l.id = n - 1;
    l.call_ns = 1000 * n;
    l.op = FR_OP_GRAPH_LAUNCH;
    l.seq = n;
    l.aux = kGraphId;
    l.count = 2;
    l.op_index = 1;
    l.redop = -1;
    l.peer = -1;
    l.flags = FR_REC_F_LAUNCHED;
    l.gpu_state = FR_GPU_ENQUEUED;
    put(&ring[n - 1], l);
  }
  h->record_counter = 3;
  return buf;
}

// The GPU state of captured op `pos` in replay `replay`, as the analysis places it.
int state_of(const fr::analyzer::Proc& p, uint64_t replay, uint32_t pos) {
  for (const auto& o : p.ops) {
    const fr::analyzer::ReplayTag* t = fr::analyzer::replay_of(p, &o);
    if (t != nullptr && t->replay == replay && t->pos == pos) return o.gpu_state;
  }
  return -1;
}

fr::analyzer::Proc proc_of(const std::vector<uint8_t>& buf) {
  auto rr = fr::log::read_log_bytes(buf.data(), buf.size(), "graph.frlog");
  INFO(rr.message);
  REQUIRE(rr.ok());
  return fr::analyzer::proc_from_log(*rr.log, "flight_log");
}

}  // namespace

TEST_CASE("graph replays: with the GPU replay counter, positions belong to the GPU's replay",
          "[analyzer]") {
  auto p = proc_of(make_log(fr::test::v6::kVersion, true));
  CHECK(p.graph_replays == 3);
  CHECK(state_of(p, 1, 1) == FR_GPU_COMPLETED);
  CHECK(state_of(p, 1, 2) == FR_GPU_COMPLETED);
  CHECK(state_of(p, 2, 1) == FR_GPU_COMPLETED);
  CHECK(state_of(p, 2, 2) == FR_GPU_STARTED);   // the GPU is inside replay 2
  CHECK(state_of(p, 3, 1) == FR_GPU_ENQUEUED);  // launched by the host, not reached
  CHECK(state_of(p, 3, 2) == FR_GPU_ENQUEUED);
}

TEST_CASE("graph replays: without the counter, positions are the newest launch's (as before)",
          "[analyzer]") {
  for (uint32_t version : {2u, fr::test::v6::kVersion}) {
    INFO("version " << version);
    // A version 2 log has no counter (even with a stray GPU_REPLAYS bit, which is not trusted);
    // version 3 without GPU_REPLAYS is the agent's fallback.
    auto p = proc_of(make_log(version, version > 2 ? false : true));
    CHECK(state_of(p, 2, 2) == FR_GPU_COMPLETED);
    CHECK(state_of(p, 3, 1) == FR_GPU_COMPLETED);
    CHECK(state_of(p, 3, 2) == FR_GPU_STARTED);
  }
}
