// Tests of the NCCL emulation: multi-process scenarios (each rank a frsim_rank process, see
// rank_main.cpp, checking its own results), and single-process checks of ncclCommInitAll,
// argument validation and the shared-memory names.
#include <catch2/catch.hpp>
#include <cuda.h>
#include <fr_sim.h>
#include <fr_sim_nccl.h>
#include <nccl.h>

#include <stdlib.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "spawn.h"

using frsim_test::run_ranks;

namespace {

void require_all_ok(const std::vector<frsim_test::RankResult>& res) {
  for (size_t r = 0; r < res.size(); ++r) {
    INFO("rank " << r << " output:\n" << res[r].output);
    CHECK(res[r].status == 0);
  }
  // Every member joined, so every segment name was unlinked.
  CHECK(frsim_test::leftover_shm(frsim_test::last_prefix()).empty());
}

}  // namespace

TEST_CASE("collectives give correct results for every type and op", "[sim][nccl]") {
  for (int n : {2, 3, 8}) {
    INFO("ranks " << n);
    require_all_ok(run_ranks("colls", n));
  }
}

TEST_CASE("point-to-point rings and pairs and self and all-to-all", "[sim][nccl]") {
  for (int n : {2, 5, 8}) {
    INFO("ranks " << n);
    require_all_ok(run_ranks("p2p", n));
  }
}

TEST_CASE("split and shrink", "[sim][nccl]") {
  for (int n : {2, 4, 7}) {
    INFO("ranks " << n);
    require_all_ok(run_ranks("split", n));
  }
}

TEST_CASE("nonblocking init and finalize report ncclInProgress then ncclSuccess", "[sim][nccl]") {
  require_all_ok(run_ranks("nonblocking", 4));
}

TEST_CASE("a mismatched collective hangs (1.5 s watched) until aborted", "[sim][nccl]") {
  for (const char* field : {"count", "dtype", "op", "root", "kind", "p2p-count"}) {
    INFO("mismatch in " << field);
    require_all_ok(run_ranks("mismatch", 3, field));
  }
}

TEST_CASE("a dead member leaves the others blocked (1.5 s watched), abort unblocks them",
          "[sim][nccl]") {
  auto res = run_ranks("dead", 4);
  for (size_t r = 0; r < res.size(); ++r) {
    INFO("rank " << r << " output:\n" << res[r].output);
    CHECK(res[r].status == 0);
  }
}

TEST_CASE("a peer's abort is reported as ncclRemoteError", "[sim][nccl]") {
  require_all_ok(run_ranks("abort", 3));
}

TEST_CASE("revoke ends pending work (hung 0.5 s before) and refuses new work", "[sim][nccl]") {
  require_all_ok(run_ranks("revoke", 3));
}

TEST_CASE("a stalled stream delays the collective on every member", "[sim][nccl]") {
  require_all_ok(run_ranks("order", 3));
}

TEST_CASE("fail-slow pacing: a slowed GPU and a slowed link lengthen the collective",
          "[sim][nccl]") {
  for (int n : {2, 3})
    require_all_ok(run_ranks("pace", n, "", 120, {"FRSIM_KERNEL_US=20000", "FRSIM_STEP_US=20000"}));
}

TEST_CASE("ncclBcast calls ncclBroadcast through the exported symbol", "[sim][nccl]") {
  std::string lib = std::string(FR_BUILD_DIR) + "/tests/libfrsim_interpose.so";
  // Under AddressSanitizer the preloaded interposer comes before the runtime: allowed here.
  require_all_ok(run_ranks("bcast-interpose", 2, "", 120,
                           {"LD_PRELOAD=" + lib, "ASAN_OPTIONS=verify_asan_link_order=0"}));
}

