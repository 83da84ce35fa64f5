// See nvml.h. The function table is one X-macro list: adding a call is one line here plus its use.
#include "daemon/host/nvml.h"

#include <dlfcn.h>
#include <sys/stat.h>

#include <cstring>

#include "daemon/base/model.h"
#include "log/local_logs.h"
#include "nvml/nvml_api.h"

namespace fr::daemon {

// Every NVML function frd calls. Those marked optional may be missing from older drivers; the
// GPU's data then names them in `unavailable`.
#define FR_NVML_FUNCTIONS(X)                          \
  X(nvmlInit_v2, true)                                \
  X(nvmlShutdown, true)                               \
  X(nvmlErrorString, true)                            \
  X(nvmlSystemGetDriverVersion, false)                \
  X(nvmlDeviceGetCount_v2, true)                      \
  X(nvmlDeviceGetHandleByIndex_v2, true)              \
  X(nvmlDeviceGetPciInfo_v3, true)                    \
  X(nvmlDeviceGetName, false)                         \
  X(nvmlDeviceGetUUID, false)                         \
  X(nvmlDeviceGetTemperatureV, false)                 \
  X(nvmlDeviceGetTemperature, false)                  \
  X(nvmlDeviceGetPowerUsage, false)                   \
  X(nvmlDeviceGetCurrentClocksEventReasons, false)    \
  X(nvmlDeviceGetCurrentClocksThrottleReasons, false) \
  X(nvmlDeviceGetTotalEccErrors, false)               \
  X(nvmlDeviceGetRetiredPagesPendingStatus, false)    \
  X(nvmlDeviceGetRemappedRows, false)                 \
  X(nvmlDeviceGetNvLinkState, false)                  \
  X(nvmlDeviceGetNvLinkErrorCounter, false)           \
  X(nvmlDeviceGetPcieReplayCounter, false)            \
  X(nvmlDeviceGetComputeRunningProcesses_v3, false)   \
  X(nvmlEventSetCreate, false)                        \
  X(nvmlDeviceRegisterEvents, false)                  \
  X(nvmlEventSetWait_v2, false)                       \
  X(nvmlEventSetFree, false)

struct GpuMonitor::Api {
#define FR_NVML_POINTER(name, required) decltype(&::name) name = nullptr;
  FR_NVML_FUNCTIONS(FR_NVML_POINTER)
#undef FR_NVML_POINTER
};

namespace {

// Whether this process is in the initial PID namespace (the kernel's PROC_PID_INIT_INO), whose
// PIDs are the ones NVML reports. Elsewhere (a pod's shared namespace) a host PID may name
// another process or none.
bool in_initial_pid_namespace() {
  struct stat st {};
  return ::stat("/proc/self/ns/pid", &st) == 0 && st.st_ino == 0xEFFFFFFCu;
}

std::string text(const GpuMonitor::Api*, nvmlReturn_t r);

}  // namespace

// The bits daemon/base/model.h names for the coordinator, which does not reach NVML.
static_assert(kThrottleSwPowerCap == nvmlClocksThrottleReasonSwPowerCap);
static_assert(kThrottleHwSlowdown == nvmlClocksThrottleReasonHwSlowdown);
static_assert(kThrottleSwThermalSlowdown == nvmlClocksThrottleReasonSwThermalSlowdown);
static_assert(kThrottleHwThermalSlowdown == nvmlClocksThrottleReasonHwThermalSlowdown);
static_assert(kThrottleHwPowerBrakeSlowdown == nvmlClocksThrottleReasonHwPowerBrakeSlowdown);

std::vector<std::string> throttle_reason_names(unsigned long long mask) {
  static const struct {
    unsigned long long bit;
    const char* name;
  } kReasons[] = {
      {nvmlClocksThrottleReasonGpuIdle, "GpuIdle"},
      {nvmlClocksThrottleReasonApplicationsClocksSetting, "ApplicationsClocksSetting"},
      {nvmlClocksThrottleReasonSwPowerCap, "SwPowerCap"},
      {nvmlClocksThrottleReasonHwSlowdown, "HwSlowdown"},
      {nvmlClocksThrottleReasonSyncBoost, "SyncBoost"},
      {nvmlClocksThrottleReasonSwThermalSlowdown, "SwThermalSlowdown"},
      {nvmlClocksThrottleReasonHwThermalSlowdown, "HwThermalSlowdown"},
      {nvmlClocksThrottleReasonHwPowerBrakeSlowdown, "HwPowerBrakeSlowdown"},
      {nvmlClocksThrottleReasonDisplayClockSetting, "DisplayClockSetting"},
  };
  std::vector<std::string> out;
  for (const auto& r : kReasons)
    if (mask & r.bit) out.push_back(r.name);
  return out;
}

GpuMonitor::GpuMonitor() = default;

GpuMonitor::~GpuMonitor() {
  stopping_ = true;
  if (watcher_.joinable()) watcher_.join();
  if (api_) {
    if (events_ && api_->nvmlEventSetFree) api_->nvmlEventSetFree(nvmlEventSet_t(events_));
    api_->nvmlShutdown();
  }
  if (handle_) ::dlclose(handle_);
}

bool GpuMonitor::open(const std::string& library, std::string* why) {
  handle_ = ::dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle_) {
    const char* e = ::dlerror();
    error_ = "NVML not available: cannot load " + library + (e ? std::string(" (") + e + ")" : "");
    *why = error_;
    return false;
  }
  auto api = std::make_unique<Api>();
#define FR_NVML_RESOLVE(name, required)                                     \
  api->name = reinterpret_cast<decltype(&::name)>(::dlsym(handle_, #name)); \
  if (required && !api->name) {                                             \
    error_ = "NVML not usable: " + library + " has no " #name;              \
    *why = error_;                                                          \
    return false;                                                           \
  }
  FR_NVML_FUNCTIONS(FR_NVML_RESOLVE)
#undef FR_NVML_RESOLVE
  nvmlReturn_t r = api->nvmlInit_v2();
  if (r != NVML_SUCCESS) {
    error_ = "NVML not available: nvmlInit failed: " + text(api.get(), r);
    *why = error_;
    return false;
  }
  unsigned int count = 0;
  if ((r = api->nvmlDeviceGetCount_v2(&count)) != NVML_SUCCESS) {
    error_ = "NVML: cannot count GPUs: " + text(api.get(), r);
    api->nvmlShutdown();
    *why = error_;
    return false;
  }
  for (unsigned int i = 0; i < count && i < 1024; ++i) {
    nvmlDevice_t d = nullptr;
    devices_.push_back(api->nvmlDeviceGetHandleByIndex_v2(i, &d) == NVML_SUCCESS ? d : nullptr);
  }
  xids_.resize(devices_.size());
  // Xid events are only delivered to a set registered before they happen: register now.
  nvmlEventSet_t set = nullptr;
  if (api->nvmlEventSetCreate && api->nvmlDeviceRegisterEvents && api->nvmlEventSetWait_v2 &&
      api->nvmlEventSetCreate(&set) == NVML_SUCCESS) {
    events_ = set;
    bool any = false;
    for (void* d : devices_)
      if (d)
        any |= api->nvmlDeviceRegisterEvents(nvmlDevice_t(d), nvmlEventTypeXidCriticalError, set) ==
               NVML_SUCCESS;
    if (!any) {
      api->nvmlEventSetFree(set);
      events_ = nullptr;
    }
  }
  api_ = std::move(api);
  error_.clear();
  if (events_) watcher_ = std::thread([this] { watch_xids(); });
  return true;
}

void GpuMonitor::watch_xids() {
  while (!stopping_) {
    nvmlEventData_t data{};
    nvmlReturn_t r = api_->nvmlEventSetWait_v2(nvmlEventSet_t(events_), &data, 200);
    if (r == NVML_ERROR_TIMEOUT) continue;
    if (r != NVML_SUCCESS) {
      // A failing wait (the GPU fell off the bus, the driver went away) must not spin.
      for (int i = 0; i < 10 && !stopping_; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      continue;
    }
    if (!(data.eventType & nvmlEventTypeXidCriticalError)) continue;
    std::lock_guard<std::mutex> lk(mu_);
    for (size_t i = 0; i < devices_.size(); ++i)
      if (devices_[i] == data.device && xids_[i].size() < 1024)
        xids_[i].push_back({data.eventData, real_ns()});
  }
}

namespace {

std::string text(const GpuMonitor::Api* api, nvmlReturn_t r) {
  const char* s = api && api->nvmlErrorString ? api->nvmlErrorString(r) : nullptr;
  return s ? std::string(s) : "NVML error " + std::to_string(int(r));
}

// The reads of one GPU. Each calls NVML and, on failure, names the field and NVML's reason in the
// GPU's `unavailable` list (a function this NVML lacks is named too).
struct DeviceReader {
  const GpuMonitor::Api& a;
  nvmlDevice_t d;
  fr::log::GpuHealth& g;

  template <class Fn, class... Args>
  bool get(const char* field, Fn fn, Args&&... args) {
    if (!fn) {
      g.unavailable.push_back(std::string(field) + ": not in this NVML");
      return false;
    }
    nvmlReturn_t r = fn(d, args...);
    if (r == NVML_SUCCESS) return true;
    g.unavailable.push_back(std::string(field) + ": " + text(&a, r));
    return false;
  }

  // What a heartbeat takes (besides identity and Xids): temperature, power, throttle reasons.
  // The current calls first (nvmlDeviceGetTemperatureV, nvmlDeviceGetCurrentClocksEventReasons);
  // where the driver lacks them or refuses, the ones they replace (deprecated in 13.0).
  void read_cheap() {
    unsigned int u = 0;
    nvmlTemperature_t t = {};
    t.version = nvmlTemperature_v1;
    t.sensorType = NVML_TEMPERATURE_GPU;
    if (a.nvmlDeviceGetTemperatureV && a.nvmlDeviceGetTemperatureV(d, &t) == NVML_SUCCESS)
      g.temperature_c = t.temperature;
    else if (get("temperature", a.nvmlDeviceGetTemperature, NVML_TEMPERATURE_GPU, &u))
      g.temperature_c = u;
    if (get("power", a.nvmlDeviceGetPowerUsage, &u)) g.power_mw = u;
    unsigned long long ull = 0;
    if ((a.nvmlDeviceGetCurrentClocksEventReasons &&
         a.nvmlDeviceGetCurrentClocksEventReasons(d, &ull) == NVML_SUCCESS) ||
        get("throttle_reasons", a.nvmlDeviceGetCurrentClocksThrottleReasons, &ull)) {
      g.throttle_reasons = int64_t(ull);
      g.throttle_names = throttle_reason_names(ull);
    }
  }

  // What an incident takes on top: name, ECC, retired pages, row remaps, PCIe replays.
  void read_memory_and_pcie() {
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE] = {0};
    if (get("name", a.nvmlDeviceGetName, name, unsigned(sizeof name))) g.name = name;
    unsigned long long ull = 0;
    if (get("ecc", a.nvmlDeviceGetTotalEccErrors, NVML_MEMORY_ERROR_TYPE_CORRECTED,
            NVML_VOLATILE_ECC, &ull))
      g.ecc_volatile_corrected = int64_t(ull);
    if (a.nvmlDeviceGetTotalEccErrors &&
        a.nvmlDeviceGetTotalEccErrors(d, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC,
                                      &ull) == NVML_SUCCESS)
      g.ecc_volatile_uncorrected = int64_t(ull);
    nvmlEnableState_t pending = NVML_FEATURE_DISABLED;
    if (get("retired_pages", a.nvmlDeviceGetRetiredPagesPendingStatus, &pending))
      g.retired_pages_pending = pending == NVML_FEATURE_ENABLED;
    unsigned int corr = 0, unc = 0, is_pending = 0, failed = 0;
    if (get("remapped_rows", a.nvmlDeviceGetRemappedRows, &corr, &unc, &is_pending, &failed)) {
      g.remapped_rows_pending = is_pending != 0;
      g.remapped_rows_failed = failed != 0;
    }
    unsigned int u = 0;
    if (get("pcie_replays", a.nvmlDeviceGetPcieReplayCounter, &u)) g.pcie_replays = u;
  }

  // Every NVLink's state and error counters, up to the first link NVML does not know.
  void read_nvlinks() {
    if (!a.nvmlDeviceGetNvLinkState) return;
    for (unsigned int l = 0; l < NVML_NVLINK_MAX_LINKS; ++l) {
      nvmlEnableState_t active = NVML_FEATURE_DISABLED;
      nvmlReturn_t r = a.nvmlDeviceGetNvLinkState(d, l, &active);
      if (r != NVML_SUCCESS) {
        // Past the last link NVML says invalid argument; a GPU without NVLink, not supported.
        if (l == 0 && r != NVML_ERROR_INVALID_ARGUMENT)
          g.unavailable.push_back("nvlink: " + text(&a, r));
        break;
      }
      fr::log::NvLinkState ls;
      ls.link = int(l);
      ls.active = active == NVML_FEATURE_ENABLED;
      if (a.nvmlDeviceGetNvLinkErrorCounter) {
        unsigned long long v = 0;
        if (a.nvmlDeviceGetNvLinkErrorCounter(d, l, NVML_NVLINK_ERROR_DL_REPLAY, &v) ==
            NVML_SUCCESS)
          ls.replay_errors = v;
        if (a.nvmlDeviceGetNvLinkErrorCounter(d, l, NVML_NVLINK_ERROR_DL_RECOVERY, &v) ==
            NVML_SUCCESS)
          ls.recovery_errors = v;
        if (a.nvmlDeviceGetNvLinkErrorCounter(d, l, NVML_NVLINK_ERROR_DL_CRC_FLIT, &v) ==
            NVML_SUCCESS)
          ls.crc_flit_errors = v;
        if (a.nvmlDeviceGetNvLinkErrorCounter(d, l, NVML_NVLINK_ERROR_DL_CRC_DATA, &v) ==
            NVML_SUCCESS)
          ls.crc_data_errors = v;
      }
      g.nvlinks.push_back(ls);
    }
  }

  // The PIDs of the compute processes running on the GPU.
  void read_pids() {
    if (!a.nvmlDeviceGetComputeRunningProcesses_v3) {
      g.unavailable.push_back("pids: not in this NVML");
      return;
    }
    std::vector<nvmlProcessInfo_t> procs(64);
    unsigned int n = unsigned(procs.size());
    nvmlReturn_t r = a.nvmlDeviceGetComputeRunningProcesses_v3(d, &n, procs.data());
    if (r == NVML_ERROR_INSUFFICIENT_SIZE && n > 0 && n <= 65536) {
      procs.resize(n + 16);
      n = unsigned(procs.size());
      r = a.nvmlDeviceGetComputeRunningProcesses_v3(d, &n, procs.data());
    }
    if (r == NVML_SUCCESS)
      for (unsigned int k = 0; k < n && k < procs.size(); ++k) {
        // NVML reports the host's PIDs; a rank in a container records the one it sees itself as.
        // Only where this daemon sees the host's PIDs can /proc map one to the other.
        static const bool host_pids = in_initial_pid_namespace();
        g.pids.push_back(int(procs[k].pid));
        g.own_pids.push_back(host_pids ? fr::log::own_pid_of(int(procs[k].pid)) : 0);
      }
    else
      g.unavailable.push_back("pids: " + text(&a, r));
  }
};

}  // namespace

fr::log::NodeGpus GpuMonitor::read(bool full, bool pids) const {
  fr::log::NodeGpus out;
  out.time_ns = real_ns();
  if (!api_) {
    out.error = error_;
    return out;
  }
  const Api& a = *api_;
  if (full && a.nvmlSystemGetDriverVersion) {
    char v[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE] = {0};
    if (a.nvmlSystemGetDriverVersion(v, sizeof v) == NVML_SUCCESS) out.driver_version = v;
  }
  for (size_t i = 0; i < devices_.size(); ++i) {
    fr::log::GpuHealth g;
    g.index = int(i);
    nvmlDevice_t d = nvmlDevice_t(devices_[i]);
    if (!d) {
      g.unavailable.push_back("device: no handle");
      out.gpus.push_back(std::move(g));
      continue;
    }
    DeviceReader reader{a, d, g};
    nvmlPciInfo_t pci{};
    if (reader.get("pci", a.nvmlDeviceGetPciInfo_v3, &pci)) g.pci_bus_id = pci.busId;
    char buf[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = {0};
    if (reader.get("uuid", a.nvmlDeviceGetUUID, buf, unsigned(sizeof buf))) g.uuid = buf;
    {
      std::lock_guard<std::mutex> lk(mu_);
      g.xids = xids_[i];
    }
    reader.read_cheap();
    if (full) {
      reader.read_memory_and_pcie();
      reader.read_nvlinks();
    }
    if (full || pids) reader.read_pids();
    out.gpus.push_back(std::move(g));
  }
  return out;
}

}  // namespace fr::daemon
