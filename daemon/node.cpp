// See node.h. Threads: run() owns the control stream and sends heartbeats; a reader thread per
// connection takes commands; one dump thread snapshots and uploads, retrying until delivered.
#include "daemon/node.h"
#include "files/files.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <random>

#include <grpcpp/grpcpp.h>

#include "daemon/assembly.h"
#include "daemon/convert.h"
#include "daemon/crc32c.h"
#include "daemon/names.h"
#include "daemon/watcher.h"
#include "fr/v1/frd.grpc.pb.h"
#include "log/safe_file.h"
#include "log/snapshot.h"

namespace fr::daemon {

namespace {

constexpr size_t kMaxDumpJsonBytes = 64u << 20;

std::string this_host() {
  char b[256] = {0};
  if (gethostname(b, sizeof b - 1) != 0) return "localhost";
  return b;
}

void remove_dir(const std::string& dir) {
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      std::string n = e->d_name;
      if (n != "." && n != "..") ::unlink((dir + "/" + n).c_str());
    }
    closedir(d);
  }
  ::rmdir(dir.c_str());
}

std::vector<std::string> list_dir(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      std::string n = e->d_name;
      if (n != "." && n != "..") out.push_back(n);
    }
    closedir(d);
  }
  return out;
}

// Spool files are the node's own, but the spool may sit in a shared /tmp: every read of a dump
// goes through open_regular (no link, FIFO or device is ever opened).
bool file_crc(const std::string& path, uint64_t* size, uint32_t* crc) {
  fr::log::OpenedFile f = fr::log::open_regular(path);
  return f.ok() && crc32c_fd(f.fd.get(), size, crc);
}

// Copies `from` to `to` (created, never overwritten), checking the copy's size and checksum.
bool copy_checked(const std::string& from, const std::string& to, const DumpFile& f,
                  std::string* error) {
  fr::log::OpenedFile src = fr::log::open_regular(from);
  if (!src.ok()) {
    *error = "cannot read " + src.message;
    return false;
  }
  const int in = src.fd.get();
  int out = ::open(to.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (out < 0) {
    *error = "cannot create " + to + ": " + std::strerror(errno);
    return false;
  }
  std::string buf(1 << 20, '\0');
  uint64_t size = 0;
  uint32_t crc = 0;
  bool ok = true;
  for (;;) {
    ssize_t n = ::read(in, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) ok = false;
    if (n <= 0) break;
    crc = crc32c(crc, buf.data(), size_t(n));
    size += uint64_t(n);
    for (ssize_t done = 0; ok && done < n;) {
      ssize_t w = ::write(out, buf.data() + done, size_t(n - done));
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) ok = false;
      else done += w;
    }
    if (!ok) break;
  }
  if (ok && ::fsync(out) != 0) ok = false;
  if (!ok) *error = "cannot write " + to + ": " + std::strerror(errno);
  ::close(out);
  if (ok && (size != f.size || crc != f.crc32c)) {
    *error = from + " changed in the spool";
    ok = false;
  }
  return ok;
}

nlohmann::json header_json(const DumpHeader& h) {
  nlohmann::json files = nlohmann::json::array(), procs = nlohmann::json::array(),
                 skipped = nlohmann::json::array();
  for (const auto& f : h.files) files.push_back({{"name", f.name}, {"size", f.size}, {"crc32c", f.crc32c}});
  for (const auto& p : h.processes)
    procs.push_back({{"rank", p.rank}, {"world_size", p.world_size}, {"pid", p.pid},
                     {"host", p.host}, {"job_id", p.job_id}, {"file", p.file},
                     {"source", p.source}, {"alive", p.alive}, {"records", p.records},
                     {"overwritten", p.overwritten}, {"torn", p.torn}});
  for (const auto& s : h.skipped) skipped.push_back({{"file", s.file}, {"error", s.error}});
  return {{"incident_id", h.incident_id}, {"node_name", h.node_name}, {"job_id", h.job_id},
          {"snapshot_time_ns", h.snapshot_time_ns}, {"files", files},
          {"processes", procs}, {"skipped", skipped}};
}

