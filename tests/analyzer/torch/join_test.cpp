// torch's view joined into fr's: a synthetic NCCL job's flight logs beside torch dumps of the same
// ranks (built here from the logs' collectives, with a Python stack per entry, as torch 2.15
// keeps them), and the real gloo dumps' stacks. The verdict on fr's communicator carries torch's
// process group and the call site; a rank torch shows issuing the op while its flight log shows
// no NCCL call is named as stuck between torch and NCCL; collectives that do not line up join
// nothing.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <string>

#include "analyzer/analyze.h"
#include "analyzer/html.h"
#include "analyzer/torch/torch_detail.h"
#include "analyzer/torch/torch_dump.h"
#include "log/reader.h"
#include "synth/synth.h"
#include "temp_dir.h"

namespace t = fr::analyzer::torch;
using nlohmann::json;

namespace {

constexpr int kRanks = 4;
constexpr int kHung = 3;

// The Python stack of the collective with sequence number `seq`: torch's frames innermost, then
// the program's line (train.py, 40 + seq, in train_step), then main.
json frames_for(int64_t seq) {
  const std::string torch_dir = "/venv/lib/python3.11/site-packages/torch/distributed/";
  return json::array(
      {{{"name", "all_reduce"}, {"filename", torch_dir + "distributed_c10d.py"}, {"line", 4174}},
       {{"name", "wrapper"}, {"filename", torch_dir + "c10d_logger.py"}, {"line", 83}},
       {{"name", "train_step"}, {"filename", "/job/train.py"}, {"line", 40 + seq}},
       {{"name", "main"}, {"filename", "/job/train.py"}, {"line", 90}}});
}

json entry(int64_t seq, uint16_t op, uint64_t count, uint8_t dtype, bool done) {
  const char* dt = t::nccl_dtype_to_torch(dtype);
  return {{"record_id", seq - 1},
          {"pg_id", 0},
          {"process_group", {"0", "default_pg"}},
          {"collective_seq_id", seq},
          {"p2p_seq_id", 0},
          {"op_id", seq},
          {"profiling_name", std::string("nccl:") + t::torch_op_name(op)},
          {"time_created_ns", 1796205600000000000ll + seq * 1000000},
          {"input_sizes", {{count}}},
          {"input_dtypes", {dt ? dt : "Float"}},
          {"output_sizes", {{count}}},
          {"output_dtypes", {dt ? dt : "Float"}},
          {"state", done ? "completed" : "scheduled"},
          {"retired", done},
          {"is_p2p", false},
          {"frames", frames_for(seq)}};
}

// The world communicator's collectives of one rank's log, (seq -> record), ascending.
std::map<uint64_t, fr_record> world_colls(const fr::log::LogFile& log) {
  uint64_t world = 0;
  for (const auto& c : log.comms)
    if (c.size == kRanks && c.parent_id == 0) world = c.id;
  std::map<uint64_t, fr_record> out;
  for (const auto& r : log.records)
    if (r.raw.comm_id == world && r.raw.seq > 0 && fr::log::op_is_collective(r.raw.op) &&
        !(r.raw.flags & FR_REC_F_CAPTURED))
      out[r.raw.seq] = r.raw;
  return out;
}

struct Job {
  fr::test::TempDir tmp;
  std::string fr_dir, torch_dir;
  uint64_t stalled = 0;  // the seq rank kHung never called
};

// A 4-rank job whose rank 3 hangs in its host code; torch's dumps of the same ranks hold the
// same collectives (`count_factor` scales their counts); `torch_ahead`: rank 3's torch dump also
// holds the collective its flight log never got; `shift`: torch's group starts counting that many
// collectives after NCCL's communicator (those are left out of torch's dumps).
void make_job(Job* j, bool torch_ahead, uint64_t count_factor, int64_t shift = 0) {
  fr::synth::Spec spec;
  spec.ranks = kRanks;
  spec.ranks_per_host = kRanks;
  spec.tp = 1;
  spec.entries = 256;
  spec.steps = 6;
  spec.threads = 1;
  std::string error;
  REQUIRE(fr::synth::add_fault("rank=3,step=4,kind=hang-host", &spec, &error));
  j->fr_dir = j->tmp.path + "/fr";
  j->torch_dir = j->tmp.path + "/torch";
  REQUIRE(fr::synth::write_dump_set(spec, j->fr_dir, &error));
  std::filesystem::create_directories(j->torch_dir);
  const auto logs = fr::synth::make_logs(spec);
  REQUIRE(logs.size() == size_t(kRanks));
  const auto reference = world_colls(logs[0]);
  const auto hung = world_colls(logs[kHung]);
  REQUIRE(!hung.empty());
  j->stalled = hung.rbegin()->first + 1;
  REQUIRE(reference.count(j->stalled));
  for (int r = 0; r < kRanks; ++r) {
    json d = {
        {"version", "2.10"},
        {"comm_lib_version", "2.28.9"},
        {"pg_config", {{"0", {{"name", "0"}, {"desc", "default_pg"}, {"ranks", "[0, 1, 2, 3]"}}}}},
        {"entries", json::array()}};
    auto colls = world_colls(logs[size_t(r)]);
    if (r == kHung && torch_ahead) colls[j->stalled] = reference.at(j->stalled);
    for (const auto& [seq, rec] : colls)
      if (int64_t(seq) > shift)
        d["entries"].push_back(entry(int64_t(seq) - shift, rec.op, rec.count * count_factor,
                                     rec.dtype, seq < j->stalled));
    std::ofstream(j->torch_dir + "/nccl_trace_rank_" + std::to_string(r)) << d.dump();
  }
}

json analyze(const Job& j) {
  std::string fatal;
  json a = fr::analyzer::analyze_paths({j.fr_dir, j.torch_dir}, {}, &fatal);
  INFO(fatal);
  REQUIRE(a.is_object());
  return a;
}

}  // namespace

