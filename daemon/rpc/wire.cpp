// See wire.h.
#include "daemon/rpc/wire.h"

#include "daemon/rpc/gate.h"

#include <google/protobuf/io/coded_stream.h>

#include <climits>

#include "daemon/rpc/convert.h"
#include "daemon/base/names.h"

namespace fr::daemon {
namespace {

// NodeMessage's heartbeat: field 2, length-delimited.
constexpr uint32_t kHeartbeatTag = (2 << 3) | 2;
// A decoder that held a heartbeat larger than this lets its memory go before the next one.
constexpr size_t kKeepBytes = 256 << 10;

// The bytes of `b` in one piece: its own slice when it has one, else a copy in *scratch.
bool contiguous(const grpc::ByteBuffer& b, grpc::Slice* one, std::vector<grpc::Slice>* slices,
                std::string* scratch, const uint8_t** p, size_t* n) {
  if (b.TrySingleSlice(one).ok()) {
    *p = one->begin();
    *n = one->size();
    return true;
  }
  slices->clear();
  if (!b.Dump(slices).ok()) return false;
  scratch->clear();
  for (const auto& s : *slices) scratch->append(reinterpret_cast<const char*>(s.begin()), s.size());
  slices->clear();
  *p = reinterpret_cast<const uint8_t*>(scratch->data());
  *n = scratch->size();
  return true;
}

// The fast decoder: a heartbeat as frd node encodes it, read straight into a NodeReport, with
// what from_proto does on the way (bounds, names made safe). Anything else makes it give up (it
// returns false, having written part of *out), and protobuf's decoder decides: a field it does
// not know or of another wire type, a string that is not plain ASCII (protobuf checks UTF-8), a
// tag or varint in more bytes than needed, an echo given twice, counts past from_proto's bounds,
// and every malformed message. On what it takes, it gives what protobuf and from_proto give. It
// knows every field of the Heartbeat message: wire_test.cpp walks the message's descriptor and
// fails, naming the field, on one this decoder gives up or decodes otherwise, so a field added to
// frd.proto is added here too.
// Wire types, and a field's one-byte tag.
constexpr uint32_t kVarint = 0, kBytes = 2;
constexpr uint32_t field(uint32_t number, uint32_t type) { return number << 3 | type; }

class Fast {
 public:
  Fast(const uint8_t* p, const uint8_t* end) : p_(p), end_(end) {}

  bool heartbeat(NodeReport* out, fr::v1::PingEcho* echo) {
    out->seq = 0;
    out->node_time_ns = 0;
    size_t procs = 0, unreadable = 0, alerts = 0, unrecorded = 0;
    size_t comms_left = kMaxCommsPerHeartbeat;
    bool echoed = false;
    uint64_t v;
    std::string_view s;
    while (p_ < end_) {
      switch (tag()) {
        case field(1, kVarint):
          if (!varint(&v)) return false;
          out->seq = v;
          break;
        case field(2, kVarint):
          if (!varint(&v)) return false;
          out->node_time_ns = int64_t(v);
          break;
        case field(3, kBytes): {
          if (echoed) return false;
          echoed = true;
          Fast sub(nullptr, nullptr);
          if (!enter(&sub) || !sub.echo(echo)) return false;
          break;
        }
        case field(4, kBytes): {
          if (procs == kMaxProcessesPerNode) return false;
          if (procs == out->processes.size()) out->processes.emplace_back();
          Fast sub(nullptr, nullptr);
          sub.comms_left_ = &comms_left;
          if (!enter(&sub) || !sub.process(&out->processes[procs++])) return false;
          break;
        }
        case field(5, kBytes):
          if (!text(&s) || !add(s, &unreadable, &out->unreadable)) return false;
          break;
        case field(6, kBytes):
          if (!text(&s) || !add(s, &alerts, &out->gpu_alerts)) return false;
          break;
        case field(7, kBytes): {
          if (unrecorded == UnrecordedProcess::kMaxPerNode) return false;
          if (unrecorded == out->unrecorded.size()) out->unrecorded.emplace_back();
          Fast sub(nullptr, nullptr);
          if (!enter(&sub) || !sub.unrecorded(&out->unrecorded[unrecorded++])) return false;
          break;
        }
        default: return false;
      }
    }
    if (!echoed) *echo = fr::v1::PingEcho();
    out->processes.resize(procs);
    out->unreadable.resize(unreadable);
    out->gpu_alerts.resize(alerts);
    out->unrecorded.resize(unrecorded);
    return true;
  }

