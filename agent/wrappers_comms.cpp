// The wrappers of NCCL's communicator calls. Creation (the init family, split, shrink, grow)
// records the call and registers the new communicator in the table with its identity: a hash of
// the unique id for the init family, a hash of (parent id, the parent's per-kind call counter,
// color or exclusion list) for the derived ones, so every member computes the same id without
// talking to the others (docs/agent.md). The lifecycle calls (finalize, destroy, abort, revoke,
// suspend, resume) record the call and move the entry's state; GetAsyncError is recorded once per
// distinct error, and its success releases a nonblocking communicator's pending launches.
#include <string.h>

#include "profiler.h"
#include "wrappers.h"

using namespace fr::agent;

namespace {

constexpr uint32_t kConfigMagic = 0xcafebeef;

// NCCL_COMM_BLOCKING overrides every config, as in NCCL; then the config's `blocking` field.
bool config_nonblocking(const ncclConfig_t* config, bool inherited) {
  if (g_comms.env_blocking != 0) return g_comms.env_blocking == 2;
  if (config == nullptr || config->magic != kConfigMagic ||
      config->size < offsetof(ncclConfig_t, blocking) + sizeof(int))
    return inherited;
  if (config->blocking == NCCL_CONFIG_UNDEF_INT) return inherited;
  return config->blocking == 0;
}

void config_name(const ncclConfig_t* config, char* out) {
  if (config == nullptr || config->magic != kConfigMagic ||
      config->size < offsetof(ncclConfig_t, commName) + sizeof(const char*) ||
      config->commName == nullptr)
    return;
  size_t n = strnlen(config->commName, FR_NAME_LEN - 1);
  memcpy(out, config->commName, n);
  out[n] = '\0';
}

uint64_t unique_id_hash(const ncclUniqueId* ids, int n) {
  uint64_t h = kHashSeed;
  for (int i = 0; i < n; ++i) h = hash_bytes(h, ids[i].internal, NCCL_UNIQUE_ID_BYTES);
  return hash_finish(h);
}

struct NewComm {
  uint64_t id;
  uint64_t nccl_hash;  // NCCL's own hash of it (what its profiler init gets); 0: not known
  uint64_t parent_id;
  uint64_t derive_index;
  int64_t color;
  int32_t key;
  int32_t nranks;
  int32_t rank;
  fr_comm_origin origin;
  uint32_t id_flags;
  bool nonblocking;
  const ncclConfig_t* config;
  uint64_t excluded[2];  // shrink: bitmap of the excluded parent ranks below 128 (the record's
                         // buffers; the others follow in CommShrinkExcluded records)
};

// After a creating call: a table entry for the new communicator (or a failed one).
void register_comm(const NewComm& n, ncclComm_t handle, ncclResult_t res, uint64_t call_ns) {
  bool made = (res == ncclSuccess || res == ncclInProgress) && handle != nullptr;
  fr_comm_entry e = {};
  e.id = n.id;
  e.parent_id = n.parent_id;
  e.handle = (uint64_t)(uintptr_t)handle;
  e.create_ns = call_ns;
  e.color = n.color;
  e.key = n.key;
  e.size = n.nranks > 0 ? n.nranks : -1;
  e.rank = n.rank;
  e.cuda_dev = -1;
  e.origin = n.origin;
  e.flags = n.id_flags | (n.nonblocking ? FR_COMM_F_NONBLOCKING : 0u);
  e.derive_index = n.derive_index;
  config_name(n.config, e.name);
  uint32_t state = !made                ? FR_COMM_FAILED
                   : res == ncclSuccess ? FR_COMM_LIVE
                                        : FR_COMM_INITIALIZING;
  int32_t slot = comm_register(e, state, made ? handle : nullptr, n.nonblocking);
  if (slot < 0) return;
  __atomic_store_n(&g_comms.priv[slot].nccl_hash, n.nccl_hash, __ATOMIC_RELEASE);
  if (made && res == ncclSuccess) comm_learn_shape(slot, handle);
  const fr_comm_entry& c = g_log.comms[slot];
  int32_t size = __atomic_load_n(&c.size, __ATOMIC_RELAXED),
          rank = __atomic_load_n(&c.rank, __ATOMIC_RELAXED);
  if (made && size > 0 && rank >= 0) prof::claim_context(n.id, n.nccl_hash, e.name, size, rank);
}

inline constexpr auto no_follow = [](const fr_record&) {};

// A creating call: `prepare` computes the new communicator's identity from its parent's entry
// (inside the guard), the call's record is written, `follow` writes the records that complete it
// (a shrink's excluded ranks from 128 on), then the call runs and the new entry is registered.
template <class Prepare, class Call, class Follow = decltype(no_follow)>
ncclResult_t run_create(fr_op op, const void* parent, Prepare prepare, ncclComm_t* out, Call call,
                        Follow follow = no_follow) {
  Scope s;
  if (!s.active) return call();
  CommRef c = comm_ref(parent);
  NewComm n = prepare(c);
  fr_record r = new_record(op, c);
  if (parent == nullptr)
    r.comm_id = n.id;
  else
    r.aux = n.id;
  r.count = n.nranks > 0 ? (uint64_t)n.nranks : 0;
  r.sendbuff = n.excluded[0];
  r.recvbuff = n.excluded[1];
  record_begin(r);
  follow(r);
  ncclResult_t res = call();
  finish(r, res);
  ncclComm_t made = out != nullptr ? *out : nullptr;
  bool ok = res == ncclSuccess || res == ncclInProgress;
  if (made == nullptr && ok) r.aux = 0;  // e.g. a split with NCCL_SPLIT_NOCOLOR
  if (made != nullptr ? ok : !ok) register_comm(n, made, res, r.call_ns);
  record_update(r);
  return res;
}

template <class Call>
ncclResult_t run_lifecycle(fr_op op, ncclComm_t comm, uint32_t state, Call call) {
  Scope s;
  if (!s.active) return call();
  CommRef c = comm_ref(comm);
  fr_record r = new_record(op, c);
  record_begin(r);
  ncclResult_t res = call();
  finish(r, res);
  if ((res == ncclSuccess || res == ncclInProgress) && c.slot >= 0) {
    comm_set_state(c.slot, state);
    if (state != FR_COMM_LIVE && state != FR_COMM_SUSPENDED) drop_deferred(c.slot);
  }
  record_update(r);
  return res;
}

NewComm parent_derived(const CommRef& p, fr_comm_origin origin, uint64_t* counter) {
  NewComm n = {};
  n.parent_id = p.id;
  n.origin = origin;
  n.id_flags = FR_COMM_F_ID_DERIVED;
  n.nonblocking = p.nonblocking;
  n.rank = -1;
  n.nranks = -1;
  if (p.slot >= 0 && counter != nullptr)
    n.derive_index = __atomic_add_fetch(counter, 1, __ATOMIC_RELAXED);
  return n;
}

// The prepare step of the init family (run_create): the id is the unique id's hash; blocking or
// not as NCCL_COMM_BLOCKING or the config says, known once the agent has started.
auto init_family(uint64_t id, const ncclUniqueId* first, int nranks, int rank,
                 fr_comm_origin origin, const ncclConfig_t* config) {
  NewComm n = {};
  n.id = id;
  n.nccl_hash = first != nullptr ? prof::nccl_id_hash(first->internal, NCCL_UNIQUE_ID_BYTES) : 0;
  n.nranks = nranks;
  n.rank = rank;
  n.origin = origin;
  n.id_flags = FR_COMM_F_ID_FROM_UNIQUE_ID;
  n.config = config;
  return [n](const CommRef&) mutable {
    n.nonblocking = config_nonblocking(n.config, false);
    return n;
  };
}

}  // namespace

