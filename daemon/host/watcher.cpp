// See watcher.h. Reading a log copies its ring (a few hundred KiB at the default capacity), which
// is cheap enough to do for every local process several times a second.
#include "daemon/host/watcher.h"

#include <algorithm>
#include <cstring>
#include <ctime>
#include <map>
#include <set>
#include <unordered_map>

#include "daemon/base/names.h"
#include "fr/flight_log.h"
#include "log/local_logs.h"
#include "log/reader.h"

namespace fr::daemon {

namespace {

// Whether a record is an op that occupies the GPU (or the host call) and has not finished.
// A shrink or grow blocks the host until every member (and joiner) is in it, as a collective
// does: one still in the call counts too.
bool in_flight(const fr::log::Record& r, bool gpu_tracked) {
  const fr_record& raw = r.raw;
  if (raw.op == FR_OP_COMM_SHRINK || raw.op == FR_OP_COMM_GROW)
    return (raw.flags & FR_REC_F_IN_CALL) && raw.result == FR_RESULT_PENDING;
  if (!fr::log::op_is_collective(raw.op) && !fr::log::op_is_p2p(raw.op)) return false;
  if (raw.flags & FR_REC_F_IN_CALL) return true;  // the host call itself has not returned
  if (raw.flags & (FR_REC_F_CAPTURED | FR_REC_F_NEVER_LAUNCHED)) return false;
  if (!gpu_tracked || (raw.flags & FR_REC_F_GPU_UNTRACKED) || raw.op_index == 0) return false;
  if (!(raw.flags & FR_REC_F_LAUNCHED)) return false;  // still queued inside an open group
  return r.gpu_state != FR_GPU_COMPLETED;
}

// The log's NIXL transfers per (local, remote) agent pair: what is in flight, its oldest post, and
// the posts finished (a post failed by a remote disconnect counts as in flight; an entry taken
// again for a new request drops its count: the coordinator then learns nothing from that
// heartbeat). At most kMaxXferPairs pairs are sent: those with a post in flight, oldest first,
// then the others in table order; the rest are counted in xfer_pairs_cut. A stalled transfer is
// the oldest in flight, so no number of other pairs can push it out of the heartbeat.
void summarize_xfers(const fr::log::LogFile& log, int64_t now_real_ns, ProcessReport* p) {
  std::unordered_map<std::string, size_t> index;  // local '\0' remote -> pairs
  std::vector<XferProgress> pairs;                // table order of each pair's first entry
  for (const fr_xfer_entry& e : log.xfers) {
    std::string local =
        printable(std::string(e.local_agent, strnlen(e.local_agent, sizeof e.local_agent)), 64);
    std::string remote =
        printable(std::string(e.remote_agent, strnlen(e.remote_agent, sizeof e.remote_agent)), 64);
    auto [it, added] = index.try_emplace(local + '\0' + remote, pairs.size());
    if (added) pairs.push_back({std::move(local), std::move(remote)});
    XferProgress& x = pairs[it->second];
    // A post that failed because its remote went away and was not released counts as still in
    // flight: nothing will finish it, and a killed target leaves no other sign on this node.
    const bool disconnected = e.status == FR_NIXL_ERR_REMOTE_DISCONNECT &&
                              e.state != FR_XFER_RELEASED && e.state != FR_XFER_DONE &&
                              e.posts > 0 && e.post_ns > 0;
    const bool in_flight = ((e.state == FR_XFER_POSTED || e.state == FR_XFER_IN_PROGRESS) &&
                            e.done_ns == 0 && e.posts > 0 && e.post_ns > 0) ||
                           disconnected;
    x.completed += in_flight ? e.posts - 1 : e.posts;
    if (!in_flight) continue;
    x.in_flight++;
    const int64_t age = std::max<int64_t>(1, now_real_ns - int64_t(e.post_ns));
    if (age > x.oldest_age_ns) {
      x.oldest_age_ns = age;
      x.oldest_key = (e.id << 24) | (e.posts & 0xffffff);
      x.oldest_op = e.op;
      x.oldest_bytes = e.bytes;
      x.oldest_status = e.status;
    }
  }
  // Oldest in flight first; pairs with nothing in flight (age 0) keep their table order after.
  std::stable_sort(pairs.begin(), pairs.end(), [](const XferProgress& a, const XferProgress& b) {
    return a.oldest_age_ns > b.oldest_age_ns;
  });
  if (pairs.size() > ProcessReport::kMaxXferPairs) {
    p->xfer_pairs_cut = uint32_t(pairs.size() - ProcessReport::kMaxXferPairs);
    pairs.resize(ProcessReport::kMaxXferPairs);
  }
  p->xfers = std::move(pairs);
}

// The newest collectives of each communicator (at most CommProgress::kMaxRecent, oldest first),
// when the sampler saw the GPU reach and finish each, and the GPU time of those the profiler
// plugin's kernel slots still show finished: a kernel slot holds the op it ran last, from its
// start to its last change.
void summarize_recent(const fr::log::LogFile& log, const GpuSampler* gpu, ProcessReport* p) {
  std::unordered_map<uint64_t, CommProgress*> by_id;
  for (auto& cp : p->comms) by_id[cp.comm_id] = &cp;
  for (auto it = log.records.rbegin(); it != log.records.rend(); ++it) {
    const fr_record& r = it->raw;
    if (!fr::log::op_is_collective(r.op) || r.seq == 0 || (r.flags & FR_REC_F_CAPTURED)) continue;
    auto c = by_id.find(r.comm_id);
    if (c == by_id.end() || c->second->recent.size() >= CommProgress::kMaxRecent) continue;
    CollTiming t{r.seq, r.op, int64_t(r.call_ns), 0};
    if (gpu != nullptr && r.op_index != 0 && !(r.flags & FR_REC_F_GPU_UNTRACKED)) {
      const GpuOpTimes g = gpu->times(p->log, r.comm_id, r.op_index);
      if (g.started_ns > 0 && g.completed_ns >= g.started_ns) {
        t.gpu_start_ns = g.started_ns;
        t.gpu_end_ns = g.completed_ns;
      }
    }
    c->second->recent.push_back(t);
  }
  for (auto& cp : p->comms) std::reverse(cp.recent.begin(), cp.recent.end());
  // Kernel time per (communicator, op): the longest channel of the op, once every channel is done.
  std::map<std::pair<uint64_t, uint64_t>, int64_t> kernel;  // (comm, NCCL op seq) -> ns
  for (const fr_chan_entry& e : log.chans) {
    if (e.kind != FR_CHAN_KERNEL || e.comm_id == 0 || e.op_start_ns == 0) continue;
    int64_t& k = kernel[{e.comm_id, e.op_seq}];
    if (e.ops_started > e.ops_done || e.last_ns < e.op_start_ns)
      k = -1;  // still running on a channel
    else if (k >= 0)
      k = std::max<int64_t>(k, int64_t(e.last_ns - e.op_start_ns));
  }
  // NCCL counts op_seq per collective kind; the slot names the op, so the newest record of that op
  // on the communicator takes the time.
  for (const fr_chan_entry& e : log.chans) {
    if (e.kind != FR_CHAN_KERNEL || e.comm_id == 0) continue;
    auto k = kernel.find({e.comm_id, e.op_seq});
    auto c = by_id.find(e.comm_id);
    if (k == kernel.end() || k->second <= 0 || c == by_id.end()) continue;
    for (auto t = c->second->recent.rbegin(); t != c->second->recent.rend(); ++t)
      if (t->op == e.op) {
        t->gpu_ns = k->second;
        break;
      }
  }
}

// Proxy steps per (communicator, channel, peer, direction): the mean step time of the newest op on
// each send and receive slot that finished steps. The slowest first, at most kMaxLinks.
void summarize_links(const fr::log::LogFile& log, ProcessReport* p) {
  for (const fr_chan_entry& e : log.chans) {
    if (e.kind == FR_CHAN_KERNEL || e.comm_id == 0 || e.peer < 0 || e.done == 0) continue;
    if (e.op_start_ns == 0 || e.last_ns <= e.op_start_ns) continue;
    LinkTiming l;
    l.comm_id = e.comm_id;
    l.channel = e.channel;
    l.peer = e.peer;
    l.send = e.kind == FR_CHAN_SEND;
    l.op_seq = e.op_seq;
    l.steps = e.done;
    l.step_ns = int64_t(e.last_ns - e.op_start_ns) / int64_t(e.done);
    l.state = e.state;
    p->links.push_back(l);
  }
  std::stable_sort(p->links.begin(), p->links.end(),
                   [](const LinkTiming& a, const LinkTiming& b) { return a.step_ns > b.step_ns; });
  if (p->links.size() > ProcessReport::kMaxLinks) p->links.resize(ProcessReport::kMaxLinks);
}

}  // namespace

ProcessReport summarize_log(const fr::log::LogFile& log, const std::string& file_name,
                            int64_t now_real_ns, const GpuSampler* gpu) {
  ProcessReport p;
  const fr_log_header& h = log.header;
  p.log = file_name;
  p.rank = h.global_rank;
  p.world_size = h.world_size;
  p.pid = h.pid;
  p.alive = log.writer_alive;
  p.job_id = log.job_id();
  p.host = log.hostname();
  p.records = h.record_counter;
  p.flags = h.flags;
  p.last_record_age_ns =
      h.heartbeat_ns ? std::max<int64_t>(0, now_real_ns - int64_t(h.heartbeat_ns)) : 0;
  bool gpu_tracked = !(h.flags & FR_LOG_F_NO_GPU_TRACKING);

  bool all_closed = true;
  for (const fr_comm_entry& c : log.comms) {
    CommProgress cp;
    cp.comm_id = c.id;
    cp.size = c.size;
    cp.rank = c.rank;
    cp.state = c.state;
    cp.coll_seq = c.coll_seq;
    cp.p2p_seq = c.p2p_seq;
    cp.enqueued = c.op_index;
    cp.started = c.gpu_started;
    cp.completed = c.gpu_completed;
    cp.name = std::string(c.name, strnlen(c.name, sizeof c.name));
    if (c.state != FR_COMM_FINALIZED && c.state != FR_COMM_DESTROYED) all_closed = false;
    p.comms.push_back(std::move(cp));
  }
  // Records are oldest first: the first in-flight record per communicator is its oldest.
  std::set<uint64_t> found;
  for (const auto& r : log.records) {
    if (!in_flight(r, gpu_tracked) || found.count(r.raw.comm_id)) continue;
    found.insert(r.raw.comm_id);
    for (auto& cp : p.comms) {
      if (cp.comm_id != r.raw.comm_id) continue;
      cp.oldest_age_ns = std::max<int64_t>(1, now_real_ns - int64_t(r.raw.call_ns));
      cp.oldest_seq = r.raw.seq;
      cp.oldest_op = r.raw.op;
    }
  }
  // A CUDA graph's ops run at its replays: the newest replay is in flight on each communicator
  // whose last captured op the replay has not finished (the positions the graph writes).
  const fr::log::Record* launch = nullptr;
  for (const auto& r : log.records)
    if (r.raw.op == FR_OP_GRAPH_LAUNCH && !(r.raw.flags & FR_REC_F_NEVER_LAUNCHED)) launch = &r;
  const fr_graph_entry* graph = nullptr;
  if (launch != nullptr)
    for (const auto& g : log.graphs)
      if (g.id == launch->raw.aux) graph = &g;
  if (graph != nullptr && gpu_tracked && (graph->flags & FR_GRAPH_F_GPU_POSITION)) {
    std::map<uint64_t, const fr_record*> last_on_comm;  // comm -> its last captured op
    for (const fr_record& op : log.captures)
      if (op.aux == graph->id) {
        const fr_record*& last = last_on_comm[op.comm_id];
        if (last == nullptr || op.op_index > last->op_index) last = &op;
      }
    for (auto& cp : p.comms) {
      auto it = last_on_comm.find(cp.comm_id);
      if (it == last_on_comm.end() || found.count(cp.comm_id)) continue;
      const fr_comm_entry* c = log.find_comm(cp.comm_id);
      if (c != nullptr && c->graph_completed == FR_GRAPH_POS(graph->ordinal, it->second->op_index))
        continue;  // this communicator's part of the replay finished
      cp.oldest_age_ns = std::max<int64_t>(1, now_real_ns - int64_t(launch->raw.call_ns));
      cp.oldest_seq = fr::log::op_is_p2p(it->second->op) ? cp.p2p_seq : cp.coll_seq;
      cp.oldest_op = it->second->op;
    }
  }
  summarize_xfers(log, now_real_ns, &p);
  summarize_recent(log, gpu, &p);
  summarize_links(log, &p);
  p.exited_cleanly = !p.alive && all_closed;
  return p;
}

LogWatcher::LogWatcher(std::string log_dir, int64_t stall_after_ns)
    : log_dir_(std::move(log_dir)), stall_after_ns_(stall_after_ns) {}

ScanResult LogWatcher::scan() {
  ScanResult out;
  fr::log::LocalLogOptions lo;
  lo.dir = log_dir_;
  lo.owners = owners_;
  lo.job_id = job_filter_;
  lo.max_logs = kMaxLogs;
  fr::log::LocalLogs listed = fr::log::list_local_logs(lo);
  if (!listed.error.empty()) out.unreadable.push_back(log_dir_ + ": cannot list the log directory");
  // Links, foreign owners, copies and duplicate ranks: named, never counted as a process.
  for (const auto& r : listed.refused) out.unreadable.push_back(r.name + ": " + r.why);
  std::map<std::string, Seen> now_seen;
  std::vector<SampledLog> sampled;
  for (const auto& local : listed.logs) {
    const std::string& n = local.name;
    fr::log::ReadResult rr = fr::log::read_local_log(log_dir_, local);
    if (!rr.ok()) {
      out.unreadable.push_back(rr.message.empty() ? n + ": unreadable" : rr.message);
      continue;
    }
    if (!job_filter_.empty() && rr.log->job_id() != job_filter_) continue;
    const fr_log_header& h = rr.log->header;  // the table's row shown in the header, any version
    if (rr.log->writer_alive)
      sampled.push_back({n, local.dev, local.ino, h.comm_offset, h.comm_size, h.comm_count});
    ProcessReport p = summarize_log(*rr.log, n, real_ns(), gpu_);
    Seen s{p.alive, p.oldest_age_ns() >= stall_after_ns_};
    auto it = seen_.find(n);
    if (it == seen_.end()) {
      if (!s.alive && !p.exited_cleanly) out.urgent = true;
      if (s.stalled) out.urgent = true;
    } else {
      if (it->second.alive && !s.alive) out.urgent = true;
      if (!it->second.stalled && s.stalled) out.urgent = true;
    }
    now_seen[n] = s;
    out.processes.push_back(std::move(p));
  }
  seen_ = std::move(now_seen);
  if (gpu_ != nullptr) gpu_->set_logs(sampled);
  out.unrecorded = scan_registrations(log_dir_, owners_, job_filter_, out.processes, real_ns());
  return out;
}

}  // namespace fr::daemon
