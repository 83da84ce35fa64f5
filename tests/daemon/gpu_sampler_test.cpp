// The node's GPU-marker sampler (daemon/host/gpu_sampler.h) on a communicator table whose
// counters the test advances as a stream would: each op timed from the sample that first saw it
// reached and finished; its bounds; a log that shrinks, goes away or is a link; and the watcher
// putting the times on the recent collectives of its report.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <string>
#include <thread>
#include <vector>

#include "daemon/host/gpu_sampler.h"
#include "daemon/host/watcher.h"
#include "fixture.h"
#include "fr/flight_log.h"
#include "log/reader.h"

using namespace fr::daemon;

namespace {

constexpr uint64_t kTable = 512;  // where the fake files hold their communicator table

// A file with a communicator table of `comms` entries at kTable, counters set with set().
struct TableFile {
  std::string dir, name, path;
  explicit TableFile(const std::string& d, const std::string& n, uint32_t comms)
      : dir(d), name(n), path(d + "/" + n) {
    std::vector<unsigned char> bytes(kTable + comms * sizeof(fr_comm_entry) + 512, 0);
    int fd = ::open(path.c_str(), O_CREAT | O_TRUNC | O_WRONLY, 0600);
    REQUIRE(fd >= 0);
    REQUIRE(::write(fd, bytes.data(), bytes.size()) == ssize_t(bytes.size()));
    ::close(fd);
    for (uint32_t i = 0; i < comms; ++i) word(i, offsetof(fr_comm_entry, id), 0x100 + i);
  }
  void word(uint32_t entry, size_t field, uint64_t v) const {
    int fd = ::open(path.c_str(), O_WRONLY);
    REQUIRE(fd >= 0);
    REQUIRE(::pwrite(fd, &v, sizeof v, off_t(kTable + entry * sizeof(fr_comm_entry) + field)) ==
            ssize_t(sizeof v));
    ::close(fd);
  }
  // The stream's counters of entry `i`: handed to the GPU, reached, finished.
  void set(uint32_t i, uint64_t enqueued, uint64_t started, uint64_t completed) const {
    word(i, offsetof(fr_comm_entry, op_index), enqueued);
    word(i, offsetof(fr_comm_entry, gpu_started), started);
    word(i, offsetof(fr_comm_entry, gpu_completed), completed);
  }
  SampledLog listed(uint32_t count) const {
    struct stat st {};
    REQUIRE(::stat(path.c_str(), &st) == 0);
    return {name, st.st_dev, st.st_ino, kTable, uint32_t(sizeof(fr_comm_entry)), count};
  }
};

constexpr int64_t kMs = 1'000'000;

}  // namespace

