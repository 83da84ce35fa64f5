// cli/wheel/glibc_compat.cpp, the functions the wheel's tools define in place of glibc's newer
// than 2.28: the dl_iterate_phdr fallback for _dl_find_object gives glibc's own answer for code
// in the program, in libc and in libstdc++, and none for addresses outside every object; the
// _dl_find_object the tools call is glibc's where glibc has it; arc4random returns random words;
// stat and co, pthread_cond_clockwait and close_range answer as glibc's, by glibc's own and by
// the fallback a glibc 2.28 gets; __libc_single_threaded keeps libstdc++ atomic.
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <set>
#include <string>
#include <thread>
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

// ---- The stand-ins for glibc 2.30 to 2.34's functions, each both ways: glibc's own (found by
// version) and the fallback a glibc without it gets (forced) ----

extern "C" void fr_glibc_compat_force_fallback(bool on);
extern "C" int fr_cond_clockwait_by_timedwait(pthread_cond_t*, pthread_mutex_t*, clockid_t,
                                              const timespec*);
extern "C" int fr_close_range_by_close(unsigned first, unsigned last);

namespace {

struct Fallbacks {
  explicit Fallbacks(bool on) { fr_glibc_compat_force_fallback(on); }
  ~Fallbacks() { fr_glibc_compat_force_fallback(false); }
};

struct TempDir {
  std::string path;
  TempDir() {
    std::string t = "/tmp/fr-glibc-compat.XXXXXX";
    path = mkdtemp(t.data()) ? t : "";
  }
  ~TempDir() {
    int ignored = system(("rm -rf '" + path + "'").c_str());
    (void)ignored;
  }
};

bool same_file(const struct stat& a, const struct stat& b) {
  return a.st_dev == b.st_dev && a.st_ino == b.st_ino && a.st_mode == b.st_mode &&
         a.st_size == b.st_size && a.st_nlink == b.st_nlink && a.st_mtim.tv_sec == b.st_mtim.tv_sec;
}

timespec monotonic_in(long ms) {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  long long ns = t.tv_sec * 1000000000LL + t.tv_nsec + ms * 1000000LL;
  t.tv_sec = time_t(ns / 1000000000LL);
  t.tv_nsec = long(ns % 1000000000LL);
  return t;
}

long long monotonic_ms() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1000LL + t.tv_nsec / 1000000;
}

}  // namespace

