// A node's dump on disk, in its spool: the header as dump.json (the files with their sizes and
// checksums, the processes, the skipped logs), a file's size and checksum, and a checked copy
// into the coordinator's shared dump dir. The node writes and reads these; the coordinator sees
// the same header through the wire (convert.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "daemon/base/model.h"

namespace fr::daemon {

// dump.json: what take_dump wrote, read back at delivery (and after a restart).
nlohmann::json dump_header_json(const DumpHeader& h);
bool dump_header_from_json(const nlohmann::json& j, DumpHeader* h);

// Size and CRC-32C of a regular file (never a link, FIFO or device: the spool may sit in a
// shared /tmp).
bool file_crc(const std::string& path, uint64_t* size, uint32_t* crc);

// Copies `from` to `to` (created, never overwritten, fsynced), checking the copy's size and
// checksum against `f`.
bool copy_checked(const std::string& from, const std::string& to, const DumpFile& f,
                  std::string* error);

// The names in a directory (not "." and ".."); empty when it cannot be read.
std::vector<std::string> list_dir(const std::string& dir);
// Removes a directory's files, then the directory (one level: a dump's folder).
void remove_dir(const std::string& dir);

}  // namespace fr::daemon
