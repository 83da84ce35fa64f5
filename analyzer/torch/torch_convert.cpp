// Converts one PyTorch Flight Recorder dump (a dict, its entries already read by
// torch_entries.cpp) into our flight-log model: process groups into communicators, entries into
// records, progress into GPU states. The passes run in order: version, pg_config, entries,
// progress, coalesced groups, then the log is built.
//
// Schema followed: PyTorch Flight Recorder dump version "2.10" (c10d FlightRecorder.hpp,
// FlightRecorderDetail.hpp: dump_json() and dump_dict(); fr_trace's loader and types.py). Older
// 2.x dumps differ by missing fields, as the table in torch_schema.h says per version; fields a
// version lacks get the defaults noted below. A dump is a dict:
//
//   version            "2.10"                           -> the torch_schema.h row it is read by
//                      (newer: newest row and a warning; older than every row: refused)
//   comm_lib_version   "2.21.5"                         -> header.nccl_version (NCCL_VERSION code);
//                      "nccl_version" in dumps up to 2.7
//   pg_config          {pg_name: {name, desc, ranks}}   -> one fr_comm_entry per process group:
//                      ranks is a string "[0, 1]" (both forms) or a list
//                        id   = torch_pg_comm_id(name, ranks): all members agree without talking
//                        size = len(ranks), rank = position of our global rank in ranks
//                        name = desc, origin unknown, state live
//                        the default group (name "0" or desc "default_pg") gives world_size
//                      PyTorch 2.15 with gloo writes one nameless entry {"": {"name": "",
//                      "ranks": ...}} whatever groups exist, holding the ranks of the group
//                      created last (a new_group's in its own numbering): no group's
//                      membership. A list 0..n-1 there only hints the world size; the default
//                      group named by entries is the world (rank = global rank); any other group
//                      it does not list has unknown members (a warning per dump)
//   pg_status          (2.3 on) {pg_id: {last_enqueued_collective, last_started_collective,
//                      last_completed_collective}}, on gloo counted in op_id (every op, p2p
//                      too, which gloo records no entry for) and taken to collective numbers
//                      by the entries' op_ids (coll_seq_at) -> collectives up to the last started / completed
//                      one are so; last enqueued -> coll_seq (at least), with the progress
//                      counters when entries fell out
//   entries            list of records, oldest first    -> fr_record each:
//     record_id          -> id (renumbered with a warning when not ascending)
//     process_group      (name, desc) -> comm_id of that group
//     profiling_name     "nccl:all_reduce", "gloo:all_reduce", "nccl:send 0->1", "nccl:recv 1<-0"
//                        -> op (any backend prefix); peer for
//                        p2p (the other side's rank in the group)
//     is_p2p             -> seq = p2p_seq_id when true, collective_seq_id otherwise (before
//                        2.3 absent: p2p ops share collective_seq_id, true for send/recv)
//     op_id              gloo entries: the group's count of every op -> record op_index, comm
//                        op_index (the largest): what runs ahead of the collectives and the
//                        recorded p2p ops was never recorded (NCCL's op_id is not kept)
//     input_sizes        count = sum over tensors of the product of dims (output sizes for
//                        reduce_scatter and scatter, whose NCCL count is the receive count)
//     input_dtypes       dtype (ncclDataType_t of the first input's c10 name)
//     state              scheduled -> enqueued, started, completed; the discovered-started /
//                        completed timestamps raise it too, and (2.3 on) retired: true means
//                        completed (gloo leaves every entry "scheduled"; retired is its only
//                        sign). When nothing in the dump reports a start (gloo, NCCL without
//                        timing), the oldest unfinished op per group and kind counts as
//                        started (see apply_progress)
//     time_created_ns    -> call_ns (create_ns / heartbeat_ns / snapshot_ns from the min and max
//                        of all timestamps)
//     thread_id          -> tid (low 32 bits when numeric)
//     duration_ms, timeout_ms, frames, thread_name: not kept (a pickle's are never even
//                        turned into values; the frames of the entries a verdict names are read
//                        apart, torch_frames.cpp); output_dtypes only when inputs have none
//     input and output counts and dtypes: beside the log (TorchSide, torch_dump.h) for
//                        all_to_all and every entry whose output differs from its input
//   version            -> TorchSide::version as well (mixed versions are a finding)
//   nccl_comm_state    NCCL's per-communicator dump strings: not kept
//
// Coalesced groups (torch_groups.cpp): the ops of a group and the end marker PyTorch adds after
// them share a sequence number; they become one group with the marker's state.
//
// The rank comes from a top-level "rank" when present (our exports write it), else from the
// trailing digits of the file name (<prefix><rank>, as PyTorch names the files). Header: job id
// empty, FR_LOG_F_SNAPSHOT | FR_LOG_F_GPU_EVENTS (PyTorch learns GPU progress by polling CUDA
// events), writer_alive 1 unless "writer_alive" says otherwise. "rank", "world_size",
// "hostname", "pid", "writer_alive" and fields starting with "fr_" are extras PyTorch does not
// write and export_torch_json does, so that our own logs survive the round trip (group ids,
// communicator size and rank when membership is partial, snapshot time); process groups named
// with 16 hex digits (our exports) keep that communicator id.
#include "analyzer/torch/torch_convert.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <tuple>

