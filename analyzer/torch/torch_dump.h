// PyTorch Flight Recorder interoperability: read the per-rank dumps PyTorch writes (JSON or
// pickle) into our flight-log model, and write our logs in PyTorch's JSON schema.
//
// The dump versions read, and what each holds, are the table in torch_schema.h (PyTorch's
// c10d FlightRecorder.hpp / FlightRecorderDetail.hpp, torch/distributed/flight_recorder); the
// export writes kTorchExportVersion ("2.10"). What maps to what is written down in
// torch_convert.cpp.
#pragma once

#include <string>
#include <vector>

#include "log/reader.h"

namespace fr::analyzer::torch {

bool looks_like_torch_dump(const std::string& path);  // sniff JSON / pickle FR dumps
struct TorchReadResult {
  std::vector<fr::log::LogFile> logs;
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
