// End to end, inside an all-entered stall: fr-simjob runs 4 nodes x 1 rank (every connection is
// over NET in the emulation's transport model, with its profiler events) under the agent, which
// NCCL-emulation loads as its profiler plugin. Each transport fault stops the DP all-reduce of
// step 1 in one place; the analysis must name the channel, the waiting rank, its peer and the
// direction. Rings: even channels send to rank+1, odd channels to rank-1 (sim/README.md).
#include <cstdlib>
#include <fstream>

#include <catch2/catch.hpp>

#include "simjob_run.h"

using fr::e2e::SimRun;
using nlohmann::json;

namespace {

struct Case {
  const char* fault;
  const char* op;
  int channel, waiting, peer;
  const char* direction;
  const char* cause;
  int step = 0;  // the channel step at which it stops (fr-simjob's at=, NCCL's step numbers)
};

json verdict_of(const SimRun& run) {
  INFO("out dir " << run.dir << ", exit " << run.exit_code << "\n" << run.output);
  REQUIRE(run.result.contains("analysis"));
  return run.result["analysis"]["verdict"];
}

}  // namespace

TEST_CASE("transport faults are located to their channel and peer pair", "[e2e][channels]") {
  const Case cases[] = {
      // rank 1's kernel stops on channel 1: rank 0 (1's successor there) waits for its data
      {"rank=1,step=1,kind=chan-stall,channel=1", "AllReduce", 1, 0, 1, "recv", "kernel"},
      // rank 2's proxy stops sending to 3 (channel 0 carries 2 -> 3)
      {"rank=2,step=1,kind=proxy-stall,peer=3", "AllReduce", 0, 3, 2, "recv", "proxy"},
      // what rank 1 sends to 0 is lost (channel 1 carries 1 -> 0)
      {"rank=1,step=1,kind=link-down,peer=0", "AllReduce", 1, 0, 1, "recv", "link"},
      // rank 3 posts no receive buffer for 2: 2 waits for credit to send
      {"rank=3,step=1,kind=proxy-recv-stall,peer=2", "AllReduce", 0, 2, 3, "send",
       "receiver_proxy"},
      // The world Broadcast from rank 0 runs down a tree: 0 -> {1, 2}, 1 -> {3}, on every channel.
      // Rank 1's kernel stops on channel 0: it holds 0's data, and 3 waits for it.
      {"rank=1,step=1,kind=chan-stall,comm=world,nth=1,channel=0", "Broadcast", 0, 3, 1, "recv",
       "kernel"},
      // 0 -> 2 loses data on both channels: the lower one is named
      {"rank=0,step=1,kind=link-down,comm=world,nth=1,peer=2", "Broadcast", 0, 2, 0, "recv",
       "link"},
      // 3 posts no buffer for 1: 1 waits for credit
      {"rank=3,step=1,kind=proxy-recv-stall,comm=world,nth=1,peer=1", "Broadcast", 0, 1, 3, "send",
       "receiver_proxy"},
      // the root's proxy stops sending to 2: the root has no receive side, kernel and proxy alike
      {"rank=0,step=1,kind=proxy-stall,comm=world,nth=1,peer=2", "Broadcast", 0, 2, 0, "recv",
       "sender"},
      // A ring all-reduce of 4 ranks runs 4(n-1) = 12 steps (sim/README.md): a stop at step 5
      // or 7 is reported at that step, not at the start of the collective.
      {"rank=1,step=1,kind=chan-stall,channel=1,at=5", "AllReduce", 1, 0, 1, "recv", "kernel", 5},
      {"rank=2,step=1,kind=proxy-stall,peer=3,at=7", "AllReduce", 0, 3, 2, "recv", "proxy", 7},
      {"rank=1,step=1,kind=link-down,peer=0,at=11", "AllReduce", 1, 0, 1, "recv", "link", 11},
  };
  for (const Case& c : cases) {
    DYNAMIC_SECTION(c.fault) {
      SimRun run = fr::e2e::run_simjob({"--nodes", "4", "--ranks-per-node", "1", "--steps", "3",
                                        "--fault", c.fault, "--snapshot-after", "3"});
      const json v = verdict_of(run);
      INFO(v.dump(2));
      REQUIRE(v["kind"] == "stuck_in_collective");
      REQUIRE(v["op"] == c.op);
      REQUIRE(v.contains("where"));
      const json& w = v["where"];
      CHECK(w["channel"] == c.channel);
      CHECK(w["waiting_rank"] == c.waiting);
      CHECK(w["peer_rank"] == c.peer);
      CHECK(w["transport"] == "NET");
      CHECK(w["direction"] == c.direction);
      CHECK(w["cause"] == c.cause);
      CHECK(w["step"] == c.step);
      REQUIRE(v.contains("channel_progress"));
      CHECK(!v["channel_progress"].empty());
      const std::string summary = v["summary"];
      CHECK(summary.find("channel " + std::to_string(c.channel) + " stopped at step " +
                         std::to_string(c.step)) != std::string::npos);
      // The Perfetto trace draws the channels: the stopped connection is an open slice.
      const std::string trace = run.dir + "/trace.json";
      const std::string cmd = fr::e2e::build_dir() + "/bin/fr-analyze --trace " + trace + " " +
                              run.dir + "/dumps > /dev/null";
      REQUIRE(std::system(cmd.c_str()) == 0);
      std::ifstream in(trace);
      const json t = json::parse(in);
      int open_slices = 0;
      for (const json& ev : t["traceEvents"])
        if (ev.value("cat", "") == "channel" && ev.value("cname", "") == "bad") ++open_slices;
      CHECK(open_slices > 0);
      fr::e2e::remove_run(run);
    }
  }
}

TEST_CASE("without a profiler plugin the verdict has no channel localization", "[e2e][channels]") {
  setenv("NCCL_PROFILER_PLUGIN", "none", 1);
  SimRun run =
      fr::e2e::run_simjob({"--nodes", "4", "--ranks-per-node", "1", "--steps", "3", "--fault",
                           "rank=1,step=1,kind=chan-stall,channel=1", "--snapshot-after", "3"});
  unsetenv("NCCL_PROFILER_PLUGIN");
  const json v = verdict_of(run);
  CHECK(v["kind"] == "stuck_in_collective");
  CHECK(!v.contains("where"));
  fr::e2e::remove_run(run);
}
