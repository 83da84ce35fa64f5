// The .deb as a user gets it: cpack builds the packages from this build tree, dpkg -x unpacks them
// into a scratch root (no root rights, no dpkg database touched), and the tools run from there:
// each --version, fr-analyze on a small dump set, fr-run preloading the installed agent into ranks
// of the installed emulation, and the systemd unit pointing at the installed frd.
#include <unistd.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "fr/version.h"
#include "proc.h"
#include "skip.h"
#include "testing/files.h"

namespace fs = std::filesystem;
using namespace fr::clitest;
using fr::test::slurp;

namespace {

std::string on_path(const std::string& name) {
  for (const char* dir : {"/usr/bin", "/bin", "/usr/local/bin"}) {
    std::string p = std::string(dir) + "/" + name;
    if (::access(p.c_str(), X_OK) == 0) return p;
  }
  return {};
}

}  // namespace

TEST_CASE("the .deb installs into a scratch root and its tools run from there", "[cli][package]") {
  const std::string build = FR_BUILD_DIR;
  std::string dpkg = on_path("dpkg"), dpkg_deb = on_path("dpkg-deb");
  if (dpkg.empty() || dpkg_deb.empty()) FR_SKIP("dpkg is not installed: cannot unpack a .deb");
  for (const char* f :
       {"bin/frd", "bin/fr-analyze", "bin/fr-run", "bin/fr-simjob", "bin/fr-simjob-rank",
        "bin/fr-gendumps", "lib/libfr_agent.so", "sim/lib/libnccl.so.2", "sim/lib/libcuda.so.1"})
    if (!fs::exists(build + "/" + f)) FR_SKIP(build << "/" << f << " is not built");

  TempDir d;
  Result r = run({FR_CPACK, "--config", build + "/CPackConfig.cmake", "-B", d.path + "/pkg"}, {},
                 d.path, "", 280);
  INFO("cpack: " << r.out << r.err);
  REQUIRE(r.status == 0);
  std::string fr_deb = d.path + "/pkg/fr_" FR_VERSION "_amd64.deb";
  std::string emu_deb = d.path + "/pkg/fr-emulation_" FR_VERSION "_amd64.deb";
  if (!fs::exists(fr_deb)) {  // another architecture: take whatever names cpack chose
    for (const auto& e : fs::directory_iterator(d.path + "/pkg")) {
      std::string n = e.path().filename().string();
      if (n.rfind("fr_", 0) == 0 && e.path().extension() == ".deb") fr_deb = e.path().string();
      if (n.rfind("fr-emulation_", 0) == 0 && e.path().extension() == ".deb")
        emu_deb = e.path().string();
    }
  }
  REQUIRE(fs::exists(fr_deb));
  REQUIRE(fs::exists(emu_deb));

  // The control data: name, version, and the shared libraries it needs (gRPC, protobuf).
  Result f = run({dpkg_deb, "-f", fr_deb, "Package", "Version", "Depends"}, {}, d.path);
  CHECK(f.out.find("Package: fr\n") != std::string::npos);
  CHECK(f.out.find("Version: " FR_VERSION) != std::string::npos);
  CHECK(f.out.find("libgrpc") != std::string::npos);
  f = run({dpkg_deb, "-f", emu_deb, "Depends"}, {}, d.path);
  CHECK(f.out.find("fr (= " FR_VERSION ")") != std::string::npos);
  // The base package holds no emulation: it must never shadow a real NCCL.
  Result list = run({dpkg_deb, "-c", fr_deb}, {}, d.path);
  CHECK(list.out.find("libnccl") == std::string::npos);
  CHECK(list.out.find("fr-simjob") == std::string::npos);

  std::string root = d.path + "/root";
  for (const auto& deb : {fr_deb, emu_deb})
    REQUIRE(run({dpkg, "-x", deb, root}, {}, d.path).status == 0);
  const std::string prefix = root + "/opt/fr";
  for (const char* f : {"lib/libfr_agent.so", "share/fr/python/sitecustomize.py",
                        "share/doc/fr/README.md", "share/doc/fr/fr-run.md",
                        "share/doc/fr/install.md", "sim/lib/libnccl.so.2", "sim/lib/libcuda.so.1"})
    CHECK(fs::exists(prefix + "/" + f));
  std::string unit = slurp(prefix + "/lib/systemd/system/frd-node.service");
  CHECK(unit.find("ExecStart=/opt/fr/bin/frd node --coordinator") != std::string::npos);

  for (const char* tool :
       {"frd", "fr-analyze", "fr-run", "fr-simjob", "fr-simjob-rank", "fr-gendumps"}) {
    INFO(tool);
    Result v = run({prefix + "/bin/" + tool, "--version"},
                   {{"LD_LIBRARY_PATH", prefix + "/sim/lib"}}, d.path);
    CHECK(v.status == 0);
    CHECK(v.out == std::string(tool) + " " FR_VERSION "\n");
  }

  // fr-analyze on a small dump set with a planted hang.
  Result g = run({prefix + "/bin/fr-gendumps", "--ranks", "8", "--entries", "64", "--steps", "6",
                  "--fault", "rank=3,step=4,kind=hang-host", "--out", d.path + "/set"},
                 {}, d.path);
  REQUIRE(g.status == 0);
  Result a = run({prefix + "/bin/fr-analyze", "--json", d.path + "/set"}, {}, d.path);
  INFO(a.err);
  REQUIRE(a.status <= 1);
  nlohmann::json j = nlohmann::json::parse(a.out);
  CHECK(j["verdict"]["kind"] == "not_entered");
  CHECK(j["verdict"]["culprit_ranks"] == nlohmann::json::array({3}));

  // The installed agent, preloaded by the installed fr-run into two ranks of the installed
  // emulation, writes one flight log per rank.
  std::string logs = d.path + "/shm";
  fs::create_directories(d.path + "/run");
  std::vector<std::unique_ptr<Proc>> ranks;
  for (int rk = 0; rk < 2; ++rk)
    ranks.push_back(std::make_unique<Proc>(
        std::vector<std::string>{prefix + "/bin/fr-run", "--job-id", "pkgtest", "--log-dir", logs,
                                 "--", prefix + "/bin/fr-simjob-rank", "--nodes", "1",
                                 "--ranks-per-node", "2", "--tp", "1", "--pp", "1", "--steps", "3"},
        std::map<std::string, std::string>{
            {"RANK", std::to_string(rk)},
            {"WORLD_SIZE", "2"},
            {"LOCAL_RANK", std::to_string(rk)},
            {"CUDA_VISIBLE_DEVICES", "0,1"},
            {"LD_LIBRARY_PATH", prefix + "/sim/lib"},
            {"FRSIM_SHM_PREFIX", "/frpkg" + std::to_string(::getpid())},
            {"FRSIMJOB_RUN_DIR", d.path + "/run"},
            {"FRSIMJOB_BOARD", "<unset>"},
            {"LD_PRELOAD", "<unset>"}},
        d.path, "pkgrank" + std::to_string(rk)));
  for (auto& p : ranks) {
    INFO(p->err());
    REQUIRE(p->wait(60));
    CHECK(p->status == 0);
  }
  int frlogs = 0;
  for (const auto& e : fs::directory_iterator(logs))
    frlogs += e.path().extension() == ".frlog" &&
              e.path().filename().string().rfind("fr.pkgtest.", 0) == 0;
  CHECK(frlogs == 2);
  Result snap = run({prefix + "/bin/frd", "snapshot", "--log-dir", logs, "--out", d.path + "/snap"},
                    {}, d.path);
  CHECK(snap.status == 0);
  Result a2 = run({prefix + "/bin/fr-analyze", "--json", d.path + "/snap"}, {}, d.path);
  CHECK(nlohmann::json::parse(a2.out)["verdict"]["kind"] == "no_hang");
}
