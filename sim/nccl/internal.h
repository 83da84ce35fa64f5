// Internal declarations of the NCCL emulation (libnccl.so.2): the shared-memory layout of a
// communicator, the in-process communicator state, the queued operations and the wait/notify
// primitives. Nothing here is exported; the exported C API lives in api.cpp.
//
// One communicator = one POSIX shared-memory object, named FRSIM_SHM_PREFIX (or "/frsim") + "_" +
// the 16-hex-digit key of the communicator (random for ncclGetUniqueId, derived from the parent's
// key for split and shrink). Every member maps it; the last member to join unlinks the name, so a
// communicator whose members all joined leaves nothing behind in /dev/shm.
#pragma once

#include <cuda.h>
#include <nccl.h>
#include <stdint.h>

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "fr/nccl_api.h"

namespace frsim {

// ---- shared memory layout -------------------------------------------------------------------------

constexpr uint64_t kShmMagic = 0x314d48534d495346ull;  // "FSIMSHM1"
constexpr uint32_t kShmVersion = 1;

enum SlotState : uint32_t { kSlotEmpty = 0, kSlotJoined = 1, kSlotAborted = 2, kSlotDestroyed = 3 };

// What every member of a collective must agree on; compared field by field at each chunk.
struct CollDesc {
  uint64_t seq;
  uint32_t kind;   // OpKind
  uint32_t dtype;  // ncclDataType_t
  uint64_t count;
  int32_t root;
  uint32_t redop;  // base reduction: ncclSum..ncclAvg, or kPreMulSum
  bool operator==(const CollDesc&) const = default;
};

struct P2PDesc {
  uint64_t seq;
  uint32_t dtype;
  uint32_t pad;
  uint64_t count;
  bool operator==(const P2PDesc&) const = default;
};

struct BootDesc {
  uint32_t kind;  // 1 = split
  int32_t color;
  int32_t key;
  uint32_t pad;
  uint64_t number;  // the parent's split counter
};

struct alignas(128) Slot {
  std::atomic<uint32_t> claimed;
  std::atomic<uint32_t> state;  // SlotState
  std::atomic<int32_t> pid;
  std::atomic<uint32_t> bell;  // futex word: bumped whenever something this rank waits on changes
  std::atomic<uint32_t> sleepers;  // threads of this rank waiting on bell
  std::atomic<uint64_t> coll_posted;
  CollDesc coll_desc[2];
  std::atomic<uint64_t> boot_posted;
  BootDesc boot_desc[2];
  std::atomic<int32_t> node;  // FRSIM_NODE of the member: peers on other nodes are over NET
};

// The transport model (transport.cpp): one pair of words per (channel, sender, out-edge), each
// holding pack(seq, steps): the sender's steps transmitted, the receiver's steps it has buffers
// (credit) for.
constexpr int kMaxSimChannels = 8;
constexpr int kMaxOutEdges = 4;
struct EdgeWord {
  std::atomic<uint64_t> tx;
  std::atomic<uint64_t> ready;
};

struct alignas(64) Channel {     // point-to-point src -> dst
  std::atomic<uint64_t> posted;  // written by the sender
  std::atomic<uint64_t> acked;   // written by the receiver
  P2PDesc desc[2];
};

struct ShmHeader {
  std::atomic<uint64_t> magic;  // written last by the creator
  uint32_t version;
  uint32_t nranks;
  uint64_t key;
  uint64_t coll_chunk;  // bytes per rank per buffer
  uint64_t p2p_chunk;   // bytes per channel per buffer
  uint64_t slots_off, coll_off, chan_off, p2p_off, xport_off, total;
  std::atomic<uint32_t> joined;  // futex word
  uint32_t pad;
};

struct Layout {
  uint64_t coll_chunk, p2p_chunk, slots_off, coll_off, chan_off, p2p_off, xport_off, total;
};
Layout layout_for(uint32_t nranks);

// A mapped communicator segment.
struct Segment {
  void* base = nullptr;
  size_t size = 0;
  ShmHeader* hdr() const { return static_cast<ShmHeader*>(base); }
  Slot* slot(int r) const {
    return reinterpret_cast<Slot*>(static_cast<char*>(base) + hdr()->slots_off) + r;
  }
  char* coll_buf(int r, int parity) const {
    return static_cast<char*>(base) + hdr()->coll_off +
           (uint64_t(r) * 2 + parity) * hdr()->coll_chunk;
  }
  Channel* chan(int src, int dst) const {
    return reinterpret_cast<Channel*>(static_cast<char*>(base) + hdr()->chan_off) +
           (uint64_t(src) * hdr()->nranks + dst);
  }
  EdgeWord* edge(int channel, int src, int e) const {
    return reinterpret_cast<EdgeWord*>(static_cast<char*>(base) + hdr()->xport_off) +
           ((uint64_t(channel) * hdr()->nranks + src) * kMaxOutEdges + e);
  }
  char* p2p_buf(int src, int dst, int parity) const {
    uint64_t idx = (uint64_t(src) * hdr()->nranks + dst) * 2 + parity;
    return static_cast<char*>(base) + hdr()->p2p_off + idx * hdr()->p2p_chunk;
  }
};

std::string shm_name(uint64_t key);
const char* shm_prefix();
// Creates or opens the segment of `key` for a communicator of nranks members. On failure returns
// an NCCL error and a message.
ncclResult_t segment_open(uint64_t key, uint32_t nranks, Segment* out, std::string* err);
void segment_unmap(Segment* s);

// ---- waiting ---------------------------------------------------------------------------------------

void futex_wait(std::atomic<uint32_t>* word, uint32_t expected, int timeout_ms);
void futex_wake(std::atomic<uint32_t>* word);
// Tells rank r's waiting threads that something changed.
void ring(Slot* s);

// ---- reductions ------------------------------------------------------------------------------------

constexpr uint32_t kPreMulSum = 5;
size_t dtype_size(ncclDataType_t t);
// dst[i] = src[i] * scalar (scalar given as a double), in the element type.
void premul(void* dst, const void* src, size_t n, ncclDataType_t t, double scalar);
// out[i] = op(in[0][i], ..., in[k-1][i]); avg divides the sum by divisor.
void reduce(void* out, const void* const* in, int k, size_t n, ncclDataType_t t, uint32_t op,
            int divisor);
double scalar_to_double(const void* p, ncclDataType_t t);
// Conversions of the 16- and 8-bit float formats (exposed for the tests).
float half_to_float(uint16_t h);
uint16_t float_to_half(float f);
float bf16_to_float(uint16_t h);
uint16_t float_to_bf16(float f);
float fp8_to_float(uint8_t v, bool e5m2);
uint8_t float_to_fp8(float f, bool e5m2);

// ---- communicators ----------------------------------------------------------------------------------

// The operations the emulation runs: k<base> for each row of the NCCL API list (fr/nccl_api.def)
// marked OP, numbered from 1 in the list's order (kAllReduce = 1, kBroadcast, kReduce, ... kSend,
// kRecv), so that a zeroed descriptor holds none.
constexpr uint32_t op_kind_number(std::string_view name) {
  uint32_t n = 0;
  for (const fr::NcclFn& f : fr::kNcclApi) {
    if (f.emu == fr::NcclEmu::OP) ++n;
    if (name == f.name) return n;
  }
  return 0;
}
enum OpKind : uint32_t {
#define FRSIM_OP_KIND_OP(base) k##base = op_kind_number("nccl" #base),
#define FRSIM_OP_KIND_API(base)
#define FRSIM_OP_KIND_COMM(base)
#define FRSIM_OP_KIND_INIT(base)
#define FRSIM_OP_KIND_NONE(base)
#define FR_NCCL_FN(base, ret, op, kind, rooted, reducing, torch, since, emu, ...) \
  FRSIM_OP_KIND_##emu(base)
#include "fr/nccl_api.def"
};
static_assert(kAllReduce == 1 && kRecv == 10, "the op kinds keep their numbers");

struct RedOpInfo {
  ncclDataType_t dtype;
  ncclScalarResidence_t residence;
  const void* scalar_ptr;  // ncclScalarDevice: read when the collective runs
  double scalar;           // ncclScalarHostImmediate
};

// A fault of the transport model armed on a communicator (frsim_nccl_fault, fr_sim_nccl.h).
struct XportFault {
  int kind = 0;  // FRSIM_FAULT_* ; 0 none
  int channel = -1;
  int peer = -1;
  int step = 0;
  uint64_t seq = ~0ull;  // the collective it strikes
};

struct CommState {
  Segment seg;
  void* prof_ctx = nullptr;  // the profiler plugin's context (profiler.cpp), null when it gave none
  bool prof_on = false;      // the plugin's init succeeded for this communicator
  uint64_t func_seq[16] = {};       // per collective kind, as NCCL numbers them for the profiler
  XportFault fault;                 // guarded by mu
  std::vector<double> link_factor;  // per comm rank: a slow link to it (pace.cpp); guarded by mu
  uint64_t key = 0;
  // NCCL's hash of the communicator (fr/nccl_comm_hash.h), what the profiler init gets; made for
  // the init family and split as NCCL makes it, 0 for the others (then `key` is passed).
  uint64_t nccl_hash = 0;
  int rank = 0;
  int nranks = 0;
  int cuda_dev = 0;
  bool blocking = true;
  std::string name;
  std::atomic<bool> aborted{false};
  std::atomic<bool> revoked{false};
  std::atomic<int> init_state{0};  // 0 in progress, 1 ready, 2 failed
  std::atomic<int> init_error{ncclSuccess};
  std::atomic<int> async_error{ncclSuccess};  // ncclInProgress while a nonblocking call runs
  std::atomic<int> pending{0};                // ops enqueued and not finished
  // Host side: numbers given to calls, in call order.
  std::atomic<uint64_t> coll_issued{0};
  std::vector<std::atomic<uint64_t>> send_issued, recv_issued;
  // Execution side: how far each lane has run; an op runs only on its turn.
  std::atomic<uint64_t> coll_done{0};
  std::vector<std::atomic<uint64_t>> send_done, recv_done;
  uint64_t coll_stamp = 0;  // touched only by the op holding the collective turn
  std::vector<uint64_t> send_stamp, recv_stamp;
  // Split bookkeeping (host side, serialized by the caller as in NCCL).
  uint64_t boot_stamp = 0;
  uint64_t split_count = 0;
  uint64_t shrink_count = 0;
  uint64_t grow_count = 0;
  bool grow_id_pending = false;  // ncclCommGetUniqueId made an id no grow has consumed yet
  std::atomic<bool> suspended{false};
  std::mutex mu;  // guards redops, last_error
  std::unordered_map<int, RedOpInfo> redops;
  int next_redop = ncclNumOps;
  std::string last_error;

