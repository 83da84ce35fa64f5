// Consistent snapshots of every flight log in a directory into a dump set: one dump file per
// process plus manifest.json. `frd snapshot`, the node daemon and fr-simjob all call this.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "log/local_logs.h"

namespace fr::log {

struct SnapshotOptions {
  std::string log_dir;      // where the live logs are (e.g. /dev/shm)
  std::string out_dir;      // the dump set to write (created if missing)
  std::string host;         // host name for the manifest; default: this machine's
  std::string job_id;       // only logs of this job when non-empty
  std::string file_prefix;  // prefix for dump file names (e.g. "node0-") to keep nodes apart
  bool write_manifest = true;
  LogOwners owners = LogOwners::defaults();  // whose logs are taken (local_logs.h)
};

struct SnapshotProcess {
  int rank = -1;
  int world_size = -1;
  int pid = 0;
  std::string host;
  std::string job_id;
  std::string file;    // dump file name, relative to the dump set
  std::string source;  // the live log it came from
  bool alive = false;
  uint64_t records = 0;
  uint64_t overwritten = 0;
  uint64_t torn = 0;
};

struct SnapshotSkip {
  std::string file;
  std::string error;
};

struct SnapshotResult {
  std::vector<SnapshotProcess> processes;
  std::vector<SnapshotSkip> skipped;  // corrupt, truncated, foreign, newer-version logs
  std::string error;                  // fatal: the dump set could not be written at all
  uint64_t time_ns = 0;
  bool ok() const { return error.empty(); }
};

SnapshotResult snapshot_dir(const SnapshotOptions& opts);

// Writes manifest.json for a dump set made of one or more snapshots (several nodes).
// `clock_offsets_ns` maps host -> offset to add to that host's times (may be empty).
struct ManifestNode {
  std::string host;
  int64_t clock_offset_ns = 0;
  bool has_offset = false;
};
// Written atomically (temp file + rename). expected_ranks < 0 leaves it out.
bool write_manifest(const std::string& out_dir, const std::string& job_id, uint64_t time_ns,
                    const std::vector<SnapshotProcess>& processes,
                    const std::vector<SnapshotSkip>& skipped,
                    const std::vector<ManifestNode>& nodes, const std::string& source,
                    int expected_ranks, std::string* error);

inline constexpr const char* kDumpSetSchema = "fr-dumpset/1";

// A dump set's manifest.json, parsed and validated (docs/dump-set.md). Unknown fields are ignored;
// a missing or malformed required field is an error naming it.
struct Manifest {
  std::string schema;
  std::string job_id;
  std::string source;
  uint64_t time_ns = 0;
  int expected_ranks = -1;  // -1 when the manifest does not say
  std::vector<ManifestNode> nodes;
  std::vector<SnapshotProcess> processes;
  std::vector<SnapshotSkip> skipped;
};
bool parse_manifest(const std::string& text, Manifest* out, std::string* error);
bool read_manifest(const std::string& dump_set_dir, Manifest* out, std::string* error);

}  // namespace fr::log
