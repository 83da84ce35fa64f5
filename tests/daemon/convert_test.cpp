// The heartbeat's decoding (daemon/rpc/convert.h): what a node reports arrives bounded and printable,
// and decoding into a report that held another node's heartbeat gives what a fresh decode gives.
// A dump's header and its dumped processes (log/manifest.h's records) keep every field through the
// one proto mapping, dump.json and the manifest's JSON.
#include <catch2/catch.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "daemon/host/dump_files.h"
#include "daemon/rpc/convert.h"
#include "proto_fill.h"
#include "report_compare.h"

using namespace fr::daemon;

namespace {

fr::v1::Heartbeat heartbeat(int processes, int comms, const std::string& word) {
  NodeReport r;
  r.seq = uint64_t(processes) * 100 + uint64_t(comms);
  r.node_time_ns = 123456789;
  for (int i = 0; i < processes; ++i) {
    ProcessReport p;
    p.log = word + ".rank" + std::to_string(i) + ".frlog";
    p.rank = i;
    p.world_size = processes;
    p.pid = 4000 + i;
    p.alive = i % 3 != 0;
    p.exited_cleanly = i % 5 == 0;
    p.job_id = "job-" + word;
    p.host = "host-" + word;
    p.records = 1000 + uint64_t(i);
    p.last_record_age_ns = 7 * i;
    p.flags = uint32_t(i);
    for (int c = 0; c < comms; ++c) {
      CommProgress cp;
      cp.comm_id = 0x1000 + uint64_t(c);
      cp.size = processes;
      cp.rank = i;
      cp.state = uint32_t(c % 3);
      cp.coll_seq = 10 + uint64_t(c);
      cp.p2p_seq = 20 + uint64_t(c);
      cp.enqueued = 30 + uint64_t(c);
      cp.started = 29 + uint64_t(c);
      cp.completed = 28 + uint64_t(c);
      cp.oldest_age_ns = c % 2 ? 5'000'000 : 0;
      cp.oldest_seq = 29 + uint64_t(c);
      cp.oldest_op = uint32_t(c);
      cp.name = c % 2 ? word + "-comm" + std::to_string(c) : "";
      p.comms.push_back(cp);
    }
    r.processes.push_back(p);
  }
  for (int i = 0; i < processes; ++i)
    r.unreadable.push_back(word + "-unreadable-" + std::to_string(i));
  if (processes > 2) r.gpu_alerts.push_back("GPU 0000:3b:00.0 reported Xid 79 (" + word + ")");
  fr::v1::Heartbeat hb;
  to_proto(r, &hb);
  return hb;
}

void check_same(const NodeReport& a, const NodeReport& b) {
  std::string why;
  const bool same = fr::daemon::test::same_report(a, b, &why);
  INFO(why);
  CHECK(same);
}

}  // namespace

TEST_CASE("a heartbeat decodes to what the node reported", "[daemon]") {
  NodeReport r = from_proto(heartbeat(3, 2, "alpha"));
  CHECK(r.seq == 302);
  REQUIRE(r.processes.size() == 3);
  CHECK(r.processes[1].log == "alpha.rank1.frlog");
  CHECK(r.processes[1].alive);
  CHECK_FALSE(r.processes[0].alive);
  CHECK(r.processes[1].job_id == "job-alpha");
  REQUIRE(r.processes[1].comms.size() == 2);
  CHECK(r.processes[1].comms[1].name == "alpha-comm1");
  CHECK(r.processes[1].comms[1].oldest_age_ns == 5'000'000);
  CHECK(r.unreadable.size() == 3);
  CHECK(r.gpu_alerts.size() == 1);
}

