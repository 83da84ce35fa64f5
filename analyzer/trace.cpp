// The timeline exporter. Each communicator is a trace "process" and each global rank a "thread"
// in it, so Perfetto shows one track per rank per communicator. Ops are complete events ("X")
// lasting their host call; an op still waiting at the dump lasts until the dump and is colored,
// darker for the verdict's op; the verdict's culprits get an instant marker there.
#include "analyzer/trace.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <set>

namespace fr::analyzer {

namespace {

std::string esc(const std::string& s) { return nlohmann::json(s).dump(); }

}  // namespace

bool write_trace(const Model& m, const nlohmann::json& a, const Options& opts, const std::string& path,
                 std::string* error) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (!f) {
    *error = path + ": cannot write the trace: " + std::strerror(errno);
    return false;
  }
  std::set<int> rank_filter(opts.ranks.begin(), opts.ranks.end());
  // What to highlight: (comm id, seq, kind) of the verdict and of each finding.
  struct Mark {
    std::string comm;
    uint64_t seq;
    bool p2p;
    bool verdict;
    std::set<int> culprits;
  };
  std::vector<Mark> marks;
  auto add_mark = [&](const nlohmann::json& v, bool verdict) {
    if (!v.is_object() || !v.contains("comm")) return;
    Mark mk{v["comm"].value("id", std::string()), v.value("seq", 0ull), v.value("seq_kind", std::string()) == "p2p",
            verdict, {}};
    for (const auto& r : v.value("culprit_ranks", nlohmann::json::array()))
      if (r.is_number_integer()) mk.culprits.insert(r.get<int>());
    marks.push_back(std::move(mk));
  };
  add_mark(a.value("verdict", nlohmann::json()), true);
  for (const auto& fnd : a.value("findings", nlohmann::json::array())) add_mark(fnd, false);

  // Times relative to the earliest op keep the numbers readable (microseconds, as the format wants).
  int64_t t0 = INT64_MAX;
  for (const auto& p : m.procs)
    for (const auto& o : p.ops) t0 = std::min(t0, static_cast<int64_t>(o.call_ns) + p.clock_offset_ns);
  if (t0 == INT64_MAX) t0 = 0;

  std::fprintf(f, "{\"displayTimeUnit\":\"ns\",\"otherData\":{\"schema\":\"fr-trace/1\",\"t0_ns\":%lld},\"traceEvents\":[\n",
               static_cast<long long>(t0));
  bool first = true;
  auto sep = [&] {
    if (!first) std::fputs(",\n", f);
    first = false;
  };
  for (size_t ci = 0; ci < m.comms.size(); ++ci) {
    const Comm& c = m.comms[ci];
    if (!comm_matches(c, opts.comm)) continue;
    const std::string id = comm_id_hex(c.id);
    const int pid = static_cast<int>(ci) + 1;
    sep();
    std::fprintf(f, "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":%d,\"args\":{\"name\":%s}}", pid,
                 esc("comm " + (c.name.empty() ? id : c.name + " " + id) + " (size " + std::to_string(c.size) + ")").c_str());
    for (const auto& mem : c.members) {
      const Proc& p = m.procs[mem.proc];
      if (!rank_filter.empty() && !rank_filter.count(p.rank)) continue;
      const ProcComm& pc = p.comms[mem.pc];
      sep();
      std::fprintf(f, "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":%s}}", pid,
                   p.rank, esc("rank " + std::to_string(p.rank) + " (" + p.host + ")").c_str());
      const uint64_t end_ns = p.snapshot_ns ? p.snapshot_ns : p.heartbeat_ns;
      for (uint32_t i = pc.ops_begin; i < pc.ops_end; ++i) {
        const Op& o = p.ops[i];
        const bool coll = fr::log::op_is_collective(o.op), p2p = fr::log::op_is_p2p(o.op);
        const bool waiting = (coll || p2p) && o.gpu_state != FR_GPU_COMPLETED &&
                             !(o.flags & FR_REC_F_NEVER_LAUNCHED) && p.gpu_tracked;
        const Mark* mk = nullptr;
        for (const auto& x : marks)
          if (x.comm == id && x.seq == o.seq && x.p2p == p2p && (coll || p2p)) {
            mk = &x;
            break;
          }
        uint64_t dur = std::max<uint64_t>(o.duration_ns, 1000);
        if (waiting && end_ns > o.call_ns) dur = end_ns - o.call_ns;
        const int64_t ts = static_cast<int64_t>(o.call_ns) + p.clock_offset_ns - t0;
        std::string name = fr::log::op_name(o.op);
        if (coll || p2p) name += " #" + std::to_string(o.seq);
        nlohmann::json args = op_json(o, p.clock_offset_ns);
        sep();
        std::fprintf(f, "{\"ph\":\"X\",\"name\":%s,\"cat\":\"%s\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,\"args\":%s%s}",
                     esc(mk && waiting ? "STALL " + name : name).c_str(), coll ? "coll" : p2p ? "p2p" : "api", pid,
                     p.rank, static_cast<double>(ts) / 1e3, static_cast<double>(dur) / 1e3, args.dump().c_str(),
                     mk && mk->verdict ? ",\"cname\":\"terrible\"" : waiting ? ",\"cname\":\"bad\"" : "");
        if (mk && mk->verdict && mk->culprits.count(p.rank)) {
          sep();
          std::fprintf(f, "{\"ph\":\"i\",\"s\":\"t\",\"name\":\"culprit\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f}", pid, p.rank,
                       static_cast<double>(ts) / 1e3);
        }
      }
    }
  }
  std::fputs("\n]}\n", f);
  if (std::fclose(f) != 0) {
    *error = path + ": writing the trace failed: " + std::strerror(errno);
    return false;
  }
  return true;
}

}  // namespace fr::analyzer
