// The plain data the node and the coordinator exchange, free of any protocol: the gRPC adapters
// convert to and from these (convert.h), and all logic is written and tested against them. A
// dumped process is the dump set's own record (fr::log::SnapshotProcess, log/manifest.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "log/manifest.h"

namespace fr::daemon {

// The node<->coordinator protocol's version. A node says the version it speaks in its Hello; the
// coordinator answers with the version both will speak, the lower of the two, in its Welcome (a
// coordinator of version 1 sends none: the node then speaks 1). A peer below kMinProtocol is
// refused. What each version added:
//   1  Hello, Heartbeat, DumpStatus up; Welcome, Ping, DumpRequest down. A message whose body
//      the receiver does not know closes the stream.
//   2  Welcome names the agreed version; a message whose body the receiver does not know is
//      counted and skipped, so a newer peer's new messages break nothing.
// A new message is one row of fr/frd_messages.def with the version that adds it; a peer sends it
// only when the agreed version has it (may_send; every outgoing message goes through it:
// daemon/rpc/gate.h), so an older peer never receives it.
inline constexpr uint32_t kProtocol = 2;
inline constexpr uint32_t kMinProtocol = 1;

// The messages a node sends, then those it receives, in the list's order.
enum class NodeMessageKind {
#define FR_NODE_MESSAGE(kind, field, since) kind,
#define FR_COORDINATOR_MESSAGE(kind, field, since)
#include "fr/frd_messages.def"
};
enum class CoordinatorMessageKind {
#define FR_NODE_MESSAGE(kind, field, since)
#define FR_COORDINATOR_MESSAGE(kind, field, since) kind,
#include "fr/frd_messages.def"
};

// One row of the list: a message body's field number in its oneof, and the version that added
// it. Rows are what the check reads, so a test can add a message at a version to come.
struct MessageRow {
  int field;
  uint32_t since;
};
struct MessageRows {
  const MessageRow* rows;
  size_t count;
  // The version that added the body with this field number; 0 when the list has none (such a
  // message is never sent).
  uint32_t since(int field) const;
};
MessageRows node_messages();
MessageRows coordinator_messages();

// The version a peer that says `peer` and this side agree on; 0, with *error set, when none.
uint32_t agree_protocol(uint32_t peer, std::string* error);
// Whether a message of this kind may go to a peer that agreed on `agreed` (before agreeing, ask
// for kMinProtocol: what the oldest version has).
bool may_send(NodeMessageKind k, uint32_t agreed);
bool may_send(CoordinatorMessageKind k, uint32_t agreed);
// The same for a body by field number, in `rows`: false for a body the list does not have.
bool may_send(const MessageRows& rows, int field, uint32_t agreed);

// A node's Hello, as the logic sees it (names sanitized by convert.cpp).
struct NodeHello {
  uint32_t protocol = 0;
  std::string node_name;
  std::string host;
  std::string job_id;
};

// A node's word on a dump it was asked for.
struct DumpStatusReport {
  std::string incident_id;
  bool ok = false;
  std::string error;
};

// One recent collective of a member, as its flight log holds it: when the host called it and, where
// the profiler plugin timed its kernel, the GPU time (fail-slow detection, slow_detector.h). Where
// the node samples the GPU's progress markers (daemon/host/gpu_sampler.h), when its GPU reached the
// collective and when it finished it, to within the sample period.
struct CollTiming {
  uint64_t seq = 0;     // collective sequence number on the communicator
  uint32_t op = 0;      // fr_op
  int64_t call_ns = 0;  // CLOCK_REALTIME of the node at the call's entry
  int64_t gpu_ns = 0;   // the kernel's time where the plugin recorded it; 0 unknown
  // CLOCK_REALTIME of the node at the first sample that found the stream's started (completed)
  // marker at the op; 0 unknown. The interval includes the time the GPU waits for its peers.
  int64_t gpu_start_ns = 0;
  int64_t gpu_end_ns = 0;
};

struct CommProgress {
  // Recent collectives reported per communicator: enough to join the same collective across
  // ranks between two heartbeats, few enough that a heartbeat stays small.
  static constexpr size_t kMaxRecent = 16;

