// A minimal flight-log writer for tests: makes a log file with the format's own primitives, so
// reader tests do not depend on the agent. Records carry values derived from their id, which lets
// a test recognise any torn copy.
#pragma once

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "fr/flight_log.h"
#include "legacy_layout.h"
#include "temp_dir.h"

namespace fr::test {

// The layout fields of a version 1 to 6 header (legacy_layout.h) for a log of these capacities at
// `version`, `size` bytes long: magic, version, structure sizes, capacities and offsets (the graph
// and capture tables only when `graphs` is not 0; their counts are the caller's).
inline void fill_layout(fr_log_header* h, uint32_t version, uint32_t comms, uint32_t ring,
                        uint32_t graphs, uint32_t captures, uint64_t size) {
  h->magic = FR_LOG_MAGIC;
  h->version = version;
  h->header_size = sizeof(fr_log_header);
  h->comm_size = sizeof(fr_comm_entry);
  h->record_size = sizeof(fr_record);
  h->comm_capacity = comms;
  h->ring_capacity = ring;
  h->comm_offset = fr::test::v6::comm_offset();
  h->ring_offset = fr::test::v6::ring_offset(comms);
  h->file_size = size;
  if (graphs == 0) return;
  h->graph_offset = fr::test::v6::graph_offset(comms, ring);
  h->graph_capacity = graphs;
  h->graph_size = sizeof(fr_graph_entry);
  h->capture_offset = fr::test::v6::capture_offset(comms, ring, graphs);
  h->capture_capacity = captures;
}

// The communicator of the two-op graph below, as the first entry of the table `fill_layout` laid
// out: `comm_id`, one member (rank 0), `coll_seq` collectives, and the graph's positions in it
// (ordinal 1: op 2 started, op 1 completed). False when the entry could not be published.
inline bool put_graph_comm(uint8_t* base, const fr_log_header* h, uint64_t comm_id,
                           uint64_t coll_seq) {
  auto* comms = reinterpret_cast<fr_comm_entry*>(base + h->comm_offset);
  fr_comm_entry c{};
  c.id = comm_id;
  c.size = 1;
  c.rank = 0;
  const bool published = fr_comm_publish_fixed(&comms[0], &c);
  comms[0].coll_seq = coll_seq;
  comms[0].graph_started = FR_GRAPH_POS(1, 2);
  comms[0].graph_completed = FR_GRAPH_POS(1, 1);
  return published;
}

// A graph of two captured ops into the graph and capture tables `fill_layout` laid out: graph
// `graph_id` (ordinal 1, 2 ops) holding an all-reduce of 10 and a broadcast of 20 on `comm_id`,
// each captured with its GPU position, `redop` and `peer` as given. The captured records are
// also copied to `ops`. False when an entry could not be published; the graph's flags and counts
// are the caller's.
inline bool put_two_op_graph(uint8_t* base, const fr_log_header* h, uint64_t graph_id,
                             uint64_t comm_id, int32_t redop, int32_t peer, fr_record ops[2]) {
  auto* g = reinterpret_cast<fr_graph_entry*>(base + h->graph_offset);
  fr_graph_entry e{};
  e.id = graph_id;
  e.ordinal = 1;
  if (!fr_graph_publish_fixed(&g[0], &e)) return false;
  g[0].n_ops = 2;
  auto* cap = reinterpret_cast<fr_record*>(base + h->capture_offset);
  for (uint32_t k = 1; k <= 2; ++k) {
    fr_record& r = ops[k - 1];
    r = fr_record{};
    r.id = k - 1;
    r.comm_id = comm_id;
    r.op = k == 1 ? FR_OP_ALLREDUCE : FR_OP_BROADCAST;
    r.op_index = k;
    r.aux = graph_id;
    r.count = 10 * k;
    r.redop = redop;
    r.peer = peer;
    r.flags = FR_REC_F_CAPTURED | FR_REC_F_GPU_POSITION;
    if (!fr_record_publish(&cap[k - 1], &r)) return false;
  }
  return true;
}

// A log of this version (communicators and a ring, no other table), written as the agent writes.
struct TestLog {
  std::string path;
  int fd = -1;
  uint8_t* base = nullptr;
  size_t size = 0;

