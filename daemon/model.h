// The plain data the node and the coordinator exchange, free of any protocol: the gRPC adapters
// convert to and from these (convert.h), and all logic is written and tested against them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fr::daemon {

struct CommProgress {
  uint64_t comm_id = 0;
  int size = -1;
  int rank = -1;
  uint32_t state = 0;         // fr_comm_state
  uint64_t coll_seq = 0;
  uint64_t p2p_seq = 0;
  uint64_t enqueued = 0;      // op_index handed to the GPU
  uint64_t started = 0;       // gpu_started
  uint64_t completed = 0;     // gpu_completed
  int64_t oldest_age_ns = 0;  // age of the oldest op in flight; 0 when none
  uint64_t oldest_seq = 0;
  uint32_t oldest_op = 0;     // fr_op
  std::string name;
};

struct ProcessReport {
  std::string log;            // file name of the log
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

  // The oldest op in flight over all communicators (0 when none).
  int64_t oldest_age_ns() const;
};

struct NodeReport {
  uint64_t seq = 0;
  int64_t node_time_ns = 0;
  std::vector<ProcessReport> processes;
  std::vector<std::string> unreadable;
  std::vector<std::string> gpu_alerts;  // "GPU 0000:3b:00.0 reported Xid 79", ...
};

// The part of a node's snapshot the coordinator needs to write the manifest.
struct DumpProcess {
  int rank = -1;
  int world_size = -1;
  int pid = 0;
  std::string host;
  std::string job_id;
  std::string file;
  std::string source;
  bool alive = false;
  uint64_t records = 0;
  uint64_t overwritten = 0;
  uint64_t torn = 0;
};

struct DumpSkip {
  std::string file;
  std::string error;
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
  std::vector<DumpProcess> processes;
  std::vector<DumpSkip> skipped;
  int64_t snapshot_time_ns = 0;
  std::string job_id;              // the incident's job as the coordinator named it; may be empty
  std::string upload_key;          // the connection's secret (Welcome.upload_key); not stored
};

// Monotonic and realtime clocks in nanoseconds.
int64_t mono_ns();
int64_t real_ns();

}  // namespace fr::daemon
