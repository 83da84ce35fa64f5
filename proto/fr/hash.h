/* fr/hash.h: the 64-bit finalizer (murmur3's fmix64) that spreads close inputs far apart. The
 * agent derives communicator ids with it and the fake-dump generator its deterministic noise; one
 * copy, header-only, so that the agent links nothing new. */
#ifndef FR_HASH_H
#define FR_HASH_H

#include <stdint.h>

static inline uint64_t fr_mix64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return x;
}

#endif /* FR_HASH_H */
