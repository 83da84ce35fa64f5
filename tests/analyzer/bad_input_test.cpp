// Bad input: truncated, corrupt, empty, newer-version, duplicated-rank and foreign files are each
// named in one line, the rest is analysed, and the verdict is `incomplete` when what is missing
// matters. Also the fr-analyze binary's exit codes and its export subcommand's errors.
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "analyzer/analyze.h"
#include "synth/synth.h"
#include "fr/flight_log.h"
#include "temp_dir.h"
#include "testing/files.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

using fr::test::slurp;
using fr::test::spit;
using fr::test::TempDir;

// Writes an 8-rank set with rank 5 hung on the host; returns the dump file of each rank.
std::vector<std::string> make_set(const std::string& dir,
                                  const std::string& fault = "kind=hang-host,rank=5") {
  fr::synth::Spec s;
  std::string err;
  REQUIRE(fr::synth::add_fault(fault, &s, &err));
  s.ranks = 8, s.entries = 64;
  REQUIRE(fr::synth::write_dump_set(s, dir, &err));
  std::vector<std::string> files(8);
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("rank", 0) == 0) files[std::stoi(name.substr(4))] = e.path().string();
  }
  return files;
}

json analyze(const std::vector<std::string>& paths, std::string* fatal = nullptr) {
  std::string err;
  json doc = fr::analyzer::analyze_paths(paths, {}, &err);
  if (fatal) *fatal = err;
  return doc;
}

// The skipped entry for a file, or null.
json skipped_entry(const json& doc, const std::string& file) {
  for (const auto& s : doc["inputs"]["skipped"])
    if (s["file"].get<std::string>().find(fs::path(file).filename().string()) != std::string::npos)
      return s;
  return nullptr;
}

int run_cli(const std::string& args, std::string* out = nullptr) {
  const std::string cmd = std::string(FR_BUILD_DIR) + "/bin/fr-analyze " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p);
  std::string text;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) text.append(buf, n);
  int st = pclose(p);
  if (out) *out = text;
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

}  // namespace

TEST_CASE("a bad file among good ones is named and the rest analysed", "[analyzer]") {
  struct Damage {
    const char* name;
    void (*apply)(const std::string&);
    const char* expect;  // a word the one-line error carries
  };
  const Damage damages[] = {
      {"truncated", [](const std::string& f) { fs::resize_file(f, fs::file_size(f) / 2); },
       "trunc"},
      {"empty", [](const std::string& f) { fs::resize_file(f, 0); }, "empty"},
      {"corrupt",
       [](const std::string& f) {
         std::string b = slurp(f);
         uint32_t huge = 0xfffffff0u;
         // The ring's capacity in its directory row: one that does not add up.
         std::memcpy(&b[sizeof(fr_log_header) + FR_SECTION_RING * sizeof(fr_log_section) +
                        offsetof(fr_log_section, capacity)],
                     &huge, 4);
         spit(f, b);
       },
       ""},
      {"newer version",
       [](const std::string& f) {
         std::string b = slurp(f);
         uint32_t v = FR_LOG_VERSION + 1;
         std::memcpy(&b[8], &v, 4);
         spit(f, b);
       },
       "newer"},
      {"foreign",
       [](const std::string& f) { spit(f, "#!/bin/sh\necho not a flight log at all\n"); },
       "foreign"},
  };
  for (const Damage& d : damages) {
    // Damage a bystander (rank 2): the culprit (rank 5) is still found.
    TempDir t;
    auto files = make_set(t.sub("set"));
    d.apply(files[2]);
    json doc = analyze({t.sub("set")});
    INFO(d.name << ": " << doc.dump(1).substr(0, 3000));
    REQUIRE(doc.is_object());
    json s = skipped_entry(doc, files[2]);
    REQUIRE(!s.is_null());
    const std::string err = s["error"];
    CHECK(err.find('\n') == std::string::npos);
    if (*d.expect) CHECK(err.find(d.expect) != std::string::npos);
    CHECK(doc["ranks"]["missing"] == json({2}));
    CHECK(doc["inputs"]["files_read"] == 7);
    CHECK(doc["verdict"]["kind"] == "not_entered");
    CHECK(doc["verdict"]["culprit_ranks"] == json({5}));
  }
}

