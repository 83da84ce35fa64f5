// A test double of libnccl.so.2 for the agent's tests: every function of the API the agent wraps,
// each remembering (per thread) the exact arguments it received and returning a result the test
// chose, so a test can check that a wrapper forwards arguments and results untouched.
//
// Communicators are small objects from a fixed pool that answer CommCount/UserRank/CuDevice
// consistently. ncclBcast calls ncclBroadcast through the exported symbol, as NCCL does, so the
// agent's reentrancy guard is exercised. The functions and their pnccl aliases are generated from
// the NCCL API list (fr/nccl_api.def): each one hands its arguments to body(), whose default only
// remembers the call; the functions that must do more have a body of their own.
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

// ---- the bodies of the functions that do more than remember the call -------------------------

// One tag per function of the list, to pick its body.
enum class Fn {
#define FR_NCCL_FN(base, ...) base,
#include "fr/nccl_api.def"
};
template <Fn F>
struct Tag {};

// Every function without a body of its own: remembers the call, answers the test's result.
template <Fn F, class... A>
ncclResult_t body(Tag<F>, const char* name, A... args) {
  return note(name, u(args)...);
}

ncclResult_t body(Tag<Fn::GetVersion>, const char* name, int* version) {
  if (version) *version = 22809;
  return note(name, u(version));
}

ncclResult_t body(Tag<Fn::GetUniqueId>, const char* name, ncclUniqueId* id) {
  if (id) {
    memset(id, 0, sizeof *id);
    int n = __atomic_add_fetch(&g_next_uid, 1, __ATOMIC_RELAXED);
    snprintf(id->internal, sizeof id->internal, "double-uid-%d", n);
  }
  return note(name, u(id));
}

uint64_t uid_word(const ncclUniqueId& id) {
  uint64_t w;
  memcpy(&w, id.internal, sizeof w);
  return w;
}

ncclResult_t body(Tag<Fn::CommInitRank>, const char* name, ncclComm_t* comm, int nranks,
                  ncclUniqueId id, int rank) {
  ncclResult_t r = note(name, u(comm), u(nranks), uid_word(id), u(rank));
  if (comm) *comm = r == ncclSuccess || r == ncclInProgress ? make_comm(nranks, rank, 0) : nullptr;
  return r;
}

ncclResult_t body(Tag<Fn::CommInitRankConfig>, const char* name, ncclComm_t* comm, int nranks,
                  ncclUniqueId id, int rank, ncclConfig_t* config) {
  ncclResult_t r = note(name, u(comm), u(nranks), uid_word(id), u(rank), u(config));
  if (comm) *comm = r == ncclSuccess || r == ncclInProgress ? make_comm(nranks, rank, 1) : nullptr;
  if (r == ncclInProgress && comm && *comm) fake(*comm)->async = ncclInProgress;
  return r;
}

ncclResult_t body(Tag<Fn::CommInitRankScalable>, const char* name, ncclComm_t* comm, int nranks,
                  int rank, int nId, ncclUniqueId* ids, ncclConfig_t* config) {
  ncclResult_t r = note(name, u(comm), u(nranks), u(rank), u(nId), u(ids), u(config));
  if (comm) *comm = r == ncclSuccess ? make_comm(nranks, rank, 2) : nullptr;
  return r;
}

ncclResult_t body(Tag<Fn::CommInitAll>, const char* name, ncclComm_t* comm, int ndev,
                  const int* devlist) {
  ncclResult_t r = note(name, u(comm), u(ndev), u(devlist));
  if (r == ncclSuccess && comm)
    for (int i = 0; i < ndev; ++i) comm[i] = make_comm(ndev, i, devlist ? devlist[i] : i);
  return r;
}

ncclResult_t body(Tag<Fn::CommSplit>, const char* name, ncclComm_t comm, int color, int key,
                  ncclComm_t* newcomm, ncclConfig_t* config) {
  ncclResult_t r = note(name, u(comm), u(color), u(key), u(newcomm), u(config));
  FakeComm* p = fake(comm);
  if (newcomm)
    *newcomm = (r == ncclSuccess && color != NCCL_SPLIT_NOCOLOR && p)
                   ? make_comm(p->nranks > 1 ? p->nranks / 2 : 1, key, p->dev)
                   : nullptr;
  return r;
}

ncclResult_t body(Tag<Fn::CommShrink>, const char* name, ncclComm_t comm, int* exclude, int count,
                  ncclComm_t* newcomm, ncclConfig_t* config, int flags) {
  ncclResult_t r = note(name, u(comm), u(exclude), u(count), u(newcomm), u(config), u(flags));
  FakeComm* p = fake(comm);
  if (newcomm)
    *newcomm = (r == ncclSuccess && p) ? make_comm(p->nranks - count, p->rank, p->dev) : nullptr;
  return r;
}

