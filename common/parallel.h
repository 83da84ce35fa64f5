// fr::parallel: the one way the analyzer and the synthetic dump generator fan work out over
// threads (dump files to read or write, JSON parts to render, evidence rows to build, two passes
// side by side). Items are numbered 0..n-1 and handed out in that order
// to whichever thread is free; each item writes only its own result slot, so what comes out
// never depends on which thread ran what or when. Header-only (templates over the body).
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <exception>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

namespace fr::parallel {

// The threads used for `items` items when `asked` were asked for (0: one per core): at least
// one, at most one per item.
inline unsigned thread_count(unsigned asked, size_t items) {
  if (asked == 0) asked = std::max(1u, std::thread::hardware_concurrency());
  return static_cast<unsigned>(std::min<size_t>(asked, std::max<size_t>(1, items)));
}

namespace detail {

// Started threads, joined on every way out. A thread that cannot be started is left out: the
// others (or the caller) do its share.
class Pool {
 public:
  template <class Work>
  Pool(unsigned count, Work& work) {
    for (unsigned k = 0; k < count; ++k) {
      try {
        threads_.emplace_back(std::ref(work));
      } catch (const std::system_error&) {
        break;
      }
    }
  }
  ~Pool() { join(); }
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;
  void join() {
    for (auto& t : threads_)
      if (t.joinable()) t.join();
  }
  bool empty() const { return threads_.empty(); }

 private:
  std::vector<std::thread> threads_;
};

}  // namespace detail

// Calls body(i) once for every i in [0, n), on thread_count(threads, n) threads of which the
// calling thread is one, and returns when all are done. When a body throws, no item is started
// after it, and once every thread has stopped the exception of the lowest item that threw is
// rethrown here.
template <class Body>
void for_each_index(size_t n, unsigned threads, Body&& body) {
  std::atomic<size_t> next{0};
  std::mutex mu;
  size_t failed = n;
  std::exception_ptr error;
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < n;) {
      try {
        body(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu);
        if (i < failed) failed = i, error = std::current_exception();
        next = n;
      }
    }
  };
  {
    detail::Pool pool(thread_count(threads, n) - 1, work);
    work();
  }
  if (error) std::rethrow_exception(error);
}

// Runs first() and second() side by side (one on a thread of its own, one on the calling thread)
// and returns when both are done; both in turn on the calling thread when no thread can be
// started. When one throws, the other is not started if it has not been yet (as for_each_index),
// and the exception is rethrown once both have stopped, first()'s when both threw.
template <class First, class Second>
void both(First&& first, Second&& second) {
  for_each_index(2, 2, [&](size_t i) {
    if (i == 0)
      first();
    else
      second();
  });
}

// The same with the results taken in order: `threads` (thread_count) workers run body(i) while
// the calling thread calls consume(i) for i = 0, 1, ... as soon as item i is done, so a result can
// be written out and freed while later ones are still made. When body(i) throws, consume stops
// before i, no further item is started, and the exception is rethrown here once the workers
// have stopped; an exception from consume does the same.
template <class Body, class Consume>
void for_each_index_ordered(size_t n, unsigned threads, Body&& body, Consume&& consume) {
  if (n == 0) return;
  std::atomic<size_t> next{0};
  std::mutex mu;
  std::condition_variable ready;
  std::vector<char> done(n, 0);
  std::vector<std::exception_ptr> errors(n);
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < n;) {
      std::exception_ptr e;
      try {
        body(i);
      } catch (...) {
        e = std::current_exception();
      }
      std::lock_guard<std::mutex> lock(mu);
      errors[i] = e;
      done[i] = 1;
      ready.notify_all();
    }
  };
  detail::Pool pool(thread_count(threads, n), work);
  std::exception_ptr error;
  if (pool.empty()) work();  // no thread could be started: the work is done here, then taken
  try {
    for (size_t i = 0; i < n; ++i) {
      {
        std::unique_lock<std::mutex> lock(mu);
        ready.wait(lock, [&] { return done[i] != 0; });
        error = errors[i];
      }
      if (error) break;
      consume(i);
    }
  } catch (...) {
    error = std::current_exception();
  }
  next = n;  // the workers take nothing more
  pool.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace fr::parallel