TEST_CASE("the culprit's own dump unreadable: incomplete, naming the missing rank", "[analyzer]") {
  TempDir t;
  auto files = make_set(t.sub("set"));
  fs::resize_file(files[5], 100);
  json doc = analyze({t.sub("set")});
  INFO(doc["verdict"].dump(1));
  CHECK(doc["verdict"]["kind"] == "incomplete");
  CHECK(doc["verdict"]["culprit_ranks"] == json({5}));
  CHECK(doc["ranks"]["missing"] == json({5}));
  CHECK(!skipped_entry(doc, files[5]).is_null());
}

TEST_CASE("missing dumps without a hang among the rest: incomplete", "[analyzer]") {
  TempDir t;
  auto files = make_set(t.sub("set"), "healthy");
  fs::remove(files[7]);
  json doc = analyze({t.sub("set")});
  CHECK(doc["verdict"]["kind"] == "incomplete");
  CHECK(doc["ranks"]["missing"] == json({7}));
  json s = skipped_entry(doc, files[7]);
  REQUIRE(!s.is_null());
  CHECK(s["error"].get<std::string>().find("missing") != std::string::npos);
}

TEST_CASE("a duplicated rank is named and one copy analysed", "[analyzer]") {
  TempDir t;
  auto files = make_set(t.sub("set"));
  fs::copy_file(files[3], t.sub("set/zz-copy-of-rank3.frlog"));
  json doc = analyze({t.sub("set")});
  json s = skipped_entry(doc, "zz-copy-of-rank3.frlog");
  if (s.is_null()) s = skipped_entry(doc, files[3]);
  REQUIRE(!s.is_null());
  CHECK(s["error"].get<std::string>().find("duplicate rank 3") != std::string::npos);
  CHECK(doc["ranks"]["found"].size() == 8);
  CHECK(doc["verdict"]["culprit_ranks"] == json({5}));
}

TEST_CASE("another job's dump in the same directory is named and left out", "[analyzer]") {
  TempDir t;
  make_set(t.sub("set"));
  fr::synth::Spec other;
  other.ranks = 2;
  other.entries = 16;
  other.job_id = "another-job";
  std::string err;
  REQUIRE(fr::synth::write_dump_set(other, t.sub("other"), &err));
  fs::copy_file(t.sub("other/rank1.node0.10001.frlog"), t.sub("set/stray.frlog"));
  json doc = analyze({t.sub("set")});
  json s = skipped_entry(doc, "stray.frlog");
  REQUIRE(!s.is_null());
  CHECK(s["error"].get<std::string>().find("another-job") != std::string::npos);
  CHECK(doc["verdict"]["culprit_ranks"] == json({5}));
}