TEST_CASE("stat, lstat, fstat, fstat64 and fstatat answer as glibc's own", "[cli]") {
  using Stat = int (*)(const char*, struct stat*);
  auto glibc_stat = reinterpret_cast<Stat>(dlvsym(RTLD_DEFAULT, "stat", "GLIBC_2.33"));
  auto glibc_lstat = reinterpret_cast<Stat>(dlvsym(RTLD_DEFAULT, "lstat", "GLIBC_2.33"));
  if (glibc_stat == nullptr || glibc_lstat == nullptr)
    FR_SKIP("this glibc has no stat of its own (it is older than 2.33)");
  TempDir dir;
  REQUIRE(!dir.path.empty());
  const std::string file = dir.path + "/file", link = dir.path + "/link";
  {
    FILE* f = fopen(file.c_str(), "w");
    REQUIRE(f != nullptr);
    fputs("twelve bytes", f);
    fclose(f);
  }
  REQUIRE(symlink(file.c_str(), link.c_str()) == 0);
  struct stat want_file {
  }, want_link{};
  REQUIRE(glibc_stat(file.c_str(), &want_file) == 0);
  REQUIRE(glibc_lstat(link.c_str(), &want_link) == 0);
  REQUIRE(S_ISLNK(want_link.st_mode));
  for (bool fallback : {false, true}) {
    INFO((fallback ? "the fallback (__xstat and co)" : "glibc's own"));
    Fallbacks mode(fallback);
    struct stat got {};
    REQUIRE(stat(link.c_str(), &got) == 0);
    CHECK(same_file(got, want_file));
    got = {};
    REQUIRE(lstat(link.c_str(), &got) == 0);
    CHECK(same_file(got, want_link));
    int fd = open(file.c_str(), O_RDONLY | O_CLOEXEC);
    REQUIRE(fd >= 0);
    got = {};
    CHECK(fstat(fd, &got) == 0);
    CHECK(same_file(got, want_file));
    struct stat64 got64 {};
    CHECK(fstat64(fd, &got64) == 0);
    CHECK(got64.st_ino == want_file.st_ino);
    close(fd);
    int dfd = open(dir.path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    REQUIRE(dfd >= 0);
    got = {};
    CHECK(fstatat(dfd, "link", &got, AT_SYMLINK_NOFOLLOW) == 0);
    CHECK(same_file(got, want_link));
    got = {};
    CHECK(fstatat(dfd, "link", &got, 0) == 0);
    CHECK(same_file(got, want_file));
    close(dfd);
    errno = 0;
    CHECK(stat((dir.path + "/none").c_str(), &got) == -1);
    CHECK(errno == ENOENT);
    errno = 0;
    CHECK(fstat(-1, &got) == -1);
    CHECK(errno == EBADF);
  }
}

TEST_CASE("pthread_cond_clockwait times out no earlier than its deadline, both ways", "[cli]") {
  pthread_mutex_t mutex = PTHREAD_MUTEX_INITIALIZER;
  pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
  for (bool fallback : {false, true}) {
    INFO((fallback ? "the fallback (pthread_cond_timedwait)" : "glibc's own"));
    Fallbacks mode(fallback);
    pthread_mutex_lock(&mutex);
    const long long start = monotonic_ms();
    const timespec deadline = monotonic_in(60);
    int rc = 0;
    while (rc == 0) rc = pthread_cond_clockwait(&cond, &mutex, CLOCK_MONOTONIC, &deadline);
    CHECK(rc == ETIMEDOUT);
    CHECK(monotonic_ms() - start >= 59);  // the clocks are read at a millisecond's resolution
    timespec past = monotonic_in(-5000);
    CHECK(pthread_cond_clockwait(&cond, &mutex, CLOCK_MONOTONIC, &past) == ETIMEDOUT);
    timespec real{};
    clock_gettime(CLOCK_REALTIME, &real);
    CHECK(pthread_cond_clockwait(&cond, &mutex, CLOCK_REALTIME, &real) == ETIMEDOUT);
    CHECK(pthread_cond_clockwait(&cond, &mutex, CLOCK_PROCESS_CPUTIME_ID, &real) == EINVAL);
    pthread_mutex_unlock(&mutex);
  }
  // The fallback's own answers where glibc's is not asked.
  pthread_mutex_lock(&mutex);
  timespec past = monotonic_in(-1);
  CHECK(fr_cond_clockwait_by_timedwait(&cond, &mutex, CLOCK_MONOTONIC, &past) == ETIMEDOUT);
  CHECK(fr_cond_clockwait_by_timedwait(&cond, &mutex, CLOCK_THREAD_CPUTIME_ID, &past) == EINVAL);
  pthread_mutex_unlock(&mutex);
}

TEST_CASE("pthread_cond_clockwait wakes on a signal, and std::condition_variable waits, both ways",
          "[cli]") {
  for (bool fallback : {false, true}) {
    INFO((fallback ? "the fallback (pthread_cond_timedwait)" : "glibc's own"));
    Fallbacks mode(fallback);
    std::mutex m;
    std::condition_variable cv;
    bool ready = false;
    std::thread signaller([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      std::lock_guard<std::mutex> lock(m);
      ready = true;
      cv.notify_all();
    });
    {
      std::unique_lock<std::mutex> lock(m);
      // steady_clock: libstdc++ calls pthread_cond_clockwait with CLOCK_MONOTONIC.
      CHECK(cv.wait_for(lock, std::chrono::seconds(30), [&] { return ready; }));
      auto start = std::chrono::steady_clock::now();
      CHECK(cv.wait_for(lock, std::chrono::milliseconds(30)) == std::cv_status::timeout);
      CHECK(std::chrono::steady_clock::now() - start >= std::chrono::milliseconds(30));
    }
    signaller.join();
  }
}

TEST_CASE("close_range and its fallback close the range and nothing else", "[cli]") {
  for (bool fallback : {false, true}) {
    INFO((fallback ? "the fallback (close(2) of each)" : "the system call"));
    int fds[4];
    for (int& fd : fds) fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    for (int fd : fds) REQUIRE(fd >= 3);
    const unsigned lo = unsigned(std::min(fds[0], fds[1])), hi = unsigned(std::max(fds[0], fds[1]));
    int outside = -1;  // a descriptor above the range, kept open
    for (int fd : {fds[2], fds[3]})
      if (unsigned(fd) > hi) outside = fd;
    REQUIRE(outside >= 0);
    if (fallback)
      CHECK(fr_close_range_by_close(lo, hi) == 0);
    else
      CHECK(close_range(lo, hi, 0) == 0);
    CHECK(fcntl(int(lo), F_GETFD) == -1);
    CHECK(fcntl(int(hi), F_GETFD) == -1);
    CHECK(fcntl(outside, F_GETFD) != -1);
    for (int fd : fds)
      if (unsigned(fd) > hi) close(fd);
  }
}

TEST_CASE("__libc_single_threaded reads 0 inside the program, so libstdc++ stays atomic", "[cli]") {
  extern char __libc_single_threaded;
  CHECK(__libc_single_threaded == 0);
}
