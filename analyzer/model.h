// The analyzer's in-memory model of a dump set: one compact Proc per process (its communicator
// entries and its records, grouped by communicator) and one Comm per communicator seen anywhere.
// Loading reduces each validated fr::log::LogFile to this form right away; the matching, the
// verdicts and the exporters all read it.
//
// Two ways to load (LoadMode). kFull keeps every record. kWindow, what analyze() uses, keeps per
// communicator only the recent records a verdict reads (the frontier, what is still in flight,
// a margin: window.cpp) and, of the older ones, a digest: every collective's sequence number,
// call time and argument signature (CollHistory, for the mismatch and skew passes) and per
// point-to-point direction what the pending-op matching needs. A pass that finds the window
// too short for the case in front of it says so (AnalysisState::needs_history) and the analysis
// is made again from a full load, so a windowed analysis always equals a full one.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "analyzer/analyze.h"
#include "analyzer/torch/torch_dump.h"
#include "log/reader.h"
#include "log/side_files.h"
#include "log/slow_history.h"

namespace fr::analyzer {

// One record, reduced to what the analysis and the exporters use (64 bytes instead of 136).
struct Op {
  uint64_t seq = 0;
  uint64_t count = 0;
  uint64_t call_ns = 0;  // writer's CLOCK_REALTIME (clock offset not applied)
  uint64_t duration_ns = 0;
  uint64_t group_id = 0;
  uint32_t comm = 0;  // index into Proc::comms
  uint16_t op = 0;    // fr_op
  uint8_t dtype = 0;
  uint8_t gpu_state = 0;  // resolved fr_gpu_state
  int32_t redop = -1;
  int32_t peer = -1;  // root or peer, rank in the communicator
  int32_t result = 0;
  uint32_t flags = 0;  // FR_REC_F_*
};
static_assert(sizeof(Op) == 64, "Op stays compact");

// Op::flags bit the loader sets on an op it made from a graph replay (above every FR_REC_F_*).
inline constexpr uint32_t kOpReplayed = 0x80000000u;
// Op::flags bit for a PyTorch collective that its dump shows finished (retired) although a
// member never entered it: it ended with an error (raised, timed out), not completed.
inline constexpr uint32_t kOpRaised = 0x40000000u;
// Op::flags bit for a PyTorch all_to_all: torch runs it as grouped sends and receives, so each
// member's counts may differ; only the totals over the group must agree (torch_args.cpp).
inline constexpr uint32_t kOpUnevenCounts = 0x20000000u;

// Where a replayed op comes from: replay `replay` of the process's graph `graph` (its ordinal),
// captured op `pos` of `ops`.
struct ReplayTag {
  uint64_t replay = 0;
  uint32_t graph = 0;
  uint32_t pos = 0;
  uint32_t ops = 0;
};

// Every counted collective of one member on one communicator with a sequence number, oldest first:
// what the mismatch and skew passes compare across members, kept whole even when the records are
// windowed. Dense (indexed by seq - base, holes marked kNoSig) when the sequence numbers ascend
// without large gaps, as they do; explicit (`seqs`) otherwise.
struct CollHistory {
  static constexpr uint32_t kNoSig = UINT32_MAX;
  uint64_t base = 0;
  std::vector<uint64_t> seqs;     // explicit form: one per entry; empty in the dense form
  std::vector<uint64_t> call_ns;  // writer's clock, as Op::call_ns
  std::vector<uint32_t> sig;      // argument signature: an index into Proc::sigs

