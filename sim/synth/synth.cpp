// The synthetic job behind fr-gendumps and the analyzer tests. Every rank runs the same steps:
//   tp AllReduce (tp > 1) · world AllReduce · odd steps: a grouped ring exchange (Send to r+1,
//   Recv from r-1) · steps = 2 mod 4: a group of two AllReduces · world Broadcast from rank 0
// and syncs its stream at the end of each step. Steps before the first fault all complete, so they
// are generated directly; from the fault on, the streams are simulated: an op starts when its
// stream reaches it, a collective finishes once every member started it with the same arguments
// (a mismatch never finishes), a Send/Recv pair once both sides started. Then each rank's ring
// (the newest `entries` records) is built and written, one rank at a time.
#include "synth/synth.h"
#include "fr/hash.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <unordered_map>

#include "common/parallel.h"
#include "log/snapshot.h"

namespace fs = std::filesystem;

namespace fr::synth {
namespace {

constexpr uint64_t kWorldId = 0x5eed00000000a11cull;
constexpr uint64_t kTpBase = 0x7e70000000000000ull;
constexpr uint64_t kStepNs = 10'000'000;
constexpr uint64_t kOpNs = 100'000;
constexpr int kDtFloat32 = 7, kDtFloat16 = 6, kDtBf16 = 9;

struct Planned {
  uint8_t comm = 0;  // 0 world, 1 tp
  uint16_t op = 0;
  uint8_t dtype = kDtFloat32;
  uint64_t count = 0;
  int32_t redop = -1;
  int32_t peer = -1;  // root or peer, rank in the communicator
  uint8_t pos = 0;
  uint8_t group = 0;  // 0: not grouped; else the group's slot in the step
  bool stall_before = false;
};

uint64_t mix(uint64_t x) { return fr_mix64(x); }

struct Job {
  Spec spec;
  int n = 0;
  int tp = 1;
  int steps = 0;
  int first_fault = INT32_MAX;  // first step where a fault changes what happens on the GPU
  std::vector<Fault> faults;    // steps resolved

  int host_of(int r) const { return r / std::max(1, spec.ranks_per_host); }
  bool stopped(int r, int k) const {
    for (const auto& f : faults) {
      if (k < f.step) continue;
      if ((f.kind == "hang-host" || f.kind == "crash") && f.rank == r) return true;
      if (f.kind == "node-lost" && host_of(f.rank) == host_of(r)) return true;
    }
    return false;
  }
  bool dead(int r) const {
    for (const auto& f : faults) {
      if (f.kind == "crash" && f.rank == r) return true;
      if (f.kind == "node-lost" && host_of(f.rank) == host_of(r)) return true;
    }
    return false;
  }
  bool omitted(int r) const {
    for (const auto& f : faults)
      if (f.kind == "node-lost" && host_of(f.rank) == host_of(r)) return true;
    return std::find(spec.omit_ranks.begin(), spec.omit_ranks.end(), r) != spec.omit_ranks.end();
  }
  int comm_size(int c) const { return c == 0 ? n : tp; }
  int rank_in(int c, int r) const { return c == 0 ? r : r % tp; }
  int global(int c, int r, int rank_in_comm) const {
    return c == 0 ? rank_in_comm : (r / tp) * tp + rank_in_comm;
  }
  uint64_t comm_id(int c, int r) const {
    return c == 0 ? kWorldId : kTpBase + static_cast<uint64_t>(r / tp);
  }
  int instance(int c, int r) const { return c == 0 ? 0 : 1 + r / tp; }

