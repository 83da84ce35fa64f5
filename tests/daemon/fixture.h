// Test helpers for the daemon tests: flight logs made in memory (through the reader's own
// encoder, so they are valid by construction), unique temporary directories, and the few helpers
// every daemon test needs (this process's memory, a coordinator configuration, HTTP on loopback).
// One copy here, so the tests cannot drift apart; reading and writing whole files, the time units
// and waiting for a condition are every test folder's ("testing/files.h", "testing/clock.h",
// "testing/wait.h").
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "daemon/logic/coordinator.h"
#include "fr/flight_log.h"
#include "log/reader.h"
#include "temp_dir.h"

namespace fr::daemon::test {

// Removes `path` and everything under it, never following a link.
void remove_tree(const std::string& path);

// A fresh directory under /tmp (fr-daemon-test.XXXXXX), removed by the destructor unless
// FR_KEEP_TMP is set.
struct TempDir : fr::test::TempDir {
  TempDir() : fr::test::TempDir("fr-daemon-test") {}
};

struct FakeOp {
  uint16_t op = FR_OP_ALLREDUCE;
  uint64_t seq = 1;
  uint64_t op_index = 1;
  int64_t age_ns = 0;  // how long ago it was called
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

// Resident memory of this process, in MiB.
double rss_mib();
// One HTTP/1.0 GET on 127.0.0.1:port with `headers` ("Name: value\r\n" lines): the whole
// response, "" when it cannot be sent.
std::string http_get(int port, const std::string& path, const std::string& headers = "");
// A blocking TCP connection to 127.0.0.1:port from the loopback address `source` (any of
// 127.0.0.0/8; empty: the kernel's choice); -1 when it cannot connect.
int connect_loopback(int port, const std::string& source = "");
// A coordinator for job "job1" dumping into `dir`: stall after 2 s, nodes lost after 5 s of
// silence, dump sets due in 10 s, a dead rank reported after 1 s.
fr::daemon::CoordinatorConfig config(const std::string& dir);

}  // namespace fr::daemon::test
