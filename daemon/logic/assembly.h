// Writing dump sets on the coordinator: receiving one node's uploaded files into an incident's
// directory (bounded, checksummed, never outside that directory, nothing visible until whole),
// and assembling the incident (manifest.json with clock offsets, analysis, report). analysis.json
// is written last and atomically: whoever waits for a verdict waits for that file.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "daemon/logic/coordinator.h"
#include "daemon/base/model.h"

namespace fr::daemon {

struct UploadLimits {
  size_t max_files = 4096;
  uint64_t max_file_bytes = 1ull << 30;
  uint64_t max_dump_bytes = 4ull << 30;
};

// Whether a dump header may be received at all: safe `.frlog` file names, each listed once,
// every process entry naming a listed file, sizes within the limits.
bool check_dump_header(const DumpHeader& hdr, const UploadLimits& limits, std::string* error);

// A dump a node wrote itself into `dir` (a shared file system): every listed file must be there
// as a regular file (not a link) of the listed size and checksum.
enum class PlacedCheck {
  kOk,
  kBadHeader,  // the header itself is refused (check_dump_header)
  kMismatch,   // a file is missing, of another size or checksum, or not a regular file
};
PlacedCheck check_placed(const std::string& dir, const DumpHeader& hdr, const UploadLimits& limits,
                         std::string* error);

// One node's upload into one directory. Files go to a private staging folder inside `dir` and
// are renamed into place only once complete and verified.
class DumpReceiver {
 public:
  DumpReceiver() = default;
  ~DumpReceiver();
  DumpReceiver(const DumpReceiver&) = delete;
  DumpReceiver& operator=(const DumpReceiver&) = delete;

  // Checks the header (names, counts, sizes) and prepares the staging folder.
  bool begin(const std::string& dir, const DumpHeader& hdr, const UploadLimits& limits,
             std::string* error);
  // Appends bytes; chunks of a file must come in order (offset == bytes so far).
  bool write(uint32_t file_index, uint64_t offset, const void* data, size_t size,
             std::string* error);
  // Verifies sizes and checksums and moves the files into `dir`.
  bool finish(std::string* error);
  // Drops everything staged (also done by the destructor when finish did not succeed).
  void abort();

  uint64_t bytes() const { return total_; }
  // The last failure came from the file system (full disk, permissions), not from the peer's
  // data: worth retrying later.
  bool io_failure() const { return io_failure_; }

 private:
  struct File {
    DumpFile info;
    int fd = -1;
    uint64_t written = 0;
    uint32_t crc = 0;
  };
  std::string dir_;
  std::string staging_;
  std::vector<File> files_;
  uint64_t total_ = 0;
  bool done_ = false;
  bool io_failure_ = false;
};

// Writes incident.json, manifest.json, report.txt and, last, analysis.json into job.dir.
AssemblyResult assemble(const AssemblyJob& job);

}  // namespace fr::daemon
