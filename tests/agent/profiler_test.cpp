// The agent as NCCL's profiler plugin, in process: this test plays NCCL. It looks the versioned
// tables up as NCCL does (dlsym of ncclProfiler_v7, _v6, _v5), inits a context for a communicator
// the agent registered, with NCCL's hash of it, and reports a collective, its kernel channels,
// proxy ops and steps with their states; the flight log's channel table must show each
// connection's step and state. Also: the one process-wide activation mask, contexts released at
// finalize, grouped and nonblocking creation of communicators of one shape, a slot reused while
// the previous op's steps are in flight, the kill switch and hostile arguments.
#include <dlfcn.h>

#include <catch2/catch.hpp>

#include "fr/nccl_comm_hash.h"
#include "fr/profiler_abi.h"
#include "nccl_double.h"
#include "test_util.h"

using fr::agent_test::TempDir;
namespace ap = fr::nccl_prof;

namespace {

TempDir& log_dir() {
  static TempDir dir;
  return dir;
}
const bool g_env_ready = [] {
  setenv("FR_LOG_DIR", log_dir().path().c_str(), 1);
  unsetenv("FR_DISABLE");
  unsetenv("FR_PROFILER");
  return true;
}();

std::vector<fr_chan_entry> chans() {
  auto logs = log_dir().logs();
  REQUIRE(logs.size() == 1);
  auto r = fr::log::read_log(logs[0]);
  INFO(r.message);
  REQUIRE(r.ok());
  return r.log->chans;
}

const fr_chan_entry* find(const std::vector<fr_chan_entry>& v, int ordinal_rank, int channel,
                          int kind, int peer) {
  for (const auto& e : v)
    if (e.rank == ordinal_rank && e.channel == channel && e.kind == kind && e.peer == peer)
      return &e;
  return nullptr;
}

// What fr asks for by default (docs/agent.md): no kernel channels.
constexpr int kDefaultMask = int(ap::kEvColl | ap::kEvP2p | ap::kEvProxyOp | ap::kEvProxyStep);

ncclUniqueId make_id() {
  ncclUniqueId id;
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  return id;
}

// NCCL's hash of the communicator made with `id`: what NCCL passes to init.
uint64_t hash_of(const ncclUniqueId& id) {
  return fr::nccl_prof::nccl_id_hash(id.internal, NCCL_UNIQUE_ID_BYTES);
}

ncclComm_t make_comm(const ncclUniqueId& id, int nranks, int rank) {
  ncclComm_t c = nullptr;
  REQUIRE(ncclCommInitRank(&c, nranks, id, rank) == ncclSuccess);
  return c;
}

// fr's id of the communicator `comm` (its entry in the log's table).
uint64_t fr_id_of(ncclComm_t comm) {
  auto logs = log_dir().logs();
  REQUIRE(logs.size() == 1);
  auto r = fr::log::read_log(logs[0]);
  REQUIRE(r.ok());
  for (const fr_comm_entry& e : r.log->comms)
    if (e.handle == uint64_t(uintptr_t(comm))) return e.id;
  FAIL("no entry for the communicator");
  return 0;
}

template <typename Table>
const Table* table(const char* name) {
  auto* t = static_cast<const Table*>(dlsym(RTLD_DEFAULT, name));
  REQUIRE(t != nullptr);
  return t;
}

// NCCL calls init inside the communicator's init call (or at ncclGroupEnd, or on its own thread),
// with its hash of the communicator; the mask it leaves is the one process-wide int.
template <typename Table>
void* init_ctx(const Table* t, uint64_t hash, int rank, int nranks, int* mask,
               const char* name = "c") {
  void* ctx = nullptr;
  REQUIRE(t->init(&ctx, hash, mask, name, 1, nranks, rank, nullptr) == 0);
  REQUIRE(ctx != nullptr);
  CHECK(*mask == kDefaultMask);
  return ctx;
}

// One collective on two channels as NCCL reports it: a send and a receive proxy op per channel;
// channel 0 finishes two of four steps, then its receive waits for data at step 2; channel 1
// finishes everything.

template <typename Table, typename Descr>
void play(const Table* t, void* ctx, int rank, int nranks) {
  auto start = [&](uint64_t type, void* parent, auto fill) {
    Descr d;
    memset(&d, 0, sizeof d);
    d.type = type;
    d.parentObj = parent;
    d.rank = rank;
    fill(d);
    void* h = nullptr;
    REQUIRE(t->startEvent(ctx, &h, &d) == 0);
    return h;
  };
  void* coll = start(ap::kEvColl, nullptr, [](Descr& d) {
    d.coll.seqNumber = 7;
    d.coll.func = "AllReduce";
  });
  REQUIRE(coll != nullptr);
  for (int ch = 0; ch < 2; ++ch) {
    void* k = start(ap::kEvKernelCh, coll, [&](Descr& d) { d.kernelCh.channelId = uint8_t(ch); });
    for (int send = 0; send < 2; ++send) {
      void* op = start(ap::kEvProxyOp, coll, [&](Descr& d) {
        d.proxyOp.pid = getpid();
        d.proxyOp.channelId = uint8_t(ch);
        d.proxyOp.peer = (rank + 1) % nranks;
        d.proxyOp.nSteps = 4;
        d.proxyOp.isSend = send;
      });
      REQUIRE(op != nullptr);
      const int last = ch == 0 ? 3 : 4;  // channel 0: step 2 never ends
      for (int s = 0; s < last; ++s) {
        void* st = start(ap::kEvProxyStep, op,
                         [&](Descr& d) { d.proxyStep.step = 100 + s; });  // absolute ids
        REQUIRE(st != nullptr);
        ap::StateArgs a{};
        a.proxyStep.transSize = 1024;
        t->recordEventState(st, send ? ap::kStSendGpuWait : ap::kStRecvWait, &a);
        if (ch == 0 && s == 2) break;
        t->recordEventState(st, send ? ap::kStSendWait : ap::kStRecvGpuWait, &a);
        t->stopEvent(st);
      }
      if (ch == 1) t->stopEvent(op);
    }
    if (ch == 1) {
      ap::StateArgs a{};
      t->recordEventState(k, ap::kStKernelChStop, &a);
      t->stopEvent(k);
    }
  }
  t->stopEvent(coll);
}

}  // namespace

