// Helpers for the agent's tests: temporary directories, child processes with a chosen
// environment, and the logs a run left behind (read with the project's reader, fr::log).
#pragma once

#include <dirent.h>
#include <stdio.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

#include "log/reader.h"

namespace fr::agent_test {

// A fresh directory under TMPDIR (or /tmp), removed with its files when the object dies.
class TempDir {
 public:
  TempDir() {
    const char* base = getenv("TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/fr-agent-test.XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    if (mkdtemp(buf.data()) != nullptr) path_ = buf.data();
  }
  ~TempDir() {
    if (path_.empty()) return;
    for (const auto& f : files()) unlink((path_ + "/" + f).c_str());
    rmdir(path_.c_str());
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::vector<std::string> files() const {
    std::vector<std::string> out;
    if (DIR* d = opendir(path_.c_str())) {
      while (dirent* e = readdir(d))
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) out.push_back(e->d_name);
      closedir(d);
    }
    return out;
  }
  // Flight logs in the directory, full paths.
  std::vector<std::string> logs() const {
    std::vector<std::string> out;
    for (const auto& f : files())
      if (f.size() > 6 && f.compare(f.size() - 6, 6, ".frlog") == 0) out.push_back(path_ + "/" + f);
    return out;
  }

 private:
  std::string path_;
};

struct RunResult {
  int exit_code = -1;  // -1 when the child did not exit normally
  int signal = 0;
  std::string out;                            // stdout
  std::string err;                            // stderr
  std::map<std::string, std::string> values;  // key=value lines of stdout
};

// Runs argv[0] with the current environment plus `env` (NAME=value; an empty value unsets).
inline RunResult run(const std::vector<std::string>& argv,
                     const std::vector<std::pair<std::string, std::string>>& env) {
  RunResult res;
  int fds[2];
  if (pipe(fds) != 0) return res;
  char err_path[] = "/tmp/fr-agent-test-stderr.XXXXXX";
  int err_fd = mkstemp(err_path);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], 1);
    if (err_fd >= 0) dup2(err_fd, 2);
    close(fds[0]);
    close(fds[1]);
    for (const auto& [k, v] : env) {
      if (v.empty())
        unsetenv(k.c_str());
      else
        setenv(k.c_str(), v.c_str(), 1);
    }
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  close(fds[1]);
  char buf[4096];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof buf)) > 0) res.out.append(buf, (size_t)n);
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (WIFEXITED(status)) res.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) res.signal = WTERMSIG(status);
  if (err_fd >= 0) {
    lseek(err_fd, 0, SEEK_SET);
    while ((n = read(err_fd, buf, sizeof buf)) > 0) res.err.append(buf, (size_t)n);
    close(err_fd);
    unlink(err_path);
  }
  size_t pos = 0;
  while (pos < res.out.size()) {
    size_t end = res.out.find('\n', pos);
    if (end == std::string::npos) end = res.out.size();
    std::string line = res.out.substr(pos, end - pos);
    size_t eq = line.find('=');
    if (eq != std::string::npos) res.values[line.substr(0, eq)] = line.substr(eq + 1);
    pos = end + 1;
  }
  return res;
}

// Every communicator entry of a log, straight from the file with the format's own read primitive.
// Unlike fr::log::read_log, which keeps one entry per communicator id, this keeps entries that
// share an id (several ranks of one communicator in one process, e.g. ncclCommInitAll).
inline std::vector<fr_comm_entry> raw_comms(const std::string& path) {
  std::vector<fr_comm_entry> out;
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return out;
  struct stat st;
  if (fstat(fd, &st) == 0 && (size_t)st.st_size >= sizeof(fr_log_header)) {
    void* m = mmap(nullptr, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
    if (m != MAP_FAILED) {
      const auto* h = (const fr_log_header*)m;
      const fr_log_section* row =
          h->magic == FR_LOG_MAGIC ? fr_log_section_of(h, FR_SECTION_COMMS) : nullptr;
      const uint64_t end = row ? row->offset + (uint64_t)row->capacity * sizeof(fr_comm_entry) : 0;
      if (row != nullptr && row->entry_size == sizeof(fr_comm_entry) &&
          end <= (uint64_t)st.st_size) {
        const auto* slots = (const fr_comm_entry*)((const uint8_t*)m + row->offset);
        for (uint32_t i = 0; i < row->capacity; ++i) {
          fr_comm_entry e;
          if (fr_comm_read(&slots[i], &e)) out.push_back(e);
        }
      }
      munmap(m, (size_t)st.st_size);
    }
  }
  close(fd);
  return out;
}

using Env = std::vector<std::pair<std::string, std::string>>;

// The environment every probe runs with: the log directory, and no launcher variables that the
// test runner might have (they would change global_rank).
inline Env env_for(const TempDir& dir, Env extra = {}) {
  Env env = {{"FR_LOG_DIR", dir.path()}, {"FR_DISABLE", ""},
             {"FR_BUFFER_ENTRIES", ""},  {"FR_DEBUG", ""},
             {"FR_JOB_ID", ""},          {"TORCHELASTIC_RUN_ID", ""},
             {"SLURM_JOB_ID", ""},       {"RANK", ""},
             {"WORLD_SIZE", ""},         {"OMPI_COMM_WORLD_RANK", ""},
             {"PMI_RANK", ""},           {"SLURM_PROCID", ""},
             {"LOCAL_RANK", ""},         {"LD_PRELOAD", ""}};
  for (auto& e : extra) env.push_back(e);
  return env;
}

inline fr::log::LogFile only_log(const TempDir& dir) {
  auto logs = dir.logs();
  REQUIRE(logs.size() == 1);
  auto r = fr::log::read_log(logs[0]);
  INFO(r.message);
  REQUIRE(r.ok());
  return *r.log;
}

inline std::string slurp(FILE* f) {
  std::string s;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) s.append(buf, n);
  return s;
}

// The log directory of an in-process test: FR_LOG_DIR (and a ring of `ring_entries`) set before the
// first NCCL call of the process, so call it from a namespace-scope initializer. One per process.
inline TempDir& in_process_log_dir(const char* ring_entries) {
  static TempDir dir;
  static const bool ready = [&] {
    setenv("FR_LOG_DIR", dir.path().c_str(), 1);
    setenv("FR_BUFFER_ENTRIES", ring_entries, 1);
    unsetenv("FR_DISABLE");
    return true;
  }();
  (void)ready;
  return dir;
}

// The test's own log, read whole; `all_comms` keeps every communicator entry (also several that
// share an id, as raw_comms does) instead of the newest per id.
inline fr::log::LogFile read_in_process_log(const TempDir& dir, bool all_comms = false) {
  auto logs = dir.logs();
  REQUIRE(logs.size() == 1);
  auto r = fr::log::read_log(logs[0]);
  INFO(r.message);
  REQUIRE(r.ok());
  if (all_comms) r.log->comms = raw_comms(logs[0]);
  return *r.log;
}

// Records of one op kind, oldest first.
inline std::vector<fr_record> records_of(const fr::log::LogFile& log, fr_op op) {
  std::vector<fr_record> out;
  for (const auto& r : log.records)
    if (r.raw.op == op) out.push_back(r.raw);
  return out;
}

}  // namespace fr::agent_test
