// What the agent promises about the systems around it: it wraps every function of the nccl.h it
// was built against (a new NCCL release shows here what is missing), it asks glibc for nothing
// newer than 2.28, and it loads and records in a Debian 11 root (glibc 2.31).
#include <stdio.h>
#include <sys/stat.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "fr/nccl_api.h"
#include "skip.h"
#include "test_util.h"

using fr::agent_test::records_of;
using fr::agent_test::run;
using fr::agent_test::RunResult;
using fr::agent_test::slurp;

namespace {

constexpr bool kSanitized = FR_AGENT_SANITIZED != 0;

std::string command_output(const std::string& cmd, int* status = nullptr) {
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  std::string out = slurp(p);
  int st = pclose(p);
  if (status != nullptr) *status = st;
  return out;
}

// Defined, exported symbols of a shared library.
std::set<std::string> exports_of(const std::string& lib) {
  int st = 0;
  std::string out = command_output("nm -D --defined-only '" + lib + "' 2>&1", &st);
  REQUIRE(st == 0);
  std::set<std::string> names;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    size_t sp = line.rfind(' ');
    if (sp == std::string::npos || sp < 1 || line[sp - 1] == 'A') continue;
    names.insert(line.substr(sp + 1));
  }
  return names;
}

// Functions nccl.h declares (their pnccl profiling aliases aside).
std::set<std::string> declared_in(const std::string& header) {
  std::ifstream in(header);
  REQUIRE(in.good());
  std::set<std::string> names;
  const std::regex decl(
      R"(^\s*(?:ncclResult_t|const\s+char\s*\*|void)\s+(nccl[A-Za-z0-9_]+)\s*\()");
  std::string line;
  while (std::getline(in, line)) {
    std::smatch m;
    if (std::regex_search(line, m, decl)) names.insert(m[1]);
  }
  return names;
}

bool is_dir(const std::string& p) {
  struct stat st;
  return stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

}  // namespace

TEST_CASE("the agent wraps every function of the nccl.h it was built against", "[agent]") {
  const std::set<std::string> declared = declared_in(FR_NCCL_HEADER);
  INFO("nccl.h: " << FR_NCCL_HEADER);
  REQUIRE(declared.count("ncclAllReduce") == 1);
  REQUIRE(declared.count("ncclGetErrorString") == 1);
  // Left out on purpose (docs/agent.md): process-wide settings that involve no communicator and
  // no GPU work, so they cannot take part in a hang; unwrapped, they bind straight to NCCL.
  const std::set<std::string> left_out = {
      "ncclParamBind",    "ncclParamGetI8",    "ncclParamGetI16",
      "ncclParamGetI32",  "ncclParamGetI64",   "ncclParamGetU8",
      "ncclParamGetU16",  "ncclParamGetU32",   "ncclParamGetU64",
      "ncclParamGetStr",  "ncclParamGet",      "ncclParamGetParameter",
      "ncclParamDumpAll", "ncclSetEncryption", "ncclParamGetAllParameterKeys"};
  const std::set<std::string> ours = exports_of(FR_AGENT_LIB);
  std::vector<std::string> missing;
  for (const auto& f : declared)
    if (!ours.count(f) && !left_out.count(f)) missing.push_back(f);
  INFO("declared by nccl.h, neither wrapped nor left out on purpose: " << [&] {
    std::string s;
    for (const auto& f : missing) s += f + " ";
    return s;
  }());
  CHECK(missing.empty());
  // Every export is NCCL's, from that header or from the NCCL API list (fr/nccl_api.def: the
  // device API's host calls, and what an older header lacks), plus the dynamic linker's lookups.
  std::set<std::string> beyond_header = {
      "dlsym", "dlvsym",
      // the agent as NCCL's profiler plugin (data, not functions NCCL declares)
      "ncclProfiler_v5", "ncclProfiler_v6", "ncclProfiler_v7"};
  for (const fr::NcclFn& f : fr::kNcclApi) beyond_header.insert(f.name);
  // The CUDA graph calls the agent interposes to record replays (runtime and driver entries).
  const std::set<std::string> cuda_graph = {"cuGetProcAddress",
                                            "cuGetProcAddress_v2",
                                            "cuGraphInstantiateWithFlags",
                                            "cuGraphInstantiateWithParams",
                                            "cuGraphInstantiateWithParams_ptsz",
                                            "cuGraphLaunch",
                                            "cuGraphLaunch_ptsz",
                                            "cudaGraphInstantiate",
                                            "cudaGraphInstantiateWithFlags",
                                            "cudaGraphInstantiateWithParams",
                                            "cudaGraphInstantiateWithParams_ptsz",
                                            "cudaGraphLaunch",
                                            "cudaGraphLaunch_ptsz"};
  // NIXL's nixlAgent methods (agent/wrappers_nixl.cpp; tests/agent/process_test.cpp counts them).
  auto nixl = [](const std::string& f) {
    return f.rfind("_ZN9nixlAgent", 0) == 0 || f.rfind("_ZNK9nixlAgent", 0) == 0;
  };
  for (const auto& f : ours) {
    INFO("exported: " << f);
    CHECK((declared.count(f) || beyond_header.count(f) || cuda_graph.count(f) || nixl(f)));
  }
  for (const auto& f : left_out) {
    INFO("left out but exported: " << f);
    CHECK(!ours.count(f));
  }
}

