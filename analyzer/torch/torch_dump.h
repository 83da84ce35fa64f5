// PyTorch Flight Recorder interoperability: read the per-rank dumps PyTorch writes (JSON or
// pickle) into our flight-log model, and write our logs in PyTorch's JSON schema.
//
// The schema followed is PyTorch's Flight Recorder dump version "2.10" (c10d FlightRecorder.hpp /
// FlightRecorderDetail.hpp, torch/distributed/flight_recorder/components/*.py); older 2.x dumps
// read the same way, fields they lack get defaults. What maps to what is written down in
// torch_dump.cpp.
#pragma once

#include <string>
#include <vector>

#include "log/reader.h"

namespace fr::analyzer::torch {

bool looks_like_torch_dump(const std::string& path);            // sniff JSON / pickle FR dumps
struct TorchReadResult { std::vector<fr::log::LogFile> logs; std::vector<std::string> warnings;
                         std::string error; };
TorchReadResult read_torch_dump(const std::string& path);      // one file -> LogFile(s)
bool export_torch_json(const std::vector<fr::log::LogFile>& logs, const std::string& out_dir,
                       std::string* error);                     // one JSON file per rank
// The same content in PyTorch's pickle form (protocol 2, as its C++ pickler writes it): the form
// PyTorch's own fr_trace script loads (it reads pickle only).
bool export_torch_pickle(const std::vector<fr::log::LogFile>& logs, const std::string& out_dir,
                         std::string* error);

}  // namespace fr::analyzer::torch
