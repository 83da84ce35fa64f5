// The windowed load (LoadMode::kWindow, analyzer/window.cpp) against the full one: on wrapped
// rings with every fault the synthetic job plants, the analysis from the recent records and the
// older records' digest is the same document as the one from every record, the window really
// leaves records out, and the cases it cannot decide (a mismatch) are made again from every record.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "analyzer/analyze.h"
#include "analyzer/model.h"
#include "synth/synth.h"
#include "temp_dir.h"

namespace fs = std::filesystem;
using fr::analyzer::LoadMode;
using fr::synth::Fault;
using fr::synth::Spec;

namespace {

using fr::test::TempDir;

// A job of 16 ranks whose rings (400 records) wrapped several times.
Spec wrapped(const std::string& fault, int tp) {
  Spec s;
  s.ranks = 16;
  s.entries = 400;
  s.tp = tp;
  s.steps = 600;
  if (!fault.empty()) {
    Fault f;
    std::string err;
    REQUIRE(fr::synth::parse_fault(fault, &f, &err));
    s.faults.push_back(f);
  }
  return s;
}

size_t dropped(const fr::analyzer::Model& m) {
  size_t n = 0;
  for (const auto& p : m.procs)
    for (const auto& pc : p.comms) n += pc.dropped;
  return n;
}

}  // namespace

TEST_CASE("window: the same analysis as from every record", "[analyzer][window]") {
  const char* faults[] = {"",
                          "kind=hang-host,rank=5",
                          "kind=gpu-stall,rank=3",
                          "kind=skip,rank=0",
                          "kind=crash,rank=9",
                          "kind=p2p-skip,rank=4",
                          "kind=slow,rank=2,ms=5",
                          "kind=node-lost,rank=6",
                          "kind=mismatch-count,rank=7",
                          "kind=mismatch-op,rank=1,step=500"};
  for (int tp : {1, 4}) {
    for (const char* fault : faults) {
      INFO("fault '" << fault << "', tp " << tp);
      TempDir t;
      std::string err;
      REQUIRE(fr::synth::write_dump_set(wrapped(fault, tp), t.path, &err));
      const fr::analyzer::Model full = fr::analyzer::load_model({t.path}, 2, LoadMode::kFull);
      const fr::analyzer::Model windowed = fr::analyzer::load_model({t.path}, 2, LoadMode::kWindow);
      CHECK_FALSE(full.windowed);
      CHECK(dropped(full) == 0);
      // A crashed rank's ring may not have wrapped; the others' did.
      CHECK(windowed.windowed);
      CHECK(dropped(windowed) > 0);
      const auto a = fr::analyzer::analyze_model(full, {}).to_json();
      const auto b = fr::analyzer::analyze_model(windowed, {}).to_json();
      CHECK(a.dump() == b.dump());
    }
  }
}

TEST_CASE("window: a rank's digest keeps every collective it left out", "[analyzer][window]") {
  TempDir t;
  std::string err;
  REQUIRE(fr::synth::write_dump_set(wrapped("kind=hang-host,rank=5", 1), t.path, &err));
  const fr::analyzer::Model full = fr::analyzer::load_model({t.path}, 1, LoadMode::kFull);
  const fr::analyzer::Model windowed = fr::analyzer::load_model({t.path}, 1, LoadMode::kWindow);
  REQUIRE(full.procs.size() == windowed.procs.size());
  for (size_t i = 0; i < full.procs.size(); ++i) {
    const auto& pf = full.procs[i];
    const auto& pw = windowed.procs[i];
    REQUIRE(pf.comms.size() == pw.comms.size());
    CHECK(pw.ops.size() < pf.ops.size() / 2);
    for (size_t c = 0; c < pf.comms.size(); ++c) {
      const auto& hf = pf.comms[c].history;
      const auto& hw = pw.comms[c].history;
      CHECK(hf.size() == hw.size());
      CHECK(hf.call_ns == hw.call_ns);
      CHECK(pw.comms[c].ops_total == pf.comms[c].ops_end - pf.comms[c].ops_begin);
      // The window is the newest records, unchanged.
      const uint32_t kept = pw.comms[c].ops_end - pw.comms[c].ops_begin;
      for (uint32_t k = 0; k < kept; ++k) {
        const auto& of = pf.ops[pf.comms[c].ops_end - kept + k];
        const auto& ow = pw.ops[pw.comms[c].ops_begin + k];
        CHECK((of.seq == ow.seq && of.op == ow.op && of.call_ns == ow.call_ns &&
               of.gpu_state == ow.gpu_state));
      }
    }
  }
}

TEST_CASE("window: a history's range is what visiting every entry finds", "[analyzer]") {
  using fr::analyzer::CollHistory;
  constexpr uint32_t kNo = CollHistory::kNoSig;
  auto visited = [](const CollHistory& h, uint64_t* lo, uint64_t* hi, size_t* n) {
    *lo = UINT64_MAX, *hi = 0, *n = 0;
    h.for_each([&](uint64_t seq, uint64_t, uint32_t) {
      *lo = std::min(*lo, seq), *hi = std::max(*hi, seq), ++*n;
    });
    return *n > 0;
  };
  std::vector<CollHistory> cases(5);
  cases[0].base = 100;  // dense, holes at both ends and inside
  cases[0].sig = {kNo, kNo, 3, kNo, 4, 4, kNo};
  cases[1].base = 7;  // dense, no holes
  cases[1].sig = {0, 1, 2};
  cases[2].base = 5;  // dense, holes only
  cases[2].sig = {kNo, kNo};
  cases[3].seqs = {40, 12, 90, 13};  // explicit, not ascending, one entry without a signature
  cases[3].sig = {1, 2, kNo, 1};
  // cases[4]: empty
  for (auto& h : cases) h.call_ns.assign(h.sig.size(), 0);
  for (size_t i = 0; i < cases.size(); ++i) {
    INFO("case " << i);
    uint64_t lo = 0, hi = 0, lo2 = 0, hi2 = 0;
    size_t n = 0, n2 = 0;
    const bool any = cases[i].range(&lo, &hi, &n);
    REQUIRE(any == visited(cases[i], &lo2, &hi2, &n2));
    if (!any) continue;
    CHECK(lo == lo2);
    CHECK(hi == hi2);
    CHECK(n == n2);
  }
  uint64_t lo = 0, hi = 0;
  size_t n = 0;
  REQUIRE(cases[0].range(&lo, &hi, &n));
  CHECK(lo == 102);
  CHECK(hi == 105);
  CHECK(n == 3);
  REQUIRE(cases[3].range(&lo, &hi, &n));
  CHECK(lo == 12);
  CHECK(hi == 40);
  CHECK(n == 3);
}
