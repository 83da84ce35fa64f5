// Fuzz target: a node's heartbeat history (<node>.slow_history.json, log/slow_history.h), read
// alone and, where read, as part of a dump set through the whole analysis, whose fail-slow
// judges weigh it (analyzer/slow_history.cpp): a file refused has a reason, a file read is
// judged, and neither crashes, overflows or works without bound. The dump set (a synthetic healthy job) is written
// once, to a temporary folder removed at exit; each input becomes its node0's history.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "analyzer/analyze.h"
#include "log/slow_history.h"
#include "synth/synth.h"

namespace {

std::string g_dir;

void remove_set() {
  std::error_code ec;
  if (!g_dir.empty()) std::filesystem::remove_all(g_dir, ec);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* tmp = std::getenv("TMPDIR");
  std::string tmpl = std::string(tmp != nullptr && *tmp ? tmp : "/tmp") + "/fr-fuzz-set.XXXXXX";
  if (mkdtemp(tmpl.data()) == nullptr) {
    std::perror("mkdtemp");
    std::abort();
  }
  g_dir = tmpl;
  std::atexit(remove_set);
  fr::synth::Spec s;
  s.ranks = 4;
  s.entries = 32;
  std::string err;
  if (!fr::synth::write_dump_set(s, g_dir + "/set", &err)) {
    std::fprintf(stderr, "write_dump_set: %s\n", err.c_str());
    std::abort();
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  fr::log::NodeSlowHistory h;
  std::string error;
  std::vector<std::string> notes;
  if (!fr::log::parse_slow_history(text, &h, &error, &notes)) {
    if (error.empty()) __builtin_trap();
    return 0;  // refused as a whole: the analysis only names it (a test covers that)
  }
  {
    std::ofstream out(g_dir + "/set/node0" + fr::log::kSlowHistorySuffix, std::ios::binary);
    out.write(text.data(), std::streamsize(text.size()));
  }
  fr::analyzer::Options opts;
  opts.threads = 1;
  std::string fatal;
  const nlohmann::json doc = fr::analyzer::analyze_paths({g_dir + "/set"}, opts, &fatal);
  if (!doc.is_object()) {
    std::fprintf(stderr, "the dump set no longer analyses: %s\n", fatal.c_str());
    std::abort();
  }
  return 0;
}
