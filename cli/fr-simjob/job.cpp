// Parsing and validation of the job shape and the fault specifications (see job.h).
#include "job.h"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <sstream>

namespace fr::simjob {

namespace {

constexpr int kMaxWorld = 1024;

// Strict decimal integer: the whole string, no sign games, in range.
bool parse_int(const std::string& s, int64_t lo, int64_t hi, int64_t* out) {
  if (s.empty() || s.size() > 19) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(s.c_str(), &end, 10);
  if (errno != 0 || *end != '\0' || v < lo || v > hi) return false;
  *out = v;
  return true;
}

// A slowdown: a decimal above 1, at most 1000.
bool parse_factor(const std::string& s, double* out) {
  char* end = nullptr;
  double x = s.empty() ? 0 : std::strtod(s.c_str(), &end);
  if (s.empty() || *end != '\0' || !(x > 1.0) || x > 1000.0) return false;
  *out = x;
  return true;
}

// The checks of gpu-slow and link-slow (and of factor= elsewhere); empty when the fault is fine.
std::string fail_slow_problem(const Shape& s, const Fault& f) {
  const bool fail_slow = f.kind == FaultKind::kGpuSlow || f.kind == FaultKind::kLinkSlow;
  if (!fail_slow) return f.factor > 0 ? "factor= applies only to gpu-slow and link-slow" : "";
  const std::string name = fault_kind_name(f.kind);
  if (f.factor <= 0) return name + " needs factor=F (how many times slower, above 1)";
  if (s.gpu_us == 0) return name + " needs a pace: --gpu-us above 0";
  if (f.kind == FaultKind::kGpuSlow) return "";
  if (f.peer < 0 || f.peer == f.rank || f.peer >= s.world())
    return "link-slow needs peer=P, another global rank (0.." + std::to_string(s.world() - 1) + ")";
  if (f.channel >= 0 || f.at > 0 || f.nth > 0)
    return "link-slow takes peer= and factor=, not channel=, at= or nth=";
  return "";
}

bool needs_comm(FaultKind k) {
  switch (k) {
    case FaultKind::kSkip:
    case FaultKind::kGpuStall:
    case FaultKind::kMismatchCount:
    case FaultKind::kMismatchDtype:
    case FaultKind::kMismatchOp:
    case FaultKind::kMismatchRoot:
    case FaultKind::kP2pSkip:
    case FaultKind::kChanStall:
    case FaultKind::kProxyStall:
    case FaultKind::kProxyRecvStall:
    case FaultKind::kLinkDown: return true;
    default: return false;
  }
}

CommKind default_comm(FaultKind k) {
  switch (k) {
    case FaultKind::kMismatchRoot: return CommKind::kWorld;
    case FaultKind::kP2pSkip: return CommKind::kPp;
    default: return CommKind::kDp;
  }
}

int comm_size(const Shape& s, CommKind c) {
  switch (c) {
    case CommKind::kWorld: return s.world();
    case CommKind::kTp: return s.tp;
    case CommKind::kPp: return s.pp;
    case CommKind::kDp: return s.dp();
  }
  return 0;
}

}  // namespace

const char* comm_kind_name(CommKind c) {
  switch (c) {
    case CommKind::kWorld: return "world";
    case CommKind::kTp: return "tp";
    case CommKind::kPp: return "pp";
    case CommKind::kDp: return "dp";
  }
  return "?";
}

std::optional<CommKind> parse_comm_kind(const std::string& s) {
  if (s == "world") return CommKind::kWorld;
  if (s == "tp") return CommKind::kTp;
  if (s == "pp") return CommKind::kPp;
  if (s == "dp") return CommKind::kDp;
  return std::nullopt;
}

const char* fault_kind_name(FaultKind k) {
  switch (k) {
#define FR_SIMJOB_X_NAME(e, s) \
  case FaultKind::e: return s;
    FR_SIMJOB_FAULT_LIST(FR_SIMJOB_X_NAME)
#undef FR_SIMJOB_X_NAME
  }
  return "?";
}

std::optional<FaultKind> parse_fault_kind(const std::string& s) {
#define FR_SIMJOB_X_PARSE(e, n) \
  if (s == n) return FaultKind::e;
  FR_SIMJOB_FAULT_LIST(FR_SIMJOB_X_PARSE)
#undef FR_SIMJOB_X_PARSE
  return std::nullopt;
}

bool is_transport_fault(FaultKind k) {
  return k == FaultKind::kChanStall || k == FaultKind::kProxyStall ||
         k == FaultKind::kProxyRecvStall || k == FaultKind::kLinkDown;
}

std::string fault_kind_list() {
  std::string out;
#define FR_SIMJOB_X_LIST(e, s) out += std::string(out.empty() ? "" : ", ") + s;
  FR_SIMJOB_FAULT_LIST(FR_SIMJOB_X_LIST)
#undef FR_SIMJOB_X_LIST
  return out;
}

std::string Fault::to_spec() const {
  std::ostringstream o;
  o << "rank=" << rank << ",step=" << step << ",kind=" << fault_kind_name(kind);
  if (needs_comm(kind)) o << ",comm=" << comm_kind_name(comm);
  if (ms >= 0) o << ",ms=" << ms;
  if (xid >= 0) o << ",xid=" << xid;
  if (channel >= 0) o << ",channel=" << channel;
  if (peer >= 0) o << ",peer=" << peer;
  if (at > 0) o << ",at=" << at;
  if (nth > 0) o << ",nth=" << nth;
  if (factor > 0) o << ",factor=" << factor;
  return o.str();
}

std::string sim_gpu_bus_id(int local_rank) {
  char b[32];
  std::snprintf(b, sizeof b, "0000:%02x:00.0", (0x3b + local_rank) & 0xff);
  return b;
}

bool parse_fault(const std::string& text, Fault* out, std::string* error) {
  Fault f;
  bool have_rank = false, have_step = false, have_kind = false;
  std::vector<std::string> seen;
  std::stringstream ss(text);
  std::string item;
  if (text.empty()) {
    *error = "empty fault spec (expected rank=R,step=S,kind=K[,comm=C][,ms=M][,xid=X])";
    return false;
  }
  while (std::getline(ss, item, ',')) {
    auto eq = item.find('=');
    if (eq == std::string::npos || eq == 0) {
      *error = "fault spec '" + text + "': '" + item + "' is not key=value";
      return false;
    }
    std::string key = item.substr(0, eq), value = item.substr(eq + 1);
    if (std::find(seen.begin(), seen.end(), key) != seen.end()) {
      *error = "fault spec '" + text + "': " + key + " given twice";
      return false;
    }
    seen.push_back(key);
    int64_t v = 0;
    if (key == "rank") {
      if (!parse_int(value, 0, INT_MAX, &v)) {
        *error = "fault spec '" + text + "': rank '" + value + "' is not a rank number";
        return false;
      }
      f.rank = static_cast<int>(v);
      have_rank = true;
    } else if (key == "step") {
      if (!parse_int(value, 0, INT_MAX, &v)) {
        *error = "fault spec '" + text + "': step '" + value + "' is not a step number";
        return false;
      }
      f.step = static_cast<int>(v);
      have_step = true;
    } else if (key == "kind") {
      auto k = parse_fault_kind(value);
      if (!k) {
        *error = "fault spec '" + text + "': unknown kind '" + value + "' (one of " +
                 fault_kind_list() + ")";
        return false;
      }
      f.kind = *k;
      have_kind = true;
    } else if (key == "comm") {
      auto c = parse_comm_kind(value);
      if (!c) {
        *error = "fault spec '" + text + "': unknown comm '" + value + "' (world, tp, pp or dp)";
        return false;
      }
      f.comm = *c;
      f.comm_given = true;
    } else if (key == "ms") {
      if (!parse_int(value, 0, 24LL * 3600 * 1000, &v)) {
        *error = "fault spec '" + text + "': ms '" + value + "' is not a duration in milliseconds";
        return false;
      }
      f.ms = v;
    } else if (key == "xid") {
      if (!parse_int(value, 1, 1000000, &v)) {
        *error = "fault spec '" + text + "': xid '" + value + "' is not an Xid number (1 or more)";
        return false;
      }
      f.xid = v;
    } else if (key == "channel" || key == "peer" || key == "at" || key == "nth") {
      if (!parse_int(value, 0, key == "channel" ? 63 : INT_MAX, &v)) {
        *error = "fault spec '" + text + "': " + key + " '" + value + "' is not a number";
        return false;
      }
      (key == "channel" ? f.channel
       : key == "peer"  ? f.peer
       : key == "at"    ? f.at
                        : f.nth) = static_cast<int>(v);
    } else if (key == "factor") {
      if (!parse_factor(value, &f.factor)) {
        *error = "fault spec '" + text + "': factor '" + value +
                 "' is not a slowdown above 1 (at most 1000, e.g. 2.5)";
        return false;
      }
    } else {
      *error = "fault spec '" + text + "': unknown key '" + key +
               "' (rank, step, kind, comm, ms, xid, channel, peer, at, nth, factor)";
      return false;
    }
  }
  if (!have_rank || !have_step || !have_kind) {
    *error = "fault spec '" + text + "': missing " +
             std::string(!have_rank   ? "rank"
                         : !have_step ? "step"
                                      : "kind") +
             " (expected rank=R,step=S,kind=K[,comm=C][,ms=M][,xid=X])";
    return false;
  }
  if (!f.comm_given) f.comm = default_comm(f.kind);
  *out = f;
  return true;
}

int64_t host_ms(const Shape& shape, int rank, int step) {
  int64_t ms = shape.step_ms;
  if (shape.jitter > 1 && shape.step_ms > 0) {
    // A fixed hash of (rank, step): reproducible, and independent between ranks.
    uint64_t h = (uint64_t(uint32_t(rank)) << 32 | uint32_t(step)) * 0x9E3779B97F4A7C15ull;
    h ^= uint64_t(uint32_t(shape.seed)) * 0xD6E8FEB86659FD93ull;  // seed 0 keeps the old draw
    h ^= h >> 29;
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 32;
    if (h % 10 == 0) {
      double f = 1 + double((h >> 8) % 1000001) / 1e6 * (shape.jitter - 1);
      ms = int64_t(double(shape.step_ms) * f);
    }
  }
  if (shape.pause_step >= 0 && step >= shape.pause_step &&
      (step == shape.pause_step ||
       (shape.pause_every > 0 && (step - shape.pause_step) % shape.pause_every == 0)))
    ms += shape.pause_ms;
  return ms;
}

int effective_gpu_us(const Shape& shape, const std::vector<Fault>& faults) {
  if (shape.gpu_us >= 0) return shape.gpu_us;
  for (const Fault& f : faults)
    if (f.kind == FaultKind::kGpuSlow || f.kind == FaultKind::kLinkSlow) return kDefaultGpuUs;
  return 0;
}

bool parse_pause(const std::string& text, Shape* shape, std::string* error) {
  int step = -1, every = 0;
  long long ms = -1;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    std::string kv = text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    size_t eq = kv.find('=');
    std::string k = kv.substr(0, eq), v = eq == std::string::npos ? "" : kv.substr(eq + 1);
    char* end = nullptr;
    long long x = v.empty() ? -1 : std::strtoll(v.c_str(), &end, 10);
    if (v.empty() || *end != '\0' || x < 0 || x > (1LL << 30)) {
      *error = "--pause " + text + ": '" + kv + "' is not step=N, ms=N or every=N";
      return false;
    }
    if (k == "step")
      step = int(x);
    else if (k == "ms")
      ms = x;
    else if (k == "every" && x >= 1)
      every = int(x);
    else {
      *error = "--pause " + text + ": unknown key '" + k + "' (step=S,ms=M[,every=N], every >= 1)";
      return false;
    }
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  if (step < 0 && every > 0) step = every;  // every=N alone: steps N, 2N, ...
  if (step < 0 || ms < 0) {
    *error = "--pause " + text + ": needs ms=M and step=S or every=N";
    return false;
  }
  shape->pause_step = step;
  shape->pause_ms = int(ms);
  shape->pause_every = every;
  return true;
}

bool validate(const Shape& s, std::vector<Fault>* faults, std::string* error) {
  auto fail = [&](const std::string& m) {
    *error = m;
    return false;
  };
  if (s.nodes < 1) return fail("--nodes must be at least 1");
  if (s.ranks_per_node < 1) return fail("--ranks-per-node must be at least 1");
  if (s.tp < 1) return fail("--tp must be at least 1");
  if (s.pp < 1) return fail("--pp must be at least 1");
  if (s.steps < 1) return fail("--steps must be at least 1");
  if (static_cast<int64_t>(s.nodes) * s.ranks_per_node > kMaxWorld)
    return fail("--nodes x --ranks-per-node must be at most " + std::to_string(kMaxWorld));
  if (s.step_ms < 0 || s.step_ms > 3'600'000) return fail("--step-ms must be 0 to 3600000");
  if (s.jitter < 1 || s.jitter > 1000) return fail("--step-jitter must be 1 to 1000");
  if (s.pause_step >= s.steps)
    return fail("--pause: step " + std::to_string(s.pause_step) + " is outside the job (0.." +
                std::to_string(s.steps - 1) + ")");
  if (s.ranks_per_node % s.tp != 0)
    return fail("--tp " + std::to_string(s.tp) + " must divide --ranks-per-node " +
                std::to_string(s.ranks_per_node) + " (a TP group lives inside one node)");
  if ((s.world() / s.tp) % s.pp != 0)
    return fail("--pp " + std::to_string(s.pp) +
                " must divide world size / tp = " + std::to_string(s.world() / s.tp));
  if (s.elastic >= 0 && s.world() < 2)
    return fail("--elastic needs at least 2 ranks (the highest one leaves and is replaced)");
  if (s.elastic >= s.steps)
    return fail("--elastic " + std::to_string(s.elastic) + " is outside the job (0.." +
                std::to_string(s.steps - 1) + ", steps count from 0)");

  for (Fault& f : *faults) {
    std::string where = "--fault " + f.to_spec() + ": ";
    if (f.rank >= s.world())
      return fail(where + "rank " + std::to_string(f.rank) + " is outside the world (0.." +
                  std::to_string(s.world() - 1) + ")");
    if (f.step >= s.steps)
      return fail(where + "step " + std::to_string(f.step) + " is outside the job (0.." +
                  std::to_string(s.steps - 1) + ", steps count from 0)");
    if (f.comm_given && !needs_comm(f.kind))
      return fail(where + "comm= does not apply to " + fault_kind_name(f.kind));
    if (f.ms >= 0 && f.kind != FaultKind::kSlow && f.kind != FaultKind::kGpuStall)
      return fail(where + "ms= applies only to slow and gpu-stall");
    if (std::string p = fail_slow_problem(s, f); !p.empty()) return fail(where + p);
    if (f.kind == FaultKind::kLinkSlow) continue;  // peer= is a global rank, no comm
    int size = comm_size(s, f.comm);
    if (!is_transport_fault(f.kind) && (f.channel >= 0 || f.peer >= 0 || f.at > 0 || f.nth > 0))
      return fail(where + "channel=, peer=, at= and nth= apply only to the transport faults");
    if (is_transport_fault(f.kind) &&
        f.nth > (f.comm == CommKind::kWorld || f.comm == CommKind::kTp ? 1 : 0))
      return fail(where + "nth= counts the step's collectives on comm: world and tp have 2, dp 1");
    if (is_transport_fault(f.kind)) {
      if (f.comm == CommKind::kPp)
        return fail(where + "transport faults act on collectives: not comm=pp");
      if (size < 2)
        return fail(where + "comm " + std::string(comm_kind_name(f.comm)) + " has one rank");
      if (f.kind != FaultKind::kChanStall) {
        std::vector<int> g = group_of(s, f.rank, f.comm);
        if (f.peer < 0 || f.peer == f.rank || std::find(g.begin(), g.end(), f.peer) == g.end())
          return fail(where + "peer= must name another rank of the same " +
                      std::string(comm_kind_name(f.comm)) + " communicator");
      } else if (f.peer >= 0) {
        return fail(where + "chan-stall takes channel=, not peer=");
      }
    }
    switch (f.kind) {
      case FaultKind::kSlow:
        if (f.ms <= 0) return fail(where + "slow needs ms=M (sleep per step, M > 0)");
        break;
      case FaultKind::kP2pSkip:
        if (f.comm != CommKind::kPp) return fail(where + "p2p-skip acts on comm=pp only");
        if (s.pp < 2) return fail(where + "p2p-skip needs a pipeline (--pp 2 or more)");
        break;
      case FaultKind::kSkip:
        if (size < 2)
          return fail(where + "comm " + comm_kind_name(f.comm) +
                      " has one rank: skipping its call would go unnoticed");
        break;
      case FaultKind::kGpuStall:
        if (f.comm == CommKind::kPp && s.pp < 2)
          return fail(where + "comm pp is unused without a pipeline (--pp 2 or more)");
        break;
      case FaultKind::kMismatchCount:
      case FaultKind::kMismatchDtype:
      case FaultKind::kMismatchOp:
        if (f.comm == CommKind::kPp)
          return fail(where + std::string(fault_kind_name(f.kind)) +
                      " acts on a collective: comm world, tp or dp");
        if (size < 2)
          return fail(where + "comm " + comm_kind_name(f.comm) +
                      " has one rank: a mismatch needs two members");
        break;
      case FaultKind::kMismatchRoot:
        if (f.comm != CommKind::kWorld)
          return fail(where + "mismatch-root acts on the world broadcast: comm=world");
        if (size < 2) return fail(where + "the world has one rank: a mismatch needs two");
        break;
      default: break;
    }
  }
  return true;
}

Position position_of(const Shape& s, int rank) {
  Position p;
  p.rank = rank;
  p.node = rank / s.ranks_per_node;
  p.local_rank = rank % s.ranks_per_node;
  p.tp_rank = rank % s.tp;
  p.dp_rank = (rank / s.tp) % s.dp();
  p.stage = rank / (s.tp * s.dp());
  p.tp_color = rank / s.tp;
  p.dp_color = p.stage * s.tp + p.tp_rank;
  p.pp_color = p.dp_rank * s.tp + p.tp_rank;
  return p;
}

std::vector<int> group_of(const Shape& s, int rank, CommKind kind) {
  Position me = position_of(s, rank);
  std::vector<int> out;
  for (int r = 0; r < s.world(); ++r) {
    Position p = position_of(s, r);
    bool same = kind == CommKind::kWorld || (kind == CommKind::kTp && p.tp_color == me.tp_color) ||
                (kind == CommKind::kDp && p.dp_color == me.dp_color) ||
                (kind == CommKind::kPp && p.pp_color == me.pp_color);
    if (same) out.push_back(r);
  }
  return out;
}

int first_fault_step(const std::vector<Fault>& faults) {
  int first = INT_MAX;
  for (const Fault& f : faults) first = std::min(first, f.step);
  return first;
}

}  // namespace fr::simjob
