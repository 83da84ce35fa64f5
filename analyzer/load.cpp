// Loading: finds the dump files behind each input path, reads them on parallel threads through
// fr::log::read_log_fd (which maps each file and validates every record), and reduces each log to
// a compact Proc at once so the whole dump set never sits in memory twice. Files that cannot be
// used (corrupt, truncated, foreign, newer version, another job, a rank seen twice) are named in
// Model::skipped with one line each; everything else is analysed.
//
// A dump set may have been written by a hostile peer, and may change while it is read. Every
// file is opened once, through fr::log's safe_file (the type checked before the open, which never
// blocks), and read from that descriptor: a FIFO, device or socket is named and skipped, never
// opened, so the analysis never hangs. Links inside a dump set (in a listing or a manifest entry,
// at any depth) are not followed; a path the user names on the command line may be a link.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <memory>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <type_traits>
#include <unordered_map>

#include "analyzer/model.h"
#include "log/safe_file.h"
#include "log/side_files.h"
#include "log/snapshot.h"
#ifdef FR_HAVE_TORCH
#include "analyzer/torch/torch_detail.h"
#endif

namespace fs = std::filesystem;

namespace fr::analyzer {
namespace {

// What the manifest said about one dump file.
struct FileHint {
  int rank = -1;
  std::string host;
  int64_t clock_offset_ns = 0;
  bool has_offset = false;
};

struct Job {
  std::string path;  // as shown in messages
  FileHint hint;
  bool from_listing = false;  // found by scanning a directory (not named by the user/manifest)
  // Inside a dump set: `rel` under `dir`, opened following no link. Empty: a path the user named.
  std::string dir;
  std::string rel;
};

#ifdef FR_HAVE_TORCH
// A PyTorch dump is read whole; the same bound as the torch reader's own. Its kind is told from
// a first look at its head, then (when that says no and the file is longer) a larger one.
constexpr size_t kMaxTorchBytes = size_t{1} << 30;
constexpr size_t kTorchSniffBytes = size_t{1} << 20;
constexpr size_t kTorchFirstSniffBytes = size_t{1} << 16;

bool sniff_torch_file(int fd, uint64_t file_size) {
  std::string head;
  for (size_t want : {kTorchFirstSniffBytes, kTorchSniffBytes}) {
    size_t n = size_t(std::min<uint64_t>(want, file_size));
    if (n <= head.size()) break;
    head.resize(n);
    ssize_t got = ::pread(fd, head.data(), n, 0);
    head.resize(got > 0 ? size_t(got) : 0);
    if (fr::analyzer::torch::sniff_torch_dump(head)) return true;
    if (size_t(got) < n) break;
  }
  return false;
}

// The whole file into one uninitialized buffer sized by fstat (dumps are gigabytes at scale: no
// zero fill, no second copy); a file that grows meanwhile is read on up to `max_bytes`.
bool read_whole(int fd, uint64_t size_hint, size_t max_bytes, std::unique_ptr<char[]>* buf,
                size_t* len, std::string* error, const std::string& name) {
  size_t cap = size_t(std::min<uint64_t>(size_hint, max_bytes)) + 1;
  buf->reset(new char[cap]);
  *len = 0;
  for (;;) {
    if (*len == cap) {
      if (cap > max_bytes) {
        *error = name + ": larger than " + std::to_string(max_bytes) + " bytes";
        return false;
      }
      size_t bigger = std::min(cap * 2, max_bytes + 1);
      std::unique_ptr<char[]> b(new char[bigger]);
      std::memcpy(b.get(), buf->get(), *len);
      *buf = std::move(b);
      cap = bigger;
    }
    ssize_t n = ::pread(fd, buf->get() + *len, cap - *len, off_t(*len));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      *error = name + ": cannot read: " + std::strerror(errno);
      return false;
    }
    if (n == 0) break;
    *len += size_t(n);
  }
  if (*len > max_bytes) {
    *error = name + ": larger than " + std::to_string(max_bytes) + " bytes";
    return false;
  }
  return true;
}
#endif

std::string without_trailing_slash(std::string dir) {
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  return dir;
}

// The documents a dump set carries besides its dumps: the manifest, and what the coordinator
// writes next to it (the incident, the analysis, the report). Never dumps, never foreign.
bool is_dump_set_document(const std::string& name) {
  return name == "manifest.json" || name == "incident.json" || name == "analysis.json" ||
         name == "report.txt" || fr::log::is_side_file(name);
}

// A side file's text, opened like every file of a dump set; "" with no error when it is absent.
bool read_side_file(const std::string& dir, const std::string& rel, const std::string& path,
                    std::string* text, std::string* error) {
  fr::log::OpenedFile f = dir.empty() ? fr::log::open_regular(path) : fr::log::open_beneath(dir, rel);
  if (!f.ok()) {
    if (f.error != fr::log::OpenError::kMissing) *error = f.reason;
    return false;
  }
  return fr::log::read_all(f.fd.get(), fr::log::kMaxSideFileBytes, text, error, path);
}

// The stacks that came with a dump (<dump>.stacks.json), when there are any.
void load_stacks(const std::string& dir, const std::string& rel, const std::string& path,
                 std::vector<Proc>* procs, std::vector<Skip>* warnings) {
  if (procs->size() != 1) return;
  const std::string side = fr::log::stacks_file_for(path);
  std::string text, err;
  if (!read_side_file(dir, fr::log::stacks_file_for(rel), side, &text, &err)) {
    if (!err.empty()) warnings->push_back({side, "stacks not read: " + err});
    return;
  }
  Proc& p = procs->front();
  if (!fr::log::parse_stacks(text, &p.stacks, &err)) {
    warnings->push_back({side, "stacks not read: " + err});
    return;
  }
  p.has_stacks = true;
}

// Every <node>.gpu.json of a dump set.
void load_gpus(const std::string& dir, Model* model) {
  std::error_code ec;
  std::vector<std::string> names;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const std::string suffix = fr::log::kGpuSuffix;
    if (name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
      names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  for (const auto& n : names) {
    const std::string path = without_trailing_slash(dir) + "/" + n;
    std::string text, err;
    fr::log::NodeGpus g;
    if (!read_side_file(dir, n, path, &text, &err) || !fr::log::parse_gpus(text, &g, &err)) {
      if (!err.empty()) model->warnings.push_back({path, "GPU health not read: " + err});
      continue;
    }
    if (g.node.empty()) g.node = n.substr(0, n.size() - std::string(fr::log::kGpuSuffix).size());
    model->gpus.push_back(std::move(g));
  }
}

Job job_in(const std::string& dir, const std::string& rel, FileHint hint, bool from_listing) {
  std::string d = without_trailing_slash(dir);
  return {d + "/" + rel, std::move(hint), from_listing, d, rel};
}

// Files in a directory that could be dumps, sorted by name for a stable order. Entries that are
// neither files nor folders (links, FIFOs, devices, sockets) are named in `notes`, never opened.
std::vector<std::string> list_dir(const std::string& dir, std::string* error,
                                  std::vector<Skip>* notes) {
  std::vector<std::string> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.empty() || name[0] == '.' || is_dump_set_document(name)) continue;
    std::error_code sec;
    fs::file_status st = it->symlink_status(sec);
    if (sec || fs::is_directory(st)) continue;
    if (fs::is_symlink(st)) {
      notes->push_back({it->path().string(), "a symbolic link: not followed out of the dump set"});
      continue;
    }
    if (!fs::is_regular_file(st)) {
      const char* kind = fs::is_fifo(st) ? "a FIFO (pipe)"
                         : fs::is_character_file(st) ? "a character device"
                         : fs::is_block_file(st) ? "a block device"
                         : fs::is_socket(st) ? "a socket"
                                             : "not a file";
      notes->push_back({it->path().string(), std::string(kind) + ", not a regular file: not read"});
      continue;
    }
    out.push_back(name);
  }
  if (ec) *error = ec.message();
  std::sort(out.begin(), out.end());
  return out;
}

