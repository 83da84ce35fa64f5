// pg_status counters in the entries' numbering (torch_progress.cpp): PyTorch counts every op of a
// process group (op_id, pg_status), gloo records no entry for send and recv, so the counters run
// ahead of collective_seq_id by the point-to-point ops issued. No collective may be invented for
// them; hostile op_ids change nothing but the numbers.
#include <catch2/catch.hpp>
#include <cstdint>
#include <string>

#include "analyzer/torch/torch_convert.h"
#include "analyzer/torch/torch_detail.h"

namespace t = fr::analyzer::torch;
using nlohmann::json;

namespace {

// A gloo-shaped dump: collectives 1..n of the default group with the given op_ids, and pg_status.
json gloo_dump(const std::vector<json>& op_ids, json enqueued, json completed) {
  json entries = json::array();
  for (size_t i = 0; i < op_ids.size(); ++i)
    entries.push_back({{"record_id", i},
                       {"collective_seq_id", i + 1},
                       {"p2p_seq_id", 0},
                       {"op_id", op_ids[i]},
                       {"is_p2p", false},
                       {"pg_id", 0},
                       {"process_group", json::array({"0", "default_pg"})},
                       {"profiling_name", "gloo:all_reduce"},
                       {"input_sizes", {{8}}},
                       {"input_dtypes", {"Float"}},
                       {"output_sizes", {{8}}},
                       {"output_dtypes", {"Float"}},
                       {"state", "scheduled"},
                       {"retired", i + 1 < op_ids.size()},
                       {"time_created_ns", 1000 + i}});
  return {{"version", "2.10"},
          {"rank", 0},
          {"pg_config", {{"", {{"name", ""}, {"desc", ""}, {"ranks", "[0, 1]"}}}}},
          {"pg_status",
           {{"0",
             {{"last_enqueued_collective", enqueued},
              {"last_started_collective", "-1"},
              {"last_completed_collective", completed}}}}},
          {"entries", entries}};
}

const fr_comm_entry& default_group(const t::TorchReadResult& r) {
  REQUIRE(r.logs.size() == 1);
  REQUIRE(r.logs[0].comms.size() == 1);
  return r.logs[0].comms[0];
}

}  // namespace

TEST_CASE("torch counters: a pg_status counter maps to the collective it names", "[torch]") {
  const t::OpIdMap ids = {{1, 1}, {2, 2}, {7, 3}, {8, 4}};  // 4 p2p ops between #2 and #3
  CHECK(t::coll_seq_at({}, 15) == 15);                      // no op_ids: the same numbering
  CHECK(t::coll_seq_at(ids, -1) == -1);                     // "not said"
  CHECK(t::coll_seq_at(ids, 7) == 3);
  CHECK(t::coll_seq_at(ids, 5) == 2);   // a p2p op: the collective before it
  CHECK(t::coll_seq_at(ids, 10) == 6);  // beyond the ring: taken as collectives
  CHECK(t::coll_seq_at({{5, 5}}, 2) == 2);
  CHECK(t::coll_seq_at({{9, 2}}, 1) == 0);                              // never below 0
  CHECK(t::coll_seq_at({{1, INT64_MAX - 1}}, INT64_MAX) == INT64_MAX);  // saturates
}

TEST_CASE("torch counters: gloo's p2p ops run pg_status ahead and invent no collective",
          "[torch]") {
  // Ten all_reduces, four send/recv, all_reduce #11 (op 15) pending: pg_status says 15 enqueued.
  std::vector<json> ids;
  for (int i = 1; i <= 10; ++i) ids.push_back(i);
  ids.push_back(15);
  auto r = t::read_torch_dump_bytes(gloo_dump(ids, "15", "10").dump(), "fr_rank_0");
  INFO(r.error);
  const fr_comm_entry& c = default_group(r);
  CHECK(c.coll_seq == 11);
  CHECK(c.op_index == 15);  // what the analysis reads the unrecorded ops from
  REQUIRE(r.logs[0].records.size() == 11);
  CHECK(r.logs[0].records.back().raw.op_index == 15);
  CHECK(r.logs[0].records.back().gpu_state != FR_GPU_COMPLETED);
}