TEST_CASE("torch join: fr's verdict carries torch's process group and the call site",
          "[torch][join]") {
  Job j;
  make_job(&j, false, 1);
  json a = analyze(j);
  const json& v = a["verdict"];
  INFO(v.dump(1).substr(0, 3000));
  REQUIRE(v["kind"] == "not_entered");
  CHECK(v["culprit_ranks"] == json::array({kHung}));
  CHECK(v["seq"] == j.stalled);
  REQUIRE(v.contains("torch"));
  CHECK(v["torch"]["joined"] == true);
  CHECK(v["torch"]["pg_name"] == "0");
  CHECK(v["torch"]["pg_desc"] == "default_pg");
  CHECK(v["torch"]["seq"] == j.stalled);
  CHECK(v["torch"]["call_site"]["file"] == "/job/train.py");
  CHECK(v["torch"]["call_site"]["function"] == "train_step");
  CHECK(v["torch"]["call_site"]["line"] == 40 + int64_t(j.stalled));
  CHECK(v["torch"]["frames"].size() == 4);
  CHECK_FALSE(v["torch"].contains("issued_in_torch_only"));
  const std::string line = "train.py:" + std::to_string(40 + j.stalled) + " in train_step";
  CHECK(v["summary"].get<std::string>().find("torch process group default_pg") !=
        std::string::npos);
  CHECK(v["summary"].get<std::string>().find(line) != std::string::npos);
  // The join itself, listed once per communicator.
  REQUIRE(a["torch_joins"].size() == 1);
  CHECK(a["torch_joins"][0]["comm"] == v["comm"]["id"]);
  CHECK(a["torch_joins"][0]["seq_shift"] == 0);
  // The text view and the page say it too.
  const auto doc = fr::analyzer::Analysis::from_json(a);
  const std::string text = fr::analyzer::render_text(doc, false);
  CHECK(text.find("torch: process group default_pg (name 0)") != std::string::npos);
  CHECK(text.find("called at " + line) != std::string::npos);
}

TEST_CASE("torch join: a rank torch shows issuing the op without a NCCL call is named",
          "[torch][join]") {
  Job j;
  make_job(&j, true, 1);
  json a = analyze(j);
  const json& v = a["verdict"];
  INFO(v.dump(1).substr(0, 3000));
  REQUIRE(v["kind"] == "not_entered");
  REQUIRE(v.contains("torch"));
  CHECK(v["torch"]["issued_in_torch_only"] == json::array({kHung}));
  // The call site is the hung rank's own line: where it issued the collective.
  CHECK(v["torch"]["site_rank"] == kHung);
  CHECK(v["summary"].get<std::string>().find("stuck between torch and NCCL") != std::string::npos);
  const std::string text = fr::analyzer::render_text(fr::analyzer::Analysis::from_json(a), false);
  CHECK(text.find("torch: rank 3 issued it in torch, but no NCCL call for it came") !=
        std::string::npos);
  const std::string page = fr::analyzer::render_incident_html(a, {});
  CHECK(page.find("<p class=\"torch\">torch: rank 3 issued it in torch") != std::string::npos);
}

TEST_CASE("torch join: torch's numbers shifted from NCCL's still join", "[torch][join]") {
  Job j;
  make_job(&j, true, 1, 2);
  json a = analyze(j);
  const json& v = a["verdict"];
  INFO(v.dump(1).substr(0, 3000));
  REQUIRE(v.contains("torch"));
  CHECK(v["seq"] == j.stalled);
  CHECK(v["torch"]["seq"] == int64_t(j.stalled) - 2);
  CHECK(v["torch"]["issued_in_torch_only"] == json::array({kHung}));
  // The stack torch recorded with its own #(stalled - 2).
  CHECK(v["torch"]["call_site"]["line"] == 40 + int64_t(j.stalled) - 2);
  REQUIRE(a["torch_joins"].size() == 1);
  CHECK(a["torch_joins"][0]["seq_shift"] == 2);
  const std::string text = fr::analyzer::render_text(fr::analyzer::Analysis::from_json(a), false);
  CHECK(text.find("collective #" + std::to_string(j.stalled - 2) + " (fr's #" +
                  std::to_string(j.stalled) + ")") != std::string::npos);
}