TEST_CASE("decoding into a used report gives what a fresh decode gives", "[daemon]") {
  const fr::v1::Heartbeat big = heartbeat(9, 6, "a-rather-long-name-that-is-not-inline");
  const fr::v1::Heartbeat small = heartbeat(2, 1, "b");
  const fr::v1::Heartbeat none = heartbeat(0, 0, "c");
  // Each order, so that every field shrinks and grows over a report that held something else.
  using Order = std::vector<const fr::v1::Heartbeat*>;
  for (const Order& order :
       {Order{&big, &small, &none, &big}, Order{&none, &small, &big, &small}}) {
    NodeReport reused;
    for (const fr::v1::Heartbeat* hb : order) {
      from_proto(*hb, &reused);
      check_same(reused, from_proto(*hb));
    }
  }
}

TEST_CASE("a heartbeat's names, text and counts arrive bounded", "[daemon]") {
  fr::v1::Heartbeat hb = heartbeat(1, 1, "x");
  auto* p = hb.mutable_processes(0);
  p->set_log("../../etc/passwd" + std::string(300, 'a'));
  p->set_host(std::string("h\x01\xff", 3) + std::string(100, 'b'));
  p->mutable_comms(0)->set_oldest_in_flight_age_ns(-5);
  for (size_t i = 0; i < kMaxCommsPerProcess + 3; ++i) p->add_comms()->set_comm_id(i);
  for (int i = 0; i < 100; ++i) hb.add_unreadable(std::string(300, '\n'));
  for (size_t i = 0; i < kMaxProcessesPerNode + 5; ++i) hb.add_processes()->set_log(".x");
  NodeReport reused = from_proto(heartbeat(3, 3, "long-long-long-long-long-long-long"));
  from_proto(hb, &reused);
  const NodeReport fresh = from_proto(hb);
  check_same(reused, fresh);
  REQUIRE(fresh.processes.size() == kMaxProcessesPerNode);
  const ProcessReport& q = fresh.processes[0];
  CHECK(q.log.size() == 200);
  CHECK(q.log.find('/') == std::string::npos);
  CHECK(q.log[0] != '.');
  CHECK(q.host.substr(0, 3) == "h??");
  CHECK(q.host.size() == 64 + 3);  // cut, and marked as cut with "..."
  CHECK(q.comms.size() == kMaxCommsPerProcess);
  CHECK(q.comms[0].oldest_age_ns == 0);
  CHECK(fresh.processes[1].log == "_x");
  REQUIRE(fresh.unreadable.size() == 64);
  CHECK(fresh.unreadable[0] == "x-unreadable-0");
  CHECK(fresh.unreadable[1] == std::string(256, '?') + "...");
}

TEST_CASE("a heartbeat's collective times arrive as times or not at all", "[daemon]") {
  fr::v1::Heartbeat hb = heartbeat(1, 1, "t");
  auto* c = hb.mutable_processes(0)->mutable_comms(0);
  const int64_t ms = 1'000'000, t0 = 1'700'000'000'000 * ms;
  auto add = [&](uint64_t seq, int64_t call, int64_t gpu, int64_t start, int64_t end) {
    auto* t = c->add_recent();
    t->set_seq(seq), t->set_call_ns(call), t->set_gpu_ns(gpu);
    t->set_gpu_start_ns(start), t->set_gpu_end_ns(end);
  };
  add(1, t0, 4 * ms, t0 + ms, t0 + 5 * ms);         // a collective, timed
  add(2, INT64_MAX, 4 * ms, t0 + ms, t0 + 5 * ms);  // a call time past any clock: dropped
  add(3, -t0, 4 * ms, t0 + ms, t0 + 5 * ms);        // before the epoch: dropped
  add(4, t0, INT64_MAX, INT64_MAX - 1, INT64_MAX);  // its GPU times are none: untimed
  add(5, t0, -ms, INT64_MIN, -1);                   // likewise
  NodeReport reused = from_proto(heartbeat(2, 2, "u"));
  from_proto(hb, &reused);
  const NodeReport fresh = from_proto(hb);
  check_same(reused, fresh);
  const auto& recent = fresh.processes[0].comms[0].recent;
  REQUIRE(recent.size() == 3);
  CHECK(recent[0].seq == 1);
  CHECK(recent[0].gpu_ns == 4 * ms);
  CHECK(recent[0].gpu_start_ns == t0 + ms);
  CHECK(recent[0].gpu_end_ns == t0 + 5 * ms);
  for (size_t i : {1, 2}) {
    CHECK(recent[i].call_ns == t0);
    CHECK(recent[i].gpu_ns == 0);
    CHECK(recent[i].gpu_start_ns == 0);
    CHECK(recent[i].gpu_end_ns == 0);
  }
}