  size_t size() const { return sig.size(); }
  uint64_t seq_at(size_t i) const { return seqs.empty() ? base + i : seqs[i]; }
  // The lowest and highest sequence numbers on record and how many there are (false: none), as
  // for_each would find them, without visiting every entry.
  bool range(uint64_t* lo, uint64_t* hi, size_t* n) const {
    if (!seqs.empty()) {  // the explicit form
      *lo = UINT64_MAX, *hi = 0, *n = 0;
      for (size_t i = 0; i < seqs.size(); ++i)
        if (sig[i] != kNoSig) *lo = std::min(*lo, seqs[i]), *hi = std::max(*hi, seqs[i]), ++*n;
      return *n > 0;
    }
    size_t first = 0, last = sig.size();
    while (first < last && sig[first] == kNoSig) ++first;
    while (last > first && sig[last - 1] == kNoSig) --last;
    if (first == last) return false;
    size_t count = 0;
    for (size_t i = first; i < last; ++i) count += sig[i] != kNoSig;
    *lo = base + first, *hi = base + last - 1, *n = count;
    return true;
  }
  // f(seq, call_ns, sig) for every entry, oldest first.
  template <class F>
  void for_each(F&& f) const {
    for (size_t i = 0; i < sig.size(); ++i)
      if (sig[i] != kNoSig) f(seq_at(i), call_ns[i], sig[i]);
  }
};

// What a collective's arguments are compared by (mismatch.cpp): reduction and root only for the
// ops that have them.
struct SigKey {
  uint16_t op = 0;
  uint8_t dtype = 0;
  int32_t redop = -1;
  int32_t root = -1;
  uint64_t count = 0;
  bool operator==(const SigKey& o) const {
    return op == o.op && dtype == o.dtype && redop == o.redop && root == o.root && count == o.count;
  }
};

// Point-to-point records of one direction (sends to, or receives from, one peer) that fell out of
// the window: all completed. What the pending-op matching needs of them (match_p2p.cpp).
struct DroppedP2p {
  int32_t peer = -1;
  bool send = false;
  uint64_t count = 0;
  int64_t min_gap = INT64_MAX;  // smallest call gap between consecutive completed ones, the
                                // first completed one in the window included
  uint64_t max_call_ns = 0;
};

// A NIXL transfer request, from the log's transfer table (format version 4 on): what the entry
// says, its names as the bytes the writer left (cut at the first NUL; the notification is raw
// bytes, at most 32 of them). Escaped only where they are shown (nixl.cpp).
struct Xfer {
  uint64_t id = 0;
  uint64_t create_ns = 0;
  uint64_t bytes = 0;
  uint64_t posts = 0;
  uint64_t post_ns = 0;  // the last post, writer's CLOCK_REALTIME
  uint64_t status_ns = 0;
  uint64_t done_ns = 0;  // 0 while the last post is in flight
  uint64_t status_calls = 0;
  uint64_t gpu_posted = 0;
  uint64_t gpu_done = 0;
  uint32_t descs = 0;
  uint32_t op = 0;     // fr_xfer_op
  uint32_t flags = 0;  // FR_XFER_F_*
  uint32_t state = 0;  // fr_xfer_state
  int32_t status = 0;  // last nixl_status_t
  std::string local_agent, remote_agent, backend, notif;
};

// A NIXL call from the ring (op kind NIXL): kept apart from the ops, as it is on no communicator.
struct NixlCall {
  uint64_t call_ns = 0;
  uint64_t duration_ns = 0;
  uint64_t xfer = 0;   // the transfer's id (Xfer::id), 0 for calls on no transfer
  uint64_t count = 0;  // bytes, for the calls that move or name some
  uint16_t op = 0;     // fr_op
  int32_t result = 0;  // nixl_status_t
};

// A process's view of one communicator: its table entry (or a stub when only records name it).
struct ProcComm {
  uint64_t id = 0;
  uint64_t parent = 0;
  std::string name;
  int32_t size = -1;
  int32_t rank = -1;  // this process's rank in the communicator
  uint32_t origin = 0;
  uint32_t state = 0;
  int32_t async_error = 0;
  uint64_t coll_seq = 0;
  uint64_t p2p_seq = 0;
  uint64_t op_index = 0;
  uint64_t gpu_started = 0;
  uint64_t gpu_completed = 0;
  uint64_t last_call_ns = 0;
  bool has_entry = false;  // false: known only from records
  uint32_t ops_begin = 0;  // this communicator's records: Proc::ops[ops_begin, ops_end)
  uint32_t ops_end = 0;
  int comm = -1;                   // index into Model::comms
  uint32_t ops_total = 0;          // records on this communicator, those left out of the window too
  uint32_t dropped = 0;            // records older than the window (0: every record is here)
  uint64_t dropped_max_group = 0;  // the largest group id among them
  CollHistory history;             // every collective, windowed or not
  std::vector<DroppedP2p> dropped_p2p;
};

// The most NIXL transfers kept of one process (its table may hold 2^20): enough for any real
// agent's requests at once, and what bounds the NIXL pass's time and memory per process.
constexpr size_t kMaxXfersPerProc = 65536;

struct Proc {
  std::string file;  // path as read
  std::string host;
  std::string job_id;
  std::string source_kind;  // "fr" or "torch"
  int rank = -1;            // global rank
  int world_size = -1;
  int pid = 0;
  bool alive = false;  // writer alive (live log: now; dump: at the copy)
  bool stale = false;  // a PyTorch dump older than what the others did with it (torch_infer.cpp)
  bool snapshot = false;
  bool gpu_tracked = true;  // false when the writer could not follow GPU progress
  uint32_t flags = 0;
  uint64_t create_ns = 0;
  uint64_t snapshot_ns = 0;
  uint64_t heartbeat_ns = 0;
  uint64_t overwritten = 0;
  uint64_t torn = 0;
  uint64_t records = 0;
  int64_t clock_offset_ns = 0;
  std::vector<ProcComm> comms;
  std::vector<Op> ops;  // grouped by communicator, in record order within each
  // Ops made from graph replays (kOpReplayed): (index into ops, origin), ascending index.
  std::vector<std::pair<uint32_t, ReplayTag>> replays;
  // ncclCommGrow: the id a joining rank gives the grown communicator (its unique id's hash) ->
  // the id its members derive from their parent. Learned from the coordinating member, whose
  // ncclCommGetUniqueId on the parent is followed by its grow.
  std::vector<std::pair<uint64_t, uint64_t>> grow_aliases;
  // ncclCommShrink records: (index into ops, the excluded parent ranks, ascending), ascending
  // index: from the record's bitmap and the CommShrinkExcluded records after it. Older writers
  // leave the list empty.
  std::vector<std::pair<uint32_t, std::vector<int32_t>>> shrinks;
  uint32_t graphs = 0;         // CUDA graphs holding NCCL work
  uint64_t graph_replays = 0;  // replays recorded in the ring
  // Channel slots from NCCL's profiler interface (format version 5), each with the fr
  // communicator it belongs to (comm_id filled in by proc_from_log where the writer left 0).
  std::vector<fr_chan_entry> chans;
  // NIXL (format version 4 on): the transfer table's entries, the ring's NIXL calls in record
  // order, and the table's losses (entries that found no room, entries refused as torn).
  std::vector<Xfer> xfers;
  std::vector<NixlCall> nixl_calls;
  uint32_t xfers_dropped = 0;
  uint32_t xfers_torn = 0;
  uint32_t xfers_cut = 0;   // entries read but left out: over kMaxXfersPerProc (log_to_proc.cpp)
  bool has_stacks = false;  // a <dump>.stacks.json came with the dump
  fr::log::ProcessStacks stacks;
  std::vector<SigKey> sigs;  // the signatures its CollHistory::sig entries name
  // PyTorch dumps: per collective entry, {communicator id, collective seq, op_id}; op_id counts
  // every op of the group, point-to-point too, which gloo records no entry for (torch_infer.cpp).
  std::vector<std::array<uint64_t, 3>> torch_op_ids;
  // PyTorch dumps: the recorder's version, and the inputs and outputs of the collective entries
  // whose arguments torch_args.cpp compares.
  std::string torch_version;
  std::vector<fr::analyzer::torch::TorchIo> torch_io;
  // PyTorch dumps: the process groups (torch's name and description per communicator id), for
  // the call sites read from the dump when a verdict names one of its ops (torch_join.cpp).
  std::vector<fr::analyzer::torch::TorchGroup> torch_groups;
  std::pair<uint64_t, uint64_t> file_id{0, 0};  // PyTorch dumps: the file's (st_dev, st_ino)
  // fr's flight log of a rank that torch's dump also covers: that dump, read as a Proc of its
  // own (merge_views), for joining torch's process groups to fr's communicators.
  std::shared_ptr<const Proc> torch_view;
};

// The replay an op of `p` was made from, or nullptr for an op the program called itself.
const ReplayTag* replay_of(const Proc& p, const Op* o);

struct CommMember {
  int rank_in_comm = -1;
  int proc = -1;  // index into Model::procs
  int pc = -1;    // index into that Proc::comms
};

struct Comm {
  uint64_t id = 0;
  uint64_t parent = 0;
  std::string name;
  int size = -1;
  uint32_t origin = 0;
  std::vector<CommMember> members;  // ascending rank_in_comm
};

struct Skip {
  std::string file;
  std::string error;
};

struct Model {
  std::vector<std::string> paths;
  std::vector<Proc> procs;  // ascending global rank
  // Processes that never learned a global rank but recorded NIXL calls (a NIXL job started
  // without a launcher's RANK): no part of the rank census or of the communicator matching; the
  // NIXL pass and the views read them beside `procs`. Ascending (host, pid).
  std::vector<Proc> rankless;
  std::vector<Comm> comms;
  std::vector<Skip> skipped;
  std::vector<Skip> warnings;  // remarks on files that were read and are analysed
  int expected_ranks = -1;     // from manifests, else the largest world size seen
  bool clock_aligned = false;
  std::vector<std::string> manifest_hosts;  // hosts named by manifests (nodes and processes)
  std::string job_id;
  // Files of other jobs than `job_id` that were left out: job id -> how many.
  std::map<std::string, size_t> other_jobs;
  size_t files_read = 0;
  std::vector<fr::log::NodeGpus> gpus;  // the dump sets' <node>.gpu.json files
  // The dump sets' <node>.slow_history.json files: what each node's heartbeats said lately.
  std::vector<fr::log::NodeSlowHistory> histories;
  bool windowed = false;  // some records were left out (LoadMode::kWindow)
};

// kFull keeps every record (the trace view draws them all); kWindow the recent ones and a digest
// of the rest (see the top of this file).
enum class LoadMode { kFull, kWindow };

// What the dumps of PyTorch processes leave unsaid, inferred across them (torch_infer.cpp): the
// default group of a rank whose dump is empty, the members of a group no dump lists, stale
// dumps and collectives that raised. Remarks go to Model::warnings.
void infer_torch(Model* model);

// Converts a validated log into a compact Proc (used by loading and by the PyTorch reader path).
Proc proc_from_log(const fr::log::LogFile& log, const std::string& source_kind);
// Builds a Proc's collective histories (every loaded Proc has them; window.cpp).
void build_histories(Proc* p);
// Leaves out the records of `p` older than its window (window.cpp); false when it keeps them all.
bool window_proc(Proc* p);

// Reads every input path (dump-set directories, manifest.json, single logs, PyTorch dumps) with
// `threads` readers in parallel. Files that cannot be used are listed in Model::skipped.
Model load_model(const std::vector<std::string>& paths, unsigned threads,
                 LoadMode mode = LoadMode::kFull);

// The full analysis of a loaded model.
Analysis analyze_model(const Model& model, const Options& opts);

// Joins the stacks and GPU health of the dump set into a finished analysis (context.cpp).
void add_context(const Model& model, Analysis* analysis);
// torch's process groups and call sites joined into a finished analysis (torch_join.cpp): the
// `torch` object of the verdict and findings on a torch group or on fr's communicator a group
// joins, and the document's `torch_joins`.
void add_torch_context(const Model& model, Analysis* analysis);
// Makes `kept` and `other`, two views of one rank of different kinds ("fr", "torch", "stacks"),
// one in `kept` (views.cpp); false when they are of one kind (a duplicate, left to the caller).
bool merge_views(Proc* kept, Proc* other, std::vector<Skip>* warnings);
// A process's main-thread stack (frames innermost first) from its stacks file; null when none.
nlohmann::json main_stack(const Proc& p);
// One line for a stack: "hang_forever ← run_step ← main (rank_main.cpp:340)".
std::string stack_line(const nlohmann::json& frames);

// Helpers shared by the JSON builder, the text view and the trace writer.
std::string comm_id_hex(uint64_t id);
// How a communicator is written in every sentence: `name (0x…)`, the id alone without a name.
std::string comm_text(const Comm& c);
nlohmann::json op_json(const Op& op, int64_t clock_offset_ns);
bool comm_matches(const Comm& c, const std::string& filter);

}  // namespace fr::analyzer
