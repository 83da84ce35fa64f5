// Localization inside an all-entered collective: which channel stopped at which step, and which
// peer pair and link it waits on, from the channel slots NCCL's profiler interface gave the agent
// (fr_chan_entry, format version 5).
//
// The rule. Every connection in flight of the stuck op is an edge (channel, sender -> receiver)
// seen from one or both ends. An edge whose receiver waits for data (recv_wait, posted) at step s
// is a candidate, explained by what its sender shows for the same edge and step:
//   - the sender transmitted it (send_wait, or finished the step): the data was lost between
//     them: the link sender -> receiver (cause "link");
//   - the sender waits for credit (send_peer_wait): the receiver never posted its buffer: the
//     receiver's proxy (cause "receiver_proxy"; the sender is the one waiting, direction "send");
//   - the sender never got the data out of its GPU (send_gpu_wait, posted): when the sender itself
//     waits for data on that channel, the stall is further up (the candidate is dropped: the
//     sender's own wait is another candidate); when the sender received its input but its kernel
//     never consumed it (recv_gpu_wait) its kernel stopped on the channel (cause "kernel"); else its
//     proxy stopped sending (cause "proxy");
//   - the sender has no slot for it (no dump, or no channel progress): cause "unknown"; when
//     only its receive side is unseen (not over NET) kernel and proxy look alike: cause "sender".
// Of the candidates that remain, the lowest step wins, then the lowest channel, then the lowest
// waiting rank. With none, a receiver holding data its kernel never consumed stopped on its own
// (a leaf of a tree; cause "kernel"). Proxy slots exist only for NET connections (NCCL's proxy
// serves the network), so the transport is NET.
#include <algorithm>
#include <map>
#include <optional>
#include <tuple>

#include "passes.h"
#include "log/reader.h"

