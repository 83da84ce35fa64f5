// The fail-slow finding (analyzer/slow.cpp) on synthetic jobs whose arrival times are reshaped
// step by step: a straggler from some step on, two stragglers, a straggler that only started
// recently, and healthy jobs with heavy jitter and checkpoint pauses, which must give none.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "analyzer/analyze.h"
#include "log/snapshot.h"
#include "synth/synth.h"
#include "temp_dir.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr int kRanks = 8;
constexpr int kSteps = 60;
constexpr int64_t kStepNs = 10'000'000;  // the synthetic job's step (sim/synth)
constexpr int64_t kMs = 1'000'000;

// Extra host time of rank r before step k, in ns.
using Extra = std::function<int64_t(int r, int k)>;

// A healthy synthetic job whose calls are moved as a job with `extra` would run them: rank r
// arrives extra(r, k) late at step k, and every later step starts after the slowest rank of the
// earlier ones (the job waits for it at each collective).
json analyze_reshaped(const Extra& extra) {
  fr::synth::Spec s;
  s.ranks = kRanks;
  s.entries = 4096;
  s.steps = kSteps;
  s.wrap_jitter = false;
  std::vector<fr::log::LogFile> logs = fr::synth::make_logs(s);
  std::vector<int64_t> shift(kSteps + 2, 0);
  for (int k = 0; k <= kSteps; ++k) {
    int64_t worst = 0;
    for (int r = 0; r < kRanks; ++r) worst = std::max(worst, extra(r, k));
    shift[k + 1] = shift[k] + worst;
  }
  for (auto& log : logs) {
    const int r = log.header.global_rank;
    for (auto& rec : log.records) {
      const int64_t since = int64_t(rec.raw.call_ns) - int64_t(s.base_ns);
      const int k = std::clamp<int>(int(since / kStepNs), 0, kSteps);
      rec.raw.call_ns = uint64_t(int64_t(rec.raw.call_ns) + shift[k] + extra(r, k));
    }
  }
  fr::test::TempDir t;
  const std::string dir = t.sub("set");
  fs::create_directories(dir);
  std::vector<fr::log::SnapshotProcess> procs;
  for (const auto& log : logs) {
    fr::log::SnapshotProcess p;
    p.rank = log.header.global_rank;
    p.world_size = log.header.world_size;
    p.pid = log.header.pid;
    p.host = log.hostname();
    p.job_id = log.job_id();
    p.file = "rank" + std::to_string(p.rank) + ".frlog";
    std::string bytes = fr::log::encode_snapshot(log, s.base_ns + 3'600'000'000'000ull);
    std::ofstream(fs::path(dir) / p.file, std::ios::binary)
        .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    procs.push_back(p);
  }
  std::string err;
  REQUIRE(
      fr::log::write_manifest(dir, "synthetic", s.base_ns, procs, {}, {}, "test", kRanks, &err));
  json doc = fr::analyzer::analyze_paths({dir}, {}, &err);
  INFO(err);
  REQUIRE(doc.is_object());
  return doc;
}

std::vector<json> slow_findings(const json& doc) {
  std::vector<json> out;
  for (const auto& f : doc["findings"])
    if (f["kind"] == "slow") out.push_back(f);
  return out;
}

// A fixed hash: the same draw every run, independent between ranks and steps.
uint64_t mix(uint64_t x) {
  x *= 0x9E3779B97F4A7C15ull;
  x ^= x >> 29;
  x *= 0xBF58476D1CE4E5B9ull;
  return x ^ (x >> 32);
}

}  // namespace

TEST_CASE("slow finding: a rank late at every step from step 10 is named, with cause and cost",
          "[analyzer][slow]") {
  for (int culprit : {0, 5, 7}) {
    json doc =
        analyze_reshaped([&](int r, int k) { return r == culprit && k >= 10 ? 30 * kMs : 0; });
    INFO(doc["findings"].dump());
    CHECK(doc["verdict"]["kind"] == "no_hang");  // slowness is no hang: a finding beside it
    auto found = slow_findings(doc);
    REQUIRE(found.size() == 1);
    const json& f = found[0];
    CHECK(f["culprit_ranks"] == json::array({culprit}));
    CHECK(f["slow"]["cause"] == "host");
    CHECK(f["slow"]["late_share"].get<double>() >= 0.75);
    const int64_t late = f["slow"]["value_ns"].get<int64_t>();
    CHECK(late > 25 * kMs);
    CHECK(late < 35 * kMs);
    CHECK(f["slow"]["others_ns"].get<int64_t>() < kMs);
    // A step of the 10 ms job takes about 40 ms with it: about 4 times, three quarters lost.
    CHECK(f["slow"]["factor"].get<double>() > 3);
    CHECK(f["slow"]["factor"].get<double>() < 5);
    CHECK(f["slow"]["loss_percent"].get<double>() > 65);
    CHECK(f["summary"].get<std::string>().find("rank " + std::to_string(culprit) +
                                               " arrives last at") != std::string::npos);
    CHECK(doc["verdict"]["summary"].get<std::string>().find("slow host") != std::string::npos);
    // The skew finding stays as it was.
    CHECK(std::any_of(doc["findings"].begin(), doc["findings"].end(),
                      [](const json& x) { return x["kind"] == "skew"; }));
  }
}

