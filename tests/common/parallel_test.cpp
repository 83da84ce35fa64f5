// fr::parallel (common/parallel.h): every item visited once whatever the thread count, results
// taken in order, and a body's exception brought back to the caller.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "common/parallel.h"

using fr::parallel::for_each_index;
using fr::parallel::for_each_index_ordered;
using fr::parallel::thread_count;

TEST_CASE("thread_count: one per core when 0 is asked, never more than the items", "[common]") {
  CHECK(thread_count(4, 100) == 4);
  CHECK(thread_count(8, 3) == 3);
  CHECK(thread_count(8, 0) == 1);
  CHECK(thread_count(1, 100) == 1);
  CHECK(thread_count(0, 1000000) == std::max(1u, std::thread::hardware_concurrency()));
}

TEST_CASE("for_each_index visits every index once", "[common]") {
  for (unsigned threads : {0u, 1u, 2u, 7u, 64u}) {
    for (size_t n : {size_t(0), size_t(1), size_t(5), size_t(1000)}) {
      INFO("threads " << threads << ", items " << n);
      std::vector<std::atomic<int>> visits(n);
      std::mutex mu;
      std::set<std::thread::id> ids;
      for_each_index(n, threads, [&](size_t i) {
        visits[i].fetch_add(1);
        std::lock_guard<std::mutex> lock(mu);
        ids.insert(std::this_thread::get_id());
      });
      for (size_t i = 0; i < n; ++i) CHECK(visits[i].load() == 1);
      CHECK(ids.size() <= thread_count(threads, n));
      if (n > 0 && threads == 1)
        CHECK(ids == std::set<std::thread::id>{std::this_thread::get_id()});
    }
  }
}

TEST_CASE("for_each_index rethrows the lowest item's exception after every thread stopped",
          "[common]") {
  std::atomic<int> running{0};
  auto body = [&](size_t i) {
    running.fetch_add(1);
    if (i == 3 || i == 7) {
      running.fetch_sub(1);
      throw std::runtime_error("item " + std::to_string(i));
    }
    running.fetch_sub(1);
  };
  for (unsigned threads : {1u, 4u}) {
    try {
      for_each_index(10, threads, body);
      FAIL("no exception");
    } catch (const std::runtime_error& e) {
      // Item 3 is always handed out before 7, so it always runs and is the one thrown.
      CHECK(std::string(e.what()) == "item 3");
    }
    CHECK(running.load() == 0);
  }
}

TEST_CASE("for_each_index_ordered takes the results in index order", "[common]") {
  for (unsigned threads : {1u, 3u, 16u}) {
    for (size_t n : {size_t(0), size_t(1), size_t(2), size_t(500)}) {
      INFO("threads " << threads << ", items " << n);
      std::vector<size_t> results(n, 0);
      std::vector<size_t> order;
      for_each_index_ordered(
          n, threads, [&](size_t i) { results[i] = i * i; },
          [&](size_t i) {
            CHECK(results[i] == i * i);  // done before it is taken
            order.push_back(i);
          });
      std::vector<size_t> expected(n);
      for (size_t i = 0; i < n; ++i) expected[i] = i;
      CHECK(order == expected);
    }
  }
}

TEST_CASE("for_each_index_ordered stops before a failed item and rethrows", "[common]") {
  std::vector<size_t> taken;
  auto body = [](size_t i) {
    if (i == 5) throw std::runtime_error("item 5");
  };
  CHECK_THROWS_WITH(for_each_index_ordered(20, 4, body, [&](size_t i) { taken.push_back(i); }),
                    "item 5");
  CHECK(taken == std::vector<size_t>{0, 1, 2, 3, 4});

  // An exception from consume ends it the same way.
  taken.clear();
  CHECK_THROWS_WITH(for_each_index_ordered(
                        20, 4, [](size_t) {},
                        [&](size_t i) {
                          if (i == 2) throw std::runtime_error("consume 2");
                          taken.push_back(i);
                        }),
                    "consume 2");
  CHECK(taken == std::vector<size_t>{0, 1});
}

TEST_CASE("both runs its two parts side by side and rethrows after both stopped", "[common]") {
  // Each part waits for the other to have started: they can only finish side by side.
  std::atomic<int> started{0};
  auto meet = [&] {
    started.fetch_add(1);
    for (int spins = 0; started.load() < 2 && spins < 50'000'000; ++spins)
      std::this_thread::yield();
  };
  std::atomic<bool> first_done{false}, second_done{false};
  fr::parallel::both(
      [&] {
        meet();
        first_done = true;
      },
      [&] {
        meet();
        second_done = true;
      });
  CHECK(started.load() == 2);
  CHECK(first_done.load());
  CHECK(second_done.load());

  // A part that throws: its exception comes back, after the other part (if it started) ended.
  std::atomic<int> running{0};
  CHECK_THROWS_WITH(fr::parallel::both([] { throw std::runtime_error("first"); },
                                       [&] {
                                         running.fetch_add(1);
                                         std::this_thread::sleep_for(std::chrono::milliseconds(20));
                                         running.fetch_sub(1);
                                       }),
                    "first");
  CHECK(running.load() == 0);
}