 private:
  // Field numbers up to 2047 (one or two bytes); 0 for anything else.
  uint32_t tag() {
    if (*p_ < 0x80) return *p_++;
    if (end_ - p_ < 2 || p_[1] >= 0x80) return 0;
    const uint32_t t = uint32_t(p_[0] & 0x7f) | uint32_t(p_[1]) << 7;
    p_ += 2;
    return t;
  }

  bool varint(uint64_t* v) {
    if (p_ < end_ && *p_ < 0x80) {  // most values: one byte
      *v = *p_++;
      return true;
    }
    const size_t room = size_t(end_ - p_) < 10 ? size_t(end_ - p_) : 10;
    uint64_t r = 0;
    for (size_t i = 0; i < room; ++i) {
      const uint8_t b = p_[i];
      r |= uint64_t(b & 0x7f) << (7 * i);
      if (b < 0x80) {
        // The shortest form only (a last byte of 0 means a longer one), and at most 64 bits.
        if (b == 0 || (i == 9 && b > 1)) return false;
        p_ += i + 1;
        *v = r;
        return true;
      }
    }
    return false;
  }

  bool bytes(std::string_view* s) {
    uint64_t len;
    if (!varint(&len) || len > uint64_t(end_ - p_) || len > uint64_t(INT_MAX)) return false;
    *s = std::string_view(reinterpret_cast<const char*>(p_), size_t(len));
    p_ += len;
    return true;
  }

  bool text(std::string_view* s) {
    if (!bytes(s)) return false;
    unsigned char any = 0;
    for (char c : *s) any |= static_cast<unsigned char>(c);
    return any < 0x80;
  }

  bool enter(Fast* sub) {
    std::string_view s;
    if (!bytes(&s)) return false;
    sub->p_ = reinterpret_cast<const uint8_t*>(s.data());
    sub->end_ = sub->p_ + s.size();
    return true;
  }

  static bool add(std::string_view s, size_t* n, std::vector<std::string>* list) {
    if (*n == 64) return false;
    if (*n == list->size()) list->emplace_back();
    printable_into(s, 256, &(*list)[(*n)++]);
    return true;
  }

  bool echo(fr::v1::PingEcho* e) {
    e->Clear();
    uint64_t v;
    while (p_ < end_) {
      const uint32_t t = tag();
      if (t != field(1, kVarint) && t != field(2, kVarint) && t != field(3, kVarint)) return false;
      if (!varint(&v)) return false;
      if (t == field(1, kVarint))
        e->set_t1_ns(int64_t(v));
      else if (t == field(2, kVarint))
        e->set_t2_ns(int64_t(v));
      else
        e->set_t3_ns(int64_t(v));
    }
    return true;
  }

  bool process(ProcessReport* p) {
    std::string_view log, job, host;
    size_t comms = 0;
    p->rank = p->world_size = p->pid = 0;
    p->alive = p->exited_cleanly = false;
    p->records = 0;
    p->last_record_age_ns = 0;
    p->flags = 0;
    p->xfer_pairs_cut = 0;
    p->gpu_throttle = 0;
    size_t links = 0, xfers = 0;
    uint64_t v;
    while (p_ < end_) {
      const uint32_t t = tag();
      if (t == field(13, kBytes)) {
        if (xfers == ProcessReport::kMaxXferPairs) return false;
        if (xfers == p->xfers.size()) p->xfers.emplace_back();
        Fast sub(nullptr, nullptr);
        if (!enter(&sub) || !sub.xfer(&p->xfers[xfers++])) return false;
        continue;
      }
      if (t == field(15, kBytes)) {
        if (links == ProcessReport::kMaxLinks) return false;
        if (links == p->links.size()) p->links.emplace_back();
        Fast sub(nullptr, nullptr);
        if (!enter(&sub) || !sub.link(&p->links[links++])) return false;
        continue;
      }
      if (t == field(11, kBytes)) {
        if (comms == kMaxCommsPerProcess || *comms_left_ == 0) return false;
        --*comms_left_;
        if (comms == p->comms.size()) p->comms.emplace_back();
        Fast sub(nullptr, nullptr);
        if (!enter(&sub) || !sub.comm(&p->comms[comms++])) return false;
        continue;
      }
      if (t == field(1, kBytes) || t == field(6, kBytes) || t == field(7, kBytes)) {
        std::string_view& s = t == field(1, kBytes) ? log : t == field(6, kBytes) ? job : host;
        if (!text(&s)) return false;
        continue;
      }
      if ((t & 7) != kVarint || !varint(&v)) return false;
      switch (t >> 3) {
        case 2: p->rank = int32_t(v); break;
        case 3: p->world_size = int32_t(v); break;
        case 4: p->pid = int32_t(v); break;
        case 5: p->alive = v != 0; break;
        case 8: p->exited_cleanly = v != 0; break;
        case 9: p->records = v; break;
        case 10: p->last_record_age_ns = int64_t(v); break;
        case 12: p->flags = uint32_t(v); break;
        case 14: p->xfer_pairs_cut = uint32_t(v); break;
        case 16: p->gpu_throttle = v; break;
        default: return false;
      }
    }
    p->comms.resize(comms);
    p->xfers.resize(xfers);
    p->links.resize(links);
    sanitize_name_into(log, 200, &p->log);
    printable_into(job, 64, &p->job_id);
    printable_into(host, 64, &p->host);
    return true;
  }

