// What the coordinator knows of processes that record nothing of fr's own (coordinator.h): the
// processes fr-run started that have not called NCCL or NIXL (a gloo job, a job hung in Python
// before its first collective), counted beside those that record, and the stall of a job made of
// them only, seen through torch's recorder: fr-run's hook reports each process's collective
// count, and a job whose every such process has not moved for the stall threshold is stalled.
// A job without torch (or without the hook) gives no progress to judge: it is counted, never
// called stalled. The counts and the walk over the nodes are the node table's (node_table.h);
// here is the threshold they are judged by.
#include "daemon/logic/coordinator.h"
#include "daemon/logic/coordinator_helpers.h"

namespace fr::daemon {

using namespace coordinator_helpers;

int64_t CoordinatorState::unrecorded_threshold_ns() const {
  // With a learned threshold there is nothing to learn from: its cap is the threshold.
  return comms_.policy().automatic ? comms_.policy().cap_ns : comms_.policy().fixed_ns;
}

std::string CoordinatorState::unrecorded_stall() const {
  return nodes_.unrecorded_stall(unrecorded_threshold_ns());
}

}  // namespace fr::daemon
