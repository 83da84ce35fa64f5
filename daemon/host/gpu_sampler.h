// Times each collective on the GPU from outside the process, without the profiler's kernel
// channels. The stream itself writes, in stream order, each communicator's `gpu_started` (the
// highest op index it has reached) and `gpu_completed` (the highest it has finished) into the
// flight log's communicator table (agent/gpu.cpp). The node's watcher reads them once a scan,
// far coarser than an op; this sampler reads only those counters, every `period_ns` (1 ms by
// default), and remembers for each op index the first sample that found the stream at it
// (started) and past it (completed). The interval between the two is when the GPU held the
// collective, to within the period: its own work plus the time it waited for its peers. The
// coordinator subtracts the wait (slow_detector.h), having every member's times.
//
// Cheap: one pread of the used part of each log's communicator table per period, no allocation in
// the loop, no lock shared with the writer (the counters are monotonic words; a read that does not
// add up is skipped). Bounded: logs, communicators per log and ops remembered per communicator
// (Limits). A log that goes away, shrinks or is replaced stops being sampled; its times are
// dropped at the next set_logs that does not list it. The first sample of a communicator only
// learns where its counters stand: ops already reached before it are not timed.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "log/safe_file.h"

namespace fr::daemon {

// One accepted flight log as the watcher read it: where its communicator table lies.
struct SampledLog {
  std::string name;  // file name in the log directory
  dev_t dev = 0;
  ino_t ino = 0;
  uint64_t comm_offset = 0;  // byte offset of the communicator table
  uint32_t comm_size = 0;    // bytes per entry
  uint32_t comm_count = 0;   // entries in use
};

// When a GPU reached and finished one op, on the node's CLOCK_REALTIME; 0 not seen.
struct GpuOpTimes {
  int64_t started_ns = 0;
  int64_t completed_ns = 0;
};

class GpuSampler {
 public:
  struct Limits {
    size_t logs = 64;   // logs sampled (the first listed)
    size_t comms = 16;  // communicators per log (table order)
    size_t ops = 128;   // op indices remembered per communicator (the newest)
  };

  GpuSampler(std::string log_dir, int64_t period_ns, Limits limits);
  GpuSampler(std::string log_dir, int64_t period_ns)
      : GpuSampler(std::move(log_dir), period_ns, Limits{}) {}
  ~GpuSampler();
  GpuSampler(const GpuSampler&) = delete;
  GpuSampler& operator=(const GpuSampler&) = delete;

  // The thread that samples every period_ns; stop() (or the destructor) ends it.
  void start();
  void stop();

  // The logs to sample from now on (each scan): new ones are opened (links refused, and the file
  // must be the one listed), those not listed are closed and forgotten, the others keep their
  // times.
  void set_logs(const std::vector<SampledLog>& logs);
  // One pass over every log (what the thread does each period); `now_mono_ns` is CLOCK_MONOTONIC.
  void sample(int64_t now_mono_ns);
  // The times of op `op_index` of communicator `comm_id` in log `name`; zeros when not seen.
  GpuOpTimes times(const std::string& name, uint64_t comm_id, uint64_t op_index) const;

  int64_t period_ns() const { return period_ns_; }
  size_t logs_sampled() const;  // open and still readable
  uint64_t passes() const { return passes_.load(std::memory_order_relaxed); }

 private:
  struct OpTime {
    uint64_t index = 0;
    int64_t started = 0, completed = 0;  // CLOCK_MONOTONIC
  };
  struct CommSlot {
    uint64_t id = 0;
    bool primed = false;
    uint64_t started = 0, completed = 0;  // the counters at the last sample
    std::vector<OpTime> ring;             // by op index % Limits::ops
  };
  struct LogSlot {
    SampledLog log;
    fr::log::Fd fd;
    std::vector<CommSlot> comms;
    std::vector<unsigned char> buf;  // one read of the table
  };

  void sample_log(LogSlot& s, int64_t now);
  void note(CommSlot& c, uint64_t from, uint64_t to, int64_t now, bool completed) const;
  void run();

  std::string log_dir_;
  int64_t period_ns_;
  Limits limits_;
  mutable std::mutex mu_;
  std::vector<LogSlot> slots_;
  std::atomic<int64_t> real_minus_mono_{0};
  std::atomic<uint64_t> passes_{0};
  std::mutex run_mu_;
  std::condition_variable run_cv_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace fr::daemon
