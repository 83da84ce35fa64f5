// frd-gpu-sampler-bench: what the node's GPU-marker sampler (daemon/host/gpu_sampler.h) costs.
// LOGS files with COMMS communicator entries each, in a temporary folder under /dev/shm (where
// flight logs live), their counters advanced by this program between samples as streams would:
//   1. the CPU time of one pass over every log (ns per pass, per log);
//   2. the sampler's thread at PERIOD_US for SECONDS: the process's CPU time over the wall time
//      (the share of one core the node daemon spends sampling), and the passes it made.
// Prints figures, asserts nothing.
//   frd-gpu-sampler-bench [LOGS [COMMS [PERIOD_US [SECONDS]]]]   (default 8 4 1000 5)
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>
#include <thread>
#include <vector>

#include "daemon/base/model.h"
#include "daemon/host/gpu_sampler.h"
#include "fr/flight_log.h"

namespace {

constexpr uint64_t kTable = 4096;

int64_t cpu_ns() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return int64_t(t.tv_sec) * 1'000'000'000 + t.tv_nsec;
}

struct Log {
  std::string path;
  fr_comm_entry* comms = nullptr;  // mapped: the "stream" writes here
  size_t bytes = 0;
};

}  // namespace

int main(int argc, char** argv) {
  const int logs = argc > 1 ? std::atoi(argv[1]) : 8;
  const int comms = argc > 2 ? std::atoi(argv[2]) : 4;
  const int64_t period_us = argc > 3 ? std::atoll(argv[3]) : 1000;
  const double seconds = argc > 4 ? std::atof(argv[4]) : 5;
  if (logs <= 0 || logs > 1024 || comms <= 0 || comms > 1024 || period_us <= 0 || seconds <= 0) {
    std::fprintf(stderr, "usage: frd-gpu-sampler-bench [LOGS [COMMS [PERIOD_US [SECONDS]]]]\n");
    return 2;
  }
  char tmpl[] = "/dev/shm/frd-sampler-bench-XXXXXX";
  char tmpl_tmp[] = "/tmp/frd-sampler-bench-XXXXXX";
  const char* dir = mkdtemp(tmpl);
  if (dir == nullptr) dir = mkdtemp(tmpl_tmp);
  if (dir == nullptr) {
    std::perror("mkdtemp");
    return 1;
  }
  std::vector<Log> files(static_cast<size_t>(logs));
  std::vector<fr::daemon::SampledLog> listed;
  for (int i = 0; i < logs; ++i) {
    Log& l = files[size_t(i)];
    l.path = std::string(dir) + "/r" + std::to_string(i) + ".frlog";
    l.bytes = kTable + size_t(comms) * sizeof(fr_comm_entry);
    const int fd = open(l.path.c_str(), O_CREAT | O_RDWR | O_TRUNC, 0600);
    if (fd < 0 || ftruncate(fd, off_t(l.bytes)) != 0) {
      std::perror(l.path.c_str());
      return 1;
    }
    void* m = mmap(nullptr, l.bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    struct stat st {};
    fstat(fd, &st);
    close(fd);
    if (m == MAP_FAILED) {
      std::perror("mmap");
      return 1;
    }
    l.comms = reinterpret_cast<fr_comm_entry*>(static_cast<char*>(m) + kTable);
    for (int c = 0; c < comms; ++c) l.comms[c].id = 0x1000 + uint64_t(c);
    listed.push_back({"r" + std::to_string(i) + ".frlog", st.st_dev, st.st_ino, kTable,
                      uint32_t(sizeof(fr_comm_entry)), uint32_t(comms)});
  }
  auto advance = [&](uint64_t k) {  // each stream reaches one op and finishes the one before
    for (Log& l : files)
      for (int c = 0; c < comms; ++c) {
        l.comms[c].op_index = k + 1;
        l.comms[c].gpu_started = k + 1;
        l.comms[c].gpu_completed = k;
      }
  };
  std::printf("GPU-marker sampler: %d logs x %d communicators (%s)\n", logs, comms, dir);
  {
    fr::daemon::GpuSampler s(dir, period_us * 1000);
    s.set_logs(listed);
    const int passes = 20000;
    int64_t advance_ns = 0;
    const int64_t c0 = cpu_ns();
    for (int i = 0; i < passes; ++i) {
      const int64_t a = cpu_ns();
      advance(uint64_t(i) + 1);
      advance_ns += cpu_ns() - a;
      s.sample(fr::daemon::mono_ns());
    }
    const double per = double(cpu_ns() - c0 - advance_ns) / passes;
    std::printf("  one pass: %.0f ns of CPU (%.0f ns per log), over %d passes\n", per, per / logs,
                passes);
  }
  // The streams: one op per millisecond on every communicator (a few writes and a sleep), for
  // SECONDS; the process's share of a core while they run.
  uint64_t k = 1'000'000;
  auto streams = [&](double* wall) {
    const auto w0 = std::chrono::steady_clock::now();
    const int64_t c0 = cpu_ns();
    while (std::chrono::steady_clock::now() - w0 < std::chrono::duration<double>(seconds)) {
      advance(++k);
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    *wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count();
    return 100.0 * double(cpu_ns() - c0) / 1e9 / *wall;
  };
  double wall = 0;
  const double alone = streams(&wall);
  {
    fr::daemon::GpuSampler s(dir, period_us * 1000);
    s.set_logs(listed);
    s.start();
    const double with = streams(&wall);
    s.stop();
    std::printf(
        "  thread at %lld us for %.1f s: %.2f%% of one core (%.2f%% with this program's streams, "
        "%.2f%% they alone), %llu passes (%.0f per second, %.0f asked)\n",
        static_cast<long long>(period_us), wall, with - alone, with, alone,
        static_cast<unsigned long long>(s.passes()), double(s.passes()) / wall,
        1e6 / double(period_us));
  }
  for (Log& l : files) {
    munmap(reinterpret_cast<char*>(l.comms) - kTable, l.bytes);
    unlink(l.path.c_str());
  }
  rmdir(dir);
  return 0;
}
