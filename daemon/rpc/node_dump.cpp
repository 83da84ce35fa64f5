// The node daemon's dumps (see node.h): taking one (every local log, the stacks, the GPU health,
// dump.json last) and delivering it, by upload or by placing its files into the shared dump dir.
// Runs on the dump thread; NodeState decides what is next and what a delivery's outcome means.
#include "daemon/rpc/node.h"
#include "common/files.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <optional>
#include <random>
#include <set>

#include <grpcpp/grpcpp.h>

#include "daemon/rpc/convert.h"
#include "daemon/base/proc_file.h"
#include "daemon/host/dump_files.h"
#include "daemon/host/torch_dumps.h"
#include "fr/v1/frd.grpc.pb.h"
#include "log/safe_file.h"
#include "log/slow_history.h"
#include "log/snapshot.h"

namespace fr::daemon {

namespace {

constexpr size_t kMaxDumpJsonBytes = 64u << 20;

}  // namespace

std::string NodeDaemon::spool_of(const Key& k) const { return state_.spool_of(k); }

bool NodeDaemon::take_dump(const Key& k, std::string* error) {
  std::string dir = spool_of(k);
  struct stat st;
  if (stat((dir + "/dump.json").c_str(), &st) == 0) return true;  // taken before
  fr::log::SnapshotOptions so;
  so.log_dir = opts_.log_dir;
  so.out_dir = dir;
  so.file_prefix = opts_.node_name + "-";
  // The dump names the node as its host, so that the manifest's per-node clock offsets apply to
  // exactly this node's files (several simulated nodes may share one machine).
  so.host = opts_.node_name;
  so.write_manifest = false;
  so.owners = opts_.log_owners;
  {
    std::lock_guard<std::mutex> lk(mu_);
    so.job_id = state_.job_filter();
  }
  // torch's recorder is asked first, so every rank's hook dumps while the logs and the stacks are
  // taken (daemon/host/torch_dumps.h).
  const TorchAsked torch = ask_torch_dumps(opts_.log_dir, opts_.log_owners, so.job_id);
  fr::log::SnapshotResult res = fr::log::snapshot_dir(so);
  if (!res.ok()) {
    *error = res.error;
    return false;
  }
  DumpHeader h;
  h.incident_id = k.incident;
  h.node_name = opts_.node_name;
  h.job_id = k.job;
  h.snapshot_time_ns = int64_t(res.time_ns);
  for (const auto& p : res.processes) {
    DumpFile f;
    f.name = p.file;
    if (!file_crc(dir + "/" + p.file, &f.size, &f.crc32c)) {
      *error = "cannot read back " + p.file;
      return false;
    }
    h.files.push_back(f);
  }
  h.processes = res.processes;
  h.skipped = res.skipped;
  // Processes under fr-run without a flight log: their stacks go beside their torch dump's name.
  std::set<int> logged;
  for (const auto& p : res.processes) logged.insert(p.pid);
  std::vector<StackTarget> unrecorded;
  for (const auto& u : torch.registered)
    if (!logged.count(u.pid))
      unrecorded.push_back({u.pid, u.rank, torch_dump_name(opts_.node_name, u), true,
                            proc_file_path(opts_.log_dir, u.pid)});
  // Each hook looks twice a second, and torch's dump takes a moment on a busy host: the stacks
  // budget, but 10 s at least (a hook that cannot answer, its GIL held, costs that once).
  TorchGathered g = gather_torch_dumps(opts_.log_dir, torch, opts_.node_name, dir,
                                       std::max<int64_t>(opts_.stacks.budget_ns, 10'000'000'000));
  for (const auto& n : g.notes) log("no torch dump for " + n);
  if (!torch.asked.empty())
    log("torch's recorder dumped by " + std::to_string(g.files.size()) + " of " +
        std::to_string(torch.asked.size()) + " process(es)");
  for (const auto& n : g.files) {
    DumpFile f;
    f.name = n;
    if (file_crc(dir + "/" + n, &f.size, &f.crc32c)) h.files.push_back(f);
  }
  // The stacks after torch's dumps: the capture holds each process a moment, its hook too.
  for (auto& f : take_context(dir, res.processes, unrecorded)) h.files.push_back(std::move(f));
  return fr::files::write_atomic(dir + "/dump.json", dump_header_json(h).dump() + "\n", error);
}

std::vector<DumpFile> NodeDaemon::take_context(const std::string& dir,
                                               const std::vector<fr::log::SnapshotProcess>& procs,
                                               const std::vector<StackTarget>& unrecorded) {
  std::vector<DumpFile> out;
  std::vector<std::string> names;
  std::vector<StackTarget> targets;
  for (const auto& p : procs) targets.push_back({p.pid, p.rank, p.file, p.alive, p.source});
  targets.insert(targets.end(), unrecorded.begin(), unrecorded.end());
  StacksTaken st = take_stacks(opts_.stacks, targets, dir);
  for (const auto& n : st.notes) log("no stacks for " + n);
  if (!targets.empty()) {
    char took[32];
    std::snprintf(took, sizeof took, "%.2f", double(st.took_ns) / 1e9);
    log("stacks of " + std::to_string(st.taken) + " of " + std::to_string(targets.size()) +
        " process(es) in " + took + " s");
  }
  names = st.files;
  fr::log::NodeGpus g = gpus_.read(true);
  g.node = opts_.node_name;
  std::string err, gname = opts_.node_name + fr::log::kGpuSuffix;
  if (fr::files::write_atomic(dir + "/" + gname, fr::log::gpus_to_text(g), &err))
    names.push_back(gname);
  else
    log(err);
  // What the heartbeats said lately, for fr-analyze's fail-slow judging (none before the first).
  const std::string hist = history_.text(opts_.node_name, real_ns());
  const std::string hname = opts_.node_name + fr::log::kSlowHistorySuffix;
  if (!hist.empty()) {
    if (fr::files::write_atomic(dir + "/" + hname, hist, &err))
      names.push_back(hname);
    else
      log(err);
  }
  for (const auto& n : names) {
    DumpFile f;
    f.name = n;
    if (file_crc(dir + "/" + n, &f.size, &f.crc32c)) out.push_back(f);
  }
  return out;
}

std::vector<std::string> NodeDaemon::check_gpus(std::vector<ProcessReport>* procs) {
  std::vector<std::string> alerts;
  if (!gpus_.ready()) return alerts;
  // Which process runs on which GPU: NVML's process list costs more than the rest of the cheap
  // reading, and changes seldom.
  const int64_t now = mono_ns();
  const bool fresh = std::any_of(procs->begin(), procs->end(), [&](const ProcessReport& p) {
    return !gpu_pids_asked_.count(p.pid);
  });
  const bool pids = gpu_pids_mono_ == 0 || now - gpu_pids_mono_ >= kGpuPidsEveryNs ||
                    (fresh && now - gpu_pids_mono_ >= 1'000'000'000);
  fr::log::NodeGpus g = gpus_.read(false, pids);
  if (pids) {
    gpu_pids_mono_ = now;
    gpu_pids_asked_.clear();
    for (const auto& p : *procs) gpu_pids_asked_.insert(p.pid);
    gpu_pids_.assign(g.gpus.size(), {});
    for (size_t i = 0; i < g.gpus.size(); ++i) {
      gpu_pids_[i] = g.gpus[i].pids;
      for (int p : g.gpus[i].own_pids)
        if (p > 0) gpu_pids_[i].push_back(p);
    }
  }
  for (auto& p : *procs)
    for (size_t i = 0; i < g.gpus.size() && i < gpu_pids_.size(); ++i)
      if (std::find(gpu_pids_[i].begin(), gpu_pids_[i].end(), p.pid) != gpu_pids_[i].end())
        p.gpu_throttle = g.gpus[i].throttle_reasons > 0 ? uint64_t(g.gpus[i].throttle_reasons) : 0;
  size_t n = 0, k = 0;
  for (const auto& d : g.gpus) {
    for (const auto& x : d.xids) {
      std::string line = "GPU " + d.pci_bus_id + " reported Xid " + std::to_string(x.xid);
      if (k++ >= xids_seen_) log(line);
      if (alerts.size() < 64) alerts.push_back(line);
      ++n;
    }
    for (const auto& t : d.throttle_names)
      if ((t == "HwSlowdown" || t == "HwThermalSlowdown" || t == "HwPowerBrakeSlowdown") &&
          alerts.size() < 64)
        alerts.push_back("GPU " + d.pci_bus_id + " is throttled (" + t + ")");
  }
  xids_seen_ = n;
  return alerts;
}

DeliveryOutcome NodeDaemon::deliver(const Key& k, std::string* error) {
  std::string dir = spool_of(k);
  std::string text, read_error;
  nlohmann::json j;
  if (fr::log::read_regular_file(dir + "/dump.json", kMaxDumpJsonBytes, &text, &read_error))
    j = nlohmann::json::parse(text, nullptr, false);
  DumpHeader h;
  if (!read_error.empty() || j.is_discarded() || !dump_header_from_json(j, &h)) {
    *error = "spool entry " + dir + " is damaged";
    return DeliveryOutcome::kRefused;
  }
  h.node_name = opts_.node_name;
  h.job_id = k.job;
  if (!opts_.shared_dump_dir.empty()) {
    DeliveryOutcome r = place(k, h, error);
    if (r != DeliveryOutcome::kUploadInstead) return r;
    log("dump " + k.incident + " not written to the shared dump dir (" + *error +
        "); uploading it");
  }
  return upload(k, h, error);
}

DeliveryOutcome NodeDaemon::place(const Key& k, const DumpHeader& h, std::string* error) {
  // The coordinator made the incident's directory when it opened the incident: not seeing it
  // here means this is not the coordinator's dump dir.
  std::string target = opts_.shared_dump_dir + "/" + k.job + "/" + k.incident;
  struct stat st;
  if (stat(target.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    *error = target + " does not exist";
    return DeliveryOutcome::kUploadInstead;
  }
  // A staging folder of ours already there was left by a node daemon killed while writing.
  const std::string prefix = ".placing-" + opts_.node_name + "-";
  for (const std::string& n : list_dir(target))
    if (n.size() > prefix.size() && n.rfind(prefix, 0) == 0 &&
        n.find_first_not_of("0123456789", prefix.size()) == std::string::npos)
      remove_dir(target + "/" + n);
  std::random_device rd;
  std::string staging = target + "/" + prefix + std::to_string(rd());
  if (::mkdir(staging.c_str(), 0755) != 0) {
    *error = "cannot create " + staging + ": " + std::strerror(errno);
    return DeliveryOutcome::kUploadInstead;
  }
  std::string src = spool_of(k);
  for (const auto& f : h.files)
    if (!copy_checked(src + "/" + f.name, staging + "/" + f.name, f, error)) {
      remove_dir(staging);
      return DeliveryOutcome::kUploadInstead;
    }
  for (const auto& f : h.files)
    if (::rename((staging + "/" + f.name).c_str(), (target + "/" + f.name).c_str()) != 0) {
      *error = "cannot move " + f.name + " into " + target + ": " + std::strerror(errno);
      remove_dir(staging);
      return DeliveryOutcome::kUploadInstead;
    }
  remove_dir(staging);
  return placed_reply(k, h, error);
}

// Tells the coordinator that the files are in place; it checks them before it takes the dump.
DeliveryOutcome NodeDaemon::placed_reply(const Key& k, const DumpHeader& h, std::string* error) {
  const std::string target = opts_.shared_dump_dir + "/" + k.job + "/" + k.incident;
  auto stub = fr::v1::Coordinator::NewStub(make_channel(opts_.client));
  grpc::ClientContext ctx;
  add_auth(&ctx, opts_.client);
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(300));
  fr::v1::UploadHeader req;
  to_proto(h, &req);
  {
    std::lock_guard<std::mutex> lk(mu_);
    req.set_upload_key(state_.upload_key());
  }
  fr::v1::UploadReply reply;
  grpc::Status st_rpc = stub->Placed(&ctx, req, &reply);
  if (st_rpc.ok() && reply.ok()) return DeliveryOutcome::kDelivered;
  *error = st_rpc.ok() ? reply.error() : st_rpc.error_message();
  switch (st_rpc.error_code()) {
    case grpc::StatusCode::NOT_FOUND:
      // Not the coordinator's directory after all: take back what was written here.
      for (const auto& f : h.files) ::unlink((target + "/" + f.name).c_str());
      return DeliveryOutcome::kUploadInstead;
    case grpc::StatusCode::UNIMPLEMENTED:
      return DeliveryOutcome::kUploadInstead;  // a coordinator that only takes uploads
    case grpc::StatusCode::FAILED_PRECONDITION:
    case grpc::StatusCode::INVALID_ARGUMENT: return DeliveryOutcome::kRefused;
    default: return DeliveryOutcome::kRetryLater;
  }
}

DeliveryOutcome NodeDaemon::upload(const Key& k, const DumpHeader& h, std::string* error) {
  std::string dir = spool_of(k);
  auto stub = fr::v1::Coordinator::NewStub(make_channel(opts_.client));
  grpc::ClientContext ctx;
  add_auth(&ctx, opts_.client);
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(300));
  fr::v1::UploadReply reply;
  auto w = stub->Upload(&ctx, &reply);
  fr::v1::UploadChunk c;
  to_proto(h, c.mutable_header());
  {
    std::lock_guard<std::mutex> lk(mu_);
    c.mutable_header()->set_upload_key(state_.upload_key());
  }
  bool sending = w->Write(c);
  // With a rate limit, chunks are small enough (about 1/8 s each) that the pace stays even.
  size_t chunk = opts_.chunk_bytes;
  const uint64_t rate = opts_.upload_bytes_per_sec;
  if (rate > 0) chunk = size_t(std::clamp<uint64_t>(rate / 8, 4096, chunk));
  const int64_t t0 = mono_ns();
  uint64_t sent = 0;
  std::string buf(chunk, '\0');
  for (size_t i = 0; sending && i < h.files.size(); ++i) {
    fr::log::OpenedFile f = fr::log::open_regular(dir + "/" + h.files[i].name);
    if (!f.ok()) {
      // The coordinator refuses the short file by its size and checksum; say why here.
      log("dump " + k.incident + ": " + f.message);
      break;
    }
    uint64_t off = 0;
    while (sending) {
      ssize_t n = ::pread(f.fd.get(), buf.data(), buf.size(), off_t(off));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      fr::v1::UploadChunk d;
      d.mutable_data()->set_file_index(uint32_t(i));
      d.mutable_data()->set_offset(off);
      d.mutable_data()->set_data(buf.data(), size_t(n));
      off += uint64_t(n);
      sending = w->Write(d);
      sent += uint64_t(n);
      if (rate > 0 && sending) {
        int64_t due = t0 + int64_t(double(sent) / double(rate) * 1e9);
        int64_t now = mono_ns();
        if (due > now) sleep_for(due - now);
      }
      if (stopping_) {
        ctx.TryCancel();
        sending = false;
      }
    }
  }
  if (sending) w->WritesDone();
  grpc::Status st = w->Finish();
  if (st.ok() && reply.ok()) return DeliveryOutcome::kDelivered;
  *error = st.ok() ? reply.error() : st.error_message();
  switch (st.error_code()) {
    case grpc::StatusCode::FAILED_PRECONDITION:
    case grpc::StatusCode::INVALID_ARGUMENT: return DeliveryOutcome::kRefused;
    default: return DeliveryOutcome::kRetryLater;
  }
}

void NodeDaemon::dump_loop() {
  for (;;) {
    std::optional<Key> next;
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return stopping_.load() || state_.has_work(); });
      if (stopping_) return;
      next = state_.next_dump();
    }
    if (!next) continue;
    const Key k = *next;
    std::string error;
    if (!take_dump(k, &error)) {
      send_dump_status(k.incident, false, error);
      std::lock_guard<std::mutex> lk(mu_);
      apply(state_.dump_failed(k, error));
      continue;
    }
    send_dump_status(k.incident, true, "");
    DeliveryOutcome outcome = deliver(k, &error);
    NodeActions a;
    {
      std::lock_guard<std::mutex> lk(mu_);
      a = state_.delivery_done(k, outcome, error);
    }
    apply(a);
    if (a.remove_spool) {
      remove_dir(spool_of(k));
      ::rmdir((opts_.spool_dir + "/" + k.job).c_str());  // only once empty
    }
    if (a.wait_ns > 0 && !sleep_for(a.wait_ns)) return;
  }
}

}  // namespace fr::daemon