ncclResult_t body(Tag<Fn::CommGrow>, const char* name, ncclComm_t comm, int nRanks,
                  const ncclUniqueId* id, int rank, ncclComm_t* newcomm, ncclConfig_t* config) {
  ncclResult_t r = note(name, u(comm), u(nRanks), u(id), u(rank), u(newcomm), u(config));
  FakeComm* p = fake(comm);
  if (newcomm)
    *newcomm = r == ncclSuccess ? make_comm(nRanks, p ? p->rank : rank, p ? p->dev : 0) : nullptr;
  return r;
}

ncclResult_t body(Tag<Fn::CommGetUniqueId>, const char* name, ncclComm_t comm, ncclUniqueId* id) {
  if (id) {
    memset(id, 0, sizeof *id);
    snprintf(id->internal, sizeof id->internal, "grow-uid");
  }
  return note(name, u(comm), u(id));
}

const char* body(Tag<Fn::GetErrorString>, const char* name, ncclResult_t result) {
  static const char* const kNames[] = {"double:success",  "double:cuda",      "double:system",
                                       "double:internal", "double:argument",  "double:usage",
                                       "double:remote",   "double:inprogress"};
  note(name, u(result));
  return (result >= 0 && result < 8) ? kNames[result] : "double:unknown";
}

const char* body(Tag<Fn::GetLastError>, const char* name, ncclComm_t comm) {
  note(name, u(comm));
  return "double:last-error";
}

void body(Tag<Fn::ResetDebugInit>, const char* name) { note(name); }

ncclResult_t body(Tag<Fn::CommGetAsyncError>, const char* name, ncclComm_t comm,
                  ncclResult_t* err) {
  ncclResult_t r = note(name, u(comm), u(err));
  FakeComm* f = fake(comm);
  if (err) *err = f ? __atomic_load_n(&f->async, __ATOMIC_RELAXED) : ncclSuccess;
  return r;
}

ncclResult_t body(Tag<Fn::CommCount>, const char* name, const ncclComm_t comm, int* count) {
  ncclResult_t r = note(name, u(comm), u(count));
  if (count && fake(comm)) *count = fake(comm)->nranks;
  return r;
}
ncclResult_t body(Tag<Fn::CommCuDevice>, const char* name, const ncclComm_t comm, int* dev) {
  ncclResult_t r = note(name, u(comm), u(dev));
  if (dev && fake(comm)) *dev = fake(comm)->dev;
  return r;
}
ncclResult_t body(Tag<Fn::CommUserRank>, const char* name, const ncclComm_t comm, int* rank) {
  ncclResult_t r = note(name, u(comm), u(rank));
  if (rank && fake(comm)) *rank = fake(comm)->rank;
  return r;
}

ncclResult_t body(Tag<Fn::CommRegister>, const char* name, const ncclComm_t comm, void* buff,
                  size_t size, void** handle) {
  if (handle) *handle = (void*)0x4a4e;
  return note(name, u(comm), u(buff), u(size), u(handle));
}
ncclResult_t body(Tag<Fn::CommWindowRegister>, const char* name, ncclComm_t comm, void* buff,
                  size_t size, ncclWindow_t* win, int flags) {
  if (win) *win = (ncclWindow_t)0x3117;
  return note(name, u(comm), u(buff), u(size), u(win), u(flags));
}

ncclResult_t body(Tag<Fn::MemAlloc>, const char* name, void** ptr, size_t size) {
  if (ptr) *ptr = (void*)0x6d656d;
  return note(name, u(ptr), u(size));
}

ncclResult_t body(Tag<Fn::RedOpCreatePreMulSum>, const char* name, ncclRedOp_t* op, void* scalar,
                  ncclDataType_t dtype, ncclScalarResidence_t residence, ncclComm_t comm) {
  if (op) *op = (ncclRedOp_t)(ncclNumOps + 3);
  return note(name, u(op), u(scalar), u(dtype), u(residence), u(comm));
}

// As in NCCL: Bcast is Broadcast in place, called through the public symbol.
ncclResult_t body(Tag<Fn::Bcast>, const char* name, void* b, size_t n, ncclDataType_t t, int root,
                  ncclComm_t comm, cudaStream_t st) {
  int wanted = t_next_result;
  t_next_result = t_inner_result;
  t_inner_result = -1;
  ncclResult_t inner = ncclBroadcast(b, b, n, t, root, comm, st);
  t_next_result = wanted;
  ncclResult_t r = note(name, u(b), u(n), u(t), u(root), u(comm), u(st));
  return r != ncclSuccess ? r : inner;
}

}  // namespace

#define DBL extern "C" __attribute__((visibility("default")))

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

// ---- the API: every function of the list, with its pnccl alias as NCCL provides ---------------

#define FR_NCCL_FN(base, ret, op, kind, rooted, reducing, torch, since, emu, ...)        \
  DBL ret nccl##base(FR_NCCL_PARAMS(__VA_ARGS__)) {                                      \
    return body(Tag<Fn::base>{}, "nccl" #base __VA_OPT__(, ) FR_NCCL_ARGS(__VA_ARGS__)); \
  }                                                                                      \
  DBL ret pnccl##base(FR_NCCL_PARAMS(__VA_ARGS__)) __attribute__((alias("nccl" #base)));
#include "fr/nccl_api.def"
