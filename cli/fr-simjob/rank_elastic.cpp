// --elastic: the highest rank leaves at the elastic step; the survivors revoke the world
// communicator, shrink it without that rank and grow it back with a fresh process (started by
// fr-simjob with --join), which takes the freed rank through ncclCommGrow; then everyone splits TP,
// PP and DP again from the grown world and training goes on.
#include <dlfcn.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "rank.h"

namespace fr::simjob {

namespace {

// ncclCommGrow and ncclCommGetUniqueId are NCCL 2.30 calls the SDK's nccl.h may lack: looked up at
// run time (through the agent when it is preloaded, so they are recorded like every other call).
using GrowFn = ncclResult_t (*)(ncclComm_t, int, const ncclUniqueId*, int, ncclComm_t*,
                                ncclConfig_t*);
using GetIdFn = ncclResult_t (*)(ncclComm_t, ncclUniqueId*);

template <class Fn>
Fn nccl_entry(Rank& r, const char* name) {
  auto fn = reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, name));
  if (!fn)
    die(r, kExitNcclError,
        std::string("the loaded NCCL has no ") + name + " (--elastic needs NCCL 2.30)");
  return fn;
}

// The grown world: every member and the joiner call ncclCommGrow with the same size; the
// coordinating member (rank 0) makes the id and hands it to the joiner through the run directory.
void grow_world(Rank& r, ncclComm_t shrunk) {
  auto grow = nccl_entry<GrowFn>(r, "ncclCommGrow");
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.commName = "world";
  int n = r.shape.world();
  if (shrunk == nullptr) {  // the joiner: no parent, the coordinator's id, the freed rank
    ncclUniqueId id = read_id(r, "grow.uid", "the coordinating rank 0");
    nccl_check(r, grow(nullptr, n, &id, r.pos.rank, &r.world, &cfg), "ncclCommGrow(join)");
  } else if (r.pos.rank == 0) {
    ncclUniqueId id{};
    nccl_check(r, nccl_entry<GetIdFn>(r, "ncclCommGetUniqueId")(shrunk, &id),
               "ncclCommGetUniqueId");
    publish_id(r, "grow.uid", id);
    nccl_check(r, grow(shrunk, n, &id, -1, &r.world, &cfg), "ncclCommGrow");
  } else {
    nccl_check(r, grow(shrunk, n, nullptr, -1, &r.world, &cfg), "ncclCommGrow");
  }
  bump(r);
}

}  // namespace

[[noreturn]] void leave(Rank& r) {
  drop_graph(r);
  finalize_and_destroy(r, {&r.dp, &r.pp, &r.tp, &r.world});
  bump(r);
  std::fprintf(stderr, "fr-simjob-rank %d: leaving at step %d (--elastic)\n", r.pos.rank,
               r.shape.elastic);
  std::fflush(nullptr);
  std::_Exit(kRankExitLeft);
}

// A survivor at the elastic step: revoke the world, wait until it is quiescent, shrink it without
// the rank that left, drop the groups that held it, grow the world back and split the groups anew.
// A crash fault of this step hits between the revoke and the shrink.
void shrink_and_grow(Rank& r) {
  drop_graph(r);
  nccl_check(r, ncclCommRevoke(r.world, NCCL_REVOKE_DEFAULT), "ncclCommRevoke");
  for (ncclResult_t st = ncclInProgress; st == ncclInProgress;) {
    nccl_check(r, ncclCommGetAsyncError(r.world, &st), "ncclCommGetAsyncError");
    if (st != ncclSuccess && st != ncclInProgress)
      die(r, kExitNcclError, std::string("revoked world communicator: ") + ncclGetErrorString(st));
    if (st == ncclInProgress) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  bump(r);
  if (fault_at(r, r.shape.elastic, FaultKind::kCrash)) {
    std::fflush(nullptr);
    ::kill(::getpid(), SIGKILL);
  }
  int gone = r.shape.world() - 1;
  ncclComm_t shrunk = nullptr;
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.commName = "world-shrunk";
  nccl_check(r, ncclCommShrink(r.world, &gone, 1, &shrunk, &cfg, NCCL_SHRINK_DEFAULT),
             "ncclCommShrink");
  bump(r);
  nccl_check(r, ncclCommDestroy(r.world),
             "ncclCommDestroy(revoked world)");  // no finalize after a revoke
  r.world = nullptr;
  finalize_and_destroy(r, {&r.dp, &r.pp, &r.tp});
  grow_world(r, shrunk);
  finalize_and_destroy(r, {&shrunk});
  split_groups(r);
}

// The fresh process of the freed rank: a hang-host at the elastic step keeps it from ever calling
// ncclCommGrow; otherwise it joins and splits the groups with the others.
void join(Rank& r) {
  if (fault_at(r, r.shape.elastic, FaultKind::kHangHost)) hang_forever();
  grow_world(r, nullptr);
  split_groups(r);
}

}  // namespace fr::simjob
