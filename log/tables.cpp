// Reading a table's entries from memory or, a window at a time, from a file (tables.h).
#include "tables.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <memory>

namespace fr::log::detail {

namespace {

// The bytes one window copies: a few hundred records, as many as one read costs little for. Three
// buffers of this size per reading thread are all a file costs beyond the entries kept.
constexpr size_t kWindowBytes = size_t{256} << 10;
static_assert(kWindowBytes >= (size_t{1} << 16), "a window holds at least the largest entry");

// Entries in a hole, or past a shrunken end, read as this: all zero, never written.
alignas(8) const uint8_t kZeros[size_t{1} << 16] = {};

// This thread's three buffers (lock words before, entries, lock words after), 8-byte aligned.
uint8_t* buffer(int which) {
  thread_local std::unique_ptr<uint64_t[]> words[3];
  if (!words[which]) words[which].reset(new uint64_t[kWindowBytes / 8]);
  return reinterpret_cast<uint8_t*>(words[which].get());
}

// Reads up to `n` bytes at `offset`; what could not be read (end of file, an error) is zero.
void pread_zeroed(int fd, uint8_t* dst, size_t n, uint64_t offset) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = ::pread(fd, dst + got, n - got, off_t(offset + got));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += size_t(r);
  }
  std::memset(dst + got, 0, n - got);
}

uint64_t word_at(const uint8_t* p) {
  uint64_t w;
  std::memcpy(&w, p, sizeof w);
  return w;
}

}  // namespace

const uint8_t* Table::slot(uint64_t i) const {
  return start != nullptr ? start + i * stride : window->entry(*this, i);
}

bool Table::read_bytes(uint64_t i, uint64_t* dst) const {
  if (copied) {  // the same checks as below; a plain copy, which the compiler can widen
    const uint8_t* src = slot(i);
    uint64_t l1 = word_at(src);
    if (l1 == 0 || (l1 & 1u)) return false;
    std::memcpy(dst, src, keep / 8 * 8);
    return true;
  }
  if (window != nullptr) return window->read_live(*this, i, dst);
  return read_shared(i, dst);
}

// Memory a writer may share (read_log_bytes over a caller's buffer): the words up to locked_end
// under the lock, the live words after it one by one.
bool Table::read_shared(uint64_t i, uint64_t* dst) const {
  auto* src = reinterpret_cast<const uint64_t*>(slot(i));
  const size_t locked = std::min(locked_end, keep) / 8;
  for (int attempt = 0; attempt < (live ? kLiveRetries : 1); ++attempt) {
    uint64_t l1 = __atomic_load_n(&src[0], __ATOMIC_ACQUIRE);
    if (l1 == 0) return false;  // never written: retrying will not help
    if (l1 & 1u) continue;
    fr_copy_words_out(dst + 1, src + 1, locked - 1);
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    if (__atomic_load_n(&src[0], __ATOMIC_RELAXED) != l1) continue;
    dst[0] = l1;
    fr_copy_words_out(dst + locked, src + locked, keep / 8 - locked);
    return true;
  }
  return false;
}

void Window::load(const Table& t, uint64_t i) {
  owner_ = &t;
  count_ = std::min(std::max<uint64_t>(1, kWindowBytes / t.stride), t.capacity - i);
  first_ = i;
  const uint64_t from = t.offset + i * t.stride;
  // The last entry of a window needs only its kept bytes.
  const size_t bytes = size_t((count_ - 1) * t.stride + t.keep);
  const uint64_t to = from + bytes;
  zero_ = false;
  if (from >= hole_from_ && to <= hole_until_) {
    zero_ = true;
    return;
  }
  off_t data = ::lseek(fd_, off_t(from), SEEK_DATA);
  if (data >= 0 || errno == ENXIO) {  // a file system without SEEK_DATA: read everything
    hole_from_ = from;
    hole_until_ = data >= 0 ? uint64_t(data) : UINT64_MAX;
    if (to <= hole_until_) {
      zero_ = true;
      return;
    }
  }
  if (t.live) pread_zeroed(fd_, buffer(0), bytes, from);
  pread_zeroed(fd_, buffer(1), bytes, from);
  if (t.live) pread_zeroed(fd_, buffer(2), bytes, from);
}

const uint8_t* Window::entry(const Table& t, uint64_t i) {
  if (owner_ != &t || i < first_ || i >= first_ + count_) load(t, i);
  return zero_ ? kZeros : buffer(1) + (i - first_) * t.stride;
}

bool Window::read_live(const Table& t, uint64_t i, uint64_t* dst) {
  const uint8_t* src = entry(t, i);
  const uint64_t l = word_at(src);
  if (l == 0) return false;  // never written: reading again will not help
  if (!zero_) {
    const size_t at = size_t((i - first_) * t.stride);
    if (!(l & 1u) && word_at(buffer(0) + at) == l && word_at(buffer(2) + at) == l) {
      std::memcpy(dst, src, t.keep / 8 * 8);
      return true;
    }
  }
  return read_alone(t, i, dst);
}

// One entry the window caught mid-update: its lock word, its bytes, its lock word again, each
// read on its own, a few times.
bool Window::read_alone(const Table& t, uint64_t i, uint64_t* dst) {
  const uint64_t at = t.offset + i * t.stride;
  for (int attempt = 0; attempt < kLiveRetries; ++attempt) {
    uint8_t before[8], after[8];
    pread_zeroed(fd_, before, sizeof before, at);
    const uint64_t l = word_at(before);
    if (l == 0) return false;
    if (l & 1u) continue;
    pread_zeroed(fd_, reinterpret_cast<uint8_t*>(dst), t.keep / 8 * 8, at);
    pread_zeroed(fd_, after, sizeof after, at);
    if (word_at(after) == l && dst[0] == l) return true;
  }
  return false;
}

}  // namespace fr::log::detail
