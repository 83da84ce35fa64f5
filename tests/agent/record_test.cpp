// In-process tests of the agent, linked ahead of the NCCL double: every wrapper forwards its exact
// arguments and result, and the flight log holds what DESIGN.md says (ids that members agree on,
// sequence numbers, groups, nonblocking launches, lifecycle states, many threads).
#include <algorithm>
#include <catch2/catch.hpp>
#include <set>
#include <thread>
#include <vector>

#include "nccl_double.h"
#include "test_util.h"

using fr::agent_test::records_of;
using fr::agent_test::TempDir;

namespace {

// The log directory must be set before the first NCCL call of the process: at static init.
TempDir& log_dir() { return fr::agent_test::in_process_log_dir("16384"); }
const bool g_env_ready = !log_dir().path().empty();

// All entries, also those sharing an id.
fr::log::LogFile read_own_log() { return fr::agent_test::read_in_process_log(log_dir(), true); }

template <class T>
uint64_t A(T v) {
  if constexpr (std::is_pointer_v<T>)
    return (uint64_t)(uintptr_t)v;
  else
    return (uint64_t)(int64_t)v;
}

template <class... T>
std::vector<uint64_t> W(T... v) {
  return {A(v)...};
}

uint64_t uid_word(const ncclUniqueId& id) {
  uint64_t w;
  memcpy(&w, id.internal, sizeof w);
  return w;
}

cudaStream_t S(uint64_t v) { return (cudaStream_t)(uintptr_t)v; }

// Calls `call` with the double told to return `result`; checks the result came back untouched and
// the double saw exactly `want` as the arguments of `name`.
#define FORWARDS(result, name, call, ...)            \
  do {                                               \
    INFO(name);                                      \
    fr_double_forget();                              \
    fr_double_next_result(result);                   \
    auto rc_ = (call);                               \
    CHECK((int)rc_ == (result));                     \
    const fr_double_call* c_ = fr_double_find(name); \
    REQUIRE(c_ != nullptr);                          \
    std::vector<uint64_t> want_ = W(__VA_ARGS__);    \
    REQUIRE(c_->nargs == (int)want_.size());         \
    for (size_t i_ = 0; i_ < want_.size(); ++i_) {   \
      INFO("argument " << i_);                       \
      CHECK(c_->args[i_] == want_[i_]);              \
    }                                                \
  } while (0)

const fr_comm_entry* entry_for(const fr::log::LogFile& log, ncclComm_t comm) {
  const fr_comm_entry* found = nullptr;
  for (const auto& e : log.comms)
    if (e.handle == (uint64_t)(uintptr_t)comm) found = &e;  // the newest one for a reused handle
  return found;
}

ncclComm_t make_comm(int nranks, int rank, ncclUniqueId* out_id = nullptr) {
  ncclUniqueId id;
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  ncclComm_t c = nullptr;
  REQUIRE(ncclCommInitRank(&c, nranks, id, rank) == ncclSuccess);
  REQUIRE(c != nullptr);
  if (out_id) *out_id = id;
  return c;
}

std::vector<fr_record> on_comm(const fr::log::LogFile& log, uint64_t comm_id, fr_op op) {
  std::vector<fr_record> out;
  for (const auto& r : log.records)
    if (r.raw.comm_id == comm_id && r.raw.op == op) out.push_back(r.raw);
  return out;
}

}  // namespace

