// The one check every message of the node<->coordinator stream goes through before it is
// written, on either side (the node's stream writer, the coordinator's NodeStream::send): its body,
// by field number, looked up in the message list (fr/frd_messages.def) against the protocol
// version agreed with the peer. A body the list lacks (none, several, or one this build cannot
// name) is never sent, so no message goes out ungated for being new or malformed. kind_of is
// generated from the same list, and each row's field number is checked against frd.proto's.
#pragma once

#include <cstdint>
#include <optional>

#include "daemon/base/model.h"
#include "fr/v1/frd.pb.h"

namespace fr::daemon {

// The field number of the body a message carries: protobuf's oneof case when this build knows
// it; for a message this build cannot name (a newer version's, made in a test), the one
// length-delimited unknown field it consists of; 0 for none or several.
int body_field(const fr::v1::NodeMessage& m);
int body_field(const fr::v1::CoordinatorMessage& m);

// The message's kind in the list; nullopt for a body the list lacks.
std::optional<NodeMessageKind> kind_of(const fr::v1::NodeMessage& m);
std::optional<CoordinatorMessageKind> kind_of(const fr::v1::CoordinatorMessage& m);

// Whether the message may go to a peer that agreed on `agreed` (0: not yet agreed, so only
// what kMinProtocol has), by `rows` (the list; a test adds a row for a message to come).
bool may_send(const fr::v1::NodeMessage& m, uint32_t agreed,
              const MessageRows& rows = node_messages());
bool may_send(const fr::v1::CoordinatorMessage& m, uint32_t agreed,
              const MessageRows& rows = coordinator_messages());

}  // namespace fr::daemon
