// The analysis on synthetic dump sets: every verdict kind with the culprit first, in the middle
// and last in rank order; several communicators stalled at once; grouped and point-to-point ops;
// rings wrapped at different points; clocks; and the fixed JSON contract.
#include <catch2/catch.hpp>

#include <cstring>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>

#include "analyzer/analyze.h"
#include "analyzer/model.h"
#include "synth/synth.h"
#include "analyzer/trace.h"
#include "log/side_files.h"
#include "log/snapshot.h"
#include "temp_dir.h"

namespace fs = std::filesystem;
using fr::synth::Fault;
using fr::synth::Spec;
using nlohmann::json;

namespace {

using fr::test::TempDir;

Spec spec_with(const std::string& fault_spec, int ranks = 8) {
  Spec s;
  s.ranks = ranks;
  s.entries = 96;
  if (!fault_spec.empty()) {
    Fault f;
    std::string err;
    REQUIRE(fr::synth::parse_fault(fault_spec, &f, &err));
    s.faults.push_back(f);
  }
  return s;
}

json analyze_dir(const std::string& dir, fr::analyzer::Options opts = {}) {
  std::string err;
  json doc = fr::analyzer::analyze_paths({dir}, opts, &err);
  INFO(err);
  REQUIRE(doc.is_object());
  return doc;
}

json run(const Spec& s, const TempDir& t, const std::string& name = "set") {
  std::string err;
  REQUIRE(fr::synth::write_dump_set(s, t.sub(name), &err));
  return analyze_dir(t.sub(name));
}

std::vector<int> culprits(const json& v) { return v.at("culprit_ranks").get<std::vector<int>>(); }

// Writes logs as a dump set (files + manifest) so tests can edit logs before analysing them.
void write_logs(const std::vector<fr::log::LogFile>& logs, const std::string& dir) {
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
    p.alive = log.writer_alive;
    std::string bytes = fr::log::encode_snapshot(log, 1796205700000000000ull);
    std::ofstream(fs::path(dir) / p.file, std::ios::binary)
        .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    procs.push_back(p);
  }
  std::string err;
  REQUIRE(fr::log::write_manifest(dir, "synthetic", 1796205700000000000ull, procs, {}, {}, "test",
                                  static_cast<int>(logs.size()), &err));
}

}  // namespace

TEST_CASE("healthy job: no hang", "[analyzer]") {
  TempDir t;
  json doc = run(spec_with(""), t);
  CHECK(doc["schema"] == "fr-analysis/1");
  CHECK(doc["verdict"]["kind"] == "no_hang");
  CHECK(culprits(doc["verdict"]).empty());
  CHECK(doc["ranks"]["found"].size() == 8);
  CHECK(doc["ranks"]["missing"].empty());
  CHECK(doc["findings"].empty());
}

TEST_CASE("each fault kind gives its verdict, culprit first, middle and last", "[analyzer]") {
  struct Case {
    const char* kind;
    const char* verdict;
    const char* field;
  };
  const Case cases[] = {
      {"hang-host", "not_entered", ""},         {"crash", "rank_dead", ""},
      {"gpu-stall", "stuck_in_collective", ""}, {"mismatch-count", "mismatch", "count"},
      {"mismatch-dtype", "mismatch", "dtype"},  {"mismatch-op", "mismatch", "op"},
      {"mismatch-root", "mismatch", "root"},    {"p2p-skip", "p2p_unmatched", ""},
  };
  for (const Case& c : cases) {
    for (int rank : {0, 3, 7}) {
      TempDir t;
      json doc = run(spec_with(std::string("kind=") + c.kind + ",rank=" + std::to_string(rank)), t);
      INFO(c.kind << " at rank " << rank << ": " << doc["verdict"].dump());
      CHECK(doc["verdict"]["kind"] == c.verdict);
      CHECK(culprits(doc["verdict"]) == std::vector<int>{rank});
      if (*c.field) CHECK(doc["verdict"]["mismatch"]["field"] == c.field);
      CHECK(doc["verdict"]["comm"]["id"].get<std::string>().size() == 18);
      CHECK_FALSE(doc["verdict"]["evidence"].empty());
    }
  }
}

TEST_CASE("faults on the tensor-parallel communicator", "[analyzer]") {
  for (int rank : {0, 5}) {
    TempDir t;
    json doc = run(spec_with("kind=gpu-stall,comm=tp,rank=" + std::to_string(rank)), t);
    INFO(doc["verdict"].dump());
    CHECK(doc["verdict"]["kind"] == "stuck_in_collective");
    CHECK(doc["verdict"]["comm"]["name"] == "tp");
    CHECK(culprits(doc["verdict"]) == std::vector<int>{rank});

    TempDir t2;
    doc = run(spec_with("kind=mismatch-count,comm=tp,rank=" + std::to_string(rank)), t2);
    CHECK(doc["verdict"]["kind"] == "mismatch");
    CHECK(doc["verdict"]["comm"]["name"] == "tp");
    // Two members disagree one against one: the communicator's rhythm says which is odd.
    CHECK(culprits(doc["verdict"]) == std::vector<int>{rank});
    CHECK(doc["verdict"]["mismatch"]["expected"] == "4096");

    TempDir t3;
    doc = run(spec_with("kind=mismatch-op,comm=tp,rank=" + std::to_string(rank)), t3);
    CHECK(doc["verdict"]["kind"] == "mismatch");
    CHECK(doc["verdict"]["mismatch"]["field"] == "op");
    CHECK(doc["verdict"]["mismatch"]["expected"] == "AllReduce");
    CHECK(culprits(doc["verdict"]) == std::vector<int>{rank});
  }
}

