// Consistent snapshots of every flight log in a directory into a dump set: one dump file per
// process plus manifest.json. `frd snapshot`, the node daemon and fr-simjob all call this. The
// records it returns and the manifest it writes are log/manifest.h's.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "log/local_logs.h"
#include "log/manifest.h"

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

struct SnapshotResult {
  std::vector<SnapshotProcess> processes;
  std::vector<SnapshotSkip> skipped;  // corrupt, truncated, foreign, newer-version logs
  std::string error;                  // fatal: the dump set could not be written at all
  uint64_t time_ns = 0;
  bool ok() const { return error.empty(); }
};

SnapshotResult snapshot_dir(const SnapshotOptions& opts);

}  // namespace fr::log