// The proto message's fields, walked by its descriptor: each one set to a value of its own, through
// from_proto, to_json, from_json and to_proto, comes back; and the JSON names it as the proto does.
TEST_CASE("a dumped process keeps every field through proto and JSON", "[daemon]") {
  using namespace fr::daemon::test;
  fr::v1::SnapshotProcess wire;
  Filler().all(&wire);
  const fr::log::SnapshotProcess p = from_proto(wire);
  const nlohmann::json j = p;
  const google::protobuf::Descriptor* d = wire.GetDescriptor();
  CHECK(j.size() == size_t(d->field_count()));
  for (int i = 0; i < d->field_count(); ++i) {
    INFO(d->field(i)->name());
    CHECK(j.contains(d->field(i)->name()));
  }
  fr::log::SnapshotProcess read;
  CHECK(fr::log::from_json(j, &read));
  fr::v1::SnapshotProcess back;
  to_proto(read, &back);
  std::string why;
  const bool same = same_message(back, wire, &why);
  INFO(why);
  CHECK(same);

  fr::v1::SnapshotSkip skip_wire;
  Filler().all(&skip_wire);
  const nlohmann::json sj = from_proto(skip_wire);
  fr::log::SnapshotSkip skip;
  CHECK(fr::log::from_json(sj, &skip));
  fr::v1::SnapshotSkip skip_back;
  to_proto(skip, &skip_back);
  CHECK(same_message(skip_back, skip_wire, &why));
}

TEST_CASE("a dump header keeps every field through proto and dump.json", "[daemon]") {
  using namespace fr::daemon::test;
  fr::v1::UploadHeader wire;
  Filler().all(&wire);
  const DumpHeader h = from_proto(wire);
  fr::v1::UploadHeader back;
  to_proto(h, &back);
  std::string why;
  bool same = same_message(back, wire, &why);
  INFO(why);
  CHECK(same);
  // dump.json, the node's own copy, holds all of it but the connection's secret.
  DumpHeader read;
  REQUIRE(dump_header_from_json(dump_header_json(h), &read));
  CHECK(read.upload_key.empty());
  read.upload_key = h.upload_key;
  fr::v1::UploadHeader again;
  to_proto(read, &again);
  same = same_message(again, wire, &why);
  INFO(why);
  CHECK(same);
  // The node reads its own file strictly: a process without a field is refused.
  nlohmann::json j = dump_header_json(h);
  j["processes"][1].erase("torn");
  CHECK_FALSE(dump_header_from_json(j, &read));
}

TEST_CASE("a dumped process arrives bounded", "[daemon]") {
  fr::v1::SnapshotProcess wire;
  wire.set_host(std::string("h\x01", 2) + std::string(100, 'b'));
  wire.set_job_id(std::string(100, 'j'));
  wire.set_file(std::string(300, 'f'));
  wire.set_source(std::string(300, 's'));
  const fr::log::SnapshotProcess p = from_proto(wire);
  CHECK(p.host.substr(0, 2) == "h?");
  CHECK(p.host.size() == 64 + 3);
  CHECK(p.job_id.size() == 64 + 3);
  CHECK(p.file == std::string(256, 'f'));  // cut, not rewritten: the receiver checks it
  CHECK(p.source.size() == 256 + 3);
}