TEST_CASE("skip: the skipping rank is named, as not_entered or mismatch", "[analyzer]") {
  for (const char* spec :
       {"kind=skip,rank=2", "kind=skip,rank=6,comm=tp", "kind=skip,rank=0,step=5"}) {
    TempDir t;
    Spec s = spec_with(spec);
    json doc = run(s, t);
    INFO(spec << ": " << doc["verdict"].dump());
    const std::string kind = doc["verdict"]["kind"];
    CHECK((kind == "not_entered" || kind == "mismatch"));
    const int rank = s.faults[0].rank;
    CHECK(culprits(doc["verdict"]) == std::vector<int>{rank});
  }
}

TEST_CASE("slow rank: no hang, a skew finding and a slow finding name it", "[analyzer]") {
  for (int rank : {0, 4, 7}) {
    TempDir t;
    json doc = run(spec_with("kind=slow,ms=40,step=2,rank=" + std::to_string(rank)), t);
    INFO(doc.dump());
    CHECK(doc["verdict"]["kind"] == "no_hang");
    REQUIRE(doc["findings"].size() == 2);
    CHECK(doc["findings"][0]["kind"] == "skew");
    CHECK(culprits(doc["findings"][0]) == std::vector<int>{rank});
    CHECK(doc["findings"][1]["kind"] == "slow");
    CHECK(doc["findings"][1]["slow"]["cause"] == "host");
    CHECK(culprits(doc["findings"][1]) == std::vector<int>{rank});
    CHECK(doc["skew"][0]["rank"] == rank);
    CHECK(doc["skew"][0]["mean_late_ns"].get<int64_t>() > 30'000'000);
  }
}

TEST_CASE("node lost: every rank of one host missing", "[analyzer]") {
  TempDir t;
  json doc = run(spec_with("kind=node-lost,rank=6"), t);
  INFO(doc["verdict"].dump());
  CHECK(doc["verdict"]["kind"] == "node_lost");
  CHECK(culprits(doc["verdict"]) == std::vector<int>{4, 5, 6, 7});
  CHECK(doc["ranks"]["missing"] == json({4, 5, 6, 7}));
}

TEST_CASE("node lost: every rank of one host dead", "[analyzer]") {
  TempDir t;
  Spec s = spec_with("");
  for (int r : {0, 1, 2, 3}) {
    Fault f;
    f.kind = "crash";
    f.rank = r;
    s.faults.push_back(f);
  }
  json doc = run(s, t);
  INFO(doc["verdict"].dump());
  CHECK(doc["verdict"]["kind"] == "node_lost");
  CHECK(culprits(doc["verdict"]) == std::vector<int>{0, 1, 2, 3});
}

TEST_CASE("several communicators stalled: the one that explains the others is the verdict",
          "[analyzer]") {
  TempDir t;
  json doc = run(spec_with("kind=hang-host,rank=5"), t);
  INFO(doc.dump(1));
  CHECK(doc["verdict"]["kind"] == "not_entered");
  CHECK(culprits(doc["verdict"]) == std::vector<int>{5});
  // The tp communicator of rank 5 (ranks 4 and 5) is stalled too: a finding, same culprit.
  bool tp = false;
  for (const auto& f : doc["findings"])
    if (f.contains("comm") && f["comm"]["name"] == "tp" && f["kind"] == "not_entered") {
      tp = true;
      CHECK(culprits(f) == std::vector<int>{5});
    }
  CHECK(tp);
  int stalled = 0;
  REQUIRE(!doc["communicators"].empty());
  for (const auto& c : doc["communicators"]) stalled += c["frontier"]["stalled"].get<bool>();
  CHECK(stalled >= 2);

  // A rank that waits in its tp group because its partner's GPU stalled is not the culprit of the
  // world stall that follows: the stall on the tp communicator explains it.
  TempDir t2;
  doc = run(spec_with("kind=gpu-stall,comm=tp,rank=3"), t2);
  CHECK(doc["verdict"]["comm"]["name"] == "tp");
  CHECK(culprits(doc["verdict"]) == std::vector<int>{3});
}