#include "analyzer/torch/torch_detail.h"
#include "analyzer/torch/torch_schema.h"

namespace fr::analyzer::torch {

using nlohmann::json;

namespace {

struct Group {
  std::string name;
  std::string desc;
  std::vector<int64_t> ranks;
  bool ranks_known = false;
  int32_t size = -1;
  int32_t rank = -1;
  uint64_t id = 0;
  size_t comm_index = 0;
};

class DumpConverter {
 public:
  DumpConverter(const json& d, std::string path, int name_rank, Warnings* w,
                const std::vector<RawEntry>* raw)
      : d_(d), path_(std::move(path)), name_rank_(name_rank), w_(*w), raw_(raw) {}

  bool run(fr::log::LogFile* out, std::string* error) {
    if (!choose_schema(error)) return false;
    if (!read_pg_config(error)) return false;
    if (!read_entries(error)) return false;
    apply_progress();
    apply_coalesced_groups(&entries_, groups_.size(), path_, &w_);
    build(out);
    return true;
  }

  // The version, and the inputs and outputs of the entries whose arguments are compared.
  void side(TorchSide* out) const {
    out->version = as_text(field(d_, "version"));
    for (const ConvEntry& e : entries_) {
      if (e.op < 0 || e.p2p || e.seq <= 0 || !e.out_known) continue;
      if (e.op != FR_OP_ALLTOALL && e.in_count == e.out_count && e.in_dtype == e.out_dtype)
        continue;
      out->io.push_back({groups_[e.group].id, uint64_t(e.seq), uint16_t(e.op), e.in_count,
                         e.out_count, e.in_dtype, e.out_dtype});
    }
    for (const Group& g : groups_) out->groups.push_back({g.id, g.name, g.desc});
  }

 private:
  const json& d_;
  std::string path_;
  int name_rank_;
  Warnings& w_;
  const std::vector<RawEntry>* raw_;
  const TorchSchema* schema_ = nullptr;
  int64_t rank_ = -1;
  std::vector<Group> groups_;
  std::map<std::string, size_t> by_name_;
  std::map<int64_t, size_t> by_pg_id_;
  size_t last_group_ = SIZE_MAX;  // the group group_of() found last
  int64_t last_pg_id_ = -1;       // the pg_id entry_from_raw() saw last
  std::vector<ConvEntry> entries_;
  uint64_t min_ns_ = 0, max_ns_ = 0;
  int64_t anon_world_ = -1;  // world size hinted by a nameless pg_config entry
  bool start_seen_ = false;  // some entry or pg_status reports the start of work
  // pg_status per process group (index into groups_): the last collective enqueued, started
  // and completed, -1 where the backend does not say.
  struct Status {
    int64_t enqueued = -1, started = -1, completed = -1;
  };
  std::map<size_t, Status> status_;

  void see_time(int64_t t) {
    if (t <= 0) return;
    uint64_t u = uint64_t(t);
    if (min_ns_ == 0 || u < min_ns_) min_ns_ = u;
    if (u > max_ns_) max_ns_ = u;
  }

  // The torch_schema.h row this dump is read by; a version older than every row is refused.
  bool choose_schema(std::string* error) {
    SchemaChoice c = choose_torch_schema(as_text(field(d_, "version")));
    if (!c.schema) {
      *error = path_ + ": " + c.note;
      return false;
    }
    if (c.fit != SchemaFit::kKnown) w_.add(path_ + ": " + c.note);
    schema_ = c.schema;
    return true;
  }

