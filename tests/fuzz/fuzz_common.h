// Shared by the fuzz targets: what must hold for any log a reader hands back.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>

#include "log/reader.h"

namespace fr::fuzz {

// A log the analysis will use must survive being written as a dump and read again: the reader's
// validation and encode_snapshot agree, whatever the input was.
inline void check_reencodes(const fr::log::LogFile& log) {
  std::string bytes = fr::log::encode_snapshot(log, log.header.snapshot_ns);
  auto again = fr::log::read_log_bytes(bytes.data(), bytes.size(), "re-encoded");
  if (!again.ok()) {
    std::fprintf(stderr, "re-encoded log refused: %s\n", again.message.c_str());
    std::abort();
  }
  if (again.log->records.size() > log.records.size() ||
      again.log->comms.size() != log.comms.size()) {
    std::fprintf(stderr, "re-encoded log changed: %zu/%zu records, %zu/%zu comms\n",
                 again.log->records.size(), log.records.size(), again.log->comms.size(),
                 log.comms.size());
    std::abort();
  }
}

// Touch everything a consumer reads, so the sanitizers see every byte.
inline size_t touch(const fr::log::LogFile& log) {
  size_t n = log.job_id().size() + log.hostname().size();
  for (const auto& c : log.comms) n += log.find_comm(c.id) != nullptr;
  for (const auto& r : log.records) {
    // The resolved state is an enum: a reader must never hand back a value outside it (a load of
    // such a value is undefined behaviour in every consumer).
    std::underlying_type_t<fr_gpu_state> state;
    std::memcpy(&state, &r.gpu_state, sizeof state);
    if (state > FR_GPU_COMPLETED) {
      std::fprintf(stderr, "reader returned record %llu with gpu_state %u (no such state)\n",
                   static_cast<unsigned long long>(r.raw.id), static_cast<unsigned>(state));
      std::abort();
    }
    n += std::string(fr::log::op_name(r.raw.op)).size();
    n += std::string(fr::log::gpu_state_name(r.gpu_state)).size();
    n += std::string(fr::log::dtype_name(r.raw.dtype)).size();
    n += std::string(fr::log::redop_name(r.raw.redop)).size();
  }
  return n;
}

}  // namespace fr::fuzz