TEST_CASE("two independent faults: both are reported", "[analyzer]") {
  TempDir t;
  Spec s = spec_with("kind=mismatch-count,comm=tp,rank=1,step=20");
  Fault f;
  f.kind = "gpu-stall";
  f.comm = "tp";
  f.rank = 6;
  f.step = 20;
  s.faults.push_back(f);
  json doc = run(s, t);
  INFO(doc.dump(1));
  std::set<int> named;
  for (int r : culprits(doc["verdict"])) named.insert(r);
  for (const auto& fnd : doc["findings"])
    for (int r : culprits(fnd)) named.insert(r);
  CHECK(named.count(1));
  CHECK(named.count(6));
  CHECK(doc["verdict"]["kind"] == "mismatch");
}

TEST_CASE("grouped collectives are reported as one unit", "[analyzer]") {
  // Steps with k % 4 == 2 hold a group of two AllReduces; freeze the job inside such a group:
  // rank 3 never calls it, the others are in it.
  Spec s = spec_with("");
  s.steps = 11;  // last step 10: 10 % 4 == 2
  auto logs = fr::synth::make_logs(s);
  uint64_t t_group = 0;
  for (const auto& rec : logs[0].records)
    if (rec.raw.group_id != 0 && rec.raw.op == FR_OP_ALLREDUCE) t_group = rec.raw.call_ns;
  REQUIRE(t_group != 0);
  for (auto& log : logs) {
    const bool culprit = log.header.global_rank == 3;
    std::vector<fr::log::Record> kept;
    // Per communicator, the first late unit (the group) has started; what follows is queued.
    std::map<uint64_t, uint64_t> head_group;
    for (auto rec : log.records) {
      const bool late = rec.raw.call_ns + 60'000 >= t_group && rec.raw.seq != 0;  // jitter margin
      if (late && culprit) continue;
      if (late) {
        auto [it, first] = head_group.emplace(rec.raw.comm_id, rec.raw.group_id);
        const bool in_head = first || (rec.raw.group_id != 0 && rec.raw.group_id == it->second);
        rec.gpu_state = in_head ? FR_GPU_STARTED : FR_GPU_ENQUEUED;
        rec.raw.gpu_state = static_cast<uint8_t>(rec.gpu_state);
      }
      kept.push_back(rec);
    }
    log.records = kept;
    for (auto& c : log.comms) {
      uint64_t coll = 0, p2p = 0, idx = 0, done = 0, started = 0;
      for (const auto& rec : log.records) {
        if (rec.raw.comm_id != c.id || rec.raw.seq == 0) continue;
        (fr::log::op_is_p2p(rec.raw.op) ? p2p : coll) = rec.raw.seq;
        idx = std::max(idx, rec.raw.op_index);
        if (rec.gpu_state == FR_GPU_COMPLETED) done = rec.raw.op_index;
        if (rec.gpu_state >= FR_GPU_STARTED) started = std::max(started, rec.raw.op_index);
      }
      c.coll_seq = coll, c.p2p_seq = p2p, c.op_index = idx, c.gpu_completed = done,
      c.gpu_started = started;
    }
  }
  TempDir t;
  write_logs(logs, t.sub("set"));
  json doc = analyze_dir(t.sub("set"));
  INFO(doc["verdict"].dump(1));
  CHECK(doc["verdict"]["kind"] == "not_entered");
  CHECK(culprits(doc["verdict"]) == std::vector<int>{3});
  REQUIRE(doc["verdict"].contains("group"));
  CHECK(doc["verdict"]["group"]["ops"].size() == 2);
}

TEST_CASE("a rank whose GPU progress fell back says why, with the call and its CUresult",
          "[analyzer]") {
  auto logs = fr::synth::make_logs(spec_with(""));
  for (auto& log : logs) {
    if (log.header.global_rank == 2) {  // one stream's write failed: events for it
      log.header.flags |= FR_LOG_F_GPU_EVENTS;
      log.header.gpu_error = 400;
      log.header.gpu_error_call = FR_GPU_CALL_STREAM_WRITE_VALUE64;
      log.header.gpu_event_streams = 1;
    }
    if (log.header.global_rank == 5) {  // the log could not be registered: events everywhere
      log.header.flags = (log.header.flags & ~FR_LOG_F_GPU_MARKERS) | FR_LOG_F_GPU_EVENTS;
      log.header.gpu_error = 801;
      log.header.gpu_error_call = FR_GPU_CALL_MEM_HOST_REGISTER;
    }
  }
  TempDir t;
  write_logs(logs, t.sub("set"));
  json doc = analyze_dir(t.sub("set"));
  std::vector<std::string> notes;
  for (const auto& w : doc["inputs"]["warnings"]) notes.push_back(w.value("warning", ""));
  INFO(doc["inputs"]["warnings"].dump(1));
  auto has = [&](const std::string& text) {
    return std::find(notes.begin(), notes.end(), text) != notes.end();
  };
  CHECK(
      has("GPU progress from events for 1 stream(s) of rank 2, markers for the others "
          "(cuStreamWriteValue64: CUDA_ERROR_INVALID_HANDLE)"));
  CHECK(has("GPU progress from events on rank 5 (cuMemHostRegister: CUDA_ERROR_NOT_SUPPORTED)"));
  CHECK(notes.size() == 2);
}

