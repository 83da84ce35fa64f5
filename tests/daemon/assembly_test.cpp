// Dump sets on the coordinator (daemon/logic/assembly.h): the header check, dumps placed in the
// incident's directory, uploads received whole or not at all, and the assembled dump set.
#include <catch2/catch.hpp>

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

#include "coordinator_fixture.h"
#include "daemon/logic/assembly.h"
#include "daemon/base/crc32c.h"
#include "common/files.h"
#include "fixture.h"
#include "testing/clock.h"
#include "testing/files.h"

using namespace fr::daemon;
using namespace fr::daemon::test;
using fr::test::exists;
using fr::test::kSec;
using fr::test::slurp;

TEST_CASE("a dump written into the incident's directory is checked file by file", "[daemon]") {
  TempDir dir, outside;
  std::string err;
  std::string target = dir.path + "/job1/incident-0001";
  REQUIRE(fr::files::make_dirs(target, &err));
  std::string bytes(5000, 'q');
  uint32_t crc = crc32c(0, bytes.data(), bytes.size());
  DumpHeader h = header("incident-0001", "n0");
  h.files.push_back({"n0-a.frlog", bytes.size(), crc});
  UploadLimits lim;
  // Not there yet.
  CHECK(check_placed(target, h, lim, &err) == PlacedCheck::kMismatch);
  std::ofstream(target + "/n0-a.frlog", std::ios::binary) << bytes;
  CHECK(check_placed(target, h, lim, &err) == PlacedCheck::kOk);
  // Other contents of the same size.
  std::ofstream(target + "/n0-a.frlog", std::ios::binary) << std::string(5000, 'r');
  CHECK(check_placed(target, h, lim, &err) == PlacedCheck::kMismatch);
  CHECK(err.find("checksum") != std::string::npos);
  // A link to the right bytes elsewhere is not a placed file.
  ::unlink((target + "/n0-a.frlog").c_str());
  std::ofstream(outside.path + "/real.frlog", std::ios::binary) << bytes;
  REQUIRE(::symlink((outside.path + "/real.frlog").c_str(), (target + "/n0-a.frlog").c_str()) == 0);
  CHECK(check_placed(target, h, lim, &err) == PlacedCheck::kMismatch);
  // A FIFO does not block the check.
  ::unlink((target + "/n0-a.frlog").c_str());
  REQUIRE(::mkfifo((target + "/n0-a.frlog").c_str(), 0644) == 0);
  CHECK(check_placed(target, h, lim, &err) == PlacedCheck::kMismatch);
  // Names outside the directory, or not dump files, are refused outright.
  h.files[0].name = "../real.frlog";
  CHECK(check_placed(target, h, lim, &err) == PlacedCheck::kBadHeader);
  h.files[0].name = "n0-a.txt";
  CHECK(check_placed(target, h, lim, &err) == PlacedCheck::kBadHeader);
  h.files[0].name = "n0-a.frlog";
  h.files[0].size = lim.max_file_bytes + 1;
  CHECK(check_placed(target, h, lim, &err) == PlacedCheck::kBadHeader);
}

TEST_CASE("a dump's stacks and GPU health files pass the header check, other names do not",
          "[daemon]") {
  UploadLimits lim;
  std::string err;
  DumpHeader h = header("incident-0001", "n0");
  h.files.push_back({"n0-rank0.h.1.frlog", 10, 0});
  h.files.push_back({"n0-rank0.h.1.frlog.stacks.json", 10, 0});
  h.files.push_back({"n0.gpu.json", 10, 0});
  CHECK(check_dump_header(h, lim, &err));
  h.files.push_back({"n0-notes.txt", 10, 0});
  CHECK_FALSE(check_dump_header(h, lim, &err));
  CHECK(err == "refused file name 'n0-notes.txt'");
}

