// Loading: finds the dump files behind each input path, reads them on parallel threads through
// fr::log::read_log_fd (which copies or maps each file and validates every record), and reduces
// each log to a compact Proc at once (log_to_proc.cpp) so the whole dump set never sits in memory
// twice. Each reading thread hands its buffers from one file to the next, while they are small.
// Files that cannot be used (corrupt, truncated, foreign, newer version, another job, a rank seen
// twice) are named in Model::skipped with one line each; everything else is analysed.
//
// A dump set may have been written by a hostile peer, and may change while it is read. Every
// file is opened once, through fr::log's safe_file (the type checked before the open, which never
// blocks), and read from that descriptor: a FIFO, device or socket is named and skipped, never
// opened, so the analysis never hangs. Links inside a dump set (in a listing or a manifest entry,
// at any depth) are not followed; a path the user names on the command line may be a link.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <filesystem>
#include <map>
#include <set>
#include <type_traits>
#include <unordered_map>

#include "analyzer/model.h"
#include "passes.h"
#include "common/parallel.h"
#include "log/safe_file.h"
#include "log/side_files.h"
#include "log/snapshot.h"
#include "analyzer/torch/torch_detail.h"

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
  // The listing of `dir` showed no stacks file for `rel` (a file directly in it): none is opened.
  bool no_stacks = false;
  // `rel` is a stacks file whose dump is not in the dump set (a process under fr-run that recorded
  // nothing and whose torch recorder did not answer): its stacks alone stand for the process.
  bool stacks_only = false;
};

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
  // Refused before a byte is read or a buffer is taken: a sparse 10 GiB file costs nothing.
  if (size_hint > max_bytes) {
    *error = name + ": larger than " + std::to_string(max_bytes) + " bytes";
    return false;
  }
  size_t cap = size_t(size_hint) + 1;
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

// The CUresults a GPU-progress failure is likely to carry, by name (cuda.h's numbers).
const char* cu_result_name(int32_t r) {
  switch (r) {
    case 1: return "CUDA_ERROR_INVALID_VALUE";
    case 2: return "CUDA_ERROR_OUT_OF_MEMORY";
    case 3: return "CUDA_ERROR_NOT_INITIALIZED";
    case 4: return "CUDA_ERROR_DEINITIALIZED";
    case 100: return "CUDA_ERROR_NO_DEVICE";
    case 101: return "CUDA_ERROR_INVALID_DEVICE";
    case 201: return "CUDA_ERROR_INVALID_CONTEXT";
    case 400: return "CUDA_ERROR_INVALID_HANDLE";
    case 500: return "CUDA_ERROR_NOT_FOUND";
    case 700: return "CUDA_ERROR_ILLEGAL_ADDRESS";
    case 712: return "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED";
    case 719: return "CUDA_ERROR_LAUNCH_FAILED";
    case 800: return "CUDA_ERROR_NOT_PERMITTED";
    case 801: return "CUDA_ERROR_NOT_SUPPORTED";
    case 900: return "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED";
    case 901: return "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED";
    case 906: return "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT";
    default: return nullptr;
  }
}

// Why a rank's GPU progress came from events or is missing, when its writer recorded a driver
// failure (header gpu_error_call, version 6 on): "GPU progress from events on rank 3
// (cuStreamWriteValue64: CUDA_ERROR_INVALID_HANDLE)". Empty when none was recorded.
std::string gpu_progress_note(const fr_log_header& h, int rank) {
  if (h.gpu_error_call == FR_GPU_CALL_NONE) return "";
  const char* call = "an unknown call";
#define FR_X(e, v, s) \
  if (h.gpu_error_call == v) call = s;
  FR_GPU_CALL_LIST(FR_X)
#undef FR_X
  const char* name = cu_result_name(h.gpu_error);
  const std::string why = std::string(call) + ": " +
                          (name ? std::string(name) : "CUresult " + std::to_string(h.gpu_error));
  const std::string who = rank >= 0 ? "rank " + std::to_string(rank) : "this process";
  if (h.flags & FR_LOG_F_NO_GPU_TRACKING) return "no GPU progress on " + who + " (" + why + ")";
  if ((h.flags & FR_LOG_F_GPU_MARKERS) && h.gpu_event_streams > 0)
    return "GPU progress from events for " + std::to_string(h.gpu_event_streams) +
           " stream(s) of " + who + ", markers for the others (" + why + ")";
  return "GPU progress from events on " + who + " (" + why + ")";
}

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
  fr::log::OpenedFile f =
      dir.empty() ? fr::log::open_regular(path) : fr::log::open_beneath(dir, rel);
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

