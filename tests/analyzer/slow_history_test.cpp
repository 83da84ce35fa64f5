// The post-mortem fail-slow finding from the nodes' heartbeat histories (<node>.slow_history.json,
// analyzer/slow_history.cpp): synthetic dump sets of a healthy job with a history beside them in
// which one GPU's kernels are slow, one link's sender is on the wire while the others wait, or a
// late rank's GPU is in flight as often as its peers'; healthy histories give nothing; corrupt,
// truncated and hostile history files are named and the rest of the dump set is analysed.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <string>

#include "analyzer/analyze.h"
#include "fr/flight_log.h"
#include "log/slow_history.h"
#include "synth/synth.h"
#include "temp_dir.h"

namespace fs = std::filesystem;
using fr::log::NodeSlowHistory;
using nlohmann::json;

namespace {

constexpr int kRanks = 8;
constexpr int kSamples = 60;
constexpr int64_t kMs = 1'000'000;

// What rank r's summary says at sample k: kernel time of its collective (0 none), whether an op
// was in flight, and its send slot to r + 1 on channel 0 (step time, state).
struct Say {
  int64_t gpu_ns = 0;
  bool busy = false;
  int64_t step_ns = 0;
  uint32_t state = 0;
  // The node's sampled progress markers at its collective, after the sample's time: when its GPU
  // reached it and finished it (0: not sampled). Reported in the next sample, as a node does for
  // a collective its GPU had not finished at the heartbeat.
  int64_t reach_after_ns = 0, done_after_ns = 0;
};
using Script = std::function<Say(int r, int k)>;

uint64_t mix(uint64_t x) {
  x *= 0x9E3779B97F4A7C15ull;
  x ^= x >> 29;
  x *= 0xBF58476D1CE4E5B9ull;
  return x ^ (x >> 32);
}

fr::synth::Spec spec_of(const std::string& fault) {
  fr::synth::Spec s;
  s.ranks = kRanks;
  s.entries = 512;
  std::string err;
  if (!fault.empty()) REQUIRE(fr::synth::add_fault(fault, &s, &err));
  return s;
}

// The communicator that the first and the last rank's records share: the world.
uint64_t world_id(const fr::synth::Spec& s) {
  const auto logs = fr::synth::make_logs(s);
  std::set<uint64_t> first;
  for (const auto& r : logs.front().records) first.insert(r.raw.comm_id);
  for (const auto& r : logs.back().records)
    if (r.raw.comm_id != 0 && first.count(r.raw.comm_id)) return r.raw.comm_id;
  FAIL("no world communicator");
  return 0;
}

// A node's history: ranks [first, first + 4), each sample one new collective and its ring slots.
NodeSlowHistory history_of(int node, uint64_t comm, const Script& say) {
  NodeSlowHistory h;
  h.node = "node" + std::to_string(node);
  for (int r = node * 4; r < node * 4 + 4; ++r) {
    fr::log::ProcessHistory p;
    p.rank = r;
    p.pid = 1000 + r;
    p.log = "rank" + std::to_string(r) + ".frlog";
    for (int k = 0; k < kSamples; ++k) {
      const Say s = say(r, k);
      fr::log::HistorySample x;
      x.time_ns = 1796205600000000000 + int64_t(k) * 1000 * kMs;
      fr::log::HistoryComm c;
      c.id = comm;
      c.rank = r;
      c.size = kRanks;
      c.busy = s.busy;
      c.colls.push_back({uint64_t(1000 + k), FR_OP_ALLREDUCE, x.time_ns, s.gpu_ns});
      if (k > 0) {
        const Say before = say(r, k - 1);
        const int64_t t = x.time_ns - 1000 * kMs;
        if (before.reach_after_ns > 0)
          c.marks.push_back(
              {uint64_t(1000 + k - 1), t + before.reach_after_ns, t + before.done_after_ns});
      }
      x.comms.push_back(c);
      if (s.step_ns > 0) {
        x.links.push_back(
            {comm, 0, (r + 1) % kRanks, true, uint64_t(k + 1), 8, s.step_ns, s.state});
        x.links.push_back(
            {comm, 0, (r + kRanks - 1) % kRanks, false, uint64_t(k + 1), 8, s.step_ns, 0});
      }
      p.samples.push_back(std::move(x));
    }
    h.processes.push_back(std::move(p));
  }
  return h;
}

// The dump set of `fault` (none: healthy) with both nodes' histories beside it; its analysis.
json analyze_with(const std::string& fault, const Script& say,
                  const std::function<void(const std::string&)>& spoil = {}) {
  fr::test::TempDir t;
  const fr::synth::Spec s = spec_of(fault);
  const std::string dir = t.sub("set");
  std::string err;
  REQUIRE(fr::synth::write_dump_set(s, dir, &err));
  const uint64_t comm = world_id(s);
  for (int n = 0; n < 2; ++n)
    std::ofstream(dir + "/node" + std::to_string(n) + fr::log::kSlowHistorySuffix)
        << fr::log::slow_history_to_text(history_of(n, comm, say));
  if (spoil) spoil(dir);
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

// Kernel times of 4 ms, rank `slow` `factor` times longer, each with a few percent of noise.
Script gpu_script(int slow, double factor) {
  return [=](int r, int k) {
    const double noise = 1 + double(mix(uint64_t(r) << 32 | uint64_t(k)) % 100) / 1000;
    Say s;
    s.gpu_ns = int64_t(4 * kMs * noise * (r == slow ? factor : 1));
    return s;
  };
}

// A ring whose steps all last 10 ms (lockstep); the sender `slow` is on the wire (SEND_WAIT) at
// most samples, the sender `fed` (if any) at 30%, the others at one in twenty and waiting for
// credit otherwise.
Script ring_script(int slow, int fed = -1) {
  return [=](int r, int k) {
    Say s;
    s.step_ns = 10 * kMs;
    const bool wire = r == slow  ? k % 5 != 0
                      : r == fed ? k % 10 < 3
                                 : mix(uint64_t(r) << 32 | uint64_t(k)) % 20 == 0;
    s.state = wire ? FR_CHANST_SEND_WAIT : FR_CHANST_SEND_PEER_WAIT;
    return s;
  };
}

// No kernel times: the nodes' sampled markers. Each GPU reaches the collective within 0.5 ms of
// the others (rank `late_gpu` `late_ms` after them) and works on it `own_ms` (a few percent of
// noise) after the last one reached it; rank `slow` `factor` times as long.
Script sampled_script(int slow, double factor, int late_gpu = -1, double late_ms = 0,
                      double own_ms = 4) {
  return [=](int r, int k) {
    const uint64_t h = mix(uint64_t(r) << 32 | uint64_t(k) | 1ull << 20);
    Say s;
    s.busy = k % 10 < 7;  // the counters alone would blame a late rank's GPU
    int64_t last = 0;
    for (int q = 0; q < kRanks; ++q) {
      const uint64_t hq = mix(uint64_t(q) << 32 | uint64_t(k) | 1ull << 20);
      last =
          std::max(last, int64_t(hq % 500) * 1000 + (q == late_gpu ? int64_t(late_ms * kMs) : 0));
    }
    s.reach_after_ns = 1 + int64_t(h % 500) * 1000 + (r == late_gpu ? int64_t(late_ms * kMs) : 0);
    const double noise = 1 + double(h % 50) / 1000;
    s.done_after_ns = last + int64_t(own_ms * kMs * noise * (r == slow ? factor : 1));
    return s;
  };
}

}  // namespace

TEST_CASE("slow history: a GPU whose kernels take 3 times its peers' is named with cause gpu",
          "[analyzer][slow]") {
  json doc = analyze_with("", gpu_script(6, 3));
  INFO(doc["findings"].dump());
  CHECK(doc["verdict"]["kind"] == "no_hang");
  auto found = slow_findings(doc);
  REQUIRE(found.size() == 1);
  CHECK(found[0]["culprit_ranks"] == json::array({6}));
  CHECK(found[0]["slow"]["cause"] == "gpu");
  CHECK(found[0]["slow"]["factor"].get<double>() > 2.7);
  CHECK(found[0]["slow"]["factor"].get<double>() < 3.3);
  CHECK(found[0]["slow"]["others_ns"].get<int64_t>() < 5 * kMs);
  CHECK(found[0]["slow"]["source"] == "heartbeat_history");
  CHECK(found[0]["summary"].get<std::string>().find("rank 6's GPU takes 3.0x") !=
        std::string::npos);
}

TEST_CASE("slow history: the link whose sender is on the wire while the others wait is named",
          "[analyzer][slow]") {
  json doc = analyze_with("", ring_script(2));
  INFO(doc["findings"].dump());
  auto found = slow_findings(doc);
  REQUIRE(found.size() == 1);
  CHECK(found[0]["slow"]["cause"] == "link");
  CHECK(found[0]["culprit_ranks"] == json::array({2, 3}));
  CHECK(found[0]["where"]["waiting_rank"] == 3);
  CHECK(found[0]["where"]["peer_rank"] == 2);
  CHECK(found[0]["where"]["channel"] == 0);
  CHECK(found[0]["slow"]["factor"].get<double>() > 3);
  CHECK(found[0]["summary"].get<std::string>().find("rank 2 -> rank 3 steps take") !=
        std::string::npos);

  // Without the senders' states, the step times alone: 2 -> 3 takes 10 times the others.
  json steps = analyze_with("", [](int r, int) {
    Say s;
    s.step_ns = r == 2 ? 10 * kMs : kMs;
    return s;
  });
  found = slow_findings(steps);
  REQUIRE(found.size() == 1);
  CHECK(found[0]["where"]["waiting_rank"] == 3);
  CHECK(found[0]["where"]["peer_rank"] == 2);
  CHECK(found[0]["slow"]["factor"].get<double>() > 5);
}

TEST_CASE("slow history: absurd link step times are no times, and the largest saturate",
          "[analyzer][slow]") {
  // Rank 2's steps last 2^62 ns, the longest a time can be, over 2^32 - 1 steps an op: its link
  // is named, and what it costs saturates rather than overflowing. Rank 5's steps are past any
  // time (read as none: its links are not judged), rank 0's negative.
  json doc = analyze_with(
      "",
      [](int r, int) {
        Say s;
        s.step_ns = r == 2 ? int64_t(1) << 62 : r == 5 ? INT64_MAX : kMs;
        return s;
      },
      [](const std::string& dir) {
        for (const auto& e : fs::directory_iterator(dir)) {
          const std::string f = e.path().string();
          if (f.find(fr::log::kSlowHistorySuffix) == std::string::npos) continue;
          std::ifstream in(f);
          json j = json::parse(in);
          for (auto& p : j["processes"])
            for (auto& smp : p["samples"])
              for (auto& l : smp["links"]) {
                l[5] = UINT32_MAX;
                if (p["rank"] == 0) l[6] = -kMs;
              }
          std::ofstream(f) << j.dump();
        }
      });
  INFO(doc["findings"].dump() << doc["inputs"].dump());
  auto found = slow_findings(doc);
  REQUIRE(found.size() == 1);
  CHECK(found[0]["where"]["waiting_rank"] == 3);
  CHECK(found[0]["where"]["peer_rank"] == 2);
  CHECK(found[0]["slow"]["factor"].get<double>() > 1e6);
}

TEST_CASE("slow history: a link into a slow link's sending node, waiting for it, is not named",
          "[analyzer][slow]") {
  // 3 -> 4 (node 0 to node 1) is slow: its sender is on the wire at 80% of the samples. Rank 3
  // forwards late, so node 0 falls behind receiving and the sender of 7 -> 0, the link into node
  // 0, waits on the wire at 30%: as the live detector, it is not a second slow link.
  json doc = analyze_with("", ring_script(3, 7));
  INFO(doc["findings"].dump());
  auto found = slow_findings(doc);
  REQUIRE(found.size() == 1);
  CHECK(found[0]["where"]["peer_rank"] == 3);
  CHECK(found[0]["where"]["waiting_rank"] == 4);
  // On its own, on the wire at 30% while the others are at 5%, 7 -> 0 is named.
  json alone = analyze_with("", ring_script(-1, 7));
  found = slow_findings(alone);
  INFO(alone["findings"].dump());
  REQUIRE(found.size() == 1);
  CHECK(found[0]["where"]["peer_rank"] == 7);
  CHECK(found[0]["where"]["waiting_rank"] == 0);
}

TEST_CASE(
    "slow history: a late rank is its GPU's fault when its GPU is in flight as often as "
    "its peers'",
    "[analyzer][slow]") {
  // Rank 6 late by 4 ms at every step; its peers on its node wait in flight for it at 70% of the
  // heartbeats.
  const std::string late = "rank=6,step=10,kind=slow,ms=4";
  json gpu = analyze_with(late, [](int, int k) {
    Say s;
    s.busy = k % 10 < 7;
    return s;
  });
  auto found = slow_findings(gpu);
  INFO(gpu["findings"].dump());
  REQUIRE(found.size() == 1);
  CHECK(found[0]["culprit_ranks"] == json::array({6}));
  CHECK(found[0]["slow"]["cause"] == "gpu");
  CHECK(found[0]["slow"]["busy_share"].get<double>() > 0.6);
  CHECK(found[0]["summary"].get<std::string>().find("its host waits for its GPU") !=
        std::string::npos);
  // Its GPU done and idle while they wait in flight: its host.
  json host = analyze_with(late, [](int r, int k) {
    Say s;
    s.busy = r != 6 && k % 10 < 7;
    return s;
  });
  found = slow_findings(host);
  REQUIRE(found.size() == 1);
  CHECK(found[0]["slow"]["cause"] == "host");
  CHECK(found[0]["slow"]["busy_share"] == 0);
  CHECK(found[0]["slow"]["peers_busy_share"].get<double>() > 0.6);
  // With kernel times too, those decide, and the factor is its kernels' against its peers'.
  json kern = analyze_with(late, gpu_script(6, 2));
  found = slow_findings(kern);
  REQUIRE(found.size() == 1);
  CHECK(found[0]["slow"]["cause"] == "gpu");
  CHECK(found[0]["slow"]["factor"].get<double>() > 1.8);
  CHECK(found[0]["slow"]["factor"].get<double>() < 2.2);
}

TEST_CASE("slow history: healthy histories with noisy kernels and ring states give no finding",
          "[analyzer][slow]") {
  json doc = analyze_with("", [](int r, int k) {
    const uint64_t h = mix(uint64_t(r) << 32 | uint64_t(k));
    Say s;
    s.gpu_ns = int64_t(4 * kMs * (h % 10 == 0 ? 3.0 : 1 + double(h % 200) / 1000));
    s.busy = h % 3 == 0;
    s.step_ns = int64_t(kMs * (1 + double((h >> 8) % 300) / 1000));
    s.state = (h >> 16) % 4 == 0 ? FR_CHANST_SEND_WAIT : FR_CHANST_SEND_PEER_WAIT;
    return s;
  });
  INFO(doc["findings"].dump());
  CHECK(slow_findings(doc).empty());
  // Below the floor: 1.2 times the peers' kernel time.
  CHECK(slow_findings(analyze_with("", gpu_script(3, 1.2))).empty());
}

TEST_CASE("slow history: corrupt, truncated and hostile history files are named, the rest read",
          "[analyzer][slow]") {
  auto warned = [](const json& doc, const std::string& what) {
    for (const auto& w : doc["inputs"]["warnings"])
      if (w.dump().find(what) != std::string::npos) return true;
    return false;
  };
  // Node 1's file cut in the middle, node 0's not JSON: named, and the dump set still analysed.
  json cut = analyze_with("", gpu_script(6, 3), [](const std::string& dir) {
    const std::string f = dir + "/node1" + fr::log::kSlowHistorySuffix;
    const auto size = fs::file_size(f);
    fs::resize_file(f, size / 2);
    std::ofstream(dir + "/node0" + fr::log::kSlowHistorySuffix) << "{\"schema\": 7";
  });
  INFO(cut.dump());
  CHECK(cut["verdict"]["kind"] == "no_hang");
  CHECK(warned(cut, "heartbeat history not read"));
  CHECK(slow_findings(cut).empty());
  // Another schema.
  json other = analyze_with("", gpu_script(6, 3), [](const std::string& dir) {
    std::ofstream(dir + "/node1" + fr::log::kSlowHistorySuffix) << R"({"schema":"fr-gpu/1"})";
  });
  CHECK(warned(other, "not schema fr-slow-history/1"));
  // A hostile entry (too many samples, a link of the wrong shape, a string for a rank) is left
  // out and named; the other processes still name rank 6.
  json hostile = analyze_with("", gpu_script(6, 3), [](const std::string& dir) {
    const std::string f = dir + "/node0" + fr::log::kSlowHistorySuffix;
    std::ifstream in(f);
    json j = json::parse(in);
    j["processes"][0]["samples"] = json::array();
    for (int i = 0; i < 200; ++i) j["processes"][0]["samples"].push_back({{"t_ns", i}});
    j["processes"][1]["samples"][0]["links"] = json::array({json::array({1, 2})});
    j["processes"][2]["rank"] = "two";
    std::ofstream(f) << j.dump();
  });
  INFO(hostile["inputs"].dump());
  CHECK(warned(hostile, "more than 120"));
  CHECK(warned(hostile, "a link is not 8 numbers"));
  CHECK(warned(hostile, "process entry 2 left out"));
  auto found = slow_findings(hostile);
  REQUIRE(found.size() == 1);
  CHECK(found[0]["culprit_ranks"] == json::array({6}));
}

TEST_CASE("slow history: a GPU slow by its sampled markers alone is named with cause gpu",
          "[analyzer][slow]") {
  // Rank 6's GPU reaches each collective 8 ms after the others (its compute is slow too) and
  // takes 3 times their 4 ms after the last one reached it. The marker interval alone would make
  // every peer as slow (they wait for it): the time from the last start is what names it.
  json doc = analyze_with("", sampled_script(6, 3, 6, 8));
  INFO(doc["findings"].dump());
  CHECK(doc["verdict"]["kind"] == "no_hang");
  auto found = slow_findings(doc);
  REQUIRE(found.size() == 1);
  CHECK(found[0]["culprit_ranks"] == json::array({6}));
  CHECK(found[0]["slow"]["cause"] == "gpu");
  CHECK(found[0]["slow"]["gpu_sampled"] == true);
  CHECK(found[0]["slow"]["sampled_times"].get<int>() >= 8);
  CHECK(found[0]["slow"]["factor"].get<double>() > 2.7);
  CHECK(found[0]["slow"]["factor"].get<double>() < 3.3);
  const std::string text = found[0]["summary"].get<std::string>();
  CHECK(text.find("rank 6's GPU takes 3.0x") != std::string::npos);
  CHECK(text.find("progress markers, sampled by the node") != std::string::npos);
  // Kernel times win where a member has them: rank 6's kernels are its peers' (1x), so its
  // sampled times are not taken and nothing is slow.
  json kern = analyze_with("", [](int r, int k) {
    Say s = sampled_script(6, 3, 6, 8)(r, k);
    s.gpu_ns = 4 * kMs;
    return s;
  });
  INFO(kern["findings"].dump());
  CHECK(slow_findings(kern).empty());
  // Times under the 1 ms floor count as 1 ms: 0.1 ms against 0.3 ms is no slow GPU.
  CHECK(slow_findings(analyze_with("", sampled_script(6, 3, -1, 0, 0.1))).empty());
}

TEST_CASE("slow history: a late rank whose sampled GPU times are its peers' is a slow host",
          "[analyzer][slow]") {
  // Rank 6 calls 4 ms late at every step: its GPU reaches each collective 4 ms after the others
  // and, from there, takes their time. Its peers wait in flight at 70% of the heartbeats, its own
  // GPU too: the counters alone would say its GPU; the sampled times say its host.
  json doc = analyze_with("rank=6,step=10,kind=slow,ms=4", sampled_script(-1, 1, 6, 4));
  INFO(doc["findings"].dump());
  auto found = slow_findings(doc);
  REQUIRE(found.size() == 1);
  CHECK(found[0]["culprit_ranks"] == json::array({6}));
  CHECK(found[0]["slow"]["cause"] == "host");
  CHECK(found[0]["slow"]["gpu_sampled"] == true);
  CHECK(found[0]["slow"]["gpu"]["ratio"].get<double>() < 1.15);
  CHECK(!found[0]["slow"].contains("busy_share"));
  CHECK(found[0]["summary"].get<std::string>().find(
            "its GPU's time per collective is as its peers'") != std::string::npos);
}

TEST_CASE("slow history: healthy sampled GPU times give no finding", "[analyzer][slow]") {
  json doc = analyze_with("", sampled_script(-1, 1));
  INFO(doc["findings"].dump());
  CHECK(slow_findings(doc).empty());
  // Below the floor: 1.2 times the peers' sampled time.
  CHECK(slow_findings(analyze_with("", sampled_script(3, 1.2))).empty());
}

TEST_CASE("slow history: hostile sampled GPU times are not times, the rest still judged",
          "[analyzer][slow]") {
  // Rank 0's markers at a third of the collectives: a negative start, an end past any clock, an
  // end before its start, an end near the end of int64. Those collectives are not timed; rank 6
  // is named from the others, nothing overflows and no other rank is named.
  json doc = analyze_with("", sampled_script(6, 3, 6, 8), [](const std::string& dir) {
    const std::string f = dir + "/node0" + fr::log::kSlowHistorySuffix;
    std::ifstream in(f);
    json j = json::parse(in);
    int i = 0;
    for (auto& s : j["processes"][0]["samples"]) {
      if (!s["comms"][0].contains("marks") || i++ % 3 != 0) continue;
      json& marks = s["comms"][0]["marks"];
      json& m = marks[0];
      switch ((i / 3) % 4) {
        case 0: m[1] = -5 * kMs; break;
        case 1: m[2] = INT64_MAX; break;
        case 2: m[2] = m[1].get<int64_t>() - kMs; break;
        default:
          m[1] = 1;
          m[2] = INT64_MAX - 1;
          break;
      }
    }
    std::ofstream(f) << j.dump();
  });
  INFO(doc["findings"].dump() << doc["inputs"].dump());
  auto found = slow_findings(doc);
  REQUIRE(found.size() == 1);
  CHECK(found[0]["culprit_ranks"] == json::array({6}));
  CHECK(found[0]["slow"]["factor"].get<double>() < 3.5);
  // Marks of the wrong shape: the process entry is left out and named; with one member's times
  // missing no collective is timed by all, so no GPU is judged by them.
  json shape = analyze_with("", sampled_script(6, 3, 6, 8), [](const std::string& dir) {
    const std::string f = dir + "/node1" + fr::log::kSlowHistorySuffix;
    std::ifstream in(f);
    json j = json::parse(in);
    j["processes"][1]["samples"][3]["comms"][0]["marks"] = json::array({json::array({1, 2})});
    std::ofstream(f) << j.dump();
  });
  bool named = false;
  for (const auto& w : shape["inputs"]["warnings"])
    named |= w.dump().find("a mark is not 3 numbers") != std::string::npos;
  CHECK(named);
  CHECK(slow_findings(shape).empty());
}
