// The container images as `make images` builds them (docker/build-images.sh, buildah with chroot
// isolation and the vfs driver, from a debootstrap base): this test builds them, then checks
// inside them what a cluster relies on. frd answers (--version, or --help where this tree's frd
// has no --version yet); fr-analyze inside the frd image gives the same verdict on a dump set as
// the fr-analyze built here; the frd image runs as a non-root user and its binaries are stripped;
// the agent's init container copies the very libfr_agent.so this tree built into its volume.
// Skips, saying why, where buildah or debootstrap is missing or cannot run (no root, no chroot).
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "shell.h"
#include "skip.h"

namespace fs = std::filesystem;
using fr::examples_test::find_tool;
using fr::examples_test::quote;
using fr::examples_test::sh;
using fr::examples_test::Shell;

namespace {

const std::string kSrc = FR_SOURCE_DIR;
const std::string kBuild = FR_BUILD_DIR;
const std::string kBuildah = "buildah --storage-driver vfs ";

// The version build-images.sh tags the images with: project(fr VERSION x.y.z), else 0.0.0.
std::string project_version() {
  std::ifstream f(kSrc + "/CMakeLists.txt");
  std::string line;
  std::regex re(R"(^project\(fr VERSION ([0-9][0-9.]*))");
  std::smatch m;
  while (std::getline(f, line))
    if (std::regex_search(line, m, re)) return m[1];
  return "0.0.0";
}

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

// The image's OCI configuration (User, Env, Entrypoint, ...), from `buildah inspect`.
nlohmann::json image_config(const std::string& image) {
  Shell r = sh(kBuildah + "inspect --type image " + image);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  auto doc = nlohmann::json::parse(r.output, nullptr, false);
  REQUIRE_FALSE(doc.is_discarded());
  return doc["OCIv1"]["config"];
}

// A working container of an image, removed at the end of the test.
struct Container {
  std::string id;
  explicit Container(const std::string& image) {
    Shell r = sh(kBuildah + "from --pull=never " + image, 300);
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    std::istringstream lines(r.output);
    for (std::string l; std::getline(lines, l);) id = l;  // the last line is the container's name
    REQUIRE_FALSE(id.empty());
  }
  ~Container() { sh(kBuildah + "rm " + quote(id)); }
  Shell run(const std::string& command, const std::string& volume = "") const {
    return sh(kBuildah + "run --isolation chroot " + (volume.empty() ? "" : "-v " + volume + " ") +
                  quote(id) + " -- " + command,
              300);
  }
};

}  // namespace

