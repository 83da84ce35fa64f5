// What the agent writes to the flight log for every collective and point-to-point function of the
// NCCL API list (proto/fr/nccl_api.def), read back from the log and checked against the call: op,
// count, datatype, reduction, root or peer, stream, buffers and communicator. The calls are
// generated from the rows, so a new row is covered by this test as soon as it is added. The agent
// runs in-process ahead of the NCCL double, which answers every call with success.
//
// This reads the result, not the call: a wrapper that forwards the right arguments but writes the
// wrong op (ncclReduceScatter recorded as an AllGather) or the wrong count fails here, where the
// forwarding test (record_test.cpp) passes.
#include <string.h>

#include <catch2/catch.hpp>
#include <map>
#include <string>
#include <string_view>
#include <type_traits>

#include "fr/nccl_api.h"
#include "nccl_double.h"
#include "test_util.h"

using fr::agent_test::TempDir;

namespace {

// The log directory must be set before the first NCCL call of the process: at static init.
TempDir& log_dir() { return fr::agent_test::in_process_log_dir("4096"); }
const bool g_env_ready = !log_dir().path().empty();

// The arguments of one generated call, by parameter name, widened as the log widens them.
struct Call {
  ncclComm_t comm = nullptr;
  int row = 0;  // varies the values from row to row, so that no two calls look alike
  ncclWaitSignalDesc_t desc{};
  std::map<std::string, int64_t> value;
};

// A distinct, plausible value for a parameter of type T called `name` (the rank is 1 of 4).
template <class T>
T arg(Call& c, const char* name) {
  const std::string_view n = name;
  using U = std::remove_cv_t<T>;
  if constexpr (std::is_same_v<U, ncclComm_t>) {
    return c.comm;
  } else if constexpr (std::is_same_v<U, ncclWaitSignalDesc_t*>) {
    c.desc.opCnt = 3 + c.row % 4;
    c.desc.peer = 2;
    c.desc.sigIdx = 5;
    c.desc.ctx = 1;
    c.value["desc.opCnt"] = c.desc.opCnt;
    c.value["desc.peer"] = c.desc.peer;
    return &c.desc;
  } else if constexpr (std::is_same_v<U, ncclDataType_t>) {
    const ncclDataType_t types[] = {ncclInt8,    ncclUint8,   ncclInt32,   ncclUint32,
                                    ncclInt64,   ncclUint64,  ncclFloat16, ncclFloat32,
                                    ncclFloat64, ncclBfloat16};
    const ncclDataType_t t = types[(c.row * 3 + 1) % 10];
    c.value[name] = t;
    return t;
  } else if constexpr (std::is_same_v<U, ncclRedOp_t>) {
    const ncclRedOp_t ops[] = {ncclProd, ncclMax, ncclMin, ncclAvg};
    const ncclRedOp_t o = ops[c.row % 4];
    c.value[name] = o;
    return o;
  } else if constexpr (std::is_pointer_v<U> &&
                       std::is_same_v<std::remove_cv_t<std::remove_pointer_t<U>>,
                                      ncclCollConfig_t>) {
    return nullptr;  // forwarded only
  } else if constexpr (std::is_pointer_v<U>) {
    // Buffers, streams, windows: addresses that are never dereferenced (the double does not).
    const int64_t v = 0x100000 * (c.row + 1) + 0x1000 * (int64_t)(n.size() % 13) + n[0];
    c.value[name] = v;
    return (T)(uintptr_t)v;
  } else if constexpr (std::is_integral_v<U>) {
    int64_t v = 1000 * (c.row + 1) + (int64_t)n.size();  // counts, offsets
    if (n == "root" || n == "peer") v = c.row % 2 == 0 ? 2 : 3;
    if (n == "nDesc") v = 1;
    if (n == "sigIdx") v = 6;
    if (n == "ctx") v = 1;
    if (n == "flags") v = 0;
    c.value[name] = v;
    return (T)v;
  } else {
    return T{};
  }
}

// The argument named `name` of the call, when the row has one.
bool has(const Call& c, const char* name) { return c.value.count(name) != 0; }
int64_t v(const Call& c, const char* name) { return c.value.at(name); }

fr::log::LogFile read_own_log() { return fr::agent_test::read_in_process_log(log_dir()); }

// The newest record on the communicator.
fr_record newest_on(uint64_t comm_id) {
  auto log = read_own_log();
  const fr_record* found = nullptr;
  for (const auto& r : log.records)
    if (r.raw.comm_id == comm_id) found = &r.raw;
  REQUIRE(found != nullptr);
  return *found;
}

// The record of one call against the call's row and arguments.
void check_record(const fr::NcclFn& f, const Call& c, const fr_record& r) {
  INFO(f.name << " (row " << c.row << ")");
  CHECK(r.op == f.op);
  CHECK(r.result == ncclSuccess);
  CHECK(r.stream == (uint64_t)v(c, "stream"));
  // The element count: the row's count, sendcount or recvcount; WaitSignal: the signals awaited.
  for (const char* count : {"count", "sendcount", "recvcount"})
    if (has(c, count)) CHECK(r.count == (uint64_t)v(c, count));
  if (has(c, "desc.opCnt")) CHECK(r.count == (uint64_t)v(c, "desc.opCnt"));
  if (has(c, "datatype")) CHECK(r.dtype == v(c, "datatype"));
  // The reduction of reducing ops; none elsewhere.
  if (f.reducing)
    CHECK(r.redop == v(c, "op"));
  else
    CHECK(r.redop == -1);
  // The root of rooted ops, the peer of point-to-point ones; none for the others.
  if (f.rooted)
    CHECK(r.peer == v(c, "root"));
  else if (has(c, "peer"))
    CHECK(r.peer == v(c, "peer"));
  else if (has(c, "desc.peer"))
    CHECK(r.peer == v(c, "desc.peer"));
  else
    CHECK(r.peer == -1);
  for (const char* send : {"sendbuff", "localbuff", "buff"})
    if (has(c, send)) CHECK(r.sendbuff == (uint64_t)v(c, send));
  if (has(c, "recvbuff")) CHECK(r.recvbuff == (uint64_t)v(c, "recvbuff"));
}

// Calls `f`; true when it returned ncclSuccess (rows that return anything else are queries, never
// called here, but their calls are compiled all the same).
template <class F>
bool succeeds(F f) {
  if constexpr (std::is_same_v<decltype(f()), ncclResult_t>)
    return f() == ncclSuccess;
  else
    return false;
}

bool data_kind(const char* kind) {
  return std::string_view(kind) == "COLL" || std::string_view(kind) == "P2P";
}

}  // namespace

