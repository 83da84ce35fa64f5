// Starting the node daemon once per node (see node_daemon.h).
#include "node_daemon.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include "common/spawn.h"
#include "daemon/base/names.h"
#include "daemon/base/node_lock.h"
#include "daemon/base/node_status.h"

namespace fr::run {
namespace {

using Clock = std::chrono::steady_clock;

// Closes the start lock on every way out.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// Opens a file of the log directory, which other users may write into (/dev/shm): never through
// a link, never waiting (a FIFO with no reader fails at once), and only a regular file owned by
// this user or root; otherwise -1 and *why is one line naming the path.
int open_shared(const std::string& path, int flags, std::string* why) {
  int fd = ::open(path.c_str(), flags | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
  if (fd < 0) {
    *why = path + ": " +
           (errno == ELOOP   ? "a symbolic link"
            : errno == ENXIO ? "a FIFO or device, not a regular file"
                             : std::strerror(errno));
    return -1;
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    *why = path + ": not a regular file";
  } else if (st.st_uid != 0 && st.st_uid != ::geteuid()) {
    *why = path + ": belongs to uid " + std::to_string(st.st_uid) + ", neither root nor this user";
  } else {
    int fl = ::fcntl(fd, F_GETFL);  // the daemon writes it blocking, as any file
    if (fl >= 0) ::fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    return fd;
  }
  ::close(fd);
  errno = 0;  // opened, and refused: no reason to try another way
  return -1;
}

// Starts the daemon detached (common/spawn.h forks twice), so it is nobody's child here (never a
// zombie of fr-run, never in the command's process group or session): stdin from /dev/null, output
// appended to `log_file` (or /dev/null), cwd /, default signals, nothing else of fr-run's open (a
// pipe someone reads to its end would stay open for as long as the daemon lives). Returns its
// pid, or 0 with *error set; a daemon that could not exec leaves the reason in `log_file`.
pid_t spawn_detached(const std::vector<std::string>& argv, const std::string& log_file,
                     std::string* error) {
  const std::string exited = "the node daemon exited at start (see " + log_file + ")";
  Fd in, out;
  in.fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  // A relative name is taken from /, the daemon's working directory, as the daemon takes its
  // --log-dir.
  const std::string log_path = log_file.empty() || log_file[0] == '/' ? log_file : "/" + log_file;
  std::string why;
  out.fd = log_path.empty() ? -1 : open_shared(log_path, O_WRONLY | O_CREAT | O_APPEND, &why);
  if (out.fd < 0 && !why.empty())
    std::fprintf(stderr, "fr-run: the node daemon's output goes nowhere: %s\n", why.c_str());
  if (out.fd < 0) out.fd = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
  if (in.fd < 0 || out.fd < 0) {
    *error = exited;
    return 0;
  }
  fr::process::SpawnOptions o;
  o.argv = argv;
  o.detached = true;
  o.signal_mask = fr::process::signal_set({});
  o.default_signals = fr::process::all_signals();
  o.chdir = "/";
  o.redirects = {{0, in.fd}, {1, out.fd}, {2, out.fd}};
  o.close_other_fds = true;
  fr::process::SpawnResult r = fr::process::spawn(o);
  if (r.ok()) return r.pid;
  if (!r.cannot_run) {
    *error = r.message;
    return 0;
  }
  const std::string line = "fr-run: " + r.message + "\n";
  (void)!::write(out.fd, line.data(), line.size());
  *error = exited;
  return 0;
}

// True once the process is gone (not counting a zombie: it has no parent here to reap it soon,
// but init does; /proc tells a zombie apart).
bool gone(pid_t pid) {
  if (::kill(pid, 0) != 0) return errno == ESRCH;
  char path[64], state = 0;
  std::snprintf(path, sizeof path, "/proc/%d/stat", int(pid));
  if (FILE* f = std::fopen(path, "r")) {
    int scanned = std::fscanf(f, "%*d (%*[^)]) %c", &state);
    std::fclose(f);
    return scanned == 1 && (state == 'Z' || state == 'X');
  }
  return true;
}

// The --coordinator value on a running frd's command line; empty when unreadable.
std::string coordinator_of(pid_t pid) {
  std::string path = "/proc/" + std::to_string(pid) + "/cmdline", text;
  if (FILE* f = std::fopen(path.c_str(), "r")) {
    char buf[4096];
    size_t n = std::fread(buf, 1, sizeof buf, f);
    std::fclose(f);
    text.assign(buf, n);
  }
  std::vector<std::string> args;
  for (size_t start = 0; start < text.size();) {
    size_t end = text.find('\0', start);
    if (end == std::string::npos) end = text.size();
    args.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  for (size_t i = 0; i + 1 < args.size(); ++i)
    if (args[i] == "--coordinator") return args[i + 1];
  return {};
}

DaemonResult already_running(const Options& o, pid_t pid) {
  DaemonResult r;
  r.outcome = DaemonOutcome::running;
  r.pid = pid;
  std::string theirs = pid > 0 ? coordinator_of(pid) : std::string();
  if (!theirs.empty() && theirs != o.coordinator) r.other_coordinator = theirs;
  return r;
}

// Whether a TCP connection to HOST:PORT is refused outright (nothing listens there: the
// coordinator is gone). A timeout or a name that does not resolve says nothing either way.
bool nothing_listens(const std::string& address) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) return false;
  std::string host = address.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  addrinfo hints{}, *res = nullptr;
  hints.ai_socktype = SOCK_STREAM;
  if (::getaddrinfo(host.c_str(), address.substr(colon + 1).c_str(), &hints, &res) != 0)
    return false;
  bool refused = res != nullptr;
  for (addrinfo* a = res; a && refused; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      refused = false;
      break;
    }
    int err = ::connect(fd, a->ai_addr, a->ai_addrlen) == 0 ? 0 : errno;
    if (err == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      socklen_t len = sizeof err;
      err = ::poll(&p, 1, 1000) == 1 && ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0
                ? err
                : ETIMEDOUT;
    }
    ::close(fd);
    refused = err == ECONNREFUSED;
  }
  ::freeaddrinfo(res);
  return refused;
}

// The real uid of a process; -1 when unreadable.
long uid_of(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("Uid:", 0) == 0) return std::strtol(line.c_str() + 4, nullptr, 10);
  return -1;
}

