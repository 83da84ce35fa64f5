// The coordinator's analysis of a dump set that holds oversize files named and made like PyTorch
// dumps (a real pickle head, then a sparse 10 GiB): each is refused by its size before a byte of
// it is read, named in the analysis with a clear reason, and the good files of the set are still
// analysed. Once through assemble() (what the coordinator runs on every set), with four at once and
// the memory measured, and once through a running coordinator whose incident directory had one
// planted beside the nodes' uploads.
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "synth/synth.h"
#include "daemon/logic/assembly.h"
#include "daemon/rpc/server.h"
#include "common/files.h"
#include "fixture.h"
#include "peer.h"
#include "testing/clock.h"
#include "testing/files.h"
#include "testing/wait.h"

using namespace fr::daemon;
using fr::daemon::test::FakeLog;
using fr::daemon::test::loopback_config;
using fr::daemon::test::loopback_options;
using fr::daemon::test::Peer;
using fr::daemon::test::rss_mib;
using fr::daemon::test::TempDir;
using fr::test::kSec;
using fr::test::slurp;
using fr::test::wait_for;

namespace {

const std::string kRefusal = "larger than 1073741824 bytes";

// A file that starts as a real torch dump and is 10 GiB long, almost all of it a hole.
void plant_oversize_torch(const std::string& path) {
  const std::string head =
      slurp(std::string(FR_SOURCE_DIR) + "/tests/analyzer/torch/data/pickle/nccl_trace_rank_0");
  REQUIRE(head.size() > 16);
  std::ofstream(path, std::ios::binary) << head;
  REQUIRE(::truncate(path.c_str(), off_t{10} << 30) == 0);
}

// The analysis' skipped entry for `name`, or null.
nlohmann::json skipped(const nlohmann::json& analysis, const std::string& name) {
  for (const auto& s : analysis["inputs"]["skipped"])
    if (s.value("file", std::string()).find(name) != std::string::npos) return s;
  return nullptr;
}

}  // namespace

TEST_CASE(
    "coordinator analysis: oversize torch-named files are refused by size, the set is still analysed",
    "[daemon][hostile]") {
  TempDir d;
  AssemblyJob j;
  j.incident_id = "incident-0001";
  j.dir = d.path + "/job1/incident-0001";
  j.job_id = "job1";
  j.kind = "manual";
  j.time_ns = real_ns();
  j.incident = {{"id", j.incident_id}};
  // A good set of eight ranks where rank 5 hangs in host code, as the nodes would deliver it.
  fr::synth::Spec spec;
  std::string err;
  REQUIRE(fr::synth::add_fault("kind=hang-host,rank=5", &spec, &err));
  spec.ranks = 8;
  spec.entries = 64;
  REQUIRE(fr::synth::write_dump_set(spec, j.dir, &err));
  std::filesystem::remove(j.dir + "/manifest.json");
  for (int r = 0; r < 4; ++r)
    plant_oversize_torch(j.dir + "/nodeX-nccl_trace_rank_" + std::to_string(r));
  const double rss_before = rss_mib();
  const auto t0 = std::chrono::steady_clock::now();
  AssemblyResult res = assemble(j);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double rss_after = rss_mib();
  std::printf(
      "coordinator analysis beside four sparse 10 GiB torch-named files: %.2f s, RSS %.0f -> %.0f MiB\n",
      took, rss_before, rss_after);
  REQUIRE(res.ok);
  auto analysis = nlohmann::json::parse(slurp(j.dir + "/analysis.json"));
  for (int r = 0; r < 4; ++r) {
    const nlohmann::json s = skipped(analysis, "nodeX-nccl_trace_rank_" + std::to_string(r));
    INFO(analysis["inputs"].dump());
    REQUIRE(s.is_object());
    CHECK(s.value("error", std::string()).find(kRefusal) != std::string::npos);
  }
  CHECK(analysis["verdict"]["culprit_ranks"] == nlohmann::json({5}));
  CHECK(analysis["ranks"]["found"].size() == 8);
  // Nothing was read: a full read of one would be 1 GiB at least, of all four 40 GiB.
  CHECK(rss_after - rss_before < 256);
  CHECK(took < 60);
}

TEST_CASE(
    "coordinator: an oversize torch-named file planted in an incident's directory is named, "
    "and the nodes' dumps are analysed",
    "[daemon][hostile]") {
  TempDir dumps, logs;
  CoordinatorServer server(loopback_config(dumps.path), loopback_options());
  std::string err, id;
  REQUIRE(server.start(&err));
  ClientOptions c;
  c.address = "127.0.0.1:" + std::to_string(server.port());
  Peer a(c, "nodeA");
  Peer b(c, "nodeB");
  REQUIRE(trigger_dump(c, "x", &id, &err));
  const std::string dir = dumps.path + "/job1/" + id;
  plant_oversize_torch(dir + "/nodeA-nccl_trace_rank_0");
  auto flight_log = [&](const std::string& name, int rank) {
    FakeLog f;
    f.rank = rank;
    f.pid = 100 + rank;
    f.ops = {{FR_OP_ALLREDUCE, 1, 1, kSec, true, false}};
    fr::daemon::test::write_log(logs.path, name, f);
    return slurp(logs.path + "/" + name);
  };
  fr::v1::UploadReply reply;
  REQUIRE(fr::daemon::test::upload(c, id, "nodeA", a.key,
                                   {{"nodeA-rank0.frlog", flight_log("a.frlog", 0)}}, &reply)
              .ok());
  REQUIRE(fr::daemon::test::upload(c, id, "nodeB", b.key,
                                   {{"nodeB-rank1.frlog", flight_log("b.frlog", 1)}}, &reply)
              .ok());
  REQUIRE(wait_for([&] { return server.status()["incidents"][0]["state"] == "closed"; }, 60));
  auto analysis = nlohmann::json::parse(slurp(dir + "/analysis.json"));
  const nlohmann::json s = skipped(analysis, "nodeA-nccl_trace_rank_0");
  INFO(analysis["inputs"].dump());
  REQUIRE(s.is_object());
  CHECK(s.value("error", std::string()).find(kRefusal) != std::string::npos);
  CHECK(analysis["ranks"]["found"].size() == 2);
}