TEST_CASE("the agent requires no glibc symbol version above 2.28", "[agent]") {
  if (kSanitized)
    FR_SKIP(
        "sanitizer build: the shipped agent is the plain build; this one links a sanitizer runtime");
  int st = 0;
  std::string out = command_output("objdump -T '" + std::string(FR_AGENT_LIB) + "' 2>&1", &st);
  REQUIRE(st == 0);
  const std::regex ver(R"(\(GLIBC_([0-9]+)\.([0-9]+)(?:\.[0-9]+)?\)\s+(\S+))");
  int checked = 0;
  std::string newest;
  int nmaj = 0, nmin = 0;
  for (auto it = std::sregex_iterator(out.begin(), out.end(), ver); it != std::sregex_iterator();
       ++it) {
    int maj = std::stoi((*it)[1]), mnr = std::stoi((*it)[2]);
    ++checked;
    if (std::make_pair(maj, mnr) > std::make_pair(nmaj, nmin)) {
      nmaj = maj, nmin = mnr;
      newest = (*it)[0];
    }
  }
  INFO("newest: " << newest);
  REQUIRE(checked > 10);
  CHECK(std::make_pair(nmaj, nmin) <= std::make_pair(2, 28));
  // glibc 2.28..2.33 keep dlopen in libdl and pthread_create in libpthread.
  std::string dyn = command_output("readelf -d '" + std::string(FR_AGENT_LIB) + "' 2>&1");
  CHECK(dyn.find("[libdl.so.2]") != std::string::npos);
  CHECK(dyn.find("[libpthread.so.0]") != std::string::npos);
}

// The root is made once by scripts/install-deps.sh (debootstrap bullseye) and cached.
TEST_CASE("a program with the agent preloaded starts and records in a Debian 11 root", "[agent]") {
  if (kSanitized)
    FR_SKIP("sanitizer build: a sanitized agent cannot be preloaded into another program");
  if (geteuid() != 0) FR_SKIP("chroot needs root");
  const char* env_root = getenv("FR_BULLSEYE_ROOT");
  const std::string root = env_root && *env_root ? env_root : "/var/cache/fr/bullseye-root";
  if (access((root + "/bin/true").c_str(), X_OK) != 0 || !is_dir(root + "/tmp"))
    FR_SKIP("no Debian 11 root at " << root
                                    << " (scripts/install-deps.sh makes it with debootstrap "
                                       "bullseye; it could not be made on this machine)");
  std::string libc = command_output("readlink '" + root + "/lib/x86_64-linux-gnu/libc.so.6'");
  INFO("the root's libc.so.6 -> " << libc);
  CHECK(libc.find("2.31") != std::string::npos);

  // A private folder inside the root for the libraries and the log.
  std::string tmpl = root + "/tmp/fr-oldroot.XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  REQUIRE(mkdtemp(buf.data()) != nullptr);
  const std::string host_dir = buf.data();
  const std::string dir = host_dir.substr(root.size());  // as seen inside the root
  struct Cleanup {
    std::string d;
    ~Cleanup() {
      int ignored = system(("rm -rf '" + d + "'").c_str());
      (void)ignored;
    }
  } cleanup{host_dir};
  REQUIRE(system(("cp '" FR_AGENT_LIB "' '" + host_dir +
                  "/libfr_agent.so' && cp '" FR_OLDROOT_NCCL "' '" + host_dir +
                  "/libnccl.so.2' && cp '" FR_OLDROOT_DRIVER "' '" + host_dir +
                  "/libdriver.so' && mkdir '" + host_dir + "/logs'")
                     .c_str()) == 0);

  auto in_root = [&](const std::string& preload) {
    return run({"/usr/sbin/chroot", root, "/usr/bin/env", "LD_LIBRARY_PATH=" + dir,
                "LD_PRELOAD=" + preload, "FR_LOG_DIR=" + dir + "/logs", "/bin/true"},
               {{"LD_PRELOAD", ""}});
  };
  // Without the agent: the program and its NCCL work there.
  RunResult plain = in_root(dir + "/libdriver.so");
  INFO("plain: " << plain.out << plain.err);
  REQUIRE(plain.exit_code == 0);
  REQUIRE(plain.values["calls"] == "0,0,0,0");

  RunResult r = in_root(dir + "/libfr_agent.so:" + dir + "/libdriver.so");
  INFO("with the agent: " << r.out << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(r.values["calls"] == "0,0,0,0");
  std::vector<std::string> logs;
  if (DIR* d = opendir((host_dir + "/logs").c_str())) {
    while (dirent* e = readdir(d))
      if (strstr(e->d_name, ".frlog") != nullptr) logs.push_back(host_dir + "/logs/" + e->d_name);
    closedir(d);
  }
  REQUIRE(logs.size() == 1);
  auto read = fr::log::read_log(logs[0]);
  INFO(read.message);
  REQUIRE(read.ok());
  CHECK(records_of(*read.log, FR_OP_COMM_INIT_RANK).size() == 1);
  auto ars = records_of(*read.log, FR_OP_ALLREDUCE);
  REQUIRE(ars.size() == 1);
  CHECK(ars[0].result == 0);
  CHECK(ars[0].count == 4);
  CHECK(read.log->header.nccl_version == 22809);
}
