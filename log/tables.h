// How the reader gets at the entries of one table of a log (internal to log/reader.cpp). A file
// is never mapped: a dump of up to 4 MiB is read whole into memory (reader.cpp), anything else
// with pread, a window of entries at a time, into buffers this thread owns. A log lives in a directory other users write to (/dev/shm), and its owner can shrink,
// grow or punch holes in it while it is read: a mapping of it raises SIGBUS on the first page past
// a shrunken end and, populated, allocates every hole of a sparse file in the writer's tmpfs. A
// copy costs neither: a shrunken end reads as empty entries, holes are skipped (SEEK_DATA) and
// never allocated, and what the reader holds is bounded by the window, not by the header's claims.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "fr/flight_log.h"

namespace fr::log::detail {

constexpr int kLiveRetries = 4;  // attempts per entry while a live writer is mid-update

class Window;

// One table: where its entries are, the stride the writer used, the bytes kept of each
// (bytes_kept) and where the part under the sequence lock ends. Its entries come from memory
// (`start`: read_log_bytes) or from a file through `window`.
struct Table {
  const uint8_t* start = nullptr;
  Window* window = nullptr;
  uint64_t offset = 0;    // of the first entry in the file (window only)
  uint64_t capacity = 0;  // entries (window only: it reads none past the table)
  uint64_t stride = 0;
  size_t keep = 0;
  size_t locked_end = 0;
  bool live = false;
  bool copied = false;  // a dump in private memory: nothing writes it meanwhile

  // The bytes of entry i: in memory, or in the window's copy (valid until another entry outside
  // the window is asked for).
  const uint8_t* slot(uint64_t i) const;
  uint64_t lock(uint64_t i) const {
    uint64_t l;
    std::memcpy(&l, slot(i), sizeof l);
    return l;
  }
  // The format's sequence-lock read (fr_record_read, fr_comm_read, fr_graph_read) for an entry
  // of the stored size, retried while a live writer is in the middle of it.
  template <typename T>
  bool read(uint64_t i, T* out) const {
    static_assert(sizeof(T) % 8 == 0, "entries are whole words");
    return read_bytes(i, reinterpret_cast<uint64_t*>(out));
  }

 private:
  bool read_bytes(uint64_t i, uint64_t* dst) const;
  bool read_shared(uint64_t i, uint64_t* dst) const;
};

// A file read through pread. For a live log each window is copied three times: the lock words,
// then the entries, then the lock words again, each a separate read; an entry is taken when its
// lock word was the same, even and not zero, before and after its bytes were copied (the
// sequence lock's rule across two reads of the file). An entry that changed meanwhile is read
// again alone, as fr_record_read would retry.
class Window {
 public:
  explicit Window(int fd) : fd_(fd) {}
  Window(const Window&) = delete;
  Window& operator=(const Window&) = delete;

  // The bytes of entry i of `t`, loading the window that holds it.
  const uint8_t* entry(const Table& t, uint64_t i);
  // Live log: copies entry i of `t` (t.keep bytes) into `dst` if it read whole.
  bool read_live(const Table& t, uint64_t i, uint64_t* dst);

 private:
  void load(const Table& t, uint64_t i);
  bool read_alone(const Table& t, uint64_t i, uint64_t* dst);

  int fd_;
  const Table* owner_ = nullptr;
  uint64_t first_ = 0, count_ = 0;  // the entries of owner_ in the buffers
  bool zero_ = false;               // the window lies in a hole (or past the end): all zero
  uint64_t hole_from_ = 0, hole_until_ = 0;  // bytes known to be a hole (SEEK_DATA)
};

}  // namespace fr::log::detail