TEST_CASE("torch counters: hostile op_ids and counters are read without harm", "[torch]") {
  for (const std::vector<json>& ids :
       {std::vector<json>{json("x"), json(-5), json(3)},
        std::vector<json>{json(9), json(4), json(1)},
        std::vector<json>{json(INT64_MAX), json(INT64_MAX), json(0)},
        std::vector<json>{json(nullptr), json(1.5), json::array()}}) {
    for (const json& enq : {json("99999999999999999999"), json("-7"), json(INT64_MAX), json("3")}) {
      auto r = t::read_torch_dump_bytes(gloo_dump(ids, enq, enq).dump(), "fr_rank_0");
      INFO(ids[0].dump() << " " << enq.dump() << ": " << r.error);
      const fr_comm_entry& c = default_group(r);
      CHECK(c.coll_seq >= 3);
      CHECK(r.logs[0].records.size() == 3);
    }
  }
}

TEST_CASE("torch state: the entry's state, raised by its timing fields and retired", "[torch]") {
  // Dumps with timing on carry discovered start and completion times; without it (and in older
  // dumps) only the state. A finished entry must read as completed either way: read as started, a
  // finished collective looks in flight and can make stuck_in_collective blame a healthy rank.
  const t::TorchSchema& newest = t::kTorchSchemas[std::size(t::kTorchSchemas) - 1];
  const t::TorchSchema& oldest = t::kTorchSchemas[0];
  REQUIRE(newest.retired);
  REQUIRE_FALSE(oldest.retired);
  struct Case {
    const char* state;
    int64_t started_ns, completed_ns;
    bool retired;
    fr_gpu_state want;
  };
  const Case cases[] = {
      {"completed", 0, 0, false, FR_GPU_COMPLETED},  // timing off: the state alone says it
      {"completed", 5, 9, false, FR_GPU_COMPLETED},  // timing on
      {"completed", 5, 0, false, FR_GPU_COMPLETED},  // the completion not yet discovered
      {"started", 0, 0, false, FR_GPU_STARTED},
      {"started", 5, 0, false, FR_GPU_STARTED},
      {"started", 5, 9, false, FR_GPU_COMPLETED},  // a completion time outranks the state
      {"scheduled", 0, 0, false, FR_GPU_ENQUEUED},
      {"scheduled", 5, 0, false, FR_GPU_STARTED},
      {"scheduled", 0, 9, false, FR_GPU_COMPLETED},
      {"scheduled", 0, 0, true, FR_GPU_COMPLETED},  // gloo: retired is the only sign
      {"", 0, 0, false, FR_GPU_ENQUEUED},
  };
  for (const Case& c : cases) {
    for (const t::TorchSchema* schema : {&newest, &oldest}) {
      t::RawEntry e;
      e.state = c.state;
      e.started_ns = c.started_ns;
      e.completed_ns = c.completed_ns;
      e.retired = c.retired;
      t::Warnings w;
      // Dumps before "retired" existed keep the flag's meaning out of their states.
      const fr_gpu_state want =
          (c.retired && !schema->retired && c.started_ns == 0 && c.completed_ns == 0)
              ? FR_GPU_ENQUEUED
              : c.want;
      INFO("state \"" << c.state << "\", started " << c.started_ns << ", completed "
                      << c.completed_ns << ", retired " << c.retired << ", schema "
                      << schema->version);
      CHECK(t::state_from(e, *schema, &w) == want);
    }
  }
  t::RawEntry odd;
  odd.state = "exploded";
  t::Warnings w;
  CHECK(t::state_from(odd, newest, &w) == FR_GPU_ENQUEUED);
}