TEST_CASE("profiler plugin: v5, v6 and v7 tables write channel progress", "[agent][profiler]") {
  auto* v7 = table<ap::PluginV7>("ncclProfiler_v7");
  auto* v6 = table<ap::PluginV6>("ncclProfiler_v6");
  auto* v5 = table<ap::PluginV5>("ncclProfiler_v5");
  CHECK(std::string(v7->name) == "fr");
  CHECK(std::string(v6->name) == "fr");
  int mask = 0;  // NCCL's ncclProfilerEventMask
  std::vector<ncclComm_t> comms;
  std::vector<void*> ctxs;
  for (int rank : {1, 2, 3}) {
    const ncclUniqueId id = make_id();
    if (rank == 1) ctxs.push_back(init_ctx(v7, hash_of(id), rank, 4, &mask));
    if (rank == 2) ctxs.push_back(init_ctx(v6, hash_of(id), rank, 4, &mask));
    if (rank == 3) ctxs.push_back(init_ctx(v5, hash_of(id), rank, 4, &mask));
    comms.push_back(make_comm(id, 4, rank));
  }
  play<ap::PluginV7, ap::DescrV7>(v7, ctxs[0], 1, 4);
  play<ap::PluginV6, ap::DescrV6>(v6, ctxs[1], 2, 4);
  play<ap::PluginV5, ap::DescrV5>(v5, ctxs[2], 3, 4);
  const auto v = chans();
  for (int rank : {1, 2, 3}) {
    INFO("rank " << rank);
    const fr_chan_entry* r0 = find(v, rank, 0, FR_CHAN_RECV, (rank + 1) % 4);
    REQUIRE(r0 != nullptr);
    CHECK(r0->done == 2);
    CHECK(r0->posted == 3);
    CHECK(r0->nsteps == 4);
    CHECK(r0->state == FR_CHANST_RECV_WAIT);
    CHECK(r0->state_step == 2);
    CHECK(r0->op == FR_OP_ALLREDUCE);
    CHECK(r0->op_seq == 7);
    CHECK(r0->ops_started == 1);
    CHECK(r0->ops_done == 0);
    CHECK(r0->bytes == 2048);
    CHECK(r0->comm_id == fr_id_of(comms[size_t(rank - 1)]));
    const fr_chan_entry* s0 = find(v, rank, 0, FR_CHAN_SEND, (rank + 1) % 4);
    REQUIRE(s0 != nullptr);
    CHECK(s0->state == FR_CHANST_SEND_GPU_WAIT);
    const fr_chan_entry* r1 = find(v, rank, 1, FR_CHAN_RECV, (rank + 1) % 4);
    REQUIRE(r1 != nullptr);
    CHECK(r1->done == 4);
    CHECK(r1->state == FR_CHANST_DONE);
    CHECK(r1->ops_done == 1);
    const fr_chan_entry* k0 = find(v, rank, 0, FR_CHAN_KERNEL, -1);
    const fr_chan_entry* k1 = find(v, rank, 1, FR_CHAN_KERNEL, -1);
    REQUIRE(k0 != nullptr);
    REQUIRE(k1 != nullptr);
    CHECK(k0->state == FR_CHANST_RUNNING);
    CHECK(k1->state == FR_CHANST_STOPPED);
  }
  for (ncclComm_t c : comms) ncclCommDestroy(c);
}