TEST_CASE("two jobs' dumps in one call: said first, in every view, with exit code 5",
          "[analyzer][cli]") {
  TempDir t;
  make_set(t.sub("set"));
  fr::synth::Spec other;
  other.ranks = 2;
  other.entries = 16;
  other.job_id = "another-job";
  std::string err;
  REQUIRE(fr::synth::write_dump_set(other, t.sub("other"), &err));
  json doc = analyze({t.sub("set"), t.sub("other")});
  REQUIRE(doc["inputs"]["other_jobs"].size() == 1);
  CHECK(doc["inputs"]["other_jobs"][0]["job_id"] == "another-job");
  CHECK(doc["inputs"]["other_jobs"][0]["files"] == 2);
  CHECK(doc["verdict"]["culprit_ranks"] == json({5}));
  // The text view says it before the verdict.
  std::string out;
  CHECK(run_cli(t.sub("set") + " " + t.sub("other"), &out) == 5);
  INFO(out);
  const size_t mixed = out.find("MIXED JOBS: this dump set mixes 2 jobs");
  REQUIRE(mixed != std::string::npos);
  CHECK(mixed < out.find("verdict:"));
  CHECK(out.find("the verdict is about job 'synthetic' alone; left out: 'another-job' (2 files)") !=
        std::string::npos);
  CHECK(run_cli("--json " + t.sub("set") + " " + t.sub("other"), &out) == 5);
  CHECK(run_cli("--html " + t.sub("page.html") + " " + t.sub("set") + " " + t.sub("other"), &out) ==
        5);
  const std::string page = slurp(t.sub("page.html"));
  CHECK(page.find("id=\"mixed-jobs\"") < page.find("id=\"verdict-sentence\""));
  // One job alone: 0, and no such line.
  CHECK(run_cli(t.sub("set"), &out) == 0);
  CHECK(out.find("MIXED") == std::string::npos);
}

TEST_CASE("a manifest that cannot be read is named once in its error", "[analyzer]") {
  TempDir t;
  make_set(t.sub("set"));
  fs::remove(t.sub("set/manifest.json"));
  fs::create_directories(t.sub("set/manifest.json"));  // opened, and refused as no regular file
  json doc = analyze({t.sub("set")});
  const json s = skipped_entry(doc, "manifest.json");
  REQUIRE(!s.is_null());
  INFO(s.dump());
  CHECK(s["error"].get<std::string>().find("manifest.json") == std::string::npos);
  CHECK(s["error"].get<std::string>().find("not a regular file") != std::string::npos);
  CHECK(doc["verdict"]["culprit_ranks"] == json({5}));
}

TEST_CASE("oversize torch dumps are refused by their size, before any read", "[analyzer]") {
  // Eight sparse 10 GiB files that start as a real torch pickle: each is refused by fstat alone,
  // so the analysis neither reads them nor takes memory for them (a full read would be 80 GiB).
  TempDir t;
  const std::string head =
      slurp(std::string(FR_SOURCE_DIR) + "/tests/analyzer/torch/data/pickle/nccl_trace_rank_0");
  REQUIRE(head.size() > 16);
  std::vector<std::string> paths;
  for (int r = 0; r < 8; ++r) {
    const std::string p = t.sub("nccl_trace_rank_" + std::to_string(r));
    spit(p, head);
    REQUIRE(::truncate(p.c_str(), off_t{10} << 30) == 0);
    paths.push_back(p);
  }
  std::string fatal;
  json doc = analyze(paths, &fatal);
  // Nothing readable: no document, and one line that names why.
  CHECK(doc.is_null());
  CHECK(fatal.find("larger than 1073741824 bytes") != std::string::npos);
  // Beside a readable set, each is named in the skipped list and the set is still analysed.
  std::vector<std::string> mixed = make_set(t.sub("set"));
  mixed.push_back(paths[0]);
  json with_set = analyze(mixed);
  json e = skipped_entry(with_set, paths[0]);
  REQUIRE(e.is_object());
  CHECK(e["error"].get<std::string>().find("larger than 1073741824 bytes") != std::string::npos);
  CHECK(with_set["verdict"]["culprit_ranks"] == json({5}));
}

TEST_CASE("a broken manifest is named, the files are still read", "[analyzer]") {
  TempDir t;
  make_set(t.sub("set"));
  spit(t.sub("set/manifest.json"), "{\"schema\": \"something-else\"");
  json doc = analyze({t.sub("set")});
  CHECK(!skipped_entry(doc, "manifest.json").is_null());
  CHECK(doc["ranks"]["found"].size() == 8);
  CHECK(doc["verdict"]["culprit_ranks"] == json({5}));
}

