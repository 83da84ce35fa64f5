// The glibc functions the wheel's tools (cli/wheel) call that glibc 2.28 lacks, defined inside the
// tools: they link against glibc 2.28's symbol versions (cli/wheel/glibc-stubs), and these are the
// functions that have no version that old. Their callers are the C++ runtime the tools link
// statically (libstdc++.a and libgcc_eh.a of Debian 12, built against glibc 2.36) and the tools'
// own code; every one keeps the documented contract of the function it stands in for, and calls
// the running glibc's own where it has one. docs/install.md says what the wheel's tag promises.
//
// - arc4random (glibc 2.36), which std::random_device uses: the same kernel random bytes, from
//   getrandom(2) (glibc 2.25), retried on EINTR, else read from /dev/urandom, else abort: as
//   glibc's, it never returns without random bytes.
// - _dl_find_object (glibc 2.35), which the unwinder calls to find the unwind tables of the code
//   an exception passes through: glibc's own when the system has it (looked up by version, once),
//   else the same answer from dl_iterate_phdr, which is how the unwinder found them before 2.35.
// - stat, lstat, fstat, fstat64 and fstatat (glibc 2.33; before, <sys/stat.h> made each an
//   inline call of __xstat & co with the structure's version, 1 on x86_64): glibc's own where it
//   has them, else __xstat, __lxstat, __fxstat and __fxstatat, which every glibc keeps.
// - pthread_cond_clockwait (glibc 2.30), which std::condition_variable's waits on steady_clock
//   call: glibc's own where it has it, else pthread_cond_timedwait with the deadline moved to
//   CLOCK_REALTIME, as libstdc++ did before 2.30 (the tools' condition variables all keep the
//   default clock, CLOCK_REALTIME).
// - close_range (glibc 2.34), which common/spawn.cpp calls between fork and exec: the system call
//   itself (glibc's function is its bare wrapper; no lookup, which is not safe after fork), else,
//   on a kernel older than 5.9, close(2) of every descriptor in the range below the limit.
// - __libc_single_threaded (glibc 2.32), which inline libstdc++ code reads to skip atomic
//   operations in a single-threaded process: always 0 here, so they are always atomic, which is
//   what libstdc++ does on a glibc without it.
//
// Hidden: the tools export none, and no other program or library ever sees them.
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/auxv.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
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

// ---- The functions of glibc 2.30 to 2.34 (see the top of the file) ----

// glibc 2.2.5's and 2.4's stat functions, by version: the headers of glibc 2.33 and newer no
// longer declare them, and a program linked against such a glibc must name the version.
extern "C" int __xstat(int, const char*, struct stat*);
extern "C" int __lxstat(int, const char*, struct stat*);
extern "C" int __fxstat(int, int, struct stat*);
extern "C" int __fxstatat(int, int, const char*, struct stat*, int);
__asm__(".symver __xstat, __xstat@GLIBC_2.2.5");
__asm__(".symver __lxstat, __lxstat@GLIBC_2.2.5");
__asm__(".symver __fxstat, __fxstat@GLIBC_2.2.5");
__asm__(".symver __fxstatat, __fxstatat@GLIBC_2.4");

namespace {

constexpr int kStatVersion = 1;  // _STAT_VER_LINUX on x86_64: struct stat as the kernel's

std::atomic<bool> g_force_fallback{false};

// The running glibc's own `name` at `version`, or null where it has none (or the fallbacks are
// forced, for the tests). Looked up once (before main: look_up_system_functions); a null answer
// is kept as kAbsent.
void* const kAbsent = reinterpret_cast<void*>(uintptr_t{1});

template <typename F>
F system_function(std::atomic<void*>& slot, const char* name, const char* version) {
  if (g_force_fallback.load(std::memory_order_relaxed)) return nullptr;
  void* p = slot.load(std::memory_order_acquire);
  if (p == nullptr) {
    p = dlvsym(RTLD_DEFAULT, name, version);
    slot.store(p != nullptr ? p : kAbsent, std::memory_order_release);
  }
  return p == nullptr || p == kAbsent ? nullptr : reinterpret_cast<F>(p);
}

std::atomic<void*> g_stat{nullptr}, g_lstat{nullptr}, g_fstat{nullptr}, g_fstatat{nullptr},
    g_clockwait{nullptr};

using StatFn = int (*)(const char*, struct stat*);
using FstatFn = int (*)(int, struct stat*);
using FstatatFn = int (*)(int, const char*, struct stat*, int);
using ClockwaitFn = int (*)(pthread_cond_t*, pthread_mutex_t*, clockid_t, const timespec*);

// Every lookup done before main, so that none happens later in a child between fork and exec
// (dlvsym takes the loader's lock, which another thread of the parent may have held at the fork).
__attribute__((constructor)) void look_up_system_functions() {
  system_function<StatFn>(g_stat, "stat", "GLIBC_2.33");
  system_function<StatFn>(g_lstat, "lstat", "GLIBC_2.33");
  system_function<FstatFn>(g_fstat, "fstat", "GLIBC_2.33");
  system_function<FstatatFn>(g_fstatat, "fstatat", "GLIBC_2.33");
  system_function<ClockwaitFn>(g_clockwait, "pthread_cond_clockwait", "GLIBC_2.30");
}

constexpr int64_t kNanos = 1000000000;

int64_t nanos_of(const timespec& t) { return int64_t(t.tv_sec) * kNanos + t.tv_nsec; }

}  // namespace

