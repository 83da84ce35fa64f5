// The flight log's sequence lock under a real race: writer threads update records while a reader
// reads the live log. The agent here is the test build of agent/ (FR_TEST_PARK_WRITER), whose
// writer yields halfway through every record update, so the reader does meet half-written records;
// the test requires that it did, that it refused every one of them, and that every record it
// accepted is whole. Without the parking, a 2-core machine almost never shows the race, and a
// reader that stopped checking the lock would still pass.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <thread>
#include <vector>

#include "nccl_double.h"
#include "test_util.h"

using fr::agent_test::TempDir;

namespace {

// The log directory must be set before the first NCCL call of the process: at static init. A small
// ring, so the reader passes over it often; writers lap it (whole records replaced).
TempDir& log_dir() {
  static TempDir dir;
  return dir;
}
const bool g_env_ready = [] {
  setenv("FR_LOG_DIR", log_dir().path().c_str(), 1);
  setenv("FR_BUFFER_ENTRIES", "1024", 1);
  unsetenv("FR_DISABLE");
  return true;
}();

cudaStream_t S(uint64_t v) { return (cudaStream_t)(uintptr_t)v; }

// What the writers wrote, for a copy the reader accepted: every field follows from the sequence
// number, and the update writes the GPU state before the writer parks and the result after it.
void check_whole(const fr_record& x) {
  bool in_call = x.result == FR_RESULT_PENDING;
  INFO("record " << x.id);
  CHECK(x.count == x.seq);
  CHECK(x.sendbuff == x.seq * 16);
  CHECK(x.recvbuff == x.seq * 32);
  CHECK(x.stream == x.seq * 64);
  CHECK((in_call || x.result == 0));
  CHECK(((x.flags & FR_REC_F_IN_CALL) != 0) == in_call);
  CHECK((x.gpu_state == FR_GPU_NONE) == in_call);
}

// The log mapped read-only, to read its newest slots with the format's own fr_record_read.
struct Mapped {
  const uint8_t* base = nullptr;
  size_t size = 0;
  explicit Mapped(const std::string& path) {
    int fd = open(path.c_str(), O_RDONLY);
    struct stat st;
    if (fd >= 0 && fstat(fd, &st) == 0) {
      void* m = mmap(nullptr, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
      if (m != MAP_FAILED) base = (const uint8_t*)m, size = (size_t)st.st_size;
    }
    if (fd >= 0) close(fd);
  }
  ~Mapped() {
    if (base) munmap((void*)base, size);
  }
  const fr_log_header& header() const { return *(const fr_log_header*)base; }
  const fr_record* slot(uint64_t id) const {
    const fr_log_section* ring = fr_log_section_of(&header(), FR_SECTION_RING);
    return (const fr_record*)(base + ring->offset + (id % ring->capacity) * ring->entry_size);
  }
};

}  // namespace

TEST_CASE("a reader running alongside the writers never accepts a torn record", "[agent]") {
  REQUIRE(g_env_ready);
  // Bounded both ways: the writers stop once the reader has seen enough refusals, or at the limit.
  constexpr int kThreads = 3;
  constexpr uint64_t kMaxOps = 400000;
  constexpr uint64_t kWantRefused = 50;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);

  ncclComm_t comms[kThreads];
  for (auto& c : comms) {
    ncclUniqueId id;
    REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
    REQUIRE(ncclCommInitRank(&c, 1, id, 0) == ncclSuccess);
  }
  std::atomic<bool> stop{false};
  std::atomic<int> running{kThreads};
  std::vector<std::thread> writers;
  for (int t = 0; t < kThreads; ++t) {
    writers.emplace_back([&, t] {
      // Every field follows from the sequence number, so a torn copy cannot look consistent.
      for (uint64_t i = 1; i <= kMaxOps && !stop.load(std::memory_order_relaxed); ++i)
        ncclAllReduce((void*)(i * 16), (void*)(i * 32), i, ncclFloat32, ncclSum, comms[t],
                      S(i * 64));
      running.fetch_sub(1);
    });
  }
  auto logs = log_dir().logs();
  REQUIRE(logs.size() == 1);
  Mapped live(logs[0]);
  REQUIRE(live.base != nullptr);
  uint64_t reads = 0, checked = 0, pending = 0, refused = 0;
  for (;;) {
    bool finished = running.load() == 0;  // one more pass after the writers are done
    // The whole log through the reader: every record it returns is whole.
    auto r = fr::log::read_log(logs[0]);
    REQUIRE(r.ok());
    ++reads;
    for (const auto& rec : r.log->records) {
      if (rec.raw.op != FR_OP_ALLREDUCE) continue;
      ++checked;
      pending += rec.raw.result == FR_RESULT_PENDING;
      check_whole(rec.raw);
    }
    // The newest slots, where the writers are: count the copies refused as torn (the lock was
    // odd, or moved while copying) and check the accepted ones.
    for (int pass = 0; pass < 200; ++pass) {
      uint64_t end = __atomic_load_n(&live.header().record_counter, __ATOMIC_ACQUIRE);
      for (uint64_t id = end > 8 ? end - 8 : 0; id < end; ++id) {
        fr_record x;
        if (!fr_record_read(live.slot(id), &x)) {
          refused += __atomic_load_n(&live.slot(id)->lock, __ATOMIC_RELAXED) != 0;
          continue;
        }
        if (x.id != id || x.op != FR_OP_ALLREDUCE) continue;  // lapped, or another kind
        ++checked;
        pending += x.result == FR_RESULT_PENDING;
        check_whole(x);
      }
    }
    if (finished) break;
    if (refused >= kWantRefused || std::chrono::steady_clock::now() > deadline) stop = true;
  }
  for (auto& w : writers) w.join();
  INFO(reads << " reads, " << checked << " records checked (" << pending << " in their call), "
             << refused << " refused as torn");
  CHECK(reads > 1);
  CHECK(checked > 0);
  // The race happened: the reader met records mid-update, and refused them.
  CHECK(refused > 0);
}
