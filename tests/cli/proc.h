// Real processes for the launcher and packaging tests: start a program with extra environment,
// stdin from a string, stdout and stderr into files; wait with a deadline; read what it wrote.
#pragma once

#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

#include "temp_dir.h"

namespace fr::clitest {

// A fresh directory under /tmp (fr-cli-test.XXXXXX), removed with its tree.
struct TempDir : fr::test::TempDir {
  TempDir() : fr::test::TempDir("fr-cli-test") {}
};

// A started process. Output goes to OUT.stdout and OUT.stderr in `dir`.
struct Proc {
  pid_t pid = -1;
  std::string out_path, err_path;
  int status = -1;  // the shell's view once reaped: exit code, or 128+signal
  bool reaped = false;

  Proc(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
       const std::string& dir, const std::string& name, const std::string& stdin_text = "");
  ~Proc();  // kills and reaps a process still running
  // Waits up to timeout_s; false when still running.
  bool wait(double timeout_s);
  std::string out() const;
  std::string err() const;
};

// Runs to completion (killed after timeout_s: status -2).
struct Result {
  int status = -1;
  std::string out, err;
};
Result run(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
           const std::string& dir, const std::string& stdin_text = "", double timeout_s = 60);

// Pids of live processes whose command line has all of `words` as arguments.
std::vector<pid_t> processes_with_args(const std::vector<std::string>& words);

// Whether the process is gone (or a zombie).
bool gone(pid_t pid);

}  // namespace fr::clitest
