// A log's section directory, of every version, and the one check of its geometry (sections.h).
#include "sections.h"

#include <algorithm>
#include <utility>

namespace fr::log::detail {

namespace {

// A directory lies in the file's first 4 KiB: the reader takes it with the header in one read.
constexpr uint64_t kDirectoryEndMax = 4096;
constexpr uint32_t kRowBytesMax = 1024;
constexpr uint64_t kOffsetMax = 1ull << 40;
constexpr uint32_t kEntryBytesMax = 1u << 16;

ReadError bad(ReadError e, std::string* why, std::string what) {
  *why = std::move(what);
  return e;
}

std::string str(uint64_t v) { return std::to_string(v); }

uint32_t saturated(uint64_t v) { return uint32_t(std::min<uint64_t>(v, UINT32_MAX)); }

// Where a version 7 header's directory ends (its row count and size are bounded first); an offset
// past any plausible end gives UINT64_MAX, so a huge one cannot wrap the sum small.
uint64_t directory_end(const fr_log_header& h) {
  if (h.section_offset > kDirectoryEndMax) return UINT64_MAX;
  return h.section_offset + uint64_t{h.section_count} * h.section_size;
}

}  // namespace

Layout layout_of(uint32_t version) {
  Layout l;
  auto set = [&](uint32_t header, uint32_t comm, uint32_t record, uint32_t graph, uint32_t chan,
                 uint32_t xfer) {
    l.header = header;
    l.entry = {comm, record, graph, record, chan, xfer};
  };
  switch (version) {
    case 1: set(FR_V1_HEADER_BYTES, FR_V1_COMM_BYTES, FR_V1_RECORD_BYTES, 0, 0, 0); break;
    case 2:
      set(FR_V2_HEADER_BYTES, FR_V2_COMM_BYTES, FR_V2_RECORD_BYTES, FR_V2_GRAPH_BYTES, 0, 0);
      break;
    case 3:
      set(FR_V3_HEADER_BYTES, FR_V3_COMM_BYTES, FR_V3_RECORD_BYTES, FR_V3_GRAPH_BYTES, 0, 0);
      break;
    case 4:
      set(FR_V4_HEADER_BYTES, FR_V4_COMM_BYTES, FR_V4_RECORD_BYTES, FR_V4_GRAPH_BYTES, 0,
          FR_V4_XFER_BYTES);
      break;
    case 5:
      set(FR_V5_HEADER_BYTES, FR_V5_COMM_BYTES, FR_V5_RECORD_BYTES, FR_V5_GRAPH_BYTES,
          FR_V5_CHAN_BYTES, FR_V5_XFER_BYTES);
      break;
    case 6:
      set(FR_V6_HEADER_BYTES, FR_V6_COMM_BYTES, FR_V6_RECORD_BYTES, FR_V6_GRAPH_BYTES,
          FR_V6_CHAN_BYTES, FR_V6_XFER_BYTES);
      break;
    default:
      set(FR_V7_HEADER_BYTES, FR_V7_COMM_BYTES, FR_V7_RECORD_BYTES, FR_V7_GRAPH_BYTES,
          FR_V7_CHAN_BYTES, FR_V7_XFER_BYTES);
      l.section = FR_V7_SECTION_BYTES;
  }
  return l;
}

size_t bytes_kept(uint32_t stored, size_t own, uint32_t version, uint32_t defined) {
  size_t keep = std::min<size_t>(stored, own);
  return version < FR_LOG_VERSION ? std::min<size_t>(keep, defined) : keep;
}

const char* section_name(uint32_t kind) {
  switch (kind) {
#define FR_X_SECTION_NAME(e, v, s, t, m) \
  case v: return s;
    FR_SECTION_LIST(FR_X_SECTION_NAME)
#undef FR_X_SECTION_NAME
  }
  return "unknown";
}

Directory legacy_directory(const fr_log_header& h) {
  Directory d{};
  auto row = [&](fr_section_kind k, uint64_t offset, uint32_t size, uint32_t capacity,
                 uint64_t count, uint64_t dropped) {
    d[k] = fr_log_section{uint32_t(k), size, offset, capacity, 0, count, dropped};
  };
  row(FR_SECTION_COMMS, h.comm_offset, h.comm_size, h.comm_capacity, h.comm_count, h.comm_dropped);
  row(FR_SECTION_RING, h.ring_offset, h.record_size, h.ring_capacity, 0, 0);
  row(FR_SECTION_GRAPHS, h.graph_offset, h.graph_size, h.graph_capacity, h.graph_count,
      h.graph_dropped);
  row(FR_SECTION_CAPTURES, h.capture_offset, h.record_size, h.capture_capacity, h.capture_count, 0);
  row(FR_SECTION_CHANS, h.chan_offset, h.chan_size, h.chan_capacity, h.chan_count, h.chan_dropped);
  row(FR_SECTION_XFERS, h.xfer_offset, h.xfer_size, h.xfer_capacity, h.xfer_count, h.xfer_dropped);
  return d;
}

void show_in_header(const Directory& rows, fr_log_header* h) {
  // A row of capacity 0 shows as versions 1 to 6 wrote an absent table: offset and size zero.
  Directory d = rows;
  for (fr_log_section& s : d)
    if (s.capacity == 0) s.offset = 0, s.entry_size = 0;
  const fr_log_section& c = d[FR_SECTION_COMMS];
  h->comm_offset = c.offset, h->comm_size = c.entry_size, h->comm_capacity = c.capacity;
  h->comm_count = saturated(c.count), h->comm_dropped = saturated(c.dropped);
  const fr_log_section& r = d[FR_SECTION_RING];
  h->ring_offset = r.offset, h->record_size = r.entry_size, h->ring_capacity = r.capacity;
  const fr_log_section& g = d[FR_SECTION_GRAPHS];
  h->graph_offset = g.offset, h->graph_size = g.entry_size, h->graph_capacity = g.capacity;
  h->graph_count = saturated(g.count), h->graph_dropped = saturated(g.dropped);
  const fr_log_section& k = d[FR_SECTION_CAPTURES];
  h->capture_offset = k.offset, h->capture_capacity = k.capacity;
  h->capture_count = saturated(k.count);
  const fr_log_section& ch = d[FR_SECTION_CHANS];
  h->chan_offset = ch.offset, h->chan_size = ch.entry_size, h->chan_capacity = ch.capacity;
  h->chan_count = saturated(ch.count), h->chan_dropped = saturated(ch.dropped);
  const fr_log_section& x = d[FR_SECTION_XFERS];
  h->xfer_offset = x.offset, h->xfer_size = x.entry_size, h->xfer_capacity = x.capacity;
  h->xfer_count = saturated(x.count), h->xfer_dropped = saturated(x.dropped);
}

void clear_legacy_fields(fr_log_header* h) { show_in_header(Directory{}, h); }

ReadError read_directory(const uint8_t* base, size_t head, const fr_log_header& h, Directory* dir,
                         std::string* why) {
  if (h.version < 7) {
    *dir = legacy_directory(h);
    return ReadError::kNone;
  }
  const Layout defined = layout_of(h.version);
  if (h.section_count == 0 || h.section_count > 64)
    return bad(ReadError::kCorrupt, why, "section directory of " + str(h.section_count) + " rows");
  if (h.section_size < defined.section || h.section_size % 8 || h.section_size > kRowBytesMax)
    return bad(ReadError::kCorrupt, why,
               "section row size " + str(h.section_size) + " where version " + str(h.version) +
                   " defines " + str(defined.section) + " bytes");
  const uint64_t end = directory_end(h);
  if (h.section_offset < h.header_size || h.section_offset % 8 || end > kDirectoryEndMax)
    return bad(
        ReadError::kCorrupt, why,
        "section directory out of place (bytes " + str(h.section_offset) + ".." + str(end) + ")");
  if (end > head) return bad(ReadError::kTruncated, why, "truncated inside the section directory");
  *dir = Directory{};
  for (uint32_t k = 0; k < FR_SECTION_KINDS; ++k) dir->at(k).kind = k;
  bool seen[FR_SECTION_KINDS] = {};
  const size_t keep = std::min<size_t>(h.section_size, sizeof(fr_log_section));
  for (uint32_t i = 0; i < h.section_count; ++i) {
    fr_log_section row{};
    fr_copy_words_out(
        reinterpret_cast<uint64_t*>(&row),
        reinterpret_cast<const uint64_t*>(base + h.section_offset + uint64_t{i} * h.section_size),
        keep / 8);
    if (row.kind >= FR_SECTION_KINDS)
      return bad(ReadError::kCorrupt, why,
                 "unknown section kind " + str(row.kind) + " in directory row " + str(i));
    if (seen[row.kind])
      return bad(ReadError::kCorrupt, why,
                 std::string("section ") + section_name(row.kind) + " listed twice");
    seen[row.kind] = true;
    (*dir)[row.kind] = row;
  }
  return ReadError::kNone;
}

ReadError check_geometry(const fr_log_header& h, const Directory& dir, size_t size,
                         std::string* why) {
  const Layout defined = layout_of(h.version);
  struct Span {
    uint64_t from, to;
    const char* what;
  };
  Span spans[FR_SECTION_KINDS + 1];
  size_t n = 0;
  // The header (and the directory) come first; every table lies after them.
  spans[n++] = {0,
                h.version >= 7 ? std::max<uint64_t>(h.header_size, directory_end(h))
                               : uint64_t{h.header_size},
                "header"};
  if (dir[FR_SECTION_RING].capacity == 0)
    return bad(ReadError::kCorrupt, why, "ring capacity 0 out of range");
  for (const fr_log_section& s : dir) {
    if (s.capacity == 0) continue;  // no table: its other fields are never used
    const std::string name = section_name(s.kind);
    if (s.capacity > fr_section_max_capacity(s.kind))
      return bad(ReadError::kCorrupt, why, name + " capacity " + str(s.capacity) + " out of range");
    if (s.entry_size < std::max<uint32_t>(defined.entry[s.kind], 8))
      return bad(ReadError::kCorrupt, why,
                 name + " entry size " + str(s.entry_size) + " smaller than version " +
                     str(h.version) + " defines");
    if (s.entry_size % 8 || s.entry_size > kEntryBytesMax || s.offset % 8 || s.offset > kOffsetMax)
      return bad(ReadError::kCorrupt, why, "misaligned or implausible " + name + " table");
    // Capacities and sizes are bounded above, so this cannot overflow 64 bits.
    const uint64_t end = s.offset + uint64_t{s.capacity} * s.entry_size;
    if (end > h.file_size)
      return bad(ReadError::kCorrupt, why,
                 name + " table out of place: bytes " + str(s.offset) + ".." + str(end) + " of a " +
                     str(h.file_size) + "-byte log");
    // Version 7's writers keep each count within its table (the ring's lives in the header).
    if (h.version >= 7 && s.kind != FR_SECTION_RING && s.count > s.capacity)
      return bad(ReadError::kCorrupt, why,
                 name + " count " + str(s.count) + " past its capacity " + str(s.capacity));
    spans[n++] = {s.offset, end, section_name(s.kind)};
  }
  for (size_t i = 1; i < n; ++i)  // a handful of spans: sorted by insertion
    for (size_t j = i; j > 0 && spans[j].from < spans[j - 1].from; --j)
      std::swap(spans[j], spans[j - 1]);
  for (size_t i = 1; i < n; ++i)
    if (spans[i].from < spans[i - 1].to)
      return bad(ReadError::kCorrupt, why,
                 std::string("overlapping sections: ") + spans[i - 1].what + " and " +
                     spans[i].what + " share bytes");
  if (h.file_size > size)
    return bad(ReadError::kTruncated, why,
               "file is " + str(size) + " bytes, header says " + str(h.file_size));
  return ReadError::kNone;
}

}  // namespace fr::log::detail
