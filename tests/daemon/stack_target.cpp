// The process whose stacks the capture tests take: it stands still in a known function until it
// is killed. Built with debug info and without optimization, so the frames and lines are exact.
//   stack_target hang   blocks in pause() under hang_forever <- run_step <- main
//   stack_target spin   spins in spin_forever <- run_step <- main (state R, for a live process)
#include <unistd.h>

#include <cstdio>
#include <cstring>

extern "C" {

__attribute__((noinline)) void hang_forever() {
  for (;;) ::pause();
}

volatile unsigned long spins = 0;

__attribute__((noinline)) void spin_forever() {
  for (;;) spins = spins + 1;
}

__attribute__((noinline)) void run_step(const char* mode) {
  if (std::strcmp(mode, "spin") == 0) spin_forever();
  hang_forever();
}

}  // extern "C"

int main(int argc, char** argv) {
  std::printf("ready\n");
  std::fflush(stdout);
  run_step(argc > 1 ? argv[1] : "hang");
  return 0;
}
