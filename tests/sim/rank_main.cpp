// One rank of a multi-process test of the NCCL emulation. The Catch2 tests (nccl_test.cpp) start
// N copies with LD_LIBRARY_PATH on the emulation, each running the same named scenario:
//
//   frsim_rank SCENARIO RANK NRANKS UNIQUE_ID_HEX [ARG]
//
// A scenario checks its results itself and exits 0 when everything held, 1 (with a message on
// stderr) otherwise. Expected values are computed here independently of the library: inputs are
// small integers every element type represents exactly.
#include <cuda.h>
#include <fr_sim.h>
#include <fr_sim_nccl.h>
#include <math.h>
#include <stdarg.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <dlfcn.h>
#include <fcntl.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

namespace {

int g_rank = 0, g_n = 0;

[[noreturn]] void fail(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void fail(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "rank %d: ", g_rank);
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  _exit(1);
}

#define NCCLCHECK(x)                                                                               \
  do {                                                                                             \
    ncclResult_t r_ = (x);                                                                         \
    if (r_ != ncclSuccess) fail("%s:%d %s -> %s", __FILE__, __LINE__, #x, ncclGetErrorString(r_)); \
  } while (0)
#define CUCHECK(x)                                                                   \
  do {                                                                               \
    CUresult r_ = (x);                                                               \
    if (r_ != CUDA_SUCCESS) fail("%s:%d %s -> %d", __FILE__, __LINE__, #x, (int)r_); \
  } while (0)

// ---- element types, independent of the library -------------------------------------------------

size_t tsize(ncclDataType_t t) {
  switch (t) {
    case ncclInt8:
    case ncclUint8:
    case ncclFloat8e4m3:
    case ncclFloat8e5m2: return 1;
    case ncclFloat16:
    case ncclBfloat16: return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32: return 4;
    default: return 8;
  }
}

// Exact encoding of a value a small float format represents (normal numbers and zero only).
uint32_t enc_small(double v, int ebits, int mbits) {
  if (v == 0) return 0;
  uint32_t sign = v < 0 ? 1u << (ebits + mbits) : 0;
  int e;
  double m = frexp(fabs(v), &e);  // v = m * 2^e, m in [0.5,1)
  int bias = (1 << (ebits - 1)) - 1;
  double frac = m * 2 - 1;  // 1.frac * 2^(e-1)
  double mant = ldexp(frac, mbits);
  if (mant != floor(mant)) fail("test value %g not representable", v);
  return sign | (static_cast<uint32_t>(e - 1 + bias) << mbits) | static_cast<uint32_t>(mant);
}

double dec_small(uint32_t b, int ebits, int mbits) {
  int bias = (1 << (ebits - 1)) - 1;
  uint32_t sign = (b >> (ebits + mbits)) & 1, e = (b >> mbits) & ((1u << ebits) - 1),
           m = b & ((1u << mbits) - 1);
  double r = e == 0 ? ldexp(m, 1 - bias - mbits)
                    : ldexp(m + (1u << mbits), static_cast<int>(e) - bias - mbits);
  return sign ? -r : r;
}

void put(void* base, size_t i, ncclDataType_t t, double v) {
  char* p = static_cast<char*>(base) + i * tsize(t);
  switch (t) {
    case ncclInt8:
      *reinterpret_cast<int8_t*>(p) = static_cast<int8_t>(static_cast<int64_t>(v));
      break;
    case ncclUint8:
      *reinterpret_cast<uint8_t*>(p) = static_cast<uint8_t>(static_cast<int64_t>(v));
      break;
    case ncclInt32: *reinterpret_cast<int32_t*>(p) = static_cast<int32_t>(v); break;
    case ncclUint32: *reinterpret_cast<uint32_t*>(p) = static_cast<uint32_t>(v); break;
    case ncclInt64: *reinterpret_cast<int64_t*>(p) = static_cast<int64_t>(v); break;
    case ncclUint64: *reinterpret_cast<uint64_t*>(p) = static_cast<uint64_t>(v); break;
    case ncclFloat32: *reinterpret_cast<float*>(p) = static_cast<float>(v); break;
    case ncclFloat64: *reinterpret_cast<double*>(p) = v; break;
    case ncclFloat16:
      *reinterpret_cast<uint16_t*>(p) = static_cast<uint16_t>(enc_small(v, 5, 10));
      break;
    case ncclBfloat16:
      *reinterpret_cast<uint16_t*>(p) = static_cast<uint16_t>(enc_small(v, 8, 7));
      break;
    case ncclFloat8e4m3:
      *reinterpret_cast<uint8_t*>(p) = static_cast<uint8_t>(enc_small(v, 4, 3));
      break;
    case ncclFloat8e5m2:
      *reinterpret_cast<uint8_t*>(p) = static_cast<uint8_t>(enc_small(v, 5, 2));
      break;
    default: fail("bad type");
  }
}

double get(const void* base, size_t i, ncclDataType_t t) {
  const char* p = static_cast<const char*>(base) + i * tsize(t);
  switch (t) {
    case ncclInt8: return *reinterpret_cast<const int8_t*>(p);
    case ncclUint8: return *reinterpret_cast<const uint8_t*>(p);
    case ncclInt32: return *reinterpret_cast<const int32_t*>(p);
    case ncclUint32: return *reinterpret_cast<const uint32_t*>(p);
    case ncclInt64: return static_cast<double>(*reinterpret_cast<const int64_t*>(p));
    case ncclUint64: return static_cast<double>(*reinterpret_cast<const uint64_t*>(p));
    case ncclFloat32: return *reinterpret_cast<const float*>(p);
    case ncclFloat64: return *reinterpret_cast<const double*>(p);
    case ncclFloat16: return dec_small(*reinterpret_cast<const uint16_t*>(p), 5, 10);
    case ncclBfloat16: return dec_small(*reinterpret_cast<const uint16_t*>(p), 8, 7);
    case ncclFloat8e4m3: return dec_small(*reinterpret_cast<const uint8_t*>(p), 4, 3);
    case ncclFloat8e5m2: return dec_small(*reinterpret_cast<const uint8_t*>(p), 5, 2);
    default: return NAN;
  }
}

bool is_int(ncclDataType_t t) { return t <= ncclUint64; }
bool is_fp8(ncclDataType_t t) { return t == ncclFloat8e4m3 || t == ncclFloat8e5m2; }

// What a rank contributes at element i: 1..4, or 0..1 for fp8 (their sums stay exact).
double input(int rank, size_t i, ncclDataType_t t) {
  return is_fp8(t) ? static_cast<double>((rank + i) % 2)
                   : static_cast<double>((rank * 7 + i) % 4 + 1);
}

// The exact reduction, then stored in the type and read back (integers wrap like the GPU).
double expect_reduce(size_t i, ncclDataType_t t, ncclRedOp_t op, double premul[] = nullptr) {
  double acc = 0;
  for (int r = 0; r < g_n; ++r) {
    double v = input(r, i, t) * (premul ? premul[r] : 1.0);
    if (r == 0) {
      acc = v;
      continue;
    }
    switch (op) {
      case ncclProd: acc *= v; break;
      case ncclMax: acc = v > acc ? v : acc; break;
      case ncclMin: acc = v < acc ? v : acc; break;
      default: acc += v; break;
    }
  }
  if (op == ncclAvg) acc = is_int(t) ? floor(acc / g_n) : acc / g_n;
  if (is_int(t)) {
    char buf[8];
    put(buf, 0, t, acc);
    return get(buf, 0, t);
  }
  return acc;
}

bool close_enough(double got, double want, ncclDataType_t t) {
  if (is_int(t)) return got == want;
  double tol = t == ncclFloat16 ? 1e-3 : t == ncclBfloat16 ? 8e-3 : is_fp8(t) ? 0.13 : 1e-6;
  return fabs(got - want) <= tol * fabs(want) + 1e-9;
}

struct Env {
  ncclComm_t comm = nullptr;
  CUstream stream = nullptr;
};

// Ordering between ranks by what they have observed, never by sleeping (process start skew on a
// loaded machine is unbounded): a rank posts a flag, a file under /dev/shm named with the run's
// FRSIM_SHM_PREFIX (so the test's leftover check sees one that stays); another waits for the
// flags of every other rank and removes them.
std::string flag_path(const char* what, int rank) {
  const char* prefix = getenv("FRSIM_SHM_PREFIX");
  return std::string("/dev/shm") + (prefix ? prefix : "/frsim") + "-flag-" + what + "-" +
         std::to_string(rank);
}

// A flag carries one number (0 when there is nothing to say), written before it becomes visible.
void post_flag(const char* what, int64_t value = 0) {
  std::string path = flag_path(what, g_rank), tmp = path + ".tmp";
  FILE* f = fopen(tmp.c_str(), "w");
  if (f == nullptr || fprintf(f, "%lld\n", static_cast<long long>(value)) < 0 || fclose(f) != 0 ||
      rename(tmp.c_str(), path.c_str()) != 0)
    fail("cannot post flag %s", what);
}

// Waits for rank `r`'s flag, removes it and returns its number.
int64_t take_flag(const char* what, int r) {
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  std::string path = flag_path(what, r);
  FILE* f;
  while ((f = fopen(path.c_str(), "r")) == nullptr) {
    if (std::chrono::steady_clock::now() > end) fail("rank %d never posted %s", r, what);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  long long v = 0;
  if (fscanf(f, "%lld", &v) != 1) fail("flag %s of rank %d is unreadable", what, r);
  fclose(f);
  unlink(path.c_str());
  return v;
}

void wait_flags_of_others(const char* what) {
  for (int r = 0; r < g_n; ++r)
    if (r != g_rank) take_flag(what, r);
}

// CLOCK_MONOTONIC in ns: one clock for every process of the machine.
int64_t mono_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

ncclUniqueId parse_id(const char* hex) {
  ncclUniqueId id{};
  if (strlen(hex) != 2 * sizeof id.internal) fail("bad id");
  for (size_t i = 0; i < sizeof id.internal; ++i) {
    unsigned v;
    sscanf(hex + 2 * i, "%2x", &v);
    id.internal[i] = static_cast<char>(v);
  }
  return id;
}

void sync(CUstream s) { CUCHECK(cuStreamSynchronize(s)); }

const ncclDataType_t kTypes[] = {ncclInt8,    ncclUint8,    ncclInt32,      ncclUint32,
                                 ncclInt64,   ncclUint64,   ncclFloat16,    ncclFloat32,
                                 ncclFloat64, ncclBfloat16, ncclFloat8e4m3, ncclFloat8e5m2};
const ncclRedOp_t kOps[] = {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg};

// ---- scenarios --------------------------------------------------------------------------------

void check_buf(const char* what, const void* buf, size_t n, ncclDataType_t t, auto want) {
  for (size_t i = 0; i < n; ++i) {
    double w = want(i);
    double g = get(buf, i, t);
    if (!close_enough(g, w, t))
      fail("%s type %d: element %zu is %g, want %g", what, (int)t, i, g, w);
  }
}

void scenario_colls(Env& e) {
  const int n = g_n, me = g_rank;
  // Large enough for several chunks of the emulation's buffers, odd to leave a partial chunk.
  for (size_t count : {size_t{0}, size_t{1}, size_t{37}, size_t{100003}}) {
    for (ncclDataType_t t : kTypes) {
      if (count > 1000 && t != ncclFloat32 && t != ncclBfloat16 && t != ncclInt64) continue;
      size_t es = tsize(t);
      std::vector<char> send(count * n * es), recv(count * n * es);
      for (size_t i = 0; i < count * n; ++i) put(send.data(), i, t, input(me, i, t));
      for (ncclRedOp_t op : kOps) {
        if (op == ncclProd && is_fp8(t)) continue;  // 0/1 inputs: product is covered by min
        NCCLCHECK(ncclAllReduce(send.data(), recv.data(), count, t, op, e.comm, e.stream));
        sync(e.stream);
        check_buf("allreduce", recv.data(), count, t,
                  [&](size_t i) { return expect_reduce(i, t, op); });
      }
      // In place.
      std::vector<char> inplace(send.begin(), send.begin() + count * es);
      NCCLCHECK(ncclAllReduce(inplace.data(), inplace.data(), count, t, ncclSum, e.comm, e.stream));
      sync(e.stream);
      check_buf("allreduce in place", inplace.data(), count, t,
                [&](size_t i) { return expect_reduce(i, t, ncclSum); });
      // Broadcast from the last rank, and ncclBcast in place from rank 0.
      int root = n - 1;
      NCCLCHECK(ncclBroadcast(send.data(), recv.data(), count, t, root, e.comm, e.stream));
      sync(e.stream);
      check_buf("broadcast", recv.data(), count, t, [&](size_t i) { return input(root, i, t); });
      std::vector<char> b(send.begin(), send.begin() + count * es);
      NCCLCHECK(ncclBcast(b.data(), count, t, 0, e.comm, e.stream));
      sync(e.stream);
      check_buf("bcast", b.data(), count, t, [&](size_t i) { return input(0, i, t); });
      // Reduce to rank 1 % n.
      root = 1 % n;
      if (!recv.empty()) memset(recv.data(), 0, recv.size());
      NCCLCHECK(ncclReduce(send.data(), me == root ? recv.data() : nullptr, count, t, ncclMax, root,
                           e.comm, e.stream));
      sync(e.stream);
      if (me == root)
        check_buf("reduce", recv.data(), count, t,
                  [&](size_t i) { return expect_reduce(i, t, ncclMax); });
      // AllGather: rank r's count elements land at r * count.
      NCCLCHECK(ncclAllGather(send.data(), recv.data(), count, t, e.comm, e.stream));
      sync(e.stream);
      check_buf("allgather", recv.data(), count * n, t,
                [&](size_t i) { return input(static_cast<int>(i / count), i % count, t); });
      // ReduceScatter: element j of my block is the sum over ranks of their element me*count + j.
      NCCLCHECK(ncclReduceScatter(send.data(), recv.data(), count, t, ncclSum, e.comm, e.stream));
      sync(e.stream);
      check_buf("reducescatter", recv.data(), count, t,
                [&](size_t j) { return expect_reduce(me * count + j, t, ncclSum); });
      // AlltoAll: block r of my output is block me of rank r's input.
      NCCLCHECK(ncclAlltoAll(send.data(), recv.data(), count, t, e.comm, e.stream));
      sync(e.stream);
      check_buf("alltoall", recv.data(), count * n, t, [&](size_t i) {
        return input(static_cast<int>(i / count), me * count + i % count, t);
      });
      // Gather to rank 0 and Scatter from the last rank.
      NCCLCHECK(
          ncclGather(send.data(), me == 0 ? recv.data() : nullptr, count, t, 0, e.comm, e.stream));
      sync(e.stream);
      if (me == 0)
        check_buf("gather", recv.data(), count * n, t,
                  [&](size_t i) { return input(static_cast<int>(i / count), i % count, t); });
      root = n - 1;
      NCCLCHECK(ncclScatter(me == root ? send.data() : nullptr, recv.data(), count, t, root, e.comm,
                            e.stream));
      sync(e.stream);
      check_buf("scatter", recv.data(), count, t,
                [&](size_t j) { return input(root, me * count + j, t); });
    }
  }
  // PreMulSum: every rank scales its input by (rank + 1), host-immediate and device-resident.
  std::vector<double> scale(n);
  for (int r = 0; r < n; ++r) scale[r] = r + 1;
  for (ncclScalarResidence_t res : {ncclScalarHostImmediate, ncclScalarDevice}) {
    const size_t count = 1000;
    std::vector<float> send(count), recv(count);
    for (size_t i = 0; i < count; ++i) send[i] = static_cast<float>(input(me, i, ncclFloat32));
    float s = static_cast<float>(me + 1);
    ncclRedOp_t op;
    NCCLCHECK(ncclRedOpCreatePreMulSum(&op, &s, ncclFloat32, res, e.comm));
    NCCLCHECK(ncclAllReduce(send.data(), recv.data(), count, ncclFloat32, op, e.comm, e.stream));
    sync(e.stream);
    NCCLCHECK(ncclRedOpDestroy(op, e.comm));
    check_buf("premulsum", recv.data(), count, ncclFloat32,
              [&](size_t i) { return expect_reduce(i, ncclFloat32, ncclSum, scale.data()); });
  }
  // Bad arguments are refused with a clear error, and do not consume a sequence number.
  float x = 0;
  if (ncclAllReduce(&x, &x, 1, static_cast<ncclDataType_t>(99), ncclSum, e.comm, e.stream) !=
      ncclInvalidArgument)
    fail("bad datatype accepted");
  if (ncclBroadcast(&x, &x, 1, ncclFloat32, n, e.comm, e.stream) != ncclInvalidArgument)
    fail("bad root accepted");
  if (ncclAllReduce(&x, &x, 1, ncclFloat32, static_cast<ncclRedOp_t>(77), e.comm, e.stream) !=
      ncclInvalidArgument)
    fail("bad op accepted");
  if (ncclAllReduce(&x, &x, 1, ncclFloat32, ncclSum, e.comm,
                    reinterpret_cast<cudaStream_t>(0x1234)) != ncclInvalidArgument)
    fail("bad stream accepted");
  // Groups of collectives: several in one launch, nested groups.
  std::vector<int32_t> a(100, me), b(100, 2 * me);
  NCCLCHECK(ncclGroupStart());
  NCCLCHECK(ncclAllReduce(a.data(), a.data(), 100, ncclInt32, ncclSum, e.comm, e.stream));
  NCCLCHECK(ncclGroupStart());
  NCCLCHECK(ncclAllReduce(b.data(), b.data(), 100, ncclInt32, ncclSum, e.comm, e.stream));
  NCCLCHECK(ncclGroupEnd());
  NCCLCHECK(ncclGroupEnd());
  sync(e.stream);
  int tri = n * (n - 1) / 2;
  if (a[5] != tri || b[99] != 2 * tri)
    fail("grouped allreduce: %d %d, want %d %d", a[5], b[99], tri, 2 * tri);
  // GroupSimulateEnd launches nothing: the next collective still matches across ranks.
  ncclSimInfo_t info = NCCL_SIM_INFO_INITIALIZER;
  NCCLCHECK(ncclGroupStart());
  NCCLCHECK(ncclAllReduce(a.data(), a.data(), 100, ncclInt32, ncclSum, e.comm, e.stream));
  NCCLCHECK(ncclGroupSimulateEnd(&info));
  if (ncclGroupEnd() != ncclInvalidUsage) fail("unbalanced ncclGroupEnd accepted");
}

void scenario_p2p(Env& e) {
  const int n = g_n, me = g_rank;
  int right = (me + 1) % n, left = (me - 1 + n) % n;
  // A ring exchange in one group, big enough for many chunks: deadlocks unless grouped ops progress together.
  const size_t count = 200003;
  std::vector<float> s(count), r(count, -1);
  for (size_t i = 0; i < count; ++i) s[i] = static_cast<float>(me * 1000 + i % 997);
  NCCLCHECK(ncclGroupStart());
  NCCLCHECK(ncclSend(s.data(), count, ncclFloat32, right, e.comm, e.stream));
  NCCLCHECK(ncclRecv(r.data(), count, ncclFloat32, left, e.comm, e.stream));
  NCCLCHECK(ncclGroupEnd());
  sync(e.stream);
  for (size_t i = 0; i < count; ++i)
    if (r[i] != static_cast<float>(left * 1000 + i % 997))
      fail("ring recv element %zu = %g", i, r[i]);
  // Ungrouped pairs, in order, several messages per pair: even ranks send first.
  for (int k = 0; k < 5; ++k) {
    int partner = me ^ 1;
    if (partner >= n) break;
    std::vector<int64_t> out(1000 + k, me * 100 + k), in(1000 + k, -1);
    if (me % 2 == 0) {
      NCCLCHECK(ncclSend(out.data(), out.size(), ncclInt64, partner, e.comm, e.stream));
      NCCLCHECK(ncclRecv(in.data(), in.size(), ncclInt64, partner, e.comm, e.stream));
    } else {
      NCCLCHECK(ncclRecv(in.data(), in.size(), ncclInt64, partner, e.comm, e.stream));
      NCCLCHECK(ncclSend(out.data(), out.size(), ncclInt64, partner, e.comm, e.stream));
    }
    sync(e.stream);
    if (in.back() != partner * 100 + k)
      fail("pair message %d: %lld", k, static_cast<long long>(in.back()));
  }
  // Send to self inside a group, and a zero-byte exchange.
  std::vector<int32_t> mine(10, me + 5), back(10, 0);
  NCCLCHECK(ncclGroupStart());
  NCCLCHECK(ncclSend(mine.data(), 10, ncclInt32, me, e.comm, e.stream));
  NCCLCHECK(ncclRecv(back.data(), 10, ncclInt32, me, e.comm, e.stream));
  NCCLCHECK(ncclSend(nullptr, 0, ncclInt32, right, e.comm, e.stream));
  NCCLCHECK(ncclRecv(nullptr, 0, ncclInt32, left, e.comm, e.stream));
  NCCLCHECK(ncclGroupEnd());
  sync(e.stream);
  if (back[9] != me + 5) fail("self send/recv");
  // All-to-all by p2p in a group (what alltoallv implementations do).
  std::vector<int32_t> to(n), from(n, -1);
  NCCLCHECK(ncclGroupStart());
  for (int p = 0; p < n; ++p) {
    to[p] = me * 100 + p;
    NCCLCHECK(ncclSend(&to[p], 1, ncclInt32, p, e.comm, e.stream));
    NCCLCHECK(ncclRecv(&from[p], 1, ncclInt32, p, e.comm, e.stream));
  }
  NCCLCHECK(ncclGroupEnd());
  sync(e.stream);
  for (int p = 0; p < n; ++p)
    if (from[p] != p * 100 + me) fail("p2p alltoall from %d: %d", p, from[p]);
}

void scenario_split(Env& e) {
  const int n = g_n, me = g_rank;
  // Two colors, keys reversed: ranks of each half are numbered from the highest world rank down.
  ncclComm_t sub;
  NCCLCHECK(ncclCommSplit(e.comm, me % 2, -me, &sub, nullptr));
  int cnt, ur;
  NCCLCHECK(ncclCommCount(sub, &cnt));
  NCCLCHECK(ncclCommUserRank(sub, &ur));
  int want_cnt = (n + 1 - me % 2) / 2;
  int members_above = 0;
  for (int r = me + 1; r < n; ++r)
    if (r % 2 == me % 2) ++members_above;
  if (cnt != want_cnt || ur != members_above)
    fail("split: count %d rank %d, want %d %d", cnt, ur, want_cnt, members_above);
  int32_t v = me, sum = 0;
  NCCLCHECK(ncclAllReduce(&v, &sum, 1, ncclInt32, ncclSum, sub, e.stream));
  sync(e.stream);
  int want = 0;
  for (int r = me % 2; r < n; r += 2) want += r;
  if (sum != want) fail("split allreduce %d, want %d", sum, want);
  // The world communicator still works alongside.
  NCCLCHECK(ncclAllReduce(&v, &sum, 1, ncclInt32, ncclSum, e.comm, e.stream));
  sync(e.stream);
  if (sum != n * (n - 1) / 2) fail("world after split");
  // NOCOLOR leaves rank 0 without a communicator.
  ncclComm_t rest = reinterpret_cast<ncclComm_t>(0x1);
  NCCLCHECK(ncclCommSplit(e.comm, me == 0 ? NCCL_SPLIT_NOCOLOR : 7, 0, &rest, nullptr));
  if (me == 0 && rest != nullptr) fail("NOCOLOR gave a communicator");
  if (me != 0) {
    NCCLCHECK(ncclCommCount(rest, &cnt));
    if (cnt != n - 1) fail("split without rank 0: %d", cnt);
    NCCLCHECK(ncclCommDestroy(rest));
  }
  NCCLCHECK(ncclCommDestroy(sub));
  // A nonblocking split reports ncclInProgress until the new communicator is ready.
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  ncclComm_t nb = nullptr;
  ncclResult_t r = ncclCommSplit(e.comm, me % 2, me, &nb, &cfg);
  if (r != ncclInProgress && r != ncclSuccess) fail("nonblocking split: %d", r);
  if (nb == nullptr) fail("nonblocking split gave no handle");
  ncclResult_t ae = ncclInProgress;
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (ae == ncclInProgress && std::chrono::steady_clock::now() < end) {
    NCCLCHECK(ncclCommGetAsyncError(nb, &ae));
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  if (ae != ncclSuccess) fail("nonblocking split ended with %d", ae);
  NCCLCHECK(ncclAllReduce(&v, &sum, 1, ncclInt32, ncclSum, nb, e.stream));
  sync(e.stream);
  if (sum != want) fail("nonblocking split allreduce %d, want %d", sum, want);
  NCCLCHECK(ncclCommDestroy(nb));
  // Shrink: the last rank is excluded and does not take part.
  if (me == n - 1) return;
  int excl = n - 1;
  ncclComm_t shrunk;
  NCCLCHECK(ncclCommShrink(e.comm, &excl, 1, &shrunk, nullptr, NCCL_SHRINK_DEFAULT));
  NCCLCHECK(ncclCommCount(shrunk, &cnt));
  NCCLCHECK(ncclCommUserRank(shrunk, &ur));
  if (cnt != n - 1 || ur != me) fail("shrink: count %d rank %d", cnt, ur);
  NCCLCHECK(ncclAllReduce(&v, &sum, 1, ncclInt32, ncclSum, shrunk, e.stream));
  sync(e.stream);
  if (sum != (n - 1) * (n - 2) / 2) fail("shrunk allreduce %d", sum);
  NCCLCHECK(ncclCommDestroy(shrunk));
}

// Waits up to `ms` and fails if the stream finished: the op must hang.
void expect_hang(CUstream s, int ms, const char* what) {
  auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (std::chrono::steady_clock::now() < end) {
    if (cuStreamQuery(s) == CUDA_SUCCESS) fail("%s completed; it must hang", what);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// Then abort: the stream must drain (the op ends with an error).
void abort_and_drain(Env& e) {
  NCCLCHECK(ncclCommAbort(e.comm));
  e.comm = nullptr;
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (cuStreamQuery(e.stream) != CUDA_SUCCESS)
    if (std::chrono::steady_clock::now() > end)
      fail("abort did not unblock the stream");
    else
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
}

void scenario_mismatch(Env& e, const std::string& field) {
  const int n = g_n, me = g_rank;
  std::vector<float> buf(64, 1.0f);
  // A matching collective first: it completes.
  NCCLCHECK(ncclAllReduce(buf.data(), buf.data(), 64, ncclFloat32, ncclSum, e.comm, e.stream));
  sync(e.stream);
  if (buf[0] != static_cast<float>(n)) fail("matching allreduce: %g", buf[0]);
  bool odd = me == n - 1;
  if (field == "count") {
    NCCLCHECK(ncclAllReduce(buf.data(), buf.data(), odd ? 32 : 64, ncclFloat32, ncclSum, e.comm,
                            e.stream));
  } else if (field == "dtype") {
    NCCLCHECK(ncclAllReduce(buf.data(), buf.data(), 16, odd ? ncclInt32 : ncclFloat32, ncclSum,
                            e.comm, e.stream));
  } else if (field == "op") {
    NCCLCHECK(ncclAllReduce(buf.data(), buf.data(), 64, ncclFloat32, odd ? ncclMax : ncclSum,
                            e.comm, e.stream));
  } else if (field == "root") {
    NCCLCHECK(
        ncclBroadcast(buf.data(), buf.data(), 64, ncclFloat32, odd ? 1 : 0, e.comm, e.stream));
  } else if (field == "kind") {
    if (odd)
      NCCLCHECK(ncclAllGather(buf.data(), buf.data(), 4, ncclFloat32, e.comm, e.stream));
    else
      NCCLCHECK(ncclAllReduce(buf.data(), buf.data(), 4, ncclFloat32, ncclSum, e.comm, e.stream));
  } else if (field == "p2p-count") {
    if (me < 2) {
      int peer = 1 - me;
      if (me == 0)
        NCCLCHECK(ncclSend(buf.data(), 64, ncclFloat32, peer, e.comm, e.stream));
      else
        NCCLCHECK(ncclRecv(buf.data(), 32, ncclFloat32, peer, e.comm, e.stream));
    } else {
      return;  // not involved: nothing pending
    }
  } else {
    fail("unknown field %s", field.c_str());
  }
  float before = buf[0];
  expect_hang(e.stream, 1500, "mismatched collective");
  if (buf[0] != before && field != "p2p-count") fail("a hung collective wrote its output");
  abort_and_drain(e);
}

void scenario_dead(Env& e) {
  const int n = g_n, me = g_rank;
  int32_t v = 1, out = 0;
  NCCLCHECK(ncclAllReduce(&v, &out, 1, ncclInt32, ncclSum, e.comm, e.stream));
  sync(e.stream);
  if (out != n) fail("first allreduce");
  if (me == n - 1) _exit(0);  // dies without a word
  NCCLCHECK(ncclAllReduce(&v, &out, 1, ncclInt32, ncclSum, e.comm, e.stream));
  expect_hang(e.stream, 300, "collective with a dead member");
  ncclResult_t ae;  // checked before any survivor aborts
  NCCLCHECK(ncclCommGetAsyncError(e.comm, &ae));
  if (ae != ncclSuccess)
    fail("a silently dead peer is not detected in the emulation (as over NVLink), got %d", ae);
  expect_hang(e.stream, 1200, "collective with a dead member");
  abort_and_drain(e);
}

void scenario_abort(Env& e) {
  const int n = g_n, me = g_rank;
  int32_t v = 1, out = 0;
  // Everyone but rank 0 enters; rank 0 waits until they have, then aborts. The others see a
  // remote error.
  if (me != 0) {
    NCCLCHECK(ncclAllReduce(&v, &out, 1, ncclInt32, ncclSum, e.comm, e.stream));
    post_flag("abort-entered");
  }
  if (me == 0) {
    wait_flags_of_others("abort-entered");
    NCCLCHECK(ncclCommAbort(e.comm));
    e.comm = nullptr;
    return;
  }
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  ncclResult_t ae = ncclSuccess;
  while (ae == ncclSuccess && std::chrono::steady_clock::now() < end) {
    NCCLCHECK(ncclCommGetAsyncError(e.comm, &ae));
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (ae != ncclRemoteError) fail("peer abort not reported: %d", ae);
  if (cuStreamQuery(e.stream) == CUDA_SUCCESS) fail("collective completed without rank 0");
  (void)n;
  abort_and_drain(e);
}

void scenario_revoke(Env& e) {
  int32_t v = 1, out = 0;
  NCCLCHECK(ncclGroupStart());
  NCCLCHECK(ncclGroupEnd());
  if (g_rank == 0) {  // rank 0 never joins; the others revoke their own communicator
    wait_flags_of_others("revoke-entered");
    NCCLCHECK(ncclCommAbort(e.comm));
    e.comm = nullptr;
    return;
  }
  NCCLCHECK(ncclAllReduce(&v, &out, 1, ncclInt32, ncclSum, e.comm, e.stream));
  post_flag("revoke-entered");
  expect_hang(e.stream, 500, "collective missing rank 0");
  NCCLCHECK(ncclCommRevoke(e.comm, NCCL_REVOKE_DEFAULT));
  sync(e.stream);
  // NCCL 2.30: in progress until the stopped operation has ended (then success, or here the
  // error rank 0's abort left); finalize is no longer allowed, destroy is.
  ncclResult_t async = ncclInProgress;
  for (int i = 0; i < 2000 && async == ncclInProgress; ++i) {
    NCCLCHECK(ncclCommGetAsyncError(e.comm, &async));
    if (async == ncclInProgress) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (async == ncclInProgress) fail("revoked comm never quiescent");
  if (ncclCommFinalize(e.comm) != ncclInvalidUsage) fail("finalize after revoke accepted");
  if (ncclAllReduce(&v, &out, 1, ncclInt32, ncclSum, e.comm, e.stream) != ncclInvalidUsage)
    fail("revoked comm accepted work");
  NCCLCHECK(ncclCommDestroy(e.comm));
  e.comm = nullptr;
}

void scenario_order(Env& e) {
  // A stalled kernel ahead of a collective keeps it from starting; the peers wait for it. Every
  // rank measures from the moment rank 0 stalled its stream (posted to the others), so when each
  // rank started does not matter.
  int32_t v = g_rank, out = -1;
  int64_t t0 = 0;
  if (g_rank == 0) {
    t0 = mono_ns();
    NCCLCHECK(static_cast<ncclResult_t>(frsim_stream_stall(e.stream, 700) ? ncclUnhandledCudaError
                                                                          : ncclSuccess));
    for (int r = 1; r < g_n; ++r) post_flag(("order-stalled-for-" + std::to_string(r)).c_str(), t0);
  } else {
    t0 = take_flag(("order-stalled-for-" + std::to_string(g_rank)).c_str(), 0);
  }
  NCCLCHECK(ncclAllReduce(&v, &out, 1, ncclInt32, ncclSum, e.comm, e.stream));
  sync(e.stream);
  double ms = static_cast<double>(mono_ns() - t0) / 1e6;
  if (out != g_n * (g_n - 1) / 2) fail("allreduce after stall: %d", out);
  if (ms < 700) fail("collective finished %.0f ms after rank 0 stalled its stream for 700 ms", ms);
}

// A training-shaped loop (what fr-simjob runs): TP groups of 2, two pipeline stages, DP over the
// rest; per step TP all-gather and reduce-scatter, a pipeline send/recv, a DP all-reduce, a world
// all-reduce and a world broadcast. ARG = steps. Used to measure the emulation's speed.
void scenario_train(Env& e, int steps) {
  const int n = g_n, me = g_rank;
  const int tp = 2, pp = 2;
  if (n % (tp * pp) != 0) fail("train needs a multiple of 4 ranks");
  ncclComm_t tpc, ppc, dpc;
  NCCLCHECK(ncclCommSplit(e.comm, me / tp, me, &tpc, nullptr));
  int per_stage = n / pp, stage = me / per_stage;
  NCCLCHECK(ncclCommSplit(e.comm, me % per_stage, me, &ppc, nullptr));
  NCCLCHECK(ncclCommSplit(e.comm, stage * tp + me % tp, me, &dpc, nullptr));
  std::vector<float> act(4096, 1.0f), gath(4096 * tp), grad(16384, 1.0f), loss(1, 1.0f),
      bc(256, 0.0f);
  for (int s = 0; s < steps; ++s) {
    NCCLCHECK(ncclAllGather(act.data(), gath.data(), act.size(), ncclFloat32, tpc, e.stream));
    NCCLCHECK(ncclReduceScatter(gath.data(), act.data(), act.size(), ncclFloat32, ncclSum, tpc,
                                e.stream));
    NCCLCHECK(ncclGroupStart());
    if (stage == 0)
      NCCLCHECK(ncclSend(act.data(), act.size(), ncclFloat32, 1, ppc, e.stream));
    else
      NCCLCHECK(ncclRecv(act.data(), act.size(), ncclFloat32, 0, ppc, e.stream));
    NCCLCHECK(ncclGroupEnd());
    NCCLCHECK(
        ncclAllReduce(grad.data(), grad.data(), grad.size(), ncclFloat32, ncclAvg, dpc, e.stream));
    NCCLCHECK(ncclAllReduce(loss.data(), loss.data(), 1, ncclFloat32, ncclAvg, e.comm, e.stream));
    NCCLCHECK(ncclBroadcast(bc.data(), bc.data(), bc.size(), ncclFloat32, 0, e.comm, e.stream));
    sync(e.stream);
  }
  if (loss[0] != 1.0f || grad[7] != 1.0f) fail("train: loss %g grad %g", loss[0], grad[7]);
  for (ncclComm_t c : {tpc, ppc, dpc}) NCCLCHECK(ncclCommDestroy(c));
}

// Run with the ncclBroadcast interposer preloaded: ncclBcast must reach it, once per call.
void scenario_bcast_interpose(Env& e) {
  using Count = int (*)();
  auto count = reinterpret_cast<Count>(dlsym(RTLD_DEFAULT, "frsim_test_broadcast_calls"));
  if (count == nullptr) fail("the interposer is not preloaded");
  std::vector<int32_t> b(8, g_rank);
  NCCLCHECK(ncclBcast(b.data(), 8, ncclInt32, 0, e.comm, e.stream));
  NCCLCHECK(pncclBcast(b.data(), 8, ncclInt32, 0, e.comm, e.stream));
  sync(e.stream);
  if (count() != 2)
    fail("ncclBcast reached the interposed ncclBroadcast %d times, want 2", count());
  if (b[7] != 0) fail("bcast result %d", b[7]);
  NCCLCHECK(ncclBroadcast(b.data(), b.data(), 8, ncclInt32, 0, e.comm, e.stream));
  sync(e.stream);
  if (count() != 3) fail("direct ncclBroadcast not interposed");
}

// The profiler plugin NCCL_PROFILER_PLUGIN names (tests/sim/prof_plugin.cpp) is loaded (ARG
// "loaded", or "loaded:V": through interface version V) or not (ARG "off": an unknown version):
// one all-reduce and one broadcast between ranks of different nodes (FRSIM_NODE is the rank),
// counted by the plugin.
void scenario_prof(Env& e, const std::string& arg) {
  int32_t v = g_rank + 1, out = 0;
  NCCLCHECK(ncclAllReduce(&v, &out, 1, ncclInt32, ncclSum, e.comm, e.stream));
  NCCLCHECK(ncclBroadcast(&v, &v, 1, ncclInt32, 0, e.comm, e.stream));
  sync(e.stream);
  if (out != g_n * (g_n + 1) / 2 || v != 1) fail("results %d %d", out, v);
  void* lib = dlopen(getenv("NCCL_PROFILER_PLUGIN"), RTLD_NOW | RTLD_NOLOAD);
  if (arg == "off") {
    if (lib != nullptr) fail("a plugin of an unknown version stayed loaded");
    return;
  }
  if (lib == nullptr) fail("the plugin is not loaded");
  using Counts = void (*)(int*);
  auto counts = reinterpret_cast<Counts>(dlsym(lib, "frsim_test_prof_counts"));
  int c[8] = {};
  counts(c);
  printf("inits=%d coll=%d proxy_ops=%d steps=%d kernel=%d states=%d stops=%d\n", c[0], c[1], c[2],
         c[3], c[4], c[5], c[6]);
  if (c[0] != 1 || c[1] != 2) fail("inits %d colls %d", c[0], c[1]);
  if (arg.size() > 7 && arg.compare(0, 7, "loaded:") == 0 && c[7] != atoi(arg.c_str() + 7))
    fail("NCCL took interface version %d, want %s", c[7], arg.c_str() + 7);
  if (c[2] == 0 || c[3] == 0 || c[4] == 0 || c[5] == 0) fail("no proxy or kernel events");
  if (c[6] < c[1] + c[2] + c[3] + c[4]) fail("events left open: %d stops", c[6]);
}

// NCCL's step counts and kernel-channel semantics, seen by the test plugin: one all-reduce (ARG
// "WHERE,SIZE,NSTEPS,KBITS": WHERE "net" puts every rank on its own node, "node" all on one;
// SIZE "one" is one int32, "big" 9 MiB; the largest ProxyOp nSteps must be NSTEPS and the largest
// ProxyStep number NSTEPS - 1 (none at all when NSTEPS is 0), KBITS the channels with a KernelCh).
void scenario_prof_steps(Env& e, const std::string& arg) {
  char where[8] = {}, size[8] = {};
  int nsteps = -1, kbits = -1;
  if (sscanf(arg.c_str(), "%7[^,],%7[^,],%d,%d", where, size, &nsteps, &kbits) != 4)
    fail("bad ARG %s", arg.c_str());
  const size_t count = strcmp(size, "big") == 0 ? (9u << 20) / 4 : 1;
  std::vector<float> in(count, 1.0f), out(count, 0.0f);
  NCCLCHECK(ncclAllReduce(in.data(), out.data(), count, ncclFloat32, ncclSum, e.comm, e.stream));
  sync(e.stream);
  if (out[0] != float(g_n) || out[count - 1] != float(g_n)) fail("result %f", out[0]);
  void* lib = dlopen(getenv("NCCL_PROFILER_PLUGIN"), RTLD_NOW | RTLD_NOLOAD);
  if (lib == nullptr) fail("the plugin is not loaded");
  auto steps = reinterpret_cast<void (*)(int*)>(dlsym(lib, "frsim_test_prof_steps"));
  int got[3] = {};
  steps(got);
  printf("nsteps=%d steps=%d kernel_bits=%d\n", got[0], got[1], got[2]);
  if (got[0] != nsteps || got[1] != nsteps || got[2] != kbits)
    fail("nsteps %d, steps %d, kernel channels %d; want %d, %d, %d", got[0], got[1], got[2], nsteps,
         nsteps, kbits);
}

// Ranks 0..n-2 share a communicator; the last rank joins through ncclCommGrow. Rank 0 hands the
// grow id to it through the file ARG (written whole, then renamed into place).
void scenario_grow(const ncclUniqueId& id, const std::string& path, CUstream stream) {
  const int n = g_n, me = g_rank;
  ncclComm_t grown = nullptr;
  if (me < n - 1) {
    ncclComm_t base;
    NCCLCHECK(ncclCommInitRank(&base, n - 1, id, me));
    // Suspended communicators refuse work until resumed.
    NCCLCHECK(ncclCommSuspend(base, 0));
    int32_t v = 1, out = 0;
    if (ncclAllReduce(&v, &out, 1, ncclInt32, ncclSum, base, stream) != ncclInvalidUsage)
      fail("suspended comm accepted work");
    NCCLCHECK(ncclCommResume(base));
    NCCLCHECK(ncclAllReduce(&v, &out, 1, ncclInt32, ncclSum, base, stream));
    sync(stream);
    if (out != n - 1) fail("base allreduce %d", out);
    ncclUniqueId gid;
    if (me == 0) {
      NCCLCHECK(ncclCommGetUniqueId(base, &gid));
      // NCCL 2.30: one id at a time, until a grow consumes it.
      ncclUniqueId again;
      if (ncclCommGetUniqueId(base, &again) != ncclInvalidUsage)
        fail("second unconsumed grow id accepted");
      std::string tmp = path + ".tmp";
      FILE* f = fopen(tmp.c_str(), "wb");
      if (f == nullptr || fwrite(&gid, sizeof gid, 1, f) != 1 || fclose(f) != 0)
        fail("cannot write %s", tmp.c_str());
      if (rename(tmp.c_str(), path.c_str()) != 0) fail("rename");
    }
    NCCLCHECK(ncclCommGrow(base, n, me == 0 ? &gid : nullptr, -1, &grown, nullptr));
    NCCLCHECK(ncclCommDestroy(base));
  } else {
    ncclUniqueId gid;
    auto end = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    FILE* f = nullptr;
    while ((f = fopen(path.c_str(), "rb")) == nullptr)
      if (std::chrono::steady_clock::now() > end)
        fail("no grow id");
      else
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    if (fread(&gid, sizeof gid, 1, f) != 1) fail("short grow id");
    fclose(f);
    NCCLCHECK(ncclCommGrow(nullptr, n, &gid, me, &grown, nullptr));
  }
  int cnt, ur;
  NCCLCHECK(ncclCommCount(grown, &cnt));
  NCCLCHECK(ncclCommUserRank(grown, &ur));
  if (cnt != n || ur != me) fail("grown comm: count %d rank %d", cnt, ur);
  int32_t v = me, out = 0;
  NCCLCHECK(ncclAllReduce(&v, &out, 1, ncclInt32, ncclSum, grown, stream));
  sync(stream);
  if (out != n * (n - 1) / 2) fail("grown allreduce %d", out);
  NCCLCHECK(ncclCommDestroy(grown));
}

// The agent's GPU progress markers around a collective: "started" is written by the stream when
// it reaches the collective, "completed" only once the collective is done, which here waits for
// the last rank: it enters only after every other rank has seen "started" and no "completed".
void scenario_markers(Env& e) {
  const int n = g_n, me = g_rank;
  alignas(64) static uint64_t words[2] = {0, 0};
  CUCHECK(cuMemHostRegister(words, sizeof words, 0));
  CUdeviceptr d;
  CUCHECK(cuMemHostGetDevicePointer(&d, words, 0));
  if (me == n - 1) wait_flags_of_others("markers-checked");
  int32_t v = 1, out = 0;
  volatile uint32_t go = 0;
  CUCHECK(frsim_stream_stall_until(e.stream, &go));  // a kernel before the op: nothing started yet
  CUCHECK(cuStreamWriteValue64(e.stream, d, 1, 0));
  NCCLCHECK(ncclAllReduce(&v, &out, 1, ncclInt32, ncclSum, e.comm, e.stream));
  CUCHECK(cuStreamWriteValue64(e.stream, d + 8, 1, 0));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  if (__atomic_load_n(&words[0], __ATOMIC_ACQUIRE) != 0)
    fail("started before the stream reached the op");
  __atomic_store_n(const_cast<uint32_t*>(&go), 1u, __ATOMIC_RELEASE);
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (__atomic_load_n(&words[0], __ATOMIC_ACQUIRE) != 1)
    if (std::chrono::steady_clock::now() > end) fail("started never written");
  if (me != n - 1) {
    // The last rank is still away (it waits for this rank's flag): give a wrong early completion
    // 200 ms to show.
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    if (__atomic_load_n(&words[1], __ATOMIC_ACQUIRE) != 0)
      fail("completed before every rank arrived");
    post_flag("markers-checked");
  }
  sync(e.stream);
  if (words[1] != 1 || out != n)
    fail("completed %llu, allreduce %d", static_cast<unsigned long long>(words[1]), out);
  CUCHECK(cuMemHostUnregister(words));
}

// Fail-slow pacing (FRSIM_KERNEL_US = FRSIM_STEP_US = 20 ms, set by the test): a collective
// takes at least one step's transmission and the kernel's own work; rank 1's slowed GPU makes
// its own collective take its work 3 times; a slowed link 0 -> 1 holds every member's. Only
// lower bounds are checked: the gates never fire early, however loaded the machine.
void scenario_pace(Env& e) {
  const int n = g_n, me = g_rank;
  auto timed_allreduce = [&] {
    int32_t v = me, out = 0;
    auto t0 = std::chrono::steady_clock::now();
    NCCLCHECK(ncclAllReduce(&v, &out, 1, ncclInt32, ncclSum, e.comm, e.stream));
    sync(e.stream);
    if (out != n * (n - 1) / 2) fail("allreduce %d", out);
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  };
  if (double ms = timed_allreduce(); ms < 40) fail("paced allreduce took %.1f ms", ms);
  if (frsim_gpu_slow(0.5) != ncclInvalidArgument) fail("factor 0.5 accepted");
  if (frsim_nccl_link_slow(e.comm, me, 2) != ncclInvalidArgument) fail("link to itself accepted");
  if (frsim_nccl_link_slow(e.comm, n, 2) != ncclInvalidArgument) fail("peer out of range");
  if (me == 1) NCCLCHECK(frsim_gpu_slow(3));
  if (double ms = timed_allreduce(); me == 1 && ms < 80) fail("slow GPU: %.1f ms", ms);
  if (me == 1) NCCLCHECK(frsim_gpu_slow(1));
  if (me == 0) NCCLCHECK(frsim_nccl_link_slow(e.comm, 1, 4));
  if (double ms = timed_allreduce(); ms < 100) fail("slow link: %.1f ms", ms);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) {
    fprintf(stderr, "usage: frsim_rank SCENARIO RANK NRANKS ID [ARG]\n");
    return 2;
  }
  std::string scenario = argv[1];
  g_rank = atoi(argv[2]);
  g_n = atoi(argv[3]);
  ncclUniqueId id = parse_id(argv[4]);
  std::string arg = argc > 5 ? argv[5] : "";
  CUCHECK(cuInit(0));
  CUCHECK(frsim_set_device(0));
  Env e;
  CUCHECK(cuStreamCreate(&e.stream, CU_STREAM_NON_BLOCKING));
  if (scenario == "nonblocking") {
    if (g_rank == 0) wait_flags_of_others("init-pending");  // the others have seen it pending
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    ncclResult_t r = ncclCommInitRankConfig(&e.comm, g_n, id, g_rank, &cfg);
    if (r != ncclInProgress && r != ncclSuccess) fail("nonblocking init: %d", r);
    bool saw_progress = false;
    ncclResult_t ae = ncclInProgress;
    auto end = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (ae == ncclInProgress && std::chrono::steady_clock::now() < end) {
      NCCLCHECK(ncclCommGetAsyncError(e.comm, &ae));
      if (ae == ncclInProgress && !saw_progress && g_rank != 0) post_flag("init-pending");
      if (ae == ncclInProgress) saw_progress = true;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    if (ae != ncclSuccess) fail("nonblocking init ended with %d", ae);
    if (g_rank != 0 && !saw_progress) fail("nonblocking init never reported ncclInProgress");
    int32_t v = 1, out = 0;
    NCCLCHECK(ncclAllReduce(&v, &out, 1, ncclInt32, ncclSum, e.comm, e.stream));
    sync(e.stream);
    if (out != g_n) fail("allreduce on nonblocking comm");
    // Nonblocking finalize reports progress through the async error too.
    r = ncclCommFinalize(e.comm);
    if (r != ncclInProgress && r != ncclSuccess) fail("finalize %d", r);
    do {
      NCCLCHECK(ncclCommGetAsyncError(e.comm, &ae));
    } while (ae == ncclInProgress);
    if (ae != ncclSuccess) fail("finalize ended with %d", ae);
    NCCLCHECK(ncclCommDestroy(e.comm));
    printf("OK\n");
    return 0;
  }
  if (scenario == "grow") {
    scenario_grow(id, arg, e.stream);
    printf("OK\n");
    return 0;
  }
  if (scenario == "prof" || (scenario == "prof-steps" && arg.compare(0, 4, "net,") == 0))
    setenv("FRSIM_NODE", std::to_string(g_rank).c_str(), 1);
  NCCLCHECK(ncclCommInitRank(&e.comm, g_n, id, g_rank));
  int dev = -1;
  NCCLCHECK(ncclCommCuDevice(e.comm, &dev));
  if (dev != 0) fail("ncclCommCuDevice %d", dev);
  if (scenario == "colls")
    scenario_colls(e);
  else if (scenario == "p2p")
    scenario_p2p(e);
  else if (scenario == "split")
    scenario_split(e);
  else if (scenario == "mismatch")
    scenario_mismatch(e, arg);
  else if (scenario == "dead")
    scenario_dead(e);
  else if (scenario == "abort")
    scenario_abort(e);
  else if (scenario == "revoke")
    scenario_revoke(e);
  else if (scenario == "order")
    scenario_order(e);
  else if (scenario == "bcast-interpose")
    scenario_bcast_interpose(e);
  else if (scenario == "markers")
    scenario_markers(e);
  else if (scenario == "prof")
    scenario_prof(e, arg);
  else if (scenario == "pace")
    scenario_pace(e);
  else if (scenario == "prof-steps")
    scenario_prof_steps(e, arg);
  else if (scenario == "train")
    scenario_train(e, arg.empty() ? 100 : atoi(arg.c_str()));
  else
    fail("unknown scenario %s", scenario.c_str());
  if (e.comm != nullptr) {
    NCCLCHECK(ncclCommFinalize(e.comm));
    NCCLCHECK(ncclCommDestroy(e.comm));
  }
  printf("OK\n");
  return 0;
}
