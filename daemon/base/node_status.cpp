// The node daemon's connection state file (see node_status.h).
#include "daemon/base/node_status.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <sstream>

namespace fr::daemon {
namespace {

// One line of text: control bytes (a newline in an error message) become spaces.
std::string one_line(std::string s) {
  for (auto& c : s)
    if (static_cast<unsigned char>(c) < 0x20) c = ' ';
  return s.size() > 1000 ? s.substr(0, 1000) : s;
}

bool known_state(const std::string& s) {
  return s == "connected" || s == "refused" || s == "unreachable";
}

}  // namespace

std::string node_status_path(const std::string& log_dir) {
  return (log_dir.empty() ? std::string(".") : log_dir) + "/" + kNodeStatusName;
}

std::string format_node_status(const NodeStatus& s) {
  return "pid " + std::to_string(s.pid) + "\ncoordinator " + one_line(s.coordinator) + "\nstate " +
         one_line(s.state) + "\nsince " + std::to_string(s.since_real_ns) + "\nmessage " +
         one_line(s.message) + "\n";
}

bool parse_node_status(const std::string& text, NodeStatus* out) {
  NodeStatus s;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    const size_t sp = line.find(' ');
    const std::string key = line.substr(0, sp);
    const std::string value = sp == std::string::npos ? std::string() : line.substr(sp + 1);
    char* end = nullptr;
    if (key == "pid") {
      const long v = std::strtol(value.c_str(), &end, 10);
      if (value.empty() || *end != '\0' || v <= 0 || v > (1L << 30)) return false;
      s.pid = pid_t(v);
    } else if (key == "since") {
      const long long v = std::strtoll(value.c_str(), &end, 10);
      if (value.empty() || *end != '\0' || v < 0) return false;
      s.since_real_ns = v;
    } else if (key == "coordinator") {
      s.coordinator = value;
    } else if (key == "state") {
      s.state = value;
    } else if (key == "message") {
      s.message = value;
    }
  }
  if (s.pid <= 0 || !known_state(s.state)) return false;
  *out = s;
  return true;
}

bool read_node_status(const std::string& log_dir, NodeStatus* out) {
  const std::string path = node_status_path(log_dir);
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat st {};
  std::string text;
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
      (st.st_uid == 0 || st.st_uid == ::geteuid()) && st.st_size <= 4096) {
    char buf[4096];
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n > 0) text.assign(buf, size_t(n));
  }
  ::close(fd);
  return !text.empty() && parse_node_status(text, out);
}

}  // namespace fr::daemon
