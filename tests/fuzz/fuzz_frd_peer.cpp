// Fuzz target: whatever a node (or anyone holding the token) sends the coordinator. The input is a
// script of peer messages (see frd_peer_script.h): hellos, heartbeats, dump statuses, uploads
// chunk by chunk, placed dumps, triggers, disconnects and the passing of time, each decoded from
// the wire format exactly as the gRPC service decodes it (from_proto) and fed to the coordinator's
// state machine and dump receiver in a private directory. Must hold for any script: nothing
// crashes, status and metrics render, every file written stays inside that directory.
#include <dirent.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <google/protobuf/stubs/logging.h>

#include "daemon/logic/assembly.h"
#include "daemon/rpc/convert.h"
#include "daemon/logic/coordinator.h"
#include "fixture.h"
#include "frd_peer_script.h"

namespace {

using fr::daemon::Actions;
using fr::daemon::AssemblyResult;
using fr::daemon::CoordinatorConfig;
using fr::daemon::CoordinatorState;
using fr::daemon::DumpHeader;
using fr::daemon::DumpReceiver;
namespace script = fr::fuzz::frd_script;
using fr::daemon::test::remove_tree;

// Every name below the run's directory is one the coordinator may write: no links, no devices.
void check_tree(const std::string& path) {
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) return;
  if (S_ISLNK(st.st_mode) || !(S_ISDIR(st.st_mode) || S_ISREG(st.st_mode))) {
    std::fprintf(stderr, "unexpected file type at %s\n", path.c_str());
    std::abort();
  }
  if (!S_ISDIR(st.st_mode)) return;
  if (DIR* d = opendir(path.c_str())) {
    while (dirent* e = readdir(d)) {
      std::string n = e->d_name;
      if (n != "." && n != "..") check_tree(path + "/" + n);
    }
    closedir(d);
  }
}

struct Run {
  std::string root;  // the private directory: dump_dir is root/dumps
  CoordinatorState state;
  std::vector<uint64_t> sessions;
  int64_t now = 1'000'000'000;
  std::unique_ptr<DumpReceiver> receiver;
  DumpHeader header;
  // Reused between heartbeats, as the coordinator reuses its reports.
  fr::daemon::NodeReport report;
  bool receiving = false;

  static CoordinatorConfig config(const std::string& root) {
    CoordinatorConfig c;
    c.dump_dir = root + "/dumps";
    c.stall_after_ns = 2'000'000'000;
    c.heartbeat_timeout_ns = 5'000'000'000;
    c.dump_deadline_ns = 3'000'000'000;
    c.max_nodes = 16;
    return c;
  }
  explicit Run(const std::string& r) : root(r), state(config(r)) {}

  uint64_t session(const std::string& payload) {
    if (sessions.empty()) return 0;
    return sessions[(payload.empty() ? 0 : uint8_t(payload[0])) % sessions.size()];
  }

  // The assembler's answer, without running the analysis: the state machine goes on.
  void settle(Actions& a) {
    for (auto& job : a.assemble) {
      if (job.dir.compare(0, root.size(), root) != 0) {
        std::fprintf(stderr, "dump set outside the dump dir: %s\n", job.dir.c_str());
        std::abort();
      }
      (void)job.incident.dump();
      AssemblyResult r;
      r.ok = true;
      r.verdict_kind = "no_hang";
      Actions more;
      state.assembled(job.incident_id, r, now, &more);
    }
  }

  void step(uint8_t op, const std::string& p) {
    Actions a;
    switch (op % script::kOps) {
      case script::kHello: {
        fr::v1::Hello h;
        if (!h.ParseFromString(p)) return;
        std::string err;
        uint64_t s = state.connect(h.node_name(), h.host(), h.job_id(), now, &err);
        if (s) {
          sessions.push_back(s);
          state.resend_requests(s, &a);
        }
        break;
      }
      case script::kHeartbeat: {
        fr::v1::Heartbeat hb;
        if (p.empty() || !hb.ParseFromString(p.substr(1))) return;
        uint64_t s = session(p);
        if (hb.has_echo())
          state.clock_sample(s, hb.echo().t1_ns(), hb.echo().t2_ns(), hb.echo().t3_ns(), now);
        // As the coordinator's applier does: decoded into the report the state handed back.
        fr::daemon::from_proto(hb, &report);
        state.heartbeat(s, &report, now);
        break;
      }
      case script::kDumpStatus: {
        fr::v1::DumpStatus d;
        if (p.empty() || !d.ParseFromString(p.substr(1))) return;
        state.dump_status(session(p), d.incident_id(), d.ok(), d.error(), now);
        break;
      }
      case script::kTick: {
        uint32_t ms = 0;
        for (size_t i = 0; i < p.size() && i < 4; ++i) ms = ms << 8 | uint8_t(p[i]);
        now += int64_t(ms % 600'000) * 1'000'000;
        a = state.tick(now);
        break;
      }
      case script::kTrigger: state.trigger(p, now, &a); break;
      case script::kUploadHeader: {
        fr::v1::UploadHeader h;
        if (!h.ParseFromString(p)) return;
        header = fr::daemon::from_proto(h);
        receiver = std::make_unique<DumpReceiver>();
        receiving = false;
        std::string dir, err;
        bool dup = false;
        if (state.begin_upload(header, &dir, &dup, &err) && !dup)
          receiving = receiver->begin(dir, header, fr::daemon::UploadLimits{}, &err);
        break;
      }
      case script::kUploadData: {
        fr::v1::UploadData d;
        if (!receiving || !d.ParseFromString(p)) return;
        std::string err;
        if (!receiver->write(d.file_index(), d.offset(), d.data().data(), d.data().size(), &err)) {
          receiver->abort();
          receiving = false;
          state.upload_failed(header.incident_id, header.node_name, err, now);
        }
        break;
      }
      case script::kUploadEnd: {
        if (!receiving) return;
        std::string err;
        if (receiver->finish(&err))
          state.upload_done(header, now);
        else
          state.upload_failed(header.incident_id, header.node_name, err, now);
        receiving = false;
        break;
      }
      case script::kPlaced: {
        fr::v1::UploadHeader h;
        if (!h.ParseFromString(p)) return;
        DumpHeader hdr = fr::daemon::from_proto(h);
        std::string dir, err;
        bool dup = false;
        if (state.begin_upload(hdr, &dir, &dup, &err) && !dup &&
            fr::daemon::check_placed(dir, hdr, fr::daemon::UploadLimits{}, &err) ==
                fr::daemon::PlacedCheck::kOk)
          state.upload_done(hdr, now, true);
        break;
      }
      case script::kDisconnect: state.disconnect(session(p), now); break;
      case script::kStatus:
        (void)state.status(now).dump();
        (void)state.metrics(now);
        break;
    }
    settle(a);
  }
};

}  // namespace

// Protobuf logs every string field with invalid UTF-8 it refuses; the refusal is what matters.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(
      [](google::protobuf::LogLevel, const char*, int, const std::string&) {});
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  char tmpl[] = "/tmp/fr-fuzz-frd-XXXXXX";
  if (!mkdtemp(tmpl)) return 0;
  {
    Run run(tmpl);
    script::Reader in(data, size);
    uint8_t op;
    std::string payload;
    int steps = 0;
    while (steps++ < 256 && in.next(&op, &payload)) run.step(op, payload);
    (void)run.state.status(run.now).dump();
    if (run.receiver) run.receiver->abort();
    check_tree(tmpl);
  }
  remove_tree(tmpl);
  return 0;
}
