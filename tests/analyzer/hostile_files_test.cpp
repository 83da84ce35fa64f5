// Hostile dump sets: FIFOs, devices and links where dump files belong, on the command line, in a
// directory scan and in a manifest (a file the coordinator accepted, swapped for a FIFO before the
// analysis). fr-analyze names each one and analyses the rest; it never blocks and never follows a
// link out of the dump set. Every test runs under an alarm, so a reader that hangs fails.
#include <catch2/catch.hpp>

#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "analyzer/analyze.h"
#include "synth/synth.h"
#include "skip.h"
#include "temp_dir.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

struct HangGuard {
  HangGuard() { ::alarm(120); }
  ~HangGuard() { ::alarm(0); }
};

using fr::test::TempDir;

// An 8-rank set with rank 5 hung on the host; returns the dump file of each rank.
std::vector<std::string> make_set(const std::string& dir) {
  fr::synth::Spec s;
  std::string err;
  REQUIRE(fr::synth::add_fault("kind=hang-host,rank=5", &s, &err));
  s.ranks = 8, s.entries = 64;
  REQUIRE(fr::synth::write_dump_set(s, dir, &err));
  std::vector<std::string> files(8);
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("rank", 0) == 0) files[std::stoi(name.substr(4))] = e.path().string();
  }
  return files;
}

json analyze(const std::vector<std::string>& paths) {
  std::string err;
  json doc = fr::analyzer::analyze_paths(paths, {}, &err);
  INFO(err);
  REQUIRE(doc.is_object());
  return doc;
}

// The fatal error when nothing could be analysed.
std::string analyze_error(const std::vector<std::string>& paths) {
  std::string err;
  json doc = fr::analyzer::analyze_paths(paths, {}, &err);
  CHECK_FALSE(doc.is_object());
  return err;
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// The skipped entry whose file name ends with `name`, or null.
json skipped_entry(const json& doc, const std::string& name) {
  for (const auto& s : doc["inputs"]["skipped"]) {
    const std::string f = s["file"];
    if (f.size() >= name.size() && f.compare(f.size() - name.size(), name.size(), name) == 0)
      return s;
  }
  return nullptr;
}

bool has(const json& entry, const std::string& word) {
  return !entry.is_null() && entry["error"].get<std::string>().find(word) != std::string::npos;
}

// Swaps a file for a FIFO of the same name.
void make_fifo_at(const std::string& path) {
  REQUIRE(::unlink(path.c_str()) == 0);
  REQUIRE(::mkfifo(path.c_str(), 0644) == 0);
}

int run_cli(const std::string& args, std::string* out) {
  // `timeout` bounds a regression that would hang; 124 is its exit code.
  const std::string cmd =
      "timeout 60 " + std::string(FR_BUILD_DIR) + "/bin/fr-analyze " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p);
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out->append(buf, n);
  int st = pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

}  // namespace

TEST_CASE("a dump listed in the manifest and swapped for a FIFO is named, never waited on",
          "[analyzer]") {
  HangGuard guard;
  TempDir t;
  auto files = make_set(t.sub("set"));
  make_fifo_at(files[2]);
  json doc = analyze({t.sub("set")});
  json s = skipped_entry(doc, fs::path(files[2]).filename().string());
  INFO(doc["inputs"].dump(1));
  CHECK(has(s, "FIFO"));
  size_t named = 0;  // once, not once per way it was found
  for (const auto& e : doc["inputs"]["skipped"])
    named += e["file"].get<std::string>().find(fs::path(files[2]).filename().string()) !=
             std::string::npos;
  CHECK(named == 1);
  CHECK(doc["ranks"]["missing"] == json({2}));
  CHECK(doc["verdict"]["culprit_ranks"] == json({5}));
}

TEST_CASE("a FIFO argument and /dev/stdin as a pipe are refused at once", "[analyzer]") {
  HangGuard guard;
  TempDir t;
  const std::string fifo = t.sub("pipe");
  REQUIRE(::mkfifo(fifo.c_str(), 0644) == 0);
  // Nothing else to read: the one error names the FIFO.
  CHECK(contains(analyze_error({fifo}), "pipe: a FIFO (pipe), not a regular file"));
  // Beside a good dump set, it is one skipped entry.
  make_set(t.sub("set"));
  json doc = analyze({t.sub("set"), fifo});
  CHECK(has(skipped_entry(doc, "pipe"), "FIFO"));
  CHECK(doc["inputs"]["files_read"] == 8);

  // stdin a pipe whose writer stays open and silent: reading it would block for good.
  int p[2];
  REQUIRE(pipe(p) == 0);
  REQUIRE(dup2(p[0], 0) == 0);
  CHECK(contains(analyze_error({"/dev/stdin"}), "/dev/stdin: a FIFO (pipe)"));
  ::close(p[1]);

  if (!fs::exists(std::string(FR_BUILD_DIR) + "/bin/fr-analyze"))
    FR_SKIP("fr-analyze is not built: the command-line half needs it");
  std::string out;
  int rc = run_cli(fifo, &out);
  INFO(out);
  CHECK(rc != 124);
  CHECK(out.find("FIFO") != std::string::npos);
}

