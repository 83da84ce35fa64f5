/*
 * The sequence lock every entry of a flight log is guarded by (fr/flight_log.h): the one writer
 * makes the lock word odd, writes the payload, and makes it even again; a reader that sees the
 * same even value before and after copying has a whole, untorn copy. Writer and readers both use
 * these primitives, so the protocol lives in one place. C, like the format, so that the agent
 * needs no C++ runtime.
 */
#ifndef FR_SEQLOCK_H_
#define FR_SEQLOCK_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------------------------
 * Payload words are moved with relaxed atomic accesses (no data race in the C11/C++ model, and
 * clean under ThreadSanitizer); the lock word orders them.
 * ------------------------------------------------------------------------------------------- */

static inline uint64_t fr_atomic_load64(const uint64_t* p) {
  return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}
static inline void fr_atomic_store64(uint64_t* p, uint64_t v) {
  __atomic_store_n(p, v, __ATOMIC_RELEASE);
}
static inline uint32_t fr_atomic_load32(const uint32_t* p) {
  return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}
static inline void fr_atomic_store32(uint32_t* p, uint32_t v) {
  __atomic_store_n(p, v, __ATOMIC_RELEASE);
}

/* Writer: take the lock of an entry. Fails (returns 0) when another thread of the writer holds it;
 * the caller then skips or retries. On success *before holds the even value the lock had. */
static inline int fr_seq_try_begin(uint64_t* lock, uint64_t* before) {
  uint64_t v = __atomic_load_n(lock, __ATOMIC_RELAXED);
  if (v & 1u) return 0;
  if (!__atomic_compare_exchange_n(lock, &v, v + 1u, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
    return 0;
  __atomic_thread_fence(__ATOMIC_RELEASE);
  *before = v;
  return 1;
}

/* Writer: take the lock again only if it still holds `released`, the value this writer released it
 * with: then nothing touched the entry since (lock values only grow), and one compare-and-swap
 * does. Returns 0 otherwise; the caller falls back to fr_seq_try_begin and checks the entry. */
static inline int fr_seq_try_begin_from(uint64_t* lock, uint64_t released) {
  uint64_t v = released;
  if (!__atomic_compare_exchange_n(lock, &v, released + 1u, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
    return 0;
  __atomic_thread_fence(__ATOMIC_RELEASE);
  return 1;
}

/* Writer: release the lock taken by fr_seq_try_begin; the entry is valid again. */
static inline void fr_seq_end(uint64_t* lock, uint64_t before) {
  __atomic_store_n(lock, before + 2u, __ATOMIC_RELEASE);
}

/* Copies `words` 64-bit words with relaxed atomic accesses (the payload of a locked entry). */
static inline void fr_copy_words_out(uint64_t* dst, const uint64_t* src, size_t words) {
  for (size_t i = 0; i < words; ++i) dst[i] = __atomic_load_n(&src[i], __ATOMIC_RELAXED);
}
static inline void fr_copy_words_in(uint64_t* dst, const uint64_t* src, size_t words) {
  for (size_t i = 0; i < words; ++i) __atomic_store_n(&dst[i], src[i], __ATOMIC_RELAXED);
}

/* Writer: the one publish of every locked entry: the `words` payload words after the lock word of
 * `src` into those of `slot`, under the lock. Returns 0 if the entry was busy with another
 * thread's write. */
static inline int fr_seq_publish(uint64_t* slot, const uint64_t* src, size_t words) {
  uint64_t before;
  if (!fr_seq_try_begin(slot, &before)) return 0;
  fr_copy_words_in(slot + 1, src + 1, words);
  fr_seq_end(slot, before);
  return 1;
}

/* Reader: the one read of every locked entry. Copies the `words` payload words that follow the
 * lock word at `slot` (an entry's first word) into `out` (the same layout), and stores the lock
 * value in out[0]. Returns 1 for a whole, published copy; 0 when the entry was never written, was
 * being written, or changed while it was copied (torn). */
static inline int fr_seq_read(const uint64_t* slot, uint64_t* out, size_t words) {
  uint64_t l1 = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
  if (l1 == 0 || (l1 & 1u)) return 0;
  fr_copy_words_out(out + 1, slot + 1, words);
  __atomic_thread_fence(__ATOMIC_ACQUIRE);
  uint64_t l2 = __atomic_load_n(slot, __ATOMIC_RELAXED);
  if (l1 != l2) return 0;
  out[0] = l1;
  return 1;
}

#ifdef __cplusplus
}
#endif

#endif /* FR_SEQLOCK_H_ */