  explicit CommState(int nr)
      : send_issued(nr),
        recv_issued(nr),
        send_done(nr),
        recv_done(nr),
        send_stamp(nr),
        recv_stamp(nr) {}
  ~CommState();
  Slot* me() const { return seg.slot(rank); }
  bool stopped() const {
    return aborted.load(std::memory_order_acquire) || revoked.load(std::memory_order_acquire);
  }
  void wake_self() { ring(me()); }
};

}  // namespace frsim

// The opaque handle NCCL gives out.
struct ncclComm {
  uint32_t magic;
  std::shared_ptr<frsim::CommState> st;
};

namespace frsim {

constexpr uint32_t kCommMagic = 0x434f4d31;  // "COM1"

// Handle registry: a comm_t is only dereferenced when it is registered.
std::shared_ptr<CommState> lookup(ncclComm_t c);
void register_comm(ncclComm_t c);
void unregister_comm(ncclComm_t c);

// Registers a handle of the communicator for the caller (comm.cpp).
ncclComm_t new_handle(std::shared_ptr<CommState> st);
// The communicator of a handle whose init has finished; else nullptr, with *err the result to
// return (ncclInProgress while a nonblocking init runs).
std::shared_ptr<CommState> ready_comm(ncclComm_t comm, ncclResult_t* err);
// Runs `body` now (blocking comm) or on a thread, reporting ncclInProgress until it is done.
ncclResult_t run_maybe_async(const std::shared_ptr<CommState>& c, bool blocking,
                             std::function<ncclResult_t()> body);

void set_last_error(CommState* c, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
const char* last_error(CommState* c);

// Joins communicator `key` as `rank` (claims the slot; does not wait for the others).
ncclResult_t comm_join(CommState* c, uint64_t key, int nranks, int rank, std::string* err);
// Waits until every member has joined (or the comm is aborted).
ncclResult_t comm_wait_joined(CommState* c);

// ---- operations ---------------------------------------------------------------------------------------

struct Op {
  std::shared_ptr<CommState> comm;
  OpKind kind;
  const void* sendbuff;
  void* recvbuff;
  size_t count;
  ncclDataType_t dtype;
  int root;        // root, or the peer for send/recv
  uint32_t redop;  // base op
  double premul = 1.0;
  const void* premul_ptr = nullptr;  // device-resident scalar, read at run time
  ncclDataType_t premul_dtype = ncclFloat32;
  CUstream stream;
  uint64_t seq = 0;
  // Progress (execution side).
  int phase = 0;
  uint64_t chunk = 0;
  uint64_t nchunks = 0;
  uint64_t stamp = 0;
  bool done = false;
  bool mismatch = false;
  uint64_t kernel_due_ns = 0;  // a collective's own GPU work ends then (pace.cpp); 0: not begun
  std::vector<char> staged;    // private copy of an input that overlaps the output
  std::shared_ptr<struct Xport> xport;  // transport-model progress (transport.cpp)
};

// ---- the transport model and the profiler plugin (transport.cpp, profiler.cpp) ---------------

// Advances this rank's channels for the collective's current chunk; kXportDone once every
// channel's step for it is done (then the chunk's data may move).
enum XportResult { kXportWaiting, kXportProgressed, kXportDone };
XportResult xport_step(Op& op);
void xport_finish(Op& op);  // the op ended: kernel channels and proxy ops stop
int sim_channels();
// The profiler plugin, loaded as NCCL loads it (NCCL_PROFILER_PLUGIN).
void prof_comm_init(CommState* c);
void prof_comm_finalize(CommState* c);
struct ProfDescr;
void* prof_start(CommState* c, uint64_t type, void* parent, const ProfDescr& d);
void prof_stop(void* handle);
void prof_state(void* handle, int state, uint64_t trans_size);
struct ProfDescr {
  uint64_t seq = 0;
  const char* func = nullptr;
  int peer = -1, channel = -1, nsteps = 0, is_send = 0, step = 0;
  size_t count = 0;
};

// ---- timing (pace.cpp) ------------------------------------------------------------------------------
// Without FRSIM_KERNEL_US and FRSIM_STEP_US everything is instantaneous, as before. With them, a
// collective's kernel spends kernel_us of its own GPU work once its data moved (times the
// process's GPU slowdown, frsim_gpu_slow), and every channel step's transmission takes step_us
// (times the link's slowdown, frsim_nccl_link_slow). A gate that is not due yet leaves its due
// time with pace_wait_until, so the stream's worker wakes in time.
uint64_t pace_now_ns();
uint64_t pace_kernel_ns();                      // this op's own GPU work, slowdown included
uint64_t pace_step_ns(CommState& c, int peer);  // one step's transmission to comm rank peer
void pace_wait_until(uint64_t due_ns);          // the earliest due gate of this worker's turn
uint64_t pace_take_wait();                      // and back (0: none), for the worker's wait

// Takes an op from an API call: enqueues it now, or keeps it until ncclGroupEnd.
ncclResult_t submit(Op op);
ncclResult_t group_start();
ncclResult_t group_end(bool simulate);
int group_depth();
// Defers the wait of a grouped init to ncclGroupEnd.
void group_defer_init(std::shared_ptr<CommState> c);

}  // namespace frsim
