// Creation of communicators in the NCCL emulation: unique ids, joining a communicator's shared
// memory, and every way to make a communicator: init (blocking, nonblocking, grouped,
// single-process), split, shrink and grow. Each member of a communicator owns one slot of the
// segment; split exchanges (color, key) through the parent's slots, host to host, as NCCL's
// bootstrap does, independently of the collectives queued on streams. The keys of split, shrink
// and grow are derived from the parent's, so members find the same segment without talking.
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <unistd.h>

#include <algorithm>
#include <functional>

#include "fr_sim.h"
#include "fr_sim_nccl.h"
#include "fr/nccl_comm_hash.h"
#include "internal.h"

#define FRSIM_API extern "C" __attribute__((visibility("default")))

namespace frsim {
namespace {

constexpr char kIdMagic[8] = {'F', 'R', 'S', 'I', 'M', 'U', 'I', 'D'};

uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t derive_key(uint64_t parent, uint64_t tag, uint64_t n, uint64_t extra) {
  uint64_t k = mix(mix(mix(parent ^ tag) ^ n) ^ extra);
  return k == 0 ? 1 : k;
}

bool parse_id(const ncclUniqueId& id, uint64_t* key) {
  if (memcmp(id.internal, kIdMagic, sizeof kIdMagic) != 0) return false;
  memcpy(key, id.internal + 8, sizeof *key);
  return *key != 0;
}

// A config is valid when made from NCCL_CONFIG_INITIALIZER; blocking unless blocking == 0.
ncclResult_t read_config(const ncclConfig_t* config, bool dflt_blocking, bool* blocking,
                         std::string* name) {
  *blocking = dflt_blocking;
  if (config == nullptr) return ncclSuccess;
  if (config->magic != 0xcafebeef ||
      config->size < offsetof(ncclConfig_t, commName) + sizeof(char*)) {
    set_last_error(nullptr, "invalid ncclConfig_t: initialize it with NCCL_CONFIG_INITIALIZER");
    return ncclInvalidArgument;
  }
  if (config->blocking != NCCL_CONFIG_UNDEF_INT) *blocking = config->blocking != 0;
  if (config->commName != nullptr) *name = config->commName;
  return ncclSuccess;
}

void size_for(CommState* c, int n) {
  c->nranks = n;
  c->send_issued = std::vector<std::atomic<uint64_t>>(n);
  c->recv_issued = std::vector<std::atomic<uint64_t>>(n);
  c->send_done = std::vector<std::atomic<uint64_t>>(n);
  c->recv_done = std::vector<std::atomic<uint64_t>>(n);
  c->send_stamp.assign(n, 0);
  c->recv_stamp.assign(n, 0);
}

// Waits for a condition on shared memory, sleeping on this rank's bell; false once `stop` is set.
template <typename Pred>
bool wait_on_bell(CommState* c, Pred ready) {
  Slot* me = c->me();
  for (;;) {
    uint32_t bell = me->bell.load(std::memory_order_seq_cst);
    if (ready()) return true;
    if (c->stopped()) return false;
    me->sleepers.fetch_add(1, std::memory_order_seq_cst);
    if (me->bell.load(std::memory_order_seq_cst) == bell) futex_wait(&me->bell, bell, 200);
    me->sleepers.fetch_sub(1, std::memory_order_seq_cst);
  }
}

// Host-side all-gather of BootDesc over the parent's slots.
ncclResult_t boot_exchange(CommState* parent, const BootDesc& mine, std::vector<BootDesc>* all) {
  uint64_t t = ++parent->boot_stamp;
  int p = static_cast<int>(t & 1);
  Slot* me = parent->me();
  me->boot_desc[p] = mine;
  me->boot_posted.store(t, std::memory_order_release);
  for (int r = 0; r < parent->nranks; ++r)
    if (r != parent->rank) ring(parent->seg.slot(r));
  bool ok = wait_on_bell(parent, [&] {
    for (int r = 0; r < parent->nranks; ++r)
      if (parent->seg.slot(r)->boot_posted.load(std::memory_order_acquire) < t) return false;
    return true;
  });
  if (!ok) return ncclInvalidUsage;
  all->resize(parent->nranks);
  for (int r = 0; r < parent->nranks; ++r) (*all)[r] = parent->seg.slot(r)->boot_desc[p];
  return ncclSuccess;
}

ncclResult_t fail_init(CommState* c, ncclResult_t r, const std::string& msg) {
  set_last_error(c, "%s", msg.c_str());
  c->init_error.store(r);
  c->init_state.store(2, std::memory_order_release);
  return r;
}

// Joins and waits; the body of every init, run inline or on a helper thread.
ncclResult_t init_body(CommState* c, uint64_t key, int nranks, int rank, bool defer_wait) {
  std::string err;
  ncclResult_t r = comm_join(c, key, nranks, rank, &err);
  if (r != ncclSuccess) return fail_init(c, r, err);
  if (defer_wait) return ncclSuccess;
  return comm_wait_joined(c);
}

ncclResult_t init_rank(ncclComm_t* out, int nranks, const ncclUniqueId& id, int rank,
                       const ncclConfig_t* config) {
  if (out == nullptr) {
    set_last_error(nullptr, "comm pointer is NULL");
    return ncclInvalidArgument;
  }
  *out = nullptr;
  uint64_t key;
  if (nranks < 1 || rank < 0 || rank >= nranks) {
    set_last_error(nullptr, "invalid rank %d of %d", rank, nranks);
    return ncclInvalidArgument;
  }
  if (!parse_id(id, &key)) {
    set_last_error(nullptr, "invalid ncclUniqueId (not made by this ncclGetUniqueId)");
    return ncclInvalidArgument;
  }
  bool blocking;
  std::string name;
  if (ncclResult_t r = read_config(config, true, &blocking, &name); r != ncclSuccess) return r;
  auto st = std::make_shared<CommState>(nranks);
  st->cuda_dev = frsim_current_device();
  st->blocking = blocking;
  st->name = name;
  st->nccl_hash = fr::nccl_prof::nccl_id_hash(id.internal, NCCL_UNIQUE_ID_BYTES);
  bool grouped = group_depth() > 0;
  if (!blocking) {
    ncclComm_t h = new_handle(st);
    *out = h;
    CommState* c = st.get();
    return run_maybe_async(
        st, false, [c, key, nranks, rank] { return init_body(c, key, nranks, rank, false); });
  }
  ncclResult_t r = init_body(st.get(), key, nranks, rank, grouped);
  if (r != ncclSuccess) return r;
  if (grouped) group_defer_init(st);
  *out = new_handle(st);
  return ncclSuccess;
}

}  // namespace

ncclResult_t comm_join(CommState* c, uint64_t key, int nranks, int rank, std::string* err) {
  ncclResult_t r = segment_open(key, static_cast<uint32_t>(nranks), &c->seg, err);
  if (r != ncclSuccess) return r;
  Slot* s = c->seg.slot(rank);
  uint32_t zero = 0;
  if (!s->claimed.compare_exchange_strong(zero, 1)) {
    segment_unmap(&c->seg);
    *err = "rank " + std::to_string(rank) + " of " + shm_name(key) + " has already joined";
    return ncclInvalidUsage;
  }
  c->key = key;
  c->rank = rank;
  c->nranks = nranks;
  s->pid.store(getpid());
  const char* node = getenv("FRSIM_NODE");
  s->node.store(node != nullptr ? atoi(node) : 0);
  s->state.store(kSlotJoined);
  ShmHeader* h = c->seg.hdr();
  uint32_t prev = h->joined.fetch_add(1, std::memory_order_acq_rel);
  futex_wake(&h->joined);
  // Everyone has the segment mapped once all joined: the name is no longer needed.
  if (prev + 1 == static_cast<uint32_t>(nranks)) shm_unlink(shm_name(key).c_str());
  return ncclSuccess;
}

ncclResult_t comm_wait_joined(CommState* c) {
  if (c->init_state.load() == 2) return static_cast<ncclResult_t>(c->init_error.load());
  ShmHeader* h = c->seg.hdr();
  for (;;) {
    uint32_t j = h->joined.load(std::memory_order_acquire);
    if (j >= static_cast<uint32_t>(c->nranks)) break;
    if (c->stopped())
      return fail_init(c, ncclInvalidUsage, "communicator aborted during initialization");
    futex_wait(&h->joined, j, 200);
  }
  prof_comm_init(c);
  c->init_state.store(1, std::memory_order_release);
  c->wake_self();
  return ncclSuccess;
}

}  // namespace frsim

