// The dump set's records and manifest.json (log/manifest.h): fr-analyze reads manifests that frd,
// fr-simjob and fr-gendumps wrote, possibly versions apart, so the bytes written are pinned here,
// a manifest in the form of each writer reads back whole, and a dumped process goes through its
// one to_json and one from_json unchanged.
#include <string>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "log/manifest.h"
#include "temp_dir.h"
#include "testing/files.h"

using fr::log::Manifest;
using fr::log::SnapshotProcess;
using fr::log::SnapshotSkip;
using fr::test::TempDir;

namespace {

// Every field set, to values that show their type (an unsigned above INT64_MAX, -1 for unknown).
SnapshotProcess full_process() {
  SnapshotProcess p;
  p.rank = 3;
  p.world_size = 16;
  p.pid = 4245;
  p.host = "node0";
  p.job_id = "job-42";
  p.file = "node0-rank3.node0.4245.frlog";
  p.source = "/dev/shm/fr.job-42.node0.4245.1796.frlog";
  p.alive = true;
  p.records = 18446744073709551615ull;
  p.overwritten = 311;
  p.torn = 2;
  return p;
}

void check_same(const SnapshotProcess& a, const SnapshotProcess& b) {
  CHECK(a.rank == b.rank);
  CHECK(a.world_size == b.world_size);
  CHECK(a.pid == b.pid);
  CHECK(a.host == b.host);
  CHECK(a.job_id == b.job_id);
  CHECK(a.file == b.file);
  CHECK(a.source == b.source);
  CHECK(a.alive == b.alive);
  CHECK(a.records == b.records);
  CHECK(a.overwritten == b.overwritten);
  CHECK(a.torn == b.torn);
}

Manifest parse(const std::string& text) {
  Manifest m;
  std::string err;
  const bool ok = fr::log::parse_manifest(text, &m, &err);
  INFO(err);
  REQUIRE(ok);
  return m;
}

}  // namespace

TEST_CASE("a dumped process keeps every field through its JSON", "[log]") {
  const SnapshotProcess p = full_process();
  const nlohmann::json j = p;
  CHECK(j.size() == 11);
  SnapshotProcess back;
  CHECK(fr::log::from_json(j, &back));
  check_same(back, p);
  // Reading into a process that held another gives the same.
  SnapshotProcess used = full_process();
  used.rank = 9;
  used.host = "other";
  CHECK(fr::log::from_json(j, &used));
  check_same(used, p);

  const nlohmann::json s = SnapshotSkip{"/dev/shm/fr.bad.frlog", "bad magic"};
  SnapshotSkip skip;
  CHECK(fr::log::from_json(s, &skip));
  CHECK(skip.file == "/dev/shm/fr.bad.frlog");
  CHECK(skip.error == "bad magic");
}

TEST_CASE("a dumped process reads what is there and says when a field is missing or bad", "[log]") {
  nlohmann::json j = full_process();
  j.erase("torn");
  SnapshotProcess p;
  CHECK_FALSE(fr::log::from_json(j, &p));
  CHECK(p.records == 18446744073709551615ull);  // the others are read
  CHECK(p.torn == 0);
  j = full_process();
  j["host"] = 7;
  j["rank"] = "three";
  p = SnapshotProcess();
  CHECK_FALSE(fr::log::from_json(j, &p));
  CHECK(p.host.empty());
  CHECK(p.rank == -1);
  CHECK(p.pid == 4245);
  // A rank out of range is there with the right type, and read as unknown.
  j = full_process();
  j["rank"] = -7;
  j["pid"] = int64_t(1) << 40;
  p = SnapshotProcess();
  CHECK(fr::log::from_json(j, &p));
  CHECK(p.rank == -1);
  CHECK(p.pid == 0);
  CHECK_FALSE(fr::log::from_json(nlohmann::json::array({1, 2}), &p));
  SnapshotSkip s;
  CHECK_FALSE(fr::log::from_json(nlohmann::json{{"file", "x"}}, &s));
  CHECK(s.file == "x");
}