// Every file of a directory without a usable manifest.
void add_listing(const std::string& dir, Model* model, std::vector<Job>* jobs) {
  std::string err;
  for (auto& f : list_dir(dir, &err, &model->skipped)) jobs->push_back(job_in(dir, f, {}, true));
  if (!err.empty()) model->skipped.push_back({dir, "cannot list: " + err});
}

void add_manifest_dir(const std::string& dir, Model* model, std::vector<Job>* jobs,
                      std::map<std::string, std::pair<int64_t, bool>>* offsets) {
  fr::log::Manifest m;
  std::string err;
  if (!fr::log::read_manifest(dir, &m, &err)) {
    model->skipped.push_back({(fs::path(dir) / "manifest.json").string(), err});
    add_listing(dir, model, jobs);
    return;
  }
  if (m.expected_ranks > model->expected_ranks) model->expected_ranks = m.expected_ranks;
  if (model->job_id.empty()) model->job_id = m.job_id;
  for (const auto& n : m.nodes) {
    (*offsets)[n.host] = {n.clock_offset_ns, n.has_offset};
    model->manifest_hosts.push_back(n.host);
  }
  for (const auto& s : m.skipped) model->skipped.push_back({s.file, s.error});
  std::set<std::string> listed;
  for (const auto& p : m.processes) {
    FileHint h;
    h.rank = p.rank;
    h.host = p.host;
    if (!p.host.empty()) model->manifest_hosts.push_back(p.host);
    // parse_manifest made sure the entry is relative and stays inside the dump set.
    listed.insert(fs::path(p.file).lexically_normal().string());
    jobs->push_back(job_in(dir, p.file, h, false));
  }
  // Dump files present but not listed (another taker added them) are still read. A listed
  // entry that is not a regular file is named once, by load_one.
  std::string lerr;
  std::vector<Skip> notes;
  for (auto& f : list_dir(dir, &lerr, &notes)) {
    if (listed.count(fs::path(f).lexically_normal().string())) continue;
    jobs->push_back(job_in(dir, f, {}, true));
  }
  for (auto& n : notes)
    if (!listed.count(fs::path(n.file).filename().string())) model->skipped.push_back(std::move(n));
}

