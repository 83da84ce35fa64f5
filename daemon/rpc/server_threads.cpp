// The coordinator server's threads that drive the streams (server_impl.h): dispatch hands what
// the state asked for to them; the fan-out threads send dump requests to slices of the node
// streams; the applier applies heartbeats to the state, off gRPC's threads. (The ticker, which
// also cancels idle uploads, is beside the upload reactor in server_streams.cpp.)
#include "daemon/rpc/server_node_stream.h"

#include <algorithm>
#include <cstdio>
#include <ctime>

#include "daemon/rpc/convert.h"

namespace fr::daemon {

namespace {

// CPU time of the calling thread, for what a fan-out costs apart from how long it waited.
int64_t thread_cpu_ns() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

}  // namespace

void CoordinatorServer::Impl::dispatch(Actions& a) {
  // One message per incident, shared by every stream it goes to; slices of streams to the
  // fan-out threads.
  constexpr size_t kSlice = 256;
  std::deque<FanoutSlice> slices;
  for (auto& d : a.dumps) {
    auto it = streams.find(d.session);
    if (it == streams.end()) continue;
    if (slices.empty() || slices.back().streams.size() >= kSlice ||
        slices.back().incident_id != d.incident_id) {
      // A slice of the same incident shares the bytes of the previous one.
      if (!slices.empty() && slices.back().incident_id == d.incident_id) {
        slices.push_back({d.incident_id, slices.back().message, {}});
      } else {
        CoordinatorMessage m;
        m.mutable_dump_request()->set_incident_id(d.incident_id);
        m.mutable_dump_request()->set_reason(d.reason);
        m.mutable_dump_request()->set_deadline_ms(d.deadline_ms);
        m.mutable_dump_request()->set_job_id(d.job_id);
        slices.push_back({d.incident_id, to_wire(m), {}});
      }
    }
    it->second->pin();
    slices.back().streams.push_back(it->second);
  }
  if (!slices.empty()) {
    int64_t now = mono_ns();
    std::lock_guard<RankedMutex> ql(queue_mu);
    hb_fanout = true;
    fanout_pending += slices.size();
    for (auto& sl : slices) {
      FanoutRound& r = fanout_rounds[sl.incident_id];
      if (!r.slices_left) r.listed_mono = now;
      r.slices_left++;
      r.streams += sl.streams.size();
      fanout_queue.push_back(std::move(sl));
    }
    fanout_cv.notify_all();
  }
  for (auto& j : a.assemble) assembly_queue.push_back(std::move(j));
  if (!a.assemble.empty()) assemble_cv.notify_one();
  for (auto& entry : a.persist) {
    const std::string& path = entry.first;
    auto same = std::find_if(persist_queue.begin(), persist_queue.end(),
                             [&](const auto& e) { return e.first == path; });
    if (same != persist_queue.end())
      same->second = std::move(entry.second);
    else
      persist_queue.emplace_back(path, std::move(entry.second));
  }
  if (!a.persist.empty()) persist_cv.notify_one();
  for (const auto& l : a.log) log(l);
  a = Actions{};
}

void CoordinatorServer::Impl::fanout_loop() {
  std::unique_lock<RankedMutex> lk(queue_mu);
  for (;;) {
    fanout_cv.wait(lk, [&] { return fanout_stopping || !fanout_queue.empty(); });
    if (fanout_queue.empty()) return;  // stopping, every pinned stream released
    FanoutSlice sl = std::move(fanout_queue.front());
    fanout_queue.pop_front();
    lk.unlock();
    const int64_t cpu0 = thread_cpu_ns();
    for (NodeStream* st : sl.streams) {
      st->send(sl.message);
      st->unpin();
    }
    const int64_t cpu = thread_cpu_ns() - cpu0;
    lk.lock();
    if (--fanout_pending == 0) {
      // The last slice is out: heartbeats may be read and applied again.
      lk.unlock();
      resume_reads(true);
      lk.lock();
    }
    const std::string& id = sl.incident_id;
    auto r = fanout_rounds.find(id);
    if (r != fanout_rounds.end()) r->second.cpu_ns += cpu;
    if (r != fanout_rounds.end() && --r->second.slices_left == 0) {
      last_fanout_seconds = double(mono_ns() - r->second.listed_mono) / 1e9;
      char line[200];
      std::snprintf(
          line, sizeof line,
          "%zu dump request(s) handed to the node streams in %.3f s (%.3f s of CPU, "
          "%.1f us per node)",
          r->second.streams, last_fanout_seconds, double(r->second.cpu_ns) / 1e9,
          double(r->second.cpu_ns) / 1e3 / double(std::max<size_t>(r->second.streams, 1)));
      const std::string text = "frd coordinator: " + id + ": " + line;
      fanout_rounds.erase(r);
      lk.unlock();  // the heartbeats' handover shares this lock: not held across a write
      log(text);
      lk.lock();
    }
  }
}

void CoordinatorServer::Impl::resume_reads(bool start) {
  std::vector<NodeStream*> deferred;
  {
    std::lock_guard<RankedMutex> ql(queue_mu);
    if (start) hb_fanout = false;
    deferred.swap(reads_deferred);
  }
  hb_cv.notify_all();
  for (NodeStream* st : deferred) {
    if (start) st->resume_read();
    st->unpin();
  }
}

namespace {

// One heartbeat on its way from a stream to the state.
struct Arrived {
  NodeStream* stream;                         // pinned
  std::unique_ptr<grpc::ByteBuffer> message;  // as it came, undecoded
  int64_t t4 = 0;
  bool decoded = false;
  fr::v1::PingEcho echo;  // the clock sample it carries, if any
};

}  // namespace

// Heartbeats applied in batches: decoded outside every lock, then applied under one hold of mu.
void CoordinatorServer::Impl::applier_loop() {
  constexpr size_t kBatch = 64;
  constexpr int64_t kFanoutFirstNs = 2'000'000'000;
  constexpr int64_t kGatherNs = 5'000'000;
  std::vector<NodeStream*> ready;
  std::vector<Arrived> batch;
  // The batch's reports, decoded into what the state handed back from the previous batch: no
  // allocation per heartbeat once they have grown to the nodes' size.
  std::vector<NodeReport> reports(kBatch);
  HeartbeatDecoder decoder;
  std::vector<std::pair<NodeStream*, grpc::Status>> refused;
  std::unique_lock<RankedMutex> lk(queue_mu);
  for (;;) {
    hb_cv.wait(lk, [&] { return hb_stopping || !hb_ready.empty(); });
    if (hb_ready.empty()) return;  // stopping, every pinned stream released
    // The fan-out's threads get the CPU first; a heartbeat waiting meanwhile can be replaced.
    if (hb_fanout && !hb_stopping)
      hb_cv.wait_for(lk, std::chrono::nanoseconds(kFanoutFirstNs),
                     [&] { return hb_stopping || !hb_fanout; });
    ready.swap(hb_ready);
    for (size_t i = 0; i < ready.size(); i += kBatch) {
      // Taken a batch at a time, so that what waits longer can still be replaced by newer.
      if (!lk.owns_lock()) lk.lock();
      for (size_t k = i; k < std::min(ready.size(), i + kBatch); ++k) {
        batch.push_back({ready[k], nullptr, 0, false, {}});
        batch.back().message = ready[k]->take_heartbeat(&batch.back().t4);
      }
      lk.unlock();
      for (size_t k = 0; k < batch.size(); ++k) {
        Arrived& a = batch[k];
        a.decoded = decoder.decode(*a.message, &reports[k], &a.echo);
        a.message.reset();
      }
      {
        std::lock_guard<RankedMutex> g(mu);
        const int64_t at_once = state.stall_policy().report_at_once_ns();
        bool urgent = false;
        for (size_t k = 0; k < batch.size(); ++k) {
          const Arrived& a = batch[k];
          if (!a.decoded) {
            refused.emplace_back(a.stream, grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                                        "a heartbeat that does not decode"));
            continue;
          }
          for (const auto& p : reports[k].processes)
            if ((!p.alive && !p.exited_cleanly) || p.oldest_age_ns() >= at_once) urgent = true;
          const uint64_t session = a.stream->session();
          if (!state.heartbeat(session, &reports[k], mono_ns())) {
            refused.emplace_back(a.stream, grpc::Status(grpc::StatusCode::ABORTED,
                                                        "superseded by a newer connection"));
            continue;
          }
          if (a.echo.t1_ns() != 0)
            state.clock_sample(session, a.echo.t1_ns(), a.echo.t2_ns(), a.echo.t3_ns(), a.t4);
        }
        if (urgent) {
          poke = true;
          tick_cv.notify_one();
        }
      }
      for (auto& [st, status] : refused) st->close(std::move(status));
      refused.clear();
      for (auto& a : batch) a.stream->unpin();
      batch.clear();
    }
    ready.clear();
    // Heartbeats gather a moment before the next round: one wake-up applies many, rather than
    // each heartbeat waking the applier (at 16k nodes a wake-up each cost more than applying).
    if (lk.owns_lock()) lk.unlock();
    std::this_thread::sleep_for(std::chrono::nanoseconds(kGatherNs));
    lk.lock();
  }
}

}  // namespace fr::daemon