TEST_CASE("manifest.json is written byte for byte as before", "[log]") {
  TempDir dir;
  std::string err;
  SnapshotProcess unknown;
  unknown.file = "rankunknown.node1.77.frlog";
  REQUIRE(fr::log::write_manifest(dir.path, "job-42", 1796205600123456789ull,
                                  {full_process(), unknown},
                                  {{"/dev/shm/fr.bad.frlog", "bad magic: not a flight log"}},
                                  {{"node0", 0, true}, {"node1", -2500, true}, {"node2", 0, false}},
                                  "frd coordinator", 16, &err));
  const std::string want = R"({
  "expected_ranks": 16,
  "job_id": "job-42",
  "nodes": [
    {
      "clock_offset_ns": 0,
      "host": "node0"
    },
    {
      "clock_offset_ns": -2500,
      "host": "node1"
    },
    {
      "host": "node2"
    }
  ],
  "processes": [
    {
      "alive": true,
      "file": "node0-rank3.node0.4245.frlog",
      "host": "node0",
      "job_id": "job-42",
      "overwritten": 311,
      "pid": 4245,
      "rank": 3,
      "records": 18446744073709551615,
      "source": "/dev/shm/fr.job-42.node0.4245.1796.frlog",
      "torn": 2,
      "world_size": 16
    },
    {
      "alive": false,
      "file": "rankunknown.node1.77.frlog",
      "host": "",
      "job_id": "",
      "overwritten": 0,
      "pid": 0,
      "rank": -1,
      "records": 0,
      "source": "",
      "torn": 0,
      "world_size": -1
    }
  ],
  "schema": "fr-dumpset/1",
  "skipped": [
    {
      "error": "bad magic: not a flight log",
      "file": "/dev/shm/fr.bad.frlog"
    }
  ],
  "source": "frd coordinator",
  "time": "2026-12-02T10:00:00.123Z",
  "time_ns": 1796205600123456789
}
)";
  CHECK(fr::test::slurp(dir.path + "/manifest.json") == want);
  Manifest m;
  REQUIRE(fr::log::read_manifest(dir.path, &m, &err));
  REQUIRE(m.processes.size() == 2);
  check_same(m.processes[0], full_process());
  check_same(m.processes[1], unknown);
  REQUIRE(m.skipped.size() == 1);
  CHECK(m.skipped[0].error == "bad magic: not a flight log");
  CHECK(m.nodes.size() == 3);
  CHECK(m.nodes[1].clock_offset_ns == -2500);
  CHECK(m.expected_ranks == 16);
  CHECK(m.time_ns == 1796205600123456789ull);
}

TEST_CASE("a manifest in the form of each writer reads back whole", "[log]") {
  // frd snapshot and frd node: no expected ranks, nodes without offsets.
  Manifest snap = parse(R"({"schema":"fr-dumpset/1","job_id":"job-42","source":"frd snapshot",
      "time_ns":1796205600000000000,"time":"2026-12-02T10:00:00.000Z",
      "nodes":[{"host":"node0"}],
      "processes":[{"rank":3,"world_size":16,"pid":4245,"host":"node0","job_id":"job-42",
        "file":"node0-rank3.node0.4245.frlog","source":"/dev/shm/fr.job-42.node0.4245.1796.frlog",
        "alive":true,"records":18446744073709551615,"overwritten":311,"torn":2}],
      "skipped":[{"file":"/dev/shm/fr.bad.frlog","error":"bad magic"}]})");
  CHECK(snap.source == "frd snapshot");
  CHECK(snap.expected_ranks == -1);
  REQUIRE(snap.processes.size() == 1);
  check_same(snap.processes[0], full_process());
  REQUIRE(snap.nodes.size() == 1);
  CHECK_FALSE(snap.nodes[0].has_offset);
  REQUIRE(snap.skipped.size() == 1);
  CHECK(snap.skipped[0].file == "/dev/shm/fr.bad.frlog");

  // frd coordinator: expected ranks and clock offsets, files under the nodes' prefixes.
  Manifest coord = parse(R"({"schema":"fr-dumpset/1","job_id":"job-42","source":"frd coordinator",
      "time_ns":1796205600000000000,"expected_ranks":2,
      "nodes":[{"host":"node0","clock_offset_ns":0},{"host":"node1","clock_offset_ns":-2500}],
      "processes":[{"rank":0,"world_size":2,"pid":10,"host":"node0","job_id":"job-42",
        "file":"node0-rank0.node0.10.frlog","source":"/dev/shm/a","alive":false,"records":5,
        "overwritten":0,"torn":0},
       {"rank":1,"world_size":2,"pid":11,"host":"node1","job_id":"job-42",
        "file":"node1-rank1.node1.11.frlog","source":"/dev/shm/b","alive":true,"records":6,
        "overwritten":0,"torn":1}],"skipped":[]})");
  CHECK(coord.expected_ranks == 2);
  REQUIRE(coord.processes.size() == 2);
  CHECK(coord.processes[1].host == "node1");
  CHECK(coord.processes[1].torn == 1);
  CHECK(coord.nodes[1].clock_offset_ns == -2500);

  // fr-simjob and fr-gendumps: no nodes at all; and a taker that left out what it did not know.
  Manifest sim = parse(R"({"schema":"fr-dumpset/1","job_id":"","source":"fr-gendumps",
      "time_ns":1,"processes":[{"rank":-1,"file":"rankunknown.h.1.frlog","pid":1},
       {"file":"rank1.h.2.frlog"}]})");
  CHECK(sim.nodes.empty());
  CHECK(sim.skipped.empty());
  REQUIRE(sim.processes.size() == 2);
  CHECK(sim.processes[0].rank == -1);
  CHECK(sim.processes[0].pid == 1);
  CHECK(sim.processes[1].rank == -1);
  CHECK(sim.processes[1].world_size == -1);
  CHECK_FALSE(sim.processes[1].alive);
}