TEST_CASE("rings wrapped at different points", "[analyzer]") {
  for (int entries : {8, 13, 40}) {
    Spec s = spec_with("kind=hang-host,rank=6");
    s.entries = entries;
    s.steps = 60;
    auto logs = fr::synth::make_logs(s);
    // Shorten some rings further, as if those ranks had smaller logs.
    for (auto& log : logs)
      if (log.header.global_rank % 3 == 1 && log.records.size() > 4)
        log.records.erase(log.records.begin(),
                          log.records.begin() + static_cast<long>(log.records.size() / 2));
    std::set<uint64_t> firsts;
    for (const auto& log : logs) firsts.insert(log.records.front().raw.id);
    CHECK(firsts.size() > 1);
    TempDir t;
    write_logs(logs, t.sub("set"));
    json doc = analyze_dir(t.sub("set"));
    INFO("entries " << entries << ": " << doc["verdict"].dump());
    CHECK(doc["verdict"]["kind"] == "not_entered");
    CHECK(culprits(doc["verdict"]) == std::vector<int>{6});
  }
}

TEST_CASE("without GPU tracking, the laggard is still found", "[analyzer]") {
  TempDir t;
  Spec s = spec_with("kind=hang-host,rank=2");
  s.gpu_tracking = false;
  json doc = run(s, t);
  INFO(doc["verdict"].dump());
  CHECK(doc["verdict"]["kind"] == "not_entered");
  CHECK(culprits(doc["verdict"]) == std::vector<int>{2});
}

TEST_CASE("clock offsets from the manifest align hosts", "[analyzer]") {
  TempDir t;
  Spec s = spec_with("kind=slow,ms=20,step=1,rank=2");
  s.host_skew_ns = 3'000'000'000;  // node1 runs 3 s ahead; the manifest says so
  json doc = run(s, t);
  CHECK(doc["inputs"]["clock"] == "aligned");
  CHECK(doc["verdict"]["kind"] == "no_hang");
  REQUIRE(!doc["findings"].empty());
  CHECK(culprits(doc["findings"][0]) == std::vector<int>{2});

  // The same files without the manifest: times are per host, and said so.
  fs::remove(fs::path(t.sub("set")) / "manifest.json");
  doc = analyze_dir(t.sub("set"));
  CHECK(doc["inputs"]["clock"] == "per_host");
}

TEST_CASE("lineage: split communicators name their parent", "[analyzer]") {
  TempDir t;
  json doc = run(spec_with(""), t);
  REQUIRE(doc["communicators"].size() == 5);  // world + 4 tp groups
  int splits = 0;
  for (const auto& c : doc["communicators"]) {
    if (c["origin"] == "split") {
      ++splits;
      CHECK(c["parent"] == "0x5eed00000000a11c");
      CHECK(c["members"].size() == 2);
    } else {
      CHECK(c["name"] == "world");
      CHECK(c["parent"].is_null());
      CHECK(c["size"] == 8);
    }
  }
  CHECK(splits == 4);
}

TEST_CASE("the fr-analysis/1 contract", "[analyzer]") {
  TempDir t;
  json doc = run(spec_with("kind=mismatch-dtype,rank=4"), t);
  for (const char* k :
       {"schema", "inputs", "ranks", "verdict", "findings", "communicators", "skew"})
    CHECK(doc.contains(k));
  for (const char* k : {"paths", "files_read", "skipped", "clock"})
    CHECK(doc["inputs"].contains(k));
  for (const char* k : {"expected", "found", "missing", "dead"}) CHECK(doc["ranks"].contains(k));
  const json& v = doc["verdict"];
  for (const char* k : {"kind", "summary", "comm", "seq", "seq_kind", "op", "culprit_ranks",
                        "mismatch", "evidence"})
    CHECK(v.contains(k));
  for (const char* k : {"id", "name", "size"}) CHECK(v["comm"].contains(k));
  REQUIRE(!v["evidence"].empty());
  const json& e = v["evidence"][0];
  for (const char* k : {"rank", "last_enqueued", "last_started", "last_completed", "state"})
    CHECK(e.contains(k));
  const json& op = e["last_enqueued"];
  for (const char* k : {"seq", "op", "dtype", "count", "group_id", "state", "call_ns"})
    CHECK(op.contains(k));
  REQUIRE(!doc["communicators"].empty());
  const json& c = doc["communicators"][0];
  for (const char* k : {"id", "name", "size", "origin", "parent", "members", "frontier"})
    CHECK(c.contains(k));
  REQUIRE(!doc["skew"].empty());
  for (const auto& s : doc["skew"])
    for (const char* k : {"rank", "mean_late_ns", "max_late_ns", "collectives"})
      CHECK(s.contains(k));
  CHECK(doc["ranks"]["expected"] == 8);
}

TEST_CASE("rank filter narrows the evidence, not the verdict", "[analyzer]") {
  TempDir t;
  std::string err;
  REQUIRE(fr::synth::write_dump_set(spec_with("kind=hang-host,rank=3"), t.sub("set"), &err));
  fr::analyzer::Options o;
  o.ranks = {3, 4};
  json doc = analyze_dir(t.sub("set"), o);
  CHECK(culprits(doc["verdict"]) == std::vector<int>{3});
  REQUIRE(doc["verdict"]["evidence"].size() == 2);
  for (const auto& e : doc["verdict"]["evidence"]) CHECK((e["rank"] == 3 || e["rank"] == 4));
}

