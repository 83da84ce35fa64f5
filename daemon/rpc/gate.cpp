// The outgoing messages' check (gate.h), generated from fr/frd_messages.def.
#include "daemon/rpc/gate.h"

namespace fr::daemon {

// Each row's field number is frd.proto's for that body.
#define FR_NODE_MESSAGE(kind, field, since)                \
  static_assert(int(fr::v1::NodeMessage::kind) == (field), \
                "fr/frd_messages.def: " #kind " has another field number in frd.proto");
#define FR_COORDINATOR_MESSAGE(kind, field, since)                \
  static_assert(int(fr::v1::CoordinatorMessage::kind) == (field), \
                "fr/frd_messages.def: " #kind " has another field number in frd.proto");
#include "fr/frd_messages.def"

namespace {

int lone_unknown_field(const google::protobuf::Message& m) {
  const auto& unknown = m.GetReflection()->GetUnknownFields(m);
  if (unknown.field_count() != 1 ||
      unknown.field(0).type() != google::protobuf::UnknownField::TYPE_LENGTH_DELIMITED)
    return 0;
  return unknown.field(0).number();
}

uint32_t agreed_or_oldest(uint32_t agreed) { return agreed ? agreed : kMinProtocol; }

}  // namespace

int body_field(const fr::v1::NodeMessage& m) {
  if (m.body_case() == fr::v1::NodeMessage::BODY_NOT_SET) return lone_unknown_field(m);
  return m.GetReflection()->GetUnknownFields(m).empty() ? int(m.body_case()) : 0;
}

int body_field(const fr::v1::CoordinatorMessage& m) {
  if (m.body_case() == fr::v1::CoordinatorMessage::BODY_NOT_SET) return lone_unknown_field(m);
  return m.GetReflection()->GetUnknownFields(m).empty() ? int(m.body_case()) : 0;
}

// A row per case, as the list has them.
// clang-format off
std::optional<NodeMessageKind> kind_of(const fr::v1::NodeMessage& m) {
  switch (body_field(m)) {
#define FR_NODE_MESSAGE(kind, field, since) case field: return NodeMessageKind::kind;
#define FR_COORDINATOR_MESSAGE(kind, field, since)
#include "fr/frd_messages.def"
    default: return std::nullopt;
  }
}

std::optional<CoordinatorMessageKind> kind_of(const fr::v1::CoordinatorMessage& m) {
  switch (body_field(m)) {
#define FR_NODE_MESSAGE(kind, field, since)
#define FR_COORDINATOR_MESSAGE(kind, field, since) case field: return CoordinatorMessageKind::kind;
#include "fr/frd_messages.def"
    default: return std::nullopt;
  }
}
// clang-format on

bool may_send(const fr::v1::NodeMessage& m, uint32_t agreed, const MessageRows& rows) {
  return may_send(rows, body_field(m), agreed_or_oldest(agreed));
}

bool may_send(const fr::v1::CoordinatorMessage& m, uint32_t agreed, const MessageRows& rows) {
  return may_send(rows, body_field(m), agreed_or_oldest(agreed));
}

}  // namespace fr::daemon
