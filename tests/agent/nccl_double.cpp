// A test double of libnccl.so.2 for the agent's tests: every function of the API the agent wraps,
// each remembering (per thread) the exact arguments it received and returning a result the test
// chose, so a test can check that a wrapper forwards arguments and results untouched.
//
// Communicators are small objects from a fixed pool that answer CommCount/UserRank/CuDevice
// consistently. ncclBcast calls ncclBroadcast through the exported symbol, as NCCL does, so the
// agent's reentrancy guard is exercised. Every function also has its pnccl alias.
#include "nccl_double.h"

#include <stdio.h>
#include <string.h>

namespace {

struct FakeComm {
  uint32_t magic;
  int nranks;
  int rank;
  int dev;
  ncclResult_t async;
};
constexpr uint32_t kMagic = 0xd0ab1e;
constexpr int kPool = 4096;
FakeComm g_pool[kPool];
int g_used;        // atomic
uint64_t g_calls;  // atomic
int g_next_uid;    // atomic

constexpr int kHistory = 16;
thread_local fr_double_call t_hist[kHistory];
thread_local unsigned t_pos;
thread_local int t_next_result = -1;
thread_local int t_inner_result = -1;

ncclComm_t make_comm(int nranks, int rank, int dev) {
  int i = __atomic_fetch_add(&g_used, 1, __ATOMIC_RELAXED);
  if (i >= kPool) return nullptr;
  g_pool[i] = FakeComm{kMagic, nranks, rank, dev, ncclSuccess};
  return (ncclComm_t)&g_pool[i];
}

FakeComm* fake(const void* c) {
  FakeComm* f = (FakeComm*)c;
  return (f != nullptr && f->magic == kMagic) ? f : nullptr;
}

// Remembers the call and returns the result the test asked for (ncclSuccess by default).
template <class... A>
ncclResult_t note(const char* name, A... args) {
  __atomic_fetch_add(&g_calls, 1, __ATOMIC_RELAXED);
  fr_double_call c = {};
  snprintf(c.name, sizeof c.name, "%s", name);
  uint64_t vals[] = {(uint64_t)args...};
  c.nargs = (int)sizeof...(A);
  for (int i = 0; i < c.nargs && i < 12; ++i) c.args[i] = vals[i];
  t_hist[t_pos++ % kHistory] = c;
  int r = t_next_result;
  t_next_result = -1;
  return r < 0 ? ncclSuccess : (ncclResult_t)r;
}

template <class T>
uint64_t u(T v) {
  if constexpr (sizeof(T) == sizeof(uint64_t)) {
    uint64_t x;
    memcpy(&x, &v, sizeof x);
    return x;
  } else {
    return (uint64_t)(int64_t)v;
  }
}

}  // namespace

#define DBL extern "C" __attribute__((visibility("default")))
// The pnccl alias of each function, as NCCL provides.
#define ALIAS(ret, name, ...) DBL ret p##name(__VA_ARGS__) __attribute__((alias(#name)));

DBL const fr_double_call* fr_double_last() { return &t_hist[(t_pos + kHistory - 1) % kHistory]; }
DBL const fr_double_call* fr_double_find(const char* name) {
  for (int i = 1; i <= kHistory; ++i) {
    const fr_double_call& c = t_hist[(t_pos + kHistory - i) % kHistory];
    if (strcmp(c.name, name) == 0) return &c;
  }
  return nullptr;
}
DBL void fr_double_forget() {
  for (auto& c : t_hist) c = fr_double_call{};
}
DBL void fr_double_next_result(int r) { t_next_result = r; }
DBL void fr_double_next_inner_result(int r) { t_inner_result = r; }
DBL uint64_t fr_double_calls() { return __atomic_load_n(&g_calls, __ATOMIC_RELAXED); }
DBL void fr_double_set_async(ncclComm_t comm, ncclResult_t r) {
  if (FakeComm* f = fake(comm)) __atomic_store_n(&f->async, r, __ATOMIC_RELAXED);
}

DBL ncclResult_t ncclGetVersion(int* version) {
  if (version) *version = 22809;
  return note("ncclGetVersion", u(version));
}
ALIAS(ncclResult_t, ncclGetVersion, int*)