  size_t add_group(const std::string& name, const std::string& desc, const json* ranks_field,
                   const json* extra) {
    Group g;
    g.name = name;
    g.desc = desc;
    g.ranks_known = parse_ranks(ranks_field, &g.ranks);
    if (!g.ranks_known && ranks_field)
      w_.add(path_ + ": process group " + name.substr(0, 64) + ": unreadable ranks list");
    int64_t v;
    if (extra && as_int(field(*extra, "fr_size"), &v) && v >= 0 && v < kMaxRanks)
      g.size = int32_t(v);
    else if (g.ranks_known)
      g.size = int32_t(g.ranks.size());
    if (extra && as_int(field(*extra, "fr_rank"), &v) && v >= -1 && v < kMaxRanks) {
      g.rank = int32_t(v);
    } else if (g.ranks_known && rank_ >= 0) {
      auto it = std::find(g.ranks.begin(), g.ranks.end(), rank_);
      if (it != g.ranks.end()) g.rank = int32_t(it - g.ranks.begin());
    }
    g.id = torch_pg_comm_id(name, g.ranks_known ? g.ranks : std::vector<int64_t>{});
    g.comm_index = groups_.size();
    by_name_[name] = groups_.size();
    groups_.push_back(std::move(g));
    return groups_.size() - 1;
  }

  // One pg_config entry: a group with its members, or PyTorch 2.15's nameless entry.
  void read_pg_config_entry(const std::string& key, const json& v) {
    if (!v.is_object()) {
      w_.add(path_ + ": pg_config entry that is not a dict skipped");
      return;
    }
    std::string name = as_text(field(v, "name"));
    if (name.empty()) name = key;
    if (name.empty()) {
      // PyTorch 2.15 with gloo writes one nameless entry whatever groups exist, holding the
      // ranks of the group registered last (for a new_group, its own numbering). It is no
      // group's membership; a list 0..n-1 is kept only as a hint of the world's size.
      std::vector<int64_t> ranks;
      if (parse_ranks(field(v, "ranks"), &ranks)) {
        bool dense = true;
        for (size_t i = 0; i < ranks.size(); ++i) dense = dense && ranks[i] == int64_t(i);
        if (dense) anon_world_ = std::max<int64_t>(anon_world_, int64_t(ranks.size()));
      }
      return;
    }
    if (by_name_.count(name)) {
      w_.add(path_ + ": process group " + name.substr(0, 64) + " listed twice; first kept");
      return;
    }
    add_group(name, as_text(field(v, "desc")), field(v, "ranks"), &v);
  }

  bool read_pg_config(std::string* error) {
    // The rank first: group ranks are found by it.
    int64_t r;
    if (as_int(field(d_, "rank"), &r) && r >= 0 && r < kMaxRanks)
      rank_ = r;
    else if (name_rank_ >= 0)
      rank_ = name_rank_;
    else
      w_.add(path_ + ": rank unknown (no \"rank\" field and no digits at the end of the name)");

    const json* pgc = field(d_, "pg_config");
    if (!pgc) {
      w_.add(path_ + ": no pg_config; process groups are known only by name");
      return true;
    }
    if (pgc->is_object()) {
      for (auto it = pgc->begin(); it != pgc->end(); ++it)
        read_pg_config_entry(it.key(), it.value());
    } else if (pgc->is_array()) {
      for (const auto& v : *pgc) read_pg_config_entry(std::string(), v);
    } else {
      *error = path_ + ": pg_config is neither a dict nor a list";
      return false;
    }
    return true;
  }

  // The group an entry names, made when pg_config did not list it.
  size_t group_of(const std::string& gname, const std::string& gdesc) {
    // Entries come in runs of one group: the last answer is asked first.
    if (last_group_ < groups_.size() && groups_[last_group_].name == gname) return last_group_;
    auto git = by_name_.find(gname);
    if (git != by_name_.end()) return last_group_ = git->second;
    size_t gi = add_group(gname, gdesc, nullptr, nullptr);
    Group& g = groups_[gi];
    if ((gname == "0" || gdesc == "default_pg") && rank_ >= 0) {
      // The default group is the world: this process's rank in it is its global rank, and
      // its size is at least what the nameless pg_config entry and the rank itself show.
      g.rank = int32_t(rank_);
      g.size = int32_t(std::max<int64_t>(anon_world_, rank_ + 1));
      if (anon_world_ <= rank_)
        w_.add(path_ + ": the default process group is not in pg_config; its size is unknown");
    } else {
      w_.add(path_ + ": process group " + gname.substr(0, 64) +
             (gdesc.empty() ? "" : " (" + gdesc.substr(0, 64) + ")") +
             " is not in pg_config; its size and members are unknown");
    }
    return gi;
  }

