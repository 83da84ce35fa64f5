// The agent as NCCL's profiler plugin, in process: this test plays NCCL. It looks the versioned
// tables up as NCCL does (dlsym of ncclProfiler_v6, ncclProfiler_v5), inits a context for a
// communicator the agent registered, and reports a collective, its kernel channels, proxy ops and
// steps with their states; the flight log's channel table must show each connection's step and
// state. Also: the kill switch, a context whose events find no slot, and hostile arguments.
#include <dlfcn.h>

#include <catch2/catch.hpp>

#include "nccl_double.h"
#include "profiler_abi.h"
#include "test_util.h"

using fr::agent_test::TempDir;
namespace ap = fr::agent::prof;

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

ncclComm_t make_comm(int nranks, int rank) {
  ncclUniqueId id;
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  ncclComm_t c = nullptr;
  REQUIRE(ncclCommInitRank(&c, nranks, id, rank) == ncclSuccess);
  return c;
}

// One collective on two channels as NCCL reports it: a send and a receive proxy op per channel;
// channel 0 finishes two of four steps, then its receive waits for data at step 2; channel 1
// finishes everything.
// NCCL calls init inside the communicator's init call, before the agent registers it.
template <typename Table>
void* init_ctx(const Table* t, int rank, int nranks) {
  void* ctx = nullptr;
  int mask = 0;
  REQUIRE(t->init(&ctx, 0x5eed + rank, &mask, "c", 1, nranks, rank, nullptr) == 0);
  REQUIRE(ctx != nullptr);
  CHECK((mask & ap::kEvProxyStep) != 0);
  CHECK((mask & ap::kEvKernelCh) != 0);
  return ctx;
}

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

TEST_CASE("profiler plugin: v5 and v6 tables write channel progress", "[agent][profiler]") {
  auto* v6 = static_cast<const ap::PluginV6*>(dlsym(RTLD_DEFAULT, "ncclProfiler_v6"));
  auto* v5 = static_cast<const ap::PluginV5*>(dlsym(RTLD_DEFAULT, "ncclProfiler_v5"));
  REQUIRE(v6 != nullptr);
  REQUIRE(v5 != nullptr);
  CHECK(std::string(v6->name) == "fr");
  void* c6 = init_ctx(v6, 1, 4);
  ncclComm_t a = make_comm(4, 1);
  void* c5 = init_ctx(v5, 2, 4);
  ncclComm_t b = make_comm(4, 2);
  play<ap::PluginV6, ap::DescrV6>(v6, c6, 1, 4);
  play<ap::PluginV5, ap::DescrV5>(v5, c5, 2, 4);
  const auto v = chans();
  for (int rank : {1, 2}) {
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
    CHECK(r0->comm_id != 0);  // the communicator the agent registered claimed the context
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
  ncclCommDestroy(a);
  ncclCommDestroy(b);
}

TEST_CASE("profiler plugin: hostile arguments are refused, never followed", "[agent][profiler]") {
  auto* v5 = static_cast<const ap::PluginV5*>(dlsym(RTLD_DEFAULT, "ncclProfiler_v5"));
  REQUIRE(v5 != nullptr);
  void* ctx = nullptr;
  int mask = -1;
  // A rank outside its communicator: the feature is off for it.
  REQUIRE(v5->init(&ctx, 1, &mask, "x", 1, 4, 9, nullptr) == 0);
  CHECK(mask == 0);
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
  CHECK(v5->finalize(ctx) == 0);
}

TEST_CASE("profiler plugin: FR_PROFILER=0 turns it off", "[agent][profiler]") {
  auto* v6 = static_cast<const ap::PluginV6*>(dlsym(RTLD_DEFAULT, "ncclProfiler_v6"));
  REQUIRE(v6 != nullptr);
  setenv("FR_PROFILER", "0", 1);
  void* ctx = reinterpret_cast<void*>(1);
  int mask = -1;
  CHECK(v6->init(&ctx, 3, &mask, "c", 1, 2, 0, nullptr) == 0);
  unsetenv("FR_PROFILER");
  CHECK(mask == 0);
  CHECK(ctx == nullptr);
}
