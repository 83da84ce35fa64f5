// The torch schema table (analyzer/torch/torch_schema.h): which row each dump version is read by,
// and, per row, how the same dump reads (sequence numbers of p2p ops, pg_status, retired entries,
// where the NCCL version is). Unknown newer versions read by the newest row with a warning;
// unknown older ones are refused.
#include <catch2/catch.hpp>
#include <iterator>
#include <string>

#include <nlohmann/json.hpp>

#include "analyzer/torch/torch_detail.h"
#include "analyzer/torch/torch_schema.h"

namespace t = fr::analyzer::torch;
using nlohmann::json;

namespace {

const t::TorchSchema* row(const char* version) {
  for (const auto& r : t::kTorchSchemas)
    if (std::string(r.version) == version) return &r;
  return nullptr;
}

// The same job at any version: two all_reduces (the second retired though still "scheduled"), a
// send numbered 3 among the collectives and 1 among the p2p ops, pg_status saying collective 1
// completed, 2 started and 3 enqueued, and both names of the NCCL version.
json dump_at(const std::string& version) {
  auto entry = [](int id, const char* name, int coll, int p2p, bool is_p2p, bool retired) {
    return json{{"record_id", id},
                {"pg_id", 0},
                {"process_group", {"0", "default_pg"}},
                {"collective_seq_id", coll},
                {"p2p_seq_id", p2p},
                {"is_p2p", is_p2p},
                {"profiling_name", name},
                {"time_created_ns", 100 + id},
                {"input_sizes", {{4}}},
                {"input_dtypes", {"Float"}},
                {"state", "scheduled"},
                {"retired", retired}};
  };
  json d;
  d["version"] = version;
  d["rank"] = 0;
  d["nccl_version"] = "2.18.1";
  d["comm_lib_version"] = "2.21.5";
  d["pg_config"] = {{"0", {{"name", "0"}, {"desc", "default_pg"}, {"ranks", "[0, 1]"}}}};
  d["pg_status"] = {{"0",
                     {{"last_enqueued_collective", 3},
                      {"last_started_collective", 2},
                      {"last_completed_collective", 1}}}};
  d["entries"] = {entry(0, "nccl:all_reduce", 1, 0, false, false),
                  entry(1, "nccl:all_reduce", 2, 0, false, true),
                  entry(2, "nccl:send 0->1", 3, 1, true, false)};
  return d;
}

t::TorchReadResult read_at(const std::string& version) {
  return t::convert_torch_document(dump_at(version), "dir/nccl_trace_rank_0");
}

std::string warnings(const t::TorchReadResult& r) {
  std::string all;
  for (const auto& w : r.warnings) all += w + "\n";
  return all;
}

}  // namespace

TEST_CASE("torch schema: every row's version picks that row", "[torch]") {
  for (const auto& r : t::kTorchSchemas) {
    INFO(r.version);
    t::SchemaChoice c = t::choose_torch_schema(r.version);
    CHECK(c.fit == t::SchemaFit::kKnown);
    CHECK(c.schema == &r);
    CHECK(c.note.empty());
  }
  // Rows ascend, so that "from this row to the next" means something.
  for (size_t i = 1; i < std::size(t::kTorchSchemas); ++i) {
    const auto& a = t::kTorchSchemas[i - 1];
    const auto& b = t::kTorchSchemas[i];
    CHECK((a.major < b.major || (a.major == b.major && a.minor < b.minor)));
  }
}

TEST_CASE("torch schema: versions between rows read by the older row", "[torch]") {
  CHECK(t::choose_torch_schema("2.5").schema == row("2.3"));
  CHECK(t::choose_torch_schema("2.5").fit == t::SchemaFit::kKnown);
  CHECK(t::choose_torch_schema("2.9").schema == row("2.7"));
}

TEST_CASE("torch schema: unknown newer, older, missing and unreadable versions", "[torch]") {
  const t::TorchSchema* newest = &t::newest_torch_schema();
  for (const char* v : {"2.11", "2.99", "3.0", "3.1"}) {
    INFO(v);
    t::SchemaChoice c = t::choose_torch_schema(v);
    CHECK(c.fit == t::SchemaFit::kNewer);
    CHECK(c.schema == newest);
    CHECK(c.note.find("newer") != std::string::npos);
  }
  for (const char* v : {"2.1", "2.0", "1.5", "0.9"}) {
    INFO(v);
    t::SchemaChoice c = t::choose_torch_schema(v);
    CHECK(c.fit == t::SchemaFit::kOlder);
    CHECK(c.schema == nullptr);
    CHECK(c.note.find("older") != std::string::npos);
    CHECK(c.note.find(t::kTorchSchemas[0].version) != std::string::npos);
  }
  CHECK(t::choose_torch_schema("").fit == t::SchemaFit::kMissing);
  CHECK(t::choose_torch_schema("").schema == newest);
  for (const char* v : {"abc", "2", "2.10.1", "-1.3", "2.x"}) {
    INFO(v);
    t::SchemaChoice c = t::choose_torch_schema(v);
    CHECK(c.fit == t::SchemaFit::kUnreadable);
    CHECK(c.schema == newest);
  }
}