  // Count, dtype and (send, recv) peer of a real op.
  void read_op_fields(const RawEntry& e, std::string_view meta, ConvEntry* x) {
    bool by_output = x->op == FR_OP_REDUCESCATTER || x->op == FR_OP_SCATTER;
    bool ok = by_output ? e.out_ok : e.in_ok;
    x->count = by_output ? e.out_count : e.in_count;
    if (!ok) x->count = by_output ? e.in_count : e.out_count;
    if (e.has_dtype) {
      x->dtype = torch_dtype_to_nccl(e.dtype);
      if (x->dtype < 0)
        w_.add(path_ + ": dtype \"" + e.dtype.substr(0, 32) + "\" has no NCCL type");
    }
    if ((x->op == FR_OP_SEND || x->op == FR_OP_RECV) && !meta.empty()) {
      // send: "<self>-><peer>", recv: "<self><-<peer>"; ranks in the group.
      const char* sep = x->op == FR_OP_SEND ? "->" : "<-";
      size_t at = meta.find(sep);
      int64_t peer;
      if (at != std::string_view::npos && parse_int_text(meta.substr(at + 2), &peer) && peer >= 0 &&
          peer < kMaxRanks)
        x->peer = int32_t(peer);
      else
        w_.add(path_ + ": p2p entry with unreadable peer \"" + std::string(meta.substr(0, 32)) +
               "\"");
    }
    if (x->op >= FR_OP_GET_UNIQUE_ID) x->seq = 0;  // split, windows: API calls, not counted
  }

  // One entry into an Entry; false (with a warning) when it cannot be used.
  bool entry_from_raw(const RawEntry& e, ConvEntry* x) {
    if (!e.is_dict) {
      w_.add(path_ + ": entry that is not a dict skipped");
      return false;
    }
    if (e.profiling_name.empty()) {
      w_.add(path_ + ": entry without profiling_name skipped");
      return false;
    }
    OpName name = split_profiling_name(e.profiling_name);
    x->op = coalesced_end_marker(name.op, e) ? kCoalescedEnd : torch_op_from_name(name.op);
    if (x->op == -1) {
      w_.add(path_ + ": entries with unknown operation \"" + std::string(name.op.substr(0, 48)) +
             "\" skipped");
      return false;
    }
    if (e.pg_name.empty()) {
      w_.add(path_ + ": entry without process_group skipped");
      return false;
    }
    x->group = group_of(e.pg_name, e.pg_desc);
    if (e.pg_id >= 0 && e.pg_id != last_pg_id_) {  // the first group an id names keeps it
      by_pg_id_.emplace(e.pg_id, x->group);
      last_pg_id_ = e.pg_id;
    }

    // Before is_p2p and p2p_seq_id (torch_schema.h), p2p ops share the collectives' numbers.
    bool named_p2p = x->op == FR_OP_SEND || x->op == FR_OP_RECV;
    const bool own_p2p = schema_->p2p_seq_ids;
    x->p2p = (!own_p2p || e.is_p2p < 0) ? named_p2p : e.is_p2p == 1;
    x->seq = (x->p2p && own_p2p && e.has_p2p_seq) ? e.p2p_seq : e.coll_seq;
    if (x->seq < 0) x->seq = 0;
    x->record_id = e.record_id;
    x->call_ns = e.created_ns > 0 ? uint64_t(e.created_ns) : 0;
    see_time(e.created_ns);
    see_time(e.started_ns);
    see_time(e.completed_ns);
    x->state = state_from(e, *schema_, &w_);
    x->pg_id = e.pg_id;
    // gloo counts pg_status in op_id and records no p2p entry; NCCL counts pg_status in
    // collective numbers and records every op (its op_id also counts each op of a coalesced group).
    if (e.profiling_name.rfind("gloo:", 0) == 0) x->op_id = e.op_id;
    if (e.state == "started" || e.started_ns > 0) start_seen_ = true;
    if (e.has_tid) x->tid = uint32_t(uint64_t(e.tid));
    x->group_id = e.group_id;
    if (x->op >= 0) read_op_fields(e, name.meta, x);
    x->in_count = e.in_count, x->out_count = e.out_count, x->out_known = e.out_ok;
    x->in_dtype = e.in_dtype, x->out_dtype = e.out_dtype;
    return true;
  }