  // Time of a call: every host shares one schedule; a slow rank sleeps at the start of its steps
  // and everyone else waits for it at the step's sync, so the delays add up.
  uint64_t call_ns(int r, int k, int pos) const {
    uint64_t t = spec.base_ns + static_cast<uint64_t>(k) * kStepNs +
                 static_cast<uint64_t>(pos) * kOpNs +
                 mix(static_cast<uint64_t>(r) * 1000003u + static_cast<uint64_t>(k)) % 50'000;
    for (const auto& f : faults) {
      if ((f.kind != "slow" && f.kind != "gpu-slow") || k < f.step) continue;
      t += static_cast<uint64_t>(f.ms) * 1'000'000ull * static_cast<uint64_t>(k - f.step);
      if (f.rank == r) t += static_cast<uint64_t>(f.ms) * 1'000'000ull;
    }
    t += static_cast<uint64_t>(host_of(r)) * static_cast<uint64_t>(spec.host_skew_ns);
    return t;
  }

  std::vector<Planned> plan(int r, int k) const {
    std::vector<Planned> v;
    if (stopped(r, k)) return v;
    if (tp > 1) v.push_back({1, FR_OP_ALLREDUCE, kDtFloat32, 4096, 0, -1, 0, 0, false});
    v.push_back({0, FR_OP_ALLREDUCE, kDtFloat32, 1024, 0, -1, 1, 0, false});
    if (k % 2 == 1 && n > 1) {
      v.push_back({0, FR_OP_SEND, kDtFloat32, 512, -1, (r + 1) % n, 2, 1, false});
      v.push_back({0, FR_OP_RECV, kDtFloat32, 512, -1, (r + n - 1) % n, 2, 1, false});
    }
    if (k % 4 == 2) {
      v.push_back({0, FR_OP_ALLREDUCE, kDtBf16, 2048, 0, -1, 3, 2, false});
      v.push_back({0, FR_OP_ALLREDUCE, kDtBf16, 64, 2, -1, 3, 2, false});
    }
    v.push_back({0, FR_OP_BROADCAST, kDtFloat32, 256, -1, 0, 4, 0, false});
    for (const auto& f : faults) {
      if (f.rank != r || f.step != k) continue;
      const uint8_t want = (f.comm == "tp" && tp > 1) ? 1 : 0;
      auto first_on = [&](auto pred) {
        for (size_t i = 0; i < v.size(); ++i)
          if (v[i].comm == want && pred(v[i])) return static_cast<int>(i);
        return -1;
      };
      auto any = [](const Planned& p) { return !fr::log::op_is_p2p(p.op); };
      int i;
      if (f.kind == "skip") {
        if ((i = first_on(any)) >= 0) v.erase(v.begin() + i);
      } else if (f.kind == "mismatch-count") {
        if ((i = first_on(any)) >= 0) v[i].count *= 2;
      } else if (f.kind == "mismatch-dtype") {
        if ((i = first_on(any)) >= 0)
          v[i].dtype = v[i].dtype == kDtFloat16 ? kDtFloat32 : kDtFloat16;
      } else if (f.kind == "mismatch-op") {
        if ((i = first_on(any)) >= 0)
          v[i].op = v[i].op == FR_OP_ALLGATHER ? FR_OP_ALLREDUCE : FR_OP_ALLGATHER, v[i].redop = -1;
      } else if (f.kind == "mismatch-root") {
        if ((i = first_on([](const Planned& p) { return p.op == FR_OP_BROADCAST; })) >= 0)
          v[i].peer = (v[i].peer + 1) % comm_size(v[i].comm);
      } else if (f.kind == "p2p-skip") {
        if ((i = first_on([](const Planned& p) { return p.op == FR_OP_SEND; })) >= 0)
          v.erase(v.begin() + i);
      } else if (f.kind == "gpu-stall") {
        if ((i = first_on(any)) >= 0) v[i].stall_before = true;
      }
    }
    return v;
  }
};

// An op from the fault step on, with the state the simulation left it in.
struct LateOp {
  Planned p;
  int step = 0;
  uint64_t seq = 0;
  uint64_t op_index = 0;
  uint64_t group_id = 0;
  uint8_t state = FR_GPU_ENQUEUED;
};

struct Counters {
  uint64_t coll[2] = {0, 0}, p2p[2] = {0, 0}, op_index[2] = {0, 0};
};

void count_op(Counters& c, const Planned& p) {
  if (fr::log::op_is_p2p(p.op))
    ++c.p2p[p.comm];
  else
    ++c.coll[p.comm];
  ++c.op_index[p.comm];
}

// Plays steps [first_fault, steps) of every rank. Each rank's stream holds units, run in order: one
// op, a group's ops (which progress together), or a stalled kernel (never finishes). A unit
// finishes once each of its ops is matched: a collective once every member started it with the
// same arguments, a Send/Recv once both sides started.
class Simulation {
 public:
  Simulation(const Job& job, std::vector<Counters> ctr)
      : job_(job), ctr_(std::move(ctr)), late_(job.n), stream_(job.n) {}