Job job_in(const std::string& dir, const std::string& rel, FileHint hint, bool from_listing) {
  std::string d = without_trailing_slash(dir);
  return {d + "/" + rel, std::move(hint), from_listing, d, rel};
}

// What a directory holds: the files that could be dumps, sorted by name for a stable order, and
// the names of its side files.
struct Listing {
  std::vector<std::string> files;
  std::set<std::string> side_files;
  bool complete = false;  // listed to the end
};

// Files in a directory that could be dumps. Entries that are neither files nor folders (links,
// FIFOs, devices, sockets) are named in `notes`, never opened.
Listing list_dir(const std::string& dir, std::string* error, std::vector<Skip>* notes) {
  Listing listing;
  std::vector<std::string>& out = listing.files;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!name.empty() && fr::log::is_side_file(name)) listing.side_files.insert(name);
    if (name.empty() || name[0] == '.' || is_dump_set_document(name)) continue;
    std::error_code sec;
    fs::file_status st = it->symlink_status(sec);
    if (sec || fs::is_directory(st)) continue;
    if (fs::is_symlink(st)) {
      notes->push_back({it->path().string(), "a symbolic link: not followed out of the dump set"});
      continue;
    }
    if (!fs::is_regular_file(st)) {
      const char* kind = fs::is_fifo(st)             ? "a FIFO (pipe)"
                         : fs::is_character_file(st) ? "a character device"
                         : fs::is_block_file(st)     ? "a block device"
                         : fs::is_socket(st)         ? "a socket"
                                                     : "not a file";
      notes->push_back({it->path().string(), std::string(kind) + ", not a regular file: not read"});
      continue;
    }
    out.push_back(name);
  }
  if (ec) *error = ec.message();
  listing.complete = !ec;
  std::sort(out.begin(), out.end());
  return listing;
}

// A job per stacks file of `dir` whose dump file is not there (Job::stacks_only).
void add_stacks_only(const std::string& dir, const Listing& listing, std::vector<Job>* jobs) {
  const std::string suffix = fr::log::kStacksSuffix;
  std::set<std::string> files(listing.files.begin(), listing.files.end());
  for (const auto& side : listing.side_files) {
    if (side.size() <= suffix.size() ||
        side.compare(side.size() - suffix.size(), suffix.size(), suffix) != 0 ||
        files.count(side.substr(0, side.size() - suffix.size())))
      continue;
    jobs->push_back(job_in(dir, side, {}, true));
    jobs->back().stacks_only = true;
  }
}

// Marks the jobs from `first` on whose stacks file the listing of their directory did not show.
void mark_missing_stacks(const Listing& listing, std::vector<Job>* jobs, size_t first) {
  if (!listing.complete) return;
  for (size_t i = first; i < jobs->size(); ++i) {
    Job& j = (*jobs)[i];
    j.no_stacks = j.rel.find('/') == std::string::npos &&
                  !listing.side_files.count(fr::log::stacks_file_for(j.rel));
  }
}

// Every file of a directory without a usable manifest, from its listing (`err`: why the listing
// stopped short).
void add_listed(const std::string& dir, const Listing& listing, const std::string& err,
                Model* model, std::vector<Job>* jobs) {
  const size_t first = jobs->size();
  for (auto& f : listing.files) jobs->push_back(job_in(dir, f, {}, true));
  if (!err.empty()) model->skipped.push_back({dir, "cannot list: " + err});
  mark_missing_stacks(listing, jobs, first);
  add_stacks_only(dir, listing, jobs);
}

void add_listing(const std::string& dir, Model* model, std::vector<Job>* jobs) {
  std::string err;
  const Listing listing = list_dir(dir, &err, &model->skipped);
  add_listed(dir, listing, err, model, jobs);
}