TEST_CASE("torch schema: the exported version is one of the rows, chosen apart", "[torch]") {
  const t::TorchSchema* exported = row(t::kTorchExportVersion);
  REQUIRE(exported);
  CHECK(t::choose_torch_schema(t::kTorchExportVersion).fit == t::SchemaFit::kKnown);
  // More versions are read than the one written.
  CHECK(std::size(t::kTorchSchemas) > 1);
}

TEST_CASE("torch schema 2.2: p2p ops share the collectives' numbers, no pg_status", "[torch]") {
  auto r = read_at("2.2");
  INFO(r.error << "\n" << warnings(r));
  REQUIRE(r.logs.size() == 1);
  const auto& f = r.logs[0];
  REQUIRE(f.records.size() == 3);
  CHECK(f.records[2].raw.op == FR_OP_SEND);
  CHECK(f.records[2].raw.seq == 3);  // collective_seq_id: p2p_seq_id is not of this version
  CHECK(f.comms[0].p2p_seq == 3);
  CHECK(f.comms[0].coll_seq == 2);  // no pg_status: nothing enqueued past the entries
  // Nothing reports a start: the oldest unfinished op counts as started; "retired" is not of
  // this version, so the second all_reduce stays enqueued.
  CHECK(f.records[0].gpu_state == FR_GPU_STARTED);
  CHECK(f.records[1].gpu_state == FR_GPU_ENQUEUED);
  CHECK(f.header.nccl_version == 21801);  // "nccl_version"
  CHECK(warnings(r).find("schema version") == std::string::npos);
}

TEST_CASE("torch schema 2.3 and 2.7: p2p numbers, pg_status, retired", "[torch]") {
  for (const char* v : {"2.3", "2.7"}) {
    auto r = read_at(v);
    INFO(v << ": " << r.error << "\n" << warnings(r));
    REQUIRE(r.logs.size() == 1);
    const auto& f = r.logs[0];
    REQUIRE(f.records.size() == 3);
    CHECK(f.records[2].raw.seq == 1);  // p2p_seq_id
    CHECK(f.comms[0].p2p_seq == 1);
    CHECK(f.comms[0].coll_seq == 3);                    // pg_status: collective 3 enqueued
    CHECK(f.records[0].gpu_state == FR_GPU_COMPLETED);  // pg_status: 1 completed
    CHECK(f.records[1].gpu_state == FR_GPU_COMPLETED);  // retired
    CHECK(f.header.nccl_version == 21801);              // "nccl_version" first
    CHECK(warnings(r).find("schema version") == std::string::npos);
  }
}

TEST_CASE("torch schema 2.10 (PyTorch 2.15): the NCCL version under comm_lib_version", "[torch]") {
  auto r = read_at("2.10");
  INFO(r.error << "\n" << warnings(r));
  REQUIRE(r.logs.size() == 1);
  const auto& f = r.logs[0];
  CHECK(f.records[2].raw.seq == 1);
  CHECK(f.comms[0].coll_seq == 3);
  CHECK(f.records[1].gpu_state == FR_GPU_COMPLETED);
  CHECK(f.header.nccl_version == 22105);  // "comm_lib_version" first
  // A dump of this version without comm_lib_version still gives the older key's value.
  json d = dump_at("2.10");
  d.erase("comm_lib_version");
  auto old_key = t::convert_torch_document(d, "dir/nccl_trace_rank_0");
  REQUIRE(old_key.logs.size() == 1);
  CHECK(old_key.logs[0].header.nccl_version == 21801);
}

TEST_CASE("torch schema: a newer dump reads as the newest row, an older one is refused",
          "[torch]") {
  auto newer = read_at("2.99");
  REQUIRE(newer.logs.size() == 1);
  CHECK(warnings(newer).find("newer") != std::string::npos);
  CHECK(newer.logs[0].header.nccl_version == 22105);  // read as 2.10
  CHECK(newer.logs[0].records[2].raw.seq == 1);

  auto older = read_at("1.5");
  CHECK(older.logs.empty());
  CHECK(older.error.find("older") != std::string::npos);
  CHECK(older.error.find("nccl_trace_rank_0") != std::string::npos);
}