  // Returns each rank's late ops, in call order.
  std::vector<std::vector<LateOp>> run() {
    for (int k = job_.first_fault; k < job_.steps; ++k) {
      for (int r = 0; r < job_.n; ++r) queue_step(r, k);
      while (!work_.empty()) {
        int r = work_.back();
        work_.pop_back();
        if (!stream_[r].empty()) reach_head(r);
      }
    }
    return std::move(late_);
  }

 private:
  struct Unit {
    int rank;
    std::vector<int> ops;  // index into late_[rank]
    int unmatched;
  };
  using Waiting = std::deque<std::pair<int, int>>;  // (rank, op index) that started and wait

  // Queues step k of rank r on its stream, unless the rank is still blocked in an earlier step's
  // sync or stopped.
  void queue_step(int r, int k) {
    if (!stream_[r].empty()) return;  // blocked in the previous step's sync
    auto plan = job_.plan(r, k);
    if (plan.empty()) return;
    int cur_unit = -1, cur_group = -1;
    for (const auto& p : plan) {
      if (p.stall_before) {
        units_.push_back({r, {}, 1});  // an emulated kernel that never returns
        stream_[r].push_back(static_cast<int>(units_.size()) - 1);
        cur_unit = -1;
      }
      LateOp o;
      o.p = p;
      o.step = k;
      count_op(ctr_[r], p);
      o.seq = fr::log::op_is_p2p(p.op) ? ctr_[r].p2p[p.comm] : ctr_[r].coll[p.comm];
      o.op_index = ctr_[r].op_index[p.comm];
      o.group_id = p.group ? (static_cast<uint64_t>(k) << 8 | p.group) + 1 : 0;
      late_[r].push_back(o);
      const int oi = static_cast<int>(late_[r].size()) - 1;
      if (p.group && p.group == cur_group && cur_unit >= 0) {
        units_[cur_unit].ops.push_back(oi);
        ++units_[cur_unit].unmatched;
      } else {
        units_.push_back({r, {oi}, 1});
        cur_unit = static_cast<int>(units_.size()) - 1;
        stream_[r].push_back(cur_unit);
      }
      cur_group = p.group;
    }
    work_.push_back(r);
  }

  bool at_head(int r, int u) const { return !stream_[r].empty() && stream_[r].front() == u; }

  void complete(int u) {
    Unit& un = units_[u];
    for (int oi : un.ops) late_[un.rank][oi].state = FR_GPU_COMPLETED;
    stream_[un.rank].pop_front();
    if (!stream_[un.rank].empty()) work_.push_back(un.rank);
  }

  // One op of the unit at the head of rank's stream is matched.
  void match(int rank) {
    int u = stream_[rank].front();
    if (--units_[u].unmatched == 0) complete(u);
  }

  // Starts the ops of the unit at the head of r's stream, matching what they meet.
  void reach_head(int r) {
    int u = stream_[r].front();
    for (int oi : std::vector<int>(units_[u].ops)) {
      LateOp& o = late_[r][oi];
      o.state = FR_GPU_STARTED;
      const bool moved_on = fr::log::op_is_p2p(o.p.op) ? start_p2p(r, oi) : start_collective(r, oi);
      if (moved_on && !at_head(r, u)) return;
    }
  }