// One reader thread's output for one input file.
struct Loaded {
  std::vector<Proc> procs;
  std::vector<Skip> skips;
  std::vector<Skip> warnings;  // the file was read; something in it was odd or left out
};

Loaded load_one(const Job& job) {
  Loaded out;
  // Opened here, at analysis time, whatever was checked before (a coordinator accepted the file
  // earlier; it may have been swapped for a FIFO since).
  fr::log::OpenedFile file = job.dir.empty() ? fr::log::open_regular(job.path, fr::log::Links::kFollow)
                                             : fr::log::open_beneath(job.dir, job.rel);
  if (!file.ok()) {
    if (file.error == fr::log::OpenError::kMissing && !job.from_listing && !job.dir.empty())
      out.skips.push_back({job.path, "missing: listed in the manifest but not in the dump set"});
    else
      out.skips.push_back({job.path, file.reason});
    return out;
  }
  const int fd = file.fd.get();
#ifdef FR_HAVE_TORCH
  uint64_t magic = 0;
  bool flight_log = ::pread(fd, &magic, sizeof magic, 0) == ssize_t(sizeof magic) &&
                    magic == FR_LOG_MAGIC;
  if (!flight_log) {
    if (sniff_torch_file(fd, uint64_t(file.st.st_size))) {
      std::unique_ptr<char[]> buf;
      size_t len = 0;
      std::string err;
      if (!read_whole(fd, uint64_t(file.st.st_size), kMaxTorchBytes, &buf, &len, &err, job.path)) {
        out.skips.push_back({job.path, err.substr(std::min(err.size(), job.path.size() + 2))});
        return out;
      }
      auto r = fr::analyzer::torch::read_torch_dump_bytes(std::string_view(buf.get(), len),
                                                          job.path);
      if (!r.error.empty() && r.logs.empty()) {
        out.skips.push_back({job.path, r.error});
        return out;
      }
      for (const auto& w : r.warnings) {
        // The reader's messages start with the file's name; the entry carries it apart.
        const std::string lead = job.path + ": ";
        out.warnings.push_back({job.path, w.rfind(lead, 0) == 0 ? w.substr(lead.size()) : w});
      }
      for (const auto& log : r.logs) out.procs.push_back(proc_from_log(log, "torch"));
      return out;
    }
  }
#endif
  auto r = fr::log::read_log_fd(fd, file.st, job.path);
  if (!r.ok()) {
    std::string msg = r.message;
    // The reader's message names the file; the skip entry carries the file apart.
    if (msg.rfind(job.path + ": ", 0) == 0) msg = msg.substr(job.path.size() + 2);
    // Lead with the kind of damage, so the one line says what happened before the details.
    const char* kind = r.error == fr::log::ReadError::kTruncated ? "truncated"
                       : r.error == fr::log::ReadError::kCorrupt ? "corrupt"
                       : r.error == fr::log::ReadError::kIo ? "unreadable"
                                                              : nullptr;
    if (kind && msg.find(kind) == std::string::npos) msg = std::string(kind) + ": " + msg;
    if (r.error == fr::log::ReadError::kBadMagic)
      msg = "foreign file: neither a flight log nor a PyTorch Flight Recorder dump";
    out.skips.push_back({job.path, msg});
    return out;
  }
  Proc p = proc_from_log(*r.log, "fr");
  if (p.rank < 0 && job.hint.rank >= 0) p.rank = job.hint.rank;
  if (p.host.empty()) p.host = job.hint.host;
  out.procs.push_back(std::move(p));
  load_stacks(job.dir, job.rel, job.path, &out.procs, &out.warnings);
  return out;
}

}  // namespace

