// A no-op libnccl.so.2 for the agent's benchmark: just enough API for one communicator and
// all-reduces and groups that return at once, so what is measured is the call path itself.
#include <nccl.h>

#define API extern "C" __attribute__((visibility("default")))

namespace {
int g_comm;
}

API ncclResult_t ncclGetVersion(int* v) {
  *v = 22809;
  return ncclSuccess;
}
API ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  for (char& c : id->internal) c = 7;
  return ncclSuccess;
}
API ncclResult_t ncclCommInitRank(ncclComm_t* comm, int, ncclUniqueId, int) {
  *comm = (ncclComm_t)&g_comm;
  return ncclSuccess;
}
API ncclResult_t ncclCommCount(const ncclComm_t, int* n) {
  *n = 1;
  return ncclSuccess;
}
API ncclResult_t ncclCommUserRank(const ncclComm_t, int* r) {
  *r = 0;
  return ncclSuccess;
}
API ncclResult_t ncclCommCuDevice(const ncclComm_t, int* d) {
  *d = 0;
  return ncclSuccess;
}
API ncclResult_t ncclCommDestroy(ncclComm_t) { return ncclSuccess; }
API ncclResult_t ncclAllReduce(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                               cudaStream_t) {
  return ncclSuccess;
}
API ncclResult_t ncclSend(const void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) {
  return ncclSuccess;
}
API ncclResult_t ncclRecv(void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) {
  return ncclSuccess;
}
API ncclResult_t ncclGroupStart() { return ncclSuccess; }
API ncclResult_t ncclGroupEnd() { return ncclSuccess; }
