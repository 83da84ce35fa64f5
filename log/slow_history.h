// <node>.slow_history.json (schema "fr-slow-history/1", docs/dump-set.md): what a node daemon's
// heartbeats said of each watched process lately, written beside the node's dumps so that
// fr-analyze can judge a fail-slow GPU or link after the fact. A flight log holds when each op
// was called and how far its GPU got, but not how long the GPU worked on each op nor how each
// proxy step went over time; the heartbeats' summaries (daemon/host/watcher.cpp) do, and the node
// keeps the last kMaxSamples of them per process.
//
// Per process, per heartbeat (a sample): per communicator its place (rank, size), whether an op
// of it was in flight (handed to the GPU, not done) and the collectives new since the previous
// sample (sequence number, op, call time on the node's clock, kernel time where known), and the
// sampled GPU times of its collectives that became known since the previous sample (when the
// node saw the rank's GPU reach and finish each, from the stream's progress markers: often a
// sample after the collective itself, which was not finished yet); and the proxy-step timings per (communicator, channel, peer, direction) with the sender's state.
// The writer and the reader are the two functions below; the reader is bounded in every count,
// refuses another schema, and skips (naming it) a process entry it cannot read, keeping the rest.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace fr::log {

inline constexpr const char* kSlowHistorySchema = "fr-slow-history/1";
inline constexpr const char* kSlowHistorySuffix = ".slow_history.json";

struct HistoryColl {
  uint64_t seq = 0;
  uint32_t op = 0;      // fr_op
  int64_t call_ns = 0;  // node's CLOCK_REALTIME
  int64_t gpu_ns = 0;   // kernel time; 0 unknown
};

// A collective's sampled GPU times (node's CLOCK_REALTIME; 0 unknown). An optional addition to
// schema 1: a file without them reads as before, and readers before them ignore them.
struct HistoryMark {
  uint64_t seq = 0;
  int64_t gpu_start_ns = 0;
  int64_t gpu_end_ns = 0;
};

struct HistoryComm {
  uint64_t id = 0;
  int rank = -1;  // in the communicator
  int size = -1;
  bool busy = false;               // an op of it in flight on the GPU at the sample
  std::vector<HistoryColl> colls;  // new since the previous sample, oldest first
  std::vector<HistoryMark> marks;  // sampled GPU times new since the previous sample, oldest first
};

struct HistoryLink {
  uint64_t comm_id = 0;
  int32_t channel = 0;
  int32_t peer = -1;  // comm rank
  bool send = false;
  uint64_t op_seq = 0;
  uint32_t steps = 0;
  int64_t step_ns = 0;
  uint32_t state = 0;  // fr_chan_state
};

struct HistorySample {
  int64_t time_ns = 0;  // node's CLOCK_REALTIME at the heartbeat
  std::vector<HistoryComm> comms;
  std::vector<HistoryLink> links;
};

struct ProcessHistory {
  int rank = -1;  // global rank
  int pid = 0;
  std::string log;                     // flight-log file name
  std::vector<HistorySample> samples;  // oldest first
};

struct NodeSlowHistory {
  std::string node;
  int64_t time_ns = 0;  // when written
  std::vector<ProcessHistory> processes;

  // Bounds, for the writer and the reader alike.
  static constexpr size_t kMaxSamples = 120;
  static constexpr size_t kMaxProcesses = 1024;
  static constexpr size_t kMaxComms = 64;   // per sample
  static constexpr size_t kMaxColls = 64;   // per communicator per sample (and as many marks)
  static constexpr size_t kMaxLinks = 128;  // per sample
  static constexpr size_t kMaxFileBytes = 32u << 20;
};

std::string slow_history_to_text(const NodeSlowHistory& h);
// False with the reason when the document is unusable as a whole (not JSON, another schema);
// otherwise true, with one line in `notes` per process entry left out (and why).
bool parse_slow_history(const std::string& text, NodeSlowHistory* out, std::string* error,
                        std::vector<std::string>* notes);

}  // namespace fr::log
