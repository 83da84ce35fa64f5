// The timeline exporter. Each communicator is a trace "process" (`name (0x…)`) and each global
// rank a "thread" in it. Perfetto draws a thread track only when its slices nest, so each track
// holds one kind of slice: the host calls, which follow one another (each is cut where the next
// one starts, should two threads of a process have called at once). The time an op then spent
// in flight on the GPU up to the dump is an async slice beside the track (async slices may
// overlap). Group calls belong to no communicator: they get their own process, "NCCL groups",
// where each group is one slice from its GroupStart to its GroupEnd, nested as the groups were.
// The verdict's op is dark red, other waiting ops red, and the culprits get an instant marker.
// NIXL calls and transfers have a process of their own, "NIXL transfers", a track per process.
#include "analyzer/trace.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <set>

#include "analyzer/html.h"
#include "passes.h"

namespace fr::analyzer {

namespace {

// A track's host: PyTorch dumps record none (unless a manifest names it).
std::string host_text(const std::string& host) {
  return host.empty() ? "(host not recorded)" : host;
}

// A JSON string; bytes that are not UTF-8 (a damaged dump's names) become U+FFFD.
std::string esc(const std::string& s) {
  return nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// What to highlight: (comm id, seq, kind) of the verdict and of each finding.
struct Mark {
  std::string comm;
  uint64_t seq;
  bool p2p;
  bool verdict;
  std::set<int> culprits;
};

class Writer {
 public:
  Writer(FILE* f, int64_t t0) : f_(f), t0_(t0) {}

  void meta(const char* what, int pid, int tid, const std::string& name) {
    sep();
    if (tid < 0)
      std::fprintf(f_, "{\"ph\":\"M\",\"name\":\"%s\",\"pid\":%d,\"args\":{\"name\":%s}}", what,
                   pid, esc(name).c_str());
    else
      std::fprintf(f_,
                   "{\"ph\":\"M\",\"name\":\"%s\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":%s}}",
                   what, pid, tid, esc(name).c_str());
  }
  // A complete slice: [start_ns, start_ns + dur_ns) in writer time (offset applied by the caller).
  void slice(const std::string& name, const char* cat, int pid, int tid, int64_t start_ns,
             int64_t dur_ns, const std::string& args, const char* cname) {
    sep();
    std::fprintf(
        f_,
        "{\"ph\":\"X\",\"name\":%s,\"cat\":\"%s\",\"pid\":%d,\"tid\":%d,\"ts\":%s,\"dur\":%s,\"args\":%s%s%s%s}",
        esc(name).c_str(), cat, pid, tid, us(start_ns - t0_).c_str(),
        us(std::max<int64_t>(dur_ns, 0)).c_str(), args.c_str(), cname ? ",\"cname\":\"" : "",
        cname ? cname : "", cname ? "\"" : "");
  }
  // An async slice (its own track beside the thread's), begin and end.
  void async(const std::string& name, int pid, int tid, int64_t start_ns, int64_t end_ns,
             const char* cname) {
    const unsigned long long id = ++async_id_;
    for (int end = 0; end < 2; ++end) {
      sep();
      std::fprintf(
          f_,
          "{\"ph\":\"%s\",\"name\":%s,\"cat\":\"gpu\",\"id\":\"0x%llx\",\"pid\":%d,\"tid\":%d,\"ts\":%s%s%s%s}",
          end ? "e" : "b", esc(name).c_str(), id, pid, tid,
          us((end ? end_ns : start_ns) - t0_).c_str(), cname ? ",\"cname\":\"" : "",
          cname ? cname : "", cname ? "\"" : "");
    }
  }
  void instant(const char* name, int pid, int tid, int64_t at_ns) {
    sep();
    std::fprintf(f_, "{\"ph\":\"i\",\"s\":\"t\",\"name\":\"%s\",\"pid\":%d,\"tid\":%d,\"ts\":%s}",
                 name, pid, tid, us(at_ns - t0_).c_str());
  }

