// A no-op libnixl.so for the NIXL benchmark: nixlAgent's constructor and the four calls of a
// transfer's life (createXferReq, postXferReq, getXferStatus, releaseXferReq), under NIXL 1.5.1's
// mangled names, doing nothing but hand out a request handle. Against it the benchmark measures
// what the agent's wrappers add per transfer, free of UCX and of the machine's load.
#include <cstdint>

#include "nixl_abi.h"

namespace nx = fr::agent::nixl;

#define FR_NOOP extern "C" __attribute__((visibility("default")))

FR_NOOP void noop_ctor(void*, const nx::StdString*, const void*) __asm__(
    "_ZN9nixlAgentC1ERKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEERK15nixlAgentConfig");
void noop_ctor(void*, const nx::StdString*, const void*) {}

namespace {
alignas(64) unsigned char g_requests[64];  // handles: addresses in here
}

FR_NOOP int
noop_create(const void*, const int*, const nx::DescList*, const nx::DescList*, const nx::StdString*, void** req, const nx::OptArgs*) __asm__(
    "_ZNK9nixlAgent13createXferReqERK14nixl_xfer_op_tRK12nixlDescListI13nixlBasicDescES7_RK"
    "NSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEERP12nixlXferReqHPK21nixlAgentOp"
    "tionalArgs");
int noop_create(const void*, const int*, const nx::DescList*, const nx::DescList*,
                const nx::StdString*, void** req, const nx::OptArgs*) {
  static unsigned next;
  *req = &g_requests[next++ % sizeof g_requests];
  return nx::kSuccess;
}

FR_NOOP int noop_post(const void*, void*, const nx::OptArgs*) __asm__(
    "_ZNK9nixlAgent11postXferReqEP12nixlXferReqHPK21nixlAgentOptionalArgs");
int noop_post(const void*, void*, const nx::OptArgs*) { return nx::kInProg; }

FR_NOOP int noop_status(const void*,
                        void*) __asm__("_ZNK9nixlAgent13getXferStatusEP12nixlXferReqH");
int noop_status(const void*, void*) { return nx::kSuccess; }

FR_NOOP int noop_release(const void*,
                         void*) __asm__("_ZNK9nixlAgent14releaseXferReqEP12nixlXferReqH");
int noop_release(const void*, void*) { return nx::kSuccess; }
