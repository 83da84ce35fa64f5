// The coordinator server's inside (server.h), shared by its units and seen by nothing else:
// server.cpp starts and stops it (listeners, threads) and answers the HTTP pages' questions
// (StatusSource, daemon/http/coordinator_pages.h, which serves the pages), server_streams.cpp
// holds the gRPC service (uploads, placed dumps, status, trigger) and the ticker,
// server_node_stream.h (and .cpp) the node streams' reactor, server_threads.cpp the threads that
// drive the streams (fan-out, heartbeats), server_writers.cpp the threads that write to disk (dump
// sets, placed-dump checks, incident.json). Locking: Impl::mu guards the state, the stream and
// upload registries and the writers' queues; queue_mu the fan-out and heartbeat queues; each
// NodeStream has its own write lock. The order (daemon/base/lock_order.h) is mu, then queue_mu,
// then a stream's write lock, and RankedMutex aborts on any acquisition out of it. Fan-out threads
// take a stream's write lock alone; gRPC's threads take queue_mu alone to hand a heartbeat over
// (and, during a fan-out, to defer their next read).
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <condition_variable>
#include <optional>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/ranked_mutex.h"
#include "daemon/host/hook.h"
#include "daemon/base/lock_order.h"
#include "daemon/base/logger.h"
#include "daemon/http/coordinator_pages.h"
#include "daemon/http/metrics_http.h"
#include "daemon/base/names.h"
#include "daemon/rpc/server.h"
#include "daemon/rpc/wire.h"
#include "fr/v1/frd.grpc.pb.h"

namespace fr::daemon {

using fr::v1::CoordinatorMessage;
using fr::v1::NodeMessage;
using fr::v1::UploadChunk;
using fr::v1::UploadReply;

class NodeStream;    // one node's control stream (server_node_stream.h)
class UploadStream;  // one node's upload (server_streams.cpp)

struct CoordinatorServer::Impl : StatusSource {
  CoordinatorConfig cfg;
  ServerOptions opts;

  RankedMutex mu{lock_order::kState, "CoordinatorServer::mu"};
  // Condition variables over a RankedMutex (ranked_mutex.h).
  std::condition_variable_any tick_cv, assemble_cv;
  bool poke = false;
  bool stopping = false;
  CoordinatorState state;
  std::map<uint64_t, NodeStream*> streams;
  std::set<UploadStream*> uploads;             // every upload stream, with a header or not
  size_t uploads_active = 0;                   // of those, past a valid header: the slots
  std::set<std::string> uploading;             // incident/node pairs with an upload in flight
  std::map<std::string, int> waiting_by_peer;  // streams without a header yet, by peer host
  std::deque<AssemblyJob> assembly_queue;
  // incident.json writes, in order, one pending entry per file (the latest contents).
  std::deque<std::pair<std::string, std::string>> persist_queue;
  std::condition_variable_any persist_cv;
  // Dumps nodes wrote into a shared dump dir, waiting for their files to be checked.
  struct PlacedCall {
    grpc::ServerUnaryReactor* reactor;
    DumpHeader header;
    UploadReply* reply;
    PeerAuth auth;
  };
  std::deque<PlacedCall> placed_queue;
  std::condition_variable_any placed_cv;

  // The fan-out queue and the heartbeat queue share one lock. Whether a fan-out is being sent is
  // one fact (fanout_pending on the fan-out's side, hb_fanout on the heartbeats'), which two
  // locks kept in two halves, set and cleared in two steps; and every hold is a few pointer moves
  // (a slice taken, a heartbeat handed over), so a second lock saved no waiting worth its place
  // in the order.
  RankedMutex queue_mu{lock_order::kQueues, "CoordinatorServer::queue_mu"};

  // Dump requests go out from a few fan-out threads, in slices of streams, outside `mu`: a
  // fan-out to every node is neither serialized on one thread nor holding up the heartbeats.
  struct FanoutSlice {
    std::string incident_id;
    std::shared_ptr<const WireMessage> message;  // the request, encoded once (wire.h)
    std::vector<NodeStream*> streams;            // pinned: they stay alive until sent to
  };
  std::condition_variable_any fanout_cv;  // queue_mu
  std::deque<FanoutSlice> fanout_queue;
  bool fanout_stopping = false;
  std::vector<std::thread> fanout_threads;
  // Per incident being sent: when its requests were listed, slices left, streams in all.
  struct FanoutRound {
    int64_t listed_mono = 0;
    size_t slices_left = 0;
    size_t streams = 0;
    int64_t cpu_ns = 0;  // the fan-out threads' CPU time on it
  };
  std::map<std::string, FanoutRound> fanout_rounds;
  size_t fanout_pending = 0;       // slices queued or being sent
  double last_fanout_seconds = 0;  // the last round: listed to handed to gRPC