  fr_log_header* header() { return reinterpret_cast<fr_log_header*>(base); }
  fr_log_section* section(fr_section_kind kind) { return fr_log_section_of(header(), kind); }
  fr_comm_entry* comm(uint32_t i) {
    return reinterpret_cast<fr_comm_entry*>(base + section(FR_SECTION_COMMS)->offset) + i;
  }
  fr_record* slot(uint64_t id) {
    const fr_log_section* ring = section(FR_SECTION_RING);
    return reinterpret_cast<fr_record*>(base + ring->offset) + id % ring->capacity;
  }

  // Creates the file; lock=true takes the writer's advisory lock as the agent does.
  bool create(const std::string& p, uint32_t comms, uint32_t ring, int rank, bool lock = false) {
    path = p;
    uint32_t capacity[FR_SECTION_KINDS] = {};
    capacity[FR_SECTION_COMMS] = comms;
    capacity[FR_SECTION_RING] = ring;
    fr_log_section dir[FR_SECTION_KINDS];
    size = fr_log_layout(capacity, dir);
    fd = ::open(p.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0 || ::ftruncate(fd, off_t(size)) != 0) return false;
    void* m = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) return false;
    base = static_cast<uint8_t*>(m);
    fr_log_header* h = header();
    h->magic = FR_LOG_MAGIC;
    h->version = FR_LOG_VERSION;
    h->header_size = sizeof(fr_log_header);
    h->file_size = size;
    fr_log_header_set_directory(h);
    std::memcpy(base + h->section_offset, dir, sizeof dir);
    h->pid = ::getpid();
    h->global_rank = rank;
    h->world_size = 8;
    h->local_rank = -1;
    h->writer_alive = -1;
    std::strcpy(h->job_id, "job-test");
    std::strcpy(h->hostname, "hostA");
    if (lock) {
      struct flock fl {};
      fl.l_type = F_WRLCK;
      fl.l_whence = SEEK_SET;
      fl.l_len = 1;
      if (fcntl(fd, F_SETLK, &fl) != 0) return false;
    }
    return true;
  }

  void add_comm(uint32_t i, uint64_t id, int size, int rank, uint64_t started, uint64_t completed) {
    fr_comm_entry c{};
    c.id = id;
    c.size = size;
    c.rank = rank;
    c.cuda_dev = rank;
    c.origin = FR_ORIGIN_INIT_RANK;
    std::strcpy(c.name, "world");
    fr_comm_publish_fixed(comm(i), &c);
    comm(i)->state = FR_COMM_LIVE;
    comm(i)->gpu_started = started;
    comm(i)->gpu_completed = completed;
    section(FR_SECTION_COMMS)->count = i + 1;
  }

  static fr_record make(uint64_t id, uint64_t comm_id) {
    fr_record r{};
    r.id = id;
    r.comm_id = comm_id;
    r.seq = id + 1;
    r.op_index = id + 1;
    r.count = id * 3 + 7;
    r.stream = 0x1000 + id;
    r.call_ns = 1'000'000'000ull + id * 1000;
    r.duration_ns = id * 5;
    r.sendbuff = ~id;
    r.recvbuff = id ^ 0x5555;
    r.tid = uint32_t(id * 7);
    r.op = FR_OP_ALLREDUCE;
    r.dtype = 7;
    r.gpu_state = FR_GPU_ENQUEUED;
    r.redop = 0;
    r.peer = -1;
    r.result = 0;
    r.flags = FR_REC_F_LAUNCHED;
    r.aux = id * id;
    return r;
  }

  // Whether every field of r is what make(r.id, comm) gives: a torn copy would mix two ids.
  static bool consistent(const fr_record& r, uint64_t comm_id) {
    fr_record want = make(r.id, comm_id);
    fr_record got = r;
    got.lock = want.lock = 0;
    got.gpu_state = want.gpu_state;
    return std::memcmp(&got, &want, sizeof got) == 0;
  }

  void append(uint64_t comm_id) {
    uint64_t id = __atomic_fetch_add(&header()->record_counter, 0, __ATOMIC_RELAXED);
    fr_record r = make(id, comm_id);
    fr_record_publish(slot(id), &r);
    if (id >= section(FR_SECTION_RING)->capacity)
      __atomic_fetch_add(&header()->overwritten, 1, __ATOMIC_RELAXED);
    __atomic_store_n(&header()->record_counter, id + 1, __ATOMIC_RELEASE);
  }

  void close() {
    if (base) ::munmap(base, size);
    if (fd >= 0) ::close(fd);
    base = nullptr;
    fd = -1;
  }
  ~TestLog() { close(); }
};

}  // namespace fr::test
