// How a test that cannot run here says so. Catch2 2 has no SKIP, and a test that returns early is
// counted as passed, which hides exactly the tests that need something absent (torch, buildah, a
// chroot, a built target). FR_SKIP prints the reason and ends the test process with
// kFrSkipExitCode, which every discovered test registers as CTest's SKIP_RETURN_CODE (see
// fr_add_test in tests/CMakeLists.txt), so ctest reports the test as skipped, with the reason in its
// output. Each discovered test runs alone in its own process, so ending it does not cut short any
// other test.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <sstream>

inline constexpr int kFrSkipExitCode = 77;

// FR_SKIP("no torch: " << why): the message is streamed, as in Catch2's INFO.
#define FR_SKIP(message)                                          \
  do {                                                            \
    std::ostringstream fr_skip_text_;                             \
    fr_skip_text_ << message;                                     \
    std::printf("FR-SKIPPED: %s\n", fr_skip_text_.str().c_str()); \
    std::fflush(stdout);                                          \
    std::fflush(stderr);                                          \
    std::_Exit(kFrSkipExitCode);                                  \
  } while (0)
