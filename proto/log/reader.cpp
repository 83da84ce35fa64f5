// The flight-log reader. Every size and offset in a file is checked before it is used, every
// record is copied under its sequence lock and checked against the slot it should be in, so a
// torn, stale, truncated or hostile file yields a clear error or fewer records, never a crash.
#include "log/reader.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <unordered_map>

#include "log/safe_file.h"

namespace fr::log {

namespace {

constexpr int kLiveRetries = 4;  // attempts per slot while a live writer is mid-update

std::string fixed_string(const char* s, size_t n) { return std::string(s, strnlen(s, n)); }

ReadResult fail(ReadError e, const std::string& name, const std::string& what) {
  ReadResult r;
  r.error = e;
  r.message = name + ": " + what;
  return r;
}

// Copies the header with relaxed word loads: a live writer updates its counters concurrently.
fr_log_header load_header(const uint8_t* base) {
  fr_log_header h;
  fr_copy_words_out(reinterpret_cast<uint64_t*>(&h), reinterpret_cast<const uint64_t*>(base),
                    sizeof h / 8);
  return h;
}

// Checks the geometry a header claims against the bytes actually present.
ReadError check_geometry(const fr_log_header& h, size_t size, std::string* why) {
  auto bad = [&](ReadError e, std::string s) {
    *why = std::move(s);
    return e;
  };
  if (h.header_size < sizeof(fr_log_header) || h.comm_size < sizeof(fr_comm_entry) ||
      h.record_size < sizeof(fr_record))
    return bad(ReadError::kCorrupt, "structure sizes smaller than version " +
                                        std::to_string(h.version) + " defines");
  if (h.header_size % 8 || h.comm_size % 8 || h.record_size % 8 || h.comm_offset % 8 ||
      h.ring_offset % 8)
    return bad(ReadError::kCorrupt, "misaligned structure sizes or offsets");
  if (h.header_size > (1u << 20) || h.comm_size > (1u << 16) || h.record_size > (1u << 16))
    return bad(ReadError::kCorrupt, "implausible structure sizes");
  if (h.ring_capacity == 0 || h.ring_capacity > FR_MAX_RING_CAPACITY)
    return bad(ReadError::kCorrupt, "ring capacity " + std::to_string(h.ring_capacity) +
                                        " out of range");
  if (h.comm_capacity > FR_MAX_COMM_CAPACITY)
    return bad(ReadError::kCorrupt, "communicator capacity out of range");
  // Capacities and sizes are bounded above, so these products cannot overflow 64 bits.
  uint64_t comm_end = h.comm_offset + uint64_t{h.comm_capacity} * h.comm_size;
  uint64_t ring_end = h.ring_offset + uint64_t{h.ring_capacity} * h.record_size;
  if (h.comm_offset < h.header_size || h.comm_offset > (1ull << 40) || h.ring_offset < comm_end ||
      h.ring_offset > (1ull << 40) || h.file_size < ring_end)
    return bad(ReadError::kCorrupt, "overlapping or out-of-order sections");
  // Version 2's graph sections follow the ring; a capacity of 0 means there are none.
  if (h.graph_capacity != 0 || h.capture_capacity != 0) {
    if (h.graph_capacity > FR_MAX_GRAPH_CAPACITY || h.capture_capacity > FR_MAX_CAPTURE_CAPACITY)
      return bad(ReadError::kCorrupt, "graph or capture capacity out of range");
    if (h.graph_size < sizeof(fr_graph_entry) || h.graph_size % 8 || h.graph_size > (1u << 16) ||
        h.graph_offset % 8 || h.capture_offset % 8)
      return bad(ReadError::kCorrupt, "misaligned or implausible graph sections");
    uint64_t graph_end = h.graph_offset + uint64_t{h.graph_capacity} * h.graph_size;
    uint64_t capture_end = h.capture_offset + uint64_t{h.capture_capacity} * h.record_size;
    if (h.graph_offset < ring_end || h.graph_offset > (1ull << 40) ||
        h.capture_offset < graph_end || h.capture_offset > (1ull << 40) ||
        h.file_size < capture_end)
      return bad(ReadError::kCorrupt, "overlapping or out-of-order graph sections");
  }
  if (h.file_size > size)
    return bad(ReadError::kTruncated, "file is " + std::to_string(size) + " bytes, header says " +
                                          std::to_string(h.file_size));
  return ReadError::kNone;
}

bool plausible_comm(const fr_comm_entry& c) {
  if (c.id == 0) return false;
  if (c.size < -1 || c.size > (1 << 24)) return false;
  if (c.rank < -1 || (c.size > 0 && c.rank >= c.size)) return false;
  return true;
}

// Reads a slot under its lock, retrying while a live writer is in the middle of it.
template <typename T, typename ReadFn>
bool read_locked(const T* slot, T* out, bool live, ReadFn fn) {
  for (int i = 0; i < (live ? kLiveRetries : 1); ++i) {
    if (fn(slot, out)) return true;
    uint64_t l = __atomic_load_n(&slot->lock, __ATOMIC_RELAXED);
    if (l == 0) return false;  // never written: retrying will not help
  }
  return false;
}

ReadResult parse(const uint8_t* base, size_t size, const std::string& name, int fd) {
  if (size < 16) return fail(ReadError::kTooSmall, name, size ? "too small to be a flight log (" +
                                                                    std::to_string(size) + " bytes)"
                                                              : "empty file");
  uint64_t magic;
  uint32_t version;
  std::memcpy(&magic, base, 8);
  std::memcpy(&version, base + 8, 4);
  if (magic != FR_LOG_MAGIC) return fail(ReadError::kBadMagic, name, "not a flight log (bad magic)");
  if (version == 0) return fail(ReadError::kCorrupt, name, "format version 0");
  if (version > FR_LOG_VERSION)
    return fail(ReadError::kNewerVersion, name,
                "format version " + std::to_string(version) + " is newer than this reader (" +
                    std::to_string(FR_LOG_VERSION) + "); upgrade fr");
  if (size < sizeof(fr_log_header))
    return fail(ReadError::kTruncated, name, "truncated inside the header");

  LogFile log;
  log.path = name;
  log.header = load_header(base);
  fr_log_header& h = log.header;
  std::string why;
  if (ReadError e = check_geometry(h, size, &why); e != ReadError::kNone) return fail(e, name, why);
  h.job_id[FR_NAME_LEN - 1] = h.hostname[FR_NAME_LEN - 1] = h.exe[FR_NAME_LEN - 1] = '\0';
  log.is_snapshot = (h.flags & FR_LOG_F_SNAPSHOT) != 0;
  const bool live = !log.is_snapshot;

  // Communicators. Entries of a newer, larger layout share our prefix, so we read that prefix.
  std::unordered_map<uint64_t, size_t> comm_index;
  for (uint32_t i = 0; i < h.comm_capacity; ++i) {
    auto* slot = reinterpret_cast<const fr_comm_entry*>(base + h.comm_offset + uint64_t{i} * h.comm_size);
    if (__atomic_load_n(&slot->lock, __ATOMIC_RELAXED) == 0) continue;
    fr_comm_entry c{};
    if (!read_locked(slot, &c, live, fr_comm_read) || !plausible_comm(c)) {
      ++log.comms_torn;
      continue;
    }
    c.name[FR_NAME_LEN - 1] = '\0';
    if (comm_index.count(c.id)) {  // a communicator registered twice: keep the newest entry
      log.comms[comm_index[c.id]] = c;
      continue;
    }
    comm_index[c.id] = log.comms.size();
    log.comms.push_back(c);
  }

  // Records: ids [counter - capacity, counter) are in the ring, each in slot id % capacity.
  const uint64_t counter = h.record_counter;
  const uint64_t first = counter > h.ring_capacity ? counter - h.ring_capacity : 0;
  log.records.reserve(counter - first);
  for (uint64_t id = first; id < counter; ++id) {
    auto* slot = reinterpret_cast<const fr_record*>(base + h.ring_offset +
                                                    (id % h.ring_capacity) * h.record_size);
    Record rec{};
    if (!read_locked(slot, &rec.raw, live, fr_record_read) || rec.raw.id != id) {
      // In a dump, an empty slot is a record the snapshot already refused (counted there).
      if (live || __atomic_load_n(&slot->lock, __ATOMIC_RELAXED) != 0) ++log.torn;
      continue;
    }
    // An out-of-range state (hostile or newer writer) reads as unknown, never as an enum value
    // no consumer handles.
    if (rec.raw.gpu_state > FR_GPU_COMPLETED) rec.raw.gpu_state = FR_GPU_NONE;
    rec.gpu_state = static_cast<fr_gpu_state>(rec.raw.gpu_state);
    if (auto it = comm_index.find(rec.raw.comm_id); it != comm_index.end()) {
      const fr_comm_entry& c = log.comms[it->second];
      rec.gpu_state = fr_resolve_gpu_state(&rec.raw, c.gpu_started, c.gpu_completed);
    }
    log.records.push_back(rec);
  }

  // Graphs and their captured ops (version 2 on; capacities are 0 before).
  for (uint32_t i = 0; i < h.graph_capacity; ++i) {
    auto* slot = reinterpret_cast<const fr_graph_entry*>(base + h.graph_offset + uint64_t{i} * h.graph_size);
    if (__atomic_load_n(&slot->lock, __ATOMIC_RELAXED) == 0) continue;
    fr_graph_entry g{};
    if (!read_locked(slot, &g, live, fr_graph_read) || g.id == 0 || g.ordinal == 0) {
      ++log.torn;
      continue;
    }
    log.graphs.push_back(g);
  }
  for (uint32_t i = 0; i < h.capture_capacity; ++i) {
    auto* slot = reinterpret_cast<const fr_record*>(base + h.capture_offset + uint64_t{i} * h.record_size);
    if (__atomic_load_n(&slot->lock, __ATOMIC_RELAXED) == 0) continue;
    fr_record r{};
    if (!read_locked(slot, &r, live, fr_record_read) || !(r.flags & FR_REC_F_CAPTURED)) {
      ++log.torn;
      continue;
    }
    if (r.gpu_state > FR_GPU_COMPLETED) r.gpu_state = FR_GPU_NONE;
    log.captures.push_back(r);
  }

  if (live) {
    log.writer_alive = false;
    if (fd >= 0) {
      struct flock fl {};
      fl.l_type = F_WRLCK;
      fl.l_whence = SEEK_SET;
      fl.l_start = 0;
      fl.l_len = 1;
      if (fcntl(fd, F_GETLK, &fl) == 0 && fl.l_type != F_UNLCK) {
        log.writer_alive = true;
        log.lock_pid = fl.l_pid;
      }
    }
  } else {
    log.writer_alive = h.writer_alive == 1;
  }

  ReadResult r;
  r.log = std::move(log);
  return r;
}

}  // namespace

const char* read_error_name(ReadError e) {
  switch (e) {
    case ReadError::kNone: return "none";
    case ReadError::kIo: return "io";
    case ReadError::kTooSmall: return "too_small";
    case ReadError::kBadMagic: return "bad_magic";
    case ReadError::kNewerVersion: return "newer_version";
    case ReadError::kCorrupt: return "corrupt";
    case ReadError::kTruncated: return "truncated";
  }
  return "unknown";
}

const fr_comm_entry* LogFile::find_comm(uint64_t id) const {
  for (const auto& c : comms)
    if (c.id == id) return &c;
  return nullptr;
}

std::string LogFile::job_id() const { return fixed_string(header.job_id, FR_NAME_LEN); }
std::string LogFile::hostname() const { return fixed_string(header.hostname, FR_NAME_LEN); }

ReadResult read_log(const std::string& path) {
  OpenedFile f = open_regular(path);
  if (!f.ok()) return fail(ReadError::kIo, path, f.reason);
  return read_log_fd(f.fd.get(), f.st, path);
}

ReadResult read_log_fd(int fd, const struct stat& st, const std::string& name) {
  if (!S_ISREG(st.st_mode)) return fail(ReadError::kIo, name, "not a regular file");
  size_t size = static_cast<size_t>(st.st_size);
  if (size < sizeof(fr_log_header)) {
    // Too small to map usefully: read what is there and let parse() name the problem.
    uint8_t buf[sizeof(fr_log_header)] = {};
    ssize_t n = size ? ::pread(fd, buf, size, 0) : 0;
    if (n < 0) return fail(ReadError::kIo, name, std::string("cannot read: ") + std::strerror(errno));
    return parse(buf, static_cast<size_t>(n), name, -1);
  }
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  if (map == MAP_FAILED)
    return fail(ReadError::kIo, name, std::string("cannot map: ") + std::strerror(errno));
  ReadResult r = parse(static_cast<const uint8_t*>(map), size, name, fd);
  ::munmap(map, size);
  return r;
}

ReadResult read_log_bytes(const void* data, size_t size, const std::string& name) {
  // parse() reads words with atomic loads, which need 8-byte alignment: copy when unaligned.
  if (reinterpret_cast<uintptr_t>(data) % 8 != 0) {
    std::vector<uint64_t> aligned((size + 7) / 8);
    if (size) std::memcpy(aligned.data(), data, size);
    return parse(reinterpret_cast<const uint8_t*>(aligned.data()), size, name, -1);
  }
  return parse(static_cast<const uint8_t*>(data), size, name, -1);
}

std::optional<bool> writer_alive(const std::string& path) {
  OpenedFile f = open_regular(path);
  if (!f.ok()) return std::nullopt;
  struct flock fl {};
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  fl.l_start = 0;
  fl.l_len = 1;
  std::optional<bool> alive;
  if (fcntl(f.fd.get(), F_GETLK, &fl) == 0) alive = fl.l_type != F_UNLCK;
  return alive;
}

std::string encode_snapshot(const LogFile& log, uint64_t snapshot_ns) {
  // Keep every record in its own slot: the ring spans [first id, counter).
  uint64_t counter = log.header.record_counter;
  uint64_t first = counter;
  if (!log.records.empty()) {
    counter = std::max(counter, log.records.back().raw.id + 1);
    first = log.records.front().raw.id;
  }
  uint64_t span = counter - first;
  if (span > FR_MAX_RING_CAPACITY) {
    span = FR_MAX_RING_CAPACITY;
    first = counter - span;
  }
  const uint32_t ring_cap = static_cast<uint32_t>(std::max<uint64_t>(span, 1));
  const uint32_t comm_cap = static_cast<uint32_t>(std::min<size_t>(log.comms.size(), FR_MAX_COMM_CAPACITY));

  const uint32_t graph_cap = static_cast<uint32_t>(std::min<size_t>(log.graphs.size(), FR_MAX_GRAPH_CAPACITY));
  const uint32_t capture_cap =
      static_cast<uint32_t>(std::min<size_t>(log.captures.size(), FR_MAX_CAPTURE_CAPACITY));
  std::string out(fr_log_file_size(comm_cap, ring_cap, graph_cap, capture_cap), '\0');
  auto* base = reinterpret_cast<uint8_t*>(out.data());

  fr_log_header h = log.header;
  h.magic = FR_LOG_MAGIC;
  h.version = FR_LOG_VERSION;
  h.header_size = sizeof(fr_log_header);
  h.comm_size = sizeof(fr_comm_entry);
  h.record_size = sizeof(fr_record);
  h.comm_capacity = comm_cap;
  h.ring_capacity = ring_cap;
  h.comm_offset = fr_log_comm_offset();
  h.ring_offset = fr_log_ring_offset(comm_cap);
  h.graph_offset = fr_log_graph_offset(comm_cap, ring_cap);
  h.graph_capacity = graph_cap;
  h.graph_size = sizeof(fr_graph_entry);
  h.graph_count = graph_cap;
  h.capture_offset = fr_log_capture_offset(comm_cap, ring_cap, graph_cap);
  h.capture_capacity = capture_cap;
  h.capture_count = capture_cap;
  h.file_size = out.size();
  h.record_counter = counter;
  h.comm_count = comm_cap;
  h.flags |= FR_LOG_F_SNAPSHOT;
  h.snapshot_ns = snapshot_ns;
  h.writer_alive = log.writer_alive ? 1 : 0;
  // A dump of a dump keeps the count of records its first snapshot already refused.
  uint64_t torn = log.torn + (log.is_snapshot ? log.header.torn_skipped : 0);
  h.torn_skipped = static_cast<uint32_t>(std::min<uint64_t>(torn, UINT32_MAX));
  std::memcpy(base, &h, sizeof h);

  for (uint32_t i = 0; i < comm_cap; ++i) {
    fr_comm_entry c = log.comms[i];
    c.lock = 2;
    std::memcpy(base + h.comm_offset + uint64_t{i} * sizeof c, &c, sizeof c);
  }
  for (const Record& rec : log.records) {
    if (rec.raw.id < first) continue;
    fr_record r = rec.raw;
    r.lock = 2;
    r.gpu_state = static_cast<uint8_t>(rec.gpu_state);
    std::memcpy(base + h.ring_offset + (r.id % ring_cap) * sizeof r, &r, sizeof r);
  }
  for (uint32_t i = 0; i < graph_cap; ++i) {
    fr_graph_entry g = log.graphs[i];
    g.lock = 2;
    std::memcpy(base + h.graph_offset + uint64_t{i} * sizeof g, &g, sizeof g);
  }
  for (uint32_t i = 0; i < capture_cap; ++i) {
    fr_record r = log.captures[i];
    r.lock = 2;
    std::memcpy(base + h.capture_offset + uint64_t{i} * sizeof r, &r, sizeof r);
  }
  return out;
}

}  // namespace fr::log