DBL ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  if (id) {
    memset(id, 0, sizeof *id);
    int n = __atomic_add_fetch(&g_next_uid, 1, __ATOMIC_RELAXED);
    snprintf(id->internal, sizeof id->internal, "double-uid-%d", n);
  }
  return note("ncclGetUniqueId", u(id));
}
ALIAS(ncclResult_t, ncclGetUniqueId, ncclUniqueId*)

static uint64_t uid_word(const ncclUniqueId& id) {
  uint64_t w;
  memcpy(&w, id.internal, sizeof w);
  return w;
}

DBL ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  ncclResult_t r = note("ncclCommInitRank", u(comm), u(nranks), uid_word(id), u(rank));
  if (comm) *comm = r == ncclSuccess || r == ncclInProgress ? make_comm(nranks, rank, 0) : nullptr;
  return r;
}
ALIAS(ncclResult_t, ncclCommInitRank, ncclComm_t*, int, ncclUniqueId, int)

DBL ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank,
                                        ncclConfig_t* config) {
  ncclResult_t r =
      note("ncclCommInitRankConfig", u(comm), u(nranks), uid_word(id), u(rank), u(config));
  if (comm) *comm = r == ncclSuccess || r == ncclInProgress ? make_comm(nranks, rank, 1) : nullptr;
  if (r == ncclInProgress && comm && *comm) fake(*comm)->async = ncclInProgress;
  return r;
}
ALIAS(ncclResult_t, ncclCommInitRankConfig, ncclComm_t*, int, ncclUniqueId, int, ncclConfig_t*)

DBL ncclResult_t ncclCommInitRankScalable(ncclComm_t* comm, int nranks, int rank, int nId,
                                          ncclUniqueId* ids, ncclConfig_t* config) {
  ncclResult_t r =
      note("ncclCommInitRankScalable", u(comm), u(nranks), u(rank), u(nId), u(ids), u(config));
  if (comm) *comm = r == ncclSuccess ? make_comm(nranks, rank, 2) : nullptr;
  return r;
}
ALIAS(ncclResult_t, ncclCommInitRankScalable, ncclComm_t*, int, int, int, ncclUniqueId*,
      ncclConfig_t*)

DBL ncclResult_t ncclCommInitAll(ncclComm_t* comm, int ndev, const int* devlist) {
  ncclResult_t r = note("ncclCommInitAll", u(comm), u(ndev), u(devlist));
  if (r == ncclSuccess && comm)
    for (int i = 0; i < ndev; ++i) comm[i] = make_comm(ndev, i, devlist ? devlist[i] : i);
  return r;
}
ALIAS(ncclResult_t, ncclCommInitAll, ncclComm_t*, int, const int*)

DBL ncclResult_t ncclCommFinalize(ncclComm_t comm) { return note("ncclCommFinalize", u(comm)); }
ALIAS(ncclResult_t, ncclCommFinalize, ncclComm_t)
DBL ncclResult_t ncclCommDestroy(ncclComm_t comm) { return note("ncclCommDestroy", u(comm)); }
ALIAS(ncclResult_t, ncclCommDestroy, ncclComm_t)
DBL ncclResult_t ncclCommAbort(ncclComm_t comm) { return note("ncclCommAbort", u(comm)); }
ALIAS(ncclResult_t, ncclCommAbort, ncclComm_t)
DBL ncclResult_t ncclCommRevoke(ncclComm_t comm, int flags) {
  return note("ncclCommRevoke", u(comm), u(flags));
}
ALIAS(ncclResult_t, ncclCommRevoke, ncclComm_t, int)
DBL ncclResult_t ncclCommSuspend(ncclComm_t comm, int flags) {
  return note("ncclCommSuspend", u(comm), u(flags));
}
ALIAS(ncclResult_t, ncclCommSuspend, ncclComm_t, int)
DBL ncclResult_t ncclCommResume(ncclComm_t comm) { return note("ncclCommResume", u(comm)); }
ALIAS(ncclResult_t, ncclCommResume, ncclComm_t)

DBL ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                               ncclConfig_t* config) {
  ncclResult_t r = note("ncclCommSplit", u(comm), u(color), u(key), u(newcomm), u(config));
  FakeComm* p = fake(comm);
  if (newcomm)
    *newcomm = (r == ncclSuccess && color != NCCL_SPLIT_NOCOLOR && p)
                   ? make_comm(p->nranks > 1 ? p->nranks / 2 : 1, key, p->dev)
                   : nullptr;
  return r;
}
ALIAS(ncclResult_t, ncclCommSplit, ncclComm_t, int, int, ncclComm_t*, ncclConfig_t*)

