// Spawning rank processes for the multi-process emulation tests (see spawn.h).
#include "spawn.h"

#include <dirent.h>
#include <fcntl.h>
#include <nccl.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>

#include "testing/files.h"

extern char** environ;

namespace frsim_test {
namespace {
std::string g_prefix;
std::atomic<int> g_counter{0};
}  // namespace

std::string last_prefix() { return g_prefix; }

std::vector<std::string> leftover_shm(const std::string& prefix) {
  std::vector<std::string> out;
  std::string want = prefix.substr(1);  // without the leading '/'
  if (DIR* d = opendir("/dev/shm")) {
    while (dirent* e = readdir(d))
      if (strncmp(e->d_name, want.c_str(), want.size()) == 0) out.push_back(e->d_name);
    closedir(d);
  }
  return out;
}

std::vector<RankResult> run_ranks(const std::string& scenario, int n, const std::string& arg,
                                  int deadline_s, const std::vector<std::string>& extra_env) {
  // The id comes from the emulation's own ncclGetUniqueId, so its key is random.
  ncclUniqueId id;
  ncclGetUniqueId(&id);
  char hex[2 * sizeof id.internal + 1];
  for (size_t i = 0; i < sizeof id.internal; ++i)
    snprintf(hex + 2 * i, 3, "%02x", static_cast<unsigned char>(id.internal[i]));
  g_prefix = "/frsimtest" + std::to_string(getpid()) + "x" + std::to_string(g_counter++);
  std::string exe = std::string(FR_BUILD_DIR) + "/tests/frsim_rank";
  std::string libdir = std::string(FR_BUILD_DIR) + "/sim/lib";
  char tmpl[] = "/tmp/frsim_test_XXXXXX";
  std::string dir = mkdtemp(tmpl);

  std::vector<std::string> env_store;
  for (char** e = environ; *e; ++e) {
    if (strncmp(*e, "LD_LIBRARY_PATH=", 16) == 0 || strncmp(*e, "FRSIM_SHM_PREFIX=", 17) == 0 ||
        strncmp(*e, "CUDA_VISIBLE_DEVICES=", 21) == 0 || strncmp(*e, "LD_PRELOAD=", 11) == 0)
      continue;
    env_store.push_back(*e);
  }
  env_store.push_back("LD_LIBRARY_PATH=" + libdir);
  env_store.push_back("FRSIM_SHM_PREFIX=" + g_prefix);
  for (const auto& kv : extra_env) {  // an extra entry replaces an inherited one of the same name
    std::string name = kv.substr(0, kv.find('=') + 1);
    std::erase_if(env_store,
                  [&](const std::string& e) { return e.compare(0, name.size(), name) == 0; });
    env_store.push_back(kv);
  }

  std::vector<pid_t> pids(n, -1);
  std::vector<std::string> logs(n);
  for (int r = 0; r < n; ++r) {
    std::vector<std::string> args = {exe, scenario, std::to_string(r), std::to_string(n), hex};
    if (!arg.empty()) args.push_back(arg);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::vector<std::string> env = env_store;
    env.push_back("FRSIM_DEVICE=" + std::to_string(r));
    std::vector<char*> envp;
    for (auto& v : env) envp.push_back(v.data());
    envp.push_back(nullptr);
    logs[r] = dir + "/rank" + std::to_string(r) + ".log";
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, logs[r].c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    if (posix_spawn(&pids[r], exe.c_str(), &fa, nullptr, argv.data(), envp.data()) != 0)
      pids[r] = -1;
    posix_spawn_file_actions_destroy(&fa);
  }
  std::vector<RankResult> res(n);
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(deadline_s);
  int live = 0;
  for (pid_t p : pids) live += p > 0;
  while (live > 0) {
    for (int r = 0; r < n; ++r) {
      if (pids[r] <= 0) continue;
      int st;
      if (waitpid(pids[r], &st, WNOHANG) == pids[r]) {
        res[r].status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        pids[r] = 0;
        --live;
      }
    }
    if (std::chrono::steady_clock::now() > end) {
      for (int r = 0; r < n; ++r)
        if (pids[r] > 0) {
          kill(pids[r], SIGKILL);
          waitpid(pids[r], nullptr, 0);
          res[r].status = -1;
          pids[r] = 0;
        }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  for (int r = 0; r < n; ++r) {
    res[r].output = fr::test::slurp(logs[r]);
    unlink(logs[r].c_str());
  }
  rmdir(dir.c_str());
  return res;
}

}  // namespace frsim_test