TEST_CASE("nothing readable: null and one clear line", "[analyzer]") {
  TempDir t;
  fs::create_directories(t.sub("junk"));
  spit(t.sub("junk/a.txt"), "hello");
  spit(t.sub("junk/b.frlog"), "");
  std::string fatal;
  json doc = analyze({t.sub("junk")}, &fatal);
  CHECK(doc.is_null());
  CHECK(!fatal.empty());
  CHECK(fatal.find('\n') == std::string::npos);

  doc = analyze({t.sub("does-not-exist")}, &fatal);
  CHECK(doc.is_null());
  CHECK(fatal.find("no such file") != std::string::npos);

  fs::create_directories(t.sub("empty"));
  doc = analyze({t.sub("empty")}, &fatal);
  CHECK(doc.is_null());
  CHECK(!fatal.empty());
  doc = analyze({}, &fatal);
  CHECK(doc.is_null());
}

TEST_CASE("single dump files and several paths at once", "[analyzer]") {
  TempDir t;
  auto files = make_set(t.sub("set"));
  json doc =
      analyze({files[0], files[1], files[2], files[3], files[4], files[5], files[6], files[7]});
  CHECK(doc["verdict"]["kind"] == "not_entered");
  CHECK(doc["verdict"]["culprit_ranks"] == json({5}));
  CHECK(doc["inputs"]["clock"] == "per_host");
  doc = analyze({t.sub("set/manifest.json")});
  CHECK(doc["inputs"]["files_read"] == 8);
}

TEST_CASE("fr-analyze: exit codes and output", "[analyzer][cli]") {
  TempDir t;
  make_set(t.sub("set"), "kind=gpu-stall,rank=6");
  std::string out;
  CHECK(run_cli(t.sub("set"), &out) == 0);
  CHECK(out.rfind("verdict: stuck_in_collective", 0) == 0);
  CHECK(out.find("\033[") == std::string::npos);  // not a terminal: no colors

  CHECK(run_cli("--json " + t.sub("set"), &out) == 0);
  json doc = json::parse(out);
  CHECK(doc["verdict"]["culprit_ranks"] == json({6}));

  // A host name that is not UTF-8 (a damaged dump) is written as U+FFFD, not an internal error.
  {
    const std::string file = make_set(t.sub("bad-name"), "kind=gpu-stall,rank=6")[6];
    std::string bytes = slurp(file);
    const size_t at = bytes.find("node1");  // its header's host name
    REQUIRE(at != std::string::npos);
    bytes[at] = '\xff';
    spit(file, bytes);
    CHECK(run_cli("--json " + t.sub("bad-name"), &out) == 0);
    doc = json::parse(out);
    CHECK(doc["verdict"]["culprit_ranks"] == json({6}));
    CHECK(out.find("\xef\xbf\xbdode1") != std::string::npos);
    CHECK(run_cli("--trace " + t.sub("bad-name.trace.json") + " " + t.sub("bad-name"), &out) == 0);
    CHECK(json::parse(slurp(t.sub("bad-name.trace.json"))).is_object());
  }

  CHECK(run_cli("--json --rank 6 --rank 7 " + t.sub("set"), &out) == 0);
  doc = json::parse(out);
  CHECK(doc["verdict"]["evidence"].size() == 2);

  CHECK(run_cli("--trace " + t.sub("trace.json") + " " + t.sub("set"), &out) == 0);
  CHECK(fs::file_size(t.sub("trace.json")) > 100);

  fs::create_directories(t.sub("junk"));
  spit(t.sub("junk/x.frlog"), "nope");
  CHECK(run_cli(t.sub("junk"), &out) == 3);
  CHECK(out.find("nothing readable") != std::string::npos);
  CHECK(std::count(out.begin(), out.end(), '\n') == 1);

  CHECK(run_cli("", &out) == 2);
  CHECK(run_cli("--no-such-flag " + t.sub("set"), &out) == 2);
  CHECK(run_cli("--trace /no/such/dir/t.json " + t.sub("set"), &out) == 4);
  CHECK(run_cli("export --format yaml " + t.sub("set") + " " + t.sub("out"), &out) == 2);
  CHECK(run_cli("export --format torch-json " + t.sub("set") + " " + t.sub("torch"), &out) == 0);
  size_t n = 0;
  for (const auto& e : fs::directory_iterator(t.sub("torch"))) n += e.is_regular_file();
  CHECK(n == 8);
  CHECK(run_cli("export --format torch-json " + t.sub("junk") + " " + t.sub("torch2"), &out) == 3);
  // The pickle form is what PyTorch's fr_trace loads; fr-analyze reads it back too.
  CHECK(run_cli("export --format torch-pickle " + t.sub("set") + " " + t.sub("pickles"), &out) ==
        0);
  n = 0;
  for (const auto& e : fs::directory_iterator(t.sub("pickles"))) n += e.is_regular_file();
  CHECK(n == 8);
  CHECK(run_cli("--json " + t.sub("pickles"), &out) == 0);
  CHECK(out.find("\"fr-analysis/1\"") != std::string::npos);
}

