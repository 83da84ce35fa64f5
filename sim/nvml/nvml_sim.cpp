// The emulation's libnvidia-ml.so.1: NVML's functions as nvml.h declares them (proto/nvml/nvml_api.h),
// with NVML's return codes, over GPUs described in a text file that the test (or fr-simjob)
// writes and may change at any time; every call reads it again. Without FR_SIM_NVML naming a
// readable file, nvmlInit_v2 fails with NVML_ERROR_DRIVER_NOT_LOADED, as on a machine without the
// driver.
//
// The file, one item per line ('#' starts a comment):
//   driver 550.54.15
//   gpu 0000:3b:00.0 pids=101,102 temp=45 power=250000 throttle=0x40 ecc_corrected=0
//       ecc_uncorrected=2 retired_pending=1 remap_pending=0 remap_failed=0 pcie_replays=3
//       nvlinks=4 nvlink_down=2 unsupported=ecc,remap            (all on one line)
//   (unsupported= also takes temperature_v and clocks_event: the current calls refuse, as a
//   driver without them; temperature_legacy and throttle_legacy: the deprecated ones refuse)
//   xid 0000:3b:00.0 79        an Xid event on that GPU, delivered once to each event set
//                              registered for it
// Xid lines may also come from "<file>.events", where processes append them as they happen.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "nvml/nvml_api.h"

struct nvmlDevice_st {
  int index;
};
struct nvmlEventSet_st {
  std::set<int> devices;
  size_t delivered = 0;  // xid lines handed out so far
};

namespace {

constexpr int kMaxGpus = 64;
nvmlDevice_st g_devices[kMaxGpus];
std::mutex g_mu;
bool g_init = false;

struct Gpu {
  std::string bus_id;
  std::vector<unsigned> pids;
  long temp = 40, power = 200000, pcie_replays = 0, nvlinks = 0;
  unsigned long long throttle = 0, ecc_corrected = 0, ecc_uncorrected = 0;
  bool retired_pending = false, remap_pending = false, remap_failed = false;
  std::set<int> nvlink_down;
  std::set<std::string> unsupported;
};

struct Xid {
  std::string bus_id;
  unsigned long long code = 0;
};

struct Config {
  bool ok = false;
  std::string driver = "550.54.15";
  std::vector<Gpu> gpus;
  std::vector<Xid> xids;
};

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, sep);)
    if (!item.empty()) out.push_back(item);
  return out;
}

Config load() {
  Config c;
  const char* path = std::getenv("FR_SIM_NVML");
  if (!path || !*path) return c;
  std::ifstream in(path);
  if (!in) return c;
  c.ok = true;
  std::ifstream events(std::string(path) + ".events");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  text += "\n" +
          std::string((std::istreambuf_iterator<char>(events)), std::istreambuf_iterator<char>());
  std::istringstream all(text);
  for (std::string line; std::getline(all, line);) {
    line = line.substr(0, line.find('#'));
    std::istringstream ls(line);
    std::string what;
    ls >> what;
    if (what == "driver") {
      ls >> c.driver;
    } else if (what == "xid") {
      Xid x;
      ls >> x.bus_id >> x.code;
      c.xids.push_back(x);
    } else if (what == "gpu" && c.gpus.size() < kMaxGpus) {
      Gpu g;
      ls >> g.bus_id;
      for (std::string kv; ls >> kv;) {
        size_t eq = kv.find('=');
        if (eq == std::string::npos) continue;
        std::string k = kv.substr(0, eq), v = kv.substr(eq + 1);
        unsigned long long n = std::strtoull(v.c_str(), nullptr, 0);
        if (k == "pids")
          for (auto& p : split(v, ',')) g.pids.push_back(unsigned(std::atoi(p.c_str())));
        else if (k == "temp")
          g.temp = long(n);
        else if (k == "power")
          g.power = long(n);
        else if (k == "throttle")
          g.throttle = n;
        else if (k == "ecc_corrected")
          g.ecc_corrected = n;
        else if (k == "ecc_uncorrected")
          g.ecc_uncorrected = n;
        else if (k == "retired_pending")
          g.retired_pending = n != 0;
        else if (k == "remap_pending")
          g.remap_pending = n != 0;
        else if (k == "remap_failed")
          g.remap_failed = n != 0;
        else if (k == "pcie_replays")
          g.pcie_replays = long(n);
        else if (k == "nvlinks")
          g.nvlinks = long(n);
        else if (k == "nvlink_down")
          for (auto& l : split(v, ',')) g.nvlink_down.insert(std::atoi(l.c_str()));
        else if (k == "unsupported")
          for (auto& f : split(v, ',')) g.unsupported.insert(f);
      }
      c.gpus.push_back(g);
    }
  }
  return c;
}

// The GPU behind a handle, from a fresh read of the file; NVML's code when there is none.
nvmlReturn_t gpu_of(nvmlDevice_t d, Gpu* out) {
  if (!g_init) return NVML_ERROR_UNINITIALIZED;
  if (!d || d < g_devices || d >= g_devices + kMaxGpus) return NVML_ERROR_INVALID_ARGUMENT;
  Config c = load();
  if (size_t(d->index) >= c.gpus.size()) return NVML_ERROR_GPU_IS_LOST;
  *out = c.gpus[size_t(d->index)];
  return NVML_SUCCESS;
}

