// torch's own Flight Recorder in a node's dump: every process fr-run registered whose hook reports
// torch (daemon/base/proc_file.h, cli/fr-run/sitecustomize.py) is asked at once to dump, before the
// flight logs and stacks are taken, so that every rank dumps at about the same moment; the dumps
// are then gathered into the dump, each as <node>-pid<P>-rank<R>.torchfr (torch's pickle, which
// fr-analyze reads and merges with the flight log of the same rank). A process whose hook does
// not answer within the budget (its GIL held by a thread stuck in C, say) is named, not waited for.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "daemon/base/model.h"
#include "log/local_logs.h"

namespace fr::daemon {

struct TorchAsked {
  std::vector<UnrecordedProcess> registered;  // every registered process (stack targets too)
  std::vector<int> asked;                     // pids asked to dump torch's recorder
  int64_t asked_mono_ns = 0;
};

// Lists the registrations and writes a dump request beside each one whose hook reports torch.
TorchAsked ask_torch_dumps(const std::string& log_dir, const fr::log::LogOwners& owners,
                           const std::string& job_filter);

struct TorchGathered {
  std::vector<std::string> files;  // written into out_dir
  std::vector<std::string> notes;  // one line per process whose dump did not come
};

// The dump file name of process `u` in a dump set.
std::string torch_dump_name(const std::string& node, const UnrecordedProcess& u);

// Waits until every asked process has dumped or `budget_ns` from the asking has passed, and
// copies each dump into out_dir.
TorchGathered gather_torch_dumps(const std::string& log_dir, const TorchAsked& asked,
                                 const std::string& node, const std::string& out_dir,
                                 int64_t budget_ns);

}  // namespace fr::daemon
