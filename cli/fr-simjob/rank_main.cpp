// fr-simjob-rank: one rank of a simulated training job. fr-simjob starts N x R of these with the
// usual launcher environment; each one is an ordinary NCCL program (linked against libnccl.so.2
// and libcuda.so.1, found at run time on LD_LIBRARY_PATH), so the agent preloaded into it records
// exactly what it would record in a real job.
//
// This file: the rank's setup (arguments, the progress board, CUDA, the unique-id exchange and the
// communicators) and its loop over the steps. A step is rank_step.cpp (with --graphs, step 0 runs
// eagerly, the warm-up, and every later step replays the step captured into one CUDA graph; see
// README.md); --elastic STEP is rank_elastic.cpp.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "fr/version.h"
#include "rank.h"

namespace fr::simjob {

[[noreturn]] void die(Rank& r, int code, const std::string& msg) {
  std::fprintf(stderr, "fr-simjob-rank %d: %s\n", r.pos.rank, msg.c_str());
  if (r.slot) r.slot->phase.store(static_cast<uint32_t>(RankPhase::kFailed));
  std::fflush(stderr);
  std::_Exit(code);
}

// Here, not beside the faults that call it (rank_step.cpp): a hung rank's stack names the file of
// this frame, and the end-to-end tests and the documented reports show rank_main.cpp.
[[noreturn]] void hang_forever() {
  for (;;) ::pause();
}

void nccl_check(Rank& r, ncclResult_t res, const char* what) {
  if (res != ncclSuccess && res != ncclInProgress)
    die(r, kExitNcclError, std::string(what) + " failed: " + ncclGetErrorString(res));
}

void cuda_check(Rank& r, CUresult res, const char* what) {
  if (res != CUDA_SUCCESS) {
    const char* s = nullptr;
    cuGetErrorString(res, &s);
    die(r, kExitCudaError, std::string(what) + " failed: " + (s ? s : "unknown CUDA error"));
  }
}

const Fault* fault_at(const Rank& r, int step, FaultKind kind) {
  for (const Fault& f : r.faults)
    if (f.rank == r.pos.rank && f.step == step && f.kind == kind) return &f;
  return nullptr;
}
const Fault* fault_on(const Rank& r, int step, FaultKind kind, CommKind comm) {
  const Fault* f = fault_at(r, step, kind);
  return f && f->comm == comm ? f : nullptr;
}

void rt_check(Rank& r, cudaError_t res, const char* what) {
  if (res != cudaSuccess)
    die(r, kExitCudaError, std::string(what) + " failed: " + cudaGetErrorString(res));
}

// ---- the unique-id exchange and the groups -----------------------------------------------------

// A unique id travels through a file in the run directory: written once, atomically, by the rank
// that made it; read by the others, who wait for it.
void publish_id(Rank& r, const char* name, const ncclUniqueId& id) {
  std::string final_path = r.run_dir + "/" + name;
  std::string tmp = final_path + ".tmp." + std::to_string(::getpid());
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f || std::fwrite(&id, sizeof id, 1, f) != 1 || std::fclose(f) != 0)
    die(r, kExitSetup, "cannot write " + tmp + ": " + std::strerror(errno));
  if (std::rename(tmp.c_str(), final_path.c_str()) != 0)
    die(r, kExitSetup, "cannot publish " + final_path + ": " + std::strerror(errno));
}