TEST_CASE("torch join: collectives that do not line up join nothing", "[torch][join]") {
  Job j;
  make_job(&j, true, 2);  // every count torch records differs from fr's
  json a = analyze(j);
  CHECK(a["verdict"]["kind"] == "not_entered");
  CHECK_FALSE(a["verdict"].contains("torch"));
  CHECK(a["torch_joins"].empty());
}

TEST_CASE("torch call sites: the innermost frame outside torch", "[torch][join]") {
  using F = t::TorchFrame;
  const std::string pkg = "/usr/lib/python3/dist-packages/torch/";
  CHECK(t::torch_user_frame({F{"all_reduce", pkg + "distributed/distributed_c10d.py", 1},
                             F{"wrapper", pkg + "distributed/c10d_logger.py", 2},
                             F{"step", "/home/u/torch/train.py", 3}}) == 2);
  // A source checkout: torch's root is told by its distributed package.
  CHECK(t::torch_user_frame({F{"all_reduce", "/src/pytorch/torch/distributed/c10d.py", 1},
                             F{"forward", "/src/pytorch/torch/nn/parallel/ddp.py", 2},
                             F{"<module>", "<frozen runpy>", 3}, F{"main", "/src/job.py", 4}}) ==
        3);
  CHECK(t::torch_user_frame({F{"all_reduce", pkg + "distributed/distributed_c10d.py", 1}}) == -1);
  CHECK(t::torch_user_frame({}) == -1);
}

TEST_CASE("torch call sites: read from torch 2.15's own pickle dumps (gloo)", "[torch][join]") {
  // data/torch-2.15-gloo/hang/bytes: _dump_fr_trace()'s pickle, with stacks; rank 3 stays in
  // Python while the others wait in all_reduce #11, called at fr_torch_job.py:95 in rank_main.
  const std::string dir =
      std::string(FR_SOURCE_DIR) + "/tests/analyzer/torch/data/torch-2.15-gloo/hang/bytes";
  t::TorchCallSite site;
  std::string err;
  REQUIRE(t::read_torch_call_site(dir + "/fr_rank_0", {0, 0}, "0", 11, false, &site, &err));
  REQUIRE(site.user == 2);
  CHECK(site.frames[0].function == "all_reduce");
  CHECK(site.frames[2].function == "rank_main");
  CHECK(site.frames[2].line == 95);
  CHECK(site.frames[2].file.find("fr_torch_job.py") != std::string::npos);
  CHECK_FALSE(t::read_torch_call_site(dir + "/fr_rank_0", {0, 0}, "0", 99, false, &site, &err));
  CHECK(err == "no such entry");
  CHECK_FALSE(t::read_torch_call_site(dir + "/none", {0, 0}, "0", 11, false, &site, &err));

  std::string fatal;
  json a = fr::analyzer::analyze_paths({dir}, {}, &fatal);
  REQUIRE(a.is_object());
  const json& v = a["verdict"];
  CHECK(v["culprit_ranks"] == json::array({3}));
  REQUIRE(v.contains("torch"));
  CHECK(v["torch"]["joined"] == false);
  CHECK(v["torch"]["pg_desc"] == "default_pg");
  CHECK(v["torch"]["call_site"]["function"] == "rank_main");
  CHECK(v["torch"]["call_site"]["line"] == 95);
  CHECK(v["summary"].get<std::string>().find("called at fr_torch_job.py:95 in rank_main") !=
        std::string::npos);
  // torch's JSON form keeps no stacks: the same verdict, without a call site.
  const std::string json_dir = dir.substr(0, dir.size() - 5) + "json";
  json b = fr::analyzer::analyze_paths({json_dir}, {}, &fatal);
  REQUIRE(b.is_object());
  REQUIRE(b["verdict"].contains("torch"));
  CHECK_FALSE(b["verdict"]["torch"].contains("call_site"));
}

TEST_CASE("torch call sites: frames are bounded, and read from the file read before",
          "[torch][join]") {
  fr::test::TempDir tmp;
  json frames = json::array();
  for (int i = 0; i < 500; ++i)
    frames.push_back({{"name", std::string(2000, 'f')}, {"filename", "/a.py"}, {"line", i}});
  json d = {{"version", "2.10"},
            {"pg_config", {{"0", {{"name", "0"}, {"desc", "default_pg"}, {"ranks", "[0]"}}}}},
            {"entries", json::array({entry(1, FR_OP_ALLREDUCE, 8, 7, false)})}};
  d["entries"][0]["frames"] = frames;
  std::ofstream(tmp.path + "/nccl_trace_rank_0") << d.dump();
  t::TorchCallSite site;
  std::string err;
  REQUIRE(
      t::read_torch_call_site(tmp.path + "/nccl_trace_rank_0", {0, 0}, "0", 1, false, &site, &err));
  CHECK(site.frames.size() == t::kMaxTorchFrames);
  CHECK(site.frames[0].function.size() == t::kMaxFrameText);
  CHECK(site.user == 0);
  // Another file than the one read before (its device and inode differ) is not read.
  CHECK_FALSE(
      t::read_torch_call_site(tmp.path + "/nccl_trace_rank_0", {1, 1}, "0", 1, false, &site, &err));
  CHECK(err.find("not the file read before") != std::string::npos);
}