TEST_CASE("damaged fields inside valid files never crash the analysis", "[analyzer]") {
  // Geometry stays intact (the reader accepts the files); communicator entries and records get
  // random values: ranks, sizes, sequence numbers, ops, peers, states, counters.
  TempDir t;
  auto files = make_set(t.sub("set"), "kind=p2p-skip,rank=3");
  std::vector<std::string> originals;
  for (const auto& f : files) originals.push_back(slurp(f));
  uint64_t rng = 0x9e3779b97f4a7c15ull;
  auto next = [&] {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return rng;
  };
  for (int round = 0; round < 40; ++round) {
    for (size_t i = 0; i < files.size(); ++i) {
      std::string b = originals[i];
      // The two tables as the directory places them (version 7 on; a header copied with it).
      std::vector<uint64_t> head((sizeof(fr_log_header) + sizeof(fr_log_section) * 8) / 8);
      std::memcpy(head.data(), b.data(), std::min(b.size(), head.size() * 8));
      const auto* hp = reinterpret_cast<const fr_log_header*>(head.data());
      REQUIRE(fr_log_section_of(hp, FR_SECTION_RING) != nullptr);
      const fr_log_section cs = *fr_log_section_of(hp, FR_SECTION_COMMS);
      const fr_log_section rs = *fr_log_section_of(hp, FR_SECTION_RING);
      const int hits = 1 + static_cast<int>(next() % 24);
      for (int k = 0; k < hits; ++k) {
        // Skip lock words (offset 0 of each entry) so entries stay readable.
        size_t off;
        if (next() % 4 == 0 && cs.capacity > 0) {
          off =
              cs.offset + (next() % cs.capacity) * cs.entry_size + 8 + next() % (cs.entry_size - 8);
        } else {
          off = rs.offset + (next() % rs.capacity) * rs.entry_size + 16 +
                next() % (rs.entry_size - 16);
        }
        if (off + 4 > b.size()) continue;
        uint32_t v = static_cast<uint32_t>(next());
        if (next() % 3 == 0) v = static_cast<uint32_t>(-1 - static_cast<int>(next() % 3));
        std::memcpy(&b[off], &v, 4);
      }
      if (round % 7 == 3) {  // a hostile header value the reader does not police
        int32_t r = static_cast<int32_t>(next());
        std::memcpy(&b[76], &r, 4);  // global_rank
        std::memcpy(&b[80], &r, 4);  // world_size
      }
      spit(files[i], b);
    }
    std::string fatal;
    json doc = analyze({t.sub("set")}, &fatal);
    if (doc.is_null()) {
      CHECK(!fatal.empty());
      continue;
    }
    CHECK(doc["schema"] == "fr-analysis/1");
    CHECK(doc["verdict"].contains("kind"));
    CHECK(!fr::analyzer::render_text(doc, false).empty());
  }
}
