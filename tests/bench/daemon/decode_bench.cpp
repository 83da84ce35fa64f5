// frd-decode-bench: what decoding one node's heartbeat costs the coordinator (8 ranks x 4
// communicators, as frd node sends it; then the same with the profiler's links, NIXL agent pairs
// and processes without a flight log), three ways:
//  - protobuf into a fresh NodeMessage, then from_proto into a fresh report (what gRPC's typed
//    reads and a report per heartbeat cost);
//  - protobuf into one kept Heartbeat, then from_proto into a kept report (HeartbeatDecoder's
//    way for a message it does not take whole);
//  - HeartbeatDecoder (wire.h), as the coordinator's applier runs it.
// Prints CPU time per heartbeat and the ratios, and how many of the heartbeats the fast decoder
// took (run it under valgrind --tool=callgrind for instruction counts).
// Usage: frd-decode-bench [heartbeats]
#include <time.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>

#include "daemon/rpc/convert.h"
#include "daemon/rpc/wire.h"

namespace {

double cpu_ns() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return double(t.tv_sec) * 1e9 + double(t.tv_nsec);
}

fr::v1::NodeMessage typical_heartbeat() {
  using namespace fr::daemon;
  NodeReport r;
  r.seq = 86400;
  r.node_time_ns = 1'796'000'000'000'000'000;
  for (int k = 0; k < 8; ++k) {
    ProcessReport p;
    p.log = "fr.job-4711.node0123." + std::to_string(k) + ".frlog";
    p.rank = 1000 + k;
    p.world_size = 131072;
    p.pid = 210000 + k;
    p.alive = true;
    p.job_id = "job-4711";
    p.host = "gpu-node-0123";
    p.records = 123'456'789;
    p.last_record_age_ns = 2'500'000;
    for (int c = 0; c < 4; ++c) {
      CommProgress cp;
      cp.comm_id = 0x9e3779b97f4a7c15ULL * uint64_t(c + 1);
      cp.size = c == 0 ? 131072 : 8;
      cp.rank = c == 0 ? 1000 + k : k;
      cp.state = 1;
      cp.coll_seq = cp.enqueued = 5'000'000 + uint64_t(c);
      cp.started = cp.completed = cp.enqueued - 1;
      cp.oldest_age_ns = 1'200'000;
      cp.oldest_seq = cp.coll_seq;
      cp.oldest_op = 3;
      cp.name = c == 0 ? "dp" : "tp" + std::to_string(c);
      p.comms.push_back(cp);
    }
    r.processes.push_back(p);
  }
  fr::v1::NodeMessage m;
  to_proto(r, m.mutable_heartbeat());
  m.mutable_heartbeat()->mutable_echo()->set_t1_ns(1);
  m.mutable_heartbeat()->mutable_echo()->set_t2_ns(2);
  m.mutable_heartbeat()->mutable_echo()->set_t3_ns(3);
  return m;
}

// The typical heartbeat with what a job under the profiler plugin, a NIXL job and fr-run add:
// 8 proxy-step links and 2 NIXL agent pairs per rank, 2 processes without a flight log.
fr::v1::NodeMessage full_heartbeat() {
  fr::v1::NodeMessage m = typical_heartbeat();
  fr::v1::Heartbeat* hb = m.mutable_heartbeat();
  for (int k = 0; k < hb->processes_size(); ++k) {
    fr::v1::ProcessReport* p = hb->mutable_processes(k);
    for (int l = 0; l < 8; ++l) {
      fr::v1::LinkTiming* t = p->add_links();
      t->set_comm_id(0x9e3779b97f4a7c15ULL);
      t->set_channel(l);
      t->set_peer((k + 1) % 8);
      t->set_send(l % 2 == 0);
      t->set_op_seq(5'000'000);
      t->set_steps(64);
      t->set_step_ns(180'000 + l);
      t->set_state(3);
    }
    for (int x = 0; x < 2; ++x) {
      fr::v1::XferProgress* d = p->add_xfers();
      d->set_local_agent("prefill-" + std::to_string(k));
      d->set_remote_agent("decode-" + std::to_string(x));
      d->set_in_flight(3);
      d->set_oldest_in_flight_age_ns(900'000);
      d->set_oldest_key((uint64_t(77 + x) << 24) | 5);
      d->set_oldest_op(1);
      d->set_oldest_bytes(1 << 20);
      d->set_oldest_status(1);
      d->set_completed(123'456);
    }
  }
  for (int u = 0; u < 2; ++u) {
    fr::v1::UnrecordedProcess* q = hb->add_unrecorded();
    q->set_pid(220000 + u);
    q->set_rank(2000 + u);
    q->set_world_size(131072);
    q->set_job_id("job-4711");
    q->set_file("fr-proc." + std::to_string(220000 + u));
    q->set_torch(true);
    q->set_torch_seq(99);
    q->set_torch_idle_ns(1'000'000);
  }
  return m;
}

// Decodes `m` n times each way and prints the figures.
uint64_t measure(const char* what, const fr::v1::NodeMessage& m, int n) {
  using namespace fr::daemon;
  const std::string bytes = m.SerializeAsString();
  grpc::Slice slice(bytes);
  const grpc::ByteBuffer buffer(&slice, 1);
  uint64_t sink = 0;

  double t0 = cpu_ns();
  for (int i = 0; i < n; ++i) {
    fr::v1::NodeMessage fresh;
    if (!fresh.ParseFromString(bytes)) return 0;
    NodeReport r = from_proto(fresh.heartbeat());
    sink += r.processes.size();
  }
  const double fresh_ns = (cpu_ns() - t0) / n;

  fr::v1::Heartbeat kept;
  NodeReport kept_report;
  const std::string body = m.heartbeat().SerializeAsString();
  t0 = cpu_ns();
  for (int i = 0; i < n; ++i) {
    if (!kept.ParseFromString(body)) return 0;
    from_proto(kept, &kept_report);
    sink += kept_report.processes.size();
  }
  const double kept_ns = (cpu_ns() - t0) / n;

  HeartbeatDecoder decoder;
  NodeReport report;
  fr::v1::PingEcho echo;
  t0 = cpu_ns();
  for (int i = 0; i < n; ++i) {
    if (!decoder.decode(buffer, &report, &echo)) return 0;
    sink += report.processes.size();
  }
  const double fast_ns = (cpu_ns() - t0) / n;

  std::printf("  %s (%zu bytes), %d times (CPU time):\n", what, bytes.size(), n);
  std::printf("    protobuf into a fresh message, from_proto into a fresh report: %7.0f ns\n",
              fresh_ns);
  std::printf(
      "    protobuf into a kept message, from_proto into a kept report:   %7.0f ns (%.1fx less)\n",
      kept_ns, fresh_ns / kept_ns);
  std::printf(
      "    HeartbeatDecoder, as the coordinator runs it:                   %7.0f ns (%.1fx less;"
      " the fast decoder took %llu of %d)\n",
      fast_ns, fresh_ns / fast_ns, static_cast<unsigned long long>(decoder.fast_decodes()), n);
  return sink;
}

}  // namespace

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 200000;
  if (n < 1) {
    std::fprintf(stderr, "usage: frd-decode-bench [heartbeats]\n");
    return 2;
  }
  for (const auto& [what, m] :
       {std::pair{"a heartbeat of 8 ranks x 4 communicators", typical_heartbeat()},
        std::pair{"the same with links, NIXL pairs and unrecorded processes", full_heartbeat()}})
    if (measure(what, m, n) == 0) {
      std::fprintf(stderr, "frd-decode-bench: a heartbeat did not decode\n");
      return 1;
    }
  return 0;
}