TEST_CASE("text view: verdict first, colors only when asked", "[analyzer]") {
  TempDir t;
  json doc = run(spec_with("kind=hang-host,rank=1"), t);
  std::string plain = fr::analyzer::render_text(doc, false);
  CHECK(plain.rfind("verdict: not_entered", 0) == 0);
  CHECK(plain.find("\033[") == std::string::npos);
  CHECK(plain.find("* 1:") != std::string::npos);
  std::string color = fr::analyzer::render_text(doc, true);
  CHECK(color.find("\033[") != std::string::npos);
}

TEST_CASE("text view: every control byte from a dump is shown as a hex escape", "[analyzer]") {
  TempDir t;
  json doc = run(spec_with("kind=hang-host,rank=1"), t);
  std::string hostile = "pg";
  for (int c = 0; c < 0x20; ++c) hostile += char(c);
  hostile += '\x7f';
  hostile += "\033]0;owned\007\r\033[2Kverdict: no_hang\033[8m";
  doc["verdict"]["summary"] = hostile;
  doc["inputs"]["skipped"] =
      json::array({{{"file", "r1\033[1;31m.frlog"}, {"error", "bad\rmagic"}}});
  for (bool color : {false, true}) {
    INFO(color);
    const std::string text = fr::analyzer::render_text(doc, color);
    CHECK(text.find("pg\\x00\\x01") != std::string::npos);
    CHECK(text.find("\\x1f\\x7f\\x1b]0;owned\\x07\\x0d\\x1b[2K") != std::string::npos);
    CHECK(text.find("\\x1b[8m") != std::string::npos);
    CHECK(text.find("bad\\x0dmagic") != std::string::npos);
    // Only the view's own line ends and (with color) its own styles are control bytes.
    std::string rest = text;
    for (const char* style :
         {"\033[1;31m", "\033[1;32m", "\033[33m", "\033[1m", "\033[2m", "\033[0m"})
      for (size_t at; (at = rest.find(style)) != std::string::npos;) rest.erase(at, strlen(style));
    for (unsigned char c : rest) CHECK((c == '\n' || (c >= 0x20 && c != 0x7f)));
    if (!color) CHECK(text == rest);
  }
  // With color on, one of the view's own styles passes as it is (it only colors); anything else is
  // escaped.
  CHECK(fr::analyzer::terminal_safe("a\tb\033[1mc", false) == "a\\x09b\\x1b[1mc");
  CHECK(fr::analyzer::terminal_safe("a\033[1mc", true) == "a\033[1mc");
}

TEST_CASE("trace: one track per rank per communicator, the stall highlighted", "[analyzer]") {
  TempDir t;
  std::string err;
  REQUIRE(fr::synth::write_dump_set(spec_with("kind=gpu-stall,rank=2"), t.sub("set"), &err));
  auto model = fr::analyzer::load_model({t.sub("set")}, 2);
  json doc = fr::analyzer::analyze_model(model, {});
  REQUIRE(fr::analyzer::write_trace(model, doc, {}, t.sub("trace.json"), &err));
  std::ifstream in(t.sub("trace.json"));
  json tr = json::parse(in);
  REQUIRE(tr.contains("traceEvents"));
  std::set<std::pair<int, int>> tracks;
  bool stall = false, culprit = false;
  for (const auto& e : tr["traceEvents"]) {
    if (e["ph"] == "X") tracks.insert({e["pid"].get<int>(), e["tid"].get<int>()});
    if (e["ph"] == "X" && e["name"].get<std::string>().rfind("STALL", 0) == 0) stall = true;
    if (e["ph"] == "i" && e["tid"] == 2) culprit = true;
  }
  CHECK(tracks.size() == 8 + 8);  // world: 8 ranks; 4 tp groups: 2 each
  CHECK(stall);
  CHECK(culprit);
  CHECK(!fr::analyzer::write_trace(model, doc, {}, t.sub("no/such/dir/trace.json"), &err));
  CHECK(!err.empty());
}

TEST_CASE("whole histories (no ring wrap): p2p paired from the first op", "[analyzer]") {
  for (const char* spec :
       {"kind=p2p-skip,rank=2", "kind=p2p-skip,rank=7", "kind=hang-host,rank=4", "healthy"}) {
    Spec s = spec_with(spec);
    s.entries = 400;
    s.steps = 20;
    TempDir t;
    json doc = run(s, t);
    INFO(spec << ": " << doc["verdict"].dump());
    if (std::string(spec) == "healthy") {
      CHECK(doc["verdict"]["kind"] == "no_hang");
      continue;
    }
    CHECK(doc["verdict"]["kind"] ==
          (std::string(spec).find("p2p") != std::string::npos ? "p2p_unmatched" : "not_entered"));
    CHECK(culprits(doc["verdict"]) == std::vector<int>{s.faults[0].rank});
  }
}