using namespace frsim;

FRSIM_API ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  if (id == nullptr) {
    set_last_error(nullptr, "uniqueId pointer is NULL");
    return ncclInvalidArgument;
  }
  uint64_t key = 0;
  while (key == 0) {
    if (getrandom(&key, sizeof key, 0) != sizeof key) {
      set_last_error(nullptr, "getrandom failed");
      return ncclSystemError;
    }
  }
  memset(id->internal, 0, sizeof id->internal);
  memcpy(id->internal, kIdMagic, sizeof kIdMagic);
  memcpy(id->internal + 8, &key, sizeof key);
  int32_t pid = getpid();
  memcpy(id->internal + 16, &pid, sizeof pid);
  return ncclSuccess;
}

FRSIM_API ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  return init_rank(comm, nranks, id, rank, nullptr);
}

FRSIM_API ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId id,
                                              int rank, ncclConfig_t* config) {
  return init_rank(comm, nranks, id, rank, config);
}

FRSIM_API ncclResult_t ncclCommInitRankScalable(ncclComm_t* comm, int nranks, int rank, int nId,
                                                ncclUniqueId* ids, ncclConfig_t* config) {
  if (nId < 1 || ids == nullptr) {
    set_last_error(nullptr, "ncclCommInitRankScalable needs at least one unique id");
    return ncclInvalidArgument;
  }
  // Every id names the same communicator; the first identifies it (each must still be valid).
  uint64_t key;
  for (int i = 0; i < nId; ++i)
    if (!parse_id(ids[i], &key)) {
      set_last_error(nullptr, "invalid ncclUniqueId at index %d", i);
      return ncclInvalidArgument;
    }
  return init_rank(comm, nranks, ids[0], rank, config);
}

