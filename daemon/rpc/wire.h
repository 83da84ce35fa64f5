// The node stream's messages as bytes (the coordinator's Connect method is served raw, so that
// gRPC's threads only move bytes):
//  - a message for the nodes is encoded once, and a dump request shared by every stream of a
//    fan-out is then sent as the same bytes, with no encoding per node;
//  - a heartbeat is told apart by its first byte and handed over undecoded; the applier decodes
//    it into one Heartbeat it keeps (HeartbeatDecoder), whose strings and submessages are reused
//    from one heartbeat to the next, rather than built and freed for each of them.
// What is decoded is exactly what protobuf's own decoding of a NodeMessage gives: a message that
// is not one heartbeat field alone (several fields, fields merged, unknown fields) is decoded as
// a whole NodeMessage.
#pragma once

#include <grpcpp/support/byte_buffer.h>

#include <memory>
#include <string>
#include <vector>

#include "daemon/base/model.h"
#include "fr/v1/frd.pb.h"

namespace fr::daemon {

// One message for a node as bytes, encoded once, with the version that added its kind (the
// message list, gate.h; 0 for a body the list lacks): a node's stream writes it only when the
// version agreed with that node has it (NodeStream::send).
struct WireMessage {
  grpc::ByteBuffer bytes;
  uint32_t since = 0;
};
std::shared_ptr<const WireMessage> to_wire(const fr::v1::CoordinatorMessage& m,
                                           const MessageRows& rows = coordinator_messages());
// Whether a node that agreed on `agreed` (0: not yet, so kMinProtocol) may receive `m`.
bool deliverable(const WireMessage& m, uint32_t agreed);

// Whether a node's message starts with a heartbeat field: the applier decodes it (and finds out
// there whether it is one). Anything else is decoded where it arrives.
bool starts_with_heartbeat(const grpc::ByteBuffer& b);

// Decodes a whole NodeMessage. False when the bytes are not one.
bool decode(const grpc::ByteBuffer& b, fr::v1::NodeMessage* m);

// A heartbeat's bytes (the body of NodeMessage.heartbeat) with every repeated field cut to what
// from_proto keeps (kMaxProcessesPerNode processes, kMaxCommsPerProcess communicators each and
// kMaxCommsPerHeartbeat in all, kMaxRecent collectives per communicator, kMaxXferPairs agent
// pairs and kMaxLinks links per process, 64 unreadable logs and GPU
// alerts), the rest copied as it is: protobuf then builds no more than that, and one message costs
// a few times its size, not a hundred (two million empty processes in 4 MiB were 300 MB of
// objects). False when the bytes are not well-formed protobuf wire format.
bool trim_heartbeat(const uint8_t* p, size_t n, std::string* out);
// The same over a whole NodeMessage: every heartbeat field in it, counted together (protobuf
// merges them into one), the other fields as they are.
bool trim_node_message(const uint8_t* p, size_t n, std::string* out);

class HeartbeatDecoder {
 public:
  // The heartbeat in `b`, as from_proto(Heartbeat, NodeReport*) gives it (into *out, reusing its
  // memory), and its clock echo. False when `b` is not a NodeMessage, or is one whose body is
  // not a heartbeat (*out is then left in any state).
  bool decode(const grpc::ByteBuffer& b, NodeReport* out, fr::v1::PingEcho* echo);
  // How many heartbeats the fast decoder took whole (the others went through protobuf's).
  uint64_t fast_decodes() const { return fast_; }

 private:
  std::vector<grpc::Slice> slices_;
  std::string bytes_;            // the message, in one piece
  std::string trimmed_;          // a heartbeat cut to from_proto's bounds, for protobuf
  fr::v1::Heartbeat heartbeat_;  // reused: its memory stays from one heartbeat to the next
  fr::v1::NodeMessage whole_;    // the other shapes
  size_t held_ = 0;              // the size of the last message decoded
  uint64_t fast_ = 0;
};

}  // namespace fr::daemon
