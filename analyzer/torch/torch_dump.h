// PyTorch Flight Recorder interoperability: read the per-rank dumps PyTorch writes (JSON or
// pickle) into our flight-log model, and write our logs in PyTorch's JSON schema.
//
// The dump versions read, and what each holds, are the table in torch_schema.h (PyTorch's
// c10d FlightRecorder.hpp / FlightRecorderDetail.hpp, torch/distributed/flight_recorder); the
// export writes kTorchExportVersion ("2.10"). What maps to what is written down in
// torch_convert.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "log/reader.h"

namespace fr::analyzer::torch {

bool looks_like_torch_dump(const std::string& path);  // sniff JSON / pickle FR dumps

// What a collective entry says that a flight-log record has no field for: its inputs and outputs
// (element counts over all tensors, the first dtype of each list as torch names it), for the
// checks that compare them (the analyzer's torch_args.cpp). Kept for the entries where they
// matter: all_to_all, and every entry whose output differs from its input in count or dtype.
struct TorchIo {
  uint64_t comm_id = 0;
  uint64_t seq = 0;
  uint16_t op = 0;
  uint64_t in_count = 0, out_count = 0;
  std::string in_dtype, out_dtype;
};

// A process group as the dump names it: torch's name ("0", "1", ...) and description
// ("default_pg", a new_group's group_desc), and the communicator id the reader gave it.
struct TorchGroup {
  uint64_t comm_id = 0;
  std::string name, desc;
};

// Per dump: the recorder's version ("2.10"), its entries' TorchIo, in record order, and its
// process groups.
struct TorchSide {
  std::string version;
  std::vector<TorchIo> io;
  std::vector<TorchGroup> groups;
};

// One frame of the Python stack torch keeps with each entry ("frames": name, filename, line).
struct TorchFrame {
  std::string function, file;
  int64_t line = -1;
};

// The Python stack of one entry, innermost first, and which frame is its call site: the
// innermost one outside torch's own package (the program's line that issued the collective).
struct TorchCallSite {
  std::vector<TorchFrame> frames;  // at most kMaxTorchFrames, each name cut to kMaxFrameText
  int user = -1;                   // index into frames; -1 when every frame is torch's
};
inline constexpr size_t kMaxTorchFrames = 32;
inline constexpr size_t kMaxFrameText = 512;

// The stack torch recorded with collective `seq` (collective_seq_id; p2p_seq_id when `p2p`) of
// process group `pg_name` in the dump at `path`. Reading the frames is kept out of
// read_torch_dump (they are most of a dump's bytes); an analysis asks for the few entries its
// verdict names. `file_id` (st_dev, st_ino), when not {0, 0}: the file read before, which
// must still be the one at `path`. False with `error` when the file cannot be read, is another
// file, or holds no such entry (or the entry no frames).
bool read_torch_call_site(const std::string& path, std::pair<uint64_t, uint64_t> file_id,
                          const std::string& pg_name, int64_t seq, bool p2p, TorchCallSite* out,
                          std::string* error);
// Of frames innermost first, the innermost one outside torch's own package; -1 when none.
int torch_user_frame(const std::vector<TorchFrame>& frames);

struct TorchReadResult {
  std::vector<fr::log::LogFile> logs;
  std::vector<TorchSide> sides;  // one per log, in the same order
  std::vector<std::string> warnings;
  std::string error;
};
TorchReadResult read_torch_dump(const std::string& path);  // one file -> LogFile(s)
bool export_torch_json(const std::vector<fr::log::LogFile>& logs, const std::string& out_dir,
                       std::string* error);  // one JSON file per rank
// The same content in PyTorch's pickle form (protocol 2, as its C++ pickler writes it): the form
// PyTorch's own fr_trace script loads (it reads pickle only).
bool export_torch_pickle(const std::vector<fr::log::LogFile>& logs, const std::string& out_dir,
                         std::string* error);

}  // namespace fr::analyzer::torch