TEST_CASE("a profiler plugin is loaded as each NCCL release loads it, an unknown version is not",
          "[sim][nccl]") {
  const std::string dir = std::string(FR_BUILD_DIR) + "/tests/";
  for (int n : {2, 3}) {
    INFO("ranks " << n);
    // A v5-only plugin loads as every release from 2.28 to 2.32 would load it.
    for (const char* release : {"2.28", "2.30", "2.32"})
      require_all_ok(run_ranks("prof", n, "loaded:5", 120,
                               {"NCCL_PROFILER_PLUGIN=" + dir + "libfrsim_prof_v5.so",
                                std::string("FRSIM_NCCL_VERSION=") + release}));
    // One with v5, v6 and v7: each release takes the newest it knows.
    const std::pair<const char*, const char*> order[] = {{"2.28.9", "loaded:5"},
                                                         {"2.29.2", "loaded:6"},
                                                         {"2.30.7", "loaded:6"},
                                                         {"2.31.1", "loaded:6"},
                                                         {"2.32.3", "loaded:7"}};
    for (const auto& [release, want] : order)
      require_all_ok(run_ranks("prof", n, want, 120,
                               {"NCCL_PROFILER_PLUGIN=" + dir + "libfrsim_prof_v567.so",
                                std::string("FRSIM_NCCL_VERSION=") + release}));
    require_all_ok(
        run_ranks("prof", n, "off", 120, {"NCCL_PROFILER_PLUGIN=" + dir + "libfrsim_prof_v9.so"}));
    require_all_ok(
        run_ranks("prof", n, "off", 120, {"NCCL_PROFILER_PLUGIN=" + dir + "no-such-plugin.so"}));
  }
}

TEST_CASE("channels run NCCL's step counts and KernelCh adds a kernel channel to every kernel",
          "[sim][nccl]") {
  const std::string plugin =
      "NCCL_PROFILER_PLUGIN=" + std::string(FR_BUILD_DIR) + "/tests/libfrsim_prof_v5.so";
  const std::string with_kch = "FRSIM_TEST_PROF_MASK=" + std::to_string(2 | 8 | 16 | 64);
  const std::string without_kch = "FRSIM_TEST_PROF_MASK=" + std::to_string(2 | 8 | 16);
  // A ring all-reduce: 2(n-1) chunk steps per loop, 2 slices each; one loop for 4 bytes.
  for (int n : {2, 4}) {
    INFO("ranks " << n);
    const std::string want = std::to_string(4 * (n - 1));
    require_all_ok(run_ranks("prof-steps", n, "net,one," + want + ",3", 120, {plugin, with_kch}));
    require_all_ok(
        run_ranks("prof-steps", n, "net,one," + want + ",0", 120, {plugin, without_kch}));
    // One node: no proxy ops, yet a kernel channel on every channel when KernelCh is asked for.
    require_all_ok(run_ranks("prof-steps", n, "node,one,0,3", 120, {plugin, with_kch}));
    require_all_ok(run_ranks("prof-steps", n, "node,one,0,0", 120, {plugin, without_kch}));
  }
  // 9 MiB over 2 ranks and 2 channels of 2 MiB chunks: two loops of 2 steps, 2 slices each.
  require_all_ok(run_ranks("prof-steps", 2, "net,big,8,3", 120, {plugin, with_kch}));
}

TEST_CASE("a training-shaped loop over split communicators runs 16 ranks", "[sim][nccl]") {
  require_all_ok(run_ranks("train", 16, "50"));
}

TEST_CASE("grow adds a rank, suspend refuses work until resume", "[sim][nccl]") {
  char tmpl[] = "/tmp/frsim_grow_XXXXXX";
  std::string dir = mkdtemp(tmpl);
  std::string path = dir + "/grow.id";
  require_all_ok(run_ranks("grow", 4, path));
  unlink(path.c_str());
  rmdir(dir.c_str());
}

TEST_CASE("GPU progress markers around a collective move as on a GPU (none early in 50 and 200 ms)",
          "[sim][nccl]") {
  require_all_ok(run_ranks("markers", 3));
}

