// See assembly.h.
#include "daemon/logic/assembly.h"
#include "daemon/base/proc_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <random>
#include <set>
#include <sstream>

#include "analyzer/analyze.h"
#include "analyzer/json_text.h"
#include "analyzer/verdicts.h"
#include "daemon/base/crc32c.h"
#include "daemon/base/names.h"
#include "log/side_files.h"
#include "common/files.h"
#include "log/safe_file.h"
#include "log/snapshot.h"

namespace fr::daemon {
namespace {

using files::errno_text;
using files::write_all;

bool ends_with(const std::string& s, const std::string& suf) {
  return s.size() >= suf.size() && s.compare(s.size() - suf.size(), suf.size(), suf) == 0;
}

void remove_tree(const std::string& dir) {
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      std::string n = e->d_name;
      if (n == "." || n == "..") continue;
      ::unlink((dir + "/" + n).c_str());
    }
    closedir(d);
  }
  ::rmdir(dir.c_str());
}

}  // namespace

DumpReceiver::~DumpReceiver() {
  if (!done_) abort();
}

bool check_dump_header(const DumpHeader& hdr, const UploadLimits& lim, std::string* error) {
  if (hdr.files.size() > lim.max_files) {
    *error = "too many files (" + std::to_string(hdr.files.size()) + ")";
    return false;
  }
  std::set<std::string> names;
  uint64_t total = 0;
  for (const auto& f : hdr.files) {
    if (!is_safe_name(f.name, 200) ||
        !(ends_with(f.name, ".frlog") || ends_with(f.name, kTorchDumpFileSuffix) ||
          fr::log::is_side_file(f.name))) {
      *error = "refused file name '" + printable(f.name, 80) + "'";
      return false;
    }
    if (!names.insert(f.name).second) {
      *error = "file " + f.name + " listed twice";
      return false;
    }
    if (f.size > lim.max_file_bytes) {
      *error = "file " + f.name + " is too large (" + std::to_string(f.size) + " bytes)";
      return false;
    }
    total += f.size;
  }
  for (const auto& p : hdr.processes)
    if (!names.count(p.file)) {
      *error = "process entry names file '" + printable(p.file, 80) + "' that is not uploaded";
      return false;
    }
  if (total > lim.max_dump_bytes) {
    *error = "dump too large (" + std::to_string(total) + " bytes)";
    return false;
  }
  return true;
}

PlacedCheck check_placed(const std::string& dir, const DumpHeader& hdr, const UploadLimits& lim,
                         std::string* error) {
  if (!check_dump_header(hdr, lim, error)) return PlacedCheck::kBadHeader;
  for (const auto& f : hdr.files) {
    fr::log::OpenedFile file = fr::log::open_regular(dir + "/" + f.name);
    if (!file.ok()) {
      *error =
          file.error == fr::log::OpenError::kMissing ? f.name + " is not in " + dir : file.message;
      return PlacedCheck::kMismatch;
    }
    if (uint64_t(file.st.st_size) != f.size) {
      *error =
          f.name + " in " + dir + " is not a regular file of " + std::to_string(f.size) + " bytes";
      return PlacedCheck::kMismatch;
    }
    uint32_t crc = 0;
    uint64_t got = 0;
    bool read_ok = crc32c_fd(file.fd.get(), &got, &crc);
    if (!read_ok || got != f.size || crc != f.crc32c) {
      *error = f.name + " in " + dir + ": checksum mismatch";
      return PlacedCheck::kMismatch;
    }
  }
  return PlacedCheck::kOk;
}

bool DumpReceiver::begin(const std::string& dir, const DumpHeader& hdr, const UploadLimits& lim,
                         std::string* error) {
  if (!check_dump_header(hdr, lim, error)) return false;
  if (!fr::files::make_dirs(dir, error)) {
    io_failure_ = true;
    return false;
  }
  dir_ = dir;
  std::random_device rd;
  staging_ = dir + "/.upload-" + sanitize_name(hdr.node_name) + "-" + std::to_string(rd());
  if (::mkdir(staging_.c_str(), 0755) != 0) {
    *error = errno_text("mkdir " + staging_);
    io_failure_ = true;
    staging_.clear();
    return false;
  }
  for (const auto& f : hdr.files) {
    File file;
    file.info = f;
    file.fd =
        ::open((staging_ + "/" + f.name).c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (file.fd < 0) {
      *error = errno_text("create " + f.name);
      io_failure_ = true;
      files_.push_back(file);
      abort();
      return false;
    }
    files_.push_back(file);
  }
  return true;
}

bool DumpReceiver::write(uint32_t index, uint64_t offset, const void* data, size_t size,
                         std::string* error) {
  if (index >= files_.size()) {
    *error = "chunk for file " + std::to_string(index) + " of " + std::to_string(files_.size());
    return false;
  }
  File& f = files_[index];
  if (offset != f.written || f.written + size > f.info.size) {
    *error = "chunk of " + f.info.name + " at " + std::to_string(offset) + " (+" +
             std::to_string(size) + ") does not follow " + std::to_string(f.written) + " of " +
             std::to_string(f.info.size);
    return false;
  }
  if (!write_all(f.fd, data, size)) {
    *error = errno_text("write " + f.info.name);
    io_failure_ = true;
    return false;
  }
  f.crc = crc32c(f.crc, data, size);
  f.written += size;
  total_ += size;
  return true;
}

bool DumpReceiver::finish(std::string* error) {
  for (auto& f : files_) {
    if (f.written != f.info.size) {
      *error = f.info.name + ": " + std::to_string(f.written) + " of " +
               std::to_string(f.info.size) + " bytes arrived";
      return false;
    }
    if (f.crc != f.info.crc32c) {
      *error = f.info.name + ": checksum mismatch";
      return false;
    }
    if (::fsync(f.fd) != 0) {
      *error = errno_text("fsync " + f.info.name);
      io_failure_ = true;
      return false;
    }
    ::close(f.fd);
    f.fd = -1;
  }
  for (auto& f : files_) {
    std::string from = staging_ + "/" + f.info.name, to = dir_ + "/" + f.info.name;
    // An accepted file is never replaced, whoever sends another of that name.
    int rc = ::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_NOREPLACE);
    if (rc != 0 && errno == EINVAL) {
      struct stat st;
      rc =
          ::lstat(to.c_str(), &st) == 0 ? (errno = EEXIST, -1) : ::rename(from.c_str(), to.c_str());
    }
    if (rc != 0) {
      if (errno == EEXIST) {
        *error = f.info.name + " is already in the dump set and is not replaced";
        return false;
      }
      *error = errno_text("rename " + f.info.name);
      io_failure_ = true;
      return false;
    }
  }
  remove_tree(staging_);
  done_ = true;
  return true;
}

