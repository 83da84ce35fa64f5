// The coordinator server's threads that write to disk (server_impl.h), so that no gRPC thread
// waits on a file system: the assembler writes each dump set and runs the analysis (bounded in
// time), the placed-dump checker reads and checksums the files a node wrote into the shared dump
// dir, and the persister writes incident.json as incidents change.
#include "daemon/rpc/server_impl.h"

#include <cstdio>
#include <fstream>

#include "daemon/rpc/convert.h"
#include "common/files.h"

namespace fr::daemon {

void CoordinatorServer::Impl::assembler_loop() {
  std::unique_lock<RankedMutex> lk(mu);
  for (;;) {
    assemble_cv.wait(lk, [&] { return stopping || !assembly_queue.empty(); });
    if (assembly_queue.empty()) return;  // stopping with nothing left to write
    AssemblyJob job = std::move(assembly_queue.front());
    assembly_queue.pop_front();
    // The work runs on its own thread that owns everything it touches, so that a stop can leave
    // it behind if it is stuck in I/O.
    struct Work {
      RankedMutex mu{lock_order::kAssemblyWork, "CoordinatorServer assembly work"};
      std::condition_variable_any cv;
      bool done = false;
      AssemblyResult result;
    };
    auto work = std::make_shared<Work>();
    std::thread([work, job] {
      AssemblyResult r;
      try {
        r = assemble(job);
      } catch (const std::exception& e) {
        r.error = std::string("assembly failed: ") + e.what();
      }
      std::lock_guard<RankedMutex> wl(work->mu);
      work->result = std::move(r);
      work->done = true;
      work->cv.notify_all();
    }).detach();
    lk.unlock();
    bool finished;
    {
      std::unique_lock<RankedMutex> wl(work->mu);
      for (;;) {
        if (work->done) break;
        work->cv.wait_for(wl, std::chrono::milliseconds(100));
        if (work->done) break;
        bool stop;
        {
          wl.unlock();
          std::lock_guard<RankedMutex> g(mu);
          stop = stopping;
          wl.lock();
        }
        if (stop && !work->cv.wait_for(wl, std::chrono::nanoseconds(opts.stop_wait_ns),
                                       [&] { return work->done; }))
          break;
      }
      finished = work->done;
    }
    lk.lock();
    if (!finished) {
      log("frd coordinator: stopping without waiting for the analysis of " + job.incident_id +
          " (stuck in I/O)");
      return;
    }
    AssemblyResult r = work->result;
    Actions a;
    state.assembled(job.incident_id, r, mono_ns(), &a);
    // The operator's command, once the dump set stands (not when it is about to be rewritten),
    // and once per incident, also across restarts.
    if (hook.enabled() && r.ok && a.assemble.empty() && state.take_hook(job.incident_id, &a)) {
      // The incident's verdict as the state holds it: a slow incident's is the detector's.
      const Incident* inc = nullptr;
      for (const auto& i : state.incidents())
        if (i.id == job.incident_id) inc = &i;
      const std::string& verdict = inc ? inc->verdict_kind : r.verdict_kind;
      const std::string& summary = inc ? inc->verdict_summary : r.verdict_summary;
      std::string culprits, error;
      for (int c : inc ? inc->culprits : r.culprits)
        culprits += (culprits.empty() ? "" : ",") + std::to_string(c);
      std::map<std::string, std::string> env = {{"FR_INCIDENT_ID", job.incident_id},
                                                {"FR_INCIDENT_DIR", job.dir},
                                                {"FR_INCIDENT_KIND", job.kind},
                                                {"FR_JOB_ID", job.job_id},
                                                {"FR_VERDICT", verdict},
                                                {"FR_CULPRITS", culprits},
                                                {"FR_SUMMARY", printable(summary, 1024)}};
      if (inc && inc->slow) {
        char factor[32];
        std::snprintf(factor, sizeof factor, "%.2f", inc->slow->factor);
        env["FR_SLOW_CAUSE"] = slow_cause_name(inc->slow->cause);
        env["FR_SLOW_FACTOR"] = factor;
      }
      if (!hook.start(job.incident_id, env, mono_ns(), &error))
        a.log.push_back("frd coordinator: --on-verdict for " + job.incident_id +
                        " not run: " + error);
    }
    dispatch(a);
  }
}

void CoordinatorServer::Impl::placed_loop() {
  std::unique_lock<RankedMutex> lk(mu);
  for (;;) {
    placed_cv.wait(lk, [&] { return stopping || !placed_queue.empty(); });
    if (placed_queue.empty()) return;
    PlacedCall call = std::move(placed_queue.front());
    placed_queue.pop_front();
    const DumpHeader& h = call.header;
    std::string dir, error;
    bool dup = false;
    grpc::Status st;
    if (stopping) {
      st = grpc::Status(grpc::StatusCode::UNAVAILABLE, "the coordinator is stopping");
    } else if (!check_dump_header(h, opts.limits, &error)) {
      st = grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, error);
    } else if (!state.begin_upload(h, &dir, &dup, &error)) {
      st = grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, error);
    } else if (dup) {
      call.reply->set_duplicate(true);
    } else if (!state.check_uploader(h, call.auth, &error)) {
      st = grpc::Status(grpc::StatusCode::PERMISSION_DENIED, error);
    } else {
      lk.unlock();
      PlacedCheck c = check_placed(dir, h, opts.limits, &error);
      lk.lock();
      if (c == PlacedCheck::kBadHeader) {
        st = grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, error);
      } else if (c == PlacedCheck::kMismatch) {
        st = grpc::Status(grpc::StatusCode::NOT_FOUND, error);
      } else {
        state.upload_done(h, mono_ns(), true);
        log("frd coordinator: " + h.incident_id + ": node " + h.node_name +
            " wrote its dump into the shared dump dir");
        poke = true;
        tick_cv.notify_one();
      }
    }
    call.reply->set_ok(st.ok());
    if (!st.ok()) call.reply->set_error(st.error_message());
    call.reactor->Finish(st);
  }
}

void CoordinatorServer::Impl::persist_loop() {
  std::unique_lock<RankedMutex> lk(mu);
  for (;;) {
    persist_cv.wait(lk, [&] { return stopping || !persist_queue.empty(); });
    if (persist_queue.empty()) return;
    auto [path, text] = std::move(persist_queue.front());
    persist_queue.pop_front();
    lk.unlock();
    std::string error;
    bool ok = fr::files::write_atomic(path, text, &error);
    lk.lock();
    if (!ok) log("frd coordinator: cannot write " + path + ": " + error, LogLevel::kError);
  }
}

}  // namespace fr::daemon
