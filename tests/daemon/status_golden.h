// A coordinator's state with something in every part of the status (nodes with processes,
// communicators, processes without a flight log, GPU alerts, a lost node, an incident with a
// failed dump, a peer's unprintable text), and its status text for a few pages, made comparable
// across runs: the coordinator's random id, the dump directory and the incident's wall-clock time
// replaced by fixed words. Written against CoordinatorState's public calls only, so the same
// function gave the golden texts (status_golden.inc) from the status built before it was typed.
#pragma once

#include <regex>
#include <string>
#include <utility>
#include <vector>

#include "coordinator_fixture.h"
#include "daemon/logic/coordinator.h"
#include "fixture.h"
#include "testing/clock.h"

namespace fr::daemon::test {

inline std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  if (from.empty()) return s;
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
  return s;
}

// Name of the page, and its text.
inline std::vector<std::pair<std::string, std::string>> golden_status_texts(
    const std::string& dump_dir) {
  using fr::test::kSec;
  CoordinatorConfig cfg = config(dump_dir);
  cfg.expect_ranks = 6;
  CoordinatorState st(cfg);
  std::string err;
  const uint64_t s0 = st.connect("n0", "h0", "job1", 0, &err);
  const uint64_t s1 = st.connect("n1", "h1", "job1", 0, &err);
  const uint64_t s2 = st.connect("n2", "h2", "job1", 0, &err);
  NodeReport r0 = report({proc(0, true, 0), proc(1, false, 0)});
  r0.gpu_alerts = {"GPU 0000:3b:00.0 reported Xid 79"};
  r0.processes[0].comms[0].name = std::string("dp\x01<0>\"q\"");
  r0.processes[1].log = std::string(140, 'x');
  UnrecordedProcess torch;
  torch.pid = 300;
  torch.rank = 5;
  torch.world_size = 8;
  torch.torch = true;
  torch.torch_seq = 77;
  torch.torch_idle_ns = 1'500'000'000;
  UnrecordedProcess plain;
  plain.pid = 301;
  r0.unrecorded = {torch, plain};
  NodeReport r1 = report({proc(2, true, 2 * kSec, 12), proc(3, true, 0, 12, true)});
  r1.processes[1].comms[0].coll_seq = 12;
  r1.processes[1].comms[0].p2p_seq = 3;
  r1.processes[1].comms[0].started = 11;
  st.heartbeat(s0, r0, 0);
  st.heartbeat(s1, r1, 0);
  st.heartbeat(s2, report({proc(4, true, 0)}), 0);
  st.disconnect(s2, kSec / 2);
  Actions a;
  const std::string id = st.trigger("by hand", kSec, &a);
  st.upload_failed(id, "n1", "disk full", kSec);
  const int64_t now = 3 * kSec / 2;
  std::vector<std::pair<std::string, std::string>> out = {
      {"whole", st.status_text(now, StatusQuery{})},
      {"summary", st.status_text(now, StatusQuery{0, 256, true})},
      {"second page of one node", st.status_text(now, StatusQuery{1, 1, false})},
      {"cut by size", st.status_text(now, StatusQuery{0, 256, false, 64})},
      {"past the last node", st.status_text(now, StatusQuery{5, 2, false})}};
  static const std::regex opened("\"opened_ns\":[0-9]+");
  for (auto& [name, text] : out) {
    text = replace_all(text, st.coordinator_id(), "COORDINATOR_ID");
    text = replace_all(text, dump_dir, "DUMP_DIR");
    text = std::regex_replace(text, opened, "\"opened_ns\":0");
  }
  return out;
}

}  // namespace fr::daemon::test
