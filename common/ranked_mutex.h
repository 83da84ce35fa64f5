// A mutex with a rank, so that a lock order is kept by the code and not only by a comment: a
// thread may take a RankedMutex only while every RankedMutex it holds has a lower rank. Taking
// one out of order (a higher or equal rank held) aborts at once, naming both locks, in every
// build: a lock order broken once is a deadlock waiting for the right interleaving, and the
// check is a thread-local word (which ranks this thread holds), cheaper than the lock itself.
//
// try_lock is exempt from the order (it cannot wait, so it cannot deadlock) but counts as held;
// a thread holds at most one RankedMutex of each rank, whichever way it took it.
// A condition variable over a RankedMutex is std::condition_variable_any: its wait releases and
// takes the mutex again through unlock() and lock(), so the bookkeeping stays right. Ranks are
// 1 to 63; each user keeps its list of ranks in one place (daemon/base/lock_order.h).
#pragma once

#include <mutex>

namespace fr {

class RankedMutex {
 public:
  static constexpr int kMaxRank = 63;

  // `name` must outlive the mutex (a string literal): it is what the abort message says.
  RankedMutex(int rank, const char* name);
  RankedMutex(const RankedMutex&) = delete;
  RankedMutex& operator=(const RankedMutex&) = delete;

  void lock();
  bool try_lock();
  void unlock();

  int rank() const { return rank_; }
  const char* name() const { return name_; }

  // The highest rank the calling thread holds; 0 when it holds none.
  static int highest_held();

 private:
  std::mutex mu_;
  const int rank_;
  const char* const name_;
};

}  // namespace fr