TEST_CASE("gpu sampler times each op from the samples that saw it reached and finished",
          "[daemon]") {
  test::TempDir dir;
  TableFile f(dir.path, "r0.frlog", 2);
  GpuSampler s(dir.path, kMs);
  f.set(0, 4, 3, 2);
  s.set_logs({f.listed(2)});
  REQUIRE(s.logs_sampled() == 1);
  s.sample(100 * kMs);  // learns where the counters stand: ops 1 to 3 are not timed
  f.set(0, 5, 4, 3);
  s.sample(101 * kMs);
  f.set(0, 5, 5, 4);
  s.sample(104 * kMs);
  f.set(0, 5, 5, 5);
  s.sample(105 * kMs);
  f.set(0, 7, 7, 7);  // two ops reached and finished within one period
  s.sample(106 * kMs);

  const GpuOpTimes op4 = s.times("r0.frlog", 0x100, 4);
  REQUIRE(op4.started_ns > 0);
  CHECK(op4.completed_ns - op4.started_ns == 3 * kMs);
  const GpuOpTimes op5 = s.times("r0.frlog", 0x100, 5);
  CHECK(op5.completed_ns - op5.started_ns == 1 * kMs);
  CHECK(op5.started_ns - op4.started_ns == 3 * kMs);
  for (uint64_t op : {6, 7}) {
    const GpuOpTimes t = s.times("r0.frlog", 0x100, op);
    CHECK(t.started_ns == t.completed_ns);
    CHECK(t.started_ns - op4.started_ns == 5 * kMs);
  }
  // Started before the first sample: only its end is known.
  const GpuOpTimes op3 = s.times("r0.frlog", 0x100, 3);
  CHECK(op3.started_ns == 0);
  CHECK(op3.completed_ns > 0);
  // The sample's CLOCK_MONOTONIC moved onto CLOCK_REALTIME, as the records' call times.
  CHECK(std::llabs(op4.started_ns - (101 * kMs + real_ns() - mono_ns())) < 1000 * kMs);
  // Not seen, another communicator, another log: zeros.
  CHECK(s.times("r0.frlog", 0x100, 8).started_ns == 0);
  CHECK(s.times("r0.frlog", 0x101, 4).started_ns == 0);
  CHECK(s.times("r1.frlog", 0x100, 4).started_ns == 0);
  CHECK(s.times("r0.frlog", 0x100, 0).started_ns == 0);

  SECTION("counters that do not add up are skipped, counters that go back start afresh") {
    f.set(0, 8, 7, 8);  // finished past what it reached: a torn read
    s.sample(107 * kMs);
    CHECK(s.times("r0.frlog", 0x100, 8).completed_ns == 0);
    f.set(0, 2, 1, 1);  // the entry went back: learned again, nothing timed
    s.sample(108 * kMs);
    f.set(0, 3, 2, 2);
    s.sample(109 * kMs);
    const GpuOpTimes t = s.times("r0.frlog", 0x100, 2);
    CHECK(t.started_ns > 0);
    CHECK(t.completed_ns == t.started_ns);
  }
  SECTION("a new communicator in an entry forgets the old one's times") {
    f.word(0, offsetof(fr_comm_entry, id), 0x200);
    s.sample(107 * kMs);
    CHECK(s.times("r0.frlog", 0x100, 4).started_ns == 0);
    CHECK(s.times("r0.frlog", 0x200, 4).started_ns == 0);
  }
}

TEST_CASE("gpu sampler keeps to its bounds", "[daemon]") {
  test::TempDir dir;
  TableFile a(dir.path, "a.frlog", 3), b(dir.path, "b.frlog", 3);
  GpuSampler::Limits lim;
  lim.logs = 1;
  lim.comms = 2;
  lim.ops = 8;
  GpuSampler s(dir.path, kMs, lim);
  s.set_logs({a.listed(3), b.listed(3)});
  CHECK(s.logs_sampled() == 1);  // the first listed
  s.sample(1 * kMs);
  for (uint32_t i = 0; i < 3; ++i) a.set(i, 1000, 1000, 1000);  // 1000 ops in one period
  b.set(0, 5, 5, 5);
  s.sample(2 * kMs);
  // The newest 8 of the 1000 are remembered, on the first 2 communicators only.
  CHECK(s.times("a.frlog", 0x100, 1000).started_ns > 0);
  CHECK(s.times("a.frlog", 0x101, 993).completed_ns > 0);
  CHECK(s.times("a.frlog", 0x100, 992).started_ns == 0);
  CHECK(s.times("a.frlog", 0x102, 1000).started_ns == 0);
  CHECK(s.times("b.frlog", 0x100, 5).started_ns == 0);
  // An entry too small to hold the counters is not sampled.
  SampledLog small = a.listed(3);
  small.comm_size = 64;
  s.set_logs({small});
  CHECK(s.logs_sampled() == 0);
}

