// Names of the format's enumerations, generated from the X-macro lists of flight_log.h so the
// strings readers print can never drift from the numbers writers store.
#include <cstdio>

#include "log/reader.h"

namespace fr::log {

namespace {

// Renders an unknown value into a per-thread buffer, so callers always get a printable name.
const char* unknown(const char* what, long long v) {
  thread_local char buf[40];
  std::snprintf(buf, sizeof buf, "%s(%lld)", what, v);
  return buf;
}

enum class OpKind { kNone, kColl, kP2p, kApi, kNixl };
constexpr OpKind kKindCOLL = OpKind::kColl;
constexpr OpKind kKindP2P = OpKind::kP2p;
constexpr OpKind kKindAPI = OpKind::kApi;
constexpr OpKind kKindNIXL = OpKind::kNixl;

OpKind op_kind(uint16_t op) {
  switch (op) {
#define FR_X(e, v, s, k) \
  case v: return kKind##k;
    FR_OP_LIST(FR_X)
#undef FR_X
  }
  return OpKind::kNone;
}

}  // namespace

const char* op_name(uint16_t op) {
  switch (op) {
#define FR_X(e, v, s, k) \
  case v: return s;
    FR_OP_LIST(FR_X)
#undef FR_X
  }
  return unknown("op", op);
}

bool op_is_collective(uint16_t op) { return op_kind(op) == OpKind::kColl; }
bool op_is_p2p(uint16_t op) { return op_kind(op) == OpKind::kP2p; }
bool op_is_nixl(uint16_t op) { return op_kind(op) == OpKind::kNixl; }

const char* xfer_state_name(uint32_t state) {
  switch (state) {
#define FR_X(e, v, s) \
  case v: return s;
    FR_XFER_STATE_LIST(FR_X)
#undef FR_X
  }
  return unknown("xfer_state", state);
}

const char* xfer_op_name(uint32_t op) {
  switch (op) {
#define FR_X(e, v, s) \
  case v: return s;
    FR_XFER_OP_LIST(FR_X)
#undef FR_X
  }
  return unknown("xfer_op", op);
}

// nixl_status_t as NIXL 1.5 names it (nixl_types.h).
const char* nixl_status_name(int32_t status) {
  switch (status) {
    case 1: return "NIXL_IN_PROG";
    case 0: return "NIXL_SUCCESS";
    case -1: return "NIXL_ERR_NOT_POSTED";
    case -2: return "NIXL_ERR_INVALID_PARAM";
    case -3: return "NIXL_ERR_BACKEND";
    case -4: return "NIXL_ERR_NOT_FOUND";
    case -5: return "NIXL_ERR_MISMATCH";
    case -6: return "NIXL_ERR_NOT_ALLOWED";
    case -7: return "NIXL_ERR_REPOST_ACTIVE";
    case -8: return "NIXL_ERR_UNKNOWN";
    case -9: return "NIXL_ERR_NOT_SUPPORTED";
    case -10: return "NIXL_ERR_REMOTE_DISCONNECT";
    case -11: return "NIXL_ERR_CANCELED";
    case -12: return "NIXL_ERR_NO_TELEMETRY";
  }
  return unknown("nixl_status", status);
}

const char* origin_name(uint32_t origin) {
  switch (origin) {
#define FR_X(e, v, s) \
  case v: return s;
    FR_ORIGIN_LIST(FR_X)
#undef FR_X
  }
  return unknown("origin", origin);
}

const char* comm_state_name(uint32_t state) {
  switch (state) {
#define FR_X(e, v, s) \
  case v: return s;
    FR_COMM_STATE_LIST(FR_X)
#undef FR_X
  }
  return unknown("state", state);
}

const char* gpu_state_name(uint32_t state) {
  switch (state) {
#define FR_X(e, v, s) \
  case v: return s;
    FR_GPU_STATE_LIST(FR_X)
#undef FR_X
  }
  return unknown("gpu", state);
}

const char* chan_kind_name(uint32_t kind) {
  switch (kind) {
#define FR_X(e, v, s) \
  case v: return s;
    FR_CHAN_KIND_LIST(FR_X)
#undef FR_X
  }
  return unknown("kind", kind);
}

const char* chan_state_name(uint32_t state) {
  switch (state) {
#define FR_X(e, v, s) \
  case v: return s;
    FR_CHAN_STATE_LIST(FR_X)
#undef FR_X
  }
  return unknown("state", state);
}

// ncclDataType_t values (nccl.h); kept as numbers so the reader needs no CUDA headers.
const char* dtype_name(int dtype) {
  static const char* const kNames[] = {"int8",    "uint8",    "int32",      "uint32",
                                       "int64",   "uint64",   "float16",    "float32",
                                       "float64", "bfloat16", "float8e4m3", "float8e5m2"};
  if (dtype >= 0 && dtype < static_cast<int>(sizeof kNames / sizeof kNames[0]))
    return kNames[dtype];
  return unknown("dtype", dtype);
}

// ncclRedOp_t: five built-in values; larger ones are user ops made by ncclRedOpCreatePreMulSum.
const char* redop_name(int redop) {
  static const char* const kNames[] = {"sum", "prod", "max", "min", "avg"};
  if (redop < 0) return "not recorded";  // a PyTorch dump does not record the reduction
  if (redop < 5) return kNames[redop];
  return unknown("premulsum", redop);
}

}  // namespace fr::log