bool header_from_json(const nlohmann::json& j, DumpHeader* h) {
  try {
    h->incident_id = j.at("incident_id").get<std::string>();
    h->node_name = j.at("node_name").get<std::string>();
    h->snapshot_time_ns = j.at("snapshot_time_ns").get<int64_t>();
    h->job_id = j.value("job_id", std::string());
    for (const auto& f : j.at("files"))
      h->files.push_back({f.at("name").get<std::string>(), f.at("size").get<uint64_t>(),
                          f.at("crc32c").get<uint32_t>()});
    for (const auto& p : j.at("processes"))
      h->processes.push_back({p.at("rank").get<int>(), p.at("world_size").get<int>(),
                              p.at("pid").get<int>(), p.at("host").get<std::string>(),
                              p.at("job_id").get<std::string>(), p.at("file").get<std::string>(),
                              p.at("source").get<std::string>(), p.at("alive").get<bool>(),
                              p.at("records").get<uint64_t>(), p.at("overwritten").get<uint64_t>(),
                              p.at("torn").get<uint64_t>()});
    for (const auto& s : j.at("skipped"))
      h->skipped.push_back({s.at("file").get<std::string>(), s.at("error").get<std::string>()});
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

}  // namespace

struct NodeDaemon::Stream {
  grpc::ClientContext ctx;
  std::unique_ptr<grpc::ClientReaderWriter<fr::v1::NodeMessage, fr::v1::CoordinatorMessage>> rw;
  std::mutex wmu;
  bool write(const fr::v1::NodeMessage& m) {
    std::lock_guard<std::mutex> lk(wmu);
    return rw->Write(m);
  }
};

NodeDaemon::NodeDaemon(NodeOptions opts) : opts_(std::move(opts)) {
  host_ = this_host();
  if (opts_.node_name.empty()) opts_.node_name = host_;
  opts_.node_name = sanitize_name(opts_.node_name);
  if (opts_.spool_dir.empty()) opts_.spool_dir = "/tmp/frd-node-" + opts_.node_name;
}

NodeDaemon::~NodeDaemon() {
  stop();
  if (dumper_.joinable()) dumper_.join();
}

void NodeDaemon::log(const std::string& line, LogLevel level) {
  if (!opts_.quiet) log_line(level, "frd node " + opts_.node_name + ": " + line);
}

void NodeDaemon::check_log_dir() {
  struct stat st;
  std::string why;
  if (::stat(opts_.log_dir.c_str(), &st) != 0) why = std::strerror(errno);
  else if (!S_ISDIR(st.st_mode)) why = "not a directory";
  else if (::access(opts_.log_dir.c_str(), R_OK | X_OK) != 0) why = std::strerror(errno);
  std::lock_guard<std::mutex> lk(mu_);
  if (why.empty()) {
    if (log_dir_missing_.clear()) log("the log directory " + opts_.log_dir + " is readable again");
    return;
  }
  uint64_t again = 0;
  if (log_dir_missing_.due(mono_ns(), &again))
    log("cannot read the log directory " + opts_.log_dir + ": " + why + "; no rank on this node is watched" +
            (again ? " (still so after " + std::to_string(again) + " more checks)" : ""),
        LogLevel::kWarn);
}

std::string NodeDaemon::metrics() const {
  std::string o;
  auto metric = [&](const char* name, const char* type, const char* help, uint64_t v) {
    o += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n" + name + " " +
         std::to_string(v) + "\n";
  };
  metric("frd_node_connected", "gauge", "1 while the stream to the coordinator is up.", connected_ ? 1 : 0);
  metric("frd_node_connects_total", "counter", "Connections the coordinator welcomed.", connects_);
  metric("frd_node_connect_failures_total", "counter", "Attempts to reach the coordinator that failed.",
         connect_failures_);
  metric("frd_node_heartbeats_total", "counter", "Heartbeats sent.", heartbeats_);
  metric("frd_node_processes", "gauge", "Processes with a flight log in the last scan.", processes_);
  metric("frd_node_processes_alive", "gauge", "Of those, alive.", processes_alive_);
  metric("frd_node_dumps_delivered_total", "counter", "Dumps the coordinator accepted.", dumps_delivered_);
  metric("frd_node_dumps_failed_total", "counter", "Dumps that could not be taken or were refused.", dumps_failed_);
  {
    std::lock_guard<std::mutex> lk(mu_);
    metric("frd_node_dumps_pending", "gauge", "Dumps taken or queued, not yet delivered.", pending_.size());
    metric("frd_node_log_dir_readable", "gauge", "0 while the log directory cannot be read.",
           log_dir_missing_.active() ? 0 : 1);
  }
  return o;
}

bool NodeDaemon::init(std::string* error) {
  if (!fr::files::make_dirs(opts_.spool_dir, error)) return false;
  // Dumps a previous run took and did not deliver: <spool>/<job>/<incident>/dump.json.
  for (const std::string& job : list_dir(opts_.spool_dir)) {
    if (!is_safe_name(job, kMaxNameLen)) continue;
    for (const std::string& incident : list_dir(opts_.spool_dir + "/" + job)) {
      Key k{job, incident};
      struct stat st;
      if (is_safe_name(incident, kMaxNameLen) &&
          stat((spool_of(k) + "/dump.json").c_str(), &st) == 0) {
        pending_.insert(k);
        queue_.push_back(k);
      }
    }
  }
  if (!pending_.empty()) log(std::to_string(pending_.size()) + " undelivered dump(s) in the spool");
  log("reading the logs in " + opts_.log_dir + " owned by " + opts_.log_owners.describe());
  // GPU health is optional: without NVML every dump says why, and nothing else changes.
  std::string why;
  if (gpus_.open(opts_.nvml_lib, &why)) log("GPU health from NVML (" + opts_.nvml_lib + ")");
  else log(why + "; dumps carry no GPU health");
  return true;
}

void NodeDaemon::stop() {
  stopping_ = true;
  std::lock_guard<std::mutex> lk(mu_);
  if (stream_) stream_->ctx.TryCancel();
  cv_.notify_all();
}

bool NodeDaemon::sleep_for(int64_t ns) {
  std::unique_lock<std::mutex> lk(mu_);
  cv_.wait_for(lk, std::chrono::nanoseconds(ns), [&] { return stopping_.load(); });
  return !stopping_;
}

void NodeDaemon::run() {
  dumper_ = std::thread([this] { dump_loop(); });
  int64_t backoff = 100'000'000;
  while (!stopping_) {
    bool welcomed = false;
    check_log_dir();
    connect_once(&welcomed);
    if (stopping_) break;
    backoff = welcomed ? 100'000'000 : std::min<int64_t>(backoff * 2, 5'000'000'000);
    sleep_for(backoff);
  }
  {
    std::lock_guard<std::mutex> lk(mu_);
    cv_.notify_all();
  }
  dumper_.join();
}

void NodeDaemon::connect_once(bool* welcomed) {
  auto stub = fr::v1::Coordinator::NewStub(make_channel(opts_.client));
  Stream s;
  add_auth(&s.ctx, opts_.client);
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (stopping_) return;
    s.rw = stub->Connect(&s.ctx);
    stream_ = &s;
  }
  fr::v1::NodeMessage hello;
  hello.mutable_hello()->set_protocol(1);
  hello.mutable_hello()->set_node_name(opts_.node_name);
  hello.mutable_hello()->set_host(host_);
  hello.mutable_hello()->set_node_time_ns(real_ns());
  {
    std::lock_guard<std::mutex> lk(mu_);
    hello.mutable_hello()->set_job_id(job_filter_);
    for (const auto& p : pending_) hello.mutable_hello()->add_pending()->set_incident_id(p.incident);
  }
  std::atomic<bool> reader_done{false};
  std::mutex ping_mu;
  int64_t ping_t1 = 0, ping_t2 = 0;
  std::thread reader;
  if (s.write(hello)) {
    reader = std::thread([&] {
      fr::v1::CoordinatorMessage m;
      while (s.rw->Read(&m)) {
        if (m.has_welcome()) {
          std::lock_guard<std::mutex> lk(mu_);
          if (!*welcomed) {
            log("connected to " + opts_.client.address);
            if (unreachable_.clear()) log("the coordinator at " + opts_.client.address + " is reachable again");
            connects_++;
            connected_ = true;
          }
          *welcomed = true;
          job_filter_ = sanitize_name(m.welcome().job_id());
          if (m.welcome().job_id().empty()) job_filter_.clear();
          coordinator_stall_ns_ = int64_t(m.welcome().stall_after_ms()) * 1'000'000;
          upload_key_ = m.welcome().upload_key();
          // Deliver what is still here (the coordinator may be a new one). Another job's dumps
          // stay in the spool: this coordinator would refuse them.
          for (const auto& p : pending_) {
            if (!job_filter_.empty() && p.job != job_filter_) {
              if (warned_foreign_.insert(p).second)
                log("keeping dump " + p.job + "/" + p.incident + " of another job in the spool");
              continue;
            }
            if (std::find(queue_.begin(), queue_.end(), p) == queue_.end()) queue_.push_back(p);
          }
          cv_.notify_all();
        } else if (m.has_ping()) {
          std::lock_guard<std::mutex> lk(ping_mu);
          ping_t1 = m.ping().t1_ns();
          ping_t2 = real_ns();
        } else if (m.has_dump_request()) {
          std::string id = m.dump_request().incident_id();
          if (!is_safe_name(id, kMaxNameLen)) continue;
          std::lock_guard<std::mutex> lk(mu_);
          Key k{sanitize_name(m.dump_request().job_id()), id};
          if (m.dump_request().job_id().empty()) k.job = job_filter_.empty() ? "job" : job_filter_;
          if (pending_.count(k) || delivered_.count(k)) continue;
          log("dump requested for " + id + ": " + printable(m.dump_request().reason(), 200));
          pending_.insert(k);
          queue_.push_back(k);
          cv_.notify_all();
        }
      }
      reader_done = true;
      std::lock_guard<std::mutex> lk(mu_);
      cv_.notify_all();
    });
    LogWatcher watcher(opts_.log_dir, opts_.stall_after_ns);
    watcher.set_owners(opts_.log_owners);
    const int64_t scan_every = std::min<int64_t>(opts_.heartbeat_interval_ns, 200'000'000);
    int64_t last_sent = 0, last_dir_check = 0;
    uint64_t seq = 0;
    while (!stopping_ && !reader_done) {
      {
        // Report a crossing of whichever threshold is lower, ours or the coordinator's.
        std::lock_guard<std::mutex> lk(mu_);
        watcher.set_job_filter(job_filter_);
        int64_t stall = opts_.stall_after_ns;
        if (coordinator_stall_ns_ > 0 && coordinator_stall_ns_ < stall) stall = coordinator_stall_ns_;
        watcher.set_stall_after(stall);
      }
      ScanResult scan = watcher.scan();
      int64_t now = mono_ns();
      {
        uint64_t alive = 0;
        for (const auto& p : scan.processes) alive += p.alive;
        processes_ = scan.processes.size();
        processes_alive_ = alive;
      }
      if (now - last_dir_check >= 1'000'000'000) {
        check_log_dir();
        last_dir_check = now;
      }
      if (scan.urgent || now - last_sent >= opts_.heartbeat_interval_ns) {
        NodeReport r;
        r.seq = ++seq;
        r.node_time_ns = real_ns();
        r.processes = std::move(scan.processes);
        r.unreadable = std::move(scan.unreadable);
        r.gpu_alerts = check_gpus();
        fr::v1::NodeMessage hb;
        to_proto(r, hb.mutable_heartbeat());
        {
          std::lock_guard<std::mutex> lk(ping_mu);
          if (ping_t1) {
            auto* e = hb.mutable_heartbeat()->mutable_echo();
            e->set_t1_ns(ping_t1);
            e->set_t2_ns(ping_t2);
            e->set_t3_ns(real_ns());
            ping_t1 = 0;
          }
        }
        if (!s.write(hb)) break;
        heartbeats_++;
        last_sent = now;
      }
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait_for(lk, std::chrono::nanoseconds(scan_every),
                   [&] { return stopping_.load() || reader_done.load(); });
    }
  }
  s.ctx.TryCancel();
  if (reader.joinable()) reader.join();
  grpc::Status st = s.rw->Finish();
  {
    std::lock_guard<std::mutex> lk(mu_);
    stream_ = nullptr;
  }
  connected_ = false;
  if (stopping_) return;
  if (*welcomed) {
    log("disconnected from " + opts_.client.address + ": " + (st.ok() ? std::string("closed") : st.error_message()),
        LogLevel::kWarn);
    return;
  }
  // Never welcomed: out of reach, or refused. Said at once, then every 30 s while it lasts.
  connect_failures_++;
  uint64_t again = 0;
  std::unique_lock<std::mutex> lk(mu_);
  if (unreachable_.due(mono_ns(), &again)) {
    lk.unlock();
    log("cannot reach the coordinator at " + opts_.client.address + ": " +
            (st.ok() ? std::string("closed before its welcome") : st.error_message()) + "; retrying" +
            (again ? " (" + std::to_string(again) + " more failed attempts since the last report)" : ""),
        LogLevel::kWarn);
  }
}

void NodeDaemon::send_dump_status(const std::string& incident, bool ok, const std::string& error) {
  fr::v1::NodeMessage m;
  m.mutable_dump_status()->set_incident_id(incident);
  m.mutable_dump_status()->set_ok(ok);
  m.mutable_dump_status()->set_error(error);
  std::lock_guard<std::mutex> lk(mu_);
  if (stream_) stream_->write(m);
}

std::string NodeDaemon::spool_of(const Key& k) const {
  return opts_.spool_dir + "/" + k.job + "/" + k.incident;
}

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
    so.job_id = job_filter_;
  }
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
    h.processes.push_back({p.rank, p.world_size, p.pid, p.host, p.job_id, p.file, p.source,
                           p.alive, p.records, p.overwritten, p.torn});
  }
  for (const auto& s : res.skipped) h.skipped.push_back({s.file, s.error});
  for (auto& f : take_context(dir, res.processes)) h.files.push_back(std::move(f));
  return fr::files::write_atomic(dir + "/dump.json", header_json(h).dump() + "\n", error);
}