FRSIM_API ncclResult_t ncclCommInitAll(ncclComm_t* comms, int ndev, const int* devlist) {
  if (comms == nullptr || ndev < 1) {
    set_last_error(nullptr, "invalid arguments to ncclCommInitAll");
    return ncclInvalidArgument;
  }
  ncclUniqueId id;
  if (ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess) return r;
  uint64_t key = 0;
  parse_id(id, &key);
  std::vector<std::shared_ptr<CommState>> states;
  for (int i = 0; i < ndev; ++i) {
    auto st = std::make_shared<CommState>(ndev);
    st->cuda_dev = devlist ? devlist[i] : i;
    st->nccl_hash = fr::nccl_prof::nccl_id_hash(id.internal, NCCL_UNIQUE_ID_BYTES);
    std::string err;
    if (ncclResult_t r = comm_join(st.get(), key, ndev, i, &err); r != ncclSuccess) {
      set_last_error(nullptr, "%s", err.c_str());
      return r;
    }
    states.push_back(st);
  }
  for (int i = 0; i < ndev; ++i) {
    if (ncclResult_t r = comm_wait_joined(states[i].get()); r != ncclSuccess) return r;
    comms[i] = new_handle(states[i]);
  }
  return ncclSuccess;
}

FRSIM_API ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                                     ncclConfig_t* config) {
  ncclResult_t err;
  auto parent = ready_comm(comm, &err);
  if (!parent) return err;
  if (newcomm == nullptr || (color < 0 && color != NCCL_SPLIT_NOCOLOR)) {
    set_last_error(parent.get(), "invalid arguments to ncclCommSplit (color %d)", color);
    return ncclInvalidArgument;
  }
  if (parent->stopped()) return ncclInvalidUsage;
  bool blocking;
  std::string name;
  if (ncclResult_t r = read_config(config, parent->blocking, &blocking, &name); r != ncclSuccess)
    return r;
  uint64_t number = parent->split_count++;
  std::shared_ptr<CommState> child;
  *newcomm = nullptr;
  if (color != NCCL_SPLIT_NOCOLOR) {
    child = std::make_shared<CommState>(0);
    child->cuda_dev = parent->cuda_dev;
    child->blocking = blocking;
    child->name = name;
    // NCCL counts its splits from 1 (the parent's split count after this one).
    if (parent->nccl_hash != 0)
      child->nccl_hash =
          fr::nccl_prof::nccl_split_hash(parent->nccl_hash, static_cast<int>(number + 1), color);
    if (!blocking) *newcomm = new_handle(child);
  }
  auto body = [parent, child, color, key, number]() -> ncclResult_t {
    BootDesc mine{1, color, key, 0, number};
    std::vector<BootDesc> all;
    if (ncclResult_t r = boot_exchange(parent.get(), mine, &all); r != ncclSuccess) {
      if (child) fail_init(child.get(), r, "parent communicator aborted during split");
      return r;
    }
    for (int r = 0; r < parent->nranks; ++r)
      if (all[r].kind != 1 || all[r].number != number) {
        // Members disagree on which split this is: as in NCCL, nobody gets a communicator.
        wait_on_bell(parent.get(), [] { return false; });
        if (child) fail_init(child.get(), ncclInvalidUsage, "split aborted");
        return ncclInvalidUsage;
      }
    if (!child) return ncclSuccess;
    std::vector<std::pair<int, int>> members;  // (key, parent rank)
    for (int r = 0; r < parent->nranks; ++r)
      if (all[r].color == color) members.emplace_back(all[r].key, r);
    std::sort(members.begin(), members.end());
    int n = static_cast<int>(members.size()), me = 0;
    for (int i = 0; i < n; ++i)
      if (members[i].second == parent->rank) me = i;
    size_for(child.get(), n);
    return init_body(child.get(),
                     derive_key(parent->key, 0x53504c4954ull, number, static_cast<uint32_t>(color)),
                     n, me, false);
  };
  if (blocking) {
    ncclResult_t r = body();
    if (r != ncclSuccess) return r;
    if (child) *newcomm = new_handle(child);
    return ncclSuccess;
  }
  if (!child) return run_maybe_async(parent, false, body);
  return run_maybe_async(child, false, body);
}

