// Snapshot tests: a directory with good and bad logs becomes a dump set holding every good log
// and naming every bad one; manifests are validated; `frd snapshot` reports and exits cleanly.
#include <sys/mount.h>
#include <sys/wait.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <cstring>

#include "log/reader.h"
#include "log/snapshot.h"
#include "skip.h"
#include "test_log.h"
#include "testing/files.h"

using fr::test::spit;
using fr::test::TempDir;
using fr::test::TestLog;

namespace {

// Two good logs (ranks 0 and 1) and one of each kind of bad file.
void make_log_dir(const std::string& dir) {
  for (int rank = 0; rank < 2; ++rank) {
    TestLog w;
    REQUIRE(
        w.create(dir + "/fr.job-test.hostA." + std::to_string(100 + rank) + ".frlog", 2, 32, rank));
    w.header()->pid = 100 + rank;
    w.add_comm(0, 0xABC, 2, rank, 3, 2);
    for (int i = 0; i < 10 + rank; ++i) w.append(0xABC);
  }
  spit(dir + "/foreign.frlog", std::string(2048, 'z'));
  spit(dir + "/empty.frlog", "");
  TestLog t;
  REQUIRE(t.create(dir + "/truncated.frlog", 2, 32, 5));
  t.close();
  REQUIRE(truncate((dir + "/truncated.frlog").c_str(), 1000) == 0);
  TestLog n;
  REQUIRE(n.create(dir + "/newer.frlog", 2, 32, 6));
  n.header()->version = FR_LOG_VERSION + 3;
  spit(dir + "/notes.txt", "not a log, not even looked at");
}

int run(const std::string& cmd) {
  int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

}  // namespace

TEST_CASE("snapshot_dir takes every good log and names every bad one") {
  TempDir logs, out;
  make_log_dir(logs.path);
  fr::log::SnapshotOptions opts;
  opts.log_dir = logs.path;
  opts.out_dir = out.path + "/set";
  auto res = fr::log::snapshot_dir(opts);
  REQUIRE(res.ok());
  REQUIRE(res.processes.size() == 2);
  CHECK(res.skipped.size() == 4);

  fr::log::Manifest m;
  std::string err;
  REQUIRE(fr::log::read_manifest(opts.out_dir, &m, &err));
  CHECK(m.schema == "fr-dumpset/1");
  CHECK(m.job_id == "job-test");
  CHECK(m.source == "frd snapshot");
  REQUIRE(m.processes.size() == 2);
  CHECK(m.skipped.size() == 4);
  for (const auto& p : m.processes) {
    auto r = fr::log::read_log(opts.out_dir + "/" + p.file);
    REQUIRE(r.ok());
    CHECK(r.log->is_snapshot);
    CHECK(r.log->header.global_rank == p.rank);
    CHECK(r.log->records.size() == size_t(10 + p.rank));
    CHECK(p.host == "hostA");
    CHECK(p.alive == false);  // this process wrote them, but holds no writer lock
    CHECK(r.log->records.back().gpu_state == FR_GPU_ENQUEUED);
    CHECK(r.log->records[1].gpu_state == FR_GPU_COMPLETED);
  }
  bool saw_newer = false;
  for (const auto& s : m.skipped) saw_newer |= s.error.find("newer") != std::string::npos;
  CHECK(saw_newer);

  // A snapshot of the dump set itself is a fixed point: dumps read as they were written.
  fr::log::SnapshotOptions again = opts;
  again.log_dir = opts.out_dir;
  again.out_dir = out.path + "/again";
  auto res2 = fr::log::snapshot_dir(again);
  REQUIRE(res2.ok());
  CHECK(res2.processes.size() == 2);
}

TEST_CASE("snapshot_dir filters by job and names hosts as told") {
  TempDir logs, out;
  make_log_dir(logs.path);
  fr::log::SnapshotOptions opts;
  opts.log_dir = logs.path;
  opts.out_dir = out.path;
  opts.job_id = "other-job";
  auto res = fr::log::snapshot_dir(opts);
  REQUIRE(res.ok());
  CHECK(res.processes.empty());

  opts.job_id = "job-test";
  opts.host = "node7";
  opts.file_prefix = "node7-";
  res = fr::log::snapshot_dir(opts);
  REQUIRE(res.processes.size() == 2);
  CHECK(res.processes[0].file.rfind("node7-rank", 0) == 0);
  auto r = fr::log::read_log(out.path + "/" + res.processes[0].file);
  REQUIRE(r.ok());
  CHECK(r.log->hostname() == "node7");
}

TEST_CASE("snapshot_dir fails clearly when it cannot read or write") {
  TempDir out;
  fr::log::SnapshotOptions opts;
  opts.log_dir = out.path + "/does-not-exist";
  opts.out_dir = out.path + "/set";
  auto res = fr::log::snapshot_dir(opts);
  CHECK_FALSE(res.ok());
  CHECK(res.error.find("does-not-exist") != std::string::npos);

  spit(out.path + "/file", "x");
  opts.log_dir = out.path;
  opts.out_dir = out.path + "/file/sub";
  res = fr::log::snapshot_dir(opts);
  CHECK_FALSE(res.ok());
}

TEST_CASE("a full disk loses no dump silently") {
  TempDir logs, mnt;
  for (int rank = 0; rank < 2; ++rank) {  // two ~13 KiB dumps: only one fits in 24 KiB
    TestLog w;
    REQUIRE(w.create(logs.path + "/r" + std::to_string(rank) + ".frlog", 1, 128, rank));
    w.add_comm(0, 0xABC, 2, rank, 0, 0);
    for (int i = 0; i < 100; ++i) w.append(0xABC);
  }
  if (mount("tmpfs", mnt.path.c_str(), "tmpfs", 0, "size=24k") != 0) {
    FR_SKIP("cannot mount a small tmpfs (not root?): " << std::strerror(errno));
  }
  fr::log::SnapshotOptions opts;
  opts.log_dir = logs.path;
  opts.out_dir = mnt.path;
  auto res = fr::log::snapshot_dir(opts);
  size_t full = 0;
  for (const auto& s : res.skipped) full += s.error.find("No space left") != std::string::npos;
  CHECK(full >= 1);
  CHECK(res.processes.size() + full == 2);
  REQUIRE(!res.processes.empty());  // one of the two fits
  for (const auto& p : res.processes) CHECK(fr::log::read_log(mnt.path + "/" + p.file).ok());
  umount(mnt.path.c_str());
}

TEST_CASE("manifests are validated") {
  fr::log::Manifest m;
  std::string err;
  CHECK_FALSE(fr::log::parse_manifest("", &m, &err));
  CHECK_FALSE(fr::log::parse_manifest("[1,2]", &m, &err));
  CHECK_FALSE(fr::log::parse_manifest(R"({"schema":"other/1","processes":[]})", &m, &err));
  CHECK(err.find("schema") != std::string::npos);
  CHECK_FALSE(fr::log::parse_manifest(R"({"schema":"fr-dumpset/1"})", &m, &err));
  CHECK_FALSE(fr::log::parse_manifest(
      R"({"schema":"fr-dumpset/1","processes":[{"file":"../../etc/passwd"}]})", &m, &err));
  CHECK(err.find("leaves the dump set") != std::string::npos);
  CHECK_FALSE(fr::log::parse_manifest(
      R"({"schema":"fr-dumpset/1","processes":[{"file":"/etc/passwd"}]})", &m, &err));
  REQUIRE(fr::log::parse_manifest(
      R"({"schema":"fr-dumpset/1","expected_ranks":4,"extra":{"x":1},
          "nodes":[{"host":"a","clock_offset_ns":-5},{"host":"b"}],
          "processes":[{"file":"n0/rank0.a.1.frlog","rank":0,"pid":1,"host":"a","alive":true,
                        "rank_is_weird":"yes","records":12}]})",
      &m, &err));
  CHECK(m.expected_ranks == 4);
  REQUIRE(m.nodes.size() == 2);
  CHECK(m.nodes[0].has_offset);
  CHECK(m.nodes[0].clock_offset_ns == -5);
  CHECK_FALSE(m.nodes[1].has_offset);
  REQUIRE(m.processes.size() == 1);
  CHECK(m.processes[0].alive);
  CHECK(m.processes[0].records == 12);
}

TEST_CASE("frd snapshot takes a directory and reports what it skipped") {
  TempDir logs, out;
  make_log_dir(logs.path);
  const std::string frd = std::string(FR_BUILD_DIR) + "/bin/frd";
  CHECK(run(frd + " snapshot --log-dir " + logs.path + " --out " + out.path +
            "/set 2>/dev/null >/dev/null") == 0);
  fr::log::Manifest m;
  std::string err;
  REQUIRE(fr::log::read_manifest(out.path + "/set", &m, &err));
  CHECK(m.processes.size() == 2);
  CHECK(run(frd + " snapshot --log-dir " + logs.path + "/nope --out " + out.path +
            "/x 2>/dev/null") == 1);
  CHECK(run(frd + " snapshot --log-dir " + logs.path + " 2>/dev/null") != 0);  // --out is required
}