// ---- communicator creation ---------------------------------------------------------------------

FR_API ncclResult_t ncclGetUniqueId(ncclUniqueId* uniqueId) {
  FR_REAL_OR_FAIL(ncclGetUniqueId);
  return run_api(
      FR_OP_GET_UNIQUE_ID, nullptr, [&] { return real(uniqueId); }, no_before,
      [&](fr_record& r, const CommRef&, ncclResult_t res) {
        // The id of the communicator an init with this unique id will make.
        if (res == ncclSuccess && uniqueId != nullptr) r.comm_id = unique_id_hash(uniqueId, 1);
      });
}

FR_API ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) {
  FR_REAL_OR_FAIL(ncclCommInitRank);
  return run_create(
      FR_OP_COMM_INIT_RANK, nullptr,
      init_family(unique_id_hash(&commId, 1), &commId, nranks, rank, FR_ORIGIN_INIT_RANK, nullptr),
      comm, [&] { return real(comm, nranks, commId, rank); });
}

FR_API ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId,
                                           int rank, ncclConfig_t* config) {
  FR_REAL_OR_FAIL(ncclCommInitRankConfig);
  return run_create(FR_OP_COMM_INIT_RANK_CONFIG, nullptr,
                    init_family(unique_id_hash(&commId, 1), &commId, nranks, rank,
                                FR_ORIGIN_INIT_RANK_CONFIG, config),
                    comm, [&] { return real(comm, nranks, commId, rank, config); });
}

