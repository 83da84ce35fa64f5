// Loads a library that uses NCCL with dlopen(RTLD_LOCAL) long after start-up and runs it. The
// program itself never links NCCL. Prints `result=N` (0 when every NCCL call succeeded).
//
// With --no-nccl it calls the agent's wrappers while no NCCL is loaded at all and prints what
// they answered.
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

static int no_nccl() {
  typedef int (*VersionFn)(int*);
  typedef const char* (*ErrorStringFn)(int);
  typedef int (*AllReduceFn)(const void*, void*, size_t, int, int, void*, void*);
  auto version = (VersionFn)dlsym(RTLD_DEFAULT, "ncclGetVersion");
  auto error_string = (ErrorStringFn)dlsym(RTLD_DEFAULT, "ncclGetErrorString");
  auto all_reduce = (AllReduceFn)dlsym(RTLD_DEFAULT, "ncclAllReduce");
  if (!version || !error_string || !all_reduce) {
    printf("wrappers=0\n");
    return 1;
  }
  int v = -1;
  float buf[4];
  printf("wrappers=1\nGetVersion=%d\n", version(&v));
  printf("AllReduce=%d\n", all_reduce(buf, buf, 4, 7, 0, (void*)0x1, nullptr));
  const char* s = error_string(2);
  printf("ErrorString=%s\n", s ? s : "(null)");
  return 0;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: late_probe LIBRARY | --no-nccl\n");
    return 2;
  }
  if (strcmp(argv[1], "--no-nccl") == 0) return no_nccl();
  void* h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    fprintf(stderr, "late_probe: %s\n", dlerror());
    return 2;
  }
  auto run = (int (*)())dlsym(h, "fr_user_run");
  if (run == nullptr) return 2;
  int result = run();
  printf("result=%d\n", result);
  return result == 0 ? 0 : 1;
}