std::vector<DumpFile> NodeDaemon::take_context(const std::string& dir,
                                               const std::vector<fr::log::SnapshotProcess>& procs) {
  std::vector<DumpFile> out;
  std::vector<std::string> names;
  std::vector<StackTarget> targets;
  for (const auto& p : procs) targets.push_back({p.pid, p.rank, p.file, p.alive, p.source});
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
  if (fr::files::write_atomic(dir + "/" + gname, fr::log::gpus_to_text(g), &err)) names.push_back(gname);
  else log(err);
  for (const auto& n : names) {
    DumpFile f;
    f.name = n;
    if (file_crc(dir + "/" + n, &f.size, &f.crc32c)) out.push_back(f);
  }
  return out;
}

std::vector<std::string> NodeDaemon::check_gpus() {
  std::vector<std::string> alerts;
  if (!gpus_.ready()) return alerts;
  fr::log::NodeGpus g = gpus_.read(false);
  size_t n = 0, k = 0;
  for (const auto& d : g.gpus) {
    for (const auto& x : d.xids) {
      std::string line = "GPU " + d.pci_bus_id + " reported Xid " + std::to_string(x.xid);
      if (k++ >= xids_seen_) log(line);
      if (alerts.size() < 64) alerts.push_back(line);
      ++n;
    }
    for (const auto& t : d.throttle_names)
      if ((t == "HwSlowdown" || t == "HwThermalSlowdown" || t == "HwPowerBrakeSlowdown") && alerts.size() < 64)
        alerts.push_back("GPU " + d.pci_bus_id + " is throttled (" + t + ")");
  }
  xids_seen_ = n;
  return alerts;
}