void add_manifest_dir(const std::string& dir, Model* model, std::vector<Job>* jobs,
                      std::map<std::string, std::pair<int64_t, bool>>* offsets) {
  // The directory is listed on a thread of its own while the manifest is parsed (at 16,384 ranks
  // each takes a tenth of a second).
  std::string lerr;
  std::vector<Skip> notes;
  Listing listing;
  fr::log::Manifest m;
  std::string err;
  bool have_manifest = false;
  fr::parallel::both([&] { listing = list_dir(dir, &lerr, &notes); },
                     [&] { have_manifest = fr::log::read_manifest(dir, &m, &err); });
  if (!have_manifest) {
    // The reader's message may name the manifest; the skip entry carries the file apart.
    const std::string manifest = (fs::path(dir) / "manifest.json").string();
    const size_t named = err.find("manifest.json: ");
    if (err.rfind(dir, 0) == 0 && named != std::string::npos) err = err.substr(named + 15);
    model->skipped.push_back({manifest, err});
    for (auto& n : notes) model->skipped.push_back(std::move(n));
    add_listed(dir, listing, lerr, model, jobs);
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
  const size_t first = jobs->size();
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
  for (auto& f : listing.files) {
    if (listed.count(fs::path(f).lexically_normal().string())) continue;
    jobs->push_back(job_in(dir, f, {}, true));
  }
  mark_missing_stacks(listing, jobs, first);
  add_stacks_only(dir, listing, jobs);
  for (auto& n : notes)
    if (!listed.count(fs::path(n.file).filename().string())) model->skipped.push_back(std::move(n));
}

// One reader thread's output for one input file.
struct Loaded {
  std::vector<Proc> procs;
  std::vector<Skip> skips;
  std::vector<Skip> warnings;  // the file was read; something in it was odd or left out
  bool windowed = false;       // records older than the window were left out
};

// A process known by its stacks alone (Job::stacks_only): its rank and pid, nothing recorded.
Loaded load_stacks_only(const Job& job) {
  Loaded out;
  std::string text, err;
  Proc p;
  if (!read_side_file(job.dir, job.rel, job.path, &text, &err) ||
      !fr::log::parse_stacks(text, &p.stacks, &err)) {
    out.skips.push_back({job.path, "stacks not read: " + err});
    return out;
  }
  p.file = job.path;
  p.source_kind = "stacks";
  p.rank = p.stacks.rank;
  p.pid = p.stacks.pid;
  p.alive = true;
  p.has_stacks = true;
  out.procs.push_back(std::move(p));
  return out;
}

// torch records no dump time (its reader takes the newest entry's): the file's modification time
// stands for it when later than every entry by less than an hour (not copied or touched since).
void facts_from_file(const struct stat& st, Proc* p) {
  p->file_id = {uint64_t(st.st_dev), uint64_t(st.st_ino)};  // its stacks are read again from it
  const uint64_t mtime = uint64_t(st.st_mtim.tv_sec) * 1'000'000'000ull + st.st_mtim.tv_nsec;
  const uint64_t newest = p->heartbeat_ns;
  if (p->snapshot_ns != newest || newest == 0) return;  // the dump carries its own time
  if (mtime > newest && mtime - newest < 3'600'000'000'000ull) p->snapshot_ns = mtime;
}

Loaded load_one(const Job& job, LoadMode mode) {
  if (job.stacks_only) return load_stacks_only(job);
  Loaded out;
  // Opened here, at analysis time, whatever was checked before (a coordinator accepted the file
  // earlier; it may have been swapped for a FIFO since).
  fr::log::OpenedFile file = job.dir.empty()
                                 ? fr::log::open_regular(job.path, fr::log::Links::kFollow)
                                 : fr::log::open_beneath(job.dir, job.rel);
  if (!file.ok()) {
    if (file.error == fr::log::OpenError::kMissing && !job.from_listing && !job.dir.empty())
      out.skips.push_back({job.path, "missing: listed in the manifest but not in the dump set"});
    else
      out.skips.push_back({job.path, file.reason});
    return out;
  }
  const int fd = file.fd.get();
  uint64_t magic = 0;
  bool flight_log =
      ::pread(fd, &magic, sizeof magic, 0) == ssize_t(sizeof magic) && magic == FR_LOG_MAGIC;
  if (!flight_log) {
    if (sniff_torch_file(fd, uint64_t(file.st.st_size))) {
      std::unique_ptr<char[]> buf;
      size_t len = 0;
      std::string err;
      if (!read_whole(fd, uint64_t(file.st.st_size), kMaxTorchBytes, &buf, &len, &err, job.path)) {
        out.skips.push_back({job.path, err.substr(std::min(err.size(), job.path.size() + 2))});
        return out;
      }
      auto r =
          fr::analyzer::torch::read_torch_dump_bytes(std::string_view(buf.get(), len), job.path);
      if (!r.error.empty() && r.logs.empty()) {
        out.skips.push_back({job.path, r.error});
        return out;
      }
      for (const auto& w : r.warnings) {
        // The reader's messages start with the file's name; the entry carries it apart.
        const std::string lead = job.path + ": ";
        out.warnings.push_back({job.path, w.rfind(lead, 0) == 0 ? w.substr(lead.size()) : w});
      }
      for (size_t i = 0; i < r.logs.size(); ++i) {
        const auto& log = r.logs[i];
        out.procs.push_back(proc_from_log(log, "torch"));
        Proc& tp = out.procs.back();
        if (tp.host.empty()) tp.host = job.hint.host;  // torch records no host; the manifest does
        if (tp.rank < 0 && job.hint.rank >= 0) tp.rank = job.hint.rank;
        facts_from_file(file.st, &tp);
        if (i < r.sides.size()) {
          tp.torch_version = std::move(r.sides[i].version), tp.torch_io = std::move(r.sides[i].io);
          tp.torch_groups = std::move(r.sides[i].groups);
        }
        for (const auto& rec : log.records)  // the reader keeps each entry's op_id there
          if (rec.raw.op_index > 0 && fr::log::op_is_collective(rec.raw.op))
            tp.torch_op_ids.push_back({rec.raw.comm_id, rec.raw.seq, rec.raw.op_index});
      }
      // frd takes the stacks of a process it asked torch to dump beside that dump.
      if (!job.no_stacks) load_stacks(job.dir, job.rel, job.path, &out.procs, &out.warnings);
      return out;
    }
  }
  // The log's vectors are handed from one file to the next on each reading thread.
  thread_local fr::log::LogFile spare;
  auto r = fr::log::read_log_fd(fd, file.st, job.path, &spare);
  if (!r.ok()) {
    std::string msg = r.message;
    // The reader's message names the file; the skip entry carries the file apart.
    if (msg.rfind(job.path + ": ", 0) == 0) msg = msg.substr(job.path.size() + 2);
    // Lead with the kind of damage, so the one line says what happened before the details.
    const char* kind = r.error == fr::log::ReadError::kTruncated ? "truncated"
                       : r.error == fr::log::ReadError::kCorrupt ? "corrupt"
                       : r.error == fr::log::ReadError::kIo      ? "unreadable"
                                                                 : nullptr;
    if (kind && msg.find(kind) == std::string::npos) msg = std::string(kind) + ": " + msg;
    if (r.error == fr::log::ReadError::kBadMagic)
      msg = "foreign file: neither a flight log nor a PyTorch Flight Recorder dump";
    out.skips.push_back({job.path, msg});
    return out;
  }
  Proc p = proc_from_log(*r.log, "fr");
  const fr_log_header header = r.log->header;
  // Kept for the next file while small (a default ring is 2,048 records).
  if (r.log->records.capacity() <= (size_t{1} << 15)) spare = std::move(*r.log);
  r.log.reset();
  if (mode == LoadMode::kWindow) out.windowed = window_proc(&p);
  if (p.rank < 0 && job.hint.rank >= 0) p.rank = job.hint.rank;
  if (p.host.empty()) p.host = job.hint.host;
  if (std::string note = gpu_progress_note(header, p.rank); !note.empty())
    out.warnings.push_back({job.path, note});
  if (p.xfers_cut > 0)
    out.warnings.push_back(
        {job.path, std::to_string(p.xfers_cut) + " NIXL transfers left out: more than " +
                       std::to_string(kMaxXfersPerProc) +
                       " in one process (those in flight or failed are kept first)"});
  out.procs.push_back(std::move(p));
  if (!job.no_stacks) load_stacks(job.dir, job.rel, job.path, &out.procs, &out.warnings);
  return out;
}

// Where the dump files behind each input path are: a directory (its manifest, else its
// listing), a manifest, or a file. Per-host clock offsets come from the manifests.
struct FoundInputs {
  std::vector<Job> jobs;
  std::map<std::string, std::pair<int64_t, bool>> offsets;
  bool any_manifest = false;
};

FoundInputs find_inputs(const std::vector<std::string>& paths, Model* model) {
  FoundInputs in;
  for (const auto& path : paths) {
    std::error_code ec;
    fs::path p(path);
    // A manifest that is there in any form (even a link or a FIFO) is read, and refused with
    // its reason, rather than silently ignored.
    if (fs::is_directory(p, ec)) {
      load_node_files(path, model);
      if (fs::symlink_status(p / "manifest.json", ec).type() != fs::file_type::not_found) {
        in.any_manifest = true;
        add_manifest_dir(path, model, &in.jobs, &in.offsets);
      } else {
        add_listing(path, model, &in.jobs);
      }
    } else if (p.filename() == "manifest.json") {
      in.any_manifest = true;
      load_node_files(p.parent_path().empty() ? "." : p.parent_path().string(), model);
      add_manifest_dir(p.parent_path().empty() ? "." : p.parent_path().string(), model, &in.jobs,
                       &in.offsets);
    } else if (fs::symlink_status(p, ec).type() != fs::file_type::not_found) {
      in.jobs.push_back({path, {}, false, "", ""});  // load_one refuses what is not a regular file
    } else {
      model->skipped.push_back({path, "no such file or directory"});
    }
  }
  return in;
}

// Reads every file in parallel (each worker takes the next one); skips and warnings go to the
// model, the processes are returned.
std::vector<Proc> read_all(const std::vector<Job>& jobs, unsigned threads, LoadMode mode,
                           Model* model) {
  std::vector<Loaded> loaded(jobs.size());
  fr::parallel::for_each_index(jobs.size(), threads,
                               [&](size_t i) { loaded[i] = load_one(jobs[i], mode); });

  std::vector<Proc> procs;
  for (size_t i = 0; i < loaded.size(); ++i) {
    for (auto& s : loaded[i].skips) model->skipped.push_back(std::move(s));
    for (auto& w : loaded[i].warnings) model->warnings.push_back(std::move(w));
    for (auto& p : loaded[i].procs) procs.push_back(std::move(p));
    model->windowed = model->windowed || loaded[i].windowed;
    loaded[i] = Loaded{};
  }
  return procs;
}

// The processes kept: another job's logs in the same place are left out (the job most files
// belong to, or the manifest's, is kept), and one process per global rank (the newest).
void keep_one_per_rank(std::vector<Proc> procs, Model* model) {
  std::map<std::string, size_t> jobs_seen;
  for (const auto& p : procs)
    if (!p.job_id.empty()) ++jobs_seen[p.job_id];
  std::string job = model->job_id;
  if (job.empty() || !jobs_seen.count(job)) {
    size_t best = 0;
    for (const auto& [j, n] : jobs_seen)
      if (n > best) best = n, job = j;
  }
  model->job_id = job;

  std::sort(procs.begin(), procs.end(), [](const Proc& a, const Proc& b) {
    if (a.rank != b.rank) return a.rank < b.rank;
    if (a.create_ns != b.create_ns) return a.create_ns > b.create_ns;  // newest first
    return a.file < b.file;
  });
  for (size_t i = 0; i < procs.size(); ++i) {
    Proc& p = procs[i];
    if (!job.empty() && !p.job_id.empty() && p.job_id != job) {
      model->skipped.push_back({p.file, "belongs to job '" + p.job_id + "', not '" + job + "'"});
      ++model->other_jobs[p.job_id];
      continue;
    }
    if (p.rank < 0 && (!p.xfers.empty() || !p.nixl_calls.empty())) {
      model->rankless.push_back(std::move(p));  // a NIXL process without a launcher's rank
      continue;
    }
    if (p.rank < 0) {
      model->skipped.push_back({p.file, "the process never learned its rank"});
      continue;
    }
    if (p.rank >= (1 << 20)) {
      model->skipped.push_back(
          {p.file, "corrupt: implausible global rank " + std::to_string(p.rank)});
      continue;
    }
    if (!model->procs.empty() && model->procs.back().rank == p.rank) {
      if (merge_views(&model->procs.back(), &p, &model->warnings)) continue;
      model->skipped.push_back({p.file, "duplicate rank " + std::to_string(p.rank) +
                                            " (kept the newer " + model->procs.back().file + ")"});
      continue;
    }
    model->procs.push_back(std::move(p));
  }
  std::sort(model->rankless.begin(), model->rankless.end(), [](const Proc& a, const Proc& b) {
    return a.host != b.host ? a.host < b.host : a.pid != b.pid ? a.pid < b.pid : a.file < b.file;
  });
  model->files_read = model->procs.size() + model->rankless.size();
}

// Clock alignment: from the manifests' per-host offsets when every host has one. Without a
// manifest's count, the expected ranks are the world size most processes report (one damaged
// header must not make thousands of ranks "missing").
void align_and_count(const FoundInputs& in, Model* model) {
  std::set<std::string> hosts;
  for (const auto& p : model->procs) hosts.insert(p.host);
  for (const auto& p : model->rankless) hosts.insert(p.host);
  bool all_offsets = in.any_manifest && !hosts.empty();
  auto align = [&](Proc& p) {
    auto it = in.offsets.find(p.host);
    if (it != in.offsets.end() && it->second.second) {
      p.clock_offset_ns = it->second.first;
    } else {
      all_offsets = false;
    }
  };
  for (auto& p : model->procs) align(p);
  for (auto& p : model->rankless) align(p);
  model->clock_aligned = hosts.size() <= 1 || all_offsets;

  if (model->expected_ranks < 0) {
    std::map<int, size_t> votes;
    for (const auto& p : model->procs)
      if (p.world_size > 0) ++votes[p.world_size];
    size_t best = 0;
    for (const auto& [ws, n] : votes)
      if (n >= best) best = n, model->expected_ranks = ws;
  }
}

// Communicators: one per id, members from every process that has it. A grow's joining ranks see
// the grown communicator as its members do (DESIGN.md "Identity"): one communicator per NCCL
// communicator, whichever side a rank came from.
void merge_comms(Model* model) {
  std::unordered_map<uint64_t, uint64_t> grow_alias;
  for (const Proc& p : model->procs)
    for (const auto& [uid, derived] : p.grow_aliases) grow_alias.emplace(uid, derived);
  if (!grow_alias.empty())
    for (Proc& p : model->procs)
      for (ProcComm& pc : p.comms)
        if (auto it = grow_alias.find(pc.id); it != grow_alias.end()) pc.id = it->second;

  std::unordered_map<uint64_t, int> comm_index;
  for (int pi = 0; pi < static_cast<int>(model->procs.size()); ++pi) {
    Proc& p = model->procs[pi];
    for (int ci = 0; ci < static_cast<int>(p.comms.size()); ++ci) {
      ProcComm& pc = p.comms[ci];
      auto [it, fresh] = comm_index.emplace(pc.id, static_cast<int>(model->comms.size()));
      if (fresh) {
        Comm c;
        c.id = pc.id;
        model->comms.push_back(std::move(c));
      }
      Comm& c = model->comms[it->second];
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
  for (auto& c : model->comms) {
    std::stable_sort(
        c.members.begin(), c.members.end(),
        [](const CommMember& a, const CommMember& b) { return a.rank_in_comm < b.rank_in_comm; });
  }
}

}  // namespace

Model load_model(const std::vector<std::string>& paths, unsigned threads, LoadMode mode) {
  Model model;
  model.paths = paths;
  FoundInputs in = find_inputs(paths, &model);
  keep_one_per_rank(read_all(in.jobs, threads, mode, &model), &model);
  align_and_count(in, &model);
  merge_comms(&model);
  infer_torch(&model);
  return model;
}

}  // namespace fr::analyzer