  // Heartbeats are applied to the state by one thread of ours, not on gRPC's few callback
  // threads (two on a 2-core machine), which must stay free to read, to complete the dump
  // requests' writes and to answer calls: a backlog of heartbeats never delays a fan-out. A
  // stream holds at most one heartbeat waiting (a newer one replaces it, and is counted), so a
  // coordinator short of CPU applies fewer, fresher reports instead of falling behind. While a
  // fan-out is being sent the applier waits (up to kFanoutFirstNs): the requests come first.
  std::condition_variable_any hb_cv;  // queue_mu
  std::vector<NodeStream*> hb_ready;  // streams with a heartbeat waiting: pinned
  bool hb_stopping = false;
  bool hb_fanout = false;  // a fan-out is being sent
  // Streams that read a heartbeat while a fan-out was being sent and read no further until it is
  // out (pinned): gRPC's threads then spend the fan-out completing its writes rather than
  // decoding heartbeats that would wait for the applier anyway. The thread that hands the last
  // slice to gRPC starts their reads again (resume_reads).
  std::vector<NodeStream*> reads_deferred;
  uint64_t heartbeats_replaced = 0;  // waiting heartbeats a newer one replaced
  // Node messages whose body this version does not know, skipped (gRPC's threads count them).
  std::atomic<uint64_t> unknown_messages{0};
  std::thread applier;

  std::unique_ptr<grpc::Service> service;  // declared before the server: outlives it
  std::unique_ptr<grpc::Server> server;
  int port = 0;
  HttpServer metrics;
  CoordinatorPages pages{this};  // the HTTP routes, over the StatusSource below
  std::thread ticker, assembler, placed_checker, persister;
  bool started = false;

  VerdictHook hook;

  Impl(CoordinatorConfig c, ServerOptions o)
      : cfg(c),
        opts(std::move(o)),
        state(std::move(c)),
        hook(opts.on_verdict, opts.on_verdict_timeout_ns) {}

  // The credentials a call presented (checked already by authorized()).
  PeerAuth peer_auth(grpc::CallbackServerContext* ctx) const {
    PeerAuth a;
    a.authenticated = !opts.token.empty() || !opts.tls_client_ca.empty();
    if (!opts.tls_client_ca.empty()) {
      auto ac = ctx->auth_context();
      if (ac)
        for (const auto& v : ac->GetPeerIdentity())
          a.principal += std::string(v.data(), v.size()) + ";";
      a.principal = "cert:" + a.principal;
    } else if (!opts.token.empty()) {
      a.principal = "token";
    }
    return a;
  }

  bool authorized(grpc::CallbackServerContext* ctx) const {
    if (opts.token.empty()) return true;
    const auto& md = ctx->client_metadata();
    auto it = md.find("authorization");
    if (it == md.end()) return false;
    std::string_view got(it->second.data(), it->second.size());
    return bearer_matches(got, opts.token);
  }

  // A call refused for its token: logged (the peer, the call, a missing or a wrong token) at most
  // once every 10 s with the count of those refused meanwhile; returns the status to send.
  grpc::Status refuse(grpc::CallbackServerContext* ctx, const char* call);
  std::atomic<int64_t> refusal_logged_ns{0};
  std::atomic<uint64_t> refusals_unlogged{0};

  void log(const std::string& line, LogLevel level = LogLevel::kInfo) {
    if (!opts.quiet) log_line(level, line);
  }

  // Carries out what the state asked for. Called with mu held.
  void dispatch(Actions& a);
  // The threads: the ticker (server_streams.cpp), fan-out and applier (server_threads.cpp).
  void ticker_loop();
  void fanout_loop();
  void applier_loop();
  // Starts the reads deferred during a fan-out again (hb_fanout false); at shutdown, only
  // releases them.
  void resume_reads(bool start);
  // The threads that write (server_writers.cpp).
  void assembler_loop();
  void placed_loop();
  void persist_loop();
  // What the HTTP pages ask (StatusSource, server.cpp): copies taken under mu.
  CoordinatorStatus status(const StatusQuery& query) override;
  std::optional<StatusIncident> incident(const std::string& id) override;
  std::string metrics_text() override;
};

// The gRPC service over an Impl (server_streams.cpp).
std::unique_ptr<grpc::Service> make_service(CoordinatorServer::Impl* impl);

}  // namespace fr::daemon