int NodeDaemon::deliver(const Key& k, std::string* error) {
  std::string dir = spool_of(k);
  std::string text, read_error;
  nlohmann::json j;
  if (fr::log::read_regular_file(dir + "/dump.json", kMaxDumpJsonBytes, &text, &read_error))
    j = nlohmann::json::parse(text, nullptr, false);
  DumpHeader h;
  if (!read_error.empty() || j.is_discarded() || !header_from_json(j, &h)) {
    *error = "spool entry " + dir + " is damaged";
    return -1;
  }
  h.node_name = opts_.node_name;
  h.job_id = k.job;
  if (!opts_.shared_dump_dir.empty()) {
    int r = place(k, h, error);
    if (r != 2) return r;
    log("dump " + k.incident + " not written to the shared dump dir (" + *error + "); uploading it");
  }
  return upload(k, h, error);
}

int NodeDaemon::place(const Key& k, const DumpHeader& h, std::string* error) {
  // The coordinator made the incident's directory when it opened the incident: not seeing it
  // here means this is not the coordinator's dump dir.
  std::string target = opts_.shared_dump_dir + "/" + k.job + "/" + k.incident;
  struct stat st;
  if (stat(target.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    *error = target + " does not exist";
    return 2;
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
    return 2;
  }
  std::string src = spool_of(k);
  for (const auto& f : h.files)
    if (!copy_checked(src + "/" + f.name, staging + "/" + f.name, f, error)) {
      remove_dir(staging);
      return 2;
    }
  for (const auto& f : h.files)
    if (::rename((staging + "/" + f.name).c_str(), (target + "/" + f.name).c_str()) != 0) {
      *error = "cannot move " + f.name + " into " + target + ": " + std::strerror(errno);
      remove_dir(staging);
      return 2;
    }
  remove_dir(staging);

  auto stub = fr::v1::Coordinator::NewStub(make_channel(opts_.client));
  grpc::ClientContext ctx;
  add_auth(&ctx, opts_.client);
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(300));
  fr::v1::UploadHeader req;
  to_proto(h, &req);
  {
    std::lock_guard<std::mutex> lk(mu_);
    req.set_upload_key(upload_key_);
  }
  fr::v1::UploadReply reply;
  grpc::Status st_rpc = stub->Placed(&ctx, req, &reply);
  if (st_rpc.ok() && reply.ok()) return 1;
  *error = st_rpc.ok() ? reply.error() : st_rpc.error_message();
  switch (st_rpc.error_code()) {
    case grpc::StatusCode::NOT_FOUND:
      // Not the coordinator's directory after all: take back what was written here.
      for (const auto& f : h.files) ::unlink((target + "/" + f.name).c_str());
      return 2;
    case grpc::StatusCode::UNIMPLEMENTED:
      return 2;  // a coordinator that only takes uploads
    case grpc::StatusCode::FAILED_PRECONDITION:
    case grpc::StatusCode::INVALID_ARGUMENT:
      return -1;
    default:
      return 0;
  }
}

