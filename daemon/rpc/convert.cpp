// See convert.h.
#include "daemon/rpc/convert.h"

#include <algorithm>

#include "common/time_ns.h"
#include "daemon/base/names.h"

namespace fr::daemon {

void to_proto(const NodeReport& in, fr::v1::Heartbeat* out) {
  out->set_seq(in.seq);
  out->set_node_time_ns(in.node_time_ns);
  for (const auto& p : in.processes) {
    auto* q = out->add_processes();
    q->set_log(p.log);
    q->set_rank(p.rank);
    q->set_world_size(p.world_size);
    q->set_pid(p.pid);
    q->set_alive(p.alive);
    q->set_exited_cleanly(p.exited_cleanly);
    q->set_job_id(p.job_id);
    q->set_host(p.host);
    q->set_records(p.records);
    q->set_last_record_age_ns(p.last_record_age_ns);
    q->set_flags(p.flags);
    for (const auto& c : p.comms) {
      auto* d = q->add_comms();
      d->set_comm_id(c.comm_id);
      d->set_size(c.size);
      d->set_rank(c.rank);
      d->set_state(c.state);
      d->set_coll_seq(c.coll_seq);
      d->set_p2p_seq(c.p2p_seq);
      d->set_enqueued(c.enqueued);
      d->set_started(c.started);
      d->set_completed(c.completed);
      d->set_oldest_in_flight_age_ns(c.oldest_age_ns);
      d->set_oldest_in_flight_seq(c.oldest_seq);
      d->set_oldest_in_flight_op(c.oldest_op);
      d->set_name(c.name);
      for (const auto& t : c.recent) {
        auto* r = d->add_recent();
        r->set_seq(t.seq);
        r->set_op(t.op);
        r->set_call_ns(t.call_ns);
        if (t.gpu_ns) r->set_gpu_ns(t.gpu_ns);
        if (t.gpu_start_ns) r->set_gpu_start_ns(t.gpu_start_ns);
        if (t.gpu_end_ns) r->set_gpu_end_ns(t.gpu_end_ns);
      }
    }
    if (p.xfer_pairs_cut) q->set_xfer_pairs_cut(p.xfer_pairs_cut);
    if (p.gpu_throttle) q->set_gpu_throttle(p.gpu_throttle);
    for (const auto& x : p.xfers) {
      auto* d = q->add_xfers();
      d->set_local_agent(x.local_agent);
      d->set_remote_agent(x.remote_agent);
      d->set_in_flight(x.in_flight);
      d->set_oldest_in_flight_age_ns(x.oldest_age_ns);
      d->set_oldest_key(x.oldest_key);
      d->set_oldest_op(x.oldest_op);
      d->set_oldest_bytes(x.oldest_bytes);
      d->set_oldest_status(x.oldest_status);
      d->set_completed(x.completed);
    }
    for (const auto& l : p.links) {
      auto* d = q->add_links();
      d->set_comm_id(l.comm_id);
      d->set_channel(l.channel);
      d->set_peer(l.peer);
      d->set_send(l.send);
      d->set_op_seq(l.op_seq);
      d->set_steps(l.steps);
      d->set_step_ns(l.step_ns);
      d->set_state(l.state);
    }
  }
  for (const auto& u : in.unreadable) out->add_unreadable(u);
  for (const auto& a : in.gpu_alerts) out->add_gpu_alerts(a);
  for (const auto& u : in.unrecorded) {
    auto* q = out->add_unrecorded();
    q->set_pid(u.pid);
    q->set_rank(u.rank);
    q->set_world_size(u.world_size);
    q->set_job_id(u.job_id);
    q->set_file(u.file);
    q->set_torch(u.torch);
    q->set_torch_seq(u.torch_seq);
    q->set_torch_idle_ns(u.torch_idle_ns);
  }
}

NodeHello from_proto(const fr::v1::Hello& in) {
  constexpr size_t kMaxRawName = 1024;  // far past what sanitize_name keeps (kMaxNameLen)
  auto bounded = [](const std::string& s) { return s.substr(0, kMaxRawName); };
  NodeHello h;
  h.protocol = in.protocol();
  h.node_name = bounded(in.node_name());
  h.host = bounded(in.host());
  h.job_id = bounded(in.job_id());
  return h;
}

DumpStatusReport from_proto(const fr::v1::DumpStatus& in) {
  return DumpStatusReport{printable(in.incident_id(), 64), in.ok(), printable(in.error(), 256)};
}

NodeReport from_proto(const fr::v1::Heartbeat& in) {
  NodeReport r;
  from_proto(in, &r);
  return r;
}

bool timing_or_drop(CollTiming* t) {
  t->gpu_ns = time_or_zero(t->gpu_ns);
  t->gpu_start_ns = time_or_zero(t->gpu_start_ns);
  t->gpu_end_ns = time_or_zero(t->gpu_end_ns);
  return time_or_zero(t->call_ns) != 0;
}

namespace {

void from_proto(const fr::v1::CommProgress& d, CommProgress* c) {
  c->comm_id = d.comm_id();
  c->size = d.size();
  c->rank = d.rank();
  c->state = d.state();
  c->coll_seq = d.coll_seq();
  c->p2p_seq = d.p2p_seq();
  c->enqueued = d.enqueued();
  c->started = d.started();
  c->completed = d.completed();
  c->oldest_age_ns = d.oldest_in_flight_age_ns() < 0 ? 0 : d.oldest_in_flight_age_ns();
  c->oldest_seq = d.oldest_in_flight_seq();
  c->oldest_op = d.oldest_in_flight_op();
  printable_into(d.name(), 64, &c->name);
  const size_t n = std::min<size_t>(size_t(d.recent_size()), CommProgress::kMaxRecent);
  c->recent.clear();
  for (size_t i = 0; i < n; ++i) {
    const fr::v1::CollTiming& t = d.recent(int(i));
    CollTiming k{t.seq(), t.op(), t.call_ns(), t.gpu_ns(), t.gpu_start_ns(), t.gpu_end_ns()};
    if (timing_or_drop(&k)) c->recent.push_back(k);
  }
}

void from_proto(const fr::v1::ProcessReport& q, ProcessReport* p) {
  sanitize_name_into(q.log(), 200, &p->log);
  p->rank = q.rank();
  p->world_size = q.world_size();
  p->pid = q.pid();
  p->alive = q.alive();
  p->exited_cleanly = q.exited_cleanly();
  printable_into(q.job_id(), 64, &p->job_id);
  printable_into(q.host(), 64, &p->host);
  p->records = q.records();
  p->last_record_age_ns = q.last_record_age_ns();
  p->flags = q.flags();
  p->comms.resize(std::min<size_t>(size_t(q.comms_size()), kMaxCommsPerProcess));
  for (size_t i = 0; i < p->comms.size(); ++i) from_proto(q.comms(int(i)), &p->comms[i]);
  p->xfer_pairs_cut = q.xfer_pairs_cut();
  p->gpu_throttle = q.gpu_throttle();
  if (size_t(q.xfers_size()) > ProcessReport::kMaxXferPairs)
    p->xfer_pairs_cut += uint32_t(std::min<size_t>(
        size_t(q.xfers_size()) - ProcessReport::kMaxXferPairs, UINT32_MAX - p->xfer_pairs_cut));
  p->xfers.resize(std::min<size_t>(size_t(q.xfers_size()), ProcessReport::kMaxXferPairs));
  for (size_t i = 0; i < p->xfers.size(); ++i) {
    const fr::v1::XferProgress& d = q.xfers(int(i));
    XferProgress& x = p->xfers[i];
    printable_into(d.local_agent(), 64, &x.local_agent);
    printable_into(d.remote_agent(), 64, &x.remote_agent);
    x.in_flight = d.in_flight();
    x.oldest_age_ns = d.oldest_in_flight_age_ns() < 0 ? 0 : d.oldest_in_flight_age_ns();
    x.oldest_key = d.oldest_key();
    x.oldest_op = d.oldest_op();
    x.oldest_bytes = d.oldest_bytes();
    x.oldest_status = d.oldest_status();
    x.completed = d.completed();
  }
  p->links.resize(std::min<size_t>(size_t(q.links_size()), ProcessReport::kMaxLinks));
  for (size_t i = 0; i < p->links.size(); ++i) {
    const fr::v1::LinkTiming& d = q.links(int(i));
    p->links[i] = {d.comm_id(),
                   d.channel(),
                   d.peer(),
                   d.send(),
                   d.op_seq(),
                   d.steps(),
                   d.step_ns() < 0 ? 0 : d.step_ns(),
                   d.state()};
  }
}

// At most `max` strings, each made printable and cut at `max_len`.
void printable_list(const google::protobuf::RepeatedPtrField<std::string>& in, size_t max,
                    size_t max_len, std::vector<std::string>* out) {
  out->resize(std::min<size_t>(size_t(in.size()), max));
  for (size_t i = 0; i < out->size(); ++i) printable_into(in[int(i)], max_len, &(*out)[i]);
}

}  // namespace

void from_proto(const fr::v1::Heartbeat& in, NodeReport* r) {
  r->seq = in.seq();
  r->node_time_ns = in.node_time_ns();
  r->processes.resize(std::min<size_t>(size_t(in.processes_size()), kMaxProcessesPerNode));
  size_t comms_left = kMaxCommsPerHeartbeat;
  for (size_t i = 0; i < r->processes.size(); ++i) {
    ProcessReport& p = r->processes[i];
    from_proto(in.processes(int(i)), &p);
    if (p.comms.size() > comms_left) p.comms.resize(comms_left);
    comms_left -= p.comms.size();
  }
  printable_list(in.unreadable(), 64, 256, &r->unreadable);
  printable_list(in.gpu_alerts(), 64, 256, &r->gpu_alerts);
  r->unrecorded.resize(
      std::min<size_t>(size_t(in.unrecorded_size()), UnrecordedProcess::kMaxPerNode));
  for (size_t i = 0; i < r->unrecorded.size(); ++i) {
    const auto& q = in.unrecorded(int(i));
    UnrecordedProcess& u = r->unrecorded[i];
    u.pid = q.pid();
    u.rank = rank_or_unknown(q.rank());
    u.world_size = rank_or_unknown(q.world_size());
    u.job_id = printable(q.job_id(), 64);
    u.file = printable(q.file(), 64);
    u.torch = q.torch();
    u.torch_seq = q.torch_seq();
    u.torch_idle_ns = std::max<int64_t>(0, q.torch_idle_ns());
  }
}

void to_proto(const DumpHeader& in, fr::v1::UploadHeader* out) {
  out->set_incident_id(in.incident_id);
  out->set_node_name(in.node_name);
  out->set_snapshot_time_ns(in.snapshot_time_ns);
  out->set_job_id(in.job_id);
  out->set_upload_key(in.upload_key);
  for (const auto& f : in.files) {
    auto* g = out->add_files();
    g->set_name(f.name);
    g->set_size(f.size);
    g->set_crc32c(f.crc32c);
  }
  for (const auto& p : in.processes) to_proto(p, out->add_processes());
  for (const auto& s : in.skipped) to_proto(s, out->add_skipped());
}

DumpHeader from_proto(const fr::v1::UploadHeader& in) {
  // Names are checked, not rewritten: a header with an unsafe name is refused as a whole.
  DumpHeader h;
  h.incident_id = in.incident_id().substr(0, 256);
  h.node_name = in.node_name().substr(0, 256);
  h.snapshot_time_ns = in.snapshot_time_ns();
  h.job_id = in.job_id().substr(0, 256);
  h.upload_key = in.upload_key().substr(0, 128);
  for (const auto& g : in.files())
    h.files.push_back({g.name().substr(0, 256), g.size(), g.crc32c()});
  for (const auto& q : in.processes()) {
    if (h.processes.size() >= 4096) break;
    h.processes.push_back(from_proto(q));
  }
  for (const auto& t : in.skipped()) {
    if (h.skipped.size() >= 1024) break;
    h.skipped.push_back(from_proto(t));
  }
  return h;
}

void to_proto(const fr::log::SnapshotProcess& in, fr::v1::SnapshotProcess* out) {
  out->set_rank(in.rank);
  out->set_world_size(in.world_size);
  out->set_pid(in.pid);
  out->set_host(in.host);
  out->set_job_id(in.job_id);
  out->set_file(in.file);
  out->set_source(in.source);
  out->set_alive(in.alive);
  out->set_records(in.records);
  out->set_overwritten(in.overwritten);
  out->set_torn(in.torn);
}

fr::log::SnapshotProcess from_proto(const fr::v1::SnapshotProcess& in) {
  fr::log::SnapshotProcess p;
  p.rank = in.rank();
  p.world_size = in.world_size();
  p.pid = in.pid();
  p.host = printable(in.host(), 64);
  p.job_id = printable(in.job_id(), 64);
  p.file = in.file().substr(0, 256);  // checked, not rewritten: an unsafe name refuses the dump
  p.source = printable(in.source(), 256);
  p.alive = in.alive();
  p.records = in.records();
  p.overwritten = in.overwritten();
  p.torn = in.torn();
  return p;
}

void to_proto(const fr::log::SnapshotSkip& in, fr::v1::SnapshotSkip* out) {
  out->set_file(in.file);
  out->set_error(in.error);
}

fr::log::SnapshotSkip from_proto(const fr::v1::SnapshotSkip& in) {
  return {printable(in.file(), 256), printable(in.error(), 256)};
}

}  // namespace fr::daemon
