// Between the protocol messages (fr.v1) and the plain model the logic uses. Conversions from the
// wire bound every count and sanitize every name, so nothing a peer sends reaches the logic
// unchecked.
#pragma once

#include "daemon/base/model.h"
#include "fr/v1/frd.pb.h"

namespace fr::daemon {

constexpr size_t kMaxProcessesPerNode = 1024;
constexpr size_t kMaxCommsPerProcess = 4096;
// Communicators of all the processes of one heartbeat together (each costs about 100 bytes
// decoded, two on the wire).
constexpr size_t kMaxCommsPerHeartbeat = 65536;

void to_proto(const NodeReport& in, fr::v1::Heartbeat* out);
NodeReport from_proto(const fr::v1::Heartbeat& in);
// The same into *out, whatever it held before, reusing its memory: the coordinator decodes every
// heartbeat into reports that the state hands back (CoordinatorState::heartbeat).
void from_proto(const fr::v1::Heartbeat& in, NodeReport* out);

// A Hello's names are passed on raw but bounded (the state sanitizes them where it keeps them);
// a dump status's id and error become printable text.
NodeHello from_proto(const fr::v1::Hello& in);
DumpStatusReport from_proto(const fr::v1::DumpStatus& in);

void to_proto(const DumpHeader& in, fr::v1::UploadHeader* out);
DumpHeader from_proto(const fr::v1::UploadHeader& in);

}  // namespace fr::daemon