int NodeDaemon::upload(const Key& k, const DumpHeader& h, std::string* error) {
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
    c.mutable_header()->set_upload_key(upload_key_);
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
  if (st.ok() && reply.ok()) return 1;
  *error = st.ok() ? reply.error() : st.error_message();
  switch (st.error_code()) {
    case grpc::StatusCode::FAILED_PRECONDITION:
    case grpc::StatusCode::INVALID_ARGUMENT:
      return -1;
    default:
      return 0;
  }
}

void NodeDaemon::dump_loop() {
  int64_t backoff = 200'000'000;
  for (;;) {
    Key k;
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return stopping_.load() || !queue_.empty(); });
      if (stopping_) return;
      k = queue_.front();
      queue_.pop_front();
      if (!pending_.count(k)) continue;
    }
    std::string error;
    if (!take_dump(k, &error)) {
      log("dump " + k.incident + " failed: " + error, LogLevel::kError);
      dumps_failed_++;
      send_dump_status(k.incident, false, error);
      std::lock_guard<std::mutex> lk(mu_);
      pending_.erase(k);
      continue;
    }
    send_dump_status(k.incident, true, "");
    int r = deliver(k, &error);
    if (r == 1) {
      log("dump " + k.incident + " delivered");
      dumps_delivered_++;
      remove_dir(spool_of(k));
      ::rmdir((opts_.spool_dir + "/" + k.job).c_str());  // only once empty
      std::lock_guard<std::mutex> lk(mu_);
      pending_.erase(k);
      delivered_.insert(k);
      backoff = 200'000'000;
    } else if (r < 0) {
      log("dump " + k.incident + " refused: " + error + " (kept in " + spool_of(k) + ")", LogLevel::kError);
      dumps_failed_++;
      std::lock_guard<std::mutex> lk(mu_);
      pending_.erase(k);
    } else {
      log("dump " + k.incident + " not delivered yet: " + error, LogLevel::kWarn);
      {
        std::lock_guard<std::mutex> lk(mu_);
        queue_.push_back(k);
      }
      if (!sleep_for(backoff)) return;
      backoff = std::min<int64_t>(backoff * 2, 5'000'000'000);
    }
  }
}

}  // namespace fr::daemon