namespace {

// A record as the analysis sees it: one the program issued, or one made from a graph replay.
struct Entry {
  fr_record raw;
  fr_gpu_state gpu_state;
  bool replayed = false;
  ReplayTag tag;
};

// The GPU state of captured op `pos` (on communicator `c`) in the newest replay of graph
// `ordinal`, from the positions the graph writes into the communicator's entry.
fr_gpu_state replay_state(const fr_comm_entry* c, uint32_t ordinal, uint32_t pos) {
  if (c == nullptr) return FR_GPU_ENQUEUED;
  if (FR_GRAPH_POS_ORDINAL(c->graph_completed) == ordinal && FR_GRAPH_POS_OP(c->graph_completed) >= pos)
    return FR_GPU_COMPLETED;
  if (FR_GRAPH_POS_ORDINAL(c->graph_started) == ordinal && FR_GRAPH_POS_OP(c->graph_started) >= pos)
    return FR_GPU_STARTED;
  return FR_GPU_ENQUEUED;
}

// Every record of the log, each graph replay followed by the ops it ran (the graph's captured ops,
// from the capture table). Replayed ops take their sequence numbers from the communicator's
// counters, which advance by the graph's ops at each replay: counted back from the newest
// (the entry's counter), re-anchored at every op the program issued itself.
std::vector<Entry> expand_replays(const fr::log::LogFile& log, uint32_t* n_graphs, uint64_t* n_replays) {
  struct Graph {
    const fr_graph_entry* entry;
    std::vector<const fr_record*> ops;  // by position
    bool positions = false;
  };
  std::unordered_map<uint64_t, Graph> graphs;
  for (const fr_graph_entry& g : log.graphs)
    graphs[g.id] = Graph{&g, {}, (g.flags & FR_GRAPH_F_GPU_POSITION) != 0};
  for (const fr_record& r : log.captures) {
    auto it = graphs.find(r.aux);
    if (it == graphs.end() || r.op_index == 0 || r.op_index > 65536) continue;
    if (!fr::log::op_is_collective(r.op) && !fr::log::op_is_p2p(r.op)) continue;
    auto& ops = it->second.ops;
    if (ops.size() < r.op_index) ops.resize(r.op_index, nullptr);
    ops[r.op_index - 1] = &r;
  }
  *n_graphs = static_cast<uint32_t>(graphs.size());
  // Each launch resets the positions of its communicators: they belong to the newest launch.
  uint64_t newest_launch = UINT64_MAX;
  for (const auto& rec : log.records)
    if (rec.raw.op == FR_OP_GRAPH_LAUNCH && !(rec.raw.flags & FR_REC_F_NEVER_LAUNCHED))
      newest_launch = rec.raw.id;

  std::vector<Entry> out;
  out.reserve(log.records.size());
  const bool markers = (log.header.flags & FR_LOG_F_GPU_MARKERS) != 0;
  for (const auto& rec : log.records) {
    out.push_back(Entry{rec.raw, rec.gpu_state, false, ReplayTag{}});
    if (rec.raw.op != FR_OP_GRAPH_LAUNCH || (rec.raw.flags & FR_REC_F_NEVER_LAUNCHED)) continue;
    auto it = graphs.find(rec.raw.aux);
    if (it == graphs.end()) continue;
    ++*n_replays;
    const Graph& g = it->second;
    for (size_t k = 0; k < g.ops.size(); ++k) {
      const fr_record* t = g.ops[k];
      if (t == nullptr || (t->flags & FR_REC_F_NEVER_LAUNCHED)) continue;
      Entry e{*t, FR_GPU_ENQUEUED, true,
              ReplayTag{rec.raw.seq, g.entry->ordinal, static_cast<uint32_t>(k + 1),
                        static_cast<uint32_t>(g.ops.size())}};
      e.raw.id = rec.raw.id;
      e.raw.seq = 0;
      e.raw.call_ns = rec.raw.call_ns + k;  // in graph order, for "which op waits longest"
      e.raw.duration_ns = 0;
      e.raw.result = 0;
      e.raw.flags = (t->flags & ~(FR_REC_F_CAPTURED | FR_REC_F_IN_CALL | FR_REC_F_GPU_POSITION)) |
                    FR_REC_F_LAUNCHED;
      if (!markers || !g.positions || !(t->flags & FR_REC_F_GPU_POSITION)) {
        e.raw.flags |= FR_REC_F_GPU_UNTRACKED;
      } else if (rec.raw.id != newest_launch) {
        e.gpu_state = FR_GPU_COMPLETED;  // a newer launch followed it on the stream
      } else {
        e.gpu_state = replay_state(log.find_comm(t->comm_id), g.entry->ordinal, e.tag.pos);
      }
      e.raw.gpu_state = static_cast<uint8_t>(e.gpu_state);
      out.push_back(e);
    }
  }
  // Sequence numbers, per communicator and kind, counted back from the newest.
  std::unordered_map<uint64_t, std::pair<uint64_t, uint64_t>> next;  // comm -> (coll, p2p)
  for (const fr_comm_entry& c : log.comms) next[c.id] = {c.coll_seq + 1, c.p2p_seq + 1};
  for (size_t i = out.size(); i-- > 0;) {
    Entry& e = out[i];
    bool coll = fr::log::op_is_collective(e.raw.op), p2p = fr::log::op_is_p2p(e.raw.op);
    if (!coll && !p2p) continue;
    if (!e.replayed && (e.raw.flags & FR_REC_F_CAPTURED)) continue;
    auto [it, fresh] = next.try_emplace(e.raw.comm_id, std::pair<uint64_t, uint64_t>{0, 0});
    uint64_t& cur = coll ? it->second.first : it->second.second;
    if (!e.replayed) {
      if (e.raw.seq != 0) cur = e.raw.seq;
    } else if (cur > 1) {
      e.raw.seq = --cur;
    } else {
      e.raw.seq = 0;  // older than anything the counters can place: shown, never matched
      e.raw.flags |= FR_REC_F_NEVER_LAUNCHED;
    }
    (void)fresh;
  }
  return out;
}

}  // namespace

