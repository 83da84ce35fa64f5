// Every field of a protobuf message set through its descriptor, so that a test over a message
// covers the fields added after it was written: the heartbeat's two decoders (wire_test.cpp) and
// the dump set's records on the wire (convert_test.cpp).
#pragma once

#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>
#include <google/protobuf/util/message_differencer.h>

#include <climits>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace fr::daemon::test {

// What a field is set to: kPlain, a value every decoder keeps as it is (small distinct numbers,
// short plain names), so that a round trip gives the message back; kHostile, values that the
// decoders bound (negative and extreme numbers, long names with control characters, but ASCII:
// the fast decoder leaves the rest to protobuf on purpose). `k` varies the hostile values.
enum class Fill { kPlain, kHostile };

struct Filler {
  Fill fill = Fill::kPlain;
  int k = 0;
  int count = 0;  // values given so far; kPlain numbers them

  void scalar(google::protobuf::Message* m, const google::protobuf::FieldDescriptor* f) {
    using google::protobuf::FieldDescriptor;
    const google::protobuf::Reflection* r = m->GetReflection();
    const int n = ++count;
    const bool hostile = fill == Fill::kHostile;
    const int pick = (n + k) % 4;
    const bool rep = f->is_repeated();
    switch (f->cpp_type()) {
      case FieldDescriptor::CPPTYPE_INT32: {
        const int32_t values[] = {-1, -7, INT32_MIN, INT32_MAX};
        const int32_t v = hostile ? values[pick] : n;
        rep ? r->AddInt32(m, f, v) : r->SetInt32(m, f, v);
        break;
      }
      case FieldDescriptor::CPPTYPE_INT64: {
        const int64_t values[] = {-1, INT64_MIN, INT64_MAX, -123456789};
        const int64_t v = hostile ? values[pick] : n;
        rep ? r->AddInt64(m, f, v) : r->SetInt64(m, f, v);
        break;
      }
      case FieldDescriptor::CPPTYPE_UINT32: {
        const uint32_t values[] = {UINT32_MAX, 0x80000000u, 1u << 24, 3};
        const uint32_t v = hostile ? values[pick] : uint32_t(n);
        rep ? r->AddUInt32(m, f, v) : r->SetUInt32(m, f, v);
        break;
      }
      case FieldDescriptor::CPPTYPE_UINT64: {
        const uint64_t values[] = {UINT64_MAX, 1ull << 63, 1ull << 32, 5};
        const uint64_t v = hostile ? values[pick] : uint64_t(n);
        rep ? r->AddUInt64(m, f, v) : r->SetUInt64(m, f, v);
        break;
      }
      case FieldDescriptor::CPPTYPE_BOOL:
        rep ? r->AddBool(m, f, true) : r->SetBool(m, f, true);
        break;
      case FieldDescriptor::CPPTYPE_STRING: {
        const std::string values[] = {std::string(300, 'x'),
                                      std::string("a\tb\x01\x7f c", 8),  // and a NUL
                                      "../up/and/away", ""};
        const std::string v = hostile ? values[pick] : "s" + std::to_string(n);
        rep ? r->AddString(m, f, v) : r->SetString(m, f, v);
        break;
      }
      case FieldDescriptor::CPPTYPE_ENUM: {
        const int v = f->enum_type()->value(f->enum_type()->value_count() - 1)->number();
        rep ? r->AddEnumValue(m, f, v) : r->SetEnumValue(m, f, v);
        break;
      }
      default:
        // Floating point: none of the messages the tests walk has one; say so if one comes.
        throw std::runtime_error("proto_fill: no value for field " + f->full_name());
    }
  }

  // Every field of `m`, submessages included; `entries` of each repeated field.
  void all(google::protobuf::Message* m, int entries = 2) {
    const google::protobuf::Descriptor* d = m->GetDescriptor();
    const google::protobuf::Reflection* r = m->GetReflection();
    for (int i = 0; i < d->field_count(); ++i) {
      const google::protobuf::FieldDescriptor* f = d->field(i);
      const int times = f->is_repeated() ? entries : 1;
      for (int e = 0; e < times; ++e) {
        if (f->cpp_type() != google::protobuf::FieldDescriptor::CPPTYPE_MESSAGE)
          scalar(m, f);
        else
          all(f->is_repeated() ? r->AddMessage(m, f) : r->MutableMessage(m, f), entries);
      }
    }
  }
};

// A path from a message down to one of its scalar fields.
using FieldPath = std::vector<const google::protobuf::FieldDescriptor*>;

// Every scalar field reachable from `d`, as paths.
inline void leaf_fields(const google::protobuf::Descriptor* d, FieldPath prefix,
                        std::vector<FieldPath>* out) {
  for (int i = 0; i < d->field_count(); ++i) {
    FieldPath p = prefix;
    p.push_back(d->field(i));
    if (d->field(i)->cpp_type() == google::protobuf::FieldDescriptor::CPPTYPE_MESSAGE)
      leaf_fields(d->field(i)->message_type(), p, out);
    else
      out->push_back(p);
  }
}

// "fr.v1.Heartbeat.processes.comms.recent.gpu_ns"
inline std::string path_name(const FieldPath& p) {
  std::string s = p.front()->containing_type()->full_name();
  for (const auto* f : p) s += "." + f->name();
  return s;
}

// Sets the field at the end of `p` (one entry of every repeated field on the way).
inline void set_path(google::protobuf::Message* m, const FieldPath& p, Filler* filler) {
  for (size_t i = 0; i + 1 < p.size(); ++i) {
    const google::protobuf::Reflection* r = m->GetReflection();
    m = p[i]->is_repeated() ? r->AddMessage(m, p[i]) : r->MutableMessage(m, p[i]);
  }
  filler->scalar(m, p.back());
}

// Whether two messages are equal, and their differences, field by field, when not.
inline bool same_message(const google::protobuf::Message& a, const google::protobuf::Message& b,
                         std::string* why) {
  google::protobuf::util::MessageDifferencer d;
  why->clear();
  d.ReportDifferencesToString(why);
  return d.Compare(a, b);
}

}  // namespace fr::daemon::test