DBL ncclResult_t ncclCommShrink(ncclComm_t comm, int* exclude, int count, ncclComm_t* newcomm,
                                ncclConfig_t* config, int flags) {
  ncclResult_t r =
      note("ncclCommShrink", u(comm), u(exclude), u(count), u(newcomm), u(config), u(flags));
  FakeComm* p = fake(comm);
  if (newcomm)
    *newcomm = (r == ncclSuccess && p) ? make_comm(p->nranks - count, p->rank, p->dev) : nullptr;
  return r;
}
ALIAS(ncclResult_t, ncclCommShrink, ncclComm_t, int*, int, ncclComm_t*, ncclConfig_t*, int)

DBL ncclResult_t ncclCommGrow(ncclComm_t comm, int nRanks, const ncclUniqueId* id, int rank,
                              ncclComm_t* newcomm, ncclConfig_t* config) {
  ncclResult_t r = note("ncclCommGrow", u(comm), u(nRanks), u(id), u(rank), u(newcomm), u(config));
  FakeComm* p = fake(comm);
  if (newcomm)
    *newcomm = r == ncclSuccess ? make_comm(nRanks, p ? p->rank : rank, p ? p->dev : 0) : nullptr;
  return r;
}
ALIAS(ncclResult_t, ncclCommGrow, ncclComm_t, int, const ncclUniqueId*, int, ncclComm_t*,
      ncclConfig_t*)

DBL ncclResult_t ncclCommGetUniqueId(ncclComm_t comm, ncclUniqueId* id) {
  if (id) {
    memset(id, 0, sizeof *id);
    snprintf(id->internal, sizeof id->internal, "grow-uid");
  }
  return note("ncclCommGetUniqueId", u(comm), u(id));
}
ALIAS(ncclResult_t, ncclCommGetUniqueId, ncclComm_t, ncclUniqueId*)

DBL const char* ncclGetErrorString(ncclResult_t result) {
  static const char* const kNames[] = {"double:success",  "double:cuda",      "double:system",
                                       "double:internal", "double:argument",  "double:usage",
                                       "double:remote",   "double:inprogress"};
  note("ncclGetErrorString", u(result));
  return (result >= 0 && result < 8) ? kNames[result] : "double:unknown";
}
ALIAS(const char*, ncclGetErrorString, ncclResult_t)

DBL const char* ncclGetLastError(ncclComm_t comm) {
  note("ncclGetLastError", u(comm));
  return "double:last-error";
}
ALIAS(const char*, ncclGetLastError, ncclComm_t)

DBL void ncclResetDebugInit() { note("ncclResetDebugInit"); }
ALIAS(void, ncclResetDebugInit)

DBL ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* err) {
  ncclResult_t r = note("ncclCommGetAsyncError", u(comm), u(err));
  FakeComm* f = fake(comm);
  if (err) *err = f ? __atomic_load_n(&f->async, __ATOMIC_RELAXED) : ncclSuccess;
  return r;
}
ALIAS(ncclResult_t, ncclCommGetAsyncError, ncclComm_t, ncclResult_t*)

DBL ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  ncclResult_t r = note("ncclCommCount", u(comm), u(count));
  if (count && fake(comm)) *count = fake(comm)->nranks;
  return r;
}
ALIAS(ncclResult_t, ncclCommCount, const ncclComm_t, int*)
DBL ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* dev) {
  ncclResult_t r = note("ncclCommCuDevice", u(comm), u(dev));
  if (dev && fake(comm)) *dev = fake(comm)->dev;
  return r;
}
ALIAS(ncclResult_t, ncclCommCuDevice, const ncclComm_t, int*)
DBL ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  ncclResult_t r = note("ncclCommUserRank", u(comm), u(rank));
  if (rank && fake(comm)) *rank = fake(comm)->rank;
  return r;
}
ALIAS(ncclResult_t, ncclCommUserRank, const ncclComm_t, int*)

