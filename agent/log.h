// The flight log (log.cpp): the file in shared memory every call is recorded into, and the ring's
// record slots, taken and released under their sequence locks by the call path.
#pragma once

#include <nccl.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "agent.h"
#include "fr/flight_log.h"

namespace fr::agent {

// The open log. log.cpp creates and maps the file and lays out every table in it (and the private
// side tables of comms.h and graphs.h, in one anonymous mapping); the subsystems write their own
// table through the pointer and capacity here.
struct LogState {
  fr_log_header* hdr;
  fr_record* ring;
  uint32_t ring_cap;
  uint32_t ring_mask;  // ring_cap - 1 when ring_cap is a power of two, else 0
  // Records lost to a busy slot (atomic; the header's overwritten adds laps).
  uint64_t records_lost;
  fr_log_section* sections;  // the log's directory, one row per kind (FR_SECTION_*)
  fr_comm_entry* comms;      // communicators (comms.cpp)
  uint32_t comm_cap;
  uint32_t graph_cap;
  fr_graph_entry* graphs;  // CUDA graphs and their captured ops (graphs.cpp)
  fr_record* captures;
  uint32_t capture_cap;
  uint32_t chan_cap;
  fr_chan_entry* chans;  // channel progress from NCCL's profiler interface (profiler.cpp)
  fr_xfer_entry* xfers;  // NIXL transfers (xfers.cpp)
  uint32_t xfer_cap;
  int fd;
  uint64_t map_size;
  uint8_t* map;  // the shared mapping of the log file
  // Private tables, one anonymous mapping: the handle map and CommPriv (comms.h), GraphPriv and
  // the exec map (graphs.h).
  uint8_t* priv_map;
  uint64_t priv_size;
  char path[512];
  // Flags set before the log exists (NIXL resolves at its first call, which may come first); the
  // log takes them when it opens (atomic).
  uint32_t pending_flags;
};
FR_HIDDEN extern constinit LogState g_log;

FR_HIDDEN bool log_open();
FR_HIDDEN void log_forget_in_child();

// A record slot held under its sequence lock: the call path stores the fields into it directly
// (never building a record and copying it), and at exit only the words that changed.
struct HeldRecord {
  fr_record* slot;
  uint64_t before;  // the lock's even value when taken
};
// The ring slot of record `id`.
inline fr_record* record_slot(uint64_t id) {
  const LogState& c = g_log;
  return &c.ring[__builtin_expect(c.ring_mask != 0, 1) ? (id & c.ring_mask) : id % c.ring_cap];
}
// A record lost to a slot busy with another thread's write (rare): counted, and the header's
// count updated (agent.cpp).
FR_HIDDEN __attribute__((noinline, cold)) void record_lost(uint64_t id);
// Reserves the next record id (*id) and takes its slot's lock; `heartbeat_ns` becomes the log's
// heartbeat. False when the slot was busy with another thread's write (the ring lapped it): the
// record is counted lost and nothing may be written (held->slot still names the slot).
__attribute__((always_inline)) inline bool record_reserve(uint64_t heartbeat_ns, uint64_t* id,
                                                          HeldRecord* held) {
  fr_log_header* h = g_log.hdr;
  *id = __atomic_fetch_add(&h->record_counter, 1, __ATOMIC_ACQ_REL);
  // The header's count of lost records: the ring's laps plus the records lost to a busy slot,
  // stored rather than added to, so that a record costs one locked instruction less. With several
  // threads writing at once it can trail by the records being reserved at that moment, never lead;
  // readers take the larger of it and record_counter - ring_capacity (log/reader.cpp).
  if (__builtin_expect(*id >= g_log.ring_cap, 1))
    __atomic_store_n(
        &h->overwritten,
        *id + 1 - g_log.ring_cap + __atomic_load_n(&g_log.records_lost, __ATOMIC_RELAXED),
        __ATOMIC_RELAXED);
  __atomic_store_n(&h->heartbeat_ns, heartbeat_ns, __ATOMIC_RELAXED);
  held->slot = record_slot(*id);
  if (__builtin_expect(fr_seq_try_begin(&held->slot->lock, &held->before), 1)) return true;
  record_lost(*id);
  return false;
}
// The same, for callers that test held->slot (nullptr when the record is lost). Returns the id.
__attribute__((always_inline)) inline uint64_t record_take_new(uint64_t heartbeat_ns,
                                                               HeldRecord* held) {
  uint64_t id;
  if (!record_reserve(heartbeat_ns, &id, held)) held->slot = nullptr;
  return id;
}
// Takes the lock of record `id` again, in its slot `s`; false if the slot is busy or holds a newer
// record.
__attribute__((always_inline)) inline bool record_take_in(fr_record* s, uint64_t id,
                                                          HeldRecord* held) {
  if (__builtin_expect(!fr_seq_try_begin(&s->lock, &held->before), 0)) return false;
  if (__builtin_expect(__atomic_load_n(&s->id, __ATOMIC_RELAXED) != id, 0)) {
    // Lapped: leave the newer record as it is (the lock value still moves on, which is harmless).
    fr_seq_end(&s->lock, held->before);
    return false;
  }
  held->slot = s;
  return true;
}
inline bool record_take(uint64_t id, HeldRecord* held) {
  return record_take_in(record_slot(id), id, held);
}
inline void record_release(const HeldRecord& held) { fr_seq_end(&held.slot->lock, held.before); }

// One 64-bit word of a held record, read or written with relaxed atomic accesses (the lock orders
// them for readers), seen through a struct that mirrors the record's fields at `offset`.
template <class T>
inline T record_word(const fr_record* r, size_t offset) {
  static_assert(sizeof(T) == 8, "one record word");
  uint64_t v = __atomic_load_n((const uint64_t*)((const uint8_t*)r + offset), __ATOMIC_RELAXED);
  T t;
  memcpy(&t, &v, sizeof t);
  return t;
}
template <class T>
inline void set_record_word(fr_record* r, size_t offset, const T& t) {
  static_assert(sizeof(T) == 8, "one record word");
  uint64_t v;
  memcpy(&v, &t, sizeof v);
  __atomic_store_n((uint64_t*)((uint8_t*)r + offset), v, __ATOMIC_RELAXED);
}
// A record word's struct from its 64-bit value.
template <class T>
inline T record_word_of(uint64_t v) {
  static_assert(sizeof(T) == 8, "one record word");
  T t;
  memcpy(&t, &v, sizeof t);
  return t;
}
// The record's words made of smaller fields, in the record's own order.
struct RecTidOp {
  uint32_t tid;
  uint16_t op;
  uint8_t dtype;
  uint8_t gpu_state;
};
struct RecRedopPeer {
  int32_t redop;
  int32_t peer;
};
struct RecResultFlags {
  int32_t result;
  uint32_t flags;
};
static_assert(offsetof(fr_record, op) == offsetof(fr_record, tid) + 4 &&
                  offsetof(fr_record, dtype) == offsetof(fr_record, tid) + 6 &&
                  offsetof(fr_record, gpu_state) == offsetof(fr_record, tid) + 7 &&
                  offsetof(fr_record, peer) == offsetof(fr_record, redop) + 4 &&
                  offsetof(fr_record, flags) == offsetof(fr_record, result) + 4 &&
                  offsetof(fr_record, tid) % 8 == 0 && offsetof(fr_record, redop) % 8 == 0 &&
                  offsetof(fr_record, result) % 8 == 0,
              "the word structs mirror fr_record");

// Reserves a record id and publishes `r` (whose id it fills in). Returns the id.
FR_HIDDEN uint64_t record_begin(fr_record& r);
// Republishes a record already begun, if its slot still holds it.
FR_HIDDEN void record_update(const fr_record& r);
// Applies `fn` to the stored copy of record `id`, if its slot still holds it.
FR_HIDDEN void record_modify(uint64_t id, void (*fn)(fr_record&, const void*), const void* arg);
FR_HIDDEN void set_log_flags(uint32_t set, uint32_t clear);

}  // namespace fr::agent
