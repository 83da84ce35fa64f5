// Watching a running job: the progress board says whether any rank moved; the job ends when every
// rank has exited, when no rank has moved for --snapshot-after seconds, or (--daemons) when the
// coordinator has written an incident's analysis (a hang's: a slow incident leaves the job running),
// or gave none in time.
#include <sys/wait.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "launch.h"

namespace fr::simjob {

namespace fs = std::filesystem;

namespace {
constexpr double kStartGraceS = 30;
}  // namespace

uint64_t Job::total_progress() const {
  uint64_t sum = 0;
  for (uint32_t r = 0; r < board->ranks; ++r)
    sum += board->slots[r].progress.load(std::memory_order_relaxed);
  return sum;
}

// Whether the incident in `dir` is a slow one (incident.json says so): the job runs on.
static bool slow_incident(const fs::path& dir) {
  std::ifstream f(dir / "incident.json");
  nlohmann::json j = nlohmann::json::parse(f, nullptr, false);
  return j.is_object() && j.value("kind", "") == "slow";
}

// The first incident whose analysis.json exists (the coordinator writes it last, atomically),
// slow incidents aside.
std::string Job::find_incident_analysis() const {
  std::error_code ec;
  fs::path job_dir = fs::path(incidents_dir()) / job_id;
  std::vector<fs::path> found;
  for (const auto& e : fs::directory_iterator(job_dir, ec))
    if (e.is_directory(ec) && fs::exists(e.path() / "analysis.json", ec) &&
        !slow_incident(e.path()))
      found.push_back(e.path());
  if (found.empty()) return {};
  std::sort(found.begin(), found.end());
  return found.front().string();
}

void Job::monitor() {
  uint64_t last = total_progress();
  auto last_change = Clock::now();
  for (;;) {
    if (g_signal) {
      stop_reason = "interrupted";
      return;
    }
    int running = reap(ranks);
    if (o.shape.elastic >= 0 && left.pid <= 0) {
      const ChildState& k = ranks[o.shape.world() - 1];
      if (k.exited && WIFEXITED(k.status) && WEXITSTATUS(k.status) == kRankExitLeft) {
        if (!start_joiner()) {
          stop_reason = "exited";
          return;
        }
        ++running;
      }
    }
    uint64_t now = total_progress();
    if (now != last) {
      last = now;
      last_change = Clock::now();
    }
    if (o.daemons) {
      std::string incident = find_incident_analysis();
      if (!incident.empty()) {
        stop_reason = "incident";
        dump_set = incident;
        stalled_for_s = seconds_since(last_change);
        return;
      }
      reap(daemons);
      if (!daemons.empty() && daemons[0].exited) {
        daemon_error = "frd coordinator exited during the job (see " + out + "/coordinator.log)";
        stop_reason = "no_verdict";
        return;
      }
    }
    if (running == 0) {
      ranks_ended = Clock::now();
      bool all_ok = true;
      for (uint32_t r = 0; r < board->ranks; ++r) {
        const ChildState& k = ranks[r];
        all_ok &= WIFEXITED(k.status) && WEXITSTATUS(k.status) == 0 &&
                  board->slots[r].steps_done.load() == static_cast<uint64_t>(o.shape.steps);
      }
      stop_reason = all_ok ? "completed" : "exited";
      if (o.daemons && !all_ok) {
        // Every rank is gone: give the coordinator its chance to report the deaths.
        auto t0 = Clock::now();
        while (seconds_since(t0) < o.verdict_timeout_s && !g_signal) {
          std::string incident = find_incident_analysis();
          if (!incident.empty()) {
            stop_reason = "incident";
            dump_set = incident;
            return;
          }
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        daemon_error = "frd coordinator gave no verdict within " +
                       std::to_string(static_cast<int>(o.verdict_timeout_s)) + " s";
        stop_reason = "no_verdict";
      }
      return;
    }
    double idle = seconds_since(last_change);
    // A rank that has not reached main yet (exec and library loading on a loaded machine) is
    // slow, not stalled: it gets a longer grace before the job counts as stuck.
    bool starting = false;
    for (uint32_t r = 0; r < board->ranks; ++r)
      starting |= !ranks[r].exited &&
                  board->slots[r].phase.load() == static_cast<uint32_t>(RankPhase::kStarting);
    bool recent = seconds_since(start) < kStartGraceS ||
                  (left.pid > 0 && seconds_since(joiner_started) < kStartGraceS);
    if (starting && recent) idle = 0;
    if (o.daemons) {
      if (idle > stall_after_limit_s(o) + o.verdict_timeout_s) {
        daemon_error = "frd coordinator gave no verdict within " +
                       std::to_string(static_cast<int>(o.verdict_timeout_s)) +
                       " s after the stall threshold";
        stop_reason = "no_verdict";
        stalled_for_s = idle;
        return;
      }
    } else if (o.snapshot_after_s > 0 && idle >= o.snapshot_after_s) {
      stop_reason = "stalled";
      stalled_for_s = idle;
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace fr::simjob
