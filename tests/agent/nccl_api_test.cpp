// The NCCL API list (proto/fr/nccl_api.def) and the NIXL list (agent/nixl_api.def) against every
// place that must hold the same functions: what libfr_agent.so, the emulation's libnccl.so.2 and
// the test double export (names and pnccl aliases), the agent's version script, the nccl.h
// headers at hand (a function newer than a header may be missing from it: the row's `since`
// says which release declares it first), the op codes of FR_OP_LIST, and the real libnixl.so. A
// function in one of these places and not in the list, or the other way round, fails here (where
// the build has not already refused it).
#include <fnmatch.h>
#include <glob.h>
#include <stdio.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "fr/nccl_api.h"
#include "skip.h"
#include "testing/files.h"

using fr::test::exists;

namespace {

// The NIXL list, with the agent's ABI types reduced to tokens (only the names are read here).
struct NixlRow {
  bool wrapped;
  uint16_t op;
  const char* mangled;
};
const NixlRow kNixlApi[] = {
#define FR_NIXL_FN(fn, wrap, wrapper, op, ret, mangled, ...) \
  {std::string_view(#wrap) == "WRAP", FR_OP_##op, mangled},
#include "nixl_api.def"
};

// Defined, exported symbols of a shared library, with nm's type letter.
std::map<std::string, char> exports_of(const std::string& lib) {
  FILE* p = popen(("nm -D --defined-only '" + lib + "' 2>&1").c_str(), "r");
  REQUIRE(p != nullptr);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  INFO(out);
  REQUIRE(pclose(p) == 0);
  std::map<std::string, char> names;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    size_t sp = line.rfind(' ');
    if (sp == std::string::npos || sp < 2) continue;
    names[line.substr(sp + 1)] = line[sp - 1];
  }
  return names;
}

bool is_nccl_function(const std::string& name, char type) {
  return type == 'T' && (name.rfind("nccl", 0) == 0 || name.rfind("pnccl", 0) == 0);
}

std::set<std::string> listed_names(bool with_aliases, bool (*keep)(const fr::NcclFn&)) {
  std::set<std::string> names;
  for (const fr::NcclFn& f : fr::kNcclApi) {
    if (!keep(f)) continue;
    names.insert(f.name);
    if (with_aliases) names.insert(std::string("p") + f.name);
  }
  return names;
}

std::string joined(const std::set<std::string>& s) {
  std::string out;
  for (const auto& x : s) out += x + " ";
  return out;
}

// `have` (the functions a library exports) against `want` (the list's): both differences empty.
void same_functions(const std::map<std::string, char>& exports, const std::set<std::string>& want) {
  std::set<std::string> have, missing, extra;
  for (const auto& [name, type] : exports)
    if (is_nccl_function(name, type)) have.insert(name);
  for (const auto& f : want)
    if (!have.count(f)) missing.insert(f);
  for (const auto& f : have)
    if (!want.count(f)) extra.insert(f);
  INFO("listed but not exported: " << joined(missing));
  INFO("exported but not listed: " << joined(extra));
  CHECK(missing.empty());
  CHECK(extra.empty());
}

}  // namespace

TEST_CASE("the agent wraps exactly the functions of the NCCL API list", "[agent]") {
  same_functions(exports_of(FR_AGENT_LIB),
                 listed_names(false, [](const fr::NcclFn&) { return true; }));
}

TEST_CASE("the emulation defines the list's functions its rows say it does, with pncclX aliases",
          "[agent]") {
  std::set<std::string> want =
      listed_names(true, [](const fr::NcclFn& f) { return f.emu != fr::NcclEmu::NONE; });
  // Beyond the list: window address queries that torch and nccl4py link and the agent leaves out
  // on purpose (docs/agent.md), so it does not wrap them.
  for (const char* f :
       {"ncclGetLsaMultimemDevicePointer", "ncclGetPeerDevicePointer", "ncclGetLsaDevicePointer"}) {
    want.insert(f);
    want.insert(std::string("p") + f);
  }
  same_functions(exports_of(FR_SIM_NCCL), want);
}

TEST_CASE("the test double defines every function of the list, with pncclX aliases", "[agent]") {
  same_functions(exports_of(FR_DOUBLE_LIB),
                 listed_names(true, [](const fr::NcclFn&) { return true; }));
}

TEST_CASE("the agent's version script exports every listed function and NIXL wrapper", "[agent]") {
  std::ifstream in(FR_AGENT_EXPORTS_MAP);
  REQUIRE(in.good());
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  text = std::regex_replace(text, std::regex(R"(/\*[\s\S]*?\*/)"), " ");
  const size_t global = text.find("global:"), local = text.find("local:");
  REQUIRE(global != std::string::npos);
  REQUIRE(local != std::string::npos);
  std::vector<std::string> patterns;
  std::istringstream words(text.substr(global + 7, local - global - 7));
  for (std::string w; std::getline(words, w, ';');) {
    w = std::regex_replace(w, std::regex(R"(\s+)"), "");
    if (!w.empty()) patterns.push_back(w);
  }
  auto exported = [&](const char* name) {
    for (const auto& p : patterns)
      if (fnmatch(p.c_str(), name, 0) == 0) return true;
    return false;
  };
  for (const fr::NcclFn& f : fr::kNcclApi) {
    INFO(f.name);
    CHECK(exported(f.name));
  }
  // (The script's nixlAgent patterns also cover the CALL rows, which the agent does not define.)
  for (const NixlRow& r : kNixlApi) {
    INFO(r.mangled);
    if (r.wrapped) CHECK(exported(r.mangled));
  }
}

// Every nccl.h at hand: the one the agent is built against, the toolkit's (2.28), and 2.30's.
TEST_CASE("each listed function is in every nccl.h from the release its row names", "[agent]") {
  const std::string headers[] = {FR_NCCL_HEADER, FR_CUDA_HOME "/include/nccl.h",
                                 "/opt/fr-deps/nccl-2.30.7/include/nccl.h"};
  const std::regex decl(
      R"(^\s*(?:ncclResult_t|const\s+char\s*\*|void)\s+(nccl[A-Za-z0-9_]+)\s*\()");
  const std::regex version(R"(^#define\s+NCCL_VERSION_CODE\s+([0-9]+))");
  int checked = 0;
  for (const std::string& header : headers) {
    if (!exists(header)) continue;
    std::ifstream in(header);
    REQUIRE(in.good());
    std::set<std::string> declared;
    int code = 0;
    for (std::string line; std::getline(in, line);) {
      std::smatch m;
      if (std::regex_search(line, m, decl)) declared.insert(m[1]);
      if (std::regex_search(line, m, version)) code = std::stoi(m[1]);
    }
    INFO(header << " (NCCL_VERSION_CODE " << code << ")");
    REQUIRE(code >= 22800);
    for (const fr::NcclFn& f : fr::kNcclApi) {
      INFO(f.name << ", since " << f.since);
      CHECK(declared.count(f.name) == (f.since >= 0 && f.since <= code ? 1u : 0u));
    }
    ++checked;
  }
  CHECK(checked >= 1);
}

TEST_CASE("every op of FR_OP_LIST a call records has its rows in the lists", "[agent]") {
  std::set<uint16_t> listed;
  for (const fr::NcclFn& f : fr::kNcclApi) listed.insert(f.op);
  for (const NixlRow& r : kNixlApi) listed.insert(r.op);
  // Records no call of its own writes: a graph's replay, a shrink's excluded ranks.
  const std::set<uint16_t> not_calls = {FR_OP_NONE, FR_OP_GRAPH_LAUNCH, FR_OP_COMM_SHRINK_EXCLUDED};
#define FR_X(e, v, s, k)                              \
  {                                                   \
    INFO("FR_OP_" #e);                                \
    CHECK(listed.count(v) + not_calls.count(v) >= 1); \
  }
  FR_OP_LIST(FR_X)
#undef FR_X
  // The op semantics the analysis reads come from the rows (and agree among them: nccl_api.h).
  CHECK(fr::nccl_op(FR_OP_BCAST).rooted);
  CHECK(fr::nccl_op(FR_OP_REDUCE).reducing);
  CHECK(fr::nccl_op(FR_OP_SEND).torch == std::string("send"));
  CHECK(fr::nccl_op(FR_OP_PUT_SIGNAL).torch == nullptr);
}

TEST_CASE("the agent wraps exactly the NIXL list's WRAP methods", "[agent]") {
  std::set<std::string> want, have;
  for (const NixlRow& r : kNixlApi)
    if (r.wrapped) want.insert(r.mangled);
  for (const auto& [name, type] : exports_of(FR_AGENT_LIB))
    if (name.rfind("_ZN9nixlAgent", 0) == 0 || name.rfind("_ZNK9nixlAgent", 0) == 0)
      have.insert(name);
  CHECK(have == want);
}

TEST_CASE("the real libnixl.so defines every method of the NIXL list", "[agent]") {
  glob_t g = {};
  const int found =
      glob("/opt/fr-nixl/lib/python3*/site-packages/.nixl*libs/libnixl.so", 0, nullptr, &g);
  const std::string lib = found == 0 && g.gl_pathc > 0 ? g.gl_pathv[0] : "";
  globfree(&g);
  if (lib.empty()) FR_SKIP("no NIXL 1.5 in /opt/fr-nixl (scripts/install-deps.sh)");
  const auto exports = exports_of(lib);
  for (const NixlRow& r : kNixlApi) {
    INFO(lib << ": " << r.mangled);
    CHECK(exports.count(r.mangled) == 1);
  }
}