nvmlReturn_t copy_text(const std::string& s, char* buf, unsigned int length) {
  if (!buf) return NVML_ERROR_INVALID_ARGUMENT;
  if (s.size() + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
  std::memcpy(buf, s.c_str(), s.size() + 1);
  return NVML_SUCCESS;
}

}  // namespace

extern "C" {

nvmlReturn_t nvmlInit_v2(void) {
  std::lock_guard<std::mutex> lk(g_mu);
  if (!load().ok) return NVML_ERROR_DRIVER_NOT_LOADED;
  for (int i = 0; i < kMaxGpus; ++i) g_devices[i].index = i;
  g_init = true;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlShutdown(void) {
  std::lock_guard<std::mutex> lk(g_mu);
  if (!g_init) return NVML_ERROR_UNINITIALIZED;
  g_init = false;
  return NVML_SUCCESS;
}

const char* nvmlErrorString(nvmlReturn_t r) {
  switch (r) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    default: return "Unknown Error";
  }
}

nvmlReturn_t nvmlSystemGetDriverVersion(char* version, unsigned int length) {
  if (!g_init) return NVML_ERROR_UNINITIALIZED;
  return copy_text(load().driver, version, length);
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* count) {
  if (!g_init) return NVML_ERROR_UNINITIALIZED;
  if (!count) return NVML_ERROR_INVALID_ARGUMENT;
  *count = unsigned(load().gpus.size());
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t* device) {
  if (!g_init) return NVML_ERROR_UNINITIALIZED;
  if (!device || index >= load().gpus.size()) return NVML_ERROR_INVALID_ARGUMENT;
  *device = &g_devices[index];
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t d, nvmlPciInfo_t* pci) {
  Gpu g;
  if (nvmlReturn_t r = gpu_of(d, &g)) return r;
  if (!pci) return NVML_ERROR_INVALID_ARGUMENT;
  std::memset(pci, 0, sizeof *pci);
  std::snprintf(pci->busId, sizeof pci->busId, "%s", g.bus_id.c_str());
  std::snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%s", g.bus_id.c_str());
  unsigned dom = 0, bus = 0, dev = 0;
  std::sscanf(g.bus_id.c_str(), "%x:%x:%x", &dom, &bus, &dev);
  pci->domain = dom, pci->bus = bus, pci->device = dev;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char* name, unsigned int length) {
  Gpu g;
  if (nvmlReturn_t r = gpu_of(d, &g)) return r;
  return copy_text("Emulated GPU", name, length);
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char* uuid, unsigned int length) {
  Gpu g;
  if (nvmlReturn_t r = gpu_of(d, &g)) return r;
  char b[64];
  std::snprintf(b, sizeof b, "GPU-00000000-0000-0000-0000-%012x", unsigned(d->index));
  return copy_text(b, uuid, length);
}

#define FR_SIM_FIELD(field)                     \
  Gpu g;                                        \
  if (nvmlReturn_t r = gpu_of(d, &g)) return r; \
  if (g.unsupported.count(field)) return NVML_ERROR_NOT_SUPPORTED;

nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t d, nvmlTemperatureSensors_t sensor,
                                      unsigned int* temp) {
  FR_SIM_FIELD("temperature")
  if (g.unsupported.count("temperature_legacy")) return NVML_ERROR_FUNCTION_NOT_FOUND;
  if (!temp || sensor != NVML_TEMPERATURE_GPU) return NVML_ERROR_INVALID_ARGUMENT;
  *temp = unsigned(g.temp);
  return NVML_SUCCESS;
}

// The current call; "unsupported=temperature_v" makes it refuse (as a driver before it would lack
// it), so the caller's fallback to nvmlDeviceGetTemperature can be tested.
nvmlReturn_t nvmlDeviceGetTemperatureV(nvmlDevice_t d, nvmlTemperature_t* t) {
  FR_SIM_FIELD("temperature")
  if (g.unsupported.count("temperature_v")) return NVML_ERROR_FUNCTION_NOT_FOUND;
  if (!t || t->sensorType != NVML_TEMPERATURE_GPU) return NVML_ERROR_INVALID_ARGUMENT;
  if (t->version != nvmlTemperature_v1) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
  t->temperature = g.temp;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t d, unsigned int* power) {
  FR_SIM_FIELD("power")
  if (!power) return NVML_ERROR_INVALID_ARGUMENT;
  *power = unsigned(g.power);
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t d,
                                                       unsigned long long* reasons) {
  FR_SIM_FIELD("throttle")
  if (g.unsupported.count("throttle_legacy")) return NVML_ERROR_FUNCTION_NOT_FOUND;
  if (!reasons) return NVML_ERROR_INVALID_ARGUMENT;
  *reasons = g.throttle;
  return NVML_SUCCESS;
}

