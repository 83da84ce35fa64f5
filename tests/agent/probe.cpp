// A small NCCL program the agent's process tests run under the agent (linked in, or through
// LD_PRELOAD) with different environments. It prints `key=value` lines the tests parse and exits
// 0 when every call returned what the NCCL double was asked to return.
//
//   probe basic          init, 5 all-reduces, destroy
//   probe none           never calls NCCL
//   probe ring N         init and N all-reduces
//   probe fork MODE      init, 3 all-reduces, fork; the child calls NCCL (MODE=child-calls) or not
//   probe manycomms N    N communicators with one all-reduce each
//   probe gpu            launches on plain, capturing and grouped streams; waits for the counters
//   probe codes          every kind of wrapper told to fail with its own non-zero code, also a
//                        call that reaches the agent re-entrantly; exits 0 if each came back
//   probe blocking       communicators from InitRank, and InitRankConfig with blocking = 1
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <string>

#include "fr/flight_log.h"
#include "nccl_double.h"

namespace {

int g_failures = 0;

void check(const char* what, ncclResult_t r) {
  printf("rc.%s=%d\n", what, (int)r);
  if (r != ncclSuccess) ++g_failures;
}

cudaStream_t stream(uint64_t v) { return (cudaStream_t)(uintptr_t)v; }

ncclComm_t init_comm(int nranks, int rank) {
  ncclUniqueId id;
  check("GetUniqueId", ncclGetUniqueId(&id));
  ncclComm_t comm = nullptr;
  check("CommInitRank", ncclCommInitRank(&comm, nranks, id, rank));
  return comm;
}

void all_reduces(ncclComm_t comm, int n) {
  static float buf[16];
  for (int i = 0; i < n; ++i)
    check("AllReduce", ncclAllReduce(buf, buf, 16, ncclFloat32, ncclSum, comm, stream(0x10)));
}

// Path of the log in FR_LOG_DIR written by process `pid`, or "".
std::string log_of(int pid) {
  const char* dir = getenv("FR_LOG_DIR");
  if (dir == nullptr) return "";
  DIR* d = opendir(dir);
  if (d == nullptr) return "";
  std::string want = "." + std::to_string(pid) + ".", found;
  while (dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (name.find(want) != std::string::npos) found = std::string(dir) + "/" + name;
  }
  closedir(d);
  return found;
}

// Whether another process holds the writer lock (byte 0) of the log at `path`.
int writer_lock_held(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY);
  if (fd < 0) return -1;
  struct flock lk = {};
  lk.l_type = F_WRLCK;
  lk.l_whence = SEEK_SET;
  lk.l_start = 0;
  lk.l_len = 1;
  int held = fcntl(fd, F_GETLK, &lk) == 0 && lk.l_type != F_UNLCK ? 1 : 0;
  close(fd);
  return held;
}

