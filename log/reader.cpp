// The flight-log reader. Every size and offset in a file is checked before it is used, every
// record is copied under its sequence lock and checked against the slot it should be in, so a
// torn, stale, truncated or hostile file yields a clear error or fewer records, never a crash.
#include "log/reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <memory>
#include <unordered_map>

#include "log/safe_file.h"
#include "sections.h"
#include "tables.h"

namespace fr::log {

namespace {

std::string fixed_string(const char* s, size_t n) { return std::string(s, strnlen(s, n)); }

ReadResult fail(ReadError e, const std::string& name, const std::string& what) {
  ReadResult r;
  r.error = e;
  r.message = name + ": " + what;
  return r;
}

// Copies the header with relaxed word loads (a live writer updates its counters concurrently),
// `keep` bytes of it; the rest stays zero.
fr_log_header load_header(const uint8_t* base, size_t keep) {
  fr_log_header h{};
  // Whole words (the stored header is), then the bytes past `keep` zeroed again: a version may
  // end inside a word (version 6 at 436).
  const size_t words = (keep + 7) / 8;
  fr_copy_words_out(reinterpret_cast<uint64_t*>(&h), reinterpret_cast<const uint64_t*>(base),
                    words);
  std::memset(reinterpret_cast<uint8_t*>(&h) + keep, 0, words * 8 - keep);
  return h;
}

bool plausible_comm(const fr_comm_entry& c) {
  if (c.id == 0) return false;
  if (c.size < -1 || c.size > (1 << 24)) return false;
  if (c.rank < -1 || (c.size > 0 && c.rank >= c.size)) return false;
  return true;
}

using detail::bytes_kept;
using detail::Directory;
using detail::layout_of;
using detail::Table;
using detail::Window;

// The header's first words: magic, version and size, then the whole header at that size, then
// its section directory. `base` holds the file's first `head` bytes; the file is `size` long.
ReadResult read_header(const uint8_t* base, size_t size, size_t head, const std::string& name,
                       LogFile* log, Directory* dir) {
  if (size < 16)
    return fail(
        ReadError::kTooSmall, name,
        size ? "too small to be a flight log (" + std::to_string(size) + " bytes)" : "empty file");
  uint64_t magic;
  uint32_t version, header_size;
  std::memcpy(&magic, base, 8);
  std::memcpy(&version, base + 8, 4);
  std::memcpy(&header_size, base + 12, 4);
  if (magic != FR_LOG_MAGIC)
    return fail(ReadError::kBadMagic, name, "not a flight log (bad magic)");
  if (version == 0) return fail(ReadError::kCorrupt, name, "format version 0");
  if (version > FR_LOG_VERSION)
    return fail(ReadError::kNewerVersion, name,
                "format version " + std::to_string(version) + " is newer than this reader (" +
                    std::to_string(FR_LOG_VERSION) + "); upgrade fr");
  const uint32_t defined = layout_of(version).header;
  if (header_size < defined || header_size % 8 || header_size > (1u << 20))
    return fail(ReadError::kCorrupt, name,
                "header size " + std::to_string(header_size) + " where version " +
                    std::to_string(version) + " defines " + std::to_string(defined) + " bytes");
  if (size < header_size) return fail(ReadError::kTruncated, name, "truncated inside the header");
  log->path = name;
  log->header = load_header(base, bytes_kept(header_size, sizeof(fr_log_header), version, defined));
  fr_log_header& h = log->header;
  std::string why;
  if (ReadError e = detail::read_directory(base, head, h, dir, &why); e != ReadError::kNone)
    return fail(e, name, why);
  if (ReadError e = detail::check_geometry(h, *dir, size, &why); e != ReadError::kNone)
    return fail(e, name, why);
  // Consumers read every version's rows where versions 1 to 6 kept them (sections.h).
  if (h.version >= 7) detail::show_in_header(*dir, &h);
  h.job_id[FR_NAME_LEN - 1] = h.hostname[FR_NAME_LEN - 1] = h.exe[FR_NAME_LEN - 1] = '\0';
  log->is_snapshot = (h.flags & FR_LOG_F_SNAPSHOT) != 0;
  return ReadResult{};
}

// Communicators; a communicator registered twice keeps its newest entry. Returns id -> index.
std::unordered_map<uint64_t, size_t> read_comms(const Table& t, uint32_t capacity, LogFile* log) {
  std::unordered_map<uint64_t, size_t> index;
  for (uint32_t i = 0; i < capacity; ++i) {
    if (t.lock(i) == 0) continue;
    fr_comm_entry c{};
    if (!t.read(i, &c) || !plausible_comm(c)) {
      ++log->comms_torn;
      continue;
    }
    c.name[FR_NAME_LEN - 1] = '\0';
    if (auto it = index.find(c.id); it != index.end()) {
      log->comms[it->second] = c;
      continue;
    }
    index[c.id] = log->comms.size();
    log->comms.push_back(c);
  }
  return index;
}

// Records: ids [counter - capacity, counter) are in the ring, each in slot id % capacity.
void read_ring(const Table& t, const std::unordered_map<uint64_t, size_t>& comm_index,
               LogFile* log) {
  // A writer stores its count of lost records rather than adding to it (agent.h, record_reserve):
  // with several threads writing it can trail the ring's laps, which the counter gives exactly.
  if (log->header.record_counter > log->header.ring_capacity)
    log->header.overwritten = std::max<uint64_t>(
        log->header.overwritten, log->header.record_counter - log->header.ring_capacity);
  const fr_log_header& h = log->header;
  const uint64_t counter = h.record_counter;
  const uint64_t first = counter > h.ring_capacity ? counter - h.ring_capacity : 0;
  // Reserved as far as a real ring goes: a header's counter is no promise of records present.
  log->records.reserve(std::min<uint64_t>(counter - first, FR_DEFAULT_RING_CAPACITY * 8));
  // Records come in runs on one communicator: its entry is looked up once per run.
  const fr_comm_entry* comm = nullptr;
  uint64_t comm_of = 0;
  bool looked_up = false;
  // Record id's slot is id % capacity (never 0: check_geometry), counted rather than divided.
  uint64_t slot = first % h.ring_capacity;
  // A private copy of whole records (a dump read into memory): each is checked in place and
  // copied once, as Table::read's copy would check and copy it.
  const bool bytes = t.copied && t.keep == sizeof(fr_record);
  for (uint64_t id = first; id < counter; ++id, slot = slot + 1 == h.ring_capacity ? 0 : slot + 1) {
    if (bytes) {
      uint64_t lock, rid;
      std::memcpy(&lock, t.slot(slot), sizeof lock);
      std::memcpy(&rid, t.slot(slot) + offsetof(fr_record, id), sizeof rid);
      if (lock == 0 || (lock & 1u) || rid != id) {
        if (lock != 0) ++log->torn;  // never written: a record the snapshot already refused
        continue;
      }
      log->records.emplace_back(Record::FromBytes{}, t.slot(slot));
    } else {
      Record& rec = log->records.emplace_back();  // read in place; taken back when refused
      if (!t.read(slot, &rec.raw) || rec.raw.id != id) {
        log->records.pop_back();
        // In a dump, an empty slot is a record the snapshot already refused (counted there).
        if (t.live || t.lock(slot) != 0) ++log->torn;
        continue;
      }
    }
    Record& rec = log->records.back();
    // An out-of-range state (hostile or newer writer) reads as unknown, never as an enum value
    // no consumer handles.
    if (rec.raw.gpu_state > FR_GPU_COMPLETED) rec.raw.gpu_state = FR_GPU_NONE;
    rec.gpu_state = static_cast<fr_gpu_state>(rec.raw.gpu_state);
    if (!looked_up || rec.raw.comm_id != comm_of) {
      auto it = comm_index.find(rec.raw.comm_id);
      comm = it != comm_index.end() ? &log->comms[it->second] : nullptr;
      comm_of = rec.raw.comm_id;
      looked_up = true;
    }
    if (comm)
      rec.gpu_state = fr_resolve_gpu_state(&rec.raw, comm->gpu_started, comm->gpu_completed);
  }
}

// Graphs and their captured ops (version 2 on; capacities are 0 before).
void read_graphs(const Table& graphs, const Table& captures, LogFile* log) {
  const fr_log_header& h = log->header;
  for (uint32_t i = 0; i < h.graph_capacity; ++i) {
    if (graphs.lock(i) == 0) continue;
    fr_graph_entry g{};
    if (!graphs.read(i, &g) || g.id == 0 || g.ordinal == 0) {
      ++log->torn;
      continue;
    }
    log->graphs.push_back(g);
  }
  for (uint32_t i = 0; i < h.capture_capacity; ++i) {
    if (captures.lock(i) == 0) continue;
    fr_record r{};
    if (!captures.read(i, &r) || !(r.flags & FR_REC_F_CAPTURED)) {
      ++log->torn;
      continue;
    }
    if (r.gpu_state > FR_GPU_COMPLETED) r.gpu_state = FR_GPU_NONE;
    log->captures.push_back(r);
  }
}

// Channel slots (version 5 on; capacity 0 before). A slot whose words make no sense (a hostile or
// broken writer) is refused and counted, never handed on.
bool plausible_chan(const fr_chan_entry& e) {
  if (e.channel >= FR_MAX_CHANNELS || e.kind > FR_CHAN_RECV) return false;
  if (e.nranks <= 0 || e.nranks > (1 << 24) || e.rank < 0 || e.rank >= e.nranks) return false;
  if (e.kind != FR_CHAN_KERNEL && (e.peer < 0 || e.peer >= e.nranks)) return false;
  return true;
}

void read_chans(const Table& t, LogFile* log) {
  const fr_log_header& h = log->header;
  for (uint32_t i = 0; i < h.chan_capacity; ++i) {
    if (t.lock(i) == 0) continue;
    fr_chan_entry e{};
    if (!t.read(i, &e) || !plausible_chan(e)) {
      ++log->chans_torn;
      continue;
    }
    if (e.state > FR_CHANST_STOPPED) e.state = FR_CHANST_IDLE;
    if (e.done > e.posted) e.done = e.posted;
    log->chans.push_back(e);
  }
}

// NIXL transfers (version 4 on; capacity 0 before). Names are cut to their arrays; states and ops
// out of range (hostile or newer writer) are refused with the entry.
void read_xfers(const Table& t, LogFile* log) {
  for (uint32_t i = 0; i < log->header.xfer_capacity; ++i) {
    if (t.lock(i) == 0) continue;
    fr_xfer_entry x{};
    if (!t.read(i, &x) || x.id == 0 || x.state > FR_XFER_RELEASED || x.op > FR_XFER_OP_WRITE) {
      ++log->xfers_torn;
      continue;
    }
    x.local_agent[FR_NAME_LEN - 1] = x.remote_agent[FR_NAME_LEN - 1] = '\0';
    x.backend[sizeof x.backend - 1] = '\0';
    log->xfers.push_back(x);
  }
}

// A live log's writer holds a POSIX lock on its first byte; a dump says whether it lived.
void read_liveness(int fd, LogFile* log) {
  if (log->is_snapshot) {
    log->writer_alive = log->header.writer_alive == 1;
    return;
  }
  log->writer_alive = false;
  if (fd < 0) return;
  struct flock fl {};
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  fl.l_start = 0;
  fl.l_len = 1;
  if (fcntl(fd, F_GETLK, &fl) == 0 && fl.l_type != F_UNLCK) {
    log->writer_alive = true;
    log->lock_pid = fl.l_pid;
  }
}

// What this reader keeps of each kind's entries: its own size, and where the part under the
// sequence lock ends (the live words after it are read one by one).
struct Own {
  size_t size, locked_end;
};
constexpr Own kOwn[FR_SECTION_KINDS] = {
    {sizeof(fr_comm_entry), offsetof(fr_comm_entry, state)},
    {sizeof(fr_record), sizeof(fr_record)},
    {sizeof(fr_graph_entry), offsetof(fr_graph_entry, n_ops)},
    {sizeof(fr_record), sizeof(fr_record)},
    {sizeof(fr_chan_entry), offsetof(fr_chan_entry, op_seq)},
    {sizeof(fr_xfer_entry), offsetof(fr_xfer_entry, state)},
};

// Parses into `log`, whose vectors are empty (they may hold capacity from an earlier file).
// `base` holds the first `size` bytes of the file, or (`window` set) only its first `head` bytes
// (the header and the directory) while the file is `size` bytes long: the tables are then read
// from the file through `window`.
ReadResult parse(const uint8_t* base, size_t size, size_t head, const std::string& name, int fd,
                 LogFile log = LogFile{}, Window* window = nullptr, bool private_copy = false) {
  Directory dir{};
  if (ReadResult bad = read_header(base, size, head, name, &log, &dir); !bad.message.empty())
    return bad;
  const fr_log_header& h = log.header;
  const detail::Layout defined = layout_of(h.version);
  const bool live = !log.is_snapshot;
  auto table = [&](fr_section_kind kind) {
    const fr_log_section& s = dir[kind];
    Table t;
    // A table with no entries may have any offset (check_geometry checks offsets only of tables
    // it will read): never form a pointer past the bytes in memory.
    if (window == nullptr) t.start = s.offset <= size ? base + s.offset : nullptr;
    t.window = window;
    t.offset = s.offset;
    t.capacity = s.capacity;
    t.stride = s.entry_size;
    t.keep = bytes_kept(s.entry_size, kOwn[kind].size, h.version, defined.entry[kind]);
    t.locked_end = kOwn[kind].locked_end;
    t.live = live;
    t.copied = (window != nullptr || private_copy) && !live;  // a dump in this reader's memory
    return t;
  };
  // Each table is its own object while any is read: the window knows its tables by address.
  const Table comms = table(FR_SECTION_COMMS), ring = table(FR_SECTION_RING),
              graphs = table(FR_SECTION_GRAPHS), captures = table(FR_SECTION_CAPTURES),
              chans = table(FR_SECTION_CHANS), xfers = table(FR_SECTION_XFERS);
  auto comm_index = read_comms(comms, h.comm_capacity, &log);
  read_ring(ring, comm_index, &log);
  read_graphs(graphs, captures, &log);
  read_chans(chans, &log);
  read_xfers(xfers, &log);
  read_liveness(fd, &log);
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

namespace {

// A recycled LogFile: its vectors emptied, their capacity kept.
LogFile recycled(LogFile* spare) {
  LogFile log;
  if (spare == nullptr) return log;
  log.comms = std::move(spare->comms);
  log.records = std::move(spare->records);
  log.graphs = std::move(spare->graphs);
  log.captures = std::move(spare->captures);
  log.chans = std::move(spare->chans);
  log.chans.clear();
  log.xfers = std::move(spare->xfers);
  log.xfers.clear();
  log.comms.clear();
  log.records.clear();
  log.graphs.clear();
  log.captures.clear();
  return log;
}

// Reads up to `n` bytes at `offset`; the count read, or -1 with errno set.
ssize_t pread_full(int fd, uint8_t* dst, size_t n, off_t offset) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = ::pread(fd, dst + got, n - got, offset + off_t(got));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return -1;
    if (r == 0) break;
    got += size_t(r);
  }
  return ssize_t(got);
}

// A dump whose header says it is at most this long is read whole, in one call, into a buffer its
// reading thread keeps (a 16k-rank dump set is 16k files of 260 KB: one read each costs less
// than a window per table). Larger dumps and every live log are read a window at a time.
constexpr size_t kWholeMaxBytes = size_t{4} << 20;

uint8_t* thread_buffer(size_t bytes) {
  thread_local std::unique_ptr<uint64_t[]> words;  // 8-byte aligned, as parse() needs
  thread_local size_t capacity = 0;
  if (bytes > capacity) {
    capacity = std::max(bytes, size_t{1} << 18);
    words.reset(new uint64_t[(capacity + 7) / 8]);
  }
  return reinterpret_cast<uint8_t*>(words.get());
}

// The header is read first and checked against the file's size before anything else is read
// or allocated; then the tables, never past what the header's geometry claims.
ReadResult read_fd(int fd, const struct stat& st, const std::string& name, LogFile* spare) {
  if (!S_ISREG(st.st_mode)) return fail(ReadError::kIo, name, "not a regular file");
  const size_t size = static_cast<size_t>(st.st_size);
  // The header and the section directory (which lies in the first 4 KiB), 8-byte aligned, as
  // load_header reads words.
  uint64_t head[4096 / 8] = {};
  auto* bytes = reinterpret_cast<uint8_t*>(head);
  const size_t want = std::min(size, sizeof head);
  const ssize_t got = pread_full(fd, bytes, want, 0);
  if (got < 0)
    return fail(ReadError::kIo, name, std::string("cannot read: ") + std::strerror(errno));
  // A file that shrank since fstat is as long as what was read of its header.
  const size_t have = size_t(got) < want ? size_t(got) : size;
  LogFile probe;
  Directory dir;
  if (size_t(got) == want && size_t(got) >= sizeof(fr_log_header) &&
      read_header(bytes, have, size_t(got), name, &probe, &dir).message.empty() &&
      probe.is_snapshot && probe.header.file_size <= kWholeMaxBytes) {
    uint8_t* buf = thread_buffer(size_t(probe.header.file_size));
    const ssize_t n = pread_full(fd, buf, size_t(probe.header.file_size), 0);
    if (n < 0)
      return fail(ReadError::kIo, name, std::string("cannot read: ") + std::strerror(errno));
    return parse(buf, size_t(n), size_t(n), name, fd, recycled(spare), nullptr, true);
  }
  Window window(fd);
  return parse(bytes, have, size_t(got), name, fd, recycled(spare), &window);
}

}  // namespace

ReadResult read_log_fd(int fd, const struct stat& st, const std::string& name) {
  return read_fd(fd, st, name, nullptr);
}

ReadResult read_log_fd(int fd, const struct stat& st, const std::string& name, LogFile* spare) {
  return read_fd(fd, st, name, spare);
}

ReadResult read_log_bytes(const void* data, size_t size, const std::string& name) {
  // parse() reads words with atomic loads, which need 8-byte alignment: copy when unaligned.
  if (reinterpret_cast<uintptr_t>(data) % 8 != 0) {
    std::vector<uint64_t> aligned((size + 7) / 8);
    if (size) std::memcpy(aligned.data(), data, size);
    return parse(reinterpret_cast<const uint8_t*>(aligned.data()), size, size, name, -1);
  }
  return parse(static_cast<const uint8_t*>(data), size, size, name, -1);
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
  const uint32_t comm_cap =
      static_cast<uint32_t>(std::min<size_t>(log.comms.size(), FR_MAX_COMM_CAPACITY));

  const uint32_t graph_cap =
      static_cast<uint32_t>(std::min<size_t>(log.graphs.size(), FR_MAX_GRAPH_CAPACITY));
  const uint32_t capture_cap =
      static_cast<uint32_t>(std::min<size_t>(log.captures.size(), FR_MAX_CAPTURE_CAPACITY));
  const uint32_t chan_cap =
      static_cast<uint32_t>(std::min<size_t>(log.chans.size(), FR_MAX_CHAN_CAPACITY));
  const uint32_t xfer_cap =
      static_cast<uint32_t>(std::min<size_t>(log.xfers.size(), FR_MAX_XFER_CAPACITY));
  uint32_t capacity[FR_SECTION_KINDS] = {};
  capacity[FR_SECTION_COMMS] = comm_cap;
  capacity[FR_SECTION_RING] = ring_cap;
  capacity[FR_SECTION_GRAPHS] = graph_cap;
  capacity[FR_SECTION_CAPTURES] = capture_cap;
  capacity[FR_SECTION_CHANS] = chan_cap;
  capacity[FR_SECTION_XFERS] = xfer_cap;
  Directory dir;
  std::string out(fr_log_layout(capacity, dir.data()), '\0');
  auto* base = reinterpret_cast<uint8_t*>(out.data());
  // Every entry kept is in use; what the log counted as dropped stays dropped.
  const Directory counted = detail::legacy_directory(log.header);
  for (fr_log_section& s : dir) {
    s.count = s.kind == FR_SECTION_RING ? 0 : s.capacity;
    s.dropped = s.kind == FR_SECTION_RING ? 0 : counted[s.kind].dropped;
  }

  fr_log_header h = log.header;
  detail::clear_legacy_fields(&h);
  h.magic = FR_LOG_MAGIC;
  h.version = FR_LOG_VERSION;
  h.header_size = sizeof(fr_log_header);
  fr_log_header_set_directory(&h);
  h.file_size = out.size();
  h.record_counter = counter;
  h.flags |= FR_LOG_F_SNAPSHOT;
  h.snapshot_ns = snapshot_ns;
  h.writer_alive = log.writer_alive ? 1 : 0;
  // A dump of a dump keeps the count of records its first snapshot already refused.
  uint64_t torn = log.torn + (log.is_snapshot ? log.header.torn_skipped : 0);
  h.torn_skipped = static_cast<uint32_t>(std::min<uint64_t>(torn, UINT32_MAX));
  std::memcpy(base, &h, sizeof h);
  std::memcpy(base + h.section_offset, dir.data(), sizeof dir);

  for (uint32_t i = 0; i < comm_cap; ++i) {
    fr_comm_entry c = log.comms[i];
    c.lock = 2;
    std::memcpy(base + dir[FR_SECTION_COMMS].offset + uint64_t{i} * sizeof c, &c, sizeof c);
  }
  for (const Record& rec : log.records) {
    if (rec.raw.id < first) continue;
    fr_record r = rec.raw;
    r.lock = 2;
    r.gpu_state = static_cast<uint8_t>(rec.gpu_state);
    std::memcpy(base + dir[FR_SECTION_RING].offset + (r.id % ring_cap) * sizeof r, &r, sizeof r);
  }
  for (uint32_t i = 0; i < graph_cap; ++i) {
    fr_graph_entry g = log.graphs[i];
    g.lock = 2;
    std::memcpy(base + dir[FR_SECTION_GRAPHS].offset + uint64_t{i} * sizeof g, &g, sizeof g);
  }
  for (uint32_t i = 0; i < capture_cap; ++i) {
    fr_record r = log.captures[i];
    r.lock = 2;
    std::memcpy(base + dir[FR_SECTION_CAPTURES].offset + uint64_t{i} * sizeof r, &r, sizeof r);
  }
  for (uint32_t i = 0; i < chan_cap; ++i) {
    fr_chan_entry e = log.chans[i];
    e.lock = 2;
    std::memcpy(base + dir[FR_SECTION_CHANS].offset + uint64_t{i} * sizeof e, &e, sizeof e);
  }
  for (uint32_t i = 0; i < xfer_cap; ++i) {
    fr_xfer_entry x = log.xfers[i];
    x.lock = 2;
    std::memcpy(base + dir[FR_SECTION_XFERS].offset + uint64_t{i} * sizeof x, &x, sizeof x);
  }
  return out;
}

}  // namespace fr::log
