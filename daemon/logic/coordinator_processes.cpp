// What the coordinator knows of processes that record nothing of fr's own (coordinator.h): the
// processes fr-run started that have not called NCCL or NIXL (a gloo job, a job hung in Python
// before its first collective), counted beside those that record, and the stall of a job made of
// them only, seen through torch's recorder: fr-run's hook reports each process's collective
// count, and a job whose every such process has not moved for the stall threshold is stalled.
// A job without torch (or without the hook) gives no progress to judge: it is counted, never
// called stalled.
#include "daemon/logic/coordinator.h"
#include "daemon/logic/coordinator_helpers.h"

#include <algorithm>

namespace fr::daemon {

using namespace coordinator_helpers;

namespace {

std::string plural(int n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

}  // namespace

std::string ProcessCounts::summary() const {
  if (total == 0) return "no process under fr-run or with the agent loaded yet";
  std::string s = plural(total, "process", "processes") + " under fr-run on " +
                  plural(nodes, "node", "nodes") + "; ";
  if (recording == 0)
    s += total == 1 ? "it has not called NCCL or NIXL yet" : "none has called NCCL or NIXL yet";
  else if (recording == total)
    s += total == 1 ? "it records NCCL or NIXL calls" : "all record NCCL or NIXL calls";
  else
    s += std::to_string(recording) + " record NCCL or NIXL calls, " +
         std::to_string(total - recording) + " have not called either yet";
  if (torch > 0) s += "; torch's recorder watched in " + plural(torch, "process", "processes");
  return s;
}

ProcessCounts CoordinatorState::process_counts() const {
  ProcessCounts c;
  for (const auto& [_, n] : nodes_) {
    if (n.lost) continue;
    int here = n.alive + n.unrecorded;
    c.recording += n.alive;
    c.total += here;
    c.torch += n.torch_watched;
    c.nodes += here > 0;
  }
  return c;
}

void CoordinatorState::note_unrecorded(Node& n, const NodeReport& report) {
  n.unrecorded = int(report.unrecorded.size());
  n.torch_watched = 0;
  n.torch_min_idle_ns = -1;
  for (const auto& u : report.unrecorded) {
    if (!u.torch) continue;
    n.torch_watched++;
    if (n.torch_min_idle_ns < 0 || u.torch_idle_ns < n.torch_min_idle_ns)
      n.torch_min_idle_ns = u.torch_idle_ns;
  }
  if (n.unrecorded > 0) any_unrecorded_ = true;
}

int64_t CoordinatorState::unrecorded_threshold_ns() const {
  // With a learned threshold there is nothing to learn from: its cap is the threshold.
  return policy_.automatic ? policy_.cap_ns : policy_.fixed_ns;
}

std::string CoordinatorState::unrecorded_stall() const {
  if (!any_unrecorded_) return "";
  const ProcessCounts c = process_counts();
  if (c.recording > 0 || c.torch == 0) return "";
  int64_t least_idle = -1;
  for (const auto& [_, n] : nodes_) {
    if (n.lost || n.torch_min_idle_ns < 0) continue;
    if (least_idle < 0 || n.torch_min_idle_ns < least_idle) least_idle = n.torch_min_idle_ns;
  }
  if (least_idle < 0 || least_idle < unrecorded_threshold_ns()) return "";
  return "no progress in torch's process groups for " + std::to_string(int(secs(least_idle))) +
         " s (--stall-after " + std::to_string(int(secs(unrecorded_threshold_ns()))) +
         " s): " + c.summary();
}

}  // namespace fr::daemon
