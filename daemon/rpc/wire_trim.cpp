// A heartbeat's bytes cut to from_proto's bounds before protobuf decodes them (wire.h,
// trim_heartbeat). Protobuf's decoder builds an object for every entry of a repeated field, and
// the bounds applied after it come too late: an empty entry is two bytes on the wire and about a
// hundred decoded. This reads the wire format by hand, field by field, copies what is kept as it
// is and leaves the rest out; no protobuf object is made.
#include <cstdint>
#include <string>

#include "daemon/rpc/convert.h"
#include "daemon/rpc/wire.h"

namespace fr::daemon {
namespace {

constexpr size_t kMaxListed = 64;  // unreadable logs, GPU alerts (from_proto's printable_list)

bool read_varint(const uint8_t** p, const uint8_t* end, uint64_t* v) {
  uint64_t r = 0;
  for (int shift = 0; shift < 64 && *p < end; shift += 7) {
    const uint8_t b = *(*p)++;
    r |= uint64_t(b & 0x7f) << shift;
    if (b < 0x80) {
      *v = r;
      return true;
    }
  }
  return false;
}

void put_varint(uint64_t v, std::string* out) {
  while (v >= 0x80) {
    out->push_back(char(v | 0x80));
    v >>= 7;
  }
  out->push_back(char(v));
}

// One field: its number, its wire type, where it starts and ends, and (length-delimited) where
// its payload starts.
struct Field {
  uint32_t number = 0, type = 0;
  const uint8_t *start = nullptr, *payload = nullptr, *end = nullptr;
};

bool next_field(const uint8_t** p, const uint8_t* end, Field* f, int depth = 0) {
  f->start = *p;
  uint64_t tag, v;
  if (!read_varint(p, end, &tag) || (tag >> 3) == 0 || (tag >> 3) > UINT32_MAX) return false;
  f->number = uint32_t(tag >> 3);
  f->type = uint32_t(tag & 7);
  switch (f->type) {
    case 0:
      if (!read_varint(p, end, &v)) return false;
      break;
    case 1:
    case 5: {
      const size_t n = f->type == 1 ? 8 : 4;
      if (size_t(end - *p) < n) return false;
      *p += n;
      break;
    }
    case 2:
      if (!read_varint(p, end, &v) || v > uint64_t(end - *p)) return false;
      f->payload = *p;
      *p += v;
      break;
    case 3: {  // a group (unknown to us, kept as protobuf keeps it): up to its end tag
      Field inner;
      for (;;) {
        if (depth >= 32 || !next_field(p, end, &inner, depth + 1)) return false;
        if (inner.type == 4) {
          if (inner.number != f->number) return false;
          break;
        }
      }
      break;
    }
    case 4:  // an end tag: only a group's own, read above
      if (depth == 0) return false;
      break;
    default: return false;
  }
  f->end = *p;
  return true;
}

void copy(const Field& f, std::string* out) {
  out->append(reinterpret_cast<const char*>(f.start), size_t(f.end - f.start));
}

// One CommProgress: at most kMaxRecent recent collectives.
bool trim_comm(const uint8_t* p, const uint8_t* end, std::string* out) {
  size_t recent = 0;
  Field f;
  while (p < end) {
    if (!next_field(&p, end, &f)) return false;
    if (f.type == 2 && f.number == 14 && recent++ >= CommProgress::kMaxRecent) continue;
    copy(f, out);
  }
  return true;
}

// One ProcessReport: at most kMaxCommsPerProcess communicators (and no more than *comms_left
// for the heartbeat), kMaxXferPairs agent pairs and kMaxLinks links.
bool trim_process(const uint8_t* p, const uint8_t* end, size_t* comms_left, std::string* out) {
  size_t comms = 0, xfers = 0, links = 0;
  std::string comm;
  Field f;
  while (p < end) {
    if (!next_field(&p, end, &f)) return false;
    if (f.type == 2 && f.number == 11) {
      if (comms == kMaxCommsPerProcess || *comms_left == 0) continue;
      ++comms;
      --*comms_left;
      comm.clear();
      if (!trim_comm(f.payload, f.end, &comm)) return false;
      out->push_back(char(11 << 3 | 2));
      put_varint(comm.size(), out);
      out->append(comm);
      continue;
    } else if (f.type == 2 && f.number == 13) {
      if (xfers == ProcessReport::kMaxXferPairs) continue;
      ++xfers;
    } else if (f.type == 2 && f.number == 15) {
      if (links == ProcessReport::kMaxLinks) continue;
      ++links;
    }
    copy(f, out);
  }
  return true;
}

// The counts kept so far, over every heartbeat field of one message (protobuf merges them).
struct Kept {
  size_t procs = 0, unreadable = 0, alerts = 0, comms_left = kMaxCommsPerHeartbeat;
};

bool trim_body(const uint8_t* p, const uint8_t* end, Kept* k, std::string* out) {
  std::string process;
  Field f;
  while (p < end) {
    if (!next_field(&p, end, &f)) return false;
    if (f.type == 2 && f.number == 4) {
      if (k->procs == kMaxProcessesPerNode) continue;
      ++k->procs;
      process.clear();
      if (!trim_process(f.payload, f.end, &k->comms_left, &process)) return false;
      out->push_back(char(4 << 3 | 2));
      put_varint(process.size(), out);
      out->append(process);
      continue;
    }
    if (f.type == 2 && f.number == 5 && k->unreadable++ >= kMaxListed) continue;
    if (f.type == 2 && f.number == 6 && k->alerts++ >= kMaxListed) continue;
    copy(f, out);
  }
  return true;
}

}  // namespace

bool trim_heartbeat(const uint8_t* p, size_t n, std::string* out) {
  out->clear();
  Kept k;
  return trim_body(p, p + n, &k, out);
}

bool trim_node_message(const uint8_t* p, size_t n, std::string* out) {
  out->clear();
  const uint8_t* end = p + n;
  Kept k;
  std::string body;
  Field f;
  while (p < end) {
    if (!next_field(&p, end, &f)) return false;
    if (f.type != 2 || f.number != 2) {
      copy(f, out);
      continue;
    }
    body.clear();
    if (!trim_body(f.payload, f.end, &k, &body)) return false;
    out->push_back(char(2 << 3 | 2));
    put_varint(body.size(), out);
    out->append(body);
  }
  return true;
}

}  // namespace fr::daemon