namespace fr::analyzer {
namespace {

struct Conn {
  int member;  // index into Comm::members
  const fr_chan_entry* e;
};

struct Candidate {
  uint32_t step = 0;
  int channel = 0;
  int waiting = -1;  // comm ranks
  int peer = -1;
  std::string direction;  // "recv": waits for data from peer; "send": waits to send to peer
  std::string cause;      // link, proxy, receiver_proxy, kernel, unknown
  bool self = false;      // the waiting rank's own kernel stopped (nobody waits on it)
  bool operator<(const Candidate& o) const {
    return std::tie(step, channel, waiting) < std::tie(o.step, o.channel, o.waiting);
  }
};

bool in_flight(const fr_chan_entry& e) { return e.ops_started > e.ops_done; }
bool waits_for_data(uint32_t st) { return st == FR_CHANST_RECV_WAIT || st == FR_CHANST_POSTED; }

// The in-flight connections of the stuck op on comm c, by (comm rank, channel, kind, peer).
std::map<std::tuple<int, int, int, int>, Conn> connections(const Model& m, const Comm& c,
                                                           const std::string& op) {
  std::map<std::tuple<int, int, int, int>, Conn> out;
  for (size_t i = 0; i < c.members.size(); ++i) {
    const Proc& p = m.procs[c.members[i].proc];
    for (const fr_chan_entry& e : p.chans) {
      if (e.comm_id != c.id || e.kind == FR_CHAN_KERNEL || !in_flight(e)) continue;
      if (e.op != FR_OP_NONE && op != fr::log::op_name(e.op)) continue;
      out[{c.members[i].rank_in_comm, e.channel, e.kind, e.peer}] = Conn{static_cast<int>(i), &e};
    }
  }
  return out;
}

int global_of(const Model& m, const Comm& c, int rank_in_comm) {
  for (const auto& mem : c.members)
    if (mem.rank_in_comm == rank_in_comm) return m.procs[mem.proc].rank;
  return -1;
}

std::optional<Candidate> explain(const std::map<std::tuple<int, int, int, int>, Conn>& conns,
                                 int ch, int recv_rank, int send_rank, uint32_t step) {
  Candidate k;
  k.step = step;
  k.channel = ch;
  k.waiting = recv_rank;
  k.peer = send_rank;
  k.direction = "recv";
  auto s = conns.find({send_rank, ch, FR_CHAN_SEND, recv_rank});
  if (s == conns.end()) {
    k.cause = "unknown";
    return k;
  }
  const fr_chan_entry& se = *s->second.e;
  if (se.done > step || se.state == FR_CHANST_SEND_WAIT) {
    k.cause = "link";
  } else if (se.state == FR_CHANST_SEND_PEER_WAIT) {
    k.waiting = send_rank;  // the sender waits to send: the receiver posted no buffer
    k.peer = recv_rank;
    k.direction = "send";
    k.cause = "receiver_proxy";
  } else {
    bool waits = false, holds = false, seen = false;
    for (const auto& [key, conn] : conns) {
      if (std::get<0>(key) != send_rank || std::get<1>(key) != ch ||
          std::get<2>(key) != FR_CHAN_RECV)
        continue;
      seen = true;
      if (waits_for_data(conn.e->state)) waits = true;
      if (conn.e->state == FR_CHANST_RECV_GPU_WAIT || conn.e->state == FR_CHANST_RECV_FLUSH_WAIT)
        holds = true;
    }
    if (waits) return std::nullopt;  // the sender waits itself: its own wait is the candidate
    // Without the sender's receive side (it is not over NET, or has no dump) the two look alike.
    k.cause = holds ? "kernel" : seen ? "proxy" : "sender";
  }
  return k;
}

template <class Accept>
std::optional<Candidate> pick(const std::map<std::tuple<int, int, int, int>, Conn>& conns,
                              Accept accept) {
  std::optional<Candidate> best;
  for (const auto& [key, conn] : conns) {
    auto [rank, ch, kind, peer] = key;
    if (kind != FR_CHAN_RECV || !waits_for_data(conn.e->state)) continue;
    auto k = explain(conns, ch, rank, peer, conn.e->done);
    if (k && accept(*k) && (!best || *k < *best)) best = k;
  }
  if (best) return best;
  for (const auto& [key, conn] : conns) {  // nobody waits: a receiver that never consumed its data
    auto [rank, ch, kind, peer] = key;
    if (kind != FR_CHAN_RECV || conn.e->state != FR_CHANST_RECV_GPU_WAIT) continue;
    Candidate k{conn.e->done, ch, rank, peer, "recv", "kernel", true};
    if (accept(k) && (!best || k < *best)) best = k;
  }
  return best;
}

std::string cause_text(const Candidate& k, int waiting, int peer) {
  const std::string w = "rank " + std::to_string(waiting), p = "rank " + std::to_string(peer);
  if (k.cause == "receiver_proxy")
    return w + " waits for credit from " + p + " over NET (" + p +
           "'s proxy posts no receive buffer)";
  std::string s = w + " waits for data from " + p + " over NET";
  if (k.cause == "link") return s + " (" + p + " sent it; the link " + p + " -> " + w + " lost it)";
  if (k.cause == "proxy") return s + " (proxy)";
  if (k.cause == "sender") return s + " (" + p + "'s kernel or proxy never sent it)";
  if (k.self)
    return w + " holds data from " + p + " over NET that its kernel never consumed (" + w +
           "'s kernel stopped on the channel)";
  if (k.cause == "kernel") return s + " (" + p + "'s kernel stopped on the channel)";
  return s + " (" + p + " shows no progress for it)";
}

nlohmann::json progress_rows(const Model& m, const Comm& c,
                             const std::map<std::tuple<int, int, int, int>, Conn>& conns) {
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& [key, conn] : conns) {
    const fr_chan_entry& e = *conn.e;
    rows.push_back({{"rank", global_of(m, c, std::get<0>(key))},
                    {"rank_in_comm", std::get<0>(key)},
                    {"channel", e.channel},
                    {"kind", fr::log::chan_kind_name(e.kind)},
                    {"peer_rank", global_of(m, c, e.peer)},
                    {"step", e.done},
                    {"steps_posted", e.posted},
                    {"steps", e.nsteps},
                    {"state", fr::log::chan_state_name(e.state)},
                    {"nccl_seq", e.op_seq}});
  }
  return rows;
}

}  // namespace

void localize_in_channels(const Model& m, const Comm& c, const std::string& where,
                          const std::vector<int>& not_started, Stall& s) {
  const auto conns = connections(m, c, s.op);
  if (conns.empty()) return;
  s.extra["channel_progress"] = progress_rows(m, c, conns);
  auto unstarted = [&](int rank_in_comm) {
    const int g = global_of(m, c, rank_in_comm);
    return std::find(not_started.begin(), not_started.end(), g) != not_started.end();
  };
  const std::optional<Candidate> k = pick(conns, [&](const Candidate& k) {
    if (not_started.empty()) return true;
    if (k.cause == "link") return unstarted(k.waiting) || unstarted(k.peer);
    return unstarted(k.self ? k.waiting : k.peer);
  });
  if (!k) return;
  const int waiting = global_of(m, c, k->waiting), peer = global_of(m, c, k->peer);
  s.extra["where"] = {{"channel", k->channel}, {"step", k->step},    {"waiting_rank", waiting},
                      {"peer_rank", peer},     {"transport", "NET"}, {"direction", k->direction},
                      {"cause", k->cause}};
  if (k->cause == "link")
    s.culprits = {std::min(waiting, peer), std::max(waiting, peer)};
  else if (k->self)
    s.culprits = {waiting};
  else
    s.culprits = {peer};  // the sender, or (receiver_proxy) the receiver the sender waits on
  s.summary = where + ": channel " + std::to_string(k->channel) + " stopped at step " +
              std::to_string(k->step) + "; " + cause_text(*k, waiting, peer);
}

}  // namespace fr::analyzer