// The log of this process, mapped read-only.
const fr_log_header* own_log() {
  std::string path = log_of((int)getpid());
  if (path.empty()) return nullptr;
  int fd = open(path.c_str(), O_RDONLY);
  if (fd < 0) return nullptr;
  struct stat st;
  const fr_log_header* h = nullptr;
  if (fstat(fd, &st) == 0) {
    void* m = mmap(nullptr, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
    if (m != MAP_FAILED) h = (const fr_log_header*)m;
  }
  close(fd);
  return h;
}

int scenario_gpu() {
  ncclComm_t comm = init_comm(2, 0);
  static float buf[16];
  all_reduces(comm, 2);  // op index 1, 2
  check("AllReduceCaptured",
        ncclAllReduce(buf, buf, 16, ncclFloat32, ncclSum, comm, stream(0xCA97)));  // no index
  check("AllReduceUnknownCapture",
        ncclAllReduce(buf, buf, 16, ncclFloat32, ncclSum, comm, stream(0xBAD)));  // no index
  check("GroupStart", ncclGroupStart());
  check("AllReduceGrouped", ncclAllReduce(buf, buf, 16, ncclFloat32, ncclSum, comm, stream(0x10)));
  check("Send", ncclSend(buf, 16, ncclFloat32, 1, comm, stream(0x10)));
  check("Recv", ncclRecv(buf, 16, ncclFloat32, 1, comm, stream(0x20)));
  check("GroupEnd", ncclGroupEnd());  // indices 3, 4, 5
  const fr_log_header* h = own_log();
  uint64_t started = 0, completed = 0;
  if (h != nullptr) {
    const fr_comm_entry* c =
        (const fr_comm_entry*)((const uint8_t*)h + fr_log_section_of(h, FR_SECTION_COMMS)->offset);
    for (int i = 0; i < 1000; ++i) {  // events are polled by the agent's thread: allow time
      started = __atomic_load_n(&c->gpu_started, __ATOMIC_ACQUIRE);
      completed = __atomic_load_n(&c->gpu_completed, __ATOMIC_ACQUIRE);
      if (completed >= 5) break;
      struct timespec ts = {0, 10000000};
      nanosleep(&ts, nullptr);
    }
  }
  printf("gpu_started=%llu\ngpu_completed=%llu\n", (unsigned long long)started,
         (unsigned long long)completed);
  void* cuda = dlopen("libcuda.so.1", RTLD_NOLOAD | RTLD_NOW);
  if (cuda != nullptr) {
    auto violations = (int (*)())dlsym(cuda, "fr_fake_cuda_violations");
    auto writes = (int (*)())dlsym(cuda, "fr_fake_cuda_writes");
    auto unsafe = (int (*)())dlsym(cuda, "fr_fake_cuda_unsafe_global");
    if (unsafe) printf("unsafe_global=%d\n", unsafe());
    if (violations) printf("violations=%d\n", violations());
    if (writes) printf("writes=%d\n", writes());
  }
  return g_failures == 0 ? 0 : 1;
}

// Checks a call returned exactly the code the double was told to return.
void expect(const char* what, ncclResult_t got, ncclResult_t want) {
  printf("rc.%s=%d\n", what, (int)got);
  if (got != want) ++g_failures;
}

// One call of each wrapper family (op, group, API, create, lifecycle, query, async error), each
// with a non-zero code of its own, so a wrapper answering ncclSuccess (or any fixed code) is seen.
int scenario_codes() {
  ncclComm_t comm = init_comm(2, 0);
  static float buf[16];
  auto next = [](ncclResult_t r) { fr_double_next_result((int)r); };
  next(ncclUnhandledCudaError);
  expect("AllReduce", ncclAllReduce(buf, buf, 16, ncclFloat32, ncclSum, comm, stream(0x10)),
         ncclUnhandledCudaError);
  next(ncclSystemError);
  expect("Send", ncclSend(buf, 16, ncclFloat32, 1, comm, stream(0x10)), ncclSystemError);
  next(ncclInternalError);
  expect("GroupStart", ncclGroupStart(), ncclInternalError);
  next(ncclInvalidArgument);
  expect("GroupEnd", ncclGroupEnd(), ncclInvalidArgument);
  ncclUniqueId id;
  next(ncclInvalidUsage);
  expect("GetUniqueId", ncclGetUniqueId(&id), ncclInvalidUsage);
  ncclComm_t other = nullptr;
  next(ncclRemoteError);
  expect("CommInitRank", ncclCommInitRank(&other, 2, id, 1), ncclRemoteError);
  ncclComm_t all[2] = {};
  int devs[2] = {0, 1};
  next(ncclSystemError);
  expect("CommInitAll", ncclCommInitAll(all, 2, devs), ncclSystemError);
  ncclComm_t sub = nullptr;
  next(ncclInProgress);
  expect("CommSplit", ncclCommSplit(comm, 0, 0, &sub, nullptr), ncclInProgress);
  ncclResult_t async = ncclSuccess;
  next(ncclInvalidUsage);
  expect("CommGetAsyncError", ncclCommGetAsyncError(comm, &async), ncclInvalidUsage);
  void* mem = nullptr;
  next(ncclUnhandledCudaError);
  expect("MemAlloc", ncclMemAlloc(&mem, 64), ncclUnhandledCudaError);
  int version = 0;
  next(ncclInternalError);
  expect("GetVersion", ncclGetVersion(&version), ncclInternalError);
  // ncclBcast calls ncclBroadcast through the exported symbol, which is the agent's wrapper again:
  // the inner call's code must come back through both.
  fr_double_next_inner_result((int)ncclRemoteError);
  expect("BcastInner", ncclBcast(buf, 16, ncclFloat32, 0, comm, stream(0x10)), ncclRemoteError);
  next(ncclInvalidArgument);
  expect("CommDestroy", ncclCommDestroy(comm), ncclInvalidArgument);
  return g_failures == 0 ? 0 : 1;
}

int scenario_fork(const char* mode) {
  ncclComm_t comm = init_comm(2, 0);
  all_reduces(comm, 3);
  fflush(stdout);
  pid_t child = fork();
  if (child == 0) {
    // Seen from another process, the live parent holds its log's writer lock.
    printf("parent_log_locked=%d\n", writer_lock_held(log_of((int)getppid())));
    if (strcmp(mode, "child-calls") == 0) {
      ncclComm_t c2 = init_comm(2, 1);
      all_reduces(c2, 2);
    }
    fflush(stdout);
    _exit(g_failures == 0 ? 0 : 1);
  }
  int status = 0;
  waitpid(child, &status, 0);
  all_reduces(comm, 1);
  printf("parent_pid=%d\nchild_pid=%d\nchild_status=%d\n", (int)getpid(), (int)child, status);
  return (g_failures == 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0) ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  const char* what = argc > 1 ? argv[1] : "basic";
  printf("pid=%d\n", (int)getpid());
  if (strcmp(what, "none") == 0) return 0;
  if (strcmp(what, "basic") == 0) {
    ncclComm_t comm = init_comm(2, 0);
    all_reduces(comm, 5);
    check("CommDestroy", ncclCommDestroy(comm));
    return g_failures == 0 ? 0 : 1;
  }
  if (strcmp(what, "ring") == 0) {
    ncclComm_t comm = init_comm(2, 0);
    all_reduces(comm, argc > 2 ? atoi(argv[2]) : 100);
    return g_failures == 0 ? 0 : 1;
  }
  if (strcmp(what, "manycomms") == 0) {
    // More communicators than the table holds: the rest go unrecorded, the calls go on.
    int n = argc > 2 ? atoi(argv[2]) : 300;
    for (int i = 0; i < n; ++i) all_reduces(init_comm(2, 0), 1);
    return g_failures == 0 ? 0 : 1;
  }
  if (strcmp(what, "blocking") == 0) {
    ncclComm_t plain = init_comm(2, 0);
    ncclUniqueId id;
    check("GetUniqueId", ncclGetUniqueId(&id));
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 1;
    cfg.commName = "configured-blocking";
    ncclComm_t configured = nullptr;
    check("CommInitRankConfig", ncclCommInitRankConfig(&configured, 2, id, 1, &cfg));
    all_reduces(plain, 1);
    all_reduces(configured, 1);
    return g_failures == 0 ? 0 : 1;
  }
  if (strcmp(what, "fork") == 0) return scenario_fork(argc > 2 ? argv[2] : "child-calls");
  if (strcmp(what, "gpu") == 0) return scenario_gpu();
  if (strcmp(what, "codes") == 0) return scenario_codes();
  fprintf(stderr, "probe: unknown scenario %s\n", what);
  return 2;
}