TEST_CASE("ncclCommInitAll drives several ranks from one process", "[sim][nccl]") {
  const int n = 4;
  std::vector<ncclComm_t> comms(n);
  int devs[n] = {3, 2, 1, 0};
  REQUIRE(ncclCommInitAll(comms.data(), n, devs) == ncclSuccess);
  std::vector<CUstream> streams(n);
  std::vector<std::vector<double>> bufs(n, std::vector<double>(5000));
  for (int i = 0; i < n; ++i) {
    REQUIRE(cuStreamCreate(&streams[i], 0) == CUDA_SUCCESS);
    for (auto& v : bufs[i]) v = i + 1;
  }
  REQUIRE(ncclGroupStart() == ncclSuccess);
  for (int i = 0; i < n; ++i)
    REQUIRE(ncclAllReduce(bufs[i].data(), bufs[i].data(), 5000, ncclFloat64, ncclSum, comms[i],
                          streams[i]) == ncclSuccess);
  REQUIRE(ncclGroupEnd() == ncclSuccess);
  for (int i = 0; i < n; ++i) {
    REQUIRE(cuStreamSynchronize(streams[i]) == CUDA_SUCCESS);
    CHECK(bufs[i][4999] == 10.0);
    int dev = -1, rank = -1, count = -1;
    REQUIRE(ncclCommCuDevice(comms[i], &dev) == ncclSuccess);
    REQUIRE(ncclCommUserRank(comms[i], &rank) == ncclSuccess);
    REQUIRE(ncclCommCount(comms[i], &count) == ncclSuccess);
    CHECK(dev == devs[i]);
    CHECK(rank == i);
    CHECK(count == n);
  }
  // Several ranks of one process on one stream in one group also progress together.
  std::vector<int32_t> x(n, 0), y(n, -1);
  REQUIRE(ncclGroupStart() == ncclSuccess);
  for (int i = 0; i < n; ++i) {
    x[i] = 10 * i;
    REQUIRE(ncclSend(&x[i], 1, ncclInt32, (i + 1) % n, comms[i], streams[0]) == ncclSuccess);
    REQUIRE(ncclRecv(&y[i], 1, ncclInt32, (i + n - 1) % n, comms[i], streams[0]) == ncclSuccess);
  }
  REQUIRE(ncclGroupEnd() == ncclSuccess);
  REQUIRE(cuStreamSynchronize(streams[0]) == CUDA_SUCCESS);
  for (int i = 0; i < n; ++i) CHECK(y[i] == 10 * ((i + n - 1) % n));
  for (int i = 0; i < n; ++i) {
    CHECK(ncclCommDestroy(comms[i]) == ncclSuccess);
    cuStreamDestroy(streams[i]);
  }
}

TEST_CASE("grouped init of several ranks from one thread and InitRankScalable", "[sim][nccl]") {
  ncclUniqueId id;
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  ncclComm_t c[2] = {nullptr, nullptr};
  REQUIRE(ncclGroupStart() == ncclSuccess);
  REQUIRE(ncclCommInitRank(&c[0], 2, id, 0) == ncclSuccess);  // would block outside a group
  REQUIRE(ncclCommInitRank(&c[1], 2, id, 1) == ncclSuccess);
  REQUIRE(ncclGroupEnd() == ncclSuccess);
  std::vector<float> a(100, 1.0f), b(100, 2.0f);
  REQUIRE(ncclGroupStart() == ncclSuccess);
  REQUIRE(ncclAllReduce(a.data(), a.data(), 100, ncclFloat32, ncclSum, c[0], nullptr) ==
          ncclSuccess);
  REQUIRE(ncclAllReduce(b.data(), b.data(), 100, ncclFloat32, ncclSum, c[1], nullptr) ==
          ncclSuccess);
  REQUIRE(ncclGroupEnd() == ncclSuccess);
  REQUIRE(cuStreamSynchronize(nullptr) == CUDA_SUCCESS);
  CHECK(a[0] == 3.0f);
  CHECK(b[99] == 3.0f);
  for (auto x : c) CHECK(ncclCommDestroy(x) == ncclSuccess);

  ncclUniqueId ids[2];
  REQUIRE(ncclGetUniqueId(&ids[0]) == ncclSuccess);
  REQUIRE(ncclGetUniqueId(&ids[1]) == ncclSuccess);
  ncclComm_t one;
  REQUIRE(ncclCommInitRankScalable(&one, 1, 0, 2, ids, nullptr) == ncclSuccess);
  int n = 0;
  REQUIRE(ncclCommCount(one, &n) == ncclSuccess);
  CHECK(n == 1);
  CHECK(ncclCommDestroy(one) == ncclSuccess);
  ncclUniqueId bad[1] = {};
  CHECK(ncclCommInitRankScalable(&one, 1, 0, 1, bad, nullptr) == ncclInvalidArgument);
  CHECK(ncclCommInitRankScalable(&one, 1, 0, 0, ids, nullptr) == ncclInvalidArgument);
}

