// Running the examples' scripts and the linters from the example and image tests: a bash command
// line under coreutils' timeout, its stdout and stderr together, and where the linters live
// (scripts/install-deps.sh puts the PyPI ones in a virtual environment, /opt/fr-tools).
#pragma once

#include <string>

namespace fr::examples_test {

struct Shell {
  int exit_code = -1;  // 124: timed out; 128+N: killed by signal N
  std::string output;  // stdout and stderr, interleaved
};

// Runs `command` with bash -c, killed after timeout_s seconds.
Shell sh(const std::string& command, int timeout_s = 120);

// The command, single-quoted for bash.
std::string quote(const std::string& word);

// The absolute path of a tool: $FR_TOOLS_DIR, then /opt/fr-tools/bin, then PATH. Empty if absent.
std::string find_tool(const std::string& name);

// The source tree's files under `dir` (relative to the source root) whose names end in `suffix`,
// sorted; a test lists what it checks this way, so a new example is checked without a new line.
std::string files_under(const std::string& dir, const std::string& suffix);

}  // namespace fr::examples_test
