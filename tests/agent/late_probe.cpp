// Loads a library that uses NCCL with dlopen(RTLD_LOCAL) long after start-up and runs it. The
// program itself never links NCCL. Prints `result=N` (0 when every NCCL call succeeded).
#include <dlfcn.h>
#include <stdio.h>

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: late_probe LIBRARY\n");
    return 2;
  }
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
