// cli/wheel/glibc_compat.cpp, the two functions the wheel's tools define in place of glibc 2.35's
// and 2.36's: the dl_iterate_phdr fallback for _dl_find_object gives glibc's own answer for code
// in the program, in libc and in libstdc++, and none for addresses outside every object; the
// _dl_find_object the tools call is glibc's where glibc has it; arc4random returns random words.
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>

#include <catch2/catch.hpp>
#include <set>
#include <string>
#include <vector>

#include "skip.h"

extern "C" int fr_find_object_by_phdr(void* pc, dl_find_object* out);

namespace {

using FindObject = int (*)(void*, dl_find_object*);

FindObject system_find_object() {
  return reinterpret_cast<FindObject>(dlvsym(RTLD_NEXT, "_dl_find_object", "GLIBC_2.35"));
}

__attribute__((noinline)) int local_function(int x) { return x * 3 + 1; }

struct Probe {
  std::string what;
  void* pc;
};

std::vector<Probe> code_addresses() {
  return {{"a function of the program", reinterpret_cast<void*>(&local_function)},
          {"inside it", reinterpret_cast<char*>(&local_function) + 1},
          {"libc's getpid", dlsym(RTLD_DEFAULT, "getpid")},
          {"libstdc++'s std::terminate", dlsym(RTLD_DEFAULT, "_ZSt9terminatev")}};
}

}  // namespace

TEST_CASE("the fallback finds the unwind tables of the object holding a code address", "[cli]") {
  for (const Probe& p : code_addresses()) {
    INFO(p.what);
    REQUIRE(p.pc != nullptr);
    dl_find_object found{};
    REQUIRE(fr_find_object_by_phdr(p.pc, &found) == 0);
    CHECK(found.dlfo_map_start <= p.pc);
    CHECK(p.pc < found.dlfo_map_end);
    CHECK(found.dlfo_eh_frame != nullptr);
    CHECK(found.dlfo_map_start <= found.dlfo_eh_frame);
    CHECK(found.dlfo_eh_frame < found.dlfo_map_end);
  }
  int on_stack = 0;
  dl_find_object none{};
  CHECK(fr_find_object_by_phdr(&on_stack, &none) == -1);
  CHECK(fr_find_object_by_phdr(nullptr, &none) == -1);
}

TEST_CASE("the fallback answers as glibc's _dl_find_object does", "[cli]") {
  FindObject system = system_find_object();
  if (system == nullptr) FR_SKIP("this glibc has no _dl_find_object (it is older than 2.35)");
  for (const Probe& p : code_addresses()) {
    INFO(p.what);
    dl_find_object ours{}, theirs{};
    REQUIRE(system(p.pc, &theirs) == 0);
    REQUIRE(fr_find_object_by_phdr(p.pc, &ours) == 0);
    CHECK(ours.dlfo_map_start == theirs.dlfo_map_start);
    CHECK(ours.dlfo_map_end == theirs.dlfo_map_end);
    CHECK(ours.dlfo_eh_frame == theirs.dlfo_eh_frame);
    // What the tools call: glibc's own, found by version.
    dl_find_object called{};
    REQUIRE(_dl_find_object(p.pc, &called) == 0);
    CHECK(called.dlfo_link_map == theirs.dlfo_link_map);
    CHECK(called.dlfo_eh_frame == theirs.dlfo_eh_frame);
  }
  int on_stack = 0;
  dl_find_object none{};
  CHECK(system(&on_stack, &none) == -1);
}

TEST_CASE("arc4random returns random words", "[cli]") {
  std::set<uint32_t> seen;
  for (int i = 0; i < 16; ++i) seen.insert(arc4random());
  CHECK(seen.size() > 8);
}