  // A Send or Recv meets the oldest waiting other side, or waits for it. Returns whether it met
  // one (its unit may then have completed).
  bool start_p2p(int r, int oi) {
    const LateOp& o = late_[r][oi];
    const int inst = job_.instance(o.p.comm, r);
    const int me = job_.rank_in(o.p.comm, r);
    const bool send = o.p.op == FR_OP_SEND;
    auto& q = p2p_[{inst, send ? me : o.p.peer, send ? o.p.peer : me}];
    Waiting& mine = send ? q.first : q.second;
    Waiting& other = send ? q.second : q.first;
    if (other.empty()) {
      mine.push_back({r, oi});
      return false;
    }
    const int peer_rank = other.front().first;
    other.pop_front();
    const int u = stream_[r].front();
    match(peer_rank);
    if (!at_head(r, u)) return true;
    match(r);
    return true;
  }

  // A collective arrives; once every member has, it completes everywhere when all called it with
  // the same arguments (a mismatch never completes). Returns whether every member has arrived
  // (its unit may then have completed).
  bool start_collective(int r, int oi) {
    const LateOp& o = late_[r][oi];
    const int inst = job_.instance(o.p.comm, r);
    const uint64_t key = (static_cast<uint64_t>(inst) << 40) ^ o.seq;
    auto& a = arrivals_[key];
    a.push_back({r, oi});
    if (static_cast<int>(a.size()) != job_.comm_size(o.p.comm)) return false;
    bool same = true;
    const Planned& f = late_[a[0].first][a[0].second].p;
    for (const auto& [ar, ao] : a) {
      const Planned& x = late_[ar][ao].p;
      same &= x.op == f.op && x.dtype == f.dtype && x.count == f.count && x.redop == f.redop &&
              x.peer == f.peer;
    }
    if (same) {
      auto members = a;
      arrivals_.erase(key);
      for (const auto& member : members) match(member.first);
    }
    return true;
  }