TEST_CASE("every wrapper forwards its exact arguments and result", "[agent]") {
  REQUIRE(g_env_ready);
  int v = 0;
  FORWARDS(3, "ncclGetVersion", ncclGetVersion(&v), A(&v));
  ncclUniqueId id;
  FORWARDS(0, "ncclGetUniqueId", ncclGetUniqueId(&id), A(&id));
  ncclComm_t c = nullptr;
  FORWARDS(0, "ncclCommInitRank", ncclCommInitRank(&c, 4, id, 1), A(&c), 4, uid_word(id), 1);
  REQUIRE(c != nullptr);
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  ncclComm_t c2 = nullptr;
  FORWARDS(5, "ncclCommInitRankConfig", ncclCommInitRankConfig(&c2, 4, id, 2, &cfg), A(&c2), 4,
           uid_word(id), 2, A(&cfg));
  ncclComm_t c3 = nullptr;
  FORWARDS(0, "ncclCommInitRankScalable", ncclCommInitRankScalable(&c3, 8, 3, 1, &id, nullptr),
           A(&c3), 8, 3, 1, A(&id), A((void*)nullptr));
  ncclComm_t all[2] = {};
  int devs[2] = {4, 5};
  FORWARDS(0, "ncclCommInitAll", ncclCommInitAll(all, 2, devs), A(all), 2, A(devs));
  ncclComm_t sub = nullptr;
  FORWARDS(6, "ncclCommSplit", ncclCommSplit(c, 1, 7, &sub, nullptr), A(c), 1, 7, A(&sub),
           A((void*)nullptr));
  int excl[1] = {2};
  FORWARDS(0, "ncclCommShrink", ncclCommShrink(c, excl, 1, &sub, &cfg, 1), A(c), A(excl), 1,
           A(&sub), A(&cfg), 1);
  ncclComm_t grown = nullptr;
  FORWARDS(2, "ncclCommGrow", ncclCommGrow(c, 6, nullptr, -1, &grown, nullptr), A(c), 6,
           A((void*)nullptr), -1, A(&grown), A((void*)nullptr));
  ncclUniqueId id2;
  FORWARDS(1, "ncclCommGetUniqueId", ncclCommGetUniqueId(c, &id2), A(c), A(&id2));
  FORWARDS(4, "ncclCommFinalize", ncclCommFinalize(c3), A(c3));
  FORWARDS(0, "ncclCommDestroy", ncclCommDestroy(c3), A(c3));
  FORWARDS(3, "ncclCommAbort", ncclCommAbort(all[1]), A(all[1]));
  FORWARDS(7, "ncclCommRevoke", ncclCommRevoke(c, 0), A(c), 0);
  FORWARDS(5, "ncclCommSuspend", ncclCommSuspend(c, 1), A(c), 1);
  FORWARDS(0, "ncclCommResume", ncclCommResume(c), A(c));
  ncclResult_t err = ncclSuccess;
  FORWARDS(6, "ncclCommGetAsyncError", ncclCommGetAsyncError(c, &err), A(c), A(&err));
  int n = 0;
  FORWARDS(2, "ncclCommCount", ncclCommCount(c, &n), A(c), A(&n));
  FORWARDS(3, "ncclCommCuDevice", ncclCommCuDevice(c, &n), A(c), A(&n));
  FORWARDS(1, "ncclCommUserRank", ncclCommUserRank(c, &n), A(c), A(&n));
  static float buf[64], out[64];
  void* handle = nullptr;
  FORWARDS(4, "ncclCommRegister", ncclCommRegister(c, buf, sizeof buf, &handle), A(c), A(buf),
           sizeof buf, A(&handle));
  FORWARDS(0, "ncclCommDeregister", ncclCommDeregister(c, (void*)0x77), A(c), 0x77);
  ncclWindow_t win = nullptr;
  FORWARDS(5, "ncclCommWindowRegister", ncclCommWindowRegister(c, buf, 64, &win, 1), A(c), A(buf),
           64, A(&win), 1);
  FORWARDS(6, "ncclCommWindowDeregister", ncclCommWindowDeregister(c, (ncclWindow_t)0x55), A(c),
           0x55);
  void* mem = nullptr;
  FORWARDS(7, "ncclMemAlloc", ncclMemAlloc(&mem, 256), A(&mem), 256);
  FORWARDS(1, "ncclMemFree", ncclMemFree((void*)0x99), 0x99);
  ncclRedOp_t op;
  float scalar = 2;
  FORWARDS(2, "ncclRedOpCreatePreMulSum",
           ncclRedOpCreatePreMulSum(&op, &scalar, ncclFloat32, ncclScalarHostImmediate, c), A(&op),
           A(&scalar), (uint64_t)ncclFloat32, (uint64_t)ncclScalarHostImmediate, A(c));
  FORWARDS(3, "ncclRedOpDestroy", ncclRedOpDestroy((ncclRedOp_t)9, c), 9, A(c));
  FORWARDS(7, "ncclReduce", ncclReduce(buf, out, 10, ncclFloat32, ncclMax, 1, c, S(0x10)), A(buf),
           A(out), 10, (uint64_t)ncclFloat32, (uint64_t)ncclMax, 1, A(c), 0x10);
  FORWARDS(5, "ncclBcast", ncclBcast(buf, 11, ncclInt32, 1, c, S(0x11)), A(buf), 11,
           (uint64_t)ncclInt32, 1, A(c), 0x11);
  FORWARDS(6, "ncclBroadcast", ncclBroadcast(buf, out, 12, ncclFloat16, 0, c, S(0x12)), A(buf),
           A(out), 12, (uint64_t)ncclFloat16, 0, A(c), 0x12);
  FORWARDS(4, "ncclAllReduce", ncclAllReduce(buf, out, 13, ncclBfloat16, ncclAvg, c, S(0x13)),
           A(buf), A(out), 13, (uint64_t)ncclBfloat16, (uint64_t)ncclAvg, A(c), 0x13);
  FORWARDS(1, "ncclReduceScatter", ncclReduceScatter(buf, out, 14, ncclInt64, ncclProd, c, S(0x14)),
           A(buf), A(out), 14, (uint64_t)ncclInt64, (uint64_t)ncclProd, A(c), 0x14);
  FORWARDS(2, "ncclAllGather", ncclAllGather(buf, out, 15, ncclUint8, c, S(0x15)), A(buf), A(out),
           15, (uint64_t)ncclUint8, A(c), 0x15);
  FORWARDS(3, "ncclAlltoAll", ncclAlltoAll(buf, out, 16, ncclFloat64, c, S(0x16)), A(buf), A(out),
           16, (uint64_t)ncclFloat64, A(c), 0x16);
  FORWARDS(4, "ncclGather", ncclGather(buf, out, 17, ncclInt8, 2, c, S(0x17)), A(buf), A(out), 17,
           (uint64_t)ncclInt8, 2, A(c), 0x17);
  FORWARDS(5, "ncclScatter", ncclScatter(buf, out, 18, ncclUint32, 3, c, S(0x18)), A(buf), A(out),
           18, (uint64_t)ncclUint32, 3, A(c), 0x18);
  FORWARDS(6, "ncclSend", ncclSend(buf, 19, ncclUint64, 1, c, S(0x19)), A(buf), 19,
           (uint64_t)ncclUint64, 1, A(c), 0x19);
  FORWARDS(7, "ncclRecv", ncclRecv(out, 20, ncclFloat8e4m3, 2, c, S(0x1a)), A(out), 20,
           (uint64_t)ncclFloat8e4m3, 2, A(c), 0x1a);
  // NCCL 2.30+: the per-call-config collectives, signals, device communicators, queries.
  ncclCollConfig_t* ccfg = (ncclCollConfig_t*)0x7c;
  FORWARDS(2, "ncclAllReduceConfig",
           ncclAllReduceConfig(buf, out, 21, ncclFloat32, ncclSum, c, S(0x21), ccfg), A(buf),
           A(out), 21, (uint64_t)ncclFloat32, (uint64_t)ncclSum, A(c), 0x21, 0x7c);
  FORWARDS(3, "ncclBroadcastConfig",
           ncclBroadcastConfig(buf, out, 22, ncclInt8, 1, c, S(0x22), ccfg), A(buf), A(out), 22,
           (uint64_t)ncclInt8, 1, A(c), 0x22, 0x7c);
  FORWARDS(4, "ncclReduceConfig",
           ncclReduceConfig(buf, out, 23, ncclInt32, ncclMin, 2, c, S(0x23), ccfg), A(buf), A(out),
           23, (uint64_t)ncclInt32, (uint64_t)ncclMin, 2, A(c), 0x23, 0x7c);
  FORWARDS(5, "ncclAllGatherConfig", ncclAllGatherConfig(buf, out, 24, ncclUint8, c, S(0x24), ccfg),
           A(buf), A(out), 24, (uint64_t)ncclUint8, A(c), 0x24, 0x7c);
  FORWARDS(6, "ncclReduceScatterConfig",
           ncclReduceScatterConfig(buf, out, 25, ncclInt64, ncclProd, c, S(0x25), ccfg), A(buf),
           A(out), 25, (uint64_t)ncclInt64, (uint64_t)ncclProd, A(c), 0x25, 0x7c);
  FORWARDS(7, "ncclAlltoAllConfig", ncclAlltoAllConfig(buf, out, 26, ncclFloat64, c, S(0x26), ccfg),
           A(buf), A(out), 26, (uint64_t)ncclFloat64, A(c), 0x26, 0x7c);
  FORWARDS(1, "ncclGatherConfig", ncclGatherConfig(buf, out, 27, ncclInt8, 3, c, S(0x27), ccfg),
           A(buf), A(out), 27, (uint64_t)ncclInt8, 3, A(c), 0x27, 0x7c);
  FORWARDS(2, "ncclScatterConfig", ncclScatterConfig(buf, out, 28, ncclUint32, 0, c, S(0x28), ccfg),
           A(buf), A(out), 28, (uint64_t)ncclUint32, 0, A(c), 0x28, 0x7c);
  FORWARDS(3, "ncclPutSignal",
           ncclPutSignal(buf, 29, ncclFloat32, 2, (ncclWindow_t)0x55, 64, 3, 1, 0, c, S(0x29)),
           A(buf), 29, (uint64_t)ncclFloat32, 2, 0x55, 64, 3, 1, 0, A(c), 0x29);
  FORWARDS(4, "ncclSignal", ncclSignal(3, 5, 2, 0, c, S(0x2a)), 3, 5, 2, 0, A(c), 0x2a);
  ncclWaitSignalDesc_t descs[2] = {{2, 1, 3, 0}, {1, 3, 4, 2}};
  FORWARDS(5, "ncclWaitSignal", ncclWaitSignal(2, descs, c, S(0x2b)), 2, A(descs), A(c), 0x2b);
  FORWARDS(6, "ncclDevCommCreate",
           ncclDevCommCreate(c, (const ncclDevCommRequirements*)0x61, (ncclDevComm*)0x62), A(c),
           0x61, 0x62);
  FORWARDS(7, "ncclDevCommDestroy", ncclDevCommDestroy(c, (const ncclDevComm*)0x62), A(c), 0x62);
  FORWARDS(1, "ncclCommQueryProperties", ncclCommQueryProperties(c, (ncclCommProperties*)0x63),
           A(c), 0x63);
  uint64_t stat = 0;
  FORWARDS(2, "ncclCommMemStats", ncclCommMemStats(c, (ncclCommMemStat_t)3, &stat), A(c), 3,
           A(&stat));
  void* user = nullptr;
  FORWARDS(3, "ncclWinGetUserPtr", ncclWinGetUserPtr(c, (ncclWindow_t)0x55, &user), A(c), 0x55,
           A(&user));
  FORWARDS(0, "ncclGroupStart", ncclGroupStart());
  FORWARDS(2, "ncclGroupEnd", ncclGroupEnd());
  REQUIRE(ncclGroupStart() == ncclSuccess);
  ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
  FORWARDS(3, "ncclGroupSimulateEnd", ncclGroupSimulateEnd(&sim), A(&sim));

  fr_double_forget();
  CHECK(std::string(ncclGetErrorString(ncclInvalidUsage)) == "double:usage");
  REQUIRE(fr_double_find("ncclGetErrorString") != nullptr);
  CHECK(fr_double_find("ncclGetErrorString")->args[0] == (uint64_t)ncclInvalidUsage);
  CHECK(std::string(ncclGetLastError(c)) == "double:last-error");
  CHECK(fr_double_find("ncclGetLastError")->args[0] == A(c));
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  ncclResetDebugInit();
#pragma GCC diagnostic pop
  CHECK(fr_double_find("ncclResetDebugInit") != nullptr);

  // Failed calls are in the log with their result; queries are not recorded.
  auto log = read_own_log();
  auto inits = records_of(log, FR_OP_COMM_INIT_RANK_CONFIG);
  REQUIRE(inits.size() == 1);
  CHECK(inits[0].result == 5);
  CHECK((inits[0].flags & FR_REC_F_IN_CALL) == 0);
  bool failed_entry = false;
  for (const auto& e : log.comms)
    if (e.id == inits[0].comm_id && e.state == FR_COMM_FAILED) failed_entry = true;
  CHECK(failed_entry);
  auto ars = records_of(log, FR_OP_ALLREDUCE);
  REQUIRE(ars.size() >= 2);
  // ncclAllReduceConfig is the last AllReduce record: the same op, flagged.
  const fr_record& ar = ars[ars.size() - 2];
  CHECK(ar.result == 4);
  CHECK((ar.flags & FR_REC_F_NEVER_LAUNCHED) != 0);
  CHECK((ar.flags & FR_REC_F_COLL_CONFIG) == 0);
  CHECK(ar.count == 13);
  CHECK(ar.dtype == ncclBfloat16);
  CHECK(ar.redop == ncclAvg);
  CHECK(ar.stream == 0x13);
  CHECK(ar.sendbuff == A(buf));
  CHECK(ar.recvbuff == A(out));
  CHECK((ars.back().flags & FR_REC_F_COLL_CONFIG) != 0);
  CHECK(ars.back().count == 21);
  CHECK(ars.back().seq == ar.seq + 6);  // five other collectives come between them
  CHECK(log.header.nccl_version == 22809);
  CHECK(log.header.pid == getpid());
  // ncclCommInitAll: one communicator, one entry per rank in this process, sharing the id.
  const fr_comm_entry* a0 = entry_for(log, all[0]);
  const fr_comm_entry* a1 = entry_for(log, all[1]);
  REQUIRE(a0);
  REQUIRE(a1);
  CHECK(a0->id == a1->id);
  CHECK(a0->origin == FR_ORIGIN_INIT_ALL);
  CHECK(a0->rank == 0);
  CHECK(a1->rank == 1);
  CHECK(a0->cuda_dev == 4);
  CHECK(a1->cuda_dev == 5);
  CHECK(a1->state == FR_COMM_LIVE);  // its abort failed
}

