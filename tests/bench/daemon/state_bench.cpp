// frd-state-bench: the coordinator's state machine alone, without gRPC: N nodes x 8 ranks x 4
// communicators heartbeat once each per round, then the coordinator ticks ten times (a second
// of its ticker). Prints CPU time (not wall time, so a machine shared with other work still
// gives the figure) per heartbeat and per tick, and what that means at one heartbeat per node a
// second. The gRPC side (frd-loadgen) comes on top. Each count runs twice: without, then with
// the fail-slow summaries (#38): a fifth, job-wide communicator whose every member reports its
// newest 16 collectives (10 new ones a round, the newest with a kernel time) and two ring links,
// which the coordinator joins across all nodes.
#include <time.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "daemon/logic/coordinator.h"

namespace {

double cpu_us() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return double(t.tv_sec) * 1e6 + double(t.tv_nsec) / 1e3;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace fr::daemon;
  std::vector<int> counts;
  for (int i = 1; i < argc; ++i) counts.push_back(std::atoi(argv[i]));
  if (counts.empty()) counts = {2048, 8192, 16384};
  char dir[] = "/tmp/frd-state-bench.XXXXXX";
  if (!mkdtemp(dir)) return 1;
  for (int nodes : counts)
    for (bool slow : {false, true}) {
      CoordinatorConfig c;
      c.dump_dir = dir;
      c.job_id = "bench";
      c.stall_auto = true;
      c.heartbeat_timeout_ns = 3600'000'000'000;
      CoordinatorState st(c);
      std::vector<uint64_t> sessions;
      std::vector<NodeReport> reports;
      std::string err;
      for (int n = 0; n < nodes; ++n) {
        sessions.push_back(
            st.connect("node" + std::to_string(n), "node" + std::to_string(n), "bench", 0, &err));
        NodeReport r;
        for (int k = 0; k < 8; ++k) {
          ProcessReport p;
          p.log = "fr.bench.node" + std::to_string(n) + "." + std::to_string(k) + ".frlog";
          p.rank = n * 8 + k;
          p.world_size = nodes * 8;
          p.alive = true;
          p.job_id = "bench";
          p.host = "node" + std::to_string(n);
          for (int comm = 0; comm < 4; ++comm) {
            CommProgress cp;
            cp.comm_id = 0x1000 + uint64_t(comm);
            cp.size = 8;
            cp.rank = k;
            p.comms.push_back(cp);
          }
          if (slow) {
            CommProgress world;
            world.comm_id = 0x2000;
            world.size = nodes * 8;
            world.rank = p.rank;
            world.name = "world";
            p.comms.push_back(world);
            for (int dir = 0; dir < 2; ++dir) {
              LinkTiming l;
              l.comm_id = 0x2000;
              l.channel = 0;
              l.peer = (p.rank + (dir ? 1 : world.size - 1)) % world.size;
              l.send = dir == 1;
              l.steps = 8;
              l.step_ns = 100'000;
              p.links.push_back(l);
            }
          }
          r.processes.push_back(p);
        }
        reports.push_back(std::move(r));
      }
      double hb_us = 0, tick_us = 0;
      const int rounds = 5;
      for (int round = 1; round <= rounds; ++round) {
        int64_t t = int64_t(round) * 1'000'000'000;
        // Every op of the round completed; half the ranks show the next one in flight.
        for (auto& r : reports)
          for (auto& p : r.processes)
            for (auto& cp : p.comms) {
              cp.completed += 10;
              cp.enqueued = cp.completed + uint64_t(p.rank % 2);
              cp.oldest_age_ns = p.rank % 2 ? 20'000'000 : 0;
              cp.oldest_seq = cp.completed + 1;
              if (cp.comm_id != 0x2000) continue;
              // Ten new collectives this round, called within a millisecond across the job.
              uint64_t seq = cp.recent.empty() ? 0 : cp.recent.back().seq;
              for (int k = 0; k < 10; ++k) {
                ++seq;
                cp.recent.push_back(
                    {seq, 1,
                     t - 1'000'000'000 + int64_t(seq % 10) * 100'000'000 + p.rank % 1000 * 1000,
                     0});
              }
              cp.recent.back().gpu_ns = 5'000'000 + p.rank % 7 * 10'000;
              if (cp.recent.size() > CommProgress::kMaxRecent)
                cp.recent.erase(cp.recent.begin(), cp.recent.end() - CommProgress::kMaxRecent);
              for (auto& l : p.links) l.op_seq = seq;
            }
        std::vector<NodeReport> copies = reports;  // heartbeats arrive as fresh reports
        double c0 = cpu_us();
        for (int n = 0; n < nodes; ++n)
          st.heartbeat(sessions[size_t(n)], std::move(copies[size_t(n)]), t + n);
        double c1 = cpu_us();
        for (int k = 0; k < 10; ++k) st.tick(t + nodes + k * 100'000'000);
        double c2 = cpu_us();
        if (round > 1) {  // the first round fills the tables
          hb_us += (c1 - c0) / nodes;
          tick_us += (c2 - c1) / 10;
        }
      }
      hb_us /= rounds - 1;
      tick_us /= rounds - 1;
      std::printf(
          "state machine, %d nodes x 8 ranks x 4 communicators%s: %.1f us CPU per heartbeat, "
          "%.2f ms CPU per tick -> %.3f core at 1 Hz (ticking every 100 ms); "
          "%zu communicators learned, %zu bytes of reports kept\n",
          nodes, slow ? " + fail-slow summaries" : "", hb_us, tick_us / 1000,
          (hb_us * nodes + tick_us * 10) / 1e6,
          size_t(st.status(0, StatusQuery{0, 0, true, 0}).at("stall").at("learned_communicators")),
          st.retained_bytes());
    }
  std::string rm = std::string("rm -rf ") + dir;
  return std::system(rm.c_str()) == 0 ? 0 : 1;
}