TEST_CASE("bad arguments get clear errors, never a crash", "[sim][nccl]") {
  int v = 0;
  CHECK(ncclGetVersion(&v) == ncclSuccess);
  CHECK(v == 22809);
  CHECK(ncclGetVersion(nullptr) == ncclInvalidArgument);
  ncclUniqueId bogus{};
  ncclComm_t c = nullptr;
  CHECK(ncclCommInitRank(&c, 2, bogus, 0) == ncclInvalidArgument);
  CHECK(std::string(ncclGetLastError(nullptr)).find("ncclUniqueId") != std::string::npos);
  ncclUniqueId id;
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  CHECK(ncclCommInitRank(&c, 2, id, 5) == ncclInvalidArgument);
  CHECK(ncclCommInitRank(nullptr, 2, id, 0) == ncclInvalidArgument);
  auto fake = reinterpret_cast<ncclComm_t>(&v);
  float x = 0;
  CHECK(ncclAllReduce(&x, &x, 1, ncclFloat32, ncclSum, fake, nullptr) == ncclInvalidArgument);
  CHECK(ncclCommDestroy(fake) == ncclInvalidArgument);
  int n = 0;
  CHECK(ncclCommCount(fake, &n) == ncclInvalidArgument);
  CHECK(ncclGroupEnd() == ncclInvalidUsage);
  CHECK(std::string(ncclGetErrorString(ncclInProgress)).find("progress") != std::string::npos);
  ncclConfig_t bad{};
  CHECK(ncclCommInitRankConfig(&c, 1, id, 0, &bad) == ncclInvalidArgument);
}

TEST_CASE("a one-rank communicator works and the pnccl names are the same functions",
          "[sim][nccl]") {
  ncclUniqueId id;
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  ncclComm_t c;
  REQUIRE(ncclCommInitRank(&c, 1, id, 0) == ncclSuccess);
  std::vector<float> a(10, 3.0f), b(10, 0);
  REQUIRE(pncclAllReduce(a.data(), b.data(), 10, ncclFloat32, ncclSum, c, nullptr) == ncclSuccess);
  REQUIRE(cuStreamSynchronize(nullptr) == CUDA_SUCCESS);
  CHECK(b[9] == 3.0f);
  CHECK(reinterpret_cast<void*>(&pncclAllReduce) == reinterpret_cast<void*>(&ncclAllReduce));
  void* mem = nullptr;
  REQUIRE(ncclMemAlloc(&mem, 4096) == ncclSuccess);
  void* h = nullptr;
  REQUIRE(ncclCommRegister(c, mem, 4096, &h) == ncclSuccess);
  CHECK(ncclCommDeregister(c, h) == ncclSuccess);
  CHECK(ncclCommDeregister(c, h) == ncclInvalidArgument);
  ncclWindow_t w = nullptr;
  REQUIRE(ncclCommWindowRegister(c, mem, 4096, &w, NCCL_WIN_DEFAULT) == ncclSuccess);
  CHECK(ncclCommWindowDeregister(c, w) == ncclSuccess);
  CHECK(ncclMemFree(mem) == ncclSuccess);
  // Graph capture: a captured collective runs at each launch of the graph.
  CUstream s;
  REQUIRE(cuStreamCreate(&s, 0) == CUDA_SUCCESS);
  REQUIRE(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL) == CUDA_SUCCESS);
  std::vector<int32_t> g(4, 2);
  REQUIRE(ncclAllReduce(g.data(), g.data(), 4, ncclInt32, ncclProd, c, s) == ncclSuccess);
  CUgraph graph;
  REQUIRE(cuStreamEndCapture(s, &graph) == CUDA_SUCCESS);
  CHECK(g[0] == 2);
  CUgraphExec exec;
  REQUIRE(cuGraphInstantiate(&exec, graph, 0) == CUDA_SUCCESS);
  REQUIRE(cuGraphLaunch(exec, s) == CUDA_SUCCESS);
  REQUIRE(cuGraphLaunch(exec, s) == CUDA_SUCCESS);
  REQUIRE(cuStreamSynchronize(s) == CUDA_SUCCESS);
  CHECK(g[0] == 2);  // product over one rank
  // Ordinary work after the replays still matches (sequence numbers advanced per launch).
  REQUIRE(ncclAllReduce(a.data(), b.data(), 10, ncclFloat32, ncclMax, c, s) == ncclSuccess);
  REQUIRE(cuStreamSynchronize(s) == CUDA_SUCCESS);
  CHECK(b[0] == 3.0f);
  cuGraphExecDestroy(exec);
  cuGraphDestroy(graph);
  CHECK(ncclCommFinalize(c) == ncclSuccess);
  CHECK(ncclCommDestroy(c) == ncclSuccess);
  cuStreamDestroy(s);
}