TEST_CASE("signals are one-sided p2p records and *Config collectives count as plain ones",
          "[agent]") {
  ncclComm_t c = make_comm(4, 1);
  static float buf[8];
  REQUIRE(ncclAllReduce(buf, buf, 8, ncclFloat32, ncclSum, c, S(0x31)) == ncclSuccess);
  REQUIRE(ncclAllReduceConfig(buf, buf, 8, ncclFloat32, ncclSum, c, S(0x31), nullptr) ==
          ncclSuccess);
  REQUIRE(ncclBroadcastConfig(buf, buf, 8, ncclFloat32, 0, c, S(0x31), nullptr) == ncclSuccess);
  REQUIRE(ncclSend(buf, 8, ncclFloat32, 2, c, S(0x31)) == ncclSuccess);
  REQUIRE(ncclPutSignal(buf, 8, ncclFloat32, 2, (ncclWindow_t)0x55, 0, 3, 1, 0, c, S(0x32)) ==
          ncclSuccess);
  REQUIRE(ncclSignal(0, 4, 0, 0, c, S(0x32)) == ncclSuccess);
  ncclWaitSignalDesc_t descs[2] = {{2, 2, 3, 1}, {1, 0, 4, 0}};
  REQUIRE(ncclWaitSignal(2, descs, c, S(0x33)) == ncclSuccess);
  REQUIRE(ncclDevCommCreate(c, nullptr, (ncclDevComm*)0x62) == ncclSuccess);
  REQUIRE(ncclDevCommDestroy(c, (const ncclDevComm*)0x62) == ncclSuccess);

  auto log = read_own_log();
  const fr_comm_entry* e = entry_for(log, c);
  REQUIRE(e);
  auto ars = on_comm(log, e->id, FR_OP_ALLREDUCE);
  REQUIRE(ars.size() == 2);
  CHECK(ars[0].seq + 1 == ars[1].seq);
  CHECK((ars[0].flags & FR_REC_F_COLL_CONFIG) == 0);
  CHECK((ars[1].flags & FR_REC_F_COLL_CONFIG) != 0);
  auto bcs = on_comm(log, e->id, FR_OP_BROADCAST);
  REQUIRE(bcs.size() == 1);
  CHECK(bcs[0].seq == ars[1].seq + 1);
  CHECK(bcs[0].peer == 0);
  CHECK(e->coll_seq == bcs[0].seq);

  auto sends = on_comm(log, e->id, FR_OP_SEND);
  auto puts = on_comm(log, e->id, FR_OP_PUT_SIGNAL);
  auto sigs = on_comm(log, e->id, FR_OP_SIGNAL);
  auto waits = on_comm(log, e->id, FR_OP_WAIT_SIGNAL);
  REQUIRE(sends.size() == 1);
  REQUIRE(puts.size() == 1);
  REQUIRE(sigs.size() == 1);
  REQUIRE(waits.size() == 2);  // one per descriptor
  CHECK(puts[0].seq == sends[0].seq + 1);
  CHECK(puts[0].peer == 2);
  CHECK(puts[0].count == 8);
  CHECK(puts[0].stream == 0x32);
  CHECK(puts[0].recvbuff == 0x55);
  CHECK(FR_SIGNAL_AUX_SIG_IDX(puts[0].aux) == 3);
  CHECK(FR_SIGNAL_AUX_CTX(puts[0].aux) == 1);
  CHECK(sigs[0].peer == 0);
  CHECK(FR_SIGNAL_AUX_SIG_IDX(sigs[0].aux) == 4);
  CHECK(waits[0].peer == 2);
  CHECK(waits[0].count == 2);
  CHECK(FR_SIGNAL_AUX_SIG_IDX(waits[0].aux) == 3);
  CHECK(FR_SIGNAL_AUX_CTX(waits[0].aux) == 1);
  CHECK(waits[1].peer == 0);
  CHECK(waits[1].count == 1);
  CHECK(waits[1].stream == 0x33);
  CHECK(waits[1].seq == waits[0].seq + 1);
  CHECK(e->p2p_seq == waits[1].seq);
  for (const auto& w : waits) CHECK((w.flags & FR_REC_F_LAUNCHED) != 0);
  CHECK(on_comm(log, e->id, FR_OP_DEV_COMM_CREATE).size() == 1);
  CHECK(on_comm(log, e->id, FR_OP_DEV_COMM_DESTROY).size() == 1);
}

