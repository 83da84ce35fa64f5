// Runs against the real libnccl.so.2 on a machine without a GPU: prints the return codes of
// ncclGetVersion, ncclGetUniqueId and an ncclCommInitRank that must fail, so a test can compare a
// run with the agent against one without.
#include <nccl.h>
#include <stdio.h>

int main() {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  int version = 0;
  ncclResult_t r = ncclGetVersion(&version);
  printf("GetVersion=%d\nversion=%d\n", (int)r, version);
  ncclUniqueId id = {};
  r = ncclGetUniqueId(&id);
  printf("GetUniqueId=%d\n", (int)r);
  ncclComm_t comm = nullptr;
  r = ncclCommInitRank(&comm, 2, id, 0);
  printf("CommInitRank=%d\ncomm_null=%d\n", (int)r, comm == nullptr ? 1 : 0);
  printf("ErrorString=%s\n", ncclGetErrorString(r));
  return 0;
}