  const Job& job_;
  std::vector<Counters> ctr_;
  std::vector<std::vector<LateOp>> late_;
  std::vector<Unit> units_;
  std::vector<std::deque<int>> stream_;  // per rank: units, the head one running
  // (instance, seq) -> (rank, op)
  std::unordered_map<uint64_t, std::vector<std::pair<int, int>>> arrivals_;
  // (instance, src, dst) -> sends, recvs
  std::map<std::tuple<int, int, int>, std::pair<Waiting, Waiting>> p2p_;
  std::vector<int> work_;  // ranks whose stream head may progress
};

fr::log::Record make_record(uint64_t id, uint64_t comm_id, uint64_t seq, uint64_t op_index,
                            const Planned& p, uint64_t call_ns, uint64_t group_id, uint8_t state,
                            bool tracked) {
  fr::log::Record rec{};
  fr_record& r = rec.raw;
  r.lock = 2;
  r.id = id;
  r.comm_id = comm_id;
  r.seq = seq;
  r.op_index = tracked ? op_index : 0;
  r.count = p.count;
  r.stream = 0x7f0000001000ull;
  r.group_id = group_id;
  r.call_ns = call_ns;
  r.duration_ns = 4000;
  r.tid = 4242;
  r.op = p.op;
  r.dtype = p.dtype;
  r.redop = p.redop;
  r.peer = p.peer;
  r.result = 0;
  r.flags = FR_REC_F_LAUNCHED | (group_id ? FR_REC_F_IN_GROUP : 0u) |
            (tracked ? 0u : FR_REC_F_GPU_UNTRACKED);
  r.gpu_state = tracked ? state : static_cast<uint8_t>(FR_GPU_NONE);
  rec.gpu_state = static_cast<fr_gpu_state>(r.gpu_state);
  return rec;
}

// Rank r's records, newest `entries` kept in a ring as the agent keeps them, and where each of its
// two communicators stands after them.
struct RankRecords {
  std::vector<fr::log::Record> ring;
  uint64_t next_id = 0;
  Counters c;
  uint64_t started[2] = {0, 0}, completed[2] = {0, 0}, last_call[2] = {0, 0};
};

// The completed steps, then rank r's late ops.
RankRecords rank_records(const Job& job, int r, const std::vector<LateOp>& late) {
  const Spec& s = job.spec;
  const bool tracked = s.gpu_tracking;
  RankRecords out;
  out.ring.resize(static_cast<size_t>(std::max(1, s.entries)));
  auto push = [&](const fr::log::Record& rec) {
    out.ring[rec.raw.id % out.ring.size()] = rec;
    ++out.next_id;
  };
  Counters& c = out.c;
  const int extra_api = s.wrap_jitter ? r % 7 : 0;
  Planned api{};
  api.op = FR_OP_COMM_INIT_RANK;
  push(make_record(out.next_id, kWorldId, 0, 0, api, s.base_ns - 2'000'000'000ull, 0, FR_GPU_NONE,
                   false));
  if (job.tp > 1) {
    api.op = FR_OP_COMM_SPLIT;
    fr::log::Record rec = make_record(out.next_id, kWorldId, 0, 0, api,
                                      s.base_ns - 1'000'000'000ull, 0, FR_GPU_NONE, false);
    rec.raw.aux = job.comm_id(1, r);
    push(rec);
  }
  for (int i = 0; i < extra_api; ++i) {
    api.op = FR_OP_COMM_GET_ASYNC_ERROR;
    push(make_record(out.next_id, kWorldId, 0, 0, api, s.base_ns - 500'000'000ull + i, 0,
                     FR_GPU_NONE, false));
  }
  for (int k = 0; k < std::min(job.first_fault, job.steps); ++k) {
    for (const auto& p : job.plan(r, k)) {
      count_op(c, p);
      const uint64_t seq = fr::log::op_is_p2p(p.op) ? c.p2p[p.comm] : c.coll[p.comm];
      const uint64_t t = job.call_ns(r, k, p.pos);
      const uint64_t gid = p.group ? (static_cast<uint64_t>(k) << 8 | p.group) + 1 : 0;
      push(make_record(out.next_id, job.comm_id(p.comm, r), seq, c.op_index[p.comm], p, t, gid,
                       FR_GPU_COMPLETED, tracked));
      out.started[p.comm] = out.completed[p.comm] = c.op_index[p.comm];
      out.last_call[p.comm] = t;
    }
  }
  for (const auto& o : late) {
    const uint64_t t = job.call_ns(r, o.step, o.p.pos);
    push(make_record(out.next_id, job.comm_id(o.p.comm, r), o.seq, o.op_index, o.p, t, o.group_id,
                     o.state, tracked));
    if (fr::log::op_is_p2p(o.p.op))
      c.p2p[o.p.comm] = o.seq;
    else
      c.coll[o.p.comm] = o.seq;
    c.op_index[o.p.comm] = o.op_index;
    if (o.state >= FR_GPU_STARTED)
      out.started[o.p.comm] = std::max(out.started[o.p.comm], o.op_index);
    if (o.state == FR_GPU_COMPLETED)
      out.completed[o.p.comm] = std::max(out.completed[o.p.comm], o.op_index);
    out.last_call[o.p.comm] = t;
  }
  return out;
}

// Rank r's entry for communicator cc (0 the world, 1 its tensor-parallel group).
fr_comm_entry comm_entry(const Job& job, int r, int cc, const RankRecords& recs, int cuda_dev) {
  const Spec& s = job.spec;
  fr_comm_entry e{};
  e.lock = 2;
  e.id = job.comm_id(cc, r);
  e.parent_id = cc == 0 ? 0 : kWorldId;
  e.create_ns = s.base_ns - (cc == 0 ? 2'000'000'000ull : 1'000'000'000ull);
  e.color = cc == 0 ? 0 : r / job.tp;
  e.key = cc == 0 ? 0 : r;
  e.size = job.comm_size(cc);
  e.rank = job.rank_in(cc, r);
  e.cuda_dev = cuda_dev;
  e.origin = cc == 0 ? FR_ORIGIN_INIT_RANK : FR_ORIGIN_SPLIT;
  e.flags = cc == 0 ? FR_COMM_F_ID_FROM_UNIQUE_ID : FR_COMM_F_ID_DERIVED;
  e.derive_index = cc == 0 ? 0 : 1;
  std::snprintf(e.name, sizeof e.name, "%s", cc == 0 ? "world" : "tp");
  e.state = FR_COMM_LIVE;
  e.coll_seq = recs.c.coll[cc];
  e.p2p_seq = recs.c.p2p[cc];
  e.op_index = recs.c.op_index[cc];
  e.last_call_ns = recs.last_call[cc];
  e.gpu_started = s.gpu_tracking ? recs.started[cc] : 0;
  e.gpu_completed = s.gpu_tracking ? recs.completed[cc] : 0;
  return e;
}

// Builds rank r's log: the completed steps, then its late ops, keeping the newest records.
fr::log::LogFile build_log(const Job& job, int r, const std::vector<LateOp>& late) {
  const Spec& s = job.spec;
  const RankRecords recs = rank_records(job, r, late);
  const uint64_t next_id = recs.next_id, cap = recs.ring.size();

  fr::log::LogFile log;
  fr_log_header& h = log.header;
  h.magic = FR_LOG_MAGIC;
  h.version = FR_LOG_VERSION;
  h.create_ns = s.base_ns - 3'000'000'000ull;
  h.create_mono_ns = 1'000'000'000ull;
  h.pid = 10000 + r;
  h.global_rank = r;
  h.world_size = job.n;
  h.local_rank = r % std::max(1, s.ranks_per_host);
  h.flags = s.gpu_tracking ? FR_LOG_F_GPU_MARKERS : FR_LOG_F_NO_GPU_TRACKING;
  h.nccl_version = 22809;
  h.record_counter = next_id;
  h.overwritten = next_id > cap ? next_id - cap : 0;
  std::snprintf(h.job_id, sizeof h.job_id, "%s", s.job_id.c_str());
  std::snprintf(h.hostname, sizeof h.hostname, "node%d", job.host_of(r));
  std::snprintf(h.exe, sizeof h.exe, "train.py");
  uint64_t hb = 0;
  for (int cc = 0; cc < (job.tp > 1 ? 2 : 1); ++cc) {
    log.comms.push_back(comm_entry(job, r, cc, recs, h.local_rank));
    hb = std::max(hb, recs.last_call[cc]);
  }
  h.heartbeat_ns = hb;
  h.comm_count = static_cast<uint32_t>(log.comms.size());
  const uint64_t first = next_id > cap ? next_id - cap : 0;
  log.records.reserve(next_id - first);
  for (uint64_t id = first; id < next_id; ++id) log.records.push_back(recs.ring[id % cap]);
  log.writer_alive = !job.dead(r);
  log.is_snapshot = true;
  log.path = "rank" + std::to_string(r);
  return log;
}

Job make_job(const Spec& spec) {
  Job job;
  job.spec = spec;
  job.n = std::max(1, spec.ranks);
  job.tp = (spec.tp > 1 && job.n % spec.tp == 0) ? spec.tp : 1;
  // Records per step: tp + world AllReduce + Broadcast + 1 (ring exchange every other step) +
  // 0.5 (grouped pair every fourth step).
  const double per_step = (job.tp > 1 ? 1 : 0) + 2 + 1.0 + 0.5;
  job.steps = spec.steps > 0 ? spec.steps : static_cast<int>(spec.entries * 1.25 / per_step) + 2;
  for (Fault f : spec.faults) {
    if (f.step < 0 || f.step >= job.steps) f.step = job.steps - 1;
    if (f.kind == "p2p-skip" && f.step % 2 == 0) f.step = f.step > 0 ? f.step - 1 : 1;
    if (f.kind == "mismatch-root") f.comm = "world";
    f.rank = std::clamp(f.rank, 0, job.n - 1);
    // gpu-slow: its host waits for its GPU's (factor - 1) x kGpuWorkNs more per step (synth.h).
    if (f.kind == "gpu-slow") f.ms = static_cast<int>((f.factor - 1) * kGpuWorkNs / 1'000'000);
    job.faults.push_back(f);
    if (f.kind != "healthy" && f.kind != "slow" && f.kind != "gpu-slow")
      job.first_fault = std::min(job.first_fault, f.step);
  }
  if (job.first_fault == INT32_MAX) job.first_fault = job.steps;
  return job;
}

std::vector<std::vector<LateOp>> run_job(const Job& job) {
  std::vector<Counters> ctr(job.n);
  for (int r = 0; r < job.n; ++r)
    for (int k = 0; k < std::min(job.first_fault, job.steps); ++k)
      for (const auto& p : job.plan(r, k)) count_op(ctr[r], p);
  if (job.first_fault >= job.steps) return std::vector<std::vector<LateOp>>(job.n);
  return Simulation(job, std::move(ctr)).run();
}

}  // namespace

bool parse_fault(const std::string& spec, Fault* out, std::string* error) {
  static const char* const kinds[] = {
      "healthy",        "hang-host",      "skip",        "crash",         "gpu-stall",
      "mismatch-count", "mismatch-dtype", "mismatch-op", "mismatch-root", "p2p-skip",
      "slow",           "node-lost",      "gpu-slow"};
  Fault f;
  bool have_kind = false;
  std::stringstream ss(spec);
  std::string item;
  while (std::getline(ss, item, ',')) {
    auto eq = item.find('=');
    std::string k = eq == std::string::npos ? "kind" : item.substr(0, eq);
    std::string v = eq == std::string::npos ? item : item.substr(eq + 1);
    try {
      if (k == "kind") {
        f.kind = v;
        have_kind = true;
      } else if (k == "rank") {
        f.rank = std::stoi(v);
      } else if (k == "step") {
        f.step = std::stoi(v);
      } else if (k == "comm") {
        if (v != "world" && v != "tp") {
          *error = "fault comm must be world or tp, not '" + v + "'";
          return false;
        }
        f.comm = v;
      } else if (k == "ms") {
        f.ms = std::stoi(v);
      } else if (k == "factor") {
        f.factor = std::stod(v);
        if (!(f.factor > 1 && f.factor <= 1000)) throw std::invalid_argument(v);
      } else {
        *error = "unknown fault field '" + k + "' (rank, step, kind, comm, ms, factor)";
        return false;
      }
    } catch (const std::exception&) {
      *error = "fault field '" + k + "' needs a number, not '" + v + "'";
      return false;
    }
  }
  if (!have_kind || std::find_if(std::begin(kinds), std::end(kinds),
                                 [&](const char* x) { return f.kind == x; }) == std::end(kinds)) {
    *error = "unknown fault kind '" + f.kind + "'";
    return false;
  }
  if (f.rank < 0) {
    *error = "fault rank must be >= 0";
    return false;
  }
  *out = f;
  return true;
}

bool add_fault(const std::string& spec, Spec* out, std::string* error) {
  Fault f;
  if (!parse_fault(spec, &f, error)) return false;
  out->faults.push_back(f);
  return true;
}

std::vector<fr::log::LogFile> make_logs(const Spec& spec) {
  Job job = make_job(spec);
  auto late = run_job(job);
  std::vector<fr::log::LogFile> logs;
  for (int r = 0; r < job.n; ++r) logs.push_back(build_log(job, r, late[r]));
  return logs;
}

bool write_dump_set(const Spec& spec, const std::string& dir, std::string* error) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    *error = dir + ": cannot create: " + ec.message();
    return false;
  }
  Job job = make_job(spec);
  const int hosts = job.host_of(job.n - 1) + 1;
  auto set_dir = [&](int h) {
    return spec.dir_per_host ? (fs::path(dir) / ("node" + std::to_string(h))).string() : dir;
  };
  for (int h = 0; spec.dir_per_host && h < hosts; ++h) {
    fs::create_directories(set_dir(h), ec);
    if (ec) {
      *error = set_dir(h) + ": cannot create: " + ec.message();
      return false;
    }
  }
  auto late = run_job(job);
  const uint64_t snap_ns = job.call_ns(0, job.steps + 1, 0) + 1'000'000'000ull;
  std::vector<fr::log::SnapshotProcess> procs(job.n);
  std::vector<char> ok(job.n, 0);
  // Each rank writes only its own file, procs[r] and ok[r].
  auto write_rank = [&](size_t i) {
    const int r = static_cast<int>(i);
    if (job.omitted(r)) return;
    fr::log::LogFile log = build_log(job, r, late[r]);
    std::vector<LateOp>().swap(late[r]);
    const std::string host = log.hostname();
    const std::string name = "rank" + std::to_string(r) + "." + host + "." +
                             std::to_string(log.header.pid) + FR_LOG_FILE_SUFFIX;
    std::string bytes = fr::log::encode_snapshot(log, snap_ns);
    const fs::path file = fs::path(set_dir(job.host_of(r))) / name;
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!out) throw std::runtime_error(file.string() + ": write failed");
    auto& p = procs[r];
    p.rank = r;
    p.world_size = job.n;
    p.pid = log.header.pid;
    p.host = host;
    p.job_id = spec.job_id;
    p.file = name;
    p.source = "/dev/shm/fr." + spec.job_id + "." + host + "." + std::to_string(p.pid) + ".frlog";
    p.alive = log.writer_alive;
    p.records = log.records.size();
    p.overwritten = log.header.overwritten;
    ok[r] = 1;
  };
  try {
    fr::parallel::for_each_index(static_cast<size_t>(job.n), spec.threads, write_rank);
  } catch (const std::runtime_error& e) {  // the first rank whose file could not be written
    *error = e.what();
    return false;
  }
  auto node_of = [&](int h) {
    fr::log::ManifestNode node;
    node.host = "node" + std::to_string(h);
    node.clock_offset_ns = -static_cast<int64_t>(h) * spec.host_skew_ns;
    node.has_offset = true;
    return node;
  };
  if (spec.dir_per_host) {
    if (!write_gpu_health(spec, job.n, set_dir, error)) return false;
    // Each host's set names its own processes and node; every one expects the whole job.
    for (int h = 0; h < hosts; ++h) {
      std::vector<fr::log::SnapshotProcess> listed;
      for (int r = 0; r < job.n; ++r)
        if (ok[r] && job.host_of(r) == h) listed.push_back(procs[r]);
      if (!fr::log::write_manifest(set_dir(h), spec.job_id, snap_ns, listed, {}, {node_of(h)},
                                   "fr-gendumps", job.n, error))
        return false;
    }
    return true;
  }
  if (!write_gpu_health(spec, job.n, set_dir, error)) return false;
  std::vector<fr::log::SnapshotProcess> listed;
  for (int r = 0; r < job.n; ++r)
    if (ok[r]) listed.push_back(procs[r]);
  std::vector<fr::log::ManifestNode> nodes;
  for (int h = 0; h < hosts; ++h) nodes.push_back(node_of(h));
  return fr::log::write_manifest(dir, spec.job_id, snap_ns, listed, {}, nodes, "fr-gendumps", job.n,
                                 error);
}

}  // namespace fr::synth