TEST_CASE("a dump is received whole and verified, or not at all", "[daemon]") {
  TempDir dir;
  std::string target = dir.path + "/job1/incident-0001";
  std::string data(3000, 'x');
  DumpHeader h = header("incident-0001", "n0");
  h.files.push_back({"n0-rank0.h.1.frlog", data.size(), crc32c(0, data.data(), data.size())});
  UploadLimits lim;
  std::string err;

  SECTION("good upload") {
    DumpReceiver r;
    REQUIRE(r.begin(target, h, lim, &err));
    REQUIRE(r.write(0, 0, data.data(), 1000, &err));
    REQUIRE(r.write(0, 1000, data.data() + 1000, 2000, &err));
    REQUIRE(r.finish(&err));
    CHECK(slurp(target + "/n0-rank0.h.1.frlog") == data);
  }
  SECTION("checksum mismatch leaves nothing") {
    DumpReceiver r;
    REQUIRE(r.begin(target, h, lim, &err));
    std::string bad = data;
    bad[5] = 'y';
    REQUIRE(r.write(0, 0, bad.data(), bad.size(), &err));
    CHECK_FALSE(r.finish(&err));
    CHECK(err.find("checksum") != std::string::npos);
    r.abort();
    CHECK_FALSE(exists(target + "/n0-rank0.h.1.frlog"));
  }
  SECTION("out of order, out of bounds, unknown file") {
    DumpReceiver r;
    REQUIRE(r.begin(target, h, lim, &err));
    CHECK_FALSE(r.write(0, 10, data.data(), 10, &err));
    CHECK_FALSE(r.write(0, 0, data.data(), 4000, &err));
    CHECK_FALSE(r.write(3, 0, data.data(), 10, &err));
  }
  SECTION("hostile names and sizes are refused before anything is written") {
    for (std::string name : {"../escape.frlog", "/abs.frlog", "manifest.json", ".hidden.frlog"}) {
      DumpHeader bad = h;
      bad.files[0].name = name;
      DumpReceiver r;
      CHECK_FALSE(r.begin(target, bad, lim, &err));
    }
    DumpHeader big = h;
    big.files[0].size = lim.max_file_bytes + 1;
    DumpReceiver r1;
    CHECK_FALSE(r1.begin(target, big, lim, &err));
    DumpHeader twice = h;
    twice.files.push_back(h.files[0]);
    DumpReceiver r2;
    CHECK_FALSE(r2.begin(target, twice, lim, &err));
    DumpHeader stray = h;
    stray.processes.push_back({0, 1, 1, "h", "j", "../../etc/passwd", "", true, 0, 0, 0});
    DumpReceiver r3;
    CHECK_FALSE(r3.begin(target, stray, lim, &err));
    CHECK_FALSE(exists(dir.path + "/escape.frlog"));
  }
  SECTION("an abandoned upload leaves no staging behind") {
    {
      DumpReceiver r;
      REQUIRE(r.begin(target, h, lim, &err));
      REQUIRE(r.write(0, 0, data.data(), 100, &err));
    }
    std::string listing;
    for (auto* d = opendir(target.c_str()); d;) {
      while (auto* e = readdir(d)) listing += std::string(e->d_name) + " ";
      closedir(d);
      break;
    }
    CHECK(listing.find(".upload") == std::string::npos);
  }
}

TEST_CASE("assembly writes manifest, report and analysis last", "[daemon]") {
  TempDir dir;
  AssemblyJob j;
  j.incident_id = "incident-0001";
  j.dir = dir.path + "/job1/incident-0001";
  j.job_id = "job1";
  j.kind = "manual";
  j.time_ns = real_ns();
  j.expected_ranks = 2;
  j.nodes.push_back({"n0", -1500, true});
  j.incident = {{"id", j.incident_id}};
  // One real dump file in the set.
  FakeLog f;
  f.ops = {{FR_OP_ALLREDUCE, 1, 1, kSec, false, false}};
  std::string err;
  REQUIRE(fr::files::make_dirs(j.dir, &err));
  fr::daemon::test::write_log(j.dir, "n0-rank0.n0.1000.frlog", f);
  j.processes.push_back({0, 2, 1000, "n0", "job1", "n0-rank0.n0.1000.frlog", "src", true, 1, 0, 0});
  AssemblyResult r = assemble(j);
  REQUIRE(r.ok);
  CHECK(!r.verdict_kind.empty());
  for (const char* f : {"manifest.json", "analysis.json", "report.txt", "incident.json"})
    CHECK(exists(j.dir + "/" + f));
  auto manifest = nlohmann::json::parse(slurp(j.dir + "/manifest.json"));
  CHECK(manifest["source"] == "frd coordinator");
  CHECK(manifest["expected_ranks"] == 2);
  CHECK(manifest["nodes"][0]["clock_offset_ns"] == -1500);
  auto analysis = nlohmann::json::parse(slurp(j.dir + "/analysis.json"));
  CHECK(analysis["schema"] == "fr-analysis/1");

  SECTION("an unwritable directory is an error, not a crash") {
    AssemblyJob bad = j;
    bad.dir = "/proc/fr-cannot-write/incident";
    AssemblyResult rb = assemble(bad);
    CHECK_FALSE(rb.ok);
    CHECK(!rb.error.empty());
  }
}
