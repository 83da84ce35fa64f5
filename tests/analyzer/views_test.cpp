// One rank seen twice in a dump set (analyzer/views.cpp) and the verdict from the stacks alone
// (context.cpp, stack_outlier): a stacks file whose dump is not there stands for its process, a
// torch dump and the stacks of the same rank make one rank, and where nothing recorded an op the
// ranks whose stacks stand apart from all the others are the culprits.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <string>

#include "analyzer/analyze.h"
#include "log/side_files.h"
#include "temp_dir.h"

namespace fs = std::filesystem;
using fr::test::TempDir;
using nlohmann::json;

namespace {

// The main thread of a Python process, innermost first.
fr::log::ProcessStacks stacks(int rank, const std::vector<std::string>& python_frames) {
  fr::log::ProcessStacks s;
  s.pid = 1000 + rank;
  s.rank = rank;
  s.python = true;
  s.taker = "libdw+py-spy";
  fr::log::ThreadStack t;
  t.tid = s.pid;
  t.name = "python3";
  for (const auto& f : python_frames) {
    fr::log::StackFrame fr;
    fr.function = f;
    fr.file = "/job/train.py";
    fr.line = 10 + int(t.frames.size());
    fr.kind = "python";
    t.frames.push_back(fr);
  }
  s.threads.push_back(t);
  return s;
}

void write(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

json analyze_dir(const std::string& dir) {
  std::string err;
  json doc = fr::analyzer::analyze_paths({dir}, {}, &err);
  INFO(err);
  REQUIRE(doc.is_object());
  return doc;
}

const std::vector<std::string> kInCollective = {"wait", "all_reduce", "train_step", "main"};

}  // namespace

TEST_CASE("stacks alone: the rank apart from all the others is named", "[analyzer]") {
  TempDir t;
  const std::string dir = t.sub("set");
  fs::create_directories(dir);
  for (int r = 0; r < 3; ++r)
    write(dir + "/n0-pid" + std::to_string(1000 + r) + "-rank" + std::to_string(r) +
              ".torchfr.stacks.json",
          fr::log::stacks_to_text(stacks(r, kInCollective)));
  write(dir + "/n0-pid1003-rank3.torchfr.stacks.json",
        fr::log::stacks_to_text(stacks(3, {"hang_in_python", "train_step", "main"})));
  json a = analyze_dir(dir);
  INFO(a.dump(1).substr(0, 3000));
  CHECK(a["verdict"]["kind"] == "stack_outlier");
  CHECK(a["verdict"]["culprit_ranks"] == json::array({3}));
  const std::string summary = a["verdict"]["summary"];
  CHECK(summary.find("ranks 0-2") != std::string::npos);
  CHECK(summary.find("hang_in_python") != std::string::npos);
  CHECK(a["ranks"]["found"].size() == 4);
}

TEST_CASE("stacks alone: no rank stands apart when the groups are even", "[analyzer]") {
  TempDir t;
  const std::string dir = t.sub("set");
  fs::create_directories(dir);
  for (int r = 0; r < 4; ++r)
    write(dir + "/n0-pid" + std::to_string(1000 + r) + "-rank" + std::to_string(r) +
              ".torchfr.stacks.json",
          fr::log::stacks_to_text(
              stacks(r, r < 2 ? kInCollective : std::vector<std::string>{"load_batch", "main"})));
  json a = analyze_dir(dir);
  CHECK(a["verdict"]["kind"] != "stack_outlier");
  CHECK(a["verdict"]["culprit_ranks"].empty());
}

TEST_CASE("torch's dump and the stacks of one rank make one rank, not a duplicate", "[analyzer]") {
  TempDir t;
  const std::string dir = t.sub("set");
  fs::create_directories(dir);
  // torch 2.15's own dumps of a 6-rank gloo job whose rank 3 stays on the host, named as frd
  // names the dumps it gathers; the stacks of rank 3 beside its dump, of rank 5 alone.
  const std::string data =
      std::string(FR_SOURCE_DIR) + "/tests/analyzer/torch/data/torch-2.15-gloo/hang/file";
  for (int r = 0; r < 6; ++r)
    fs::copy_file(
        data + "/fr_rank_" + std::to_string(r),
        dir + "/n0-pid" + std::to_string(1000 + r) + "-rank" + std::to_string(r) + ".torchfr");
  write(dir + "/n0-pid1003-rank3.torchfr.stacks.json",
        fr::log::stacks_to_text(stacks(3, {"hang_in_python", "main"})));
  write(dir + "/n0-pid1005-rank5-gone.stacks.json",
        fr::log::stacks_to_text(stacks(5, kInCollective)));
  json a = analyze_dir(dir);
  INFO(a.dump(1).substr(0, 3000));
  CHECK(a["verdict"]["kind"] == "not_entered");
  CHECK(a["verdict"]["culprit_ranks"] == json::array({3}));
  CHECK(a["ranks"]["found"].size() == 6);
  for (const auto& s : a["inputs"]["skipped"])
    CHECK(s["error"].get<std::string>().find("duplicate") == std::string::npos);
  // Rank 3's evidence carries the stack that came beside its torch dump; rank 5's came alone.
  bool rank3_stack = false, rank5_stack = false;
  for (const auto& e : a["verdict"]["evidence"]) {
    if (e.value("rank", -1) == 3 && e.contains("stack")) rank3_stack = true;
    if (e.value("rank", -1) == 5 && e.contains("stack")) rank5_stack = true;
  }
  CHECK(rank3_stack);
  CHECK(rank5_stack);
}
