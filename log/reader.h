// The flight-log reader: opens a live log or a dump file, validates everything it reads, and
// returns an owned, consistent copy. Every other part (snapshots, frd, fr-analyze) reads logs
// only through here, so the validation rules live in one place.
#pragma once

#include <sys/stat.h>

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "fr/flight_log.h"

namespace fr::log {

// Why a file could not be read. The message carries the details; the kind lets callers decide.
enum class ReadError {
  kNone,
  kIo,            // cannot open, stat, map or read the file
  kTooSmall,      // shorter than a header (truncated or empty)
  kBadMagic,      // not a flight log (foreign file)
  kNewerVersion,  // written by a newer format version than this reader knows
  kCorrupt,       // sizes, offsets or capacities that do not add up
  kTruncated,     // the header is fine but the file is shorter than it says
};

const char* read_error_name(ReadError e);

// One record with its GPU state resolved against its communicator's counters. `Record{}` is all
// zeros, as before it had constructors.
struct Record {
  fr_record raw;           // as copied under its sequence lock
  fr_gpu_state gpu_state;  // resolved (fr_resolve_gpu_state)

  Record() : raw{}, gpu_state(FR_GPU_NONE) {}
  Record(const fr_record& r, fr_gpu_state s) : raw(r), gpu_state(s) {}
  // The bytes of a whole current-version record, copied once (a reader's private copy of a dump
  // holds its records as bytes).
  struct FromBytes {};
  Record(FromBytes, const void* bytes) : gpu_state(FR_GPU_NONE) {
    std::memcpy(&raw, bytes, sizeof raw);
  }
};

// An owned, validated copy of one log. Structures are normalized to this reader's version:
// fields an older writer did not have are zero.
struct LogFile {
  std::string path;
  fr_log_header header{};
  std::vector<fr_comm_entry> comms;    // entries that read whole, table order
  std::vector<Record> records;         // valid records, ascending id (oldest first)
  std::vector<fr_graph_entry> graphs;  // CUDA graphs holding NCCL work (version 2 on)
  std::vector<fr_record> captures;     // NCCL ops captured into those graphs, table order
  std::vector<fr_chan_entry> chans;    // channel progress from the profiler plugin (version 5 on)
  uint32_t chans_torn = 0;             // channel slots refused: torn or implausible
  std::vector<fr_xfer_entry> xfers;    // NIXL transfer requests (version 4 on), table order
  uint32_t xfers_torn = 0;             // transfer entries refused: torn or implausible
  uint64_t torn = 0;                   // slots refused: torn, stale or inconsistent
  uint32_t comms_torn = 0;             // communicator entries refused
  bool writer_alive = false;           // live log: writer holds its lock now; dump: as recorded
  bool is_snapshot = false;            // FR_LOG_F_SNAPSHOT
  int lock_pid = 0;                    // live log: the pid holding the writer's lock, as this
                                       // reader's pid namespace sees it (0: none, or not visible)

  const fr_comm_entry* find_comm(uint64_t id) const;
  std::string job_id() const;
  std::string hostname() const;
};

struct ReadResult {
  std::optional<LogFile> log;
  ReadError error = ReadError::kNone;
  std::string message;  // one line naming the file and the problem; empty on success
  bool ok() const { return log.has_value(); }
};

// Reads a live log (a consistent snapshot: records overwritten while copying are dropped) or a
// dump file. Never throws on bad input; never trusts any size in the file. The path is opened
// through open_regular (safe_file.h): a link, FIFO or device is refused, never opened.
ReadResult read_log(const std::string& path);

// The same from a descriptor already opened (and checked) by open_regular; `st` is its fstat.
ReadResult read_log_fd(int fd, const struct stat& st, const std::string& name);
// The same, building the log in the storage of `spare` (a log the caller is done with): a
// caller reading many files hands each finished log back, so its vectors are allocated once.
ReadResult read_log_fd(int fd, const struct stat& st, const std::string& name, LogFile* spare);

// Parses a log from bytes already in memory (used by fuzzers and by the dump receivers).
ReadResult read_log_bytes(const void* data, size_t size, const std::string& name);

// Whether a live writer holds the advisory lock of the log at `path` (a POSIX record lock on the
// first byte, which dies with the process). nullopt when the file cannot be opened.
std::optional<bool> writer_alive(const std::string& path);

// Serializes a LogFile as a dump file (FR_LOG_F_SNAPSHOT, current version, records in their ring
// slots, GPU state resolved). Returns the bytes.
std::string encode_snapshot(const LogFile& log, uint64_t snapshot_ns);

// Names from the format's X-macro lists.
const char* op_name(uint16_t op);  // "AllReduce", ... "op(77)" for unknown values
bool op_is_collective(uint16_t op);
bool op_is_p2p(uint16_t op);
bool op_is_nixl(uint16_t op);                  // a NIXL agent's call (ops 64..79)
const char* xfer_state_name(uint32_t state);   // "posted", "in_progress", ...
const char* xfer_op_name(uint32_t op);         // "READ", "WRITE"
const char* nixl_status_name(int32_t status);  // "NIXL_IN_PROG", "NIXL_ERR_REMOTE_DISCONNECT", ...
const char* origin_name(uint32_t origin);
const char* comm_state_name(uint32_t state);
const char* gpu_state_name(uint32_t state);
const char* chan_kind_name(uint32_t kind);    // "kernel", "send", "recv"
const char* chan_state_name(uint32_t state);  // "recv_wait", ... "state(N)" for unknown values
const char* dtype_name(int dtype);            // ncclDataType_t names: "float32", "bfloat16", ...
// "sum", "prod", "max", "min", "avg", "premulsum(N)"; "not recorded" (negative: PyTorch dumps)
const char* redop_name(int redop);

}  // namespace fr::log