TEST_CASE(
    "the NCCL 2.30 calls torch links answer as NCCL does without RMA, multimem or device "
    "kernels",
    "[sim][nccl]") {
  std::vector<ncclComm_t> comms(2);
  REQUIRE(ncclCommInitAll(comms.data(), 2, nullptr) == ncclSuccess);
  ncclComm_t c = comms[0];
  int v = 0;
  auto fake = reinterpret_cast<ncclComm_t>(&v);

  // Memory statistics: no GPU bytes of NCCL's own; "suspended" follows suspend and resume.
  uint64_t value = 7;
  for (auto st : {ncclStatGpuMemSuspend, ncclStatGpuMemPersist, ncclStatGpuMemTotal}) {
    value = 7;
    CHECK(ncclCommMemStats(c, st, &value) == ncclSuccess);
    CHECK(value == 0);
  }
  CHECK(ncclCommMemStats(c, ncclStatGpuMemSuspended, &value) == ncclSuccess);
  CHECK(value == 0);
  REQUIRE(ncclCommSuspend(c, 0) == ncclSuccess);
  CHECK(ncclCommMemStats(c, ncclStatGpuMemSuspended, &value) == ncclSuccess);
  CHECK(value == 1);
  REQUIRE(ncclCommResume(c) == ncclSuccess);
  CHECK(ncclCommMemStats(c, ncclStatGpuMemSuspended, &value) == ncclSuccess);
  CHECK(value == 0);
  CHECK(ncclCommMemStats(c, static_cast<ncclCommMemStat_t>(9), &value) == ncclInvalidArgument);
  CHECK(ncclCommMemStats(c, ncclStatGpuMemTotal, nullptr) == ncclInvalidArgument);
  CHECK(ncclCommMemStats(fake, ncclStatGpuMemTotal, &value) == ncclInvalidArgument);

  // Windows: the user's pointer back; a peer's address only for the rank itself (the LSA team
  // is the rank alone), NULL for another; no multimem address.
  std::vector<char> mem(4096);
  ncclWindow_t w = nullptr;
  REQUIRE(ncclCommWindowRegister(c, mem.data(), mem.size(), &w, NCCL_WIN_DEFAULT) == ncclSuccess);
  void* p = nullptr;
  CHECK(ncclWinGetUserPtr(c, w, &p) == ncclSuccess);
  CHECK(p == mem.data());
  CHECK(ncclWinGetUserPtr(c, w, nullptr) == ncclInvalidArgument);
  CHECK(ncclWinGetUserPtr(c, nullptr, &p) == ncclInvalidArgument);
  CHECK(ncclWinGetUserPtr(fake, w, &p) == ncclInvalidArgument);
  CHECK(ncclGetPeerDevicePointer(w, 16, 0, &p) == ncclSuccess);
  CHECK(p == mem.data() + 16);
  CHECK(ncclGetPeerDevicePointer(w, 4096, 0, &p) == ncclInvalidArgument);
  CHECK(ncclGetPeerDevicePointer(w, 16, 1, &p) == ncclSuccess);
  CHECK(p == nullptr);
  CHECK(ncclGetPeerDevicePointer(w, 16, 2, &p) == ncclInvalidArgument);
  CHECK(ncclGetPeerDevicePointer(w, 16, -1, &p) == ncclInvalidArgument);
  CHECK(ncclGetPeerDevicePointer(w, 16, 0, nullptr) == ncclInvalidArgument);
  CHECK(ncclGetLsaDevicePointer(w, 8, 0, &p) == ncclSuccess);
  CHECK(p == mem.data() + 8);
  CHECK(ncclGetLsaDevicePointer(w, 8, 1, &p) == ncclInvalidArgument);  // the team is the rank
  CHECK(ncclGetLsaDevicePointer(w, 4096, 0, &p) == ncclInvalidArgument);
  p = &v;
  CHECK(ncclGetLsaMultimemDevicePointer(w, 0, &p) == ncclSuccess);
  CHECK(p == nullptr);
  CHECK(ncclGetLsaMultimemDevicePointer(nullptr, 0, &p) == ncclInvalidArgument);
  CHECK(ncclGetLsaMultimemDevicePointer(reinterpret_cast<ncclWindow_t>(&v), 0, &p) ==
        ncclInvalidArgument);
  CHECK(reinterpret_cast<void*>(&pncclGetPeerDevicePointer) ==
        reinterpret_cast<void*>(&ncclGetPeerDevicePointer));
  CHECK(reinterpret_cast<void*>(&pncclGetLsaDevicePointer) ==
        reinterpret_cast<void*>(&ncclGetLsaDevicePointer));
  CHECK(reinterpret_cast<void*>(&pncclGetLsaMultimemDevicePointer) ==
        reinterpret_cast<void*>(&ncclGetLsaMultimemDevicePointer));

  // One-sided calls: refused, as NCCL refuses a communicator without host RMA.
  float x = 1;
  CHECK(ncclPutSignal(&x, 1, ncclFloat32, 1, w, 0, 0, 0, 0, c, nullptr) == ncclInvalidArgument);
  CHECK(std::string(ncclGetLastError(c)).find("RMA") != std::string::npos);
  CHECK(ncclSignal(1, 0, 0, 0, c, nullptr) == ncclInvalidArgument);
  ncclWaitSignalDesc_t desc = {1, 1, 0, 0};
  CHECK(ncclWaitSignal(1, &desc, c, nullptr) == ncclInvalidArgument);
  CHECK(ncclSignal(1, 0, 0, 0, fake, nullptr) == ncclInvalidArgument);
  CHECK(ncclCommWindowDeregister(c, w) == ncclSuccess);
  CHECK(ncclWinGetUserPtr(c, w, &p) == ncclInvalidArgument);  // gone with its registration
  CHECK(ncclGetPeerDevicePointer(w, 0, 0, &p) == ncclInvalidArgument);

  // Device communicators: refused as without symmetric memory; destroying an empty one is fine.
  alignas(8) unsigned char reqs[256] = {};
  alignas(8) unsigned char dev[4096] = {};
  auto* r = reinterpret_cast<const ncclDevCommRequirements*>(reqs);
  auto* d = reinterpret_cast<ncclDevComm*>(dev);
  CHECK(ncclDevCommCreate(c, r, d) == ncclInvalidUsage);
  CHECK(std::string(ncclGetLastError(c)).find("symmetric") != std::string::npos);
  CHECK(ncclDevCommCreate(c, nullptr, d) == ncclInvalidArgument);
  CHECK(ncclDevCommCreate(fake, r, d) == ncclInvalidArgument);
  CHECK(ncclDevCommDestroy(c, d) == ncclSuccess);
  CHECK(ncclDevCommDestroy(c, nullptr) == ncclInvalidArgument);
  for (ncclComm_t m : comms) CHECK(ncclCommDestroy(m) == ncclSuccess);
}
