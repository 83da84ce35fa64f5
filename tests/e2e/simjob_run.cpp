// Running fr-simjob from the tests and reading what it left behind (see simjob_run.h).
#include "simjob_run.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include <catch2/catch.hpp>

#include "testing/files.h"

namespace fr::e2e {

namespace fs = std::filesystem;

std::string build_dir() { return FR_BUILD_DIR; }

SimRun run_simjob(const std::vector<std::string>& args, double timeout_s, double interrupt_after_s,
                  int interrupt_signal) {
  SimRun run;
  std::string tmpl = (fs::temp_directory_path() / "fr-e2e-XXXXXX").string();
  REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
  run.dir = tmpl;
  std::string out_path = run.dir + "/simjob.out";

  std::vector<std::string> argv = {build_dir() + "/bin/fr-simjob"};
  argv.insert(argv.end(), args.begin(), args.end());
  argv.push_back("--out");
  argv.push_back(run.dir);
  std::vector<char*> ptrs;
  for (auto& a : argv) ptrs.push_back(a.data());
  ptrs.push_back(nullptr);

  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    int fd = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
    }
    ::execv(ptrs[0], ptrs.data());
    ::_exit(127);
  }
  auto start = std::chrono::steady_clock::now();
  int status = 0;
  bool timed_out = false, interrupted = false;
  for (;;) {
    pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) break;
    double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (interrupt_after_s > 0 && !interrupted && elapsed > interrupt_after_s) {
      interrupted = true;
      ::kill(pid, interrupt_signal);
    }
    if (!timed_out && elapsed > timeout_s) {
      timed_out = true;
      ::kill(pid, SIGTERM);  // fr-simjob stops its ranks and cleans up on SIGTERM
    }
    if (timed_out && elapsed > timeout_s + 15) ::kill(pid, SIGKILL);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  run.exit_code = timed_out ? -2 : WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  run.output = fr::test::slurp(out_path);
  std::ifstream rj(run.dir + "/result.json");
  if (rj) {
    try {
      run.result = nlohmann::json::parse(rj);
    } catch (const std::exception&) {
      run.result = nullptr;
    }
  }
  return run;
}

bool process_gone(int pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  if (!f) return true;
  std::string line;
  std::getline(f, line);
  auto close = line.rfind(')');
  return close == std::string::npos || line.size() < close + 3 || line[close + 2] == 'Z' ||
         line[close + 2] == 'X';
}

void remove_run(const SimRun& run) {
  std::error_code ec;
  if (!run.dir.empty()) fs::remove_all(run.dir, ec);
}

const Op* RankView::coll(const std::string& role, uint64_t seq) const {
  auto it = collectives.find(role);
  if (it == collectives.end()) return nullptr;
  for (const Op& o : it->second)
    if (o.seq == seq) return &o;
  return nullptr;
}

uint64_t RankView::last_coll_seq(const std::string& role) const {
  auto it = collectives.find(role);
  return it == collectives.end() || it->second.empty() ? 0 : it->second.back().seq;
}

uint64_t RankView::last_p2p_seq(const std::string& role) const {
  auto it = p2p.find(role);
  return it == p2p.end() || it->second.empty() ? 0 : it->second.back().seq;
}

std::map<int, RankView> load_dump_set(const std::string& dir, fr::log::Manifest* manifest_out) {
  fr::log::Manifest manifest;
  std::string error;
  INFO("dump set " << dir);
  REQUIRE(fr::log::read_manifest(dir, &manifest, &error));
  INFO(error);
  std::map<int, RankView> out;
  for (const auto& p : manifest.processes) {
    fr::log::ReadResult rr = fr::log::read_log(dir + "/" + p.file);
    INFO(rr.message);
    REQUIRE(rr.ok());
    RankView v;
    v.rank = p.rank;
    v.alive = p.alive;
    v.log = std::move(*rr.log);
    REQUIRE(v.rank >= 0);
    REQUIRE(out.count(v.rank) == 0);

    // Roles: the world comes from init; the job splits tp, pp, dp in that order.
    std::vector<const fr_comm_entry*> splits;
    for (const auto& c : v.log.comms) {
      if (c.origin == FR_ORIGIN_INIT_RANK) v.comm_ids["world"] = c.id;
      if (c.origin == FR_ORIGIN_SPLIT) splits.push_back(&c);
    }
    std::sort(splits.begin(), splits.end(), [](auto* a, auto* b) {
      return a->create_ns != b->create_ns ? a->create_ns < b->create_ns
                                          : a->derive_index < b->derive_index;
    });
    const char* roles[] = {"tp", "pp", "dp"};
    for (size_t i = 0; i < splits.size() && i < 3; ++i) v.comm_ids[roles[i]] = splits[i]->id;

    for (const auto& rec : v.log.records) {
      for (const auto& [role, id] : v.comm_ids) {
        if (rec.raw.comm_id != id) continue;
        Op o;
        o.seq = rec.raw.seq;
        o.op = rec.raw.op;
        o.count = rec.raw.count;
        o.dtype = rec.raw.dtype;
        o.redop = rec.raw.redop;
        o.peer = rec.raw.peer;
        o.gpu = rec.gpu_state;
        o.flags = rec.raw.flags;
        if (fr::log::op_is_collective(rec.raw.op)) v.collectives[role].push_back(o);
        if (fr::log::op_is_p2p(rec.raw.op)) v.p2p[role].push_back(o);
      }
    }
    for (auto* m : {&v.collectives, &v.p2p})
      for (auto& [role, ops] : *m)
        std::stable_sort(ops.begin(), ops.end(),
                         [](const Op& a, const Op& b) { return a.seq < b.seq; });
    out[v.rank] = std::move(v);
  }
  if (manifest_out) *manifest_out = manifest;
  return out;
}

std::vector<std::string> small_job(int steps, const std::vector<std::string>& faults,
                                   const std::string& snapshot_after) {
  std::vector<std::string> a = {"--nodes",
                                "2",
                                "--ranks-per-node",
                                "4",
                                "--tp",
                                "2",
                                "--pp",
                                "2",
                                "--steps",
                                std::to_string(steps),
                                "--snapshot-after",
                                snapshot_after,
                                "--quiet"};
  for (const auto& f : faults) {
    a.push_back("--fault");
    a.push_back(f);
  }
  return a;
}

}  // namespace fr::e2e
