// Writes the agent's replay kernel (agent/replay_kernel.h) as the PTX text the agent hands to
// cuModuleLoadData, for replay_ptx_test.sh to assemble with ptxas. Fails when the text does not
// declare the one entry the agent looks up.
#include <cstdio>
#include <cstring>

#include "replay_kernel.h"

int main() {
  const char* ptx = fr::agent::kReplayKernelPtx;
  char entry[128];
  std::snprintf(entry, sizeof entry, ".visible .entry %s(", fr::agent::kReplayKernelName);
  const char* at = std::strstr(ptx, entry);
  if (at == nullptr || std::strstr(at + std::strlen(entry), ".entry") != nullptr) {
    std::fprintf(stderr, "the replay PTX must declare exactly one entry, %s\n",
                 fr::agent::kReplayKernelName);
    return 1;
  }
  std::fputs(ptx, stdout);
  return 0;
}
