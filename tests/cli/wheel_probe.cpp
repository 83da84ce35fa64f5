// A program linked as the wheel's tools are (cli/wheel: the glibc 2.28 stubs, the start code,
// glibc_compat.cpp, the static C++ runtime) that uses each thing that linking needs to get right,
// and prints one line per check: "NAME: ok" or "NAME: FAILED ...". tests/cli/wheel_oldglibc_test.py
// runs it on this system's glibc and on glibc 2.31 (a Debian 11 root), where a program linked
// against glibc 2.34's start code runs no constructor and one asking for glibc 2.34's symbol
// versions does not start. Exit status 0 when every check passed.
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

int g_static_ctor_runs = 0;
int g_attribute_ctor_runs = 0;
int g_failures = 0;

struct CountsItsConstruction {
  CountsItsConstruction() { ++g_static_ctor_runs; }
} g_counted;

__attribute__((constructor)) void count_attribute_ctor() { ++g_attribute_ctor_runs; }

void report(const char* name, bool ok, const std::string& detail = "") {
  std::printf("%s: %s%s%s\n", name, ok ? "ok" : "FAILED", detail.empty() ? "" : " ",
              detail.c_str());
  if (!ok) ++g_failures;
}

__attribute__((noinline)) void throw_deep(int depth) {
  if (depth == 0) throw std::runtime_error("deep");
  throw_deep(depth - 1);
}

}  // namespace

int main() {
  report("constructors", g_static_ctor_runs == 1 && g_attribute_ctor_runs == 1,
         "static " + std::to_string(g_static_ctor_runs) + ", attribute " +
             std::to_string(g_attribute_ctor_runs));
  try {
    throw_deep(5);
    report("exceptions", false, "nothing thrown");
  } catch (const std::runtime_error& e) {
    report("exceptions", std::string(e.what()) == "deep");
  }
  std::mutex m;
  std::condition_variable cv;
  {
    std::unique_lock<std::mutex> lock(m);
    auto start = std::chrono::steady_clock::now();
    bool timed_out = cv.wait_for(lock, std::chrono::milliseconds(30)) == std::cv_status::timeout;
    report("condition_variable",
           timed_out && std::chrono::steady_clock::now() - start >= std::chrono::milliseconds(30));
  }
  std::atomic<int> sum{0};
  auto shared = std::make_shared<int>(1);
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i)
    threads.emplace_back([&sum, shared] {
      for (int k = 0; k < 1000; ++k) {
        std::shared_ptr<int> copy = shared;
        sum += *copy;
      }
    });
  for (auto& t : threads) t.join();
  report("threads", sum == 4000 && shared.use_count() == 1);

  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path dir = fs::temp_directory_path(ec) / ("fr-wheel-probe." + std::to_string(getpid()));
  fs::create_directories(dir, ec);
  {
    std::FILE* f = std::fopen((dir / "file").c_str(), "w");
    if (f) std::fputs("12345", f), std::fclose(f);
  }
  fs::create_symlink(dir / "file", dir / "link", ec);
  struct stat by_fd {};
  int fd = open((dir / "file").c_str(), O_RDONLY | O_CLOEXEC);
  bool fstat_ok = fd >= 0 && fstat(fd, &by_fd) == 0 && by_fd.st_size == 5;
  report("stat", fs::is_directory(dir) && fs::file_size(dir / "link", ec) == 5 &&
                     fs::is_symlink(dir / "link") && fstat_ok && !fs::exists(dir / "none"));
  // close_range closes the descriptors from `fd` up.
  bool closed = fd >= 0 && close_range(unsigned(fd), ~0U, 0) == 0 && fcntl(fd, F_GETFD) == -1;
  report("close_range", closed);
  fs::remove_all(dir, ec);

  std::random_device random;
  unsigned a = random(), b = random(), c = random();
  report("random_device", !(a == b && b == c));
  void* libm = dlopen("libm.so.6", RTLD_NOW);
  report("dlopen", libm != nullptr && dlsym(libm, "cos") != nullptr);
  return g_failures == 0 ? 0 : 1;
}