TEST_CASE("make images builds both images, and the tools work inside them", "[images]") {
  for (const char* tool : {"buildah", "debootstrap", "readelf"})
    if (find_tool(tool).empty() && !fs::exists(std::string("/usr/sbin/") + tool))
      FR_SKIP(tool << " is not installed (scripts/install-deps.sh installs it)");
  if (::geteuid() != 0) FR_SKIP("buildah with chroot isolation and debootstrap need root here");
  Shell info = sh(kBuildah + "info", 60);
  if (info.exit_code != 0) FR_SKIP("buildah cannot run here: " << info.output);
  for (const char* f : {"/lib/libfr_agent.so", "/bin/fr-analyze", "/bin/fr-gendumps"})
    if (!fs::exists(kBuild + f)) FR_SKIP(kBuild << f << " is not built");

  char tmpl[] = "/tmp/fr-images-test-XXXXXX";
  REQUIRE(::mkdtemp(tmpl));
  std::string dir = tmpl;
  struct Cleanup {
    std::string dir;
    ~Cleanup() { fs::remove_all(dir); }
  } cleanup{dir};

  // The build itself, once for all the sections below (Catch2 runs the test case again for each
  // section, in this process), its log kept for a failure's message. A build that cannot reach
  // the Debian mirror is an environment problem, not a broken image: skip, saying so.
  static const Shell built =
      sh("cd " + quote(kSrc) + " && bash docker/build-images.sh " + quote(kBuild) + " >" +
             quote(dir + "/build.log") + " 2>&1; rc=$?; tail -n 40 " + quote(dir + "/build.log") +
             "; exit $rc",
         3000);
  if (built.exit_code != 0 &&
      (built.output.find("Could not resolve") != std::string::npos ||
       built.output.find("Failed getting release file") != std::string::npos))
    FR_SKIP("the Debian mirror cannot be reached to build the images:\n" << built.output);
  INFO(built.output);
  REQUIRE(built.exit_code == 0);
  std::smatch m;
  std::regex step_re(R"(== done \(([0-9]+)s\))");
  static bool told = false;
  if (!told && std::regex_search(built.output, m, step_re))
    WARN("make images took " << m[1] << " s");
  told = true;

  std::string version = project_version();
  std::string frd_image = "localhost/fr-frd:" + version;
  std::string agent_image = "localhost/fr-agent-init:" + version;

  SECTION("the frd image: frd answers, as a non-root user, stripped") {
    CHECK(image_config(frd_image).value("User", "") == "10001:10001");

    Container c(frd_image);
    Shell id = c.run("id -u");
    INFO(id.output);
    CHECK(trim(id.output) == "10001");

    Shell version_out = c.run("/usr/local/bin/frd --version");
    bool has_version = version_out.exit_code == 0;
    Shell help = has_version ? version_out : c.run("/usr/local/bin/frd --help");
    INFO("frd --version or --help:\n" << help.output);
    CHECK(help.exit_code == 0);
    CHECK(help.output.find(has_version ? version : "frd") != std::string::npos);
    Shell analyze_help = c.run("/usr/local/bin/fr-analyze --help");
    CHECK(analyze_help.exit_code == 0);

    // Stripped: no symbol table in any binary the image ships.
    Shell mnt = sh(kBuildah + "mount " + quote(c.id));
    REQUIRE(mnt.exit_code == 0);
    std::string root = trim(mnt.output);
    for (const char* tool : {"frd", "fr-analyze", "fr-run"}) {
      std::string bin = root + "/usr/local/bin/" + tool;
      if (std::string(tool) == "fr-run" && !fs::exists(bin)) continue;  // not in every tree yet
      REQUIRE(fs::exists(bin));
      Shell sections = sh("readelf -S " + quote(bin));
      INFO(tool << ": " << sections.output);
      CHECK(sections.exit_code == 0);
      CHECK(sections.output.find(".symtab") == std::string::npos);
      CHECK(sections.output.find(".debug_info") == std::string::npos);
      WARN(tool << " in the image: " << fs::file_size(bin) / 1024 << " KiB");
    }
    sh(kBuildah + "umount " + quote(c.id));
  }

  SECTION("fr-analyze inside the frd image gives the verdict fr-analyze gives here") {
    std::string dumps = dir + "/dumps";
    Shell gen = sh(quote(kBuild + "/bin/fr-gendumps") + " --ranks 16 --entries 256 " +
                   "--fault rank=5,step=4,kind=hang-host --out " + quote(dumps));
    INFO(gen.output);
    REQUIRE(gen.exit_code == 0);
    // The image's user must read the set: make it world-readable, as a copied set would be.
    sh("chmod -R a+rX " + quote(dir));
    Shell here = sh(quote(kBuild + "/bin/fr-analyze") + " --json " + quote(dumps));
    Container c(frd_image);
    Shell there = c.run("/usr/local/bin/fr-analyze --json /dumps", dumps + ":/dumps:ro");
    INFO("here:\n" << here.output << "\nin the image:\n" << there.output);
    REQUIRE(here.exit_code == there.exit_code);
    auto a = nlohmann::json::parse(here.output, nullptr, false);
    auto b = nlohmann::json::parse(there.output, nullptr, false);
    REQUIRE_FALSE(a.is_discarded());
    REQUIRE_FALSE(b.is_discarded());
    CHECK(b["verdict"]["kind"] == a["verdict"]["kind"]);
    CHECK(b["verdict"]["culprit_ranks"] == a["verdict"]["culprit_ranks"]);
    CHECK(b["verdict"]["culprit_ranks"].dump().find('5') != std::string::npos);
  }

  SECTION("the agent's init container copies this tree's agent into its volume") {
    std::string target = dir + "/agent";
    fs::create_directories(target);
    fs::permissions(target, fs::perms::all);  // the init container runs as nobody
    nlohmann::json argv = image_config(agent_image)["Entrypoint"];
    INFO(argv.dump());
    REQUIRE(argv.is_array());
    std::string command;
    for (const auto& a : argv) command += quote(a.get<std::string>()) + " ";
    Container c(agent_image);
    Shell r = c.run(command, target + ":/fr-agent");
    INFO(r.output);
    CHECK(r.exit_code == 0);
    CHECK(r.output.find("fr agent installed in /fr-agent") != std::string::npos);
    Shell same = sh("cmp " + quote(target + "/libfr_agent.so") + " " +
                    quote(kBuild + "/lib/libfr_agent.so"));
    INFO(same.output);
    CHECK(same.exit_code == 0);
  }
}
