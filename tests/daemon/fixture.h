// Test helpers for the daemon tests: flight logs made in memory (through the reader's own
// encoder, so they are valid by construction) and unique temporary directories.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fr/flight_log.h"
#include "log/reader.h"

namespace fr::daemon::test {

// A fresh directory under /tmp, removed by the destructor.
struct TempDir {
  TempDir();
  ~TempDir();
  std::string path;
};

struct FakeOp {
  uint16_t op = FR_OP_ALLREDUCE;
  uint64_t seq = 1;
  uint64_t op_index = 1;
  int64_t age_ns = 0;        // how long ago it was called
  bool completed = true;
  bool in_call = false;
};

struct FakeLog {
  int rank = 0;
  int world_size = 2;
  int pid = 1000;
  bool alive = true;
  std::string job = "job1";
  std::string host = "hostA";
  uint64_t comm_id = 0xabcdef;
  uint32_t comm_state = FR_COMM_LIVE;
  uint32_t flags = FR_LOG_F_GPU_MARKERS;
  std::vector<FakeOp> ops;
};

fr::log::LogFile make_log(const FakeLog& f);
// Writes the log as a file (a dump file whose writer_alive says what `f.alive` says).
std::string write_log(const std::string& dir, const std::string& name, const FakeLog& f);

}  // namespace fr::daemon::test