ncclUniqueId read_id(Rank& r, const char* name, const char* who) {
  ncclUniqueId id{};
  std::string final_path = r.run_dir + "/" + name;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  for (;;) {
    FILE* f = std::fopen(final_path.c_str(), "rb");
    if (f) {
      size_t got = std::fread(&id, sizeof id, 1, f);
      std::fclose(f);
      if (got == 1) return id;
    }
    if (std::chrono::steady_clock::now() > deadline)
      die(r, kExitSetup, std::string(who) + " never published the unique id in " + final_path);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

// Every member calls every split in the same order; the key keeps global-rank order. Each group
// gets a name (commName, as frameworks name their process groups) so verdicts read "tp2".
void split_groups(Rank& r) {
  struct Split {
    ncclComm_t* out;
    int color;
    std::string name;
  } splits[] = {{&r.tp, r.pos.tp_color, "tp" + std::to_string(r.pos.tp_color)},
                {&r.pp, r.pos.pp_color, "pp" + std::to_string(r.pos.pp_color)},
                {&r.dp, r.pos.dp_color, "dp" + std::to_string(r.pos.dp_color)}};
  for (Split& sp : splits) {
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.commName = sp.name.c_str();
    std::string what = "ncclCommSplit(" + sp.name + ")";
    nccl_check(r, ncclCommSplit(r.world, sp.color, r.pos.rank, sp.out, &cfg), what.c_str());
    bump(r);
  }
}

void finalize_and_destroy(Rank& r, std::initializer_list<ncclComm_t*> comms) {
  for (ncclComm_t* c : comms) nccl_check(r, ncclCommFinalize(*c), "ncclCommFinalize");
  for (ncclComm_t* c : comms) {
    nccl_check(r, ncclCommDestroy(*c), "ncclCommDestroy");
    *c = nullptr;
  }
}

void drop_graph(Rank& r) {
  // --run-ahead: a replay may still run on the stream (CUDA would let it finish, the job waits).
  if (r.run_ahead && r.graph) cuda_check(r, cuStreamSynchronize(r.stream), "cuStreamSynchronize");
  if (r.graph) rt_check(r, cudaGraphExecDestroy(r.graph), "cudaGraphExecDestroy");
  r.graph = nullptr;  // a graph captures communicators: the next replay captures the new ones
}

namespace {

// ---- setup -------------------------------------------------------------------------------------

RankSlot* map_board(int rank) {
  const char* path = std::getenv(kEnvBoard);
  if (!path || !*path) return nullptr;  // run by hand: no board
  int fd = ::open(path, O_RDWR | O_CLOEXEC);
  if (fd < 0) return nullptr;
  struct stat st {};
  void* p = MAP_FAILED;
  if (::fstat(fd, &st) == 0 &&
      static_cast<uint64_t>(st.st_size) >= ProgressBoard::bytes_for(rank + 1))
    p = ::mmap(nullptr, st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) return nullptr;
  auto* board = static_cast<ProgressBoard*>(p);
  if (board->magic != kProgressMagic || static_cast<int>(board->ranks) <= rank) return nullptr;
  return &board->slots[rank];
}

ncclUniqueId exchange_unique_id(Rank& r) {
  ncclUniqueId id{};
  if (r.pos.rank != 0) return read_id(r, "world.uid", "rank 0");
  nccl_check(r, ncclGetUniqueId(&id), "ncclGetUniqueId");
  publish_id(r, "world.uid", id);
  return id;
}

void setup_cuda(Rank& r) {
  cuda_check(r, cuInit(0), "cuInit");
  int count = 0;
  cuda_check(r, cuDeviceGetCount(&count), "cuDeviceGetCount");
  if (count < 1) die(r, kExitCudaError, "no CUDA device");
  CUdevice dev = 0;
  cuda_check(r, cuDeviceGet(&dev, r.pos.local_rank % count), "cuDeviceGet");
  CUcontext ctx = nullptr;
  cuda_check(r, cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
  cuda_check(r, cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
  cuda_check(r, cuStreamCreate(&r.stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");

  size_t off = 0;
  auto carve = [&](size_t n) {
    Rank::Buf b{off, n};
    off += n + kSlack;
    return b;
  };
  size_t t = static_cast<size_t>(r.shape.tp);
  r.ag_send = carve(kTpCount);
  r.ag_recv = carve(kTpCount * t);
  r.rs_send = carve(kTpCount * t);
  r.rs_recv = carve(kTpCount);
  r.fwd_send = carve(kPpCount);
  r.fwd_recv = carve(kPpCount);
  r.bwd_send = carve(kPpCount);
  r.bwd_recv = carve(kPpCount);
  r.grad = carve(kDpCount);
  r.loss = carve(kLossCount);
  r.bcast = carve(kBcastCount);
  r.host_elems = off;
  size_t bytes = off * sizeof(float);
  bytes = (bytes + 4095) & ~static_cast<size_t>(4095);
  void* mem = nullptr;
  if (posix_memalign(&mem, 4096, bytes) != 0) die(r, kExitSetup, "out of memory");
  std::memset(mem, 0, bytes);
  r.host = static_cast<float*>(mem);
  cuda_check(r, cuMemHostRegister(mem, bytes, CU_MEMHOSTREGISTER_DEVICEMAP), "cuMemHostRegister");
  cuda_check(r, cuMemHostGetDevicePointer(&r.dev, mem, 0), "cuMemHostGetDevicePointer");
}

void setup_comms(Rank& r) {
  ncclUniqueId id = exchange_unique_id(r);
  bump(r);
  nccl_check(r, ncclCommInitRank(&r.world, r.shape.world(), id, r.pos.rank), "ncclCommInitRank");
  bump(r);
  split_groups(r);
}

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  return (*end == '\0' && x >= 0 && x < (1L << 30)) ? static_cast<int>(x) : -1;
}

int usage(const std::string& msg) {
  std::fprintf(stderr, "fr-simjob-rank: %s\n", msg.c_str());
  std::fprintf(
      stderr,
      "usage: fr-simjob-rank --nodes N --ranks-per-node R --tp T --pp P --steps S "
      "[--graphs [--run-ahead]] [--elastic STEP [--join]] [--fault SPEC]...\n(started by fr-simjob with RANK, WORLD_SIZE and %s set)\n",
      kEnvRunDir);
  return kExitUsage;
}

// The command line (the job's shape and faults, as fr-simjob passes them) and the environment
// (RANK, WORLD_SIZE, the run directory). 0, or the exit code of a usage error.
int parse_args(int argc, char** argv, Rank& r) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--graphs" || a == "--join" || a == "--run-ahead") {
      (a == "--graphs" ? r.graphs : a == "--join" ? r.joiner : r.run_ahead) = true;
      continue;
    }
    if (i + 1 >= argc) return usage("missing value after " + a);
    std::string v = argv[++i];
    int* target = a == "--nodes"            ? &r.shape.nodes
                  : a == "--ranks-per-node" ? &r.shape.ranks_per_node
                  : a == "--tp"             ? &r.shape.tp
                  : a == "--pp"             ? &r.shape.pp
                  : a == "--steps"          ? &r.shape.steps
                  : a == "--elastic"        ? &r.shape.elastic
                                            : nullptr;
    // Options that may be 0 (or -1 for the pause step).
    int* zero_ok = a == "--step-ms"       ? &r.shape.step_ms
                   : a == "--step-jitter" ? &r.shape.jitter
                   : a == "--pause-step"  ? &r.shape.pause_step
                   : a == "--pause-ms"    ? &r.shape.pause_ms
                   : a == "--pause-every" ? &r.shape.pause_every
                   : a == "--seed"        ? &r.shape.seed
                                          : nullptr;
    if (zero_ok) {
      char* end = nullptr;
      long x = std::strtol(v.c_str(), &end, 10);
      if (*end != '\0' || x < -1 || x > (1L << 30)) return usage("bad value for " + a + ": " + v);
      *zero_ok = static_cast<int>(x);
    } else if (target) {
      char* end = nullptr;
      long x = std::strtol(v.c_str(), &end, 10);
      long least = a == "--elastic" ? 0 : 1;
      if (*end != '\0' || x < least || x > (1L << 30))
        return usage("bad value for " + a + ": " + v);
      *target = static_cast<int>(x);
    } else if (a == "--fault") {
      Fault f;
      std::string err;
      if (!parse_fault(v, &f, &err)) return usage(err);
      r.faults.push_back(f);
    } else {
      return usage("unknown option " + a);
    }
  }
  std::string err;
  if (!validate(r.shape, &r.faults, &err)) return usage(err);
  if (r.joiner && r.shape.elastic < 0) return usage("--join needs --elastic STEP");
  int rank = env_int("RANK", -1), world = env_int("WORLD_SIZE", -1);
  if (rank < 0 || rank >= r.shape.world() || world != r.shape.world())
    return usage("RANK/WORLD_SIZE missing or not matching the job shape");
  const char* run_dir = std::getenv(kEnvRunDir);
  if (!run_dir || !*run_dir) return usage(std::string(kEnvRunDir) + " is not set");
  r.run_dir = run_dir;
  r.pos = position_of(r.shape, rank);
  return 0;
}

}  // namespace
}  // namespace fr::simjob

int main(int argc, char** argv) {
  using namespace fr::simjob;
  Rank r;
  if (argc == 2 && std::string(argv[1]) == "--version") {
    std::printf("%s\n", FR_VERSION_LINE("fr-simjob-rank"));
    return 0;
  }
  if (int code = parse_args(argc, argv, r)) return code;
  int rank = r.pos.rank;
  r.check_until = first_fault_step(r.faults);
  r.slot = map_board(rank);
  if (r.slot) {
    r.slot->pid.store(::getpid());
    r.slot->phase.store(static_cast<uint32_t>(RankPhase::kInit));
  }

  if (r.joiner && rank != r.shape.world() - 1)
    return usage("--join: only the highest rank is replaced");

  setup_cuda(r);
  if (r.joiner)
    join(r);
  else
    setup_comms(r);
  if (r.slot) r.slot->phase.store(static_cast<uint32_t>(RankPhase::kRunning));
  for (int step = r.joiner ? r.shape.elastic : 0; step < r.shape.steps; ++step) {
    if (step == r.shape.elastic && !r.joiner) {
      if (rank == r.shape.world() - 1) leave(r);
      shrink_and_grow(r);
    }
    run_step(r, step);
  }

  drop_graph(r);
  finalize_and_destroy(r, {&r.dp, &r.pp, &r.tp, &r.world});
  cuMemHostUnregister(r.host);
  std::free(r.host);
  cuStreamDestroy(r.stream);
  bump(r);
  uint64_t failures = r.slot ? r.slot->check_failures.load() : 0;
  if (r.slot)
    r.slot->phase.store(
        static_cast<uint32_t>(failures ? RankPhase::kFailed : RankPhase::kFinished));
  return failures ? kExitCheckFailed : 0;
}