TEST_CASE("members of one communicator agree on its id", "[agent]") {
  ncclUniqueId id;
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  ncclComm_t r0 = nullptr, r1 = nullptr;  // two ranks of one communicator, one per "process"
  REQUIRE(ncclCommInitRank(&r0, 2, id, 0) == ncclSuccess);
  REQUIRE(ncclCommInitRank(&r1, 2, id, 1) == ncclSuccess);
  ncclComm_t s0 = nullptr, s1 = nullptr, s0b = nullptr, other = nullptr, none = (ncclComm_t)0x1;
  REQUIRE(ncclCommSplit(r0, 5, 0, &s0, nullptr) == ncclSuccess);
  REQUIRE(ncclCommSplit(r1, 5, 1, &s1, nullptr) == ncclSuccess);
  REQUIRE(ncclCommSplit(r0, 5, 0, &s0b, nullptr) == ncclSuccess);    // second split of r0
  REQUIRE(ncclCommSplit(r1, 6, 0, &other, nullptr) == ncclSuccess);  // r1's second, other color
  REQUIRE(ncclCommSplit(r0, NCCL_SPLIT_NOCOLOR, 0, &none, nullptr) == ncclSuccess);
  CHECK(none == nullptr);
  int ex_a[2] = {3, 1}, ex_b[2] = {1, 3};
  ncclComm_t k0 = nullptr, k1 = nullptr;
  REQUIRE(ncclCommShrink(r0, ex_a, 2, &k0, nullptr, 0) == ncclSuccess);
  REQUIRE(ncclCommShrink(r1, ex_b, 2, &k1, nullptr, 0) == ncclSuccess);

  auto log = read_own_log();
  const fr_comm_entry* e0 = entry_for(log, r0);
  const fr_comm_entry* e1 = entry_for(log, r1);
  REQUIRE(e0);
  REQUIRE(e1);
  CHECK(e0->id != 0);
  CHECK(e0->id == e1->id);
  CHECK(e0->rank == 0);
  CHECK(e1->rank == 1);
  CHECK(e0->size == 2);
  CHECK(e0->origin == FR_ORIGIN_INIT_RANK);
  CHECK((e0->flags & FR_COMM_F_ID_FROM_UNIQUE_ID) != 0);
  CHECK(e0->state == FR_COMM_LIVE);
  // The GetUniqueId record names the communicator the id will make.
  bool uid_named = false;
  for (const auto& r : records_of(log, FR_OP_GET_UNIQUE_ID)) uid_named |= r.comm_id == e0->id;
  CHECK(uid_named);

  const fr_comm_entry* es0 = entry_for(log, s0);
  const fr_comm_entry* es1 = entry_for(log, s1);
  const fr_comm_entry* es0b = entry_for(log, s0b);
  const fr_comm_entry* eo = entry_for(log, other);
  REQUIRE(es0);
  REQUIRE(es1);
  REQUIRE(es0b);
  REQUIRE(eo);
  CHECK(es0->id == es1->id);
  CHECK(es0->parent_id == e0->id);
  CHECK(es0->color == 5);
  CHECK(es0->derive_index == 1);
  CHECK(es0->origin == FR_ORIGIN_SPLIT);
  CHECK((es0->flags & FR_COMM_F_ID_DERIVED) != 0);
  CHECK(es0b->id != es0->id);  // the parent's second split is another communicator
  CHECK(eo->id != es0b->id);   // same counter, other color
  CHECK(eo->id != es0->id);
  const fr_comm_entry* ek0 = entry_for(log, k0);
  const fr_comm_entry* ek1 = entry_for(log, k1);
  REQUIRE(ek0);
  REQUIRE(ek1);
  CHECK(ek0->id == ek1->id);  // the exclusion list is a set
  CHECK(ek0->origin == FR_ORIGIN_SHRINK);
  CHECK(ek0->size == 0);  // the double shrinks 2 ranks by 2
  // The split records carry the new communicator's id; the no-color split has none.
  auto splits = on_comm(log, e0->id, FR_OP_COMM_SPLIT);
  REQUIRE(splits.size() >= 3);
  CHECK(splits[splits.size() - 1].aux == 0);
}

TEST_CASE("a shrink record carries the shrunk size and the excluded ranks", "[agent]") {
  ncclUniqueId id;
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  ncclComm_t c = nullptr, k = nullptr, big = nullptr;
  REQUIRE(ncclCommInitRank(&c, 4, id, 0) == ncclSuccess);
  int excl[3] = {3, 70, 3};  // a repeated rank counts once; 70 lands in the second word
  REQUIRE(ncclCommShrink(c, excl, 3, &k, nullptr, 0) == ncclSuccess);
  std::vector<int> many(5000, 1);  // too long to count: size unknown, the bitmap still set
  REQUIRE(ncclCommShrink(c, many.data(), static_cast<int>(many.size()), &big, nullptr, 0) ==
          ncclSuccess);

  auto log = read_own_log();
  const fr_comm_entry* e = entry_for(log, c);
  REQUIRE(e);
  auto shrinks = on_comm(log, e->id, FR_OP_COMM_SHRINK);
  REQUIRE(shrinks.size() == 2);
  CHECK(shrinks[0].count == 2);
  CHECK(shrinks[0].sendbuff == (1ull << 3));
  CHECK(shrinks[0].recvbuff == (1ull << 6));
  CHECK(shrinks[0].peer == -1);
  CHECK(shrinks[1].count == 0);
  CHECK(shrinks[1].sendbuff == (1ull << 1));
  CHECK(shrinks[1].recvbuff == 0);
  // Nothing from 128 on: no CommShrinkExcluded record.
  CHECK(on_comm(log, e->id, FR_OP_COMM_SHRINK_EXCLUDED).empty());
}