void DumpReceiver::abort() {
  for (auto& f : files_)
    if (f.fd >= 0) {
      ::close(f.fd);
      f.fd = -1;
    }
  if (!staging_.empty()) remove_tree(staging_);
  staging_.clear();
  done_ = true;
}

namespace {

// A dump file as the analysis will find it: still a regular file, not a link, FIFO or device (a
// node writing into a shared dump dir could have swapped it since it was checked). lstat does
// not open, so it cannot block. A missing file is left to the analysis, which names it.
bool still_regular(const std::string& path, std::string* why) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) return true;
  if (!S_ISREG(st.st_mode)) {
    *why = "no longer a regular file (replaced since it was checked)";
    return false;
  }
  return true;
}

// A verdict that blames nodes which are connected but whose dumps did not arrive would be wrong:
// they are not lost. Say what happened instead.
void note_undelivered(const AssemblyJob& job, analyzer::Analysis* analysis) {
  if (job.undelivered.empty() || analysis->verdict.kind != analyzer::VerdictKind::kNodeLost) return;
  std::string names;
  for (const auto& [n, why] : job.undelivered)
    names += (names.empty() ? "" : "; ") + n + " (" + why + ")";
  analyzer::Finding instead;
  instead.kind = analyzer::VerdictKind::kIncomplete;
  instead.summary = "node(s) connected but their dumps did not arrive: " + names +
                    "; they are not lost, so no node_lost verdict";
  analysis->findings.insert(analysis->findings.begin(), std::move(analysis->verdict));
  analysis->verdict = std::move(instead);
}

// The analysis of the incident's directory; when there is none, a document that says why, so
// whoever waits for analysis.json is not left waiting.
analyzer::Analysis analyze_incident(const std::string& dir) {
  std::string fatal;
  try {
    if (auto a = analyzer::analyze({dir}, analyzer::Options{}, &fatal)) return std::move(*a);
  } catch (const std::exception& e) {
    fatal = std::string("analysis failed: ") + e.what();
  }
  analyzer::Analysis none;
  none.complete = false;
  none.verdict.kind = analyzer::VerdictKind::kIncomplete;
  none.verdict.summary = fatal.empty() ? "no analysis" : fatal;
  return none;
}

}  // namespace

AssemblyResult assemble(const AssemblyJob& job) {
  AssemblyResult r;
  std::string err;
  if (!fr::files::make_dirs(job.dir, &err)) {
    r.error = err;
    return r;
  }
  if (!fr::files::write_atomic(job.dir + "/incident.json", job.incident.dump(2) + "\n", &err)) {
    r.error = err;
    return r;
  }
  std::vector<fr::log::SnapshotProcess> procs;
  std::vector<fr::log::SnapshotSkip> skipped;
  for (const auto& p : job.processes) {
    std::string why;
    if (still_regular(job.dir + "/" + p.file, &why))
      procs.push_back(p);
    else
      skipped.push_back({p.file, why});
  }
  skipped.insert(skipped.end(), job.skipped.begin(), job.skipped.end());
  if (!fr::log::write_manifest(job.dir, job.job_id, uint64_t(job.time_ns), procs, skipped,
                               job.nodes, "frd coordinator", job.expected_ranks, &err)) {
    r.error = "manifest: " + err;
    return r;
  }
  analyzer::Analysis analysis = analyze_incident(job.dir);
  note_undelivered(job, &analysis);
  std::string report;
  try {
    report = analyzer::render_text(analysis, false);
  } catch (const std::exception& e) {
    report = std::string("report failed: ") + e.what() + "\n";
  }
  std::ostringstream doc;  // a large job's document is made on several threads
  analyzer::write_json(analysis.take_json(), 2, doc);
  doc << "\n";
  if (!fr::files::write_atomic(job.dir + "/report.txt", report, &err) ||
      !fr::files::write_atomic(job.dir + "/analysis.json", doc.str(), &err)) {
    r.error = err;
    return r;
  }
  r.verdict_kind = analyzer::verdict_name(analysis.verdict.kind);
  r.verdict_summary = analysis.verdict.summary;
  r.culprits = analysis.verdict.culprit_ranks;
  r.ok = true;
  return r;
}

}  // namespace fr::daemon