// The current name of the throttle call; "unsupported=clocks_event" makes it refuse.
nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t d, unsigned long long* reasons) {
  FR_SIM_FIELD("throttle")
  if (g.unsupported.count("clocks_event")) return NVML_ERROR_FUNCTION_NOT_FOUND;
  if (!reasons) return NVML_ERROR_INVALID_ARGUMENT;
  *reasons = g.throttle;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t d, nvmlMemoryErrorType_t type,
                                         nvmlEccCounterType_t counter, unsigned long long* count) {
  FR_SIM_FIELD("ecc")
  if (!count || counter > NVML_AGGREGATE_ECC) return NVML_ERROR_INVALID_ARGUMENT;
  *count = type == NVML_MEMORY_ERROR_TYPE_CORRECTED ? g.ecc_corrected : g.ecc_uncorrected;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t d, nvmlEnableState_t* pending) {
  FR_SIM_FIELD("retired")
  if (!pending) return NVML_ERROR_INVALID_ARGUMENT;
  *pending = g.retired_pending ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t d, unsigned int* corr, unsigned int* unc,
                                       unsigned int* pending, unsigned int* failed) {
  FR_SIM_FIELD("remap")
  if (!corr || !unc || !pending || !failed) return NVML_ERROR_INVALID_ARGUMENT;
  *corr = 0;
  *unc = g.remap_pending ? 1 : 0;
  *pending = g.remap_pending;
  *failed = g.remap_failed;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t d, unsigned int link,
                                      nvmlEnableState_t* active) {
  FR_SIM_FIELD("nvlink")
  if (g.nvlinks == 0) return NVML_ERROR_NOT_SUPPORTED;
  if (!active || link >= unsigned(g.nvlinks)) return NVML_ERROR_INVALID_ARGUMENT;
  *active = g.nvlink_down.count(int(link)) ? NVML_FEATURE_DISABLED : NVML_FEATURE_ENABLED;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetNvLinkErrorCounter(nvmlDevice_t d, unsigned int link,
                                             nvmlNvLinkErrorCounter_t counter,
                                             unsigned long long* value) {
  FR_SIM_FIELD("nvlink")
  if (!value || link >= unsigned(g.nvlinks) || counter > NVML_NVLINK_ERROR_DL_CRC_DATA)
    return NVML_ERROR_INVALID_ARGUMENT;
  // A link that is down has seen recovery attempts.
  *value = counter == NVML_NVLINK_ERROR_DL_RECOVERY && g.nvlink_down.count(int(link)) ? 1 : 0;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPcieReplayCounter(nvmlDevice_t d, unsigned int* value) {
  FR_SIM_FIELD("pcie")
  if (!value) return NVML_ERROR_INVALID_ARGUMENT;
  *value = unsigned(g.pcie_replays);
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t d, unsigned int* count,
                                                     nvmlProcessInfo_t* infos) {
  FR_SIM_FIELD("pids")
  if (!count) return NVML_ERROR_INVALID_ARGUMENT;
  unsigned have = *count;
  *count = unsigned(g.pids.size());
  if (have < g.pids.size()) return NVML_ERROR_INSUFFICIENT_SIZE;
  if (!infos && !g.pids.empty()) return NVML_ERROR_INVALID_ARGUMENT;
  for (size_t i = 0; i < g.pids.size(); ++i)
    infos[i] = {g.pids[i], 1ull << 30, 0xFFFFFFFFu, 0xFFFFFFFFu};
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t* set) {
  if (!g_init) return NVML_ERROR_UNINITIALIZED;
  if (!set) return NVML_ERROR_INVALID_ARGUMENT;
  auto* s = new nvmlEventSet_st;
  s->delivered = load().xids.size();  // events before the registration are not delivered
  *set = s;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t d, unsigned long long types,
                                      nvmlEventSet_t set) {
  FR_SIM_FIELD("events")
  if (!set) return NVML_ERROR_INVALID_ARGUMENT;
  if (!(types & nvmlEventTypeXidCriticalError)) return NVML_ERROR_NOT_SUPPORTED;
  std::lock_guard<std::mutex> lk(g_mu);
  set->devices.insert(d->index);
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t* data,
                                 unsigned int timeoutms) {
  if (!g_init) return NVML_ERROR_UNINITIALIZED;
  if (!set || !data) return NVML_ERROR_INVALID_ARGUMENT;
  auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeoutms);
  for (;;) {
    Config c = load();
    {
      std::lock_guard<std::mutex> lk(g_mu);
      while (set->delivered < c.xids.size()) {
        const Xid& x = c.xids[set->delivered++];
        for (size_t i = 0; i < c.gpus.size(); ++i)
          if (c.gpus[i].bus_id == x.bus_id && set->devices.count(int(i))) {
            *data = {&g_devices[i], nvmlEventTypeXidCriticalError, x.code, 0xFFFFFFFFu,
                     0xFFFFFFFFu};
            return NVML_SUCCESS;
          }
      }
    }
    if (std::chrono::steady_clock::now() >= until) return NVML_ERROR_TIMEOUT;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) {
  if (!set) return NVML_ERROR_INVALID_ARGUMENT;
  delete set;
  return NVML_SUCCESS;
}

}  // extern "C"
