// The wrappers of NCCL's resource calls: buffer registration, memory, reduction ops and device
// communicators (a record each, through run_api in wrappers.h, with the arguments and outputs
// that name the resource), and the queries, forwarded only.
#include "wrappers.h"

using namespace fr::agent;

// ---- registration, memory, reduction ops ------------------------------------------------------

FR_API ncclResult_t ncclCommRegister(const ncclComm_t comm, void* buff, size_t size,
                                     void** handle) {
  FR_REAL_OR_FAIL(ncclCommRegister);
  return run_api(
      FR_OP_COMM_REGISTER, comm, [&] { return real(comm, buff, size, handle); },
      [&](fr_record& r, const CommRef&) {
        r.sendbuff = (uint64_t)(uintptr_t)buff;
        r.count = size;
      },
      [&](fr_record& r, const CommRef&, ncclResult_t res) {
        if (res == ncclSuccess && handle != nullptr) r.recvbuff = (uint64_t)(uintptr_t)*handle;
      });
}

FR_API ncclResult_t ncclCommDeregister(const ncclComm_t comm, void* handle) {
  FR_REAL_OR_FAIL(ncclCommDeregister);
  return run_api(
      FR_OP_COMM_DEREGISTER, comm, [&] { return real(comm, handle); },
      [&](fr_record& r, const CommRef&) { r.recvbuff = (uint64_t)(uintptr_t)handle; }, no_after);
}

FR_API ncclResult_t ncclMemAlloc(void** ptr, size_t size) {
  FR_REAL_OR_FAIL(ncclMemAlloc);
  return run_api(
      FR_OP_MEM_ALLOC, nullptr, [&] { return real(ptr, size); },
      [&](fr_record& r, const CommRef&) { r.count = size; },
      [&](fr_record& r, const CommRef&, ncclResult_t res) {
        if (res == ncclSuccess && ptr != nullptr) r.recvbuff = (uint64_t)(uintptr_t)*ptr;
      });
}

FR_API ncclResult_t ncclMemFree(void* ptr) {
  FR_REAL_OR_FAIL(ncclMemFree);
  return run_api(
      FR_OP_MEM_FREE, nullptr, [&] { return real(ptr); },
      [&](fr_record& r, const CommRef&) { r.recvbuff = (uint64_t)(uintptr_t)ptr; }, no_after);
}

FR_API ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar, ncclDataType_t datatype,
                                             ncclScalarResidence_t residence, ncclComm_t comm) {
  FR_REAL_OR_FAIL(ncclRedOpCreatePreMulSum);
  return run_api(
      FR_OP_REDOP_CREATE_PREMULSUM, comm,
      [&] { return real(op, scalar, datatype, residence, comm); },
      [&](fr_record& r, const CommRef&) {
        r.sendbuff = (uint64_t)(uintptr_t)scalar;
        r.dtype = (uint8_t)datatype;
        r.count = (uint64_t)residence;
      },
      [&](fr_record& r, const CommRef&, ncclResult_t res) {
        if (res == ncclSuccess && op != nullptr) r.redop = (int32_t)*op;
      });
}

FR_API ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm) {
  FR_REAL_OR_FAIL(ncclRedOpDestroy);
  return run_api(
      FR_OP_REDOP_DESTROY, comm, [&] { return real(op, comm); },
      [&](fr_record& r, const CommRef&) { r.redop = (int32_t)op; }, no_after);
}

// ---- device communicators (NCCL's device API): communicator-level calls ------------------------

FR_API ncclResult_t ncclDevCommCreate(ncclComm_t comm, const struct ncclDevCommRequirements* reqs,
                                      struct ncclDevComm* outDevComm) {
  FR_REAL_OR_FAIL(ncclDevCommCreate);
  return run_api(
      FR_OP_DEV_COMM_CREATE, comm, [&] { return real(comm, reqs, outDevComm); },
      [&](fr_record& r, const CommRef&) {
        r.sendbuff = (uint64_t)(uintptr_t)reqs;
        r.recvbuff = (uint64_t)(uintptr_t)outDevComm;
      },
      no_after);
}

FR_API ncclResult_t ncclDevCommDestroy(ncclComm_t comm, const struct ncclDevComm* devComm) {
  FR_REAL_OR_FAIL(ncclDevCommDestroy);
  return run_api(
      FR_OP_DEV_COMM_DESTROY, comm, [&] { return real(comm, devComm); },
      [&](fr_record& r, const CommRef&) { r.recvbuff = (uint64_t)(uintptr_t)devComm; }, no_after);
}

// ---- queries: forwarded, not recorded ----------------------------------------------------------

namespace {
const char kNoNccl[] = "fr: no NCCL library is loaded";
}  // namespace

FR_API ncclResult_t ncclGetVersion(int* version) {
  FR_REAL_OR_FAIL(ncclGetVersion);
  return real(version);
}

FR_API ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  FR_REAL_OR_FAIL(ncclCommCount);
  return real(comm, count);
}

FR_API ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device) {
  FR_REAL_OR_FAIL(ncclCommCuDevice);
  return real(comm, device);
}

FR_API ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  FR_REAL_OR_FAIL(ncclCommUserRank);
  return real(comm, rank);
}

FR_API ncclResult_t ncclCommQueryProperties(ncclComm_t comm, struct ncclCommProperties* props) {
  FR_REAL_OR_FAIL(ncclCommQueryProperties);
  return real(comm, props);
}

FR_API ncclResult_t ncclCommMemStats(ncclComm_t comm, ncclCommMemStat_t stat, uint64_t* value) {
  FR_REAL_OR_FAIL(ncclCommMemStats);
  return real(comm, stat, value);
}

FR_API ncclResult_t ncclWinGetUserPtr(ncclComm_t comm, ncclWindow_t win, void** outUserPtr) {
  FR_REAL_OR_FAIL(ncclWinGetUserPtr);
  return real(comm, win, outUserPtr);
}

FR_API const char* ncclGetErrorString(ncclResult_t result) {
  auto real = FR_REAL(ncclGetErrorString);
  return real != nullptr ? real(result) : kNoNccl;
}

FR_API const char* ncclGetLastError(ncclComm_t comm) {
  auto real = FR_REAL(ncclGetLastError);
  return real != nullptr ? real(comm) : kNoNccl;
}

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
FR_API void ncclResetDebugInit() {
  auto real = FR_REAL(ncclResetDebugInit);
  if (real != nullptr) real();
}
#pragma GCC diagnostic pop