FR_API ncclResult_t ncclCommInitRankScalable(ncclComm_t* newcomm, int nranks, int myrank, int nId,
                                             ncclUniqueId* commIds, ncclConfig_t* config) {
  FR_REAL_OR_FAIL(ncclCommInitRankScalable);
  const bool ids = commIds != nullptr && nId > 0 && nId <= 4096;
  uint64_t id = ids ? unique_id_hash(commIds, nId) : 1;
  return run_create(FR_OP_COMM_INIT_RANK_SCALABLE, nullptr,
                    init_family(id, ids ? &commIds[0] : nullptr, nranks, myrank,
                                FR_ORIGIN_INIT_RANK_SCALABLE, config),
                    newcomm, [&] { return real(newcomm, nranks, myrank, nId, commIds, config); });
}

// ncclCommInitAll makes ndev communicators of one clique inside this process; no unique id is
// visible, so the id is a hash of a per-process call counter and the device list.
FR_API ncclResult_t ncclCommInitAll(ncclComm_t* comm, int ndev, const int* devlist) {
  FR_REAL_OR_FAIL(ncclCommInitAll);
  Scope s;
  if (!s.active) return real(comm, ndev, devlist);
  uint64_t call = __atomic_add_fetch(&g_comms.init_all_calls, 1, __ATOMIC_RELAXED);
  uint64_t h = hash_u64(hash_bytes(kHashSeed, "InitAll", 7), call);
  h = hash_u64(h, (uint64_t)(int64_t)ndev);
  if (devlist != nullptr && ndev > 0 && ndev <= 65536)
    h = hash_bytes(h, devlist, (size_t)ndev * sizeof(int));
  NewComm n = {};
  n.id = hash_finish(h);
  n.nranks = ndev;
  n.origin = FR_ORIGIN_INIT_ALL;
  n.nonblocking = config_nonblocking(nullptr, false);
  fr_record r = new_record(FR_OP_COMM_INIT_ALL, CommRef{-1, n.id, nullptr, false});
  r.count = ndev > 0 ? (uint64_t)ndev : 0;
  record_begin(r);
  ncclResult_t res = real(comm, ndev, devlist);
  finish(r, res);
  if (res == ncclSuccess && comm != nullptr) {
    for (int i = 0; i < ndev; ++i) {
      n.rank = i;
      register_comm(n, comm[i], res, r.call_ns);
    }
  } else if (res != ncclSuccess) {
    n.rank = -1;
    register_comm(n, nullptr, res, r.call_ns);
  }
  record_update(r);
  return res;
}

FR_API ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                                  ncclConfig_t* config) {
  FR_REAL_OR_FAIL(ncclCommSplit);
  auto prepare = [&](const CommRef& p) {
    NewComm n = parent_derived(p, FR_ORIGIN_SPLIT,
                               p.slot >= 0 ? &g_comms.priv[p.slot].split_calls : nullptr);
    n.color = color;
    n.key = key;
    n.nonblocking = config_nonblocking(config, p.nonblocking);
    n.config = config;
    n.id = color == NCCL_SPLIT_NOCOLOR
               ? 0
               : hash_finish(hash_u64(hash_u64(hash_u64(kHashSeed, p.id), n.derive_index),
                                      (uint64_t)(int64_t)color));
    // NCCL hashes (parent's hash, its split count from 1, color); grows count as splits (2.30).
    if (p.slot >= 0) {
      uint32_t k = __atomic_add_fetch(&g_comms.priv[p.slot].nccl_children, 1u, __ATOMIC_RELAXED);
      uint64_t ph = __atomic_load_n(&g_comms.priv[p.slot].nccl_hash, __ATOMIC_ACQUIRE);
      if (ph != 0 && color != NCCL_SPLIT_NOCOLOR)
        n.nccl_hash = prof::nccl_split_hash(ph, int(k), color);
    }
    return n;
  };
  return run_create(FR_OP_COMM_SPLIT, comm, prepare, newcomm,
                    [&] { return real(comm, color, key, newcomm, config); });
}