TEST_CASE("profiler plugin: one mask for the process, never turned off by a later init",
          "[agent][profiler]") {
  auto* v6 = table<ap::PluginV6>("ncclProfiler_v6");
  int mask = 0;  // NCCL's ncclProfilerEventMask, the same int for every init
  void* ctx = nullptr;
  // An init the agent cannot serve before any was served: the mask stays as NCCL holds it.
  REQUIRE(v6->init(&ctx, 1, &mask, "x", 1, 4, 9, nullptr) == 0);
  CHECK(ctx == nullptr);
  CHECK(mask == 0);
  void* served = init_ctx(v6, 2, 0, 2, &mask);
  REQUIRE(mask == kDefaultMask);
  // Then: a bad rank, the kill switch, and FR_PROFILER_KERNEL_CH asking for more. Each gets a
  // null context or the same mask; none changes the int every communicator reads.
  REQUIRE(v6->init(&ctx, 3, &mask, "x", 1, 4, 9, nullptr) == 0);
  CHECK(ctx == nullptr);
  CHECK(mask == kDefaultMask);
  setenv("FR_PROFILER", "0", 1);
  REQUIRE(v6->init(&ctx, 4, &mask, "x", 1, 2, 1, nullptr) == 0);
  unsetenv("FR_PROFILER");
  CHECK(ctx == nullptr);
  CHECK(mask == kDefaultMask);
  setenv("FR_PROFILER_KERNEL_CH", "1", 1);
  void* more = init_ctx(v6, 5, 1, 2, &mask);
  unsetenv("FR_PROFILER_KERNEL_CH");
  CHECK(more != served);
  // NCCL starts events with the null context it was given: they are ignored.
  ap::DescrV6 d;
  memset(&d, 0, sizeof d);
  d.type = ap::kEvProxyOp;
  d.proxyOp.peer = 1;
  void* h = reinterpret_cast<void*>(1);
  CHECK(v6->startEvent(nullptr, &h, &d) == 0);
  CHECK(h == nullptr);
  CHECK(v6->finalize(nullptr) == 0);
  CHECK(v6->finalize(served) == 0);
  CHECK(v6->finalize(more) == 0);
}

TEST_CASE("profiler plugin: kernel channels only when asked for", "[agent][profiler]") {
  auto* v5 = table<ap::PluginV5>("ncclProfiler_v5");
  setenv("FR_PROFILER_KERNEL_CH", "1", 1);
  void* ctx = nullptr;
  int mask = 0;
  REQUIRE(v5->init(&ctx, 9, &mask, "c", 1, 2, 0, nullptr) == 0);
  unsetenv("FR_PROFILER_KERNEL_CH");
  REQUIRE(ctx != nullptr);
  CHECK(mask == (kDefaultMask | int(ap::kEvKernelCh)));
}

