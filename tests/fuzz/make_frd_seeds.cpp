// Writes seed scripts for fr_fuzz_frd_peer (see frd_peer_script.h) with the current protocol:
// a node that connects, reports a stall and uploads its dump; a manual dump written in place; a
// node of another job; and heartbeats for fr_fuzz_wire. Usage: fr_fuzz_frd_seeds OUT_DIR (creates
// OUT_DIR/frd_peer and OUT_DIR/wire).
#include <sys/stat.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "daemon/base/crc32c.h"
#include "daemon/base/model.h"
#include "fr/v1/frd.pb.h"
#include "frd_peer_script.h"

namespace {

namespace script = fr::fuzz::frd_script;

std::string hello(const std::string& node, const std::string& job) {
  fr::v1::Hello h;
  h.set_protocol(fr::daemon::kProtocol);
  h.set_node_name(node);
  h.set_host(node + ".cluster");
  h.set_job_id(job);
  h.set_node_time_ns(1'700'000'000'000'000'000);
  return h.SerializeAsString();
}

std::string heartbeat(uint8_t session, int64_t stalled_ns) {
  fr::v1::Heartbeat hb;
  hb.set_seq(1);
  hb.set_node_time_ns(1'700'000'000'000'000'000);
  hb.mutable_echo()->set_t1_ns(1'000'000'000);
  hb.mutable_echo()->set_t2_ns(1'000'100'000);
  hb.mutable_echo()->set_t3_ns(1'000'200'000);
  for (int r = 0; r < 2; ++r) {
    auto* p = hb.add_processes();
    p->set_log("fr.job1.r" + std::to_string(r) + ".frlog");
    p->set_rank(r);
    p->set_world_size(2);
    p->set_pid(100 + r);
    p->set_alive(true);
    p->set_job_id("job1");
    p->set_host("n0");
    p->set_records(12);
    auto* c = p->add_comms();
    c->set_comm_id(0xabcdef);
    c->set_size(2);
    c->set_rank(r);
    c->set_coll_seq(6);
    c->set_enqueued(6);
    c->set_started(r == 0 ? 6 : 5);
    c->set_completed(5);
    c->set_oldest_in_flight_age_ns(r == 0 ? stalled_ns : 0);
    c->set_oldest_in_flight_seq(6);
    c->set_name("world");
  }
  hb.add_unreadable("fr.junk.frlog: bad magic");
  return std::string(1, char(session)) + hb.SerializeAsString();
}

std::string upload_header(const std::string& incident, const std::string& file,
                          const std::string& bytes) {
  fr::v1::UploadHeader h;
  h.set_incident_id(incident);
  h.set_node_name("n0");
  h.set_job_id("job1");
  h.set_snapshot_time_ns(1'700'000'000'000'000'000);
  auto* f = h.add_files();
  f->set_name(file);
  f->set_size(bytes.size());
  f->set_crc32c(fr::daemon::crc32c(0, bytes.data(), bytes.size()));
  auto* p = h.add_processes();
  p->set_rank(0);
  p->set_world_size(2);
  p->set_pid(100);
  p->set_host("n0");
  p->set_job_id("job1");
  p->set_file(file);
  p->set_alive(true);
  p->set_records(12);
  h.add_skipped()->set_file("fr.junk.frlog");
  return h.SerializeAsString();
}

std::string data(uint32_t index, uint64_t offset, const std::string& bytes) {
  fr::v1::UploadData d;
  d.set_file_index(index);
  d.set_offset(offset);
  d.set_data(bytes);
  return d.SerializeAsString();
}

std::string ms(uint32_t v) { return {char(v >> 24), char(v >> 16), char(v >> 8), char(v)}; }

bool write(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), std::streamsize(bytes.size()));
  return out.good();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  std::string out = std::string(argv[1]) + "/frd_peer";
  mkdir(argv[1], 0755);
  mkdir(out.c_str(), 0755);
  const std::string bytes = "FRLOG-bytes-of-a-dump-file";
  bool ok = true;

  std::string s;
  script::append(&s, script::kHello, hello("n0", "job1"));
  script::append(&s, script::kHeartbeat, heartbeat(0, 0));
  script::append(&s, script::kTick, ms(200));
  script::append(&s, script::kHeartbeat, heartbeat(0, 5'000'000'000));
  script::append(&s, script::kTick, ms(100));
  script::append(&s, script::kUploadHeader, upload_header("incident-0001", "n0-a.frlog", bytes));
  script::append(&s, script::kUploadData, data(0, 0, bytes.substr(0, 10)));
  script::append(&s, script::kUploadData, data(0, 10, bytes.substr(10)));
  script::append(&s, script::kUploadEnd, "");
  script::append(&s, script::kTick, ms(100));
  script::append(&s, script::kStatus, "");
  script::append(&s, script::kHeartbeat, heartbeat(0, 0));
  script::append(&s, script::kTick, ms(1000));
  script::append(&s, script::kStatus, "");
  ok &= write(out + "/stall_upload", s);

  s.clear();
  script::append(&s, script::kHello, hello("n0", "job1"));
  script::append(&s, script::kHello, hello("n1", ""));
  script::append(&s, script::kTrigger, "operator asked");
  script::append(&s, script::kPlaced, upload_header("incident-0001", "n0-b.frlog", bytes));
  fr::v1::DumpStatus st;
  st.set_incident_id("incident-0001");
  st.set_error("disk full");
  script::append(&s, script::kDumpStatus, std::string(1, '\1') + st.SerializeAsString());
  script::append(&s, script::kDisconnect, std::string(1, '\1'));
  script::append(&s, script::kTick, ms(6000));
  script::append(&s, script::kStatus, "");
  ok &= write(out + "/manual_placed", s);

  s.clear();
  script::append(&s, script::kHello, hello("../n2", "other-job"));
  script::append(&s, script::kHello, hello("n2", "job1"));
  script::append(&s, script::kHeartbeat, heartbeat(0, 0));
  script::append(&s, script::kDisconnect, "");
  script::append(&s, script::kTick, ms(60000));
  script::append(&s, script::kStatus, "");
  ok &= write(out + "/lost_node", s);

  // fr_fuzz_wire: a slicing byte, then a NodeMessage as a node sends it: a heartbeat alone, one
  // with a stall, and one with a field of a later version.
  const std::string wire = std::string(argv[1]) + "/wire";
  mkdir(wire.c_str(), 0755);
  for (int i = 0; i < 3; ++i) {
    fr::v1::NodeMessage m;
    m.mutable_heartbeat()->ParseFromString(heartbeat(0, i == 1 ? 5'000'000'000 : 0).substr(1));
    if (i == 2)
      m.mutable_heartbeat()
          ->GetReflection()
          ->MutableUnknownFields(m.mutable_heartbeat())
          ->AddVarint(40, 7);
    const std::string bytes_i = std::string(1, char(i)) + m.SerializeAsString();
    ok &= write(wire + "/heartbeat" + std::to_string(i), bytes_i);
  }

  if (!ok) {
    std::fprintf(stderr, "fr_fuzz_frd_seeds: cannot write seeds in %s\n", out.c_str());
    return 1;
  }
  return 0;
}