 private:
  // Whole nanoseconds as microseconds with three decimals: exact, so slices that touch still touch.
  static std::string us(int64_t ns) {
    char buf[32];
    const int64_t a = ns < 0 ? -ns : ns;
    std::snprintf(buf, sizeof buf, "%s%lld.%03lld", ns < 0 ? "-" : "",
                  static_cast<long long>(a / 1000), static_cast<long long>(a % 1000));
    return buf;
  }
  void sep() {
    if (!first_) std::fputs(",\n", f_);
    first_ = false;
  }
  FILE* f_;
  int64_t t0_;
  bool first_ = true;
  unsigned long long async_id_ = 0;
};

// One rank's records on one communicator, in time order.
std::vector<uint32_t> by_time(const Proc& p, const ProcComm& pc) {
  std::vector<uint32_t> idx(pc.ops_end - pc.ops_begin);
  std::iota(idx.begin(), idx.end(), pc.ops_begin);
  std::stable_sort(idx.begin(), idx.end(),
                   [&](uint32_t a, uint32_t b) { return p.ops[a].call_ns < p.ops[b].call_ns; });
  return idx;
}

void comm_tracks(Writer& w, const Model& m, const Comm& c, int pid, const std::vector<Mark>& marks,
                 const std::set<int>& rank_filter) {
  const std::string id = comm_id_hex(c.id);
  w.meta("process_name", pid, -1,
         comm_label(CommRef{id, c.name, c.size}) +
             (c.size > 0 ? " size " + std::to_string(c.size) : ""));
  for (const auto& mem : c.members) {
    const Proc& p = m.procs[mem.proc];
    if (!rank_filter.empty() && !rank_filter.count(p.rank)) continue;
    const ProcComm& pc = p.comms[mem.pc];
    w.meta("thread_name", pid, p.rank,
           "rank " + std::to_string(p.rank) + " (" + std::to_string(mem.rank_in_comm) + ") " +
               host_text(p.host));
    const int64_t dump_ns =
        static_cast<int64_t>(p.snapshot_ns ? p.snapshot_ns : p.heartbeat_ns) + p.clock_offset_ns;
    const std::vector<uint32_t> order = by_time(p, pc);
    for (size_t k = 0; k < order.size(); ++k) {
      const Op& o = p.ops[order[k]];
      const bool coll = fr::log::op_is_collective(o.op), p2p = fr::log::op_is_p2p(o.op);
      const bool waiting = (coll || p2p) && o.gpu_state != FR_GPU_COMPLETED &&
                           !(o.flags & FR_REC_F_NEVER_LAUNCHED) && p.gpu_tracked;
      const Mark* mk = nullptr;
      for (const auto& x : marks)
        if (x.comm == id && x.seq == o.seq && x.p2p == p2p && (coll || p2p)) {
          mk = &x;
          break;
        }
      const int64_t start = static_cast<int64_t>(o.call_ns) + p.clock_offset_ns;
      int64_t end = start + std::max<int64_t>(static_cast<int64_t>(o.duration_ns), 1000);
      if (k + 1 < order.size())
        end = std::min(end, static_cast<int64_t>(p.ops[order[k + 1]].call_ns) + p.clock_offset_ns);
      std::string name = fr::log::op_name(o.op);
      if (coll || p2p) name += " #" + std::to_string(o.seq);
      const char* cname = mk && mk->verdict && waiting ? "terrible" : waiting ? "bad" : nullptr;
      w.slice(mk && waiting ? "STALL " + name : name,
              coll  ? "coll"
              : p2p ? "p2p"
                    : "api",
              pid, p.rank, start, end - start, op_json(o, p.clock_offset_ns).dump(), cname);
      if (waiting && dump_ns > end) w.async("in flight: " + name, pid, p.rank, end, dump_ns, cname);
      if (mk && mk->verdict && mk->culprits.count(p.rank)) w.instant("culprit", pid, p.rank, start);
    }
  }
}

// Channels (format version 5): one track per rank, channel and connection (kernel, send to a
// peer, receive from a peer), the slot's current or last op as one slice from its start to its
// last change, running on to the dump while it is still in flight.
void channel_tracks(Writer& w, const Model& m, const Comm& c, int pid,
                    const std::set<int>& rank_filter) {
  for (const auto& mem : c.members) {
    const Proc& p = m.procs[mem.proc];
    if (!rank_filter.empty() && !rank_filter.count(p.rank)) continue;
    const int64_t dump_ns =
        static_cast<int64_t>(p.snapshot_ns ? p.snapshot_ns : p.heartbeat_ns) + p.clock_offset_ns;
    for (size_t i = 0; i < p.chans.size(); ++i) {
      const fr_chan_entry& e = p.chans[i];
      if (e.comm_id != c.id || e.ops_started == 0) continue;
      const int tid = (p.rank + 1) * 100000 + static_cast<int>(i);  // a track per slot (< 65,536)
      std::string track = "rank " + std::to_string(p.rank) + " channel " +
                          std::to_string(e.channel) + " " + fr::log::chan_kind_name(e.kind);
      if (e.kind != FR_CHAN_KERNEL)
        track += (e.kind == FR_CHAN_SEND ? " to " : " from ") + std::to_string(e.peer);
      w.meta("thread_name", pid, tid, track);
      const bool open = e.ops_started > e.ops_done;
      const int64_t start = static_cast<int64_t>(e.op_start_ns) + p.clock_offset_ns;
      const int64_t end =
          open ? std::max(dump_ns, start) : static_cast<int64_t>(e.last_ns) + p.clock_offset_ns;
      std::string name = std::string(fr::log::op_name(e.op)) + " ch" + std::to_string(e.channel);
      if (e.kind != FR_CHAN_KERNEL)
        name += " step " + std::to_string(e.done) + "/" + std::to_string(e.nsteps);
      name += " " + std::string(fr::log::chan_state_name(e.state));
      nlohmann::json args = {{"nccl_seq", e.op_seq},
                             {"steps_posted", e.posted},
                             {"steps_done", e.done},
                             {"state", fr::log::chan_state_name(e.state)},
                             {"bytes", e.bytes}};
      w.slice(name, "channel", pid, tid, start, end - start, args.dump(), open ? "bad" : nullptr);
    }
  }
}

// Calls outside any communicator (GroupStart/GroupEnd and the like), one track per rank.
void group_tracks(Writer& w, const Model& m, const std::vector<const Comm*>& stubs, int pid,
                  const std::set<int>& rank_filter) {
  bool named = false;
  for (const Comm* c : stubs)
    for (const auto& mem : c->members) {
      const Proc& p = m.procs[mem.proc];
      if (!rank_filter.empty() && !rank_filter.count(p.rank)) continue;
      const ProcComm& pc = p.comms[mem.pc];
      if (pc.ops_end == pc.ops_begin) continue;
      if (!named) w.meta("process_name", pid, -1, "NCCL groups (no communicator)");
      named = true;
      w.meta("thread_name", pid, p.rank,
             "rank " + std::to_string(p.rank) + " " + host_text(p.host));
      const int64_t dump_ns =
          static_cast<int64_t>(p.snapshot_ns ? p.snapshot_ns : p.heartbeat_ns) + p.clock_offset_ns;
      std::vector<int64_t> open;  // start times of the groups not yet ended, innermost last
      int64_t last_end = INT64_MIN;
      for (uint32_t i : by_time(p, pc)) {
        const Op& o = p.ops[i];
        const int64_t start = static_cast<int64_t>(o.call_ns) + p.clock_offset_ns;
        const int64_t end = start + static_cast<int64_t>(o.duration_ns);
        if (o.op == FR_OP_GROUP_START) {
          open.push_back(start);
        } else if (o.op == FR_OP_GROUP_END && !open.empty()) {
          w.slice(open.size() > 1 ? "group (nested)" : "group", "group", pid, p.rank, open.back(),
                  end - open.back(), "{}", nullptr);
          open.pop_back();
        } else if (start >= last_end) {
          // A call of its own, or inside the open group, whose slice it nests in: it starts after
          // the GroupStart and ends before the GroupEnd (or the dump) that closes the group.
          w.slice(fr::log::op_name(o.op), "api", pid, p.rank, start,
                  std::max<int64_t>(end - start, 0), op_json(o, p.clock_offset_ns).dump(), nullptr);
        }
        last_end = std::max(last_end, end);
      }
      // Groups still open at the dump (the job hung inside one).
      while (!open.empty()) {
        w.slice("group open at the dump", "group", pid, p.rank, open.back(),
                std::max<int64_t>(dump_ns, last_end) - open.back(), "{}", "bad");
        open.pop_back();
      }
    }
}

// NIXL (format version 4 on): one trace process, a track per process that made NIXL calls (its
// calls, each cut where the next one starts) and, beside it, each transfer's last post as an
// async slice from the post to its end, or to the dump while still in flight.
void nixl_tracks(Writer& w, const Model& m, int pid, const std::set<int>& rank_filter) {
  std::vector<const Proc*> all;
  for (const auto& p : m.procs)
    if (rank_filter.empty() || rank_filter.count(p.rank)) all.push_back(&p);
  for (const auto& p : m.rankless) all.push_back(&p);
  bool named = false;
  for (size_t i = 0; i < all.size(); ++i) {
    const Proc& p = *all[i];
    if (p.xfers.empty() && p.nixl_calls.empty()) continue;
    if (!named) w.meta("process_name", pid, -1, "NIXL transfers");
    named = true;
    const int tid = p.rank >= 0 ? p.rank : 1'000'000 + static_cast<int>(i);
    w.meta("thread_name", pid, tid,
           (p.rank >= 0 ? "rank " + std::to_string(p.rank) + " " : std::string()) + "pid " +
               std::to_string(p.pid) + " " + host_text(p.host));
    const int64_t dump_ns =
        static_cast<int64_t>(p.snapshot_ns ? p.snapshot_ns : p.heartbeat_ns) + p.clock_offset_ns;
    for (size_t k = 0; k < p.nixl_calls.size(); ++k) {
      const NixlCall& c = p.nixl_calls[k];
      const int64_t start = static_cast<int64_t>(c.call_ns) + p.clock_offset_ns;
      int64_t end = start + std::max<int64_t>(static_cast<int64_t>(c.duration_ns), 1000);
      if (k + 1 < p.nixl_calls.size())
        end = std::min(end, static_cast<int64_t>(p.nixl_calls[k + 1].call_ns) + p.clock_offset_ns);
      const nlohmann::json args = {{"xfer", c.xfer},
                                   {"count", c.count},
                                   {"result", c.result},
                                   {"result_name", fr::log::nixl_status_name(c.result)}};
      w.slice(fr::log::op_name(c.op), "nixl", pid, tid, start, std::max<int64_t>(end - start, 0),
              args.dump(), c.result < 0 ? "bad" : nullptr);
    }
    for (const Xfer& x : p.xfers) {
      if (x.posts == 0 || x.post_ns == 0) continue;
      const bool open =
          x.done_ns == 0 && (x.state == FR_XFER_POSTED || x.state == FR_XFER_IN_PROGRESS);
      const int64_t start = static_cast<int64_t>(x.post_ns) + p.clock_offset_ns;
      const int64_t end =
          open ? std::max(dump_ns, start)
               : std::max(static_cast<int64_t>(x.done_ns) + p.clock_offset_ns, start);
      const std::string name =
          std::string(fr::log::xfer_op_name(x.op)) + " " + std::to_string(x.bytes) + " B " +
          (x.op == FR_XFER_OP_READ ? "from " : "to ") + nixl_text(x.remote_agent) +
          (open                       ? " (in flight)"
           : x.state == FR_XFER_ERROR ? " (error)"
                                      : "");
      w.async(name, pid, tid, start, end, open || x.state == FR_XFER_ERROR ? "bad" : nullptr);
    }
  }
}

}  // namespace