#define FR_ARG_(type, name) arg<type>(call, #name)

TEST_CASE("every collective and p2p function of the list is recorded with the call's fields",
          "[agent]") {
  REQUIRE(g_env_ready);
  ncclUniqueId id;
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  ncclComm_t comm = nullptr;
  REQUIRE(ncclCommInitRank(&comm, 4, id, 1) == ncclSuccess);
  uint64_t comm_id = 0;
  for (const auto& e : read_own_log().comms)
    if (e.handle == (uint64_t)(uintptr_t)comm) comm_id = e.id;
  REQUIRE(comm_id != 0);

  int row = 0, checked = 0;
  std::map<uint16_t, int> seen_ops;
#define FR_NCCL_FN(base, ret_, op_, kind_, rooted_, reducing_, torch_, since_, emu_, ...) \
  {                                                                                       \
    const fr::NcclFn& f = fr::kNcclApi[row];                                              \
    REQUIRE(std::string_view(f.name) == "nccl" #base);                                    \
    if (data_kind(f.kind)) {                                                              \
      Call call;                                                                          \
      call.comm = comm;                                                                   \
      call.row = row;                                                                     \
      REQUIRE(succeeds([&] { return nccl##base(FR_NCCL_MAP(FR_ARG_, __VA_ARGS__)); }));   \
      check_record(f, call, newest_on(comm_id));                                          \
      ++seen_ops[f.op];                                                                   \
      ++checked;                                                                          \
    }                                                                                     \
    ++row;                                                                                \
  }
#include "fr/nccl_api.def"

  // Every COLL and P2P row was called (the list is not empty of them by accident).
  int data_rows = 0;
  for (const fr::NcclFn& f : fr::kNcclApi) data_rows += data_kind(f.kind) ? 1 : 0;
  CHECK(checked == data_rows);
  CHECK(checked >= 20);
  CHECK(seen_ops.count(FR_OP_REDUCESCATTER) == 1);
  CHECK(seen_ops.count(FR_OP_ALLGATHER) == 1);
}

TEST_CASE("ops that share a count name record their own op code, not a neighbour's", "[agent]") {
  // ReduceScatter and AllGather take the same arguments but for the reduction: a wrapper writing
  // one's op for the other would make a real ReduceScatter/AllGather mismatch read as agreement.
  REQUIRE(g_env_ready);
  ncclUniqueId id;
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  ncclComm_t comm = nullptr;
  REQUIRE(ncclCommInitRank(&comm, 2, id, 0) == ncclSuccess);
  static float buf[8];
  REQUIRE(ncclReduceScatter(buf, buf, 4, ncclFloat32, ncclSum, comm, nullptr) == ncclSuccess);
  REQUIRE(ncclAllGather(buf, buf, 4, ncclFloat32, comm, nullptr) == ncclSuccess);
  const auto log = read_own_log();
  auto rs = fr::agent_test::records_of(log, FR_OP_REDUCESCATTER);
  auto ag = fr::agent_test::records_of(log, FR_OP_ALLGATHER);
  REQUIRE(!rs.empty());
  REQUIRE(!ag.empty());
  CHECK(rs.back().comm_id == ag.back().comm_id);
  CHECK(rs.back().seq + 1 == ag.back().seq);
  CHECK(rs.back().redop == ncclSum);
  CHECK(ag.back().redop == -1);
}
