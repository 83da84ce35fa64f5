// See ranked_mutex.h.
#include "common/ranked_mutex.h"

#include <bit>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

namespace fr {

namespace {

// Per thread: bit r set while this thread holds a RankedMutex of rank r, and that mutex's name.
thread_local uint64_t t_held = 0;
thread_local const char* t_names[RankedMutex::kMaxRank + 1];

int highest(uint64_t held) { return held ? 63 - std::countl_zero(held) : 0; }

void hold(int rank, const char* name) {
  t_held |= uint64_t(1) << rank;
  t_names[rank] = name;
}

}  // namespace

RankedMutex::RankedMutex(int rank, const char* name) : rank_(rank), name_(name) {
  if (rank < 1 || rank > kMaxRank) {
    std::fprintf(stderr, "fr: lock %s: rank %d is not from 1 to %d\n", name, rank, kMaxRank);
    std::abort();
  }
}

void RankedMutex::lock() {
  const int top = highest(t_held);
  if (top >= rank_) {
    std::fprintf(stderr,
                 "fr: lock order broken: taking %s (rank %d) while holding %s (rank %d); a "
                 "thread takes locks in increasing rank only\n",
                 name_, rank_, t_names[top], top);
    std::abort();
  }
  mu_.lock();
  hold(rank_, name_);
}

bool RankedMutex::try_lock() {
  if ((t_held >> rank_) & 1) {
    std::fprintf(stderr,
                 "fr: lock order broken: trying %s (rank %d) while holding %s (same rank)\n", name_,
                 rank_, t_names[rank_]);
    std::abort();
  }
  if (!mu_.try_lock()) return false;
  hold(rank_, name_);
  return true;
}

void RankedMutex::unlock() {
  t_held &= ~(uint64_t(1) << rank_);
  mu_.unlock();
}

int RankedMutex::highest_held() { return highest(t_held); }

}  // namespace fr