bool write_trace(const Model& m, const Analysis& a, const Options& opts, const std::string& path,
                 std::string* error) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (!f) {
    *error = path + ": cannot write the trace: " + std::strerror(errno);
    return false;
  }
  std::set<int> rank_filter(opts.ranks.begin(), opts.ranks.end());
  std::vector<Mark> marks;
  auto add_mark = [&](const Finding& f, bool verdict) {
    if (!f.comm) return;
    marks.push_back({f.comm->id,
                     f.seq,
                     f.seq_kind == "p2p",
                     verdict,
                     {f.culprit_ranks.begin(), f.culprit_ranks.end()}});
  };
  add_mark(a.verdict, true);
  for (const auto& f : a.findings) add_mark(f, false);

  // Times relative to the earliest op keep the numbers readable (microseconds, as the format wants).
  int64_t t0 = INT64_MAX;
  for (const auto& p : m.procs)
    for (const auto& o : p.ops)
      t0 = std::min(t0, static_cast<int64_t>(o.call_ns) + p.clock_offset_ns);
  for (const auto* list : {&m.procs, &m.rankless})
    for (const auto& p : *list) {
      for (const auto& c : p.nixl_calls)
        t0 = std::min(t0, static_cast<int64_t>(c.call_ns) + p.clock_offset_ns);
      for (const auto& x : p.xfers)
        if (x.post_ns) t0 = std::min(t0, static_cast<int64_t>(x.post_ns) + p.clock_offset_ns);
    }
  if (t0 == INT64_MAX) t0 = 0;

  std::fprintf(
      f,
      "{\"displayTimeUnit\":\"ns\",\"otherData\":{\"schema\":\"fr-trace/1\",\"t0_ns\":%lld},\"traceEvents\":[\n",
      static_cast<long long>(t0));
  Writer w(f, t0);
  std::vector<const Comm*> stubs;  // records that name no communicator
  for (size_t ci = 0; ci < m.comms.size(); ++ci) {
    const Comm& c = m.comms[ci];
    if (c.id == 0) {
      stubs.push_back(&c);
      continue;
    }
    if (!comm_matches(c, opts.comm)) continue;
    comm_tracks(w, m, c, static_cast<int>(ci) + 1, marks, rank_filter);
    channel_tracks(w, m, c, static_cast<int>(ci) + 1, rank_filter);
  }
  if (opts.comm.empty())
    group_tracks(w, m, stubs, static_cast<int>(m.comms.size()) + 1, rank_filter);
  if (opts.comm.empty()) nixl_tracks(w, m, static_cast<int>(m.comms.size()) + 2, rank_filter);
  std::fputs("\n]}\n", f);
  if (std::fclose(f) != 0) {
    *error = path + ": writing the trace failed: " + std::strerror(errno);
    return false;
  }
  return true;
}

}  // namespace fr::analyzer
