// A log's sections as the reader sees them (internal to log/reader.cpp): the directory of every
// version in one shape, and the one check of its geometry. Version 7 on stores a directory
// (fr_log_section rows); versions 1 to 6 kept each table's row in fixed header fields, which
// legacy_directory reads into the same shape, so every table of every version is checked by the
// same loop. The LogFile a reader hands on keeps showing the rows in those header fields
// (show_in_header), so its consumers read one shape whatever the version.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "fr/flight_log.h"
#include "log/reader.h"

namespace fr::log::detail {

// The rows of a log by kind; a kind the log does not have has capacity 0.
using Directory = std::array<fr_log_section, FR_SECTION_KINDS>;

// The bytes of each structure one version of the format defines (FR_V<n>_*_BYTES).
struct Layout {
  uint32_t header = 0;
  uint32_t section = 0;  // a directory row; 0 before version 7
  std::array<uint32_t, FR_SECTION_KINDS> entry{};
};
Layout layout_of(uint32_t version);

// The bytes of a structure a reader copies: min(stored size, its own size), and for an older
// version no more than that version defines (what lies past it reads as zero).
size_t bytes_kept(uint32_t stored, size_t own, uint32_t version, uint32_t defined);

// The name of a kind for messages ("ring", "transfers").
const char* section_name(uint32_t kind);

// The directory of the log whose header is `h` (already loaded), the first `head` bytes of the
// file at `base`: version 7's rows (copied word by word, as a live writer updates their counts),
// or versions 1 to 6's header fields. kNone, or the error with `why` set.
ReadError read_directory(const uint8_t* base, size_t head, const fr_log_header& h, Directory* dir,
                         std::string* why);

// The one geometry check: every table of `dir` within the file (`size` bytes present), clear of
// the header, the directory and every other table, with entries at least as big as its version
// defines, a capacity in range and (version 7 on) a count within it.
ReadError check_geometry(const fr_log_header& h, const Directory& dir, size_t size,
                         std::string* why);

// Versions 1 to 6's header fields read as a directory, and a directory shown in them.
Directory legacy_directory(const fr_log_header& h);
void show_in_header(const Directory& dir, fr_log_header* h);
// Zeroes those fields (a version 7 writer leaves them zero); the ring's counts stay.
void clear_legacy_fields(fr_log_header* h);

}  // namespace fr::log::detail