TEST_CASE("profiler plugin: contexts go back at finalize (no limit on communicators made)",
          "[agent][profiler]") {
  auto* v7 = table<ap::PluginV7>("ncclProfiler_v7");
  int mask = 0;
  void* keep = init_ctx(v7, 1, 0, 2, &mask);
  for (int i = 0; i < 10000; ++i) {
    void* ctx = nullptr;
    REQUIRE(v7->init(&ctx, uint64_t(100 + i), &mask, "c", 1, 2, 0, nullptr) == 0);
    REQUIRE(ctx != nullptr);
    REQUIRE(mask == kDefaultMask);
    REQUIRE(v7->finalize(ctx) == 0);
  }
  CHECK(v7->finalize(keep) == 0);
}

namespace {

// One proxy op on (channel 0, peer 1) of rank 0 of 2, returned with its step handles.
struct OpRun {
  void* op;
  std::vector<void*> steps;
};
OpRun start_op(const ap::PluginV6* t, void* ctx, int nsteps, int first_step, int started) {
  ap::DescrV6 d;
  memset(&d, 0, sizeof d);
  d.type = ap::kEvProxyOp;
  d.proxyOp.pid = getpid();
  d.proxyOp.peer = 1;
  d.proxyOp.nSteps = nsteps;
  OpRun r{};
  REQUIRE(t->startEvent(ctx, &r.op, &d) == 0);
  REQUIRE(r.op != nullptr);
  for (int s = 0; s < started; ++s) {
    memset(&d, 0, sizeof d);
    d.type = ap::kEvProxyStep;
    d.parentObj = r.op;
    d.proxyStep.step = first_step + s;
    void* h = nullptr;
    REQUIRE(t->startEvent(ctx, &h, &d) == 0);
    REQUIRE(h != nullptr);
    ap::StateArgs a{};
    t->recordEventState(h, ap::kStRecvWait, &a);
    r.steps.push_back(h);
  }
  return r;
}

const fr_chan_entry& slot0() {
  static std::vector<fr_chan_entry> v;
  v = chans();
  const fr_chan_entry* e = find(v, 0, 0, FR_CHAN_RECV, 1);
  REQUIRE(e != nullptr);
  return *e;
}

}  // namespace

TEST_CASE("profiler plugin: a reused slot and unmatched step starts never read as stuck",
          "[agent][profiler]") {
  auto* v6 = table<ap::PluginV6>("ncclProfiler_v6");
  int mask = 0;
  void* ctx = init_ctx(v6, 77, 0, 2, &mask);
  // Op 1: four steps, two finished, steps 2 and 3 still in flight when op 2 takes the slot.
  OpRun a = start_op(v6, ctx, 4, 100, 4);
  v6->stopEvent(a.steps[0]);
  v6->stopEvent(a.steps[1]);
  OpRun b = start_op(v6, ctx, 2, 104, 2);
  // Op 1's late steps finish and record states: op 2's view does not move.
  ap::StateArgs args{};
  v6->recordEventState(a.steps[2], ap::kStRecvGpuWait, &args);
  v6->stopEvent(a.steps[2]);
  v6->stopEvent(a.steps[3]);
  v6->stopEvent(a.op);
  {
    const fr_chan_entry& e = slot0();
    CHECK(e.posted == 2);
    CHECK(e.done == 0);
    CHECK(e.state == FR_CHANST_RECV_WAIT);
    CHECK(e.state_step == 0);
    CHECK(e.ops_started == 2);
  }
  v6->stopEvent(b.steps[0]);
  v6->stopEvent(b.steps[1]);
  CHECK(slot0().done == 2);
  CHECK(slot0().state == FR_CHANST_DONE);
  v6->stopEvent(b.op);
  // Op 3: NCCL starts 12 steps and never stops step 0 (more starts than stops). Once the
  // connection is more than 8 steps (NCCL_STEPS) past it, it is over, not the step waited on.
  OpRun c = start_op(v6, ctx, 12, 200, 12);
  for (size_t s = 1; s < c.steps.size(); ++s) v6->stopEvent(c.steps[s]);
  CHECK(slot0().done == 12);
  CHECK(slot0().state == FR_CHANST_DONE);
  v6->stopEvent(c.op);
  // Op 4: step 1 of 3 never stops, but the op does: the op is over, nothing is waiting.
  OpRun d = start_op(v6, ctx, 3, 300, 3);
  v6->stopEvent(d.steps[0]);
  v6->stopEvent(d.steps[2]);
  CHECK(slot0().done == 1);
  CHECK(slot0().state == FR_CHANST_RECV_WAIT);
  v6->stopEvent(d.op);
  CHECK(slot0().done == 3);
  CHECK(slot0().state == FR_CHANST_DONE);
  CHECK(slot0().ops_done == 4);
  v6->finalize(ctx);
}