DBL ncclResult_t ncclCommRegister(const ncclComm_t comm, void* buff, size_t size, void** handle) {
  if (handle) *handle = (void*)0x4a4e;
  return note("ncclCommRegister", u(comm), u(buff), u(size), u(handle));
}
ALIAS(ncclResult_t, ncclCommRegister, const ncclComm_t, void*, size_t, void**)
DBL ncclResult_t ncclCommDeregister(const ncclComm_t comm, void* handle) {
  return note("ncclCommDeregister", u(comm), u(handle));
}
ALIAS(ncclResult_t, ncclCommDeregister, const ncclComm_t, void*)
DBL ncclResult_t ncclCommWindowRegister(ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win,
                                        int flags) {
  if (win) *win = (ncclWindow_t)0x3117;
  return note("ncclCommWindowRegister", u(comm), u(buff), u(size), u(win), u(flags));
}
ALIAS(ncclResult_t, ncclCommWindowRegister, ncclComm_t, void*, size_t, ncclWindow_t*, int)
DBL ncclResult_t ncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win) {
  return note("ncclCommWindowDeregister", u(comm), u(win));
}
ALIAS(ncclResult_t, ncclCommWindowDeregister, ncclComm_t, ncclWindow_t)

DBL ncclResult_t ncclMemAlloc(void** ptr, size_t size) {
  if (ptr) *ptr = (void*)0x6d656d;
  return note("ncclMemAlloc", u(ptr), u(size));
}
ALIAS(ncclResult_t, ncclMemAlloc, void**, size_t)
DBL ncclResult_t ncclMemFree(void* ptr) { return note("ncclMemFree", u(ptr)); }
ALIAS(ncclResult_t, ncclMemFree, void*)

DBL ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar, ncclDataType_t dtype,
                                          ncclScalarResidence_t residence, ncclComm_t comm) {
  if (op) *op = (ncclRedOp_t)(ncclNumOps + 3);
  return note("ncclRedOpCreatePreMulSum", u(op), u(scalar), u(dtype), u(residence), u(comm));
}
ALIAS(ncclResult_t, ncclRedOpCreatePreMulSum, ncclRedOp_t*, void*, ncclDataType_t,
      ncclScalarResidence_t, ncclComm_t)
DBL ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm) {
  return note("ncclRedOpDestroy", u(op), u(comm));
}
ALIAS(ncclResult_t, ncclRedOpDestroy, ncclRedOp_t, ncclComm_t)

DBL ncclResult_t ncclReduce(const void* s, void* r, size_t n, ncclDataType_t t, ncclRedOp_t op,
                            int root, ncclComm_t comm, cudaStream_t st) {
  return note("ncclReduce", u(s), u(r), u(n), u(t), u(op), u(root), u(comm), u(st));
}
ALIAS(ncclResult_t, ncclReduce, const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, int,
      ncclComm_t, cudaStream_t)

DBL ncclResult_t ncclBroadcast(const void* s, void* r, size_t n, ncclDataType_t t, int root,
                               ncclComm_t comm, cudaStream_t st) {
  return note("ncclBroadcast", u(s), u(r), u(n), u(t), u(root), u(comm), u(st));
}
ALIAS(ncclResult_t, ncclBroadcast, const void*, void*, size_t, ncclDataType_t, int, ncclComm_t,
      cudaStream_t)

// As in NCCL: Bcast is Broadcast in place, called through the public symbol.
DBL ncclResult_t ncclBcast(void* b, size_t n, ncclDataType_t t, int root, ncclComm_t comm,
                           cudaStream_t st) {
  int wanted = t_next_result;
  t_next_result = t_inner_result;
  t_inner_result = -1;
  ncclResult_t inner = ncclBroadcast(b, b, n, t, root, comm, st);
  t_next_result = wanted;
  ncclResult_t r = note("ncclBcast", u(b), u(n), u(t), u(root), u(comm), u(st));
  return r != ncclSuccess ? r : inner;
}
ALIAS(ncclResult_t, ncclBcast, void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t)

DBL ncclResult_t ncclAllReduce(const void* s, void* r, size_t n, ncclDataType_t t, ncclRedOp_t op,
                               ncclComm_t comm, cudaStream_t st) {
  return note("ncclAllReduce", u(s), u(r), u(n), u(t), u(op), u(comm), u(st));
}
ALIAS(ncclResult_t, ncclAllReduce, const void*, void*, size_t, ncclDataType_t, ncclRedOp_t,
      ncclComm_t, cudaStream_t)