// The excluded parent ranks from 128 on: one CommShrinkExcluded record per block of 128 ranks
// that holds any, in ascending order, right after the CommShrink record `shrink` (flight_log.h).
// Blocks are found by scanning the list once per block: no allocation, and a shrink is rare.
void write_excluded_blocks(const fr_record& shrink, const int* list, int n) {
  if (list == nullptr || n <= 0) return;
  uint32_t cap = FR_SHRINK_EXCLUDED_MAX_RECORDS;
  if (g_log.ring_cap / 4 < cap) cap = g_log.ring_cap / 4;
  int64_t block = 0;  // the last block written (0: ranks below 128, in the CommShrink itself)
  for (uint32_t written = 0; written < cap; ++written) {
    int64_t next = INT64_MAX;
    for (int i = 0; i < n; ++i) {
      int64_t b = list[i] >= 0 ? list[i] / 128 : -1;
      if (b > block && b < next) next = b;
    }
    if (next == INT64_MAX) return;
    block = next;
    fr_record x = shrink;
    x.op = FR_OP_COMM_SHRINK_EXCLUDED;
    x.count = 0;
    x.peer = (int32_t)(block * 128);
    x.sendbuff = x.recvbuff = 0;
    for (int i = 0; i < n; ++i) {
      if (list[i] < 0 || list[i] / 128 != block) continue;
      int bit = list[i] % 128;
      (bit < 64 ? x.sendbuff : x.recvbuff) |= 1ull << (bit % 64);
    }
    x.result = ncclSuccess;
    x.flags &= ~FR_REC_F_IN_CALL;
    x.duration_ns = 0;
    record_begin(x);
  }
}

// The record carries what the analysis needs to tell a member that never came from one that was
// excluded: count = the shrunk size (when the parent's is known), sendbuff and recvbuff = the
// excluded parent ranks below 128 as a bitmap (bit r of sendbuff, bit r-64 of recvbuff); the
// CommShrinkExcluded records after it carry the others (write_excluded_blocks).
FR_API ncclResult_t ncclCommShrink(ncclComm_t comm, int* excludeRanksList, int excludeRanksCount,
                                   ncclComm_t* newcomm, ncclConfig_t* config, int shrinkFlags) {
  FR_REAL_OR_FAIL(ncclCommShrink);
  auto prepare = [&](const CommRef& p) {
    NewComm n = parent_derived(p, FR_ORIGIN_SHRINK,
                               p.slot >= 0 ? &g_comms.priv[p.slot].shrink_calls : nullptr);
    // The exclusion list, order-independent: every member passes the same set.
    uint64_t excl = 0;
    int32_t parent_size =
        p.entry != nullptr ? __atomic_load_n(&p.entry->size, __ATOMIC_RELAXED) : -1;
    int32_t distinct = 0;
    bool countable = excludeRanksCount <= 4096;  // a longer list is not worth counting here
    if (excludeRanksList != nullptr && excludeRanksCount > 0)
      for (int i = 0; i < excludeRanksCount; ++i) {
        int x = excludeRanksList[i];
        excl += hash_finish(hash_u64(kHashSeed, (uint64_t)(int64_t)x));
        if (x >= 0 && x < 128) n.excluded[x / 64] |= 1ull << (x % 64);
        bool repeated = false;
        for (int j = 0; countable && j < i && !repeated; ++j) repeated = excludeRanksList[j] == x;
        distinct += repeated ? 0 : 1;
      }
    if (countable && parent_size > distinct) n.nranks = parent_size - distinct;
    n.color = (int64_t)excl;
    n.nonblocking = config_nonblocking(config, p.nonblocking);
    n.config = config;
    n.id = hash_finish(hash_u64(hash_u64(hash_u64(kHashSeed, p.id), n.derive_index), excl));
    return n;
  };
  return run_create(
      FR_OP_COMM_SHRINK, comm, prepare, newcomm,
      [&] { return real(comm, excludeRanksList, excludeRanksCount, newcomm, config, shrinkFlags); },
      [&](const fr_record& r) { write_excluded_blocks(r, excludeRanksList, excludeRanksCount); });
}

// Grow: members of `comm` derive the id from (parent, grow counter, new size); joining ranks
// (comm == NULL) only have the unique id, so theirs is its hash (see docs/agent.md).
FR_API ncclResult_t ncclCommGrow(ncclComm_t comm, int nRanks, const ncclUniqueId* uniqueId,
                                 int rank, ncclComm_t* newcomm, ncclConfig_t* config) {
  FR_REAL_OR_FAIL(ncclCommGrow);
  auto prepare = [&](const CommRef& p) {
    NewComm n = {};
    if (comm != nullptr) {
      n = parent_derived(p, FR_ORIGIN_GROW,
                         p.slot >= 0 ? &g_comms.priv[p.slot].grow_calls : nullptr);
      if (p.slot >= 0)
        __atomic_add_fetch(&g_comms.priv[p.slot].nccl_children, 1u, __ATOMIC_RELAXED);
      n.id = hash_finish(
          hash_u64(hash_u64(hash_u64(kHashSeed, p.id), n.derive_index), (uint64_t)(int64_t)nRanks));
    } else {
      n.origin = FR_ORIGIN_GROW;
      n.id = uniqueId != nullptr ? unique_id_hash(uniqueId, 1) : 1;
      n.id_flags = FR_COMM_F_ID_FROM_UNIQUE_ID;
      n.rank = rank;
    }
    n.nranks = nRanks;
    n.nonblocking = config_nonblocking(config, p.nonblocking);
    n.config = config;
    return n;
  };
  return run_create(FR_OP_COMM_GROW, comm, prepare, newcomm,
                    [&] { return real(comm, nRanks, uniqueId, rank, newcomm, config); });
}