TEST_CASE("profiler plugin: hostile arguments are refused, never followed", "[agent][profiler]") {
  auto* v5 = static_cast<const ap::PluginV5*>(dlsym(RTLD_DEFAULT, "ncclProfiler_v5"));
  REQUIRE(v5 != nullptr);
  void* ctx = reinterpret_cast<void*>(1);
  int mask = 0;
  // A rank outside its communicator: no context for it.
  REQUIRE(v5->init(&ctx, 1, &mask, "x", 1, 4, 9, nullptr) == 0);
  CHECK(mask == 0);
  CHECK(ctx == nullptr);
  CHECK(v5->init(nullptr, 1, &mask, "x", 1, 4, 0, nullptr) == 0);
  ctx = reinterpret_cast<void*>(1);
  CHECK(v5->init(&ctx, 1, nullptr, "x", 1, 4, 0, nullptr) == 0);
  CHECK(ctx == nullptr);
  REQUIRE(v5->init(&ctx, 2, &mask, nullptr, 1, 2, 0, nullptr) == 0);
  REQUIRE(ctx != nullptr);
  ap::DescrV5 d;
  memset(&d, 0, sizeof d);
  void* h = reinterpret_cast<void*>(1);
  CHECK(v5->startEvent(ctx, &h, nullptr) == 0);
  CHECK(h == nullptr);
  d.type = ap::kEvProxyOp;
  d.proxyOp.peer = 5;  // outside the communicator
  d.proxyOp.channelId = 1;
  CHECK(v5->startEvent(ctx, &h, &d) == 0);
  CHECK(h == nullptr);
  d.proxyOp.peer = 1;
  d.proxyOp.channelId = 200;  // no such channel
  CHECK(v5->startEvent(ctx, &h, &d) == 0);
  CHECK(h == nullptr);
  d.type = ap::kEvProxyStep;  // a step whose parent is not a proxy op of ours
  d.parentObj = &d;
  CHECK(v5->startEvent(ctx, &h, &d) == 0);
  CHECK(h == nullptr);
  // Handles that are not ours: nothing happens.
  CHECK(v5->stopEvent(nullptr) == 0);
  CHECK(v5->stopEvent(reinterpret_cast<void*>(uintptr_t(0x03ffffffffffffffull))) == 0);
  CHECK(v5->recordEventState(reinterpret_cast<void*>(uintptr_t(0x02ffffffffffffffull)),
                             ap::kStRecvWait, nullptr) == 0);
  CHECK(v5->finalize(&d) == 0);  // not a context of ours: ignored
  CHECK(v5->finalize(ctx) == 0);
}

TEST_CASE("profiler plugin: FR_PROFILER=0 turns it off", "[agent][profiler]") {
  auto* v6 = static_cast<const ap::PluginV6*>(dlsym(RTLD_DEFAULT, "ncclProfiler_v6"));
  REQUIRE(v6 != nullptr);
  setenv("FR_PROFILER", "0", 1);
  void* ctx = reinterpret_cast<void*>(1);
  int mask = 0;
  CHECK(v6->init(&ctx, 3, &mask, "c", 1, 2, 0, nullptr) == 0);
  unsetenv("FR_PROFILER");
  CHECK(mask == 0);
  CHECK(ctx == nullptr);
}

