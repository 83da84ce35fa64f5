// One flight log reduced to the compact Proc the analysis reads (model.h): its communicators, its
// records as Ops grouped by communicator, CUDA graph replays expanded into the ops they ran,
// shrink exclusions and grow aliases. load.cpp calls it once per file, on its reading threads, so
// a whole LogFile never outlives its reading.
#include <algorithm>
#include <map>
#include <set>
#include <cstring>
#include <deque>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "passes.h"

namespace fr::analyzer {

namespace {

// Scratch vectors longer than this many records are freed after use, not kept for the next log.
constexpr size_t kScratchKeptRecords = size_t{1} << 15;

// A record as the analysis sees it: one the program issued, or one made from a graph replay.
struct Entry {
  const fr_record* raw = nullptr;  // in the LogFile, or the replay's own copy (`own`)
  fr_record* own = nullptr;
  fr_gpu_state gpu_state = FR_GPU_NONE;
  bool replayed = false;
  ReplayTag tag;
};

// The GPU state of captured op `pos` (on communicator `c`) in the replay of graph `ordinal` that
// the positions the graph writes into the communicator's entry belong to.
fr_gpu_state replay_state(const fr_comm_entry* c, uint32_t ordinal, uint32_t pos) {
  if (c == nullptr) return FR_GPU_ENQUEUED;
  if (FR_GRAPH_POS_ORDINAL(c->graph_completed) == ordinal &&
      FR_GRAPH_POS_OP(c->graph_completed) >= pos)
    return FR_GPU_COMPLETED;
  if (FR_GRAPH_POS_ORDINAL(c->graph_started) == ordinal && FR_GRAPH_POS_OP(c->graph_started) >= pos)
    return FR_GPU_STARTED;
  return FR_GPU_ENQUEUED;
}

// The GPU state of captured op `t` (at `pos` in graph `g`) in the replay `launch` recorded.
// Without the GPU's replay counter, each launch resets the positions of its communicators from the
// host: they belong to the newest launch, and older launches are done. With it, replays before
// the GPU's are done (one graph's launches run in order), later ones wait behind it on the stream
// whatever the host launched since, and the positions belong to the replay it names.
fr_gpu_state replayed_state(const fr::log::LogFile& log, const fr_graph_entry& g, bool gpu_counted,
                            const fr_record& launch, uint64_t newest_launch, const fr_record& t,
                            uint32_t pos) {
  if (gpu_counted && launch.seq != g.gpu_replays)
    return launch.seq < g.gpu_replays ? FR_GPU_COMPLETED : FR_GPU_ENQUEUED;
  if (!gpu_counted && launch.id != newest_launch) return FR_GPU_COMPLETED;
  return replay_state(log.find_comm(t.comm_id), g.ordinal, pos);
}

// What expand_replays saw of the log: its graphs and replays, and whether the rarer passes over
// its records have anything to find.
struct Seen {
  uint32_t graphs = 0;
  uint64_t replays = 0;
  bool shrinks = false;  // CommShrink or CommShrinkExcluded records (shrink_excluded)
  bool grows = false;    // CommGetUniqueId or CommGrow records (proc_grow_aliases)
  bool nixl = false;     // NIXL calls (proc_nixl)
};

// The id of the log's newest graph launch that launched; UINT64_MAX if none did.
uint64_t newest_launch_id(const fr::log::LogFile& log) {
  for (size_t i = log.records.size(); i-- > 0;) {
    const fr_record& r = log.records[i].raw;
    if (r.op == FR_OP_GRAPH_LAUNCH && !(r.flags & FR_REC_F_NEVER_LAUNCHED)) return r.id;
  }
  return UINT64_MAX;
}

// A captured graph as expand_replays needs it: its entry and captured ops by position.
struct ReplayGraph {
  const fr_graph_entry* entry;
  std::vector<const fr_record*> ops;  // by position
  bool positions = false;
  bool gpu_counted = false;  // the graph counts its replays on the GPU (version 3 on)
};
using ReplayGraphs = std::unordered_map<uint64_t, ReplayGraph>;

// The log's graphs, each with its collective and point-to-point ops from the capture table.
ReplayGraphs index_graphs(const fr::log::LogFile& log) {
  ReplayGraphs graphs;
  const bool has_gpu_replays = log.header.version >= 3;  // the field exists from version 3 on
  for (const fr_graph_entry& g : log.graphs)
    graphs[g.id] = ReplayGraph{&g,
                               {},
                               (g.flags & FR_GRAPH_F_GPU_POSITION) != 0,
                               has_gpu_replays && (g.flags & FR_GRAPH_F_GPU_REPLAYS) != 0};
  for (const fr_record& r : log.captures) {
    auto it = graphs.find(r.aux);
    if (it == graphs.end() || r.op_index == 0 || r.op_index > 65536) continue;
    if (!fr::log::op_is_collective(r.op) && !fr::log::op_is_p2p(r.op)) continue;
    auto& ops = it->second.ops;
    if (ops.size() < r.op_index) ops.resize(r.op_index, nullptr);
    ops[r.op_index - 1] = &r;
  }
  return graphs;
}

// The ops one replay (the GraphLaunch `launch`) ran, appended to `out` as copies kept in `store`.
void append_replay(const fr::log::LogFile& log, const ReplayGraph& g, const fr_record& launch,
                   uint64_t newest_launch, std::deque<fr_record>* store, std::vector<Entry>* out) {
  const bool markers = (log.header.flags & FR_LOG_F_GPU_MARKERS) != 0;
  for (size_t k = 0; k < g.ops.size(); ++k) {
    const fr_record* t = g.ops[k];
    if (t == nullptr || (t->flags & FR_REC_F_NEVER_LAUNCHED)) continue;
    fr_record& copy = store->emplace_back(*t);
    Entry e{&copy, &copy, FR_GPU_ENQUEUED, true,
            ReplayTag{launch.seq, g.entry->ordinal, static_cast<uint32_t>(k + 1),
                      static_cast<uint32_t>(g.ops.size())}};
    copy.id = launch.id;
    copy.seq = 0;
    copy.call_ns = launch.call_ns + k;  // in graph order, for "which op waits longest"
    copy.duration_ns = 0;
    copy.result = 0;
    copy.flags = (t->flags & ~(FR_REC_F_CAPTURED | FR_REC_F_IN_CALL | FR_REC_F_GPU_POSITION)) |
                 FR_REC_F_LAUNCHED;
    if (!markers || !g.positions || !(t->flags & FR_REC_F_GPU_POSITION))
      copy.flags |= FR_REC_F_GPU_UNTRACKED;
    else
      e.gpu_state =
          replayed_state(log, *g.entry, g.gpu_counted, launch, newest_launch, *t, e.tag.pos);
    copy.gpu_state = static_cast<uint8_t>(e.gpu_state);
    out->push_back(e);
  }
}

// Sequence numbers of the replayed ops, per communicator and kind, counted back from the newest
// (the entry's counter) and re-anchored at every op the program issued itself.
void number_replays(const fr::log::LogFile& log, std::vector<Entry>* entries) {
  std::unordered_map<uint64_t, std::pair<uint64_t, uint64_t>> next;  // comm -> (coll, p2p)
  for (const fr_comm_entry& c : log.comms) next[c.id] = {c.coll_seq + 1, c.p2p_seq + 1};
  std::pair<uint64_t, uint64_t>* counters = nullptr;  // of the last communicator looked up
  uint64_t counters_of = 0;
  std::vector<Entry>& out = *entries;
  for (size_t i = out.size(); i-- > 0;) {
    Entry& e = out[i];
    const OpClass kind = op_class(e.raw->op);
    if (kind == OpClass::API || kind == OpClass::NIXL) continue;
    if (!e.replayed && (e.raw->flags & FR_REC_F_CAPTURED)) continue;
    if (!counters || counters_of != e.raw->comm_id) {
      counters =
          &next.try_emplace(e.raw->comm_id, std::pair<uint64_t, uint64_t>{0, 0}).first->second;
      counters_of = e.raw->comm_id;
    }
    uint64_t& cur = kind == OpClass::COLL ? counters->first : counters->second;
    if (!e.replayed) {
      if (e.raw->seq != 0) cur = e.raw->seq;
    } else if (cur > 1) {
      e.own->seq = --cur;
    } else {
      e.own->seq = 0;  // older than anything the counters can place: shown, never matched
      e.own->flags |= FR_REC_F_NEVER_LAUNCHED;
    }
  }
}

// Every record of the log, each graph replay followed by the ops it ran (the graph's captured ops,
// from the capture table), then the replayed ops numbered (number_replays).
// Replayed ops are copies kept in `store`; the others point into the log. `entries` is emptied
// first (a reading thread reuses it from one log to the next).
Seen expand_replays(const fr::log::LogFile& log, std::deque<fr_record>* store,
                    std::vector<Entry>* entries) {
  const ReplayGraphs graphs = index_graphs(log);
  Seen seen;
  seen.graphs = static_cast<uint32_t>(graphs.size());
  // The newest launch: without the GPU's replay counter, the positions are its (replayed_state).
  const uint64_t newest_launch = graphs.empty() ? UINT64_MAX : newest_launch_id(log);

  std::vector<Entry>& out = *entries;
  out.clear();
  out.reserve(log.records.size());
  for (const auto& rec : log.records) {
    const uint16_t op = rec.raw.op;
    const OpClass kind = op_class(op);
    if (kind == OpClass::API) {  // the rare kinds are all API calls: one test for most records
      seen.shrinks |= op == FR_OP_COMM_SHRINK || op == FR_OP_COMM_SHRINK_EXCLUDED;
      seen.grows |= op == FR_OP_COMM_GET_UNIQUE_ID || op == FR_OP_COMM_GROW;
      if (op == FR_OP_COMM_SHRINK_EXCLUDED) continue;  // part of its shrink (shrink_excluded)
    } else if (kind == OpClass::NIXL) {
      seen.nixl = true;  // on no communicator: proc_nixl keeps them apart
      continue;
    }
    Entry& issued = out.emplace_back();  // built in place: no temporary to copy per record
    issued.raw = &rec.raw;
    issued.gpu_state = rec.gpu_state;
    if (op != FR_OP_GRAPH_LAUNCH || (rec.raw.flags & FR_REC_F_NEVER_LAUNCHED)) continue;
    auto it = graphs.find(rec.raw.aux);
    if (it == graphs.end()) continue;
    ++seen.replays;
    append_replay(log, it->second, rec.raw, newest_launch, store, &out);
  }
  // Without replays numbering would only read: each issued op keeps its own number.
  if (seen.replays > 0) number_replays(log, &out);
  return seen;
}

// The communicator table as ProcComms, then a stub for each communicator only records name (the
// table lost it: dropped or torn). Fills `per_comm`: per record, the index of its communicator.
void proc_comms(const fr::log::LogFile& log, const std::vector<Entry>& records, Proc* p,
                std::vector<uint32_t>* per_comm_out) {
  std::unordered_map<uint64_t, uint32_t> index;
  p->comms.reserve(log.comms.size());
  for (const fr_comm_entry& c : log.comms) {
    ProcComm pc;
    pc.id = c.id;
    pc.parent = c.parent_id;
    pc.name = std::string(c.name, strnlen(c.name, FR_NAME_LEN));
    pc.size = c.size;
    pc.rank = c.rank;
    pc.origin = c.origin;
    pc.state = c.state;
    pc.async_error = c.async_error;
    pc.coll_seq = c.coll_seq;
    pc.p2p_seq = c.p2p_seq;
    pc.op_index = c.op_index;
    pc.gpu_started = c.gpu_started;
    pc.gpu_completed = c.gpu_completed;
    pc.last_call_ns = c.last_call_ns;
    pc.has_entry = true;
    index.emplace(c.id, static_cast<uint32_t>(p->comms.size()));
    p->comms.push_back(std::move(pc));
  }
  std::vector<uint32_t>& per_comm = *per_comm_out;
  per_comm.clear();
  per_comm.reserve(records.size());
  uint64_t last_id = 0;
  uint32_t last = UINT32_MAX;  // records come in runs on one communicator
  for (const auto& rec : records) {
    if (last == UINT32_MAX || rec.raw->comm_id != last_id) {
      auto it = index.find(rec.raw->comm_id);
      if (it == index.end()) {
        ProcComm pc;
        pc.id = rec.raw->comm_id;
        it = index.emplace(rec.raw->comm_id, static_cast<uint32_t>(p->comms.size())).first;
        p->comms.push_back(std::move(pc));
      }
      last_id = rec.raw->comm_id;
      last = it->second;
    }
    per_comm.push_back(last);
  }
}

// One record as an Op (of communicator `comm`).
void fill_op(const Entry& e, uint32_t comm, Op* o) {
  const fr_record& r = *e.raw;
  o->seq = r.seq;
  o->count = r.count;
  o->call_ns = r.call_ns;
  o->duration_ns = r.duration_ns;
  o->group_id = r.group_id;
  o->comm = comm;
  o->op = r.op;
  o->dtype = r.dtype;
  // Copied as bytes: a damaged file may hold a value outside the enum, which reads as unknown.
  std::underlying_type_t<fr_gpu_state> gs;
  std::memcpy(&gs, &e.gpu_state, sizeof gs);
  o->gpu_state =
      gs <= FR_GPU_COMPLETED ? static_cast<uint8_t>(gs) : static_cast<uint8_t>(FR_GPU_NONE);
  o->redop = r.redop;
  o->peer = r.peer;
  o->result = r.result;
  o->flags = r.flags | (e.replayed ? kOpReplayed : 0u);
  if (r.op == FR_OP_PUT_SIGNAL || r.op == FR_OP_SIGNAL || r.op == FR_OP_WAIT_SIGNAL) {
    // Signals carry no reduction or data type worth keeping: their signal index goes in redop,
    // their context in dtype (255 stands for 255 and above), so Op stays 64 bytes.
    const int32_t ctx = FR_SIGNAL_AUX_CTX(r.aux);
    o->redop = FR_SIGNAL_AUX_SIG_IDX(r.aux);
    o->dtype = ctx >= 0 && ctx < 255 ? static_cast<uint8_t>(ctx) : uint8_t{255};
  }
}

// The excluded parent ranks of shrinks, by the new communicator's id.
using ExcludedRanks = std::unordered_map<uint64_t, std::vector<int32_t>>;

// Adds the ranks a bitmap of 128 parent ranks from `first` on names.
void add_block(int64_t first, uint64_t low, uint64_t high, std::vector<int32_t>* out) {
  for (int bit = 0; bit < 128; ++bit)
    if (((bit < 64 ? low : high) >> (bit % 64)) & 1u)
      out->push_back(static_cast<int32_t>(first + bit));
}

// The excluded parent ranks of every shrink, by the new communicator's id: the CommShrink record's
// bitmap (ranks below 128) and the CommShrinkExcluded records that follow it (flight_log.h).
ExcludedRanks shrink_excluded(const fr::log::LogFile& log) {
  ExcludedRanks out;
  for (const auto& rec : log.records) {
    const fr_record& r = rec.raw;
    if (r.aux == 0) continue;
    if (r.op == FR_OP_COMM_SHRINK) {
      add_block(0, r.sendbuff, r.recvbuff, &out[r.aux]);
    } else if (r.op == FR_OP_COMM_SHRINK_EXCLUDED && r.peer >= 128 && r.peer % 128 == 0) {
      add_block(r.peer, r.sendbuff, r.recvbuff, &out[r.aux]);
    }
  }
  for (auto& [id, ranks] : out) {
    std::sort(ranks.begin(), ranks.end());
    ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  }
  return out;
}

// The ops, grouped by communicator (a counting sort keeps record order inside each one).
void proc_ops(const std::vector<Entry>& records, const std::vector<uint32_t>& per_comm,
              const ExcludedRanks& excluded, Proc* p) {
  std::vector<uint32_t> start(p->comms.size() + 1, 0);
  for (uint32_t c : per_comm) ++start[c + 1];
  for (size_t i = 1; i < start.size(); ++i) start[i] += start[i - 1];
  for (size_t i = 0; i < p->comms.size(); ++i) {
    p->comms[i].ops_begin = start[i];
    p->comms[i].ops_end = start[i + 1];
  }
  // Records in their place among the ops, then the ops written in that order: each op is
  // built where it goes, with no pass that clears the vector first.
  thread_local std::vector<uint32_t> order;
  order.resize(records.size());
  std::vector<uint32_t> fill(start.begin(), start.end() - 1);
  for (size_t i = 0; i < records.size(); ++i) order[fill[per_comm[i]]++] = static_cast<uint32_t>(i);
  p->ops.reserve(records.size());
  for (uint32_t at = 0; at < order.size(); ++at) {
    const size_t i = order[at];
    const fr_record& r = *records[i].raw;
    ProcComm& pc = p->comms[per_comm[i]];
    if (records[i].replayed) p->replays.emplace_back(at, records[i].tag);
    if (r.op == FR_OP_COMM_SHRINK) {
      auto it = excluded.find(r.aux);
      p->shrinks.push_back({at, it != excluded.end() ? it->second : std::vector<int32_t>{}});
    }
    fill_op(records[i], per_comm[i], &p->ops.emplace_back());
    // The table entry's counters may lag a record written just before the copy.
    const OpClass kind = op_class(r.op);
    if (kind == OpClass::COLL) pc.coll_seq = std::max(pc.coll_seq, r.seq);
    if (kind == OpClass::P2P) pc.p2p_seq = std::max(pc.p2p_seq, r.seq);
    if (!pc.has_entry && pc.size < 0) pc.size = -1;
    pc.last_call_ns = std::max(pc.last_call_ns, r.call_ns);
  }
  if (order.capacity() > kScratchKeptRecords) order = {};
  std::sort(p->replays.begin(), p->replays.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  std::sort(p->shrinks.begin(), p->shrinks.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
}

// The coordinating member of a grow: the unique id it made on the parent names, for the joining
// ranks, the communicator its grow derived.
void proc_grow_aliases(const fr::log::LogFile& log, Proc* p) {
  std::unordered_map<uint64_t, uint64_t> uid_on_parent;  // parent id -> unique id hash
  for (const auto& rec : log.records) {
    const fr_record& r = rec.raw;
    if (r.op == FR_OP_COMM_GET_UNIQUE_ID && r.result == 0 && r.aux != 0) {
      uid_on_parent[r.comm_id] = r.aux;
    } else if (r.op == FR_OP_COMM_GROW && r.comm_id != 0 && r.aux != 0 &&
               (r.result == 0 || r.result == 7 /* ncclInProgress */)) {
      auto it = uid_on_parent.find(r.comm_id);
      if (it == uid_on_parent.end()) continue;
      p->grow_aliases.emplace_back(it->second, r.aux);
      uid_on_parent.erase(it);  // each unique id serves one grow
    }
  }
}

}  // namespace

const ReplayTag* replay_of(const Proc& p, const Op* o) {
  if (o == nullptr || !(o->flags & kOpReplayed) || p.ops.empty()) return nullptr;
  if (o < p.ops.data() || o >= p.ops.data() + p.ops.size()) return nullptr;
  uint32_t idx = static_cast<uint32_t>(o - p.ops.data());
  auto it = std::lower_bound(
      p.replays.begin(), p.replays.end(), idx,
      [](const std::pair<uint32_t, ReplayTag>& a, uint32_t i) { return a.first < i; });
  return it != p.replays.end() && it->first == idx ? &it->second : nullptr;
}

// Channel slots, each tied to its communicator. A slot the agent could not tie (comm_id 0) belongs
// to the profiler context of its ordinal; contexts are made in the order communicators are made,
// so unclaimed contexts take, in order, the not yet claimed entries of the same rank and size.
static void proc_chans(const fr::log::LogFile& log, Proc* p) {
  if (log.chans.empty()) return;
  std::map<uint32_t, uint64_t> of_ctx;
  std::set<uint64_t> taken;
  for (const auto& e : log.chans)
    if (e.comm_id != 0) of_ctx[e.ctx_ordinal] = e.comm_id, taken.insert(e.comm_id);
  std::map<uint32_t, std::pair<int, int>> unclaimed;  // ordinal -> (rank, size)
  for (const auto& e : log.chans)
    if (!of_ctx.count(e.ctx_ordinal)) unclaimed[e.ctx_ordinal] = {e.rank, e.nranks};
  for (const auto& [ordinal, shape] : unclaimed)
    for (const auto& c : log.comms)
      if (!taken.count(c.id) && c.rank == shape.first && c.size == shape.second) {
        of_ctx[ordinal] = c.id;
        taken.insert(c.id);
        break;
      }
  p->chans.reserve(log.chans.size());
  for (fr_chan_entry e : log.chans) {
    auto it = of_ctx.find(e.ctx_ordinal);
    if (it == of_ctx.end()) continue;  // no communicator of this process matches: not ours to use
    e.comm_id = it->second;
    p->chans.push_back(e);
  }
}

// The NIXL transfer table's entries and the ring's NIXL calls (format version 4 on). The reader
// has cut the agent and backend names to their arrays; the notification is raw, NUL-padded bytes.
// At most kMaxXfersPerProc entries of one process are kept (a table may hold 2^20): those a
// verdict can come from (posted, in progress, or ended in an error) first, then the others, all
// in table order; the rest are counted in Proc::xfers_cut.
static std::vector<const fr_xfer_entry*> kept_xfers(const fr::log::LogFile& log, Proc* p) {
  std::vector<const fr_xfer_entry*> kept;
  kept.reserve(std::min(log.xfers.size(), kMaxXfersPerProc));
  auto pending = [](const fr_xfer_entry& e) {
    return e.state == FR_XFER_POSTED || e.state == FR_XFER_IN_PROGRESS || e.status < 0;
  };
  for (int pass = 0; pass < 2; ++pass)
    for (const fr_xfer_entry& e : log.xfers)
      if (kept.size() < kMaxXfersPerProc && pending(e) == (pass == 0)) kept.push_back(&e);
  std::sort(kept.begin(), kept.end());  // back to table order (the entries are one array)
  p->xfers_cut = uint32_t(log.xfers.size() - kept.size());
  return kept;
}

static void proc_nixl(const fr::log::LogFile& log, bool calls, Proc* p) {
  p->xfers_dropped = log.header.xfer_dropped;
  p->xfers_torn = log.xfers_torn;
  const std::vector<const fr_xfer_entry*> kept = kept_xfers(log, p);
  p->xfers.reserve(kept.size());
  for (const fr_xfer_entry* entry : kept) {
    const fr_xfer_entry& e = *entry;
    Xfer& x = p->xfers.emplace_back();
    x.id = e.id, x.create_ns = e.create_ns, x.bytes = e.bytes, x.posts = e.posts,
    x.post_ns = e.post_ns;
    x.status_ns = e.status_ns, x.done_ns = e.done_ns, x.status_calls = e.status_calls;
    x.gpu_posted = e.gpu_posted, x.gpu_done = e.gpu_done, x.descs = e.descs, x.op = e.op,
    x.flags = e.flags;
    x.state = e.state, x.status = e.status;
    x.local_agent.assign(e.local_agent, strnlen(e.local_agent, sizeof e.local_agent));
    x.remote_agent.assign(e.remote_agent, strnlen(e.remote_agent, sizeof e.remote_agent));
    x.backend.assign(e.backend, strnlen(e.backend, sizeof e.backend));
    x.notif.assign(e.notif, strnlen(e.notif, sizeof e.notif));
  }
  if (!calls) return;
  for (const auto& rec : log.records) {
    const fr_record& r = rec.raw;
    if (op_class(r.op) != OpClass::NIXL) continue;
    p->nixl_calls.push_back({r.call_ns, r.duration_ns, r.aux, r.count, r.op, r.result});
  }
}

Proc proc_from_log(const fr::log::LogFile& log, const std::string& source_kind) {
  Proc p;
  const fr_log_header& h = log.header;
  p.file = log.path;
  p.host = log.hostname();
  p.job_id = log.job_id();
  p.source_kind = source_kind;
  p.rank = h.global_rank;
  p.world_size = h.world_size;
  p.pid = h.pid;
  p.alive = log.writer_alive;
  p.snapshot = log.is_snapshot;
  p.flags = h.flags;
  p.gpu_tracked = (h.flags & FR_LOG_F_NO_GPU_TRACKING) == 0;
  p.create_ns = h.create_ns;
  p.snapshot_ns = h.snapshot_ns;
  p.heartbeat_ns = h.heartbeat_ns;
  p.overwritten = h.overwritten;
  p.torn = log.torn + (log.is_snapshot ? h.torn_skipped : 0);
  p.records = log.records.size();
  // Scratch each reading thread keeps from one log to the next (a log is thousands of records),
  // while it stays small: one huge log does not leave its size on the thread.
  thread_local std::vector<Entry> records;
  thread_local std::vector<uint32_t> per_comm;
  std::deque<fr_record> replayed;
  const Seen seen = expand_replays(log, &replayed, &records);
  p.graphs = seen.graphs;
  p.graph_replays = seen.replays;
  proc_comms(log, records, &p, &per_comm);
  proc_ops(records, per_comm, seen.shrinks ? shrink_excluded(log) : ExcludedRanks{}, &p);
  if (records.capacity() > kScratchKeptRecords) records = {}, per_comm = {};
  if (seen.grows) proc_grow_aliases(log, &p);
  // A rank the writer never learned: its rank in the largest communicator (DESIGN.md "Identity").
  if (p.rank < 0) {
    int best = -1;
    for (const auto& pc : p.comms)
      if (pc.has_entry && pc.rank >= 0 && pc.size > best) {
        best = pc.size;
        p.rank = pc.rank;
        if (p.world_size < 0) p.world_size = pc.size;
      }
  }
  proc_chans(log, &p);
  proc_nixl(log, seen.nixl, &p);
  if (source_kind == "torch")
    for (auto& o : p.ops)
      if (o.op == FR_OP_ALLTOALL) o.flags |= kOpUnevenCounts;
  build_histories(&p);
  return p;
}

}  // namespace fr::analyzer
