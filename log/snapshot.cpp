// Snapshots of a directory of flight logs into a dump set, with its manifest.json (manifest.h).
// Which files are taken is decided by list_local_logs (links, FIFOs, devices, foreign owners,
// copies and duplicate ranks are refused); a log that cannot be read is named in `skipped` and
// the others are still taken; every file is written to a temporary name and renamed, so a full
// disk never leaves a half dump behind.
#include "log/snapshot.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <set>

#include "log/local_logs.h"
#include "log/reader.h"
#include "common/files.h"
#include "log/safe_file.h"

namespace fr::log {

namespace {

uint64_t realtime_ns() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

std::string this_host() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0 || !buf[0]) return "localhost";
  return buf;
}

// File-name-safe form of a name that came from a log (hostile writers can put anything there).
std::string safe_name(const std::string& s) {
  std::string out;
  for (char c : s.substr(0, 64))
    out +=
        (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.') ? c : '_';
  if (out.empty() || out == "." || out == "..") out = "unknown";
  return out;
}

}  // namespace

SnapshotResult snapshot_dir(const SnapshotOptions& opts) {
  SnapshotResult res;
  res.time_ns = realtime_ns();
  if (!files::make_dirs(opts.out_dir, &res.error)) return res;

  LocalLogOptions lo;
  lo.dir = opts.log_dir;
  lo.owners = opts.owners;
  lo.job_id = opts.job_id;
  LocalLogs listed = list_local_logs(lo);
  if (!listed.error.empty()) {
    res.error = listed.error;
    return res;
  }
  for (const LocalRefusal& r : listed.refused)
    res.skipped.push_back({opts.log_dir + "/" + r.name, r.why});

  std::set<std::string> used;
  std::string job_id = opts.job_id;
  for (const LocalLog& local : listed.logs) {
    std::string path = opts.log_dir + "/" + local.name;
    ReadResult rr = read_local_log(opts.log_dir, local);
    if (!rr.ok()) {
      res.skipped.push_back({path, rr.message});
      continue;
    }
    LogFile& log = *rr.log;
    if (!opts.job_id.empty() && log.job_id() != opts.job_id) continue;
    if (job_id.empty()) job_id = log.job_id();

    std::string host = opts.host.empty() ? log.hostname() : opts.host;
    if (host.empty()) host = this_host();
    // The dump names the host the caller says it is on, so a dump set stays self-consistent.
    std::memset(log.header.hostname, 0, FR_NAME_LEN);
    std::memcpy(log.header.hostname, host.data(), std::min<size_t>(host.size(), FR_NAME_LEN - 1));

    int rank = log.header.global_rank;
    std::string base = opts.file_prefix + "rank" + (rank >= 0 ? std::to_string(rank) : "unknown") +
                       "." + safe_name(host) + "." + std::to_string(log.header.pid);
    std::string file = base + FR_LOG_FILE_SUFFIX;
    for (int n = 1; used.count(file); ++n)
      file = base + "." + std::to_string(n) + FR_LOG_FILE_SUFFIX;

    std::string error;
    if (!files::write_atomic(opts.out_dir + "/" + file, encode_snapshot(log, res.time_ns),
                             &error)) {
      res.skipped.push_back({path, error});
      continue;
    }
    used.insert(file);

    SnapshotProcess p;
    p.rank = rank;
    p.world_size = log.header.world_size;
    p.pid = log.header.pid;
    p.host = host;
    p.job_id = log.job_id();
    p.file = file;
    p.source = path;
    p.alive = log.writer_alive;
    p.records = log.records.size();
    p.overwritten = log.header.overwritten;
    p.torn = log.torn;
    res.processes.push_back(std::move(p));
  }

  if (opts.write_manifest) {
    std::vector<ManifestNode> nodes;
    std::set<std::string> hosts;
    for (const auto& p : res.processes)
      if (hosts.insert(p.host).second) nodes.push_back({p.host, 0, false});
    if (!write_manifest(opts.out_dir, job_id, res.time_ns, res.processes, res.skipped, nodes,
                        "frd snapshot", -1, &res.error))
      return res;
  }
  return res;
}

}  // namespace fr::log