TEST_CASE("a rank that never joins a communicator's creation is named", "[analyzer]") {
  // Every rank but 6 is inside ncclCommSplit on the world communicator (the host call has not
  // returned); rank 6 never called it. No sequence number moves, only the call tells.
  auto logs = fr::synth::make_logs(spec_with(""));
  for (auto& log : logs) {
    if (log.header.global_rank == 6) continue;
    fr::log::Record rec{};
    rec.raw = log.records.back().raw;
    rec.raw.id = log.header.record_counter++;
    rec.raw.op = FR_OP_COMM_SPLIT;
    rec.raw.seq = 0;
    rec.raw.op_index = 0;
    rec.raw.group_id = 0;
    rec.raw.call_ns += 1'000'000;
    rec.raw.flags = FR_REC_F_IN_CALL;
    rec.raw.result = FR_RESULT_PENDING;
    rec.raw.gpu_state = FR_GPU_NONE;
    rec.gpu_state = FR_GPU_NONE;
    log.records.push_back(rec);
  }
  TempDir t;
  write_logs(logs, t.sub("set"));
  json doc = analyze_dir(t.sub("set"));
  INFO(doc["verdict"].dump());
  CHECK(doc["verdict"]["kind"] == "not_entered");
  CHECK(doc["verdict"]["op"] == "CommSplit");
  CHECK(doc["verdict"]["seq_kind"] == "api");
  CHECK(culprits(doc["verdict"]) == std::vector<int>{6});
}

// Signals are one-sided: a WaitSignal needs that many signals from its peer on its (signal index,
// context); a pending wait the peer never sent enough signals for names the peer.
TEST_CASE("a wait no signal can satisfy names the rank that owes the signal", "[analyzer]") {
  for (int sent : {1, 2}) {
    Spec s = spec_with("");
    s.entries = 400;
    s.steps = 20;
    auto logs = fr::synth::make_logs(s);
    // Appends a signal record on the world communicator of `rank`.
    auto add = [&](int rank, fr_op op, int peer, int sig_idx, uint64_t count, bool done) {
      auto& log = logs[rank];
      fr_comm_entry* world = nullptr;
      for (auto& c : log.comms)
        if (c.size == s.ranks) world = &c;
      REQUIRE(world);
      fr::log::Record rec{};
      rec.raw = log.records.back().raw;
      rec.raw.id = log.header.record_counter++;
      rec.raw.op = static_cast<uint16_t>(op);
      rec.raw.comm_id = world->id;
      rec.raw.seq = ++world->p2p_seq;
      rec.raw.op_index = 0;
      rec.raw.group_id = 0;
      rec.raw.peer = peer;
      rec.raw.count = count;
      rec.raw.aux = FR_SIGNAL_AUX(sig_idx, 0);
      rec.raw.call_ns += 1'000'000;
      rec.raw.flags = FR_REC_F_LAUNCHED;
      rec.raw.result = 0;
      rec.raw.gpu_state = done ? FR_GPU_COMPLETED : FR_GPU_STARTED;
      rec.gpu_state = static_cast<fr_gpu_state>(rec.raw.gpu_state);
      log.records.push_back(rec);
    };
    add(0, FR_OP_PUT_SIGNAL, 2, 1, 16, true);  // paired: 0 -> 2 on signal 1
    add(2, FR_OP_WAIT_SIGNAL, 0, 1, 1, true);
    for (int k = 0; k < sent; ++k) add(3, FR_OP_SIGNAL, 1, 2, 0, true);
    add(1, FR_OP_WAIT_SIGNAL, 3, 2, 2, false);  // rank 1 waits for two signals from rank 3
    TempDir t;
    write_logs(logs, t.sub("set"));
    json doc = analyze_dir(t.sub("set"));
    INFO("signals sent: " << sent << ": " << doc["verdict"].dump());
    if (sent == 2) {
      CHECK(doc["verdict"]["kind"] == "no_hang");
      continue;
    }
    CHECK(doc["verdict"]["kind"] == "p2p_unmatched");
    CHECK(culprits(doc["verdict"]) == std::vector<int>{3});
    CHECK(doc["verdict"]["op"] == "WaitSignal");
    const std::string summary = doc["verdict"]["summary"];
    CHECK(summary.find("rank 1 waits for 2 signal(s) from rank 3") != std::string::npos);
    CHECK(summary.find("sent 1") != std::string::npos);
  }
}

namespace {
// The analysis less what names its inputs (paths differ between one dump set and several).
json without_paths(const json& v) {
  if (v.is_object()) {
    json out = json::object();
    for (const auto& [k, x] : v.items())
      if (k != "paths" && k != "path" && k != "file" && k != "files" && k != "dir")
        out[k] = without_paths(x);
    return out;
  }
  if (v.is_array()) {
    json out = json::array();
    for (const auto& x : v) out.push_back(without_paths(x));
    return out;
  }
  return v;
}
}  // namespace