  bool comm(CommProgress* c) {
    std::string_view name;
    uint64_t f[13] = {};  // by field number
    uint64_t v;
    size_t recent = 0, kept = 0;
    while (p_ < end_) {
      const uint32_t t = tag();
      if (t == field(13, kBytes)) {
        if (!text(&name)) return false;
        continue;
      }
      if (t == field(14, kBytes)) {
        if (recent++ == CommProgress::kMaxRecent) return false;
        if (kept == c->recent.size()) c->recent.emplace_back();
        Fast sub(nullptr, nullptr);
        if (!enter(&sub) || !sub.timing(&c->recent[kept])) return false;
        kept += timing_or_drop(&c->recent[kept]);
        continue;
      }
      if ((t & 7) != kVarint || (t >> 3) == 0 || (t >> 3) > 12 || !varint(&v)) return false;
      f[t >> 3] = v;
    }
    c->comm_id = f[1];
    c->size = int32_t(f[2]);
    c->rank = int32_t(f[3]);
    c->state = uint32_t(f[4]);
    c->coll_seq = f[5];
    c->p2p_seq = f[6];
    c->enqueued = f[7];
    c->started = f[8];
    c->completed = f[9];
    c->oldest_age_ns = int64_t(f[10]) < 0 ? 0 : int64_t(f[10]);
    c->oldest_seq = f[11];
    c->oldest_op = uint32_t(f[12]);
    printable_into(name, 64, &c->name);
    c->recent.resize(kept);
    return true;
  }

  // Varint fields 1..n of a flat message, by field number (f[0] unused); false on anything else.
  template <size_t N>
  bool flat(uint64_t (&f)[N]) {
    uint64_t v;
    while (p_ < end_) {
      const uint32_t t = tag();
      if ((t & 7) != kVarint || (t >> 3) == 0 || (t >> 3) >= N || !varint(&v)) return false;
      f[t >> 3] = v;
    }
    return true;
  }

  bool timing(CollTiming* t) {
    uint64_t f[7] = {};
    if (!flat(f)) return false;
    *t = {f[1], uint32_t(f[2]), int64_t(f[3]), int64_t(f[4]), int64_t(f[5]), int64_t(f[6])};
    return true;
  }

  bool link(LinkTiming* l) {
    uint64_t f[9] = {};
    if (!flat(f)) return false;
    *l = {f[1],
          int32_t(f[2]),
          int32_t(f[3]),
          f[4] != 0,
          f[5],
          uint32_t(f[6]),
          int64_t(f[7]) < 0 ? 0 : int64_t(f[7]),
          uint32_t(f[8])};
    return true;
  }

  // Varint fields 1..N-1 of a message, by field number, but for its two text fields (numbers
  // text_a and text_b, into *a and *b); false on anything else.
  template <size_t N>
  bool mixed(uint64_t (&f)[N], uint32_t text_a, std::string_view* a, uint32_t text_b,
             std::string_view* b) {
    uint64_t v;
    while (p_ < end_) {
      const uint32_t t = tag();
      if (t == field(text_a, kBytes) || t == field(text_b, kBytes)) {
        if (!text(t == field(text_a, kBytes) ? a : b)) return false;
        continue;
      }
      if ((t & 7) != kVarint || (t >> 3) == 0 || (t >> 3) >= N || (t >> 3) == text_a ||
          (t >> 3) == text_b || !varint(&v))
        return false;
      f[t >> 3] = v;
    }
    return true;
  }

