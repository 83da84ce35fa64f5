// Two glibc functions newer than glibc 2.34, defined inside the wheel's tools (cli/wheel) so
// that the C++ runtime they link statically (libstdc++.a, libgcc_eh.a, built on Debian 12 with
// glibc 2.36) takes these definitions at link time instead of asking the system's glibc for them.
// Everything else the tools call is in glibc 2.34, so the wheel's tag can say manylinux_2_34
// (docs/install.md). Both keep the documented contract of the function they stand in for:
//
// - arc4random (glibc 2.36), which std::random_device uses: the same kernel random bytes, from
//   getrandom(2) (glibc 2.25), retried on EINTR, else read from /dev/urandom, else abort: as
//   glibc's, it never returns without random bytes.
// - _dl_find_object (glibc 2.35), which the unwinder calls to find the unwind tables of the code
//   an exception passes through: glibc's own when the system has it (looked up by version, once),
//   else the same answer from dl_iterate_phdr, which is how the unwinder found them before 2.35.
//
// Hidden: the tools export neither, and no other program or library ever sees them.
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/auxv.h>
#include <sys/random.h>
#include <unistd.h>

#include <atomic>

namespace {

using FindObject = int (*)(void*, dl_find_object*);

// glibc's _dl_find_object, or null where glibc predates it. Looked up before main; until then
// (a throw in an early static constructor) the fallback answers, which is as right, only slower.
std::atomic<FindObject> g_system_find{nullptr};

__attribute__((constructor)) void look_up_system_find() {
  g_system_find.store(
      reinterpret_cast<FindObject>(dlvsym(RTLD_NEXT, "_dl_find_object", "GLIBC_2.35")),
      std::memory_order_release);
}

struct Search {
  uintptr_t pc;
  dl_find_object* out;
  bool found;
};

// dl_iterate_phdr's callback: fills the result from the object whose loaded segments hold pc.
// The map starts at the first segment's page, as glibc's does, and ends where the last ends.
int visit_object(dl_phdr_info* info, size_t, void* data) {
  auto* s = static_cast<Search*>(data);
  const uintptr_t page = getauxval(AT_PAGESZ);
  uintptr_t lo = UINTPTR_MAX, hi = 0;
  bool holds_pc = false;
  const ElfW(Phdr)* eh_frame = nullptr;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type == PT_GNU_EH_FRAME) eh_frame = &ph;
    if (ph.p_type != PT_LOAD) continue;
    uintptr_t start = info->dlpi_addr + ph.p_vaddr, end = start + ph.p_memsz;
    uintptr_t page_start = start & ~(page - 1);
    lo = page_start < lo ? page_start : lo;
    hi = end > hi ? end : hi;
    holds_pc = holds_pc || (s->pc >= start && s->pc < end);
  }
  if (!holds_pc) return 0;
  *s->out = dl_find_object{};
  s->out->dlfo_map_start = reinterpret_cast<void*>(lo);
  s->out->dlfo_map_end = reinterpret_cast<void*>(hi);
  if (eh_frame != nullptr)
    s->out->dlfo_eh_frame = reinterpret_cast<void*>(info->dlpi_addr + eh_frame->p_vaddr);
  s->found = true;
  return 1;
}

}  // namespace

// The fallback on its own, for tests/cli/glibc_compat_test.cpp to compare with glibc's.
extern "C" __attribute__((visibility("hidden"))) int fr_find_object_by_phdr(void* pc,
                                                                            dl_find_object* out) {
  Search s{reinterpret_cast<uintptr_t>(pc), out, false};
  dl_iterate_phdr(visit_object, &s);
  return s.found ? 0 : -1;
}

extern "C" __attribute__((visibility("hidden"))) int _dl_find_object(void* pc,
                                                                     dl_find_object* out) noexcept {
  if (FindObject system = g_system_find.load(std::memory_order_acquire)) return system(pc, out);
  return fr_find_object_by_phdr(pc, out);
}

extern "C" __attribute__((visibility("hidden"))) uint32_t arc4random() noexcept {
  uint32_t value = 0;
  for (;;) {
    if (getrandom(&value, sizeof value, 0) == static_cast<ssize_t>(sizeof value)) return value;
    if (errno != EINTR) break;
  }
  int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  bool ok = fd >= 0 && read(fd, &value, sizeof value) == static_cast<ssize_t>(sizeof value);
  if (fd >= 0) close(fd);
  if (!ok) abort();
  return value;
}