DBL ncclResult_t ncclReduceScatter(const void* s, void* r, size_t n, ncclDataType_t t,
                                   ncclRedOp_t op, ncclComm_t comm, cudaStream_t st) {
  return note("ncclReduceScatter", u(s), u(r), u(n), u(t), u(op), u(comm), u(st));
}
ALIAS(ncclResult_t, ncclReduceScatter, const void*, void*, size_t, ncclDataType_t, ncclRedOp_t,
      ncclComm_t, cudaStream_t)

DBL ncclResult_t ncclAllGather(const void* s, void* r, size_t n, ncclDataType_t t, ncclComm_t comm,
                               cudaStream_t st) {
  return note("ncclAllGather", u(s), u(r), u(n), u(t), u(comm), u(st));
}
ALIAS(ncclResult_t, ncclAllGather, const void*, void*, size_t, ncclDataType_t, ncclComm_t,
      cudaStream_t)

DBL ncclResult_t ncclAlltoAll(const void* s, void* r, size_t n, ncclDataType_t t, ncclComm_t comm,
                              cudaStream_t st) {
  return note("ncclAlltoAll", u(s), u(r), u(n), u(t), u(comm), u(st));
}
ALIAS(ncclResult_t, ncclAlltoAll, const void*, void*, size_t, ncclDataType_t, ncclComm_t,
      cudaStream_t)

DBL ncclResult_t ncclGather(const void* s, void* r, size_t n, ncclDataType_t t, int root,
                            ncclComm_t comm, cudaStream_t st) {
  return note("ncclGather", u(s), u(r), u(n), u(t), u(root), u(comm), u(st));
}
ALIAS(ncclResult_t, ncclGather, const void*, void*, size_t, ncclDataType_t, int, ncclComm_t,
      cudaStream_t)

DBL ncclResult_t ncclScatter(const void* s, void* r, size_t n, ncclDataType_t t, int root,
                             ncclComm_t comm, cudaStream_t st) {
  return note("ncclScatter", u(s), u(r), u(n), u(t), u(root), u(comm), u(st));
}
ALIAS(ncclResult_t, ncclScatter, const void*, void*, size_t, ncclDataType_t, int, ncclComm_t,
      cudaStream_t)

DBL ncclResult_t ncclSend(const void* s, size_t n, ncclDataType_t t, int peer, ncclComm_t comm,
                          cudaStream_t st) {
  return note("ncclSend", u(s), u(n), u(t), u(peer), u(comm), u(st));
}
ALIAS(ncclResult_t, ncclSend, const void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t)

DBL ncclResult_t ncclRecv(void* r, size_t n, ncclDataType_t t, int peer, ncclComm_t comm,
                          cudaStream_t st) {
  return note("ncclRecv", u(r), u(n), u(t), u(peer), u(comm), u(st));
}
ALIAS(ncclResult_t, ncclRecv, void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t)

DBL ncclResult_t ncclGroupStart() { return note("ncclGroupStart"); }
ALIAS(ncclResult_t, ncclGroupStart)
DBL ncclResult_t ncclGroupEnd() { return note("ncclGroupEnd"); }
ALIAS(ncclResult_t, ncclGroupEnd)
DBL ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t* info) {
  return note("ncclGroupSimulateEnd", u(info));
}
ALIAS(ncclResult_t, ncclGroupSimulateEnd, ncclSimInfo_t*)

// ---- NCCL 2.30+: signals, per-call-config collectives, device communicators, queries ----------

