// Whether two node reports say the same, field by field, and the first difference when not: for
// the tests of the heartbeat's decoders (convert_test.cpp, wire_test.cpp).
#pragma once

#include <string>

#include "daemon/base/model.h"

namespace fr::daemon::test {

inline bool same_report(const NodeReport& a, const NodeReport& b, std::string* why) {
  auto differ = [&](const std::string& what) {
    *why = what;
    return false;
  };
  if (a.seq != b.seq || a.node_time_ns != b.node_time_ns) return differ("seq or node_time_ns");
  if (a.unreadable != b.unreadable) return differ("unreadable");
  if (a.gpu_alerts != b.gpu_alerts) return differ("gpu_alerts");
  if (a.processes.size() != b.processes.size()) return differ("the number of processes");
  for (size_t i = 0; i < a.processes.size(); ++i) {
    const ProcessReport& p = a.processes[i];
    const ProcessReport& q = b.processes[i];
    const std::string at = "process " + std::to_string(i) + ": ";
    if (p.log != q.log || p.job_id != q.job_id || p.host != q.host) return differ(at + "a name");
    if (p.rank != q.rank || p.world_size != q.world_size || p.pid != q.pid)
      return differ(at + "rank");
    if (p.alive != q.alive || p.exited_cleanly != q.exited_cleanly) return differ(at + "liveness");
    if (p.records != q.records || p.last_record_age_ns != q.last_record_age_ns ||
        p.flags != q.flags)
      return differ(at + "records or flags");
    if (p.comms.size() != q.comms.size()) return differ(at + "the number of communicators");
    for (size_t c = 0; c < p.comms.size(); ++c) {
      const CommProgress& x = p.comms[c];
      const CommProgress& y = q.comms[c];
      if (x.comm_id != y.comm_id || x.size != y.size || x.rank != y.rank || x.state != y.state ||
          x.coll_seq != y.coll_seq || x.p2p_seq != y.p2p_seq || x.enqueued != y.enqueued ||
          x.started != y.started || x.completed != y.completed ||
          x.oldest_age_ns != y.oldest_age_ns || x.oldest_seq != y.oldest_seq ||
          x.oldest_op != y.oldest_op || x.name != y.name)
        return differ(at + "communicator " + std::to_string(c));
      if (x.recent.size() != y.recent.size())
        return differ(at + "communicator " + std::to_string(c) + ": the number of recent ops");
      for (size_t t = 0; t < x.recent.size(); ++t)
        if (x.recent[t].seq != y.recent[t].seq || x.recent[t].op != y.recent[t].op ||
            x.recent[t].call_ns != y.recent[t].call_ns || x.recent[t].gpu_ns != y.recent[t].gpu_ns)
          return differ(at + "communicator " + std::to_string(c) + ": recent op " +
                        std::to_string(t));
    }
    if (p.links.size() != q.links.size()) return differ(at + "the number of links");
    for (size_t l = 0; l < p.links.size(); ++l) {
      const LinkTiming& x = p.links[l];
      const LinkTiming& y = q.links[l];
      if (x.comm_id != y.comm_id || x.channel != y.channel || x.peer != y.peer ||
          x.send != y.send || x.op_seq != y.op_seq || x.steps != y.steps || x.step_ns != y.step_ns)
        return differ(at + "link " + std::to_string(l));
    }
  }
  return true;
}

}  // namespace fr::daemon::test