TEST_CASE("a directory scan names FIFOs, devices and links, and follows no link out",
          "[analyzer]") {
  HangGuard guard;
  TempDir t, outside;
  auto files = make_set(t.sub("set"));
  fs::remove(t.sub("set/manifest.json"));
  // rank 7's dump moves outside the set and is linked back in; a FIFO and a device join.
  const std::string moved = outside.sub("rank7.frlog");
  fs::rename(files[7], moved);
  fs::create_symlink(moved, t.sub("set/rank7-link.frlog"));
  REQUIRE(::mkfifo(t.sub("set/pipe.frlog").c_str(), 0644) == 0);
  bool device = ::mknod(t.sub("set/dev.frlog").c_str(), S_IFCHR | 0600, makedev(1, 3)) == 0;

  json doc = analyze({t.sub("set")});
  INFO(doc["inputs"].dump(1));
  CHECK(has(skipped_entry(doc, "rank7-link.frlog"), "symbolic link"));
  CHECK(has(skipped_entry(doc, "pipe.frlog"), "FIFO"));
  if (device) CHECK(has(skipped_entry(doc, "dev.frlog"), "character device"));
  // The linked dump was not read: rank 7 is missing.
  CHECK(doc["inputs"]["files_read"] == 7);
}

TEST_CASE("a manifest entry under a linked folder is refused", "[analyzer]") {
  HangGuard guard;
  TempDir t, outside;
  auto files = make_set(t.sub("set"));
  // Rank 3's dump moves to a folder outside; the set gets a link to that folder, and the
  // manifest is edited to list the dump through the link.
  fs::create_directory(outside.sub("dir"));
  const std::string base = fs::path(files[3]).filename().string();
  fs::rename(files[3], outside.sub("dir/" + base));
  fs::create_symlink(outside.sub("dir"), t.sub("set/sub"));
  std::string manifest;
  {
    FILE* f = std::fopen(t.sub("set/manifest.json").c_str(), "rb");
    REQUIRE(f);
    char buf[65536];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) manifest.append(buf, n);
    std::fclose(f);
  }
  json m = json::parse(manifest);
  for (auto& p : m["processes"])
    if (p["file"] == base) p["file"] = "sub/" + base;
  {
    FILE* f = std::fopen(t.sub("set/manifest.json").c_str(), "wb");
    REQUIRE(f);
    std::string text = m.dump();
    std::fwrite(text.data(), 1, text.size(), f);
    std::fclose(f);
  }
  json doc = analyze({t.sub("set")});
  INFO(doc["inputs"].dump(1));
  CHECK(has(skipped_entry(doc, "sub/" + base), "symbolic link"));
  CHECK(doc["ranks"]["missing"] == json({3}));
}

TEST_CASE("a manifest that is a FIFO is refused and the set still read", "[analyzer]") {
  HangGuard guard;
  TempDir t;
  auto files = make_set(t.sub("set"));
  make_fifo_at(t.sub("set/manifest.json"));
  json doc = analyze({t.sub("set")});
  INFO(doc["inputs"].dump(1));
  CHECK(has(skipped_entry(doc, "manifest.json"), "FIFO"));
  CHECK(doc["inputs"]["files_read"] == 8);
}

TEST_CASE("sparse 10 GiB files named like torch dumps cost fr-analyze under 1 GiB", "[analyzer]") {
  // Two files of 10 GiB (FR_TEST_SPARSE_GIB: another size) whose first bytes are the start of a
  // pickle (protocol 4, a frame header) and the rest a hole, beside a good set of 8 ranks.
  const std::string analyzer = std::string(FR_BUILD_DIR) + "/bin/fr-analyze";
  if (!fs::exists(analyzer)) FR_SKIP("fr-analyze is not built");
  const char* gib_env = std::getenv("FR_TEST_SPARSE_GIB");
  const off_t gib = gib_env ? std::atoi(gib_env) : 10;
  TempDir t;
  make_set(t.sub("set"));
  for (const char* name : {"nccl_trace_rank_8", "nccl_trace_rank_9.pkl"}) {
    const std::string path = t.sub("set/" + std::string(name));
    const unsigned char head[] = {0x80, 0x04, 0x95, 0x00, 0x10, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00};
    FILE* f = std::fopen(path.c_str(), "wb");
    REQUIRE(f);
    REQUIRE(std::fwrite(head, 1, sizeof head, f) == sizeof head);
    std::fclose(f);
    REQUIRE(::truncate(path.c_str(), gib << 30) == 0);
  }
  const std::string out = t.sub("out.json");
  pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    ::alarm(110);
    if (!std::freopen(out.c_str(), "w", stdout) || !std::freopen("/dev/null", "w", stderr))
      std::_Exit(126);
    ::execl(analyzer.c_str(), analyzer.c_str(), "--json", t.sub("set").c_str(), (char*)nullptr);
    std::_Exit(127);
  }
  int status = 0;
  struct rusage use {};
  REQUIRE(::wait4(child, &status, 0, &use) == child);
  INFO("peak RSS " << use.ru_maxrss / 1024 << " MiB, status " << status);
  REQUIRE(WIFEXITED(status));
  CHECK(use.ru_maxrss < 1024 * 1024);  // KiB: the bound docs/fr-analyze.md states
  std::ifstream in(out);
  json doc = json::parse(in, nullptr, false);
  REQUIRE(doc.is_object());
  CHECK(doc["verdict"]["culprit_ranks"] == json({5}));
  CHECK(has(skipped_entry(doc, "nccl_trace_rank_8"), "foreign"));
  CHECK(has(skipped_entry(doc, "nccl_trace_rank_9.pkl"), "foreign"));
}
