// Writes seed inputs for the fuzz targets in the current format: flight-log dumps made by
// encode_snapshot, a manifest made by write_manifest and a heartbeat history made by
// slow_history_to_text, so the seeds follow the formats as they grow. Usage: fr_fuzz_seeds
// OUT_DIR (creates OUT_DIR/flight_log, OUT_DIR/manifest and OUT_DIR/slow_history).
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "fr/flight_log.h"
#include "log/reader.h"
#include "log/slow_history.h"
#include "log/snapshot.h"

namespace {

bool write(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), std::streamsize(bytes.size()));
  return out.good();
}

fr::log::LogFile job_log(int rank, int records, uint64_t first_id) {
  fr::log::LogFile f;
  std::memset(&f.header, 0, sizeof f.header);
  f.header.global_rank = rank;
  f.header.world_size = 4;
  f.header.local_rank = rank % 2;
  f.header.pid = 1000 + rank;
  f.header.nccl_version = 22809;
  f.header.flags = FR_LOG_F_GPU_MARKERS;
  std::snprintf(f.header.hostname, sizeof f.header.hostname, "node%d", rank / 2);
  std::snprintf(f.header.job_id, sizeof f.header.job_id, "job-7");
  f.writer_alive = true;
  for (int k = 0; k < 2; ++k) {
    fr_comm_entry c;
    std::memset(&c, 0, sizeof c);
    c.id = 0x1234567800000000ull + k;
    c.parent_id = k ? c.id - 1 : 0;
    c.size = k ? 2 : 4;
    c.rank = k ? rank % 2 : rank;
    c.origin = k ? FR_ORIGIN_SPLIT : FR_ORIGIN_INIT_RANK;
    c.state = FR_COMM_LIVE;
    c.coll_seq = uint64_t(records);
    c.gpu_started = uint64_t(records);
    c.gpu_completed = uint64_t(records > 0 ? records - 1 : 0);
    std::snprintf(c.name, sizeof c.name, k ? "tp" : "world");
    f.comms.push_back(c);
  }
  for (int i = 0; i < records; ++i) {
    fr::log::Record r{};
    std::memset(&r.raw, 0, sizeof r.raw);
    r.raw.id = first_id + uint64_t(i);
    r.raw.comm_id = f.comms[i % 2].id;
    r.raw.seq = uint64_t(i / 2 + 1);
    r.raw.op_index = r.raw.seq;
    r.raw.count = 1024;
    r.raw.call_ns = 1796205600000000000ull + uint64_t(i) * 1000;
    r.raw.op = uint16_t(i % 5 == 4 ? FR_OP_SEND : FR_OP_ALLREDUCE);
    r.raw.peer = r.raw.op == FR_OP_SEND ? 1 : -1;
    r.raw.dtype = 7;
    r.raw.flags = FR_REC_F_LAUNCHED;
    r.raw.gpu_state = i + 1 < records ? FR_GPU_COMPLETED : FR_GPU_STARTED;
    r.gpu_state = fr_gpu_state(r.raw.gpu_state);
    f.records.push_back(r);
  }
  f.header.record_counter = first_id + uint64_t(records);
  f.header.overwritten = first_id;
  return f;
}

// A node's heartbeat history of four ranks on one communicator, in the writer's format: kernel
// times and sampled markers (rank 3's GPU twice as slow), a ring's links (rank 1 -> 2 on the wire
// at most samples), so the judges behind the reader all have something to weigh.
fr::log::NodeSlowHistory slow_history() {
  fr::log::NodeSlowHistory h;
  h.node = "node0";
  h.time_ns = 1796205600000000000;
  const int64_t ms = 1000000, t0 = h.time_ns - 20000 * ms;
  for (int r = 0; r < 4; ++r) {
    fr::log::ProcessHistory p;
    p.rank = r;
    p.pid = 100 + r;
    p.log = "rank" + std::to_string(r) + ".node0." + std::to_string(100 + r) + ".frlog";
    for (int k = 0; k < 12; ++k) {
      fr::log::HistorySample x;
      x.time_ns = t0 + k * 1000 * ms;
      fr::log::HistoryComm c;
      c.id = 0xC0FFEE;
      c.rank = r;
      c.size = 4;
      c.busy = k % 2 == 1;
      const int64_t gpu = (r == 3 ? 8 : 4) * ms;
      c.colls.push_back({uint64_t(100 + k), FR_OP_ALLREDUCE, x.time_ns - 500 * ms, gpu});
      c.marks.push_back({uint64_t(100 + k), x.time_ns - 499 * ms, x.time_ns - 499 * ms + gpu});
      x.comms.push_back(c);
      x.links.push_back(
          {c.id, 0, (r + 1) % 4, true, uint64_t(k + 1), 8, 10 * ms,
           r == 1 || k % 5 == 0 ? uint32_t(FR_CHANST_SEND_WAIT) : uint32_t(FR_CHANST_POSTED)});
      x.links.push_back({c.id, 0, (r + 3) % 4, false, uint64_t(k + 1), 8, 10 * ms, 0});
      p.samples.push_back(std::move(x));
    }
    h.processes.push_back(std::move(p));
  }
  return h;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  std::string out = argv[1];
  for (const char* sub : {"", "/flight_log", "/manifest", "/slow_history"})
    mkdir((out + sub).c_str(), 0755);
  bool ok = true;
  ok &= write(out + "/flight_log/gen_small", fr::log::encode_snapshot(job_log(0, 6, 0), 42));
  ok &= write(out + "/flight_log/gen_wrapped", fr::log::encode_snapshot(job_log(1, 9, 4093), 43));
  ok &= write(out + "/flight_log/gen_empty", fr::log::encode_snapshot(job_log(2, 0, 0), 44));
  ok &=
      write(out + "/slow_history/gen_history.json", fr::log::slow_history_to_text(slow_history()));

  std::vector<fr::log::SnapshotProcess> procs(2);
  for (int i = 0; i < 2; ++i) {
    procs[i].rank = i;
    procs[i].world_size = 2;
    procs[i].pid = 100 + i;
    procs[i].host = "node0";
    procs[i].job_id = "job-7";
    procs[i].file = "rank" + std::to_string(i) + ".node0." + std::to_string(100 + i) + ".frlog";
    procs[i].source = "/dev/shm/fr." + std::to_string(i);
    procs[i].alive = i == 0;
    procs[i].records = 10;
  }
  std::vector<fr::log::SnapshotSkip> skipped{{"/dev/shm/fr.bad", "bad magic: not a flight log"}};
  fr::log::ManifestNode node;
  node.host = "node0";
  node.clock_offset_ns = -2500;
  node.has_offset = true;
  std::string dir = out + "/manifest_tmp", error;
  mkdir(dir.c_str(), 0755);
  if (!fr::log::write_manifest(dir, "job-7", 1796205600000000000ull, procs, skipped, {node},
                               "fr_fuzz_seeds", 2, &error)) {
    std::fprintf(stderr, "write_manifest: %s\n", error.c_str());
    return 1;
  }
  std::ifstream in(dir + "/manifest.json", std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  ok &= write(out + "/manifest/gen_manifest.json", ss.str());
  std::remove((dir + "/manifest.json").c_str());
  rmdir(dir.c_str());
  if (!ok) {
    std::fprintf(stderr, "cannot write seeds under %s\n", out.c_str());
    return 1;
  }
  return 0;
}