  uint64_t comm_id = 0;
  int size = -1;
  int rank = -1;
  uint32_t state = 0;  // fr_comm_state
  uint64_t coll_seq = 0;
  uint64_t p2p_seq = 0;
  uint64_t enqueued = 0;      // op_index handed to the GPU
  uint64_t started = 0;       // gpu_started
  uint64_t completed = 0;     // gpu_completed
  int64_t oldest_age_ns = 0;  // age of the oldest op in flight; 0 when none
  uint64_t oldest_seq = 0;
  uint32_t oldest_op = 0;  // fr_op
  std::string name;
  std::vector<CollTiming> recent;  // the newest collectives, oldest first, at most kMaxRecent
};

// Proxy steps between this rank and one peer on one channel of a communicator, as the profiler
// plugin reports them: the time per step of the newest op on that connection.
struct LinkTiming {
  uint64_t comm_id = 0;
  int32_t channel = 0;
  int32_t peer = -1;  // the remote rank in the communicator
  bool send = false;  // this rank sends to the peer (else receives from it)
  uint64_t op_seq = 0;
  uint32_t steps = 0;   // steps finished of that op
  int64_t step_ns = 0;  // their mean time
  // fr_chan_state of the slot's oldest unfinished step when the node read it: sampled heartbeat
  // after heartbeat, how often a sender is on the wire (SEND_WAIT) tells the slow link of a ring
  // apart from the links that wait for it, whose step times it stretches alike.
  uint32_t state = 0;
};

// A process's NIXL transfers from one local agent to one remote agent (flight-log transfer table),
// summarized as CommProgress summarizes a communicator: the coordinator learns and judges each
// pair as it does a communicator (nixl_model_id), with the same adaptive threshold.
struct XferProgress {
  std::string local_agent;  // printable, cut at 64
  std::string remote_agent;
  uint32_t in_flight = 0;     // transfers posted and not done (or failed by a remote disconnect)
  int64_t oldest_age_ns = 0;  // age of the oldest post in flight; 0 when none
  uint64_t oldest_key = 0;    // that post: (transfer id << 24) | its post number
  uint32_t oldest_op = 0;     // fr_xfer_op of it
  uint64_t oldest_bytes = 0;
  int32_t oldest_status = 0;  // its last nixl_status_t
  uint64_t completed = 0;     // posts finished over the pair's table entries
};

// The id under which the coordinator learns a NIXL agent pair (a hash, apart from NCCL's ids).
uint64_t nixl_model_id(const std::string& local_agent, const std::string& remote_agent);

struct ProcessReport {
  std::string log;  // file name of the log
  int rank = -1;
  int world_size = -1;
  int pid = 0;
  bool alive = false;
  bool exited_cleanly = false;
  std::string job_id;
  std::string host;
  uint64_t records = 0;
  int64_t last_record_age_ns = 0;
  uint32_t flags = 0;
  std::vector<CommProgress> comms;
  std::vector<XferProgress> xfers;  // per (local, remote) NIXL agent pair, at most kMaxXferPairs
  uint32_t xfer_pairs_cut =
      0;  // pairs left out past kMaxXferPairs (none in flight before any kept)

  std::vector<LinkTiming> links;  // at most kMaxLinks, the slowest steps first
  // NVML's clock throttle reasons of the GPU the process runs on (the node joins GPUs to processes
  // through NVML's PIDs every few seconds); 0: none, or unknown.
  uint64_t gpu_throttle = 0;

  static constexpr size_t kMaxXferPairs = 64;
  static constexpr size_t kMaxLinks = 64;
  // The oldest op in flight over all communicators and NIXL agent pairs (0 when none).
  int64_t oldest_age_ns() const;
};

// A process fr-run started that has no flight log yet: it has called neither NCCL nor NIXL
// (daemon/base/proc_file.h). Counted, watched through torch's recorder where fr-run's hook runs
// in it, and its stacks taken at a dump.
struct UnrecordedProcess {
  int pid = 0;
  int rank = -1;
  int world_size = -1;
  std::string job_id;
  std::string file;           // its registration's file name in the log directory
  bool torch = false;         // the hook reports torch's progress from it
  uint64_t torch_seq = 0;     // its process groups' collective sequence numbers, summed
  int64_t torch_idle_ns = 0;  // since torch_seq last moved

  static constexpr size_t kMaxPerNode = 1024;
};

struct NodeReport {
  uint64_t seq = 0;
  int64_t node_time_ns = 0;
  std::vector<ProcessReport> processes;
  std::vector<UnrecordedProcess> unrecorded;  // alive, at most UnrecordedProcess::kMaxPerNode
  std::vector<std::string> unreadable;
  std::vector<std::string> gpu_alerts;  // "GPU 0000:3b:00.0 reported Xid 79", ...
};

struct DumpFile {
  std::string name;
  uint64_t size = 0;
  uint32_t crc32c = 0;
};

// What a node says about a dump before its bytes follow.
struct DumpHeader {
  std::string incident_id;
  std::string node_name;
  std::vector<DumpFile> files;
  // The node's snapshot, as the manifest will list it (one type from the log to the manifest).
  std::vector<fr::log::SnapshotProcess> processes;
  std::vector<fr::log::SnapshotSkip> skipped;
  int64_t snapshot_time_ns = 0;
  std::string job_id;      // the incident's job as the coordinator named it; may be empty
  std::string upload_key;  // the connection's secret (Welcome.upload_key); not stored
};

// The clock throttle reasons of an NVML mask that slow a GPU's clocks ("HwThermalSlowdown", ...;
// nvml.cpp checks the bits against NVML's own), and the word an operator reads for them
// ("thermal", "power", "hardware slowdown").
inline constexpr uint64_t kThrottleSwPowerCap = 0x4, kThrottleHwSlowdown = 0x8,
                          kThrottleSwThermalSlowdown = 0x20, kThrottleHwThermalSlowdown = 0x40,
                          kThrottleHwPowerBrakeSlowdown = 0x80;
std::vector<std::string> slowing_throttle_names(uint64_t mask);
std::string throttle_words(const std::vector<std::string>& names);

// Monotonic and realtime clocks in nanoseconds.
int64_t mono_ns();
int64_t real_ns();

}  // namespace fr::daemon
