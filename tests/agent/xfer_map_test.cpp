// The agent's map from NIXL request handles to transfer entries (agent/xfers.cpp) under threads
// that open, release and reuse entries while others look handles up without a lock. xfers.cpp is
// compiled into this test on its own, with the few agent functions it calls defined here; the
// handle hash is defined here too, as a constant, so that every handle lands in the same bucket
// and every open walks (and rewrites) one long probe chain: the case where a lookup further along
// the chain could miss a live handle while a stale bucket before it is being reused.
//
// Run under ThreadSanitizer by `make test-tsan` (label agent).
#include <atomic>
#include <catch2/catch.hpp>
#include <thread>
#include <vector>

#include "nixl.h"
#include "wrappers.h"

namespace fr::agent {

// What xfers.cpp needs of the rest of the agent.
constinit LogState g_log = {};
constinit ClockState g_clock = {};
constinit thread_local ThreadState t_state = {};
uint64_t hash_u64(uint64_t h, uint64_t) { return h; }
uint64_t hash_finish(uint64_t) { return 0; }  // one bucket for every handle
uint64_t now_ns_slow() { return 1; }
uint32_t current_tid_slow() { return 1; }
uint64_t record_begin(fr_record&) { return 0; }

}  // namespace fr::agent

namespace fa = fr::agent;

namespace {

constexpr uint32_t kEntries = 24;  // within the map's probe length, so every open finds a bucket

struct Table {
  fr_log_header header{};
  fr_log_section sections[FR_SECTION_KINDS] = {};  // the transfer table's count and dropped
  std::vector<fr_xfer_entry> entries = std::vector<fr_xfer_entry>(kEntries);
  Table() {
    fa::g_log.hdr = &header;
    fa::g_log.sections = sections;
    fa::g_log.xfers = entries.data();
    fa::g_log.xfer_cap = kEntries;
  }
  ~Table() {
    fa::g_log.xfers = nullptr;
    fa::g_log.xfer_cap = 0;
    fa::g_log.sections = nullptr;
    fa::g_log.hdr = nullptr;
  }
};

fr_xfer_entry* open_handle(uint64_t handle) {
  fr_xfer_entry fixed{};
  fixed.handle = handle;
  fixed.op = FR_XFER_OP_WRITE;
  return fa::xfer_open(handle, fixed);
}

void release(fr_xfer_entry* e) { __atomic_store_n(&e->state, FR_XFER_RELEASED, __ATOMIC_RELEASE); }

}  // namespace

TEST_CASE("xfer map: a handle is found until its entry is released, and not after", "[agent]") {
  Table t;
  std::vector<fr_xfer_entry*> open;
  for (uint64_t h = 1; h <= 8; ++h) open.push_back(open_handle(0x1000 + h));
  for (uint64_t h = 1; h <= 8; ++h) CHECK(fa::xfer_find(0x1000 + h) == open[h - 1]);
  CHECK(fa::xfer_find(0x2000) == nullptr);
  release(open[2]);
  CHECK(fa::xfer_find(0x1003) == nullptr);
  CHECK(fa::xfer_find(0x1008) == open[7]);  // past the released one in the chain
  // A new handle reuses the released entry and its bucket; the others stay found.
  fr_xfer_entry* again = open_handle(0x3000);
  REQUIRE(again != nullptr);
  CHECK(fa::xfer_find(0x3000) == again);
  for (uint64_t h : {1, 2, 4, 5, 6, 7, 8}) CHECK(fa::xfer_find(0x1000 + h) == open[h - 1]);
}

TEST_CASE("xfer map: lookups never miss a live handle while others reuse buckets before it",
          "[agent]") {
  // Four long-lived handles sit at the end of the chain; churning threads open and release
  // handles whose buckets come first, so every open rewrites a bucket ahead of the live ones.
  // Readers look the live handles up without a lock the whole time: each lookup must find them.
  Table t;
  const int kChurn = 16;
  std::vector<fr_xfer_entry*> churn;
  for (int i = 0; i < kChurn; ++i) churn.push_back(open_handle(0x5000 + uint64_t(i)));
  const uint64_t live[] = {0x9001, 0x9002, 0x9003, 0x9004};
  for (uint64_t h : live) REQUIRE(open_handle(h) != nullptr);
  for (fr_xfer_entry* e : churn) release(e);

  std::atomic<bool> stop{false};
  std::atomic<uint64_t> lookups{0}, misses{0}, opens{0};
  std::vector<std::thread> threads;
  for (int w = 0; w < 2; ++w)
    threads.emplace_back([&, w] {
      uint64_t next = 0x10000 * uint64_t(w + 1);
      std::vector<fr_xfer_entry*> mine;
      while (!stop.load(std::memory_order_relaxed)) {
        if (fr_xfer_entry* e = open_handle(++next)) mine.push_back(e);
        opens.fetch_add(1, std::memory_order_relaxed);
        if (mine.size() >= 4) {
          for (fr_xfer_entry* e : mine) release(e);
          mine.clear();
        }
      }
    });
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&] {
      while (!stop.load(std::memory_order_relaxed)) {
        for (uint64_t h : live) {
          if (fa::xfer_find(h) == nullptr) misses.fetch_add(1, std::memory_order_relaxed);
          lookups.fetch_add(1, std::memory_order_relaxed);
        }
      }
    });
  // Bounded in time and count: until both sides have done 100,000 (on a loaded machine one side
  // can starve the other for a while), or five seconds, whichever comes first.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (std::chrono::steady_clock::now() < until &&
         (opens.load() < 100000 || lookups.load() < 100000))
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  stop = true;
  for (auto& th : threads) th.join();
  INFO(lookups.load() << " lookups, " << opens.load() << " opens");
  CHECK(lookups.load() > 0);
  CHECK(opens.load() > 0);
  CHECK(misses.load() == 0);
}