FRSIM_API ncclResult_t ncclCommShrink(ncclComm_t comm, int* exclude, int nexclude,
                                      ncclComm_t* newcomm, ncclConfig_t* config, int flags) {
  ncclResult_t err;
  auto parent = ready_comm(comm, &err);
  if (!parent) return err;
  if (newcomm == nullptr || nexclude < 0 || (nexclude > 0 && exclude == nullptr) ||
      (flags & ~(NCCL_SHRINK_DEFAULT | NCCL_SHRINK_ABORT))) {
    set_last_error(parent.get(), "invalid arguments to ncclCommShrink");
    return ncclInvalidArgument;
  }
  std::vector<int> ex(exclude, exclude + nexclude);
  std::sort(ex.begin(), ex.end());
  ex.erase(std::unique(ex.begin(), ex.end()), ex.end());
  for (int r : ex)
    if (r < 0 || r >= parent->nranks) {
      set_last_error(parent.get(), "ncclCommShrink: excluded rank %d out of range", r);
      return ncclInvalidArgument;
    }
  if (std::binary_search(ex.begin(), ex.end(), parent->rank)) {
    set_last_error(parent.get(), "ncclCommShrink: the calling rank %d is in the exclusion list",
                   parent->rank);
    return ncclInvalidArgument;
  }
  if (static_cast<int>(ex.size()) >= parent->nranks) return ncclInvalidArgument;
  if (flags & NCCL_SHRINK_ABORT) {  // end the parent's pending operations first
    parent->aborted.store(true);
    parent->wake_self();
  }
  bool blocking;
  std::string name;
  if (ncclResult_t r = read_config(config, parent->blocking, &blocking, &name); r != ncclSuccess)
    return r;
  uint64_t number = parent->shrink_count++;
  uint64_t exhash = 0;
  for (int r : ex) exhash = mix(exhash ^ static_cast<uint64_t>(r));
  int n = parent->nranks - static_cast<int>(ex.size());
  int me = parent->rank -
           static_cast<int>(std::lower_bound(ex.begin(), ex.end(), parent->rank) - ex.begin());
  auto child = std::make_shared<CommState>(n);
  child->cuda_dev = parent->cuda_dev;
  child->blocking = blocking;
  child->name = name;
  uint64_t key = derive_key(parent->key, 0x534852494e4bull, number, exhash);
  CommState* c = child.get();
  auto body = [c, key, n, me] { return init_body(c, key, n, me, false); };
  if (blocking) {
    ncclResult_t r = body();
    if (r != ncclSuccess) return r;
    *newcomm = new_handle(child);
    return ncclSuccess;
  }
  *newcomm = new_handle(child);
  return run_maybe_async(child, false, body);
}