const ReplayTag* replay_of(const Proc& p, const Op* o) {
  if (o == nullptr || !(o->flags & kOpReplayed) || p.ops.empty()) return nullptr;
  if (o < p.ops.data() || o >= p.ops.data() + p.ops.size()) return nullptr;
  uint32_t idx = static_cast<uint32_t>(o - p.ops.data());
  auto it = std::lower_bound(p.replays.begin(), p.replays.end(), idx,
                             [](const std::pair<uint32_t, ReplayTag>& a, uint32_t i) { return a.first < i; });
  return it != p.replays.end() && it->first == idx ? &it->second : nullptr;
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
  const std::vector<Entry> records = expand_replays(log, &p.graphs, &p.graph_replays);

  std::unordered_map<uint64_t, uint32_t> index;
  p.comms.reserve(log.comms.size());
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
    index.emplace(c.id, static_cast<uint32_t>(p.comms.size()));
    p.comms.push_back(std::move(pc));
  }
  // Records of communicators the table lost (dropped or torn) still count: a stub entry.
  std::vector<uint32_t> per_comm;
  per_comm.reserve(records.size());
  for (const auto& rec : records) {
    auto it = index.find(rec.raw.comm_id);
    if (it == index.end()) {
      ProcComm pc;
      pc.id = rec.raw.comm_id;
      it = index.emplace(rec.raw.comm_id, static_cast<uint32_t>(p.comms.size())).first;
      p.comms.push_back(std::move(pc));
    }
    per_comm.push_back(it->second);
  }
  // Counting sort by communicator keeps record order inside each one.
  std::vector<uint32_t> start(p.comms.size() + 1, 0);
  for (uint32_t c : per_comm) ++start[c + 1];
  for (size_t i = 1; i < start.size(); ++i) start[i] += start[i - 1];
  for (size_t i = 0; i < p.comms.size(); ++i) {
    p.comms[i].ops_begin = start[i];
    p.comms[i].ops_end = start[i + 1];
  }
  p.ops.resize(records.size());
  std::vector<uint32_t> fill(start.begin(), start.end() - 1);
  for (size_t i = 0; i < records.size(); ++i) {
    const fr_record& r = records[i].raw;
    ProcComm& pc = p.comms[per_comm[i]];
    const uint32_t at = fill[per_comm[i]]++;
    Op& o = p.ops[at];
    if (records[i].replayed) p.replays.emplace_back(at, records[i].tag);
    if (r.op == FR_OP_COMM_SHRINK) p.shrinks.push_back({at, {r.sendbuff, r.recvbuff}});
    o.seq = r.seq;
    o.count = r.count;
    o.call_ns = r.call_ns;
    o.duration_ns = r.duration_ns;
    o.group_id = r.group_id;
    o.comm = per_comm[i];
    o.op = r.op;
    o.dtype = r.dtype;
    // Copied as bytes: a damaged file may hold a value outside the enum, which reads as unknown.
    std::underlying_type_t<fr_gpu_state> gs;
    std::memcpy(&gs, &records[i].gpu_state, sizeof gs);
    o.gpu_state = gs <= FR_GPU_COMPLETED ? static_cast<uint8_t>(gs) : static_cast<uint8_t>(FR_GPU_NONE);
    o.redop = r.redop;
    o.peer = r.peer;
    o.result = r.result;
    o.flags = r.flags | (records[i].replayed ? kOpReplayed : 0u);
    if (r.op == FR_OP_PUT_SIGNAL || r.op == FR_OP_SIGNAL || r.op == FR_OP_WAIT_SIGNAL) {
      // Signals carry no reduction or data type worth keeping: their signal index goes in redop,
      // their context in dtype (255 stands for 255 and above), so Op stays 64 bytes.
      const int32_t ctx = FR_SIGNAL_AUX_CTX(r.aux);
      o.redop = FR_SIGNAL_AUX_SIG_IDX(r.aux);
      o.dtype = ctx >= 0 && ctx < 255 ? static_cast<uint8_t>(ctx) : uint8_t{255};
    }
    // The table entry's counters may lag a record written just before the copy.
    if (fr::log::op_is_collective(r.op)) pc.coll_seq = std::max(pc.coll_seq, r.seq);
    if (fr::log::op_is_p2p(r.op)) pc.p2p_seq = std::max(pc.p2p_seq, r.seq);
    if (!pc.has_entry && pc.size < 0) pc.size = -1;
    pc.last_call_ns = std::max(pc.last_call_ns, r.call_ns);
  }
  std::sort(p.replays.begin(), p.replays.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  std::sort(p.shrinks.begin(), p.shrinks.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  // The coordinating member of a grow: the unique id it made on the parent names, for the joining
  // ranks, the communicator its grow derived.
  std::unordered_map<uint64_t, uint64_t> uid_on_parent;  // parent id -> unique id hash
  for (const auto& rec : log.records) {
    const fr_record& r = rec.raw;
    if (r.op == FR_OP_COMM_GET_UNIQUE_ID && r.result == 0 && r.aux != 0) {
      uid_on_parent[r.comm_id] = r.aux;
    } else if (r.op == FR_OP_COMM_GROW && r.comm_id != 0 && r.aux != 0 &&
               (r.result == 0 || r.result == 7 /* ncclInProgress */)) {
      auto it = uid_on_parent.find(r.comm_id);
      if (it == uid_on_parent.end()) continue;
      p.grow_aliases.emplace_back(it->second, r.aux);
      uid_on_parent.erase(it);  // each unique id serves one grow
    }
  }
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
  return p;
}

Model load_model(const std::vector<std::string>& paths, unsigned threads) {
  Model model;
  model.paths = paths;
  std::vector<Job> jobs;
  std::map<std::string, std::pair<int64_t, bool>> offsets;
  bool any_manifest = false;
  for (const auto& path : paths) {
    std::error_code ec;
    fs::path p(path);
    // A manifest that is there in any form (even a link or a FIFO) is read, and refused with
    // its reason, rather than silently ignored.
    if (fs::is_directory(p, ec)) {
      load_gpus(path, &model);
      if (fs::symlink_status(p / "manifest.json", ec).type() != fs::file_type::not_found) {
        any_manifest = true;
        add_manifest_dir(path, &model, &jobs, &offsets);
      } else {
        add_listing(path, &model, &jobs);
      }
    } else if (p.filename() == "manifest.json") {
      any_manifest = true;
      load_gpus(p.parent_path().empty() ? "." : p.parent_path().string(), &model);
      add_manifest_dir(p.parent_path().empty() ? "." : p.parent_path().string(), &model, &jobs,
                       &offsets);
    } else if (fs::symlink_status(p, ec).type() != fs::file_type::not_found) {
      jobs.push_back({path, {}, false, "", ""});  // load_one refuses what is not a regular file
    } else {
      model.skipped.push_back({path, "no such file or directory"});
    }
  }

  // Read in parallel; each worker takes the next file.
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  threads = std::min<unsigned>(threads, std::max<size_t>(1, jobs.size()));
  std::vector<Loaded> loaded(jobs.size());
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i; (i = next.fetch_add(1)) < jobs.size();) loaded[i] = load_one(jobs[i]);
  };
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();
  for (auto& t : pool) t.join();

  std::vector<Proc> procs;
  for (size_t i = 0; i < loaded.size(); ++i) {
    for (auto& s : loaded[i].skips) model.skipped.push_back(std::move(s));
    for (auto& w : loaded[i].warnings) model.warnings.push_back(std::move(w));
    for (auto& p : loaded[i].procs) procs.push_back(std::move(p));
    loaded[i] = Loaded{};
  }

  // Another job's logs in the same place: keep the job most files belong to (or the manifest's).
  std::map<std::string, size_t> jobs_seen;
  for (const auto& p : procs)
    if (!p.job_id.empty()) ++jobs_seen[p.job_id];
  std::string job = model.job_id;
  if (job.empty() || !jobs_seen.count(job)) {
    size_t best = 0;
    for (const auto& [j, n] : jobs_seen)
      if (n > best) best = n, job = j;
  }
  model.job_id = job;

  // One process per global rank: a second file for the same rank is named and left out.
  std::sort(procs.begin(), procs.end(), [](const Proc& a, const Proc& b) {
    if (a.rank != b.rank) return a.rank < b.rank;
    if (a.create_ns != b.create_ns) return a.create_ns > b.create_ns;  // newest first
    return a.file < b.file;
  });
  for (size_t i = 0; i < procs.size(); ++i) {
    Proc& p = procs[i];
    if (!job.empty() && !p.job_id.empty() && p.job_id != job) {
      model.skipped.push_back({p.file, "belongs to job '" + p.job_id + "', not '" + job + "'"});
      continue;
    }
    if (p.rank < 0) {
      model.skipped.push_back({p.file, "the process never learned its rank"});
      continue;
    }
    if (p.rank >= (1 << 20)) {
      model.skipped.push_back({p.file, "corrupt: implausible global rank " + std::to_string(p.rank)});
      continue;
    }
    if (!model.procs.empty() && model.procs.back().rank == p.rank) {
      model.skipped.push_back({p.file, "duplicate rank " + std::to_string(p.rank) +
                                           " (kept the newer " + model.procs.back().file + ")"});
      continue;
    }
    model.procs.push_back(std::move(p));
  }
  model.files_read = model.procs.size();

  // Clock alignment: from the manifests' per-host offsets when every host has one.
  std::set<std::string> hosts;
  for (const auto& p : model.procs) hosts.insert(p.host);
  bool all_offsets = any_manifest && !hosts.empty();
  for (auto& p : model.procs) {
    auto it = offsets.find(p.host);
    if (it != offsets.end() && it->second.second) {
      p.clock_offset_ns = it->second.first;
    } else {
      all_offsets = false;
    }
  }
  model.clock_aligned = hosts.size() <= 1 || all_offsets;

  // Without a manifest's count: the world size most processes report (one damaged header
  // must not make thousands of ranks "missing").
  if (model.expected_ranks < 0) {
    std::map<int, size_t> votes;
    for (const auto& p : model.procs)
      if (p.world_size > 0) ++votes[p.world_size];
    size_t best = 0;
    for (const auto& [ws, n] : votes)
      if (n >= best) best = n, model.expected_ranks = ws;
  }

  // Grow: the joining ranks' view of a grown communicator is the members' one (DESIGN.md
  // "Identity"): one communicator per NCCL communicator, whichever side a rank came from.
  std::unordered_map<uint64_t, uint64_t> grow_alias;
  for (const Proc& p : model.procs)
    for (const auto& [uid, derived] : p.grow_aliases) grow_alias.emplace(uid, derived);
  if (!grow_alias.empty())
    for (Proc& p : model.procs)
      for (ProcComm& pc : p.comms)
        if (auto it = grow_alias.find(pc.id); it != grow_alias.end()) pc.id = it->second;

  // Communicators: one per id, members from every process that has it.
  std::unordered_map<uint64_t, int> comm_index;
  for (int pi = 0; pi < static_cast<int>(model.procs.size()); ++pi) {
    Proc& p = model.procs[pi];
    for (int ci = 0; ci < static_cast<int>(p.comms.size()); ++ci) {
      ProcComm& pc = p.comms[ci];
      auto [it, fresh] = comm_index.emplace(pc.id, static_cast<int>(model.comms.size()));
      if (fresh) {
        Comm c;
        c.id = pc.id;
        model.comms.push_back(std::move(c));
      }
      Comm& c = model.comms[it->second];
      pc.comm = it->second;
      if (pc.has_entry) {
        if (c.name.empty()) c.name = pc.name;
        if (pc.size > c.size) c.size = pc.size;
        if (!c.parent) c.parent = pc.parent;
        if (!c.origin) c.origin = pc.origin;
      }
      c.members.push_back({pc.rank, pi, ci});
    }
  }
  for (auto& c : model.comms) {
    std::stable_sort(c.members.begin(), c.members.end(),
                     [](const CommMember& a, const CommMember& b) { return a.rank_in_comm < b.rank_in_comm; });
  }
  return model;
}

}  // namespace fr::analyzer