namespace {

// A proxy op on channel 0 to peer 0 for `ctx`, so the context makes a slot.
void touch(const ap::PluginV6* t, void* ctx) {
  ap::DescrV6 d;
  memset(&d, 0, sizeof d);
  d.type = ap::kEvProxyOp;
  d.proxyOp.pid = getpid();
  d.proxyOp.peer = 0;
  void* h = nullptr;
  REQUIRE(t->startEvent(ctx, &h, &d) == 0);
  REQUIRE(h != nullptr);
}

uint64_t slot_comm(uint64_t hash) {
  for (const fr_chan_entry& e : chans())
    if (e.comm_hash == hash) return e.comm_id;
  FAIL("no slot of the context");
  return 0;
}

}  // namespace

// NCCL calls init where it connects the communicator: at ncclGroupEnd for grouped creation, on
// its own thread for nonblocking creation, so after the agent registered it, and in any order.
// Every communicator here has the same shape (rank 1 of 4); only NCCL's hash tells them apart.
TEST_CASE("profiler plugin: events go to the communicator NCCL names, by its hash",
          "[agent][profiler]") {
  auto* v6 = table<ap::PluginV6>("ncclProfiler_v6");
  int mask = 0;
  // Grouped: two communicators made in one group, NCCL's inits after ncclGroupEnd, in reverse.
  const ncclUniqueId ida = make_id(), idb = make_id();
  ncclComm_t a = nullptr, b = nullptr;
  REQUIRE(ncclGroupStart() == ncclSuccess);
  REQUIRE(ncclCommInitRank(&a, 4, ida, 1) == ncclSuccess);
  REQUIRE(ncclCommInitRank(&b, 4, idb, 1) == ncclSuccess);
  REQUIRE(ncclGroupEnd() == ncclSuccess);
  void* cb = init_ctx(v6, hash_of(idb), 1, 4, &mask);
  void* ca = init_ctx(v6, hash_of(ida), 1, 4, &mask);
  // Nonblocking: the init call returns in progress; NCCL's init comes later.
  const ncclUniqueId idc = make_id();
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t c = nullptr;
  fr_double_next_result(ncclInProgress);
  REQUIRE(ncclCommInitRankConfig(&c, 4, idc, 1, &config) == ncclInProgress);
  // A split of `a` (NCCL: the parent's hash, its first split, color 5), and one whose hash the
  // agent cannot know (a shrink) but that has a commName.
  ncclComm_t s = nullptr, k = nullptr;
  REQUIRE(ncclCommSplit(a, 5, 1, &s, nullptr) == ncclSuccess);
  ncclConfig_t named = NCCL_CONFIG_INITIALIZER;
  named.commName = "tp-shrunk";
  int excluded[] = {0};
  REQUIRE(ncclCommShrink(b, excluded, 1, &k, &named, 0) == ncclSuccess);
  void* cc = init_ctx(v6, hash_of(idc), 1, 4, &mask);
  const uint64_t split_hash = fr::nccl_prof::nccl_split_hash(hash_of(ida), 1, 5);
  void* cs = init_ctx(v6, split_hash, 1, 2, &mask);
  void* ck = init_ctx(v6, 0xabcdef, 1, 3, &mask, "tp-shrunk");
  // A context whose communicator the agent never registered: no id rather than a wrong one.
  void* cx = init_ctx(v6, 0x1234, 1, 4, &mask);
  for (void* ctx : {ca, cb, cc, cs, ck, cx}) touch(v6, ctx);
  CHECK(slot_comm(hash_of(ida)) == fr_id_of(a));
  CHECK(slot_comm(hash_of(idb)) == fr_id_of(b));
  CHECK(slot_comm(hash_of(idc)) == fr_id_of(c));
  CHECK(slot_comm(split_hash) == fr_id_of(s));
  CHECK(slot_comm(0xabcdef) == fr_id_of(k));
  CHECK(slot_comm(0x1234) == 0);
  CHECK(fr_id_of(a) != fr_id_of(b));
  for (void* ctx : {ca, cb, cc, cs, ck, cx}) CHECK(v6->finalize(ctx) == 0);
}