TEST_CASE("gpu sampler: a log that shrinks, goes away or is a link is not sampled", "[daemon]") {
  test::TempDir dir;
  TableFile f(dir.path, "r0.frlog", 1);
  GpuSampler s(dir.path, kMs);
  s.set_logs({f.listed(1)});
  s.sample(1 * kMs);
  f.set(0, 1, 1, 1);
  s.sample(2 * kMs);
  REQUIRE(s.times("r0.frlog", 0x100, 1).completed_ns > 0);

  SECTION("truncated under it: no longer sampled, its times kept until it is not listed") {
    REQUIRE(::truncate(f.path.c_str(), 100) == 0);
    s.sample(3 * kMs);
    CHECK(s.logs_sampled() == 0);
    CHECK(s.times("r0.frlog", 0x100, 1).completed_ns > 0);
    s.set_logs({});
    CHECK(s.times("r0.frlog", 0x100, 1).completed_ns == 0);
  }
  SECTION("removed and replaced by another file: the new one is opened afresh") {
    const SampledLog old = f.listed(1);
    REQUIRE(::unlink(f.path.c_str()) == 0);
    s.sample(3 * kMs);  // the open file still reads: nothing breaks
    TableFile g(dir.path, "r0.frlog", 1);
    s.set_logs({old});  // the listing is stale: not the file there now
    CHECK(s.logs_sampled() == 1);
    s.set_logs({g.listed(1)});
    CHECK(s.logs_sampled() == 1);
    CHECK(s.times("r0.frlog", 0x100, 1).completed_ns == 0);  // a new log: nothing timed yet
    s.set_logs({old});  // gone from the directory: cannot be opened again
    CHECK(s.logs_sampled() == 0);
  }
  SECTION("a link in the log directory is refused") {
    REQUIRE(::symlink(f.path.c_str(), (dir.path + "/link.frlog").c_str()) == 0);
    SampledLog l = f.listed(1);
    l.name = "link.frlog";
    s.set_logs({l});
    CHECK(s.logs_sampled() == 0);
  }
}

TEST_CASE("gpu sampler's thread samples every period until stopped", "[daemon]") {
  test::TempDir dir;
  TableFile f(dir.path, "r0.frlog", 1);
  GpuSampler s(dir.path, 200'000);
  s.set_logs({f.listed(1)});
  s.start();
  auto wait_passes = [&](uint64_t n) {
    const uint64_t until = s.passes() + n;
    for (int i = 0; i < 5000 && s.passes() < until; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return s.passes() >= until;
  };
  REQUIRE(wait_passes(2));
  f.set(0, 1, 1, 0);
  REQUIRE(wait_passes(2));
  f.set(0, 1, 1, 1);
  REQUIRE(wait_passes(2));
  s.stop();
  const uint64_t after = s.passes();
  const GpuOpTimes t = s.times("r0.frlog", 0x100, 1);
  CHECK(t.started_ns > 0);
  CHECK(t.completed_ns > t.started_ns);
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  CHECK(s.passes() == after);
}

TEST_CASE("the watcher puts the sampled GPU times on its report's recent collectives", "[daemon]") {
  test::TempDir dir;
  test::FakeLog fl;
  for (uint64_t s = 1; s <= 3; ++s) fl.ops.push_back({FR_OP_ALLREDUCE, s, s, 0, s < 3, false});
  const std::string path = test::write_log(dir.path, "r0.frlog", fl);
  fr::log::ReadResult rr = fr::log::read_log(path);
  REQUIRE(rr.ok());
  const uint64_t table = rr.log->header.comm_offset;
  REQUIRE(table > 0);
  auto set = [&](size_t field, uint64_t v) {
    int fd = ::open(path.c_str(), O_WRONLY);
    REQUIRE(fd >= 0);
    REQUIRE(::pwrite(fd, &v, sizeof v, off_t(table + field)) == ssize_t(sizeof v));
    ::close(fd);
  };
  GpuSampler gpu(dir.path, kMs);
  LogWatcher w(dir.path, int64_t(30) * 1'000'000'000);
  w.set_gpu_sampler(&gpu);
  ScanResult first = w.scan();  // hands the log to the sampler
  REQUIRE(first.processes.size() == 1);
  REQUIRE(gpu.logs_sampled() == 1);
  gpu.sample(10 * kMs);  // op 3 handed to the GPU, not reached yet
  set(offsetof(fr_comm_entry, gpu_started), 3);
  gpu.sample(11 * kMs);
  set(offsetof(fr_comm_entry, gpu_completed), 3);
  gpu.sample(15 * kMs);
  ScanResult s = w.scan();
  REQUIRE(s.processes.size() == 1);
  const auto& recent = s.processes[0].comms.at(0).recent;
  REQUIRE(recent.size() == 3);
  CHECK(recent[2].seq == 3);
  CHECK(recent[2].gpu_end_ns - recent[2].gpu_start_ns == 4 * kMs);
  CHECK(recent[0].gpu_start_ns == 0);  // before the sampler began
  CHECK(recent[0].gpu_end_ns == 0);
  // Without a sampler the report is as before.
  CHECK(summarize_log(*rr.log, "r0.frlog", real_ns()).comms.at(0).recent[2].gpu_start_ns == 0);
}