// For tests/cli/glibc_compat_test.cpp: true makes every function here take its fallback, as on a
// glibc that lacks the function.
extern "C" __attribute__((visibility("hidden"))) void fr_glibc_compat_force_fallback(bool on) {
  g_force_fallback.store(on, std::memory_order_relaxed);
}

extern "C" __attribute__((visibility("hidden"))) int stat(const char* path,
                                                          struct stat* buf) noexcept {
  if (auto f = system_function<StatFn>(g_stat, "stat", "GLIBC_2.33")) return f(path, buf);
  return __xstat(kStatVersion, path, buf);
}

extern "C" __attribute__((visibility("hidden"))) int lstat(const char* path,
                                                           struct stat* buf) noexcept {
  if (auto f = system_function<StatFn>(g_lstat, "lstat", "GLIBC_2.33")) return f(path, buf);
  return __lxstat(kStatVersion, path, buf);
}

extern "C" __attribute__((visibility("hidden"))) int fstat(int fd, struct stat* buf) noexcept {
  if (auto f = system_function<FstatFn>(g_fstat, "fstat", "GLIBC_2.33")) return f(fd, buf);
  return __fxstat(kStatVersion, fd, buf);
}

// struct stat64 is struct stat on x86_64.
extern "C" __attribute__((visibility("hidden"))) int fstat64(int fd, struct stat64* buf) noexcept {
  static_assert(sizeof(struct stat64) == sizeof(struct stat), "stat64 is stat on x86_64");
  return fstat(fd, reinterpret_cast<struct stat*>(buf));
}

extern "C" __attribute__((visibility("hidden"))) int fstatat(int dirfd, const char* path,
                                                             struct stat* buf, int flags) noexcept {
  if (auto f = system_function<FstatatFn>(g_fstatat, "fstatat", "GLIBC_2.33"))
    return f(dirfd, path, buf, flags);
  return __fxstatat(kStatVersion, dirfd, path, buf, flags);
}

// pthread_cond_clockwait's fallback on its own: CLOCK_REALTIME waits as they are; a
// CLOCK_MONOTONIC deadline becomes the CLOCK_REALTIME time as far from now; any other clock is
// EINVAL, as glibc's.
extern "C" __attribute__((visibility("hidden"))) int fr_cond_clockwait_by_timedwait(
    pthread_cond_t* cond, pthread_mutex_t* mutex, clockid_t clock, const timespec* abstime) {
  if (clock == CLOCK_REALTIME) return pthread_cond_timedwait(cond, mutex, abstime);
  if (clock != CLOCK_MONOTONIC || abstime->tv_nsec < 0 || abstime->tv_nsec >= kNanos) return EINVAL;
  timespec mono{}, real{};
  clock_gettime(CLOCK_MONOTONIC, &mono);
  clock_gettime(CLOCK_REALTIME, &real);
  int64_t deadline = nanos_of(real) + (nanos_of(*abstime) - nanos_of(mono));
  if (deadline < 0) deadline = 0;  // long past: times out at once
  timespec when{time_t(deadline / kNanos), long(deadline % kNanos)};
  return pthread_cond_timedwait(cond, mutex, &when);
}

extern "C" __attribute__((visibility("hidden"))) int pthread_cond_clockwait(
    pthread_cond_t* cond, pthread_mutex_t* mutex, clockid_t clock, const timespec* abstime) {
  if (auto f = system_function<ClockwaitFn>(g_clockwait, "pthread_cond_clockwait", "GLIBC_2.30"))
    return f(cond, mutex, clock, abstime);
  return fr_cond_clockwait_by_timedwait(cond, mutex, clock, abstime);
}

// close_range's fallback on its own, for a kernel without the system call: close(2) of every
// descriptor from `first` to `last`, below the process's descriptor limit. Async-signal-safe.
extern "C" __attribute__((visibility("hidden"))) int fr_close_range_by_close(unsigned first,
                                                                             unsigned last) {
  constexpr rlim_t kMostFiles = 1 << 20;  // the kernel's default fs.nr_open
  rlimit limit{};
  rlim_t below = kMostFiles;
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < below) below = limit.rlim_cur;
  for (rlim_t fd = first; fd <= last && fd < below; ++fd) close(int(fd));
  return 0;
}

extern "C" __attribute__((visibility("hidden"))) int close_range(unsigned first, unsigned last,
                                                                 int flags) noexcept {
  long r = syscall(SYS_close_range, first, last, flags);
  if (r == 0 || errno != ENOSYS || flags != 0) return int(r);
  return fr_close_range_by_close(first, last);
}

extern "C" {
__attribute__((visibility("hidden"))) char __libc_single_threaded = 0;
}
