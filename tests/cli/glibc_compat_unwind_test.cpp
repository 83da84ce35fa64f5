// Exceptions in a program built as the wheel's tools are (libstdc++ and libgcc static,
// cli/wheel/glibc_compat.cpp linked in) on a glibc without _dl_find_object, as on glibc 2.34: this
// program's dlvsym finds no glibc 2.35 symbol, so every unwind, Catch2's own included, goes through
// the dl_iterate_phdr fallback. Thrown in this program, in the static libstdc++, and rethrown.
#include <dlfcn.h>

#include <catch2/catch.hpp>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

int g_dlvsym_calls = 0;

__attribute__((noinline)) int deepest(int depth) {
  if (depth == 0) throw std::runtime_error("from the deepest frame");
  return depth;
}

__attribute__((noinline)) int middle(int depth) { return deepest(depth) + deepest(depth - 1); }

__attribute__((noinline)) int outer(int depth) { return middle(depth) * 2; }

}  // namespace

// glibc's dlvsym, as on a glibc before 2.35: no such version of any symbol.
extern "C" void* dlvsym(void*, const char*, const char*) noexcept {
  ++g_dlvsym_calls;
  return nullptr;
}

TEST_CASE("the wheel's unwinder runs on the fallback where glibc has no _dl_find_object", "[cli]") {
  CHECK(g_dlvsym_calls >= 1);
  try {
    outer(1);
    FAIL("no exception");
  } catch (const std::runtime_error& e) {
    CHECK(std::string(e.what()) == "from the deepest frame");
  }
  std::vector<int> none;
  CHECK_THROWS_AS(none.at(3), std::out_of_range);
  CHECK_THROWS_AS(std::stoi("not a number"), std::invalid_argument);
  int caught = 0;
  for (int i = 0; i < 100; ++i) {
    try {
      try {
        outer(1);
      } catch (const std::exception&) {
        throw;
      }
    } catch (const std::runtime_error&) {
      ++caught;
    }
  }
  CHECK(caught == 100);
}