  bool read_entries(std::string* error) {
    std::vector<RawEntry> own;
    const std::vector<RawEntry>* list = raw_;
    if (!list) {
      const json* es = field(d_, "entries");
      if (!es) return true;  // dumps taken without collectives
      if (!es->is_array()) {
        *error = path_ + ": \"entries\" is not a list";
        return false;
      }
      own.reserve(es->size());
      for (const auto& e : *es) own.push_back(raw_from_json(e));
      list = &own;
    }
    entries_.reserve(list->size());
    for (const RawEntry& e : *list) {
      ConvEntry x;
      if (entry_from_raw(e, &x)) entries_.push_back(x);
    }
    return true;
  }

  // pg_status (2.3 on): per process group, keyed by the entries' "pg_id".
  void read_pg_status() {
    const json* st = field(d_, "pg_status");
    if (!schema_->pg_status || !st || !st->is_object()) return;
    for (auto it = st->begin(); it != st->end(); ++it) {
      int64_t pg_id;
      if (!parse_int_text(it.key(), &pg_id)) continue;
      auto g = by_pg_id_.find(pg_id);
      if (g == by_pg_id_.end()) continue;
      Status s;
      s.enqueued = int_or(it.value(), "last_enqueued_collective", -1);
      s.started = int_or(it.value(), "last_started_collective", -1);
      s.completed = int_or(it.value(), "last_completed_collective", -1);
      if (s.started >= 0) start_seen_ = true;
      const OpIdMap ids = op_id_map(g->second);
      s.enqueued = coll_seq_at(ids, s.enqueued);
      s.started = coll_seq_at(ids, s.started);
      s.completed = coll_seq_at(ids, s.completed);
      status_[g->second] = s;
    }
  }

  // (op_id, collective seq) of a group's collective entries that carry an op_id, ascending.
  OpIdMap op_id_map(size_t group) const {
    OpIdMap ids;
    for (const auto& e : entries_)
      if (e.group == group && !e.p2p && e.op >= 0 && e.op_id > 0 && e.seq > 0)
        ids.push_back({e.op_id, e.seq});
    std::sort(ids.begin(), ids.end());
    return ids;
  }

  // Progress beyond the entries' own states. pg_status holds the last collective started and
  // completed per process group: every collective at or below them has started or finished,
  // even when its entry says "scheduled".
  // A backend that never reports the start of work (gloo; NCCL without TORCH_NCCL_ENABLE_TIMING:
  // no "started" state, no start time, last_started_collective -1 everywhere) cannot show a rank
  // whose device never began an op, so no rank may be blamed for that: the oldest unfinished op of
  // each group and kind counts as started (the work a CPU backend is running, or the one a GPU
  // stream reached), the ones behind it stay enqueued.
  void apply_progress() {
    read_pg_status();
    for (auto& e : entries_) {
      if (e.p2p || e.seq <= 0) continue;
      auto it = status_.find(e.group);
      if (it == status_.end()) continue;
      if (e.seq <= it->second.completed)
        e.state = FR_GPU_COMPLETED;
      else if (e.seq <= it->second.started)
        e.state = std::max(e.state, FR_GPU_STARTED);
    }
    if (start_seen_) return;
    std::set<std::pair<size_t, bool>> oldest;
    for (auto& e : entries_) {
      if (e.op < 0 || e.state >= FR_GPU_COMPLETED || !oldest.insert({e.group, e.p2p}).second)
        continue;
      e.state = FR_GPU_STARTED;
    }
  }

  void build(fr::log::LogFile* out) {
    fr::log::LogFile& f = *out;
    f = fr::log::LogFile{};
    f.path = path_;
    f.is_snapshot = true;
    f.writer_alive = as_bool(field(d_, "writer_alive"), true);
    size_t ncomm = build_comms(&f);
    Numbering n = number_records();
    build_records(n, ncomm, &f);
    apply_status_counters(ncomm, &f);
    build_header(n, ncomm, &f);
  }

