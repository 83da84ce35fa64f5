// NCCL's hash of a communicator (its commHash): what NCCL passes to the profiler plugin's init as
// `commId`, so it is part of that interface. NCCL 2.28 to 2.32 compute it the same way: of the
// first unique id's 128 bytes for the init family; of (the parent's hash, the parent's split count
// from 1, color) for a split. The agent computes it to tell which of its communicators a profiler
// context belongs to; the emulation computes it to pass what NCCL passes.
//
// The function is a two-word accumulator: each input is mixed in after its length, in 8-byte
// words (the last one zero-padded); the digest folds the two words into one.
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <string.h>

namespace fr::nccl_prof {
namespace hash_detail {

struct Acc {
  uint64_t a = 1, b = 1;
};

inline void absorb(Acc& s, const void* bytes, size_t n) {
  const unsigned char* p = static_cast<const unsigned char*>(bytes);
  s.a ^= n;
  while (n > 0) {
    s.a += s.b;
    s.b ^= s.a;
    s.a ^= s.a >> 31;
    s.a *= 0x9de62bbc8cef3ce3ull;
    s.b ^= s.b >> 32;
    s.b *= 0x485cd6311b599e79ull;
    uint64_t word = 0;
    size_t take = n < sizeof word ? n : sizeof word;
    memcpy(&word, p, take);
    p += take;
    n -= take;
    s.a += word;
  }
}

inline uint64_t digest(const Acc& s) {
  uint64_t h = s.a;
  h ^= h >> 31;
  h *= 0xbac3bd562846de6bull;
  h += s.b;
  h ^= h >> 32;
  h *= 0x995a187a14e7b445ull;
  return h;
}

}  // namespace hash_detail

inline uint64_t nccl_id_hash(const void* id_bytes, size_t n) {
  hash_detail::Acc s;
  hash_detail::absorb(s, id_bytes, n);
  return hash_detail::digest(s);
}

inline uint64_t nccl_split_hash(uint64_t parent, int split_count, int color) {
  hash_detail::Acc s;
  hash_detail::absorb(s, &parent, sizeof parent);
  hash_detail::absorb(s, &split_count, sizeof split_count);
  hash_detail::absorb(s, &color, sizeof color);
  return hash_detail::digest(s);
}

}  // namespace fr::nccl_prof