DBL ncclResult_t ncclPutSignal(const void* b, size_t n, ncclDataType_t t, int peer, ncclWindow_t w,
                               size_t off, int sig, int ctx, unsigned int flags, ncclComm_t comm,
                               cudaStream_t st) {
  return note("ncclPutSignal", u(b), u(n), u(t), u(peer), u(w), u(off), u(sig), u(ctx), u(flags),
              u(comm), u(st));
}
DBL ncclResult_t ncclSignal(int peer, int sig, int ctx, unsigned int flags, ncclComm_t comm,
                            cudaStream_t st) {
  return note("ncclSignal", u(peer), u(sig), u(ctx), u(flags), u(comm), u(st));
}
DBL ncclResult_t ncclWaitSignal(int n, ncclWaitSignalDesc_t* d, ncclComm_t comm, cudaStream_t st) {
  return note("ncclWaitSignal", u(n), u(d), u(comm), u(st));
}
#define CONFIG_COLL(name, ...) DBL ncclResult_t name(__VA_ARGS__)
CONFIG_COLL(ncclAllReduceConfig, const void* s, void* r, size_t n, ncclDataType_t t, ncclRedOp_t op,
            ncclComm_t comm, cudaStream_t st, const ncclCollConfig_t* cfg) {
  return note("ncclAllReduceConfig", u(s), u(r), u(n), u(t), u(op), u(comm), u(st), u(cfg));
}
CONFIG_COLL(ncclBroadcastConfig, const void* s, void* r, size_t n, ncclDataType_t t, int root,
            ncclComm_t comm, cudaStream_t st, const ncclCollConfig_t* cfg) {
  return note("ncclBroadcastConfig", u(s), u(r), u(n), u(t), u(root), u(comm), u(st), u(cfg));
}
CONFIG_COLL(ncclReduceConfig, const void* s, void* r, size_t n, ncclDataType_t t, ncclRedOp_t op,
            int root, ncclComm_t comm, cudaStream_t st, const ncclCollConfig_t* cfg) {
  return note("ncclReduceConfig", u(s), u(r), u(n), u(t), u(op), u(root), u(comm), u(st), u(cfg));
}
CONFIG_COLL(ncclAllGatherConfig, const void* s, void* r, size_t n, ncclDataType_t t,
            ncclComm_t comm, cudaStream_t st, const ncclCollConfig_t* cfg) {
  return note("ncclAllGatherConfig", u(s), u(r), u(n), u(t), u(comm), u(st), u(cfg));
}
CONFIG_COLL(ncclReduceScatterConfig, const void* s, void* r, size_t n, ncclDataType_t t,
            ncclRedOp_t op, ncclComm_t comm, cudaStream_t st, const ncclCollConfig_t* cfg) {
  return note("ncclReduceScatterConfig", u(s), u(r), u(n), u(t), u(op), u(comm), u(st), u(cfg));
}
CONFIG_COLL(ncclAlltoAllConfig, const void* s, void* r, size_t n, ncclDataType_t t,
            ncclComm_t comm, cudaStream_t st, const ncclCollConfig_t* cfg) {
  return note("ncclAlltoAllConfig", u(s), u(r), u(n), u(t), u(comm), u(st), u(cfg));
}
CONFIG_COLL(ncclGatherConfig, const void* s, void* r, size_t n, ncclDataType_t t, int root,
            ncclComm_t comm, cudaStream_t st, const ncclCollConfig_t* cfg) {
  return note("ncclGatherConfig", u(s), u(r), u(n), u(t), u(root), u(comm), u(st), u(cfg));
}
CONFIG_COLL(ncclScatterConfig, const void* s, void* r, size_t n, ncclDataType_t t, int root,
            ncclComm_t comm, cudaStream_t st, const ncclCollConfig_t* cfg) {
  return note("ncclScatterConfig", u(s), u(r), u(n), u(t), u(root), u(comm), u(st), u(cfg));
}
DBL ncclResult_t ncclDevCommCreate(ncclComm_t comm, const struct ncclDevCommRequirements* reqs,
                                   struct ncclDevComm* out) {
  return note("ncclDevCommCreate", u(comm), u(reqs), u(out));
}
DBL ncclResult_t ncclDevCommDestroy(ncclComm_t comm, const struct ncclDevComm* dc) {
  return note("ncclDevCommDestroy", u(comm), u(dc));
}
DBL ncclResult_t ncclCommQueryProperties(ncclComm_t comm, struct ncclCommProperties* props) {
  return note("ncclCommQueryProperties", u(comm), u(props));
}
DBL ncclResult_t ncclCommMemStats(ncclComm_t comm, ncclCommMemStat_t stat, uint64_t* value) {
  return note("ncclCommMemStats", u(comm), u(stat), u(value));
}
DBL ncclResult_t ncclWinGetUserPtr(ncclComm_t comm, ncclWindow_t win, void** out) {
  return note("ncclWinGetUserPtr", u(comm), u(win), u(out));
}