  // Communicators, at most the format's table size; returns how many.
  size_t build_comms(fr::log::LogFile* f) {
    size_t ncomm = std::min(groups_.size(), size_t(FR_MAX_COMM_CAPACITY));
    if (groups_.size() > ncomm)
      w_.add(path_ + ": " + std::to_string(groups_.size() - ncomm) +
             " process groups beyond the communicator table dropped");
    f->comms.resize(ncomm);
    for (size_t i = 0; i < ncomm; ++i) {
      const Group& g = groups_[i];
      fr_comm_entry& c = f->comms[i];
      std::memset(&c, 0, sizeof c);
      c.lock = 2;
      c.id = g.id;
      c.size = g.size;
      c.rank = g.rank;
      c.cuda_dev = -1;
      c.origin = FR_ORIGIN_UNKNOWN;
      copy_name(c.name, g.desc);
      c.state = FR_COMM_LIVE;
    }
    return ncomm;
  }

  // Record ids: as PyTorch numbered them when they ascend and fit a ring, else renumbered.
  struct Numbering {
    bool ascending = true;
    uint64_t span = 0;  // ring slots the records need
  };
  Numbering number_records() {
    Numbering n;
    for (size_t i = 0; i < entries_.size(); ++i) {
      if (entries_[i].record_id < 0 || (i && entries_[i].record_id <= entries_[i - 1].record_id)) {
        n.ascending = false;
        break;
      }
    }
    n.span = entries_.size();
    if (n.ascending && !entries_.empty()) {
      uint64_t first = uint64_t(entries_.front().record_id);
      n.span = uint64_t(entries_.back().record_id) - first + 1;
      if (n.span > FR_MAX_RING_CAPACITY || n.span > 4 * entries_.size() + 1024) n.ascending = false;
    }
    if (!n.ascending) {
      if (!entries_.empty())
        w_.add(path_ +
               ": record ids not ascending (or too sparse for a ring); renumbered in file order");
      n.span = entries_.size();
    }
    if (entries_.size() > FR_MAX_RING_CAPACITY) {
      w_.add(path_ + ": more entries than a flight log holds; the oldest dropped");
      entries_.erase(entries_.begin(),
                     entries_.end() - static_cast<std::ptrdiff_t>(FR_MAX_RING_CAPACITY));
      n.span = entries_.size();
      n.ascending = false;
    }
    return n;
  }

  void build_records(const Numbering& n, size_t ncomm, fr::log::LogFile* f) {
    f->records.reserve(entries_.size());
    for (size_t i = 0; i < entries_.size(); ++i) {
      const ConvEntry& e = entries_[i];
      fr::log::Record rec{};
      fr_record& r = rec.raw;
      std::memset(&r, 0, sizeof r);
      r.lock = 2;
      r.id = n.ascending ? uint64_t(e.record_id) : uint64_t(i);
      const Group& g = groups_[e.group];
      r.comm_id = g.id;
      r.seq = uint64_t(e.seq);
      r.count = e.count;
      r.group_id = e.group_id;
      r.call_ns = e.call_ns;
      r.tid = e.tid;
      r.op = uint16_t(e.op);
      r.dtype = e.dtype < 0 ? uint8_t(255) : uint8_t(e.dtype);
      r.gpu_state = uint8_t(e.state);
      r.redop = -1;
      r.peer = e.peer;
      r.op_index = e.op_id > 0 ? uint64_t(e.op_id) : 0;  // the group's count of every op
      r.result = 0;
      r.flags = FR_REC_F_LAUNCHED | (e.group_id ? FR_REC_F_IN_GROUP : 0u);
      rec.gpu_state = e.state;
      f->records.push_back(rec);

      if (g.comm_index < ncomm) {
        fr_comm_entry& c = f->comms[g.comm_index];
        if (e.p2p) {
          c.p2p_seq = std::max<uint64_t>(c.p2p_seq, r.seq);
        } else {
          c.coll_seq = std::max<uint64_t>(c.coll_seq, r.seq);
        }
        c.last_call_ns = std::max(c.last_call_ns, r.call_ns);
        if (e.op_id > 0) c.op_index = std::max<uint64_t>(c.op_index, uint64_t(e.op_id));
        if (r.call_ns && (!c.create_ns || r.call_ns < c.create_ns)) c.create_ns = r.call_ns;
      }
    }
  }