// Why the daemon `pid`, following `theirs`, may be replaced: empty when it may not (another
// user's, or its coordinator is alive and so serves another job).
std::string replaceable(const Options& o, pid_t pid, const std::string& theirs) {
  if (pid <= 0 || uid_of(pid) != long(::geteuid())) return "";
  fr::daemon::NodeStatus st;
  const bool said =
      fr::daemon::read_node_status(o.log_dir, &st) && st.pid == pid && st.coordinator == theirs;
  if (said && st.state == "refused") return "it was refused there (" + st.message + ")";
  if (nothing_listens(theirs)) return "nothing listens there any more";
  struct timespec now {};
  ::clock_gettime(CLOCK_REALTIME, &now);
  const int64_t now_ns = int64_t(now.tv_sec) * 1'000'000'000 + now.tv_nsec;
  if (said && st.state == "unreachable" && now_ns - st.since_real_ns >= 10'000'000'000)
    return "it has not been reachable for " +
           std::to_string((now_ns - st.since_real_ns) / 1'000'000'000) + " s";
  return "";
}

// Stops the daemon `pid` (SIGTERM) and waits for the node lock to be free; false on timeout.
bool stop_daemon(const Options& o, pid_t pid, Clock::time_point deadline) {
  if (::kill(pid, SIGTERM) != 0) return false;
  while (fr::daemon::probe_node_lock(o.log_dir).held) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

}  // namespace

bool own_log_dir(const Options& o, std::string* dir, std::string* why) {
  *dir = o.log_dir + "/fr-" + fr::daemon::sanitize_name(o.coordinator, 128);
  if (::mkdir(dir->c_str(), 0700) != 0 && errno != EEXIST) {
    *why = "cannot make " + *dir + ": " + std::strerror(errno);
    return false;
  }
  struct stat st {};
  if (::lstat(dir->c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    *why = *dir + " is not a directory (a link or a file is never followed)";
  } else if (st.st_uid != ::geteuid()) {
    *why = *dir + " belongs to uid " + std::to_string(st.st_uid) + ", not this user";
  } else if (st.st_mode & 022) {
    *why = *dir + " is writable by others";
  } else {
    return true;
  }
  return false;
}

std::string refusal_of(const Options& o, pid_t pid, int wait_ms) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(wait_ms);
  do {
    fr::daemon::NodeStatus st;
    if (fr::daemon::read_node_status(o.log_dir, &st) && st.pid == pid &&
        st.coordinator == o.coordinator) {
      if (st.state == "refused")
        return "the node daemon (pid " + std::to_string(pid) +
               ") was refused by the coordinator at " + st.coordinator + ": " + st.message;
      return "";
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  } while (Clock::now() < deadline);
  return "";
}

DaemonResult ensure_node_daemon(const Options& o, int timeout_ms) {
  DaemonResult r;
  auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  std::error_code ec;
  std::filesystem::create_directories(o.log_dir, ec);
  if (ec) {
    r.message = "cannot create " + o.log_dir + ": " + ec.message();
    return r;
  }
  std::string untrusted;
  fr::daemon::NodeLockState s = fr::daemon::probe_node_lock(o.log_dir, &untrusted);
  if (s.held) {
    DaemonResult running = already_running(o, s.pid);
    if (running.other_coordinator.empty() ||
        replaceable(o, s.pid, running.other_coordinator).empty())
      return running;
  }
  if (!untrusted.empty()) std::fprintf(stderr, "fr-run: %s\n", untrusted.c_str());
  // Take turns with the other fr-runs of this node, on a file of this user or root only: another
  // user's (a link, a FIFO, a file they hold locked) is not waited on, the node lock alone then
  // keeps two daemons apart.
  Fd start;
  std::string start_path = fr::daemon::node_lock_path(o.log_dir) + ".start", why;
  start.fd = open_shared(start_path, O_RDWR | O_CREAT, &why);
  if (start.fd < 0 && errno == EACCES) start.fd = open_shared(start_path, O_RDONLY, &why);
  if (start.fd < 0) std::fprintf(stderr, "fr-run: not taking turns to start: %s\n", why.c_str());
  while (start.fd >= 0 && ::flock(start.fd, LOCK_EX | LOCK_NB) != 0) {
    if (Clock::now() > deadline) {
      r.message =
          "another fr-run has been starting the node daemon for too long (" + start_path + ")";
      return r;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  s = fr::daemon::probe_node_lock(o.log_dir);
  if (s.held) {  // the previous holder of the start lock started it, or the old one is still there
    DaemonResult running = already_running(o, s.pid);
    if (running.other_coordinator.empty()) return running;
    const std::string why = replaceable(o, s.pid, running.other_coordinator);
    if (why.empty()) return running;
    if (!stop_daemon(o, s.pid, deadline)) {
      r.message = "the node daemon (pid " + std::to_string(s.pid) + ") following " +
                  running.other_coordinator + " did not leave in time";
      return r;
    }
    r.replaced = running.other_coordinator + " (" + why + ")";
  }
  if (::access(o.frd.c_str(), X_OK) != 0) {
    r.message = "cannot run " + o.frd + ": " + std::strerror(errno);
    return r;
  }
  pid_t pid = spawn_detached(frd_node_argv(o), o.daemon_log, &r.message);
  if (!pid) return r;
  r.pid = pid;
  // Ready once it holds the node lock (it takes it before anything else).
  while (true) {
    s = fr::daemon::probe_node_lock(o.log_dir);
    if (s.held) {
      r.outcome = DaemonOutcome::started;
      return r;
    }
    if (gone(pid)) {
      r.message = "the node daemon exited at start (see " + o.daemon_log + ")";
      return r;
    }
    if (Clock::now() > deadline) {
      r.message = "the node daemon (pid " + std::to_string(pid) + ") took no lock on " +
                  fr::daemon::node_lock_path(o.log_dir) + " in time (see " + o.daemon_log + ")";
      return r;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace fr::run