TEST_CASE("excluded ranks from 128 on follow the shrink record, one record per block of 128",
          "[agent]") {
  ncclUniqueId id;
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  ncclComm_t c = nullptr, k = nullptr;
  REQUIRE(ncclCommInitRank(&c, 4, id, 0) == ncclSuccess);
  int excl[6] = {1000, 3, 200, 130, -5, 200};  // any order, repeats, a negative rank ignored
  REQUIRE(ncclCommShrink(c, excl, 6, &k, nullptr, 0) == ncclSuccess);

  auto log = read_own_log();
  const fr_comm_entry* e = entry_for(log, c);
  REQUIRE(e);
  auto shrinks = on_comm(log, e->id, FR_OP_COMM_SHRINK);
  REQUIRE(shrinks.size() == 1);
  CHECK(shrinks[0].sendbuff == (1ull << 3));
  CHECK(shrinks[0].recvbuff == 0);
  auto blocks = on_comm(log, e->id, FR_OP_COMM_SHRINK_EXCLUDED);
  REQUIRE(blocks.size() == 2);
  // Ascending blocks, right after the shrink record, on the same parent and new communicator.
  CHECK(blocks[0].id == shrinks[0].id + 1);
  CHECK(blocks[1].id == shrinks[0].id + 2);
  for (const auto& b : blocks) {
    CHECK(b.aux == shrinks[0].aux);
    CHECK(b.result == ncclSuccess);
    CHECK((b.flags & FR_REC_F_IN_CALL) == 0);
    CHECK(b.seq == 0);
  }
  CHECK(blocks[0].peer == 128);
  CHECK(blocks[0].sendbuff == (1ull << 2));  // 130
  CHECK(blocks[0].recvbuff == (1ull << 8));  // 200 = 128 + 64 + 8
  CHECK(blocks[1].peer == 896);
  CHECK(blocks[1].sendbuff == 0);
  CHECK(blocks[1].recvbuff == (1ull << 40));  // 1000 = 896 + 64 + 40
}

TEST_CASE("scalable init and grow ids follow the identity rules", "[agent]") {
  ncclUniqueId ids[2];
  REQUIRE(ncclGetUniqueId(&ids[0]) == ncclSuccess);
  REQUIRE(ncclGetUniqueId(&ids[1]) == ncclSuccess);
  ncclComm_t a = nullptr, b = nullptr, single = nullptr, plain = nullptr;
  REQUIRE(ncclCommInitRankScalable(&a, 4, 0, 2, ids, nullptr) == ncclSuccess);
  REQUIRE(ncclCommInitRankScalable(&b, 4, 3, 2, ids, nullptr) == ncclSuccess);
  REQUIRE(ncclCommInitRankScalable(&single, 4, 1, 1, ids, nullptr) == ncclSuccess);
  REQUIRE(ncclCommInitRank(&plain, 4, ids[0], 2) == ncclSuccess);

  // Grow: a member of `a` and a joining rank (no parent) that got the coordinator's unique id.
  ncclUniqueId grow_id;
  REQUIRE(ncclCommGetUniqueId(a, &grow_id) == ncclSuccess);
  ncclComm_t grown = nullptr, joined = nullptr, grown2 = nullptr;
  REQUIRE(ncclCommGrow(a, 6, &grow_id, -1, &grown, nullptr) == ncclSuccess);
  REQUIRE(ncclCommGrow(nullptr, 6, &grow_id, 5, &joined, nullptr) == ncclSuccess);
  REQUIRE(ncclCommGrow(a, 8, nullptr, -1, &grown2, nullptr) == ncclSuccess);

  auto log = read_own_log();
  const fr_comm_entry *ea = entry_for(log, a), *eb = entry_for(log, b);
  const fr_comm_entry *es = entry_for(log, single), *ep = entry_for(log, plain);
  REQUIRE((ea && eb && es && ep));
  CHECK(ea->id == eb->id);  // every member hashes all the ids
  CHECK(ea->origin == FR_ORIGIN_INIT_RANK_SCALABLE);
  CHECK(es->id != ea->id);
  CHECK(es->id == ep->id);  // with one id, the same as a plain init with it
  const fr_comm_entry *eg = entry_for(log, grown), *ej = entry_for(log, joined);
  const fr_comm_entry* eg2 = entry_for(log, grown2);
  REQUIRE((eg && ej && eg2));
  CHECK(eg->origin == FR_ORIGIN_GROW);
  CHECK(eg->parent_id == ea->id);
  CHECK((eg->flags & FR_COMM_F_ID_DERIVED) != 0);
  CHECK(eg->derive_index == 1);
  CHECK(eg2->derive_index == 2);
  CHECK(eg2->id != eg->id);
  CHECK((ej->flags & FR_COMM_F_ID_FROM_UNIQUE_ID) != 0);
  CHECK(ej->parent_id == 0);
  // The CommGetUniqueId record names the id a joining rank will compute.
  auto gets = on_comm(log, ea->id, FR_OP_COMM_GET_UNIQUE_ID);
  REQUIRE(gets.size() == 1);
  CHECK(gets[0].aux == ej->id);
}

TEST_CASE("sequence numbers count collectives and p2p apart and nested calls are recorded once",
          "[agent]") {
  ncclComm_t c = make_comm(1, 0);
  static float b[4];
  for (int i = 0; i < 3; ++i) {
    REQUIRE(ncclAllReduce(b, b, 4, ncclFloat32, ncclSum, c, S(1)) == ncclSuccess);
    REQUIRE(ncclSend(b, 4, ncclFloat32, 0, c, S(1)) == ncclSuccess);
  }
  REQUIRE(ncclBcast(b, 4, ncclFloat32, 0, c, S(1)) == ncclSuccess);  // calls ncclBroadcast inside
  REQUIRE(ncclRecv(b, 4, ncclFloat32, 0, c, S(1)) == ncclSuccess);

  auto log = read_own_log();
  const fr_comm_entry* e = entry_for(log, c);
  REQUIRE(e);
  auto ar = on_comm(log, e->id, FR_OP_ALLREDUCE);
  auto sends = on_comm(log, e->id, FR_OP_SEND);
  auto bc = on_comm(log, e->id, FR_OP_BCAST);
  REQUIRE(ar.size() == 3);
  REQUIRE(sends.size() == 3);
  REQUIRE(bc.size() == 1);
  CHECK(on_comm(log, e->id, FR_OP_BROADCAST).empty());
  for (int i = 0; i < 3; ++i) {
    CHECK(ar[i].seq == (uint64_t)i + 1);
    CHECK(sends[i].seq == (uint64_t)i + 1);
    CHECK((ar[i].flags & FR_REC_F_LAUNCHED) != 0);
    CHECK((ar[i].flags & FR_REC_F_IN_CALL) == 0);
    CHECK(ar[i].result == 0);
    CHECK(ar[i].group_id == 0);
    CHECK(ar[i].tid != 0);
  }
  CHECK(bc[0].seq == 4);
  CHECK(on_comm(log, e->id, FR_OP_RECV).at(0).seq == 4);
  CHECK(e->coll_seq == 4);
  CHECK(e->p2p_seq == 4);
}