  // pg_status knows the last enqueued collective even when its entry was overwritten; then
  // whether everything enqueued has finished is told by the communicator's counters (in
  // collective sequence numbers here).
  void apply_status_counters(size_t ncomm, fr::log::LogFile* f) {
    for (const auto& [gi, s] : status_) {
      if (groups_[gi].comm_index >= ncomm || s.enqueued <= 0) continue;
      fr_comm_entry& c = f->comms[groups_[gi].comm_index];
      if (uint64_t(s.enqueued) > c.coll_seq) {
        c.op_index = uint64_t(s.enqueued);
        c.coll_seq = uint64_t(s.enqueued);
        c.gpu_completed = s.completed > 0 ? uint64_t(s.completed) : 0;
        c.gpu_started =
            std::max<uint64_t>(c.gpu_completed, s.started > 0 ? uint64_t(s.started) : 0);
      }
    }
  }

  // The NCCL version, under the key the schema names (the other one when it is absent).
  int library_version() const {
    const bool lib_key_first = std::strcmp(schema_->library_key, "comm_lib_version") == 0;
    std::string lib = as_text(field(d_, lib_key_first ? "comm_lib_version" : "nccl_version"));
    if (lib.empty()) lib = as_text(field(d_, lib_key_first ? "nccl_version" : "comm_lib_version"));
    return nccl_version_code(lib);
  }

  void build_header(const Numbering& n, size_t ncomm, fr::log::LogFile* f) {
    fr_log_header& h = f->header;
    std::memset(&h, 0, sizeof h);
    h.magic = FR_LOG_MAGIC;
    h.version = FR_LOG_VERSION;
    h.header_size = sizeof(fr_log_header);
    h.comm_size = sizeof(fr_comm_entry);
    h.record_size = sizeof(fr_record);
    h.comm_capacity = uint32_t(std::max<size_t>(ncomm, 1));
    h.ring_capacity = uint32_t(std::max<uint64_t>(n.span, 1));
    // Where a log of this version would hold the two tables (the rows a reader shows here).
    uint32_t capacity[FR_SECTION_KINDS] = {};
    capacity[FR_SECTION_COMMS] = h.comm_capacity;
    capacity[FR_SECTION_RING] = h.ring_capacity;
    fr_log_section dir[FR_SECTION_KINDS];
    h.file_size = fr_log_layout(capacity, dir);
    h.comm_offset = dir[FR_SECTION_COMMS].offset;
    h.ring_offset = dir[FR_SECTION_RING].offset;
    h.create_ns = min_ns_;
    h.pid = int32_t(int_or(d_, "pid", 0));
    h.global_rank = int32_t(rank_);
    h.world_size = int32_t(world_size());
    h.local_rank = -1;
    h.flags = FR_LOG_F_SNAPSHOT | FR_LOG_F_GPU_EVENTS;
    h.nccl_version = library_version();
    if (!f->records.empty()) {
      h.record_counter = f->records.back().raw.id + 1;
      h.overwritten = f->records.front().raw.id;
    }
    h.comm_count = uint32_t(ncomm);
    h.comm_dropped = uint32_t(groups_.size() - ncomm);
    h.heartbeat_ns = max_ns_;
    int64_t snap = int_or(d_, "fr_snapshot_ns", 0);
    h.snapshot_ns = snap > 0 ? uint64_t(snap) : max_ns_;
    h.writer_alive = f->writer_alive ? 1 : 0;
    std::string host = as_text(field(d_, "hostname"));
    if (host.empty()) host = as_text(field(d_, "host_name"));
    copy_name(h.hostname, host);
  }

  int64_t world_size() const {
    int64_t ws;
    if (as_int(field(d_, "world_size"), &ws) && ws > 0 && ws < kMaxRanks) return ws;
    for (const auto& g : groups_)
      if (g.name == "0" || g.desc == "default_pg") return g.size;
    int64_t best = -1;
    for (const auto& g : groups_) best = std::max<int64_t>(best, g.size);
    return best;
  }
};

}  // namespace

bool convert_dump(const json& dump, const std::string& path, int name_rank, Warnings* w,
                  const std::vector<RawEntry>* raw, fr::log::LogFile* out, TorchSide* side,
                  std::string* error) {
  DumpConverter c(dump, path, name_rank, w, raw);
  if (!c.run(out, error)) return false;
  if (side) c.side(side);
  return true;
}

}  // namespace fr::analyzer::torch
