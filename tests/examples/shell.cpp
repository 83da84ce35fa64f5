// See shell.h.
#include "shell.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <vector>

namespace fr::examples_test {

namespace fs = std::filesystem;

std::string quote(const std::string& word) {
  std::string out = "'";
  for (char c : word) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

Shell sh(const std::string& command, int timeout_s) {
  Shell r;
  std::string line = "timeout -k 5 " + std::to_string(timeout_s) + " bash -c " + quote(command) +
                     " 2>&1 </dev/null";
  FILE* p = ::popen(line.c_str(), "r");
  if (!p) {
    r.output = "popen failed";
    return r;
  }
  std::array<char, 4096> buf;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.output.append(buf.data(), n);
  int status = ::pclose(p);
  if (WIFEXITED(status))
    r.exit_code = WEXITSTATUS(status);
  else if (WIFSIGNALED(status))
    r.exit_code = 128 + WTERMSIG(status);
  return r;
}

std::string find_tool(const std::string& name) {
  std::vector<std::string> dirs;
  if (const char* d = std::getenv("FR_TOOLS_DIR"); d && *d) dirs.push_back(d);
  dirs.push_back("/opt/fr-tools/bin");
  if (const char* path = std::getenv("PATH")) {
    std::string p = path;
    for (size_t start = 0; start <= p.size();) {
      size_t end = p.find(':', start);
      if (end == std::string::npos) end = p.size();
      if (end > start) dirs.push_back(p.substr(start, end - start));
      start = end + 1;
    }
  }
  for (const auto& d : dirs) {
    std::string f = d + "/" + name;
    if (::access(f.c_str(), X_OK) == 0 && fs::is_regular_file(f)) return f;
  }
  return "";
}

std::string files_under(const std::string& dir, const std::string& suffix) {
  std::vector<std::string> found;
  fs::path root = fs::path(FR_SOURCE_DIR) / dir;
  for (const auto& e : fs::recursive_directory_iterator(root)) {
    std::string name = e.path().filename().string();
    if (e.is_regular_file() && name.size() >= suffix.size() &&
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
      found.push_back(e.path().string());
  }
  std::sort(found.begin(), found.end());
  std::string out;
  for (const auto& f : found) out += (out.empty() ? "" : " ") + quote(f);
  return out;
}

}  // namespace fr::examples_test