// An op takes the fast lane (wrappers.h) when its communicator is the one this thread called last,
// else the general path; both must write the same record, launched, failed or in a group.
TEST_CASE("the fast lane and the general path write the same records", "[agent]") {
  ncclComm_t c = make_comm(1, 0), other = make_comm(1, 0);
  static float b[4];
  auto pair = [&](auto call) {  // the first call after `other` misses the cache, the second hits
    REQUIRE(ncclAllGather(b, b, 1, ncclFloat32, other, S(1)) == ncclSuccess);
    call();
    call();
  };
  pair([&] { ncclAllReduce(b, b + 1, 4, ncclFloat32, ncclMax, c, S(7)); });
  pair([&] {
    fr_double_next_result(ncclInternalError);
    CHECK(ncclReduce(b, b, 3, ncclInt8, ncclSum, 0, c, S(8)) == ncclInternalError);
  });
  pair([&] {
    REQUIRE(ncclGroupStart() == ncclSuccess);
    ncclSend(b, 2, ncclFloat32, 0, c, S(9));
    REQUIRE(ncclGroupEnd() == ncclSuccess);
  });
  auto log = read_own_log();
  const fr_comm_entry* e = entry_for(log, c);
  REQUIRE(e);
  for (fr_op op : {FR_OP_ALLREDUCE, FR_OP_REDUCE, FR_OP_SEND}) {
    auto recs = on_comm(log, e->id, op);
    REQUIRE(recs.size() == 2);
    fr_record general = recs[0], fast = recs[1];
    INFO("op " << op << " flags " << general.flags << " / " << fast.flags);
    CHECK(fast.seq == general.seq + 1);
    CHECK(fast.call_ns >= general.call_ns);
    CHECK(general.result != FR_RESULT_PENDING);
    if (op == FR_OP_SEND) {  // a group each: queued, so neither path gives it a duration
      CHECK(general.group_id != 0);
      CHECK(fast.group_id == general.group_id + 1);
      CHECK(general.duration_ns == 0);
      CHECK(fast.duration_ns == 0);
    }
    for (fr_record* r : {&general, &fast})
      r->id = r->seq = r->call_ns = r->duration_ns = r->group_id = 0;
    general.lock = fast.lock = 0;
    CHECK(memcmp(&general, &fast, sizeof general) == 0);
  }
}

