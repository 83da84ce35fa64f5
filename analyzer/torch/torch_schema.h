// The PyTorch Flight Recorder dump versions this reader knows, and what each one holds that
// changes how it is read. PyTorch raises the minor version when it adds fields and the major one
// when it changes existing fields (FlightRecorder.hpp), so a row holds from its version up to the
// next row's: a dump of a version between two rows is read by the older row.
//
// A dump newer than the newest row is read by the newest row with a warning (fields it added are
// ignored); one older than the oldest row is refused with an error, never guessed at. What fr's
// own export writes (kTorchExportVersion) is one of the rows, chosen apart from what is accepted.
//
// To read a new version: add its row at the end (what it holds, where it was seen), teach the
// reader (torch_convert.cpp) any new field, and add a test per row in tests/analyzer/torch.
#pragma once

#include <string>
#include <string_view>

namespace fr::analyzer::torch {

struct TorchSchema {
  const char* version;  // as the dump's "version" field says it
  int major, minor;
  const char* seen_in;      // where this layout is written down or was seen
  const char* library_key;  // where the NCCL version is: "nccl_version" or "comm_lib_version"
                            // (the other key is tried when this one is absent)
  bool p2p_seq_ids;         // is_p2p and p2p_seq_id: point-to-point ops numbered apart from the
                            // collectives; before, both share collective_seq_id
  bool pg_status;           // per process group: last enqueued, started, completed collective
  bool retired;             // an entry's "retired" flag (gloo's only sign that work finished)
};

inline constexpr TorchSchema kTorchSchemas[] = {
    // Older dumps, as tests/analyzer/torch keeps them: sequence numbers shared by collectives
    // and point-to-point ops, no per-group status.
    {"2.2", 2, 2, "older dumps (tests/analyzer/torch fixtures)", "nccl_version", false, false,
     false},
    // pg_status, is_p2p and p2p_seq_id, retired, discovered start and completion times.
    {"2.3", 2, 3, "PyTorch c10d NCCLUtils.hpp (version_val \"2.3\")", "nccl_version", true, true,
     true},
    // Coalesced groups of collectives as well as of p2p ops (PyTorch's fr_trace tells them apart
    // from 2.7 on); the reader groups both alike.
    {"2.7", 2, 7, "PyTorch c10d FlightRecorder.hpp (version_val \"2.7\")", "nccl_version", true,
     true, true},
    // The NCCL version under comm_lib_version; thread_id and thread_name per entry.
    {"2.10", 2, 10, "PyTorch 2.15 (c10d FlightRecorder.hpp, version_val \"2.10\")",
     "comm_lib_version", true, true, true},
};

// The version fr's own export (export_torch_json, export_torch_pickle) writes: the layout
// PyTorch's fr_trace of the same release reads.
inline constexpr const char* kTorchExportVersion = "2.10";

// How a dump's "version" fits the table.
enum class SchemaFit {
  kKnown,       // a row's version, or between two rows: read by that row
  kMissing,     // no version: read by the newest row, with a warning
  kUnreadable,  // not "<major>.<minor>": read by the newest row, with a warning
  kNewer,       // newer than the newest row: read by it, with a warning
  kOlder,       // older than the oldest row: refused
};

struct SchemaChoice {
  SchemaFit fit = SchemaFit::kKnown;
  const TorchSchema* schema = nullptr;  // the row to read by; nullptr when refused
  // For every fit but kKnown: one line saying what was done (a warning, or the error for kOlder).
  std::string note;
};

// The row a dump of `version` is read by.
SchemaChoice choose_torch_schema(std::string_view version);

// The newest row (what a dump without a usable version is read as).
const TorchSchema& newest_torch_schema();

}  // namespace fr::analyzer::torch
