// The node's view of its local flight logs. Every scan lists the log directory through
// list_local_logs (which refuses links, devices, foreign owners, copies and duplicate ranks, so a
// planted or copied file is never a dead rank), reads each accepted log through fr_log
// (validated, never trusting the writer) and reduces it to a ProcessReport: is the
// writer alive, and per communicator the enqueued, started and completed counters and the age of
// the oldest op still in flight. It also notices what must be told at once: a process that died
// since the last scan, or an op that crossed the stall threshold.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "daemon/base/model.h"
#include "daemon/host/gpu_sampler.h"
#include "log/local_logs.h"

namespace fr::daemon {

// Reduces one read log to its report; `now_real_ns` is CLOCK_REALTIME at the read. Where `gpu`
// samples the log, its recent collectives carry their GPU start and end times.
ProcessReport summarize_log(const fr::log::LogFile& log, const std::string& file_name,
                            int64_t now_real_ns, const GpuSampler* gpu = nullptr);

// The processes fr-run registered in `log_dir` that run and have no flight log among `processes`
// (daemon/base/proc_file.h): registrations of other users, of ended processes or of reused pids
// are left out. `now_real_ns` gives the torch progress files' ages.
std::vector<UnrecordedProcess> scan_registrations(const std::string& log_dir,
                                                  const fr::log::LogOwners& owners,
                                                  const std::string& job_filter,
                                                  const std::vector<ProcessReport>& processes,
                                                  int64_t now_real_ns);

// Every running process fr-run registered in `log_dir`, flight log or not.
std::vector<UnrecordedProcess> list_registrations(const std::string& log_dir,
                                                  const fr::log::LogOwners& owners,
                                                  const std::string& job_filter,
                                                  int64_t now_real_ns);

struct ScanResult {
  std::vector<ProcessReport> processes;
  std::vector<UnrecordedProcess> unrecorded;
  std::vector<std::string> unreadable;  // "file: reason"
  bool urgent = false;                  // a death or a new stall since the previous scan
};

class LogWatcher {
 public:
  LogWatcher(std::string log_dir, int64_t stall_after_ns);

  // Only logs of this job (empty: all). Set from the coordinator's Welcome.
  void set_job_filter(std::string job_id) { job_filter_ = std::move(job_id); }
  void set_stall_after(int64_t ns) { stall_after_ns_ = ns; }
  // Whose logs count (default: this process's user; every user as root).
  void set_owners(fr::log::LogOwners owners) { owners_ = std::move(owners); }
  // Each scan hands the logs it read to `gpu` (owned by the caller; null: none) and takes their
  // sampled GPU times.
  void set_gpu_sampler(GpuSampler* gpu) { gpu_ = gpu; }

  ScanResult scan();

  // At most this many logs are reported per scan (bounded heartbeats).
  static constexpr size_t kMaxLogs = 1024;

 private:
  struct Seen {
    bool alive = false;
    bool stalled = false;
  };
  std::string log_dir_;
  std::string job_filter_;
  fr::log::LogOwners owners_ = fr::log::LogOwners::defaults();
  int64_t stall_after_ns_;
  std::map<std::string, Seen> seen_;
  GpuSampler* gpu_ = nullptr;
};

}  // namespace fr::daemon