// A slot another writer still holds (the ring lapped it) loses the record that would take it:
// counted as overwritten, its sequence number consumed, and nothing written into the slot at
// entry or at exit. Here the slot is held from outside, through the file.
TEST_CASE("the fast lane leaves a busy slot alone and counts its record lost", "[agent]") {
  ncclComm_t c = make_comm(1, 0);
  static float b[4];
  for (int i = 0; i < 2; ++i)  // the cache filled, the fast lane taken from now on
    REQUIRE(ncclAllReduce(b, b, 1, ncclFloat32, ncclSum, c, S(3)) == ncclSuccess);
  auto logs = log_dir().logs();
  REQUIRE(logs.size() == 1);
  int fd = open(logs[0].c_str(), O_RDWR | O_CLOEXEC);
  REQUIRE(fd >= 0);
  struct stat st;
  REQUIRE(fstat(fd, &st) == 0);
  void* m = mmap(nullptr, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  REQUIRE(m != MAP_FAILED);
  auto* h = (fr_log_header*)m;
  const fr_log_section* row = fr_log_section_of(h, FR_SECTION_RING);
  REQUIRE(row != nullptr);
  auto* ring = (fr_record*)((uint8_t*)m + row->offset);
  const uint64_t next = __atomic_load_n(&h->record_counter, __ATOMIC_ACQUIRE);
  REQUIRE(next < row->capacity);  // so `overwritten` moves only by the lost record
  fr_record* slot = &ring[next % row->capacity];
  const uint64_t lock = __atomic_load_n(&slot->lock, __ATOMIC_ACQUIRE);
  REQUIRE(lock % 2 == 0);
  __atomic_store_n(&slot->lock, lock + 1, __ATOMIC_RELEASE);  // held by "another writer"
  fr_record before;
  memcpy(&before, slot, sizeof before);
  const uint64_t lost = h->overwritten;
  CHECK(ncclAllReduce(b, b, 2, ncclFloat32, ncclSum, c, S(3)) == ncclSuccess);
  CHECK(memcmp(&before, slot, sizeof before) == 0);
  CHECK(h->overwritten == lost + 1);
  __atomic_store_n(&slot->lock, lock, __ATOMIC_RELEASE);
  REQUIRE(ncclAllReduce(b, b, 3, ncclFloat32, ncclSum, c, S(3)) == ncclSuccess);
  munmap(m, (size_t)st.st_size);
  auto log = read_own_log();
  const fr_comm_entry* e = entry_for(log, c);
  REQUIRE(e);
  auto recs = on_comm(log, e->id, FR_OP_ALLREDUCE);
  REQUIRE(recs.size() == 3);  // the lost call is not there, and it consumed seq 3
  CHECK(recs[2].seq == 4);
  CHECK(recs[2].count == 3);
  CHECK(recs[2].result == ncclSuccess);
  CHECK(recs[2].gpu_state == FR_GPU_ENQUEUED);
}

TEST_CASE("a re-entrant call hands back its non-zero code unchanged", "[agent]") {
  ncclComm_t c = make_comm(1, 0);
  static float b[4];
  // The double's ncclBcast calls ncclBroadcast through the exported symbol: the agent's wrapper,
  // entered again under its guard, must forward the inner code, which ncclBcast then returns.
  for (int code : {(int)ncclUnhandledCudaError, (int)ncclRemoteError, (int)ncclInProgress}) {
    INFO("code " << code);
    fr_double_next_inner_result(code);
    CHECK((int)ncclBcast(b, 4, ncclFloat32, 0, c, S(1)) == code);
  }
  auto log = read_own_log();
  const fr_comm_entry* e = entry_for(log, c);
  REQUIRE(e);
  auto bc = on_comm(log, e->id, FR_OP_BCAST);
  REQUIRE(bc.size() == 3);
  CHECK(bc[0].result == ncclUnhandledCudaError);
  CHECK(bc[1].result == ncclRemoteError);
  CHECK(on_comm(log, e->id, FR_OP_BROADCAST).empty());
}

TEST_CASE("ops of a group share its id and launch at the outermost GroupEnd", "[agent]") {
  ncclComm_t c1 = make_comm(1, 0), c2 = make_comm(1, 0);
  static float b[4];
  REQUIRE(ncclGroupStart() == ncclSuccess);
  REQUIRE(ncclAllReduce(b, b, 4, ncclFloat32, ncclSum, c1, S(1)) == ncclSuccess);
  REQUIRE(ncclGroupStart() == ncclSuccess);  // nested
  REQUIRE(ncclSend(b, 4, ncclFloat32, 0, c2, S(2)) == ncclSuccess);
  REQUIRE(ncclGroupEnd() == ncclSuccess);
  {
    auto mid = read_own_log();
    auto ars = on_comm(mid, entry_for(mid, c1)->id, FR_OP_ALLREDUCE);
    REQUIRE(ars.size() == 1);
    CHECK((ars[0].flags & FR_REC_F_IN_GROUP) != 0);
    CHECK((ars[0].flags & FR_REC_F_LAUNCHED) == 0);  // not yet: the outer group is open
  }
  REQUIRE(ncclRecv(b, 4, ncclFloat32, 0, c2, S(2)) == ncclSuccess);
  REQUIRE(ncclGroupEnd() == ncclSuccess);

  // A simulated group never launches.
  REQUIRE(ncclGroupStart() == ncclSuccess);
  REQUIRE(ncclAllReduce(b, b, 4, ncclFloat32, ncclSum, c1, S(1)) == ncclSuccess);
  ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
  REQUIRE(ncclGroupSimulateEnd(&sim) == ncclSuccess);

  auto log = read_own_log();
  uint64_t id1 = entry_for(log, c1)->id, id2 = entry_for(log, c2)->id;
  auto ars = on_comm(log, id1, FR_OP_ALLREDUCE);
  auto sends = on_comm(log, id2, FR_OP_SEND);
  auto recvs = on_comm(log, id2, FR_OP_RECV);
  REQUIRE(ars.size() == 2);
  REQUIRE(sends.size() == 1);
  REQUIRE(recvs.size() == 1);
  uint64_t g = ars[0].group_id;
  CHECK(g != 0);
  CHECK(sends[0].group_id == g);
  CHECK(recvs[0].group_id == g);
  for (const auto& r : {ars[0], sends[0], recvs[0]}) {
    CHECK((r.flags & FR_REC_F_IN_GROUP) != 0);
    CHECK((r.flags & FR_REC_F_LAUNCHED) != 0);
    CHECK((r.flags & FR_REC_F_NEVER_LAUNCHED) == 0);
  }
  CHECK(ars[1].group_id != g);
  CHECK((ars[1].flags & FR_REC_F_NEVER_LAUNCHED) != 0);
  CHECK((ars[1].flags & FR_REC_F_LAUNCHED) == 0);
  // Group markers themselves are recorded with the group's id.
  int starts = 0, ends = 0;
  for (const auto& r : log.records) {
    if (r.raw.group_id != g) continue;
    starts += r.raw.op == FR_OP_GROUP_START;
    ends += r.raw.op == FR_OP_GROUP_END;
  }
  CHECK(starts == 2);
  CHECK(ends == 2);
}

TEST_CASE("a GroupStart is recorded whole and queued ops carry no duration", "[agent]") {
  ncclComm_t c = make_comm(1, 0);
  static float b[4];
  REQUIRE(ncclAllReduce(b, b, 4, ncclFloat32, ncclSum, c, S(1)) == ncclSuccess);  // the fast lane
  REQUIRE(ncclGroupStart() == ncclSuccess);
  REQUIRE(ncclSend(b, 4, ncclFloat32, 0, c, S(1)) == ncclSuccess);
  REQUIRE(ncclRecv(b, 4, ncclFloat32, 0, c, S(1)) == ncclSuccess);
  REQUIRE(ncclGroupEnd() == ncclSuccess);
  auto log = read_own_log();
  const uint64_t id = entry_for(log, c)->id;
  auto sends = on_comm(log, id, FR_OP_SEND);
  auto recvs = on_comm(log, id, FR_OP_RECV);
  REQUIRE(sends.size() == 1);
  REQUIRE(recvs.size() == 1);
  const uint64_t g = sends[0].group_id;
  REQUIRE(g != 0);
  for (const auto& r : {sends[0], recvs[0]}) {
    CHECK(r.result == ncclSuccess);
    CHECK(r.duration_ns == 0);  // only queued by its call: it launches at GroupEnd
    CHECK((r.flags & FR_REC_F_IN_CALL) == 0);
    CHECK((r.flags & FR_REC_F_LAUNCHED) != 0);
  }
  const fr_record* start = nullptr;
  const fr_record* end = nullptr;
  for (const auto& r : log.records) {
    if (r.raw.group_id != g) continue;
    if (r.raw.op == FR_OP_GROUP_START) start = &r.raw;
    if (r.raw.op == FR_OP_GROUP_END) end = &r.raw;
  }
  REQUIRE(start != nullptr);
  REQUIRE(end != nullptr);
  CHECK(start->result == ncclSuccess);
  CHECK((start->flags & FR_REC_F_IN_CALL) == 0);
  CHECK(start->duration_ns == 0);
  CHECK(start->id < sends[0].id);  // written before the group's ops, as its call came first
  CHECK(start->call_ns <= sends[0].call_ns);
  CHECK(end->id > recvs[0].id);
  CHECK((end->flags & FR_REC_F_IN_CALL) == 0);
}

TEST_CASE("group ids stay unique across threads", "[agent]") {
  // Each thread takes its group ids a block at a time: ids never repeat in the process and
  // increase on each thread. (The threads only call NCCL: Catch's checks stay on this thread.)
  constexpr int kThreads = 4, kGroups = 300;
  ncclComm_t comms[kThreads];
  for (auto& c : comms) c = make_comm(1, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([t, &comms] {
      static thread_local float b[4];
      for (int i = 0; i < kGroups; ++i) {
        ncclGroupStart();
        ncclSend(b, 4, ncclFloat32, 0, comms[t], S(t + 1));
        ncclGroupEnd();
      }
    });
  }
  for (auto& th : threads) th.join();
  auto log = read_own_log();
  std::set<uint64_t> ids;
  size_t sends = 0;
  for (int t = 0; t < kThreads; ++t) {
    uint64_t last = 0;
    for (const auto& r : on_comm(log, entry_for(log, comms[t])->id, FR_OP_SEND)) {
      ++sends;
      CHECK(r.group_id > last);
      last = r.group_id;
      CHECK(ids.insert(r.group_id).second);
    }
  }
  CHECK(sends == size_t(kThreads) * kGroups);
}

TEST_CASE("nonblocking communicators launch when the application sees success", "[agent]") {
  ncclUniqueId id;
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  cfg.commName = "nonblocking-test";
  ncclComm_t c = nullptr;
  fr_double_next_result(ncclInProgress);
  REQUIRE(ncclCommInitRankConfig(&c, 3, id, 2, &cfg) == ncclInProgress);
  REQUIRE(c != nullptr);
  {
    auto log = read_own_log();
    const fr_comm_entry* e = entry_for(log, c);
    REQUIRE(e);
    CHECK(e->state == FR_COMM_INITIALIZING);
    CHECK((e->flags & FR_COMM_F_NONBLOCKING) != 0);
    CHECK(std::string(e->name) == "nonblocking-test");
  }
  ncclResult_t err = ncclSuccess;
  REQUIRE(ncclCommGetAsyncError(c, &err) == ncclSuccess);
  CHECK(err == ncclInProgress);
  fr_double_set_async(c, ncclSuccess);
  REQUIRE(ncclCommGetAsyncError(c, &err) == ncclSuccess);
  CHECK(err == ncclSuccess);

  static float b[4];
  fr_double_next_result(ncclInProgress);
  REQUIRE(ncclAllReduce(b, b, 4, ncclFloat32, ncclSum, c, S(1)) == ncclInProgress);
  uint64_t comm_id;
  {
    auto log = read_own_log();
    const fr_comm_entry* e = entry_for(log, c);
    REQUIRE(e);
    CHECK(e->state == FR_COMM_LIVE);
    CHECK(e->size == 3);
    CHECK(e->rank == 2);
    comm_id = e->id;
    auto ars = on_comm(log, comm_id, FR_OP_ALLREDUCE);
    REQUIRE(ars.size() == 1);
    CHECK((ars[0].flags & FR_REC_F_NONBLOCKING) != 0);
    CHECK((ars[0].flags & FR_REC_F_LAUNCHED) == 0);
    CHECK(ars[0].result == ncclInProgress);
  }
  REQUIRE(ncclCommGetAsyncError(c, &err) == ncclSuccess);
  {
    auto log = read_own_log();
    auto ars = on_comm(log, comm_id, FR_OP_ALLREDUCE);
    REQUIRE(ars.size() == 1);
    CHECK((ars[0].flags & FR_REC_F_LAUNCHED) != 0);
  }
  // A group on a nonblocking communicator: GroupEnd answers ncclInProgress; launched on success.
  REQUIRE(ncclGroupStart() == ncclSuccess);
  REQUIRE(ncclAllReduce(b, b, 4, ncclFloat32, ncclSum, c, S(1)) == ncclSuccess);
  fr_double_next_result(ncclInProgress);
  REQUIRE(ncclGroupEnd() == ncclInProgress);
  {
    auto log = read_own_log();
    auto ars = on_comm(log, comm_id, FR_OP_ALLREDUCE);
    REQUIRE(ars.size() == 2);
    CHECK((ars[1].flags & FR_REC_F_IN_GROUP) != 0);
    CHECK((ars[1].flags & (FR_REC_F_LAUNCHED | FR_REC_F_NEVER_LAUNCHED)) == 0);
  }
  REQUIRE(ncclCommGetAsyncError(c, &err) == ncclSuccess);
  {
    auto log = read_own_log();
    auto ars = on_comm(log, comm_id, FR_OP_ALLREDUCE);
    REQUIRE(ars.size() == 2);
    CHECK((ars[1].flags & FR_REC_F_LAUNCHED) != 0);
  }
  // An asynchronous error is recorded once, and kept in the communicator entry.
  fr_double_set_async(c, ncclRemoteError);
  for (int i = 0; i < 3; ++i) {
    REQUIRE(ncclCommGetAsyncError(c, &err) == ncclSuccess);
    CHECK(err == ncclRemoteError);
  }
  auto log = read_own_log();
  auto errs = on_comm(log, comm_id, FR_OP_COMM_GET_ASYNC_ERROR);
  REQUIRE(errs.size() == 1);
  CHECK(errs[0].result == ncclRemoteError);
  CHECK(entry_for(log, c)->async_error == ncclRemoteError);
}

TEST_CASE("lifecycle calls move the communicator's state", "[agent]") {
  ncclComm_t a = make_comm(1, 0), b = make_comm(1, 0), d = make_comm(1, 0), s = make_comm(1, 0);
  REQUIRE(ncclCommFinalize(a) == ncclSuccess);
  REQUIRE(ncclCommAbort(b) == ncclSuccess);
  REQUIRE(ncclCommRevoke(d, 0) == ncclSuccess);
  REQUIRE(ncclCommSuspend(s, 0) == ncclSuccess);
  auto log = read_own_log();
  CHECK(entry_for(log, a)->state == FR_COMM_FINALIZED);
  CHECK(entry_for(log, b)->state == FR_COMM_ABORTED);
  CHECK(entry_for(log, d)->state == FR_COMM_REVOKED);
  CHECK(entry_for(log, s)->state == FR_COMM_SUSPENDED);
  REQUIRE(ncclCommResume(s) == ncclSuccess);
  REQUIRE(ncclCommDestroy(a) == ncclSuccess);
  fr_double_next_result(ncclInvalidUsage);
  REQUIRE(ncclCommDestroy(d) == ncclInvalidUsage);  // a failed destroy changes nothing
  log = read_own_log();
  CHECK(entry_for(log, s)->state == FR_COMM_LIVE);
  CHECK(entry_for(log, a)->state == FR_COMM_DESTROYED);
  CHECK(entry_for(log, d)->state == FR_COMM_REVOKED);
}

TEST_CASE("many threads on many communicators keep exact sequences", "[agent]") {
  constexpr int kThreads = 4, kOps = 300;
  ncclComm_t comms[kThreads];
  for (auto& c : comms) c = make_comm(1, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      static thread_local float b[4];
      for (int i = 0; i < kOps; ++i) {
        if (i % 10 == 0) {
          ncclGroupStart();
          ncclSend(b, 4, ncclFloat32, 0, comms[t], S(t + 1));
          ncclRecv(b, 4, ncclFloat32, 0, comms[t], S(t + 1));
          ncclGroupEnd();
        }
        ncclAllReduce(b, b, 4, ncclFloat32, ncclSum, comms[t], S(t + 1));
      }
    });
  }
  for (auto& th : threads) th.join();
  auto log = read_own_log();
  CHECK(log.torn == 0);
  for (int t = 0; t < kThreads; ++t) {
    const fr_comm_entry* e = entry_for(log, comms[t]);
    REQUIRE(e);
    auto ars = on_comm(log, e->id, FR_OP_ALLREDUCE);
    REQUIRE(ars.size() == (size_t)kOps);
    std::set<uint32_t> tids;
    for (int i = 0; i < kOps; ++i) {
      CHECK(ars[i].seq == (uint64_t)i + 1);
      CHECK((ars[i].flags & FR_REC_F_LAUNCHED) != 0);
      tids.insert(ars[i].tid);
    }
    CHECK(tids.size() == 1);
    CHECK(on_comm(log, e->id, FR_OP_SEND).size() == kOps / 10);
    CHECK(e->p2p_seq == 2 * kOps / 10);
  }
}
