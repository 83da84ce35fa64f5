// The coordinator server's lock order, lowest rank first: a thread takes these locks only in
// increasing rank, which RankedMutex (common/ranked_mutex.h) checks at every acquisition.
//   kPageBuild   CoordinatorPages (daemon/http): one live page built at a time; the build takes
//                the state's lock under it.
//   kState       CoordinatorServer::Impl::mu: the state, the stream and upload registries, the
//                writers' queues.
//   kQueues      Impl::queue_mu: the fan-out queue and the heartbeat queue, taken under mu (a
//                dispatch) or alone (gRPC's threads handing a heartbeat over, the fan-out
//                threads, the applier).
//   kStreamWrite NodeStream's write lock, taken under mu, under queue_mu, or alone.
//   kPageCache   CoordinatorPages: the live page last built; taken alone or under kPageBuild.
//   kAssemblyWork One dump set's assembly, between the assembler and the thread doing it (taken
//                alone: the assembler lets go of it before it takes mu).
#pragma once

namespace fr::daemon::lock_order {

enum Rank : int {
  kPageBuild = 1,
  kState = 2,
  kQueues = 3,
  kStreamWrite = 4,
  kPageCache = 5,
  kAssemblyWork = 6,
};

}  // namespace fr::daemon::lock_order
