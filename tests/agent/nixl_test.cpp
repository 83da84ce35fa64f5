// NIXL transfers in the flight log, on real NIXL 1.5.1 (nixl-cu13 from /opt/fr-nixl, made by
// scripts/install-deps.sh): two processes with the agent preloaded move DRAM over UCX on loopback,
// through NIXL's own Python binding (nixl_pair.py) and through torch 2.15's one-sided transport
// (nixl_torch.py). Checked from the logs: healthy transfers with their peer, size, backend and
// notification; a stopped target's transfers in progress; a killed target's remote-disconnect
// error; many transfers in flight and a full table; a libnixl.so of another ABI, which turns
// recording off with one line while every call still reaches the library.
//
// The real-NIXL cases preload the agent into Python, so they run in plain builds only.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "skip.h"
#include "test_util.h"
#include "testing/files.h"

using fr::agent_test::Env;
using fr::agent_test::env_for;
using fr::agent_test::records_of;
using fr::agent_test::run;
using fr::agent_test::RunResult;
using fr::agent_test::TempDir;
using fr::test::exists;
using fr::test::slurp;

namespace {

const std::string kPython = FR_NIXL_PYTHON;
const std::string kPair = std::string(FR_NIXL_EXAMPLE) + "/nixl_pair.py";
const std::string kTorch = std::string(FR_NIXL_SCRIPTS) + "/nixl_torch.py";
constexpr bool kSanitized = FR_AGENT_SANITIZED != 0;

void need_real_nixl() {
  if (kSanitized) FR_SKIP("sanitizer build: the agent is preloaded into Python");
  if (access(kPython.c_str(), X_OK) != 0)
    FR_SKIP("no NIXL: " << kPython << " is missing (scripts/install-deps.sh makes it)");
}

void touch(const std::string& p) { std::ofstream(p).put('\n'); }

// Waits for a file the drivers publish; false after `seconds`.
bool wait_file(const std::string& p, double seconds) {
  auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (!exists(p)) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

// One driver process, its output in a file. Killed (after SIGCONT) if still running at the end.
class Child {
 public:
  Child(const std::vector<std::string>& argv, const Env& env, const std::string& out) : out_(out) {
    pid_ = fork();
    if (pid_ != 0) return;
    int fd = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
    }
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
  ~Child() {
    if (pid_ <= 0 || done_) return;
    kill(pid_, SIGCONT);
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  pid_t pid() const { return pid_; }
  void signal(int sig) const { kill(pid_, sig); }
  // The exit status (-1 when killed by a signal or still running after `seconds`).
  int wait(double seconds) {
    auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    int status = 0;
    while (waitpid(pid_, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > end) return -1;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    done_ = true;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  std::string output() const { return slurp(out_); }

 private:
  pid_t pid_ = -1;
  bool done_ = false;
  std::string out_;
};

// The log the process `pid` wrote in `dir`.
fr::log::LogFile log_of(const TempDir& dir, pid_t pid) {
  for (const auto& path : dir.logs()) {
    auto r = fr::log::read_log(path);
    INFO(r.message);
    REQUIRE(r.ok());
    if (r.log->header.pid == pid) return *r.log;
  }
  FAIL("no flight log of pid " << pid << " in " << dir.path());
  return {};
}

// A target and an initiator of one driver script, on loopback.
// UCX over tcp only: a write completes when the target's worker acknowledges it, so a stopped
// target keeps its transfers in progress. Other transports between two processes of one machine
// (shared memory, cross-memory attach) write into the target without it, and may finish them.
const Env kNeedsTarget = {{"UCX_TLS", "tcp"}};

struct Pair {
  TempDir dir;
  TempDir work;  // the drivers' files, apart from the logs
  Env env;
  std::unique_ptr<Child> target, initiator;

  explicit Pair(Env extra = {}) {
    env = env_for(
        dir, {{"LD_PRELOAD", FR_AGENT_LIB}, {"UCX_NET_DEVICES", "lo"}, {"PYTHONUNBUFFERED", "1"}});
    for (auto& e : extra) env.push_back(e);
  }
  std::string at(const char* name) const { return work.path() + "/" + name; }
  void start(const std::vector<std::string>& target_args,
             const std::vector<std::string>& initiator_args) {
    target = std::make_unique<Child>(target_args, env, at("target.out"));
    initiator = std::make_unique<Child>(initiator_args, env, at("initiator.out"));
    INFO(target->output() << initiator->output());
    REQUIRE(wait_file(at("warm"), 90));
  }
  void go() const { touch(at("go")); }
  // result.json of the initiator: its pid and each transfer's final state.
  std::string result() const {
    INFO(target->output() << initiator->output());
    REQUIRE(wait_file(at("result.json"), 90));
    return slurp(at("result.json"));
  }
  void finish() {
    target->signal(SIGCONT);
    touch(at("finish"));
    touch(at("stop"));
    INFO(initiator->output());
    CHECK(initiator->wait(60) == 0);
  }
};

// fr-analyze's JSON on the logs in `dir` (a build without fr-analyze skips).
nlohmann::json analyze(const TempDir& dir) {
  if (std::string(FR_ANALYZE).empty()) FR_SKIP("this build has no fr-analyze");
  RunResult r = run({FR_ANALYZE, "--json", dir.path()}, {});
  INFO(r.out << r.err);
  auto j = nlohmann::json::parse(r.out, nullptr, false);
  REQUIRE_FALSE(j.is_discarded());
  return j;
}

bool has_pid(const nlohmann::json& list, pid_t pid) {
  for (const auto& p : list)
    if (p.is_number() && p.get<long>() == pid) return true;
  return false;
}

std::string notif_of(const fr_xfer_entry& x) {
  return std::string(x.notif, strnlen(x.notif, sizeof x.notif));
}

std::vector<fr_xfer_entry> tagged(const fr::log::LogFile& log) {
  std::vector<fr_xfer_entry> out;
  for (const auto& x : log.xfers)
    if (notif_of(x).rfind("tag-", 0) == 0) out.push_back(x);
  return out;
}

std::vector<std::string> pair_args(const Pair& p, const char* role, int n = 0,
                                   const char* mode = "") {
  std::vector<std::string> a = {kPython, kPair, role, p.work.path()};
  if (std::string(role) == "initiator") {
    a.push_back(std::to_string(n));
    a.push_back(mode);
  }
  return a;
}

}  // namespace

TEST_CASE("NIXL: healthy transfers are recorded with their peer, size, backend and notification",
          "[agent][nixl]") {
  need_real_nixl();
  Pair p;
  p.start(pair_args(p, "target"), pair_args(p, "initiator", 8, "healthy"));
  p.go();
  std::string result = p.result();
  CHECK(result.find("PROC") == std::string::npos);
  p.finish();
  CHECK(p.target->wait(60) == 0);

  auto init = log_of(p.dir, p.initiator->pid());
  CHECK((init.header.flags & FR_LOG_F_NIXL) != 0);
  CHECK((init.header.flags & FR_LOG_F_NIXL_OFF) == 0);
  CHECK(init.header.xfer_dropped == 0);
  CHECK(init.xfers.size() == 9);  // the warm-up write and the eight
  auto xs = tagged(init);
  REQUIRE(xs.size() == 8);
  for (const auto& x : xs) {
    INFO(notif_of(x));
    CHECK(x.op == FR_XFER_OP_WRITE);
    CHECK(x.bytes == 4096);
    CHECK(x.descs == 1);
    CHECK(std::string(x.local_agent) == "initiator");
    CHECK(std::string(x.remote_agent) == "target");
    CHECK(std::string(x.backend) == "UCX");
    CHECK((x.flags & FR_XFER_F_NOTIF) != 0);
    CHECK(x.posts == 1);
    CHECK(x.state == FR_XFER_RELEASED);
    CHECK(x.status == FR_NIXL_SUCCESS);
    CHECK(x.post_ns >= x.create_ns);
    CHECK(x.done_ns >= x.post_ns);
    CHECK(x.status_calls >= 1);
  }
  CHECK(records_of(init, FR_OP_NIXL_POST_XFER).size() == 9);
  CHECK(records_of(init, FR_OP_NIXL_CREATE_AGENT).size() == 1);
  for (const auto& r : records_of(init, FR_OP_NIXL_POST_XFER)) {
    CHECK(r.comm_id == 0);
    CHECK(r.aux != 0);  // the transfer's entry
  }

  auto tgt = log_of(p.dir, p.target->pid());
  CHECK((tgt.header.flags & FR_LOG_F_NIXL) != 0);
  CHECK(records_of(tgt, FR_OP_NIXL_CREATE_AGENT).size() == 1);
  CHECK(tgt.xfers.empty());  // the target of one-sided writes makes no transfer calls

  auto j = analyze(p.dir);
  INFO(j.dump(2));
  std::string kind = j["verdict"].value("kind", "");
  CHECK(kind.rfind("nixl_", 0) != 0);
}

TEST_CASE("NIXL: transfers to a stopped target stay in progress in the log", "[agent][nixl]") {
  need_real_nixl();
  Pair p(kNeedsTarget);
  p.start(pair_args(p, "target"), pair_args(p, "initiator", 8, "stall"));
  p.target->signal(SIGSTOP);
  p.go();
  std::string result = p.result();
  CHECK(result.find("DONE") == std::string::npos);

  auto init = log_of(p.dir, p.initiator->pid());  // live: the initiator waits for `finish`
  auto xs = tagged(init);
  REQUIRE(xs.size() == 8);
  for (const auto& x : xs) {
    CHECK(x.state == FR_XFER_IN_PROGRESS);
    CHECK(x.status == FR_NIXL_IN_PROG);
    CHECK(x.done_ns == 0);
    CHECK(x.posts == 1);
    CHECK(x.status_calls >= 1);
    CHECK(std::string(x.remote_agent) == "target");
  }
  CHECK(init.writer_alive);

  // fr-analyze on the live logs names the transfer and the stopped process behind its peer.
  auto j = analyze(p.dir);
  INFO(j.dump(2));
  const auto& v = j["verdict"];
  CHECK(v.value("kind", "") == "nixl_stalled");
  CHECK(v["nixl"].value("remote_agent", "") == "target");
  CHECK(v["nixl"].value("op", "") == "WRITE");
  CHECK(v["nixl"].value("bytes", 0) == 4096);
  CHECK(v["nixl"].value("state", "") == "in_progress");
  CHECK(has_pid(v["culprit_pids"], p.target->pid()));
  p.finish();
}

TEST_CASE(
    "NIXL: a target killed while transfers are in flight leaves them in remote-disconnect error",
    "[agent][nixl]") {
  need_real_nixl();
  Pair p;
  p.start(pair_args(p, "target"), pair_args(p, "initiator", 8, "kill"));
  p.target->signal(SIGSTOP);
  p.go();
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // posted, in progress
  p.target->signal(SIGKILL);
  std::string result = p.result();
  INFO(result);
  CHECK(result.find("PROC") == std::string::npos);

  auto init = log_of(p.dir, p.initiator->pid());
  auto xs = tagged(init);
  REQUIRE(xs.size() == 8);
  for (const auto& x : xs) {
    INFO(notif_of(x) << " state " << x.state << " status " << x.status);
    CHECK(x.status == FR_NIXL_ERR_REMOTE_DISCONNECT);
    CHECK(x.done_ns != 0);
  }
  auto j = analyze(p.dir);
  INFO(j.dump(2));
  CHECK(j["verdict"].value("kind", "") == "nixl_disconnected");
  CHECK(j["verdict"]["nixl"].value("remote_agent", "") == "target");
  p.finish();
}

TEST_CASE("NIXL: many transfers in flight are all recorded, and past a full table they are counted",
          "[agent][nixl]") {
  need_real_nixl();
  SECTION("200 in flight, the default table") {
    Pair p(kNeedsTarget);
    p.start(pair_args(p, "target"), pair_args(p, "initiator", 200, "stall"));
    p.target->signal(SIGSTOP);
    p.go();
    p.result();
    auto init = log_of(p.dir, p.initiator->pid());
    CHECK(init.header.xfer_capacity == FR_DEFAULT_XFER_CAPACITY);
    CHECK(init.header.xfer_dropped == 0);
    auto xs = tagged(init);
    CHECK(xs.size() == 200);
    size_t in_flight = 0;
    for (const auto& x : xs) in_flight += x.state == FR_XFER_IN_PROGRESS;
    CHECK(in_flight == 200);
    p.finish();
  }
  SECTION("100 in flight, a table of 64") {
    Pair p(Env{{"FR_XFER_ENTRIES", "64"}, kNeedsTarget[0]});
    p.start(pair_args(p, "target"), pair_args(p, "initiator", 100, "stall"));
    p.target->signal(SIGSTOP);
    p.go();
    p.result();
    auto init = log_of(p.dir, p.initiator->pid());
    CHECK(init.header.xfer_capacity == 64);
    CHECK(init.xfers.size() == 64);  // the released warm-up's entry was taken again
    CHECK(init.header.xfer_dropped == 100 - 64);
    for (const auto& x : init.xfers) CHECK(x.state == FR_XFER_IN_PROGRESS);
    // Every post is still a record, with or without an entry.
    CHECK(records_of(init, FR_OP_NIXL_POST_XFER).size() == 101);
    p.finish();
  }
}

TEST_CASE("NIXL: torch's one-sided transport is recorded, healthy and stalled", "[agent][nixl]") {
  need_real_nixl();
  static int port = 29700 + (int)(getpid() % 200);
  SECTION("healthy") {
    Pair p;
    std::string pt = std::to_string(port++);
    p.start({kPython, kTorch, "target", p.work.path(), pt},
            {kPython, kTorch, "initiator", p.work.path(), pt, "4", "healthy"});
    p.go();
    std::string result = p.result();
    INFO(result);
    CHECK(result.find("\"done\", \"done\", \"done\", \"done\"") != std::string::npos);
    p.finish();
    auto init = log_of(p.dir, p.initiator->pid());
    REQUIRE(init.xfers.size() >= 5);
    size_t big = 0;
    for (const auto& x : init.xfers) {
      CHECK(std::string(x.local_agent) == "torch-initiator");
      CHECK(std::string(x.remote_agent) == "torch-target");
      CHECK(x.op == FR_XFER_OP_WRITE);
      CHECK(x.status == FR_NIXL_SUCCESS);
      CHECK(x.done_ns != 0);
      big += x.bytes == 65536;
    }
    CHECK(big == 4);
  }
  SECTION("stalled: the target stopped, UCX over tcp") {
    Pair p(kNeedsTarget);
    std::string pt = std::to_string(port++);
    p.start({kPython, kTorch, "target", p.work.path(), pt},
            {kPython, kTorch, "initiator", p.work.path(), pt, "3", "stall"});
    p.target->signal(SIGSTOP);
    p.go();
    std::string result = p.result();
    INFO(result);
    CHECK(result.find("TimeoutError") != std::string::npos);  // what torch tells the caller
    auto init = log_of(p.dir, p.initiator->pid());
    size_t stuck = 0;
    for (const auto& x : init.xfers)
      if (x.bytes == 65536 && x.state == FR_XFER_IN_PROGRESS && x.done_ns == 0) ++stuck;
    CHECK(stuck == 3);  // ...and what NIXL still says
    p.finish();
  }
}

TEST_CASE(
    "NIXL: a libnixl.so of another ABI turns recording off with one line and calls go through",
    "[agent][nixl]") {
  TempDir dir;
  RunResult r = run({std::string(FR_AGENT_TEST_DIR) + "/fr_agent_nixl_probe"}, env_for(dir));
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(r.values["ctor_calls"] == "1");
  CHECK(r.values["name_size"] == "11");  // the real constructor got the caller's arguments
  CHECK(r.values["status"] == "1");
  size_t lines = 0;
  for (size_t at = r.err.find("NIXL:"); at != std::string::npos; at = r.err.find("NIXL:", at + 1))
    ++lines;
  CHECK(lines == 1);
  CHECK(r.err.find("createXferReq") != std::string::npos);  // names the first function missing
  CHECK(r.err.find("not the supported 1.5 ABI") != std::string::npos);
  auto logs = dir.logs();
  REQUIRE(logs.size() == 1);
  auto log = fr::log::read_log(logs[0]);
  REQUIRE(log.ok());
  CHECK((log.log->header.flags & FR_LOG_F_NIXL_OFF) != 0);
  CHECK((log.log->header.flags & FR_LOG_F_NIXL) == 0);
  CHECK(log.log->xfers.empty());
}
