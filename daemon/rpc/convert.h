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

// A rank or a size as the coordinator keeps it: -1 (unknown) to 2^24, anything else -1.
inline int rank_or_unknown(int32_t v) { return v >= -1 && v <= (1 << 24) ? v : -1; }

// A collective's times as a peer sent them, checked in place: GPU times that cannot be times
// (before the epoch, past 2^62 ns) become 0, not timed; false where its call time is none, and
// the collective is dropped. Within these bounds the coordinator's sums of times and clock
// offsets cannot overflow. Both heartbeat decoders take each timing through it.
bool timing_or_drop(CollTiming* t);

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

// A dumped process and a skipped log: the one mapping between the dump set's records
// (log/manifest.h) and the wire, which the upload header uses. Text arrives printable and cut
// (host and job at 64, source, skipped file and error at 256); a process's file is cut at 256
// and otherwise left for the receiver to check.
void to_proto(const fr::log::SnapshotProcess& in, fr::v1::SnapshotProcess* out);
fr::log::SnapshotProcess from_proto(const fr::v1::SnapshotProcess& in);
void to_proto(const fr::log::SnapshotSkip& in, fr::v1::SnapshotSkip* out);
fr::log::SnapshotSkip from_proto(const fr::v1::SnapshotSkip& in);

}  // namespace fr::daemon
