// The GPU health a synthetic dump set carries when a gpu-slow fault is planted: one
// <node>.gpu.json per host (fr-gpu/1, as frd writes it beside a node's dumps), one GPU per rank of
// the host running that rank's process, the slow GPUs throttled for thermal reasons, so that
// fr-analyze can tell a slow GPU from a slow host.
#include <algorithm>
#include <cstdio>

#include "common/files.h"
#include "log/side_files.h"
#include "synth/synth.h"

namespace fr::synth {

bool write_gpu_health(const Spec& spec, int ranks, const std::function<std::string(int)>& set_dir,
                      std::string* error) {
  auto slow = [&](int r) {
    return std::any_of(spec.faults.begin(), spec.faults.end(), [&](const Fault& f) {
      return f.kind == "gpu-slow" && std::clamp(f.rank, 0, ranks - 1) == r;
    });
  };
  bool any = false;
  for (int r = 0; r < ranks; ++r) any |= slow(r);
  if (!any) return true;
  const int per_host = std::max(1, spec.ranks_per_host);
  for (int h = 0; h * per_host < ranks; ++h) {
    fr::log::NodeGpus node;
    node.node = "node" + std::to_string(h);
    node.time_ns = static_cast<int64_t>(spec.base_ns);
    node.driver_version = "550.54.15";
    for (int r = h * per_host; r < std::min(ranks, (h + 1) * per_host); ++r) {
      fr::log::GpuHealth g;
      g.index = r - h * per_host;
      char bus[32];
      std::snprintf(bus, sizeof bus, "0000:%02x:00.0", (0x3b + g.index) & 0xff);
      g.pci_bus_id = bus;
      g.pids = {10000 + r};  // the synthetic processes' pids (synth.cpp)
      g.throttle_reasons = slow(r) ? 0x40 : 0;
      if (slow(r)) g.throttle_names = {"HwThermalSlowdown"};
      g.temperature_c = slow(r) ? 91 : 60;
      node.gpus.push_back(std::move(g));
    }
    if (!fr::files::write_atomic(set_dir(h) + "/" + node.node + fr::log::kGpuSuffix,
                                 fr::log::gpus_to_text(node), error))
      return false;
  }
  return true;
}

}  // namespace fr::synth
