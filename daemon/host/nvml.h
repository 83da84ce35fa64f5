// GPU health from NVML for the dumps (docs/frd.md, "GPU health"). NVML is reached through a
// table of function pointers resolved at run time from libnvidia-ml.so.1 (never linked), so frd
// builds and runs where the driver is absent: open() then says why in one line, and every dump
// carries that line instead of GPU data.
//
// At open() the monitor registers for Xid events on every GPU and a thread collects them (with
// the time they arrived) for as long as it lives. read(false) is the cheap subset a heartbeat
// takes (temperature, power, clock throttle reasons, Xids so far); read(true) is the full set an
// incident takes: also ECC, retired pages, row remaps, NVLink states and error counters, PCIe
// replays and the PIDs running on each GPU.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "log/side_files.h"

namespace fr::daemon {

class GpuMonitor {
 public:
  GpuMonitor();
  ~GpuMonitor();
  GpuMonitor(const GpuMonitor&) = delete;
  GpuMonitor& operator=(const GpuMonitor&) = delete;

  // Loads `library` (a name the dynamic loader resolves, or a path), initializes NVML and
  // registers for Xid events. False, with the reason, when NVML is absent or fails.
  bool open(const std::string& library, std::string* why);
  bool ready() const { return api_ != nullptr; }
  const std::string& error() const { return error_; }

  // `pids`: the cheap subset and the PIDs running on each GPU (which the heartbeats take every
  // few seconds to give each process its GPU's throttle reasons).
  fr::log::NodeGpus read(bool full, bool pids = false) const;

  struct Api;  // the table of NVML functions (nvml.cpp)

 private:
  void watch_xids();

  std::unique_ptr<Api> api_;
  std::string error_ = "NVML not opened";
  void* handle_ = nullptr;
  std::vector<void*> devices_;  // nvmlDevice_t
  void* events_ = nullptr;      // nvmlEventSet_t
  mutable std::mutex mu_;
  std::vector<std::vector<fr::log::XidEvent>> xids_;  // per device
  std::atomic<bool> stopping_{false};
  std::thread watcher_;
};

// "HwThermalSlowdown", ... for each bit of NVML's clock throttle reasons.
std::vector<std::string> throttle_reason_names(unsigned long long mask);

}  // namespace fr::daemon
