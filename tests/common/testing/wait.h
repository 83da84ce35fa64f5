// Waiting in tests for something another process or thread does: poll a condition until it holds
// or a deadline passes. The deadline is generous and never a timing assertion: a slow machine
// takes longer, it does not fail. Included as "testing/wait.h" (library fr_test_common).
#pragma once

#include <chrono>
#include <thread>

namespace fr::test {

// Polls `cond` every `every` until it holds or `seconds` pass, then asks once more; whether it
// held.
template <class Cond>
bool wait_for(Cond&& cond, double seconds = 30,
              std::chrono::milliseconds every = std::chrono::milliseconds(20)) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    if (cond()) return true;
    std::this_thread::sleep_for(every);
  }
  return cond();
}

}  // namespace fr::test