TEST_CASE("slow finding: two stragglers are both named, and a recent one is found",
          "[analyzer][slow]") {
  json two = analyze_reshaped(
      [](int r, int k) { return (r == 2 || r == 6) && k >= 5 ? (r == 2 ? 20 : 25) * kMs : 0; });
  auto found = slow_findings(two);
  REQUIRE(found.size() == 2);
  CHECK(found[0]["culprit_ranks"] == json::array({2}));
  CHECK(found[1]["culprit_ranks"] == json::array({6}));

  // From step 40 of 60: a third of the job, but all of its latest collectives.
  json recent = analyze_reshaped([](int r, int k) { return r == 3 && k >= 40 ? 15 * kMs : 0; });
  found = slow_findings(recent);
  REQUIRE(found.size() == 1);
  CHECK(found[0]["culprit_ranks"] == json::array({3}));
}

TEST_CASE("slow finding: none on jittery jobs, checkpoint pauses or a rank late now and then",
          "[analyzer][slow]") {
  // Heavy jitter: one step in ten of each rank takes up to 20 times longer.
  json jitter = analyze_reshaped([](int r, int k) {
    const uint64_t h = mix(uint64_t(r) << 32 | uint64_t(k));
    return h % 10 == 0 ? int64_t((h >> 8) % 190) * kMs : int64_t(h >> 40) % (kMs / 2);
  });
  INFO(jitter["findings"].dump());
  CHECK(slow_findings(jitter).empty());
  // Checkpoints: every rank pauses 500 ms every 15 steps, together.
  json paused = analyze_reshaped([](int, int k) { return k % 15 == 14 ? 500 * kMs : 0; });
  CHECK(slow_findings(paused).empty());
  CHECK(paused["findings"].empty());
  // One rank late at every other step: not consistent enough to blame.
  json sometimes = analyze_reshaped([](int r, int k) { return r == 1 && k % 2 ? 30 * kMs : 0; });
  CHECK(slow_findings(sometimes).empty());
  // Late by a fraction of a millisecond: noise, whatever its consistency.
  json slight = analyze_reshaped([](int r, int) { return r == 4 ? kMs / 2 : 0; });
  CHECK(slow_findings(slight).empty());
}

TEST_CASE("slow finding: a synthetic gpu-slow rank is named with cause gpu from its GPU health",
          "[analyzer][slow]") {
  fr::test::TempDir t;
  fr::synth::Spec s;
  s.ranks = 8;
  s.entries = 512;
  std::string err;
  REQUIRE(fr::synth::add_fault("rank=6,step=10,kind=gpu-slow,factor=3", &s, &err));
  REQUIRE(fr::synth::write_dump_set(s, t.sub("set"), &err));
  REQUIRE(fs::exists(t.sub("set") + "/node1.gpu.json"));
  json doc = fr::analyzer::analyze_paths({t.sub("set")}, {}, &err);
  REQUIRE(doc.is_object());
  auto found = slow_findings(doc);
  REQUIRE(found.size() == 1);
  CHECK(found[0]["culprit_ranks"] == json::array({6}));
  CHECK(found[0]["slow"]["cause"] == "gpu");
  CHECK(found[0]["slow"]["nvml_throttle"] == json::array({"HwThermalSlowdown"}));
  // (3 - 1) x 2 ms of GPU work per step that its host waits for.
  CHECK(found[0]["slow"]["value_ns"].get<int64_t>() > 3 * kMs);
  // The same lateness without a throttled GPU beside it: its host.
  fr::synth::Spec h;
  h.ranks = 8;
  h.entries = 512;
  REQUIRE(fr::synth::add_fault("rank=6,step=10,kind=slow,ms=4", &h, &err));
  REQUIRE(fr::synth::write_dump_set(h, t.sub("host"), &err));
  found = slow_findings(fr::analyzer::analyze_paths({t.sub("host")}, {}, &err));
  REQUIRE(found.size() == 1);
  CHECK(found[0]["slow"]["cause"] == "host");
}

TEST_CASE("slow finding: half of the ranks late together is a shift of the job, no straggler",
          "[analyzer][slow]") {
  json doc = analyze_reshaped([](int r, int k) { return r < 4 && k >= 5 ? 20 * kMs : 0; });
  CHECK(slow_findings(doc).empty());
}
