// A dump set's records and its manifest.json (docs/dump-set.md): one dumped process, one log
// left out, one node. Each record is this one type wherever it goes: the snapshot returns it,
// the node's dump.json and its upload header (daemon/rpc/convert.h, the one proto mapping), the
// coordinator's incident.json and the manifest carry it, all through the one to_json and the one
// from_json below.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace fr::log {

// One process of a dump set, as its flight log said at the snapshot.
struct SnapshotProcess {
  int rank = -1;        // global rank; -1 unknown
  int world_size = -1;  // -1 unknown
  int pid = 0;
  std::string host;    // the host the dump names (the snapshot's caller may set it)
  std::string job_id;  // the job the log names
  std::string file;    // dump file name, relative to the dump set
  std::string source;  // the live log it came from
  bool alive = false;  // its writer was alive at the snapshot
  uint64_t records = 0;
  uint64_t overwritten = 0;  // records the ring had overwritten
  uint64_t torn = 0;         // records being written at the snapshot, left out
};

// A log that was not taken, and why: corrupt, truncated, foreign, of a newer version.
struct SnapshotSkip {
  std::string file;
  std::string error;
};

// {"rank", "world_size", "pid", "host", "job_id", "file", "source", "alive", "records",
// "overwritten", "torn"}: the manifest's, dump.json's and incident.json's form of a process.
void to_json(nlohmann::json& j, const SnapshotProcess& p);
// Reads every field that is there with the right type (json_fields.h's rules; a rank, size or pid
// only from -1 to INT32_MAX) and leaves the others as they were. True when all eleven were there
// with the right type: a reader of its own files requires it, a reader of older or foreign ones
// need not.
bool from_json(const nlohmann::json& j, SnapshotProcess* p);
// {"file", "error"}; from_json as above, true when both were strings.
void to_json(nlohmann::json& j, const SnapshotSkip& s);
bool from_json(const nlohmann::json& j, SnapshotSkip* s);

// A node of a dump set and the offset to add to its host's times, when one is known.
struct ManifestNode {
  std::string host;
  int64_t clock_offset_ns = 0;
  bool has_offset = false;
};

// Writes manifest.json for a dump set made of one or more snapshots (several nodes), atomically
// (temp file + rename). expected_ranks < 0 leaves it out.
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