// NCCL 2.29 additions (fr_sim_nccl.h). A grow id's key is derived from the parent's key and its
// grow counter, so existing members need no id at all.

static uint64_t grow_key(const CommState& parent, uint64_t number) {
  return derive_key(parent.key, 0x47524f57ull, number, 0);
}

FRSIM_API ncclResult_t ncclCommGetUniqueId(ncclComm_t comm, ncclUniqueId* id) {
  ncclResult_t err;
  auto c = ready_comm(comm, &err);
  if (!c) return err;
  if (id == nullptr) return ncclInvalidArgument;
  // NCCL 2.30: no new id while the previous one is unconsumed; each grow consumes one.
  if (c->grow_id_pending) {
    set_last_error(c.get(), "ncclCommGetUniqueId: the previous id was not consumed by a grow yet");
    return ncclInvalidUsage;
  }
  c->grow_id_pending = true;
  uint64_t key = grow_key(*c, c->grow_count);
  memset(id->internal, 0, sizeof id->internal);
  memcpy(id->internal, kIdMagic, sizeof kIdMagic);
  memcpy(id->internal + 8, &key, sizeof key);
  int32_t pid = getpid();
  memcpy(id->internal + 16, &pid, sizeof pid);
  return ncclSuccess;
}

FRSIM_API ncclResult_t ncclCommGrow(ncclComm_t comm, int nRanks, const ncclUniqueId* uniqueId,
                                    int rank, ncclComm_t* newcomm, ncclConfig_t* config) {
  if (newcomm == nullptr) return ncclInvalidArgument;
  if (comm == nullptr) {  // a joining rank
    if (uniqueId == nullptr) {
      set_last_error(nullptr, "ncclCommGrow: a joining rank needs the unique id");
      return ncclInvalidArgument;
    }
    return init_rank(newcomm, nRanks, *uniqueId, rank, config);
  }
  ncclResult_t err;
  auto parent = ready_comm(comm, &err);
  if (!parent) return err;
  if (rank != -1 || nRanks < parent->nranks) {
    set_last_error(parent.get(), "ncclCommGrow: existing members pass rank -1 and nRanks >= %d",
                   parent->nranks);
    return ncclInvalidArgument;
  }
  uint64_t key = grow_key(*parent, parent->grow_count);
  uint64_t given;
  if (uniqueId != nullptr && (!parse_id(*uniqueId, &given) || given != key)) {
    set_last_error(parent.get(),
                   "ncclCommGrow: the unique id was not made by ncclCommGetUniqueId for this grow");
    return ncclInvalidArgument;
  }
  ++parent->grow_count;
  parent->grow_id_pending = false;  // the id is consumed
  ncclUniqueId id{};
  memcpy(id.internal, kIdMagic, sizeof kIdMagic);
  memcpy(id.internal + 8, &key, sizeof key);
  return init_rank(newcomm, nRanks, id, parent->rank, config);
}

// pncclX: the profiling names, aliases of the functions above (the list's rows marked INIT).
#define FRSIM_ALIASES_OF_INIT
#include "aliases.h"