FR_API ncclResult_t ncclCommGetUniqueId(ncclComm_t comm, ncclUniqueId* uniqueId) {
  FR_REAL_OR_FAIL(ncclCommGetUniqueId);
  return run_api(
      FR_OP_COMM_GET_UNIQUE_ID, comm, [&] { return real(comm, uniqueId); }, no_before,
      [&](fr_record& r, const CommRef&, ncclResult_t res) {
        if (res == ncclSuccess && uniqueId != nullptr) r.aux = unique_id_hash(uniqueId, 1);
      });
}

// ---- communicator lifecycle --------------------------------------------------------------------

FR_API ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  FR_REAL_OR_FAIL(ncclCommFinalize);
  return run_lifecycle(FR_OP_COMM_FINALIZE, comm, FR_COMM_FINALIZED, [&] { return real(comm); });
}

FR_API ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  FR_REAL_OR_FAIL(ncclCommDestroy);
  return run_lifecycle(FR_OP_COMM_DESTROY, comm, FR_COMM_DESTROYED, [&] { return real(comm); });
}

FR_API ncclResult_t ncclCommAbort(ncclComm_t comm) {
  FR_REAL_OR_FAIL(ncclCommAbort);
  return run_lifecycle(FR_OP_COMM_ABORT, comm, FR_COMM_ABORTED, [&] { return real(comm); });
}

FR_API ncclResult_t ncclCommRevoke(ncclComm_t comm, int revokeFlags) {
  FR_REAL_OR_FAIL(ncclCommRevoke);
  return run_lifecycle(FR_OP_COMM_REVOKE, comm, FR_COMM_REVOKED,
                       [&] { return real(comm, revokeFlags); });
}

FR_API ncclResult_t ncclCommSuspend(ncclComm_t comm, int flags) {
  FR_REAL_OR_FAIL(ncclCommSuspend);
  return run_lifecycle(FR_OP_COMM_SUSPEND, comm, FR_COMM_SUSPENDED,
                       [&] { return real(comm, flags); });
}

FR_API ncclResult_t ncclCommResume(ncclComm_t comm) {
  FR_REAL_OR_FAIL(ncclCommResume);
  return run_lifecycle(FR_OP_COMM_RESUME, comm, FR_COMM_LIVE, [&] { return real(comm); });
}

// Not recorded unless it reports an error. Its success is also the moment a nonblocking
// communicator's pending work is known to be launched (the agent never asks on its own).
FR_API ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
  FR_REAL_OR_FAIL(ncclCommGetAsyncError);
  Scope s;
  if (!s.active) return real(comm, asyncError);
  uint64_t call_ns = now_ns();
  ncclResult_t res = real(comm, asyncError);
  if (res != ncclSuccess || asyncError == nullptr) return res;
  CommRef c = comm_ref(comm);
  if (c.slot < 0) return res;
  ncclResult_t err = *asyncError;
  if (err == ncclSuccess) {
    if (!__atomic_load_n(&g_comms.priv[c.slot].ready, __ATOMIC_ACQUIRE)) {
      comm_learn_shape(c.slot, comm);
      uint32_t expected = FR_COMM_INITIALIZING;
      __atomic_compare_exchange_n(&c.entry->state, &expected, (uint32_t)FR_COMM_LIVE, false,
                                  __ATOMIC_RELEASE, __ATOMIC_RELAXED);
    }
    release_deferred(c.slot);
  } else if (err != ncclInProgress) {
    int32_t prev = __atomic_exchange_n(&c.entry->async_error, (int32_t)err, __ATOMIC_ACQ_REL);
    drop_deferred(c.slot);
    if (prev != (int32_t)err) {
      // Recorded once per distinct error; `result` holds the asynchronous error.
      fr_record r = new_record(FR_OP_COMM_GET_ASYNC_ERROR, c);
      r.call_ns = call_ns;
      r.duration_ns = elapsed_since(call_ns);
      r.result = (int32_t)err;
      r.flags &= ~FR_REC_F_IN_CALL;
      record_begin(r);
    }
  }
  return res;
}