  bool xfer(XferProgress* x) {
    std::string_view local, remote;
    uint64_t f[10] = {};
    if (!mixed(f, 1, &local, 2, &remote)) return false;
    printable_into(local, 64, &x->local_agent);
    printable_into(remote, 64, &x->remote_agent);
    x->in_flight = uint32_t(f[3]);
    x->oldest_age_ns = int64_t(f[4]) < 0 ? 0 : int64_t(f[4]);
    x->oldest_key = f[5];
    x->oldest_op = uint32_t(f[6]);
    x->oldest_bytes = f[7];
    x->oldest_status = int32_t(f[8]);
    x->completed = f[9];
    return true;
  }

  bool unrecorded(UnrecordedProcess* u) {
    std::string_view job, file;
    uint64_t f[9] = {};
    if (!mixed(f, 4, &job, 5, &file)) return false;
    u->pid = int32_t(f[1]);
    u->rank = rank_or_unknown(int32_t(f[2]));
    u->world_size = rank_or_unknown(int32_t(f[3]));
    printable_into(job, 64, &u->job_id);
    printable_into(file, 64, &u->file);
    u->torch = f[6] != 0;
    u->torch_seq = f[7];
    u->torch_idle_ns = int64_t(f[8]) < 0 ? 0 : int64_t(f[8]);
    return true;
  }

  const uint8_t* p_;
  const uint8_t* end_;
  size_t* comms_left_ = nullptr;  // the heartbeat's communicators still allowed
};

}  // namespace

std::shared_ptr<const WireMessage> to_wire(const fr::v1::CoordinatorMessage& m,
                                           const MessageRows& rows) {
  grpc::Slice s(m.ByteSizeLong());
  m.SerializeWithCachedSizesToArray(const_cast<uint8_t*>(s.begin()));
  auto w = std::make_shared<WireMessage>();
  w->bytes = grpc::ByteBuffer(&s, 1);
  w->since = rows.since(body_field(m));
  return w;
}

bool deliverable(const WireMessage& m, uint32_t agreed) {
  return m.since != 0 && m.since <= (agreed ? agreed : kMinProtocol);
}

bool starts_with_heartbeat(const grpc::ByteBuffer& b) {
  grpc::Slice one;
  if (b.TrySingleSlice(&one).ok()) return one.size() > 0 && one.begin()[0] == kHeartbeatTag;
  std::vector<grpc::Slice> slices;
  if (!b.Dump(&slices).ok()) return false;
  for (const auto& s : slices)
    if (s.size() > 0) return s.begin()[0] == kHeartbeatTag;
  return false;
}

bool decode(const grpc::ByteBuffer& b, fr::v1::NodeMessage* m) {
  grpc::Slice one;
  std::vector<grpc::Slice> slices;
  std::string scratch;
  const uint8_t* p = nullptr;
  size_t n = 0;
  if (!contiguous(b, &one, &slices, &scratch, &p, &n) || n > size_t(INT_MAX)) return false;
  return m->ParseFromArray(p, int(n));
}

bool HeartbeatDecoder::decode(const grpc::ByteBuffer& b, NodeReport* out, fr::v1::PingEcho* echo) {
  if (held_ > kKeepBytes) {
    std::string().swap(bytes_);
    std::string().swap(trimmed_);
    fr::v1::Heartbeat().Swap(&heartbeat_);
    fr::v1::NodeMessage().Swap(&whole_);
  }
  grpc::Slice one;
  const uint8_t* p = nullptr;
  size_t n = 0;
  if (!contiguous(b, &one, &slices_, &bytes_, &p, &n) || n > size_t(INT_MAX)) return false;
  held_ = n;
  const fr::v1::Heartbeat* hb = nullptr;
  // The usual shape, one heartbeat field and nothing else.
  google::protobuf::io::CodedInputStream in(p, int(n));
  uint32_t len = 0;
  if (in.ReadTag() == kHeartbeatTag && in.ReadVarint32(&len) &&
      size_t(in.CurrentPosition()) + len == n) {
    const uint8_t* body = p + in.CurrentPosition();
    if (Fast(body, body + len).heartbeat(out, echo)) {
      fast_++;
      return true;
    }
    // Protobuf builds every entry before from_proto cuts: cut the bytes first (wire_trim.cpp).
    if (!trim_heartbeat(body, len, &trimmed_)) return false;
    if (heartbeat_.ParseFromArray(trimmed_.data(), int(trimmed_.size()))) hb = &heartbeat_;
  } else if (trim_node_message(p, n, &trimmed_) &&
             whole_.ParseFromArray(trimmed_.data(), int(trimmed_.size())) &&
             whole_.has_heartbeat()) {
    hb = &whole_.heartbeat();
  }
  if (!hb) return false;
  from_proto(*hb, out);
  *echo = hb->echo();
  return true;
}

}  // namespace fr::daemon
