// Every tool answers --version with the one project version (fr/version.h, from CMake's
// project(VERSION)), on stdout, exit 0.
#include <unistd.h>

#include <string>

#include <catch2/catch.hpp>

#include "fr/version.h"
#include "proc.h"
#include "skip.h"

using namespace fr::clitest;

TEST_CASE("every tool prints the project version", "[cli][version]") {
  const std::string bin = std::string(FR_BUILD_DIR) + "/bin/";
  TempDir d;
  for (const char* tool :
       {"frd", "fr-analyze", "fr-run", "fr-simjob", "fr-simjob-rank", "fr-gendumps"}) {
    INFO(tool);
    if (::access((bin + tool).c_str(), X_OK) != 0) FR_SKIP(bin << tool << " is not built");
    // fr-simjob-rank is an NCCL program: it loads only with the emulation on its library path.
    Result r = run({bin + tool, "--version"},
                   {{"LD_LIBRARY_PATH", std::string(FR_BUILD_DIR) + "/sim/lib"}}, d.path);
    CHECK(r.status == 0);
    CHECK(r.out == std::string(tool) + " " + FR_VERSION + "\n");
    CHECK(r.err.empty());
  }
  CHECK(std::string(FR_VERSION).find('.') != std::string::npos);
}