TEST_CASE("one dump set per node, read together, gives the analysis of the job's one dump set",
          "[analyzer]") {
  // Host clocks skewed apart: each node's manifest corrects its own, as node daemons write them.
  for (const char* fault :
       {"kind=hang-host,rank=13", "kind=mismatch-count,rank=7", "kind=gpu-stall,rank=2"}) {
    INFO(fault);
    TempDir t;
    Spec s = spec_with(fault, 24);
    s.ranks_per_host = 4;
    s.host_skew_ns = 3'000'000;
    json one = run(s, t, "one");
    s.dir_per_host = true;
    std::string err;
    REQUIRE(fr::synth::write_dump_set(s, t.sub("nodes"), &err));
    std::vector<std::string> sets;
    for (int h = 0; h < 6; ++h) {
      sets.push_back(t.sub("nodes/node" + std::to_string(h)));
      CHECK(fs::exists(fs::path(sets.back()) / "manifest.json"));
    }
    json many = fr::analyzer::analyze_paths(sets, {}, &err);
    INFO(err);
    REQUIRE(many.is_object());
    CHECK(many["verdict"]["kind"] == one["verdict"]["kind"]);
    CHECK(many["ranks"] == one["ranks"]);
    CHECK(without_paths(many) == without_paths(one));
  }
}

TEST_CASE("mismatch: a majority value that breaks the rhythm is the expected one", "[analyzer]") {
  // mismatch-count at rank 3 makes its world AllReduce of the last step count 2048, the others'
  // 1024. Turned around here: the seven others call 2048 and rank 3 keeps 1024, the count of that
  // AllReduce in every step before. The majority says 2048 was expected; the rhythm alone, or
  // each member's change from its own previous call, would blame the seven.
  auto logs = fr::synth::make_logs(spec_with("kind=mismatch-count,rank=3"));
  REQUIRE(logs.size() == 8);
  uint64_t comm = 0, seq = 0, odd = 0, usual = 0;
  for (const auto& rec : logs[3].records) {
    if (rec.raw.op != FR_OP_ALLREDUCE || rec.raw.seq == 0) continue;
    for (const auto& other : logs[0].records)
      if (other.raw.op == FR_OP_ALLREDUCE && other.raw.comm_id == rec.raw.comm_id &&
          other.raw.seq == rec.raw.seq && other.raw.count != rec.raw.count) {
        comm = rec.raw.comm_id, seq = rec.raw.seq, odd = rec.raw.count, usual = other.raw.count;
      }
  }
  REQUIRE(seq != 0);
  REQUIRE(odd == 2048);
  REQUIRE(usual == 1024);
  int edited = 0;
  for (auto& log : logs)
    for (auto& rec : log.records)
      if (rec.raw.op == FR_OP_ALLREDUCE && rec.raw.comm_id == comm && rec.raw.seq == seq) {
        rec.raw.count = log.header.global_rank == 3 ? usual : odd;
        ++edited;
      }
  REQUIRE(edited == 8);
  TempDir t;
  write_logs(logs, t.sub("set"));
  json doc = analyze_dir(t.sub("set"));
  INFO(doc["verdict"].dump());
  CHECK(doc["verdict"]["kind"] == "mismatch");
  CHECK(doc["verdict"]["mismatch"]["field"] == "count");
  CHECK(doc["verdict"]["mismatch"]["expected"] == "2048");
  CHECK(culprits(doc["verdict"]) == std::vector<int>{3});
}

namespace {

// A healthy job with whole histories (no ring wraps), for p2p ops appended by hand.
std::vector<fr::log::LogFile> p2p_logs() {
  Spec s = spec_with("");
  s.entries = 400;
  s.steps = 20;
  return fr::synth::make_logs(s);
}

// Appends a Send or Recv on the world communicator of `rank`, `after_ns` past its last record.
// op_index 0: the stored GPU state stands as it is.
void add_p2p(std::vector<fr::log::LogFile>& logs, int rank, fr_op op, int peer, fr_gpu_state state,
             uint64_t after_ns) {
  auto& log = logs[static_cast<size_t>(rank)];
  fr_comm_entry* world = nullptr;
  for (auto& c : log.comms)
    if (c.size == static_cast<int>(logs.size())) world = &c;
  REQUIRE(world);
  fr::log::Record rec{};
  rec.raw = log.records.back().raw;
  rec.raw.id = log.header.record_counter++;
  rec.raw.op = static_cast<uint16_t>(op);
  rec.raw.comm_id = world->id;
  rec.raw.seq = ++world->p2p_seq;
  rec.raw.op_index = 0;
  rec.raw.group_id = 0;
  rec.raw.peer = peer;
  rec.raw.count = 512;
  rec.raw.redop = -1;
  rec.raw.aux = 0;
  rec.raw.call_ns += after_ns;
  rec.raw.flags = FR_REC_F_LAUNCHED;
  rec.raw.result = 0;
  rec.raw.gpu_state = static_cast<uint8_t>(state);
  rec.gpu_state = state;
  log.records.push_back(rec);
}

}  // namespace

