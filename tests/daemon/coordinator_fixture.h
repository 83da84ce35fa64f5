// Heartbeat reports, configs and dump headers for the coordinator's socket-free tests
// (coordinator*_test.cpp, assembly_test.cpp): the ranks of a four-rank job on communicator 0x42.
#pragma once

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "daemon/logic/coordinator.h"
#include "fixture.h"
#include "fr/flight_log.h"

namespace fr::daemon::test {

inline ProcessReport proc(int rank, bool alive, int64_t oldest_age_ns, uint64_t completed = 10,
                          bool clean = false) {
  ProcessReport p;
  p.log = "rank" + std::to_string(rank) + ".frlog";
  p.rank = rank;
  p.world_size = 4;
  p.pid = 100 + rank;
  p.alive = alive;
  p.exited_cleanly = clean;
  p.job_id = "job1";
  CommProgress c;
  c.comm_id = 0x42;
  c.size = 4;
  c.rank = rank;
  c.enqueued = completed + (oldest_age_ns ? 1 : 0);
  c.completed = completed;
  c.oldest_age_ns = oldest_age_ns;
  if (oldest_age_ns) {
    c.oldest_op = FR_OP_ALLREDUCE;
    c.oldest_seq = completed + 1;
  }
  c.name = "dp0";
  p.comms.push_back(c);
  return p;
}

inline NodeReport report(std::vector<ProcessReport> ps) {
  NodeReport r;
  r.processes = std::move(ps);
  return r;
}

inline DumpHeader header(const std::string& incident, const std::string& node) {
  DumpHeader h;
  h.incident_id = incident;
  h.node_name = node;
  return h;
}

}  // namespace fr::daemon::test
