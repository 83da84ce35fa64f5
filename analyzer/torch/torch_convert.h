// One PyTorch Flight Recorder dump (a dict) into one of our flight logs: what maps to what is
// written down in torch_convert.cpp. Internal to the torch reader (torch_dump.cpp calls it).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "analyzer/torch/torch_entries.h"
#include "analyzer/torch/torch_values.h"
#include "log/reader.h"

namespace fr::analyzer::torch {

// `name_rank`: the rank the file's name gives (-1: none). `raw`: the dump's entries already read
// out of a pickle (then `dump` holds no "entries"); nullptr reads them from `dump`. Returns false
// with `error` when the dump cannot be read at all; problems that cost only part of it are
// added to `w`.
bool convert_dump(const nlohmann::json& dump, const std::string& path, int name_rank, Warnings* w,
                  const std::vector<RawEntry>* raw, fr::log::LogFile* out, std::string* error);

}  // namespace fr::analyzer::torch