TEST_CASE("p2p: a send nobody receives names the destination that never posted the receive",
          "[analyzer]") {
  auto logs = p2p_logs();
  add_p2p(logs, 2, FR_OP_SEND, 5, FR_GPU_STARTED, 1'000'000);  // rank 5 posts no Recv from 2
  TempDir t;
  write_logs(logs, t.sub("set"));
  json doc = analyze_dir(t.sub("set"));
  INFO(doc["verdict"].dump());
  CHECK(doc["verdict"]["kind"] == "p2p_unmatched");
  CHECK(culprits(doc["verdict"]) == std::vector<int>{5});
  CHECK(doc["verdict"]["blocked_ranks"] == json::array({2}));
  CHECK(doc["verdict"]["summary"].get<std::string>().find("rank 2 sends to rank 5 (Send #") !=
        std::string::npos);
}

TEST_CASE("p2p: of a stuck pair, the side whose GPU never started it is named", "[analyzer]") {
  auto logs = p2p_logs();
  add_p2p(logs, 2, FR_OP_SEND, 5, FR_GPU_STARTED, 1'000'000);
  add_p2p(logs, 5, FR_OP_RECV, 2, FR_GPU_ENQUEUED, 1'000'000);  // paired, never started
  TempDir t;
  write_logs(logs, t.sub("set"));
  json doc = analyze_dir(t.sub("set"));
  INFO(doc["verdict"].dump());
  CHECK(doc["verdict"]["kind"] == "stuck_in_collective");
  CHECK(culprits(doc["verdict"]) == std::vector<int>{5});
  CHECK(doc["verdict"]["summary"].get<std::string>().find(
            "the GPU of rank 5 never started its side") != std::string::npos);
}

TEST_CASE("p2p: a wrapped ring that still holds the first p2p op is paired whole", "[analyzer]") {
  // Ranks 1 and 2 lost their oldest records (collectives of step 0), but their first p2p op on
  // the world communicator (seq 1, step 1) is still there: their p2p histories are whole and are
  // paired from the first op. Rank 1's last Send to 2 completed with 2's first Recv; 2's second
  // Recv, posted right after, has no Send. Counting only pending ops, the Send done just before
  // would be taken for its match and nothing found.
  auto logs = p2p_logs();
  add_p2p(logs, 1, FR_OP_SEND, 2, FR_GPU_COMPLETED, 1'000'000);
  add_p2p(logs, 2, FR_OP_RECV, 1, FR_GPU_COMPLETED, 1'000'000);
  add_p2p(logs, 2, FR_OP_RECV, 1, FR_GPU_STARTED, 20'000);
  for (int r : {1, 2}) {
    auto& log = logs[static_cast<size_t>(r)];
    const auto first_p2p =
        std::find_if(log.records.begin(), log.records.end(),
                     [](const fr::log::Record& x) { return fr::log::op_is_p2p(x.raw.op); });
    REQUIRE(first_p2p != log.records.end());
    REQUIRE(first_p2p->raw.seq == 1);
    REQUIRE(first_p2p - log.records.begin() >= 2);
    log.records.erase(log.records.begin(), log.records.begin() + 2);
    log.header.overwritten = 2;
  }
  TempDir t;
  write_logs(logs, t.sub("set"));
  json doc = analyze_dir(t.sub("set"));
  INFO(doc["verdict"].dump());
  CHECK(doc["verdict"]["kind"] == "p2p_unmatched");
  CHECK(culprits(doc["verdict"]) == std::vector<int>{1});
  CHECK(doc["verdict"]["summary"].get<std::string>().find(
            "rank 2 waits to receive from rank 1 (Recv #") != std::string::npos);
}

TEST_CASE("GPUs join ranks in a PID namespace through the PIDs the node daemon mapped",
          "[analyzer]") {
  auto logs = fr::synth::make_logs(spec_with(""));
  std::string host;
  int pid = 0;
  for (const auto& log : logs)
    if (log.header.global_rank == 2) host = log.hostname(), pid = log.header.pid;
  REQUIRE(pid != 0);
  for (bool mapped : {false, true}) {
    INFO((mapped ? "with" : "without") << " the daemon's mapping");
    TempDir t;
    write_logs(logs, t.sub("set"));
    // NVML reports the host's PID (4242); in its container, rank 2 recorded its own.
    fr::log::NodeGpus g;
    g.node = host;
    fr::log::GpuHealth gpu;
    gpu.pci_bus_id = "0000:3b:00.0";
    gpu.pids = {4242};
    if (mapped) gpu.own_pids = {pid};
    g.gpus.push_back(gpu);
    std::ofstream(t.sub("set") + "/" + host + ".gpu.json") << fr::log::gpus_to_text(g);
    json doc = analyze_dir(t.sub("set"));
    const json& gpus = doc.contains("gpus") ? doc["gpus"] : doc["context"]["gpus"];
    INFO(gpus.dump(1));
    REQUIRE(gpus.size() == 1);
    CHECK(gpus[0]["ranks"] == (mapped ? json::array({2}) : json::array()));
  }
}
