// NCCL's profiler plugin interface, as far as fr serves it: the event types, the states, and the
// descriptor and plugin tables of interface versions 5, 6 and 7. It is an interface between two
// binaries (NCCL and the agent, or the emulation and the agent), so it lives here with the other
// formats: the agent exports the tables, the emulation's loader calls them, and neither reaches
// into the other's folder for it.
//
// Which table each NCCL looks up first (read from their libnccl.so.2 and sources):
//   2.28        ncclProfiler_v5 (it knows no newer one)
//   2.29 - 2.31 ncclProfiler_v6, then v5
//   2.32        ncclProfiler_v7, then v6, then v5
// Declared here from the interface's layout, not from NCCL's headers (the agent builds without
// them). tests/agent/profiler_abi_test.cpp reads the real libnccl.so.2 builds (their DWARF debug
// information) and fails on any size, offset or enum value that differs from these declarations;
// the static asserts below pin the same numbers for builds where no NCCL is at hand.
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

namespace fr::nccl_prof {

// Event types (the descriptor's `type`, and the bits of the activation mask).
enum : uint64_t {
  kEvGroup = 1u << 0,
  kEvColl = 1u << 1,
  kEvP2p = 1u << 2,
  kEvProxyOp = 1u << 3,
  kEvProxyStep = 1u << 4,
  kEvProxyCtrl = 1u << 5,
  kEvKernelCh = 1u << 6,
  kEvNetPlugin = 1u << 7,
  kEvGroupApi = 1u << 8,
  kEvCollApi = 1u << 9,
  kEvP2pApi = 1u << 10,
  kEvKernelLaunch = 1u << 11,
  kEvCeColl = 1u << 12,       // v6 on
  kEvCeSync = 1u << 13,       // v6 on
  kEvCeBatch = 1u << 14,      // v6 on
  kEvKernelPhase = 1u << 15,  // v7 on
};

// Event states (recordEventState): one numbering for every version.
enum : int {
  kStSendGpuWait = 8,
  kStSendWait = 9,
  kStRecvWait = 10,
  kStRecvFlushWait = 11,
  kStRecvGpuWait = 12,
  kStProxyOpInProgress = 19,
  kStSendPeerWait = 20,
  kStKernelChStop = 22,
  kStKernelPhaseStop = 31,  // v7 on
};

// ncclDebugLogger_t: level (an enum, passed as int), flags, file, line, format.
using Logger = void (*)(int, unsigned long, const char*, int, const char*, ...);
using Result = int;  // ncclResult_t

// The union members fr reads or fills. Every version's union holds more (the API events, the
// copy-engine events of v6 on) that fr never activates; their sizes are in kUnionSize below.
struct CollDescr {
  uint64_t seqNumber;
  const char* func;
  const void* sendBuff;
  void* recvBuff;
  size_t count;
  int root;
  const char* datatype;
  uint8_t nChannels;
  uint8_t nWarps;
  const char* algo;
  const char* proto;
  void* parentGroup;
};
// v7's collective: v5's, then the kernel variant, whether it ran as a symmetric kernel, and the
// tag the user set on the call.
struct CollDescrV7 {
  uint64_t seqNumber;
  const char* func;
  const void* sendBuff;
  void* recvBuff;
  size_t count;
  int root;
  const char* datatype;
  uint8_t nChannels;
  uint8_t nWarps;
  const char* algo;
  const char* proto;
  void* parentGroup;
  const char* kernelVariant;
  bool isSymColl;
  uint64_t userTag;
};
struct P2pDescr {
  const char* func;
  void* buff;
  const char* datatype;
  size_t count;
  int peer;
  uint8_t nChannels;
  void* parentGroup;
};
struct P2pDescrV7 {
  const char* func;
  void* buff;
  const char* datatype;
  size_t count;
  int peer;
  uint8_t nChannels;
  void* parentGroup;
  uint64_t userTag;
};
struct ProxyOpDescr {
  pid_t pid;
  uint8_t channelId;
  int peer;
  int nSteps;
  int chunkSize;
  int isSend;
};
struct ProxyStepDescr {
  int step;
};
struct KernelChDescr {
  uint8_t channelId;
  uint64_t pTimer;
};
struct KernelPhaseDescr {  // v7 on
  uint8_t channelId;
  uint8_t phaseId;
  const char* phaseName;
  uint64_t pTimer;
};

// The union's size per version: the largest member (v5: coll; v6: coll and copy-engine coll;
// v7: its coll, with the three fields above).
inline constexpr size_t kUnionSizeV5 = 88, kUnionSizeV6 = 88, kUnionSizeV7 = 112;

template <class Coll, class P2p, size_t UnionSize>
struct Descr {
  uint64_t type;
  void* parentObj;
  int rank;
  union {
    Coll coll;
    P2p p2p;
    ProxyOpDescr proxyOp;
    ProxyStepDescr proxyStep;
    KernelChDescr kernelCh;
    KernelPhaseDescr kernelPhase;  // v7 only; within the other versions' union size too
    unsigned char bytes_[UnionSize];
  };
};
using DescrV5 = Descr<CollDescr, P2pDescr, kUnionSizeV5>;
using DescrV6 = Descr<CollDescr, P2pDescr, kUnionSizeV6>;
using DescrV7 = Descr<CollDescrV7, P2pDescrV7, kUnionSizeV7>;

// The state arguments (the same in every version).
union StateArgs {
  struct {
    size_t transSize;
  } proxyStep;
  struct {
    int appendedProxyOps;
  } proxyCtrl;
  struct {
    void* data;
  } netPlugin;
  struct {
    uint64_t pTimer;
  } kernelCh;
};

template <typename D>
struct PluginTable {
  const char* name;
  Result (*init)(void** context, uint64_t commId, int* eActivationMask, const char* commName,
                 int nNodes, int nranks, int rank, Logger logfn);
  Result (*startEvent)(void* context, void** eHandle, D* eDescr);
  Result (*stopEvent)(void* eHandle);
  Result (*recordEventState)(void* eHandle, int eState, StateArgs* eStateArgs);
  Result (*finalize)(void* context);
};
using PluginV5 = PluginTable<DescrV5>;
using PluginV6 = PluginTable<DescrV6>;
using PluginV7 = PluginTable<DescrV7>;

static_assert(offsetof(DescrV5, parentObj) == 8 && offsetof(DescrV5, rank) == 16, "v5 descriptor");
static_assert(offsetof(DescrV5, coll) == 24 && sizeof(DescrV5) == 112, "v5 descriptor");
static_assert(offsetof(DescrV6, coll) == 24 && sizeof(DescrV6) == 112, "v6 descriptor");
static_assert(offsetof(DescrV7, coll) == 24 && sizeof(DescrV7) == 136, "v7 descriptor");
static_assert(offsetof(CollDescr, func) == 8 && offsetof(CollDescr, root) == 40, "coll descriptor");
static_assert(offsetof(CollDescr, nChannels) == 56 && offsetof(CollDescr, algo) == 64,
              "coll descriptor");
static_assert(sizeof(CollDescr) == 88 && sizeof(CollDescrV7) == 112, "coll descriptors");
static_assert(offsetof(CollDescrV7, kernelVariant) == 88 && offsetof(CollDescrV7, userTag) == 104,
              "v7 coll descriptor");
static_assert(offsetof(P2pDescr, peer) == 32 && offsetof(P2pDescr, nChannels) == 36,
              "p2p descriptor");
static_assert(offsetof(P2pDescrV7, userTag) == 48, "v7 p2p descriptor");
static_assert(offsetof(ProxyOpDescr, channelId) == 4 && offsetof(ProxyOpDescr, peer) == 8,
              "proxy op");
static_assert(offsetof(ProxyOpDescr, nSteps) == 12 && offsetof(ProxyOpDescr, isSend) == 20,
              "proxy op");
static_assert(offsetof(KernelChDescr, pTimer) == 8, "kernel channel descriptor");
static_assert(offsetof(KernelPhaseDescr, phaseName) == 8 && sizeof(KernelPhaseDescr) == 24,
              "kernel phase descriptor");
static_assert(sizeof(StateArgs) == 8, "state arguments");
static_assert(sizeof(PluginV5) == 48 && offsetof(PluginV5, finalize) == 40, "plugin table");
static_assert(sizeof(PluginV7) == 48 && offsetof(PluginV7, finalize) == 40, "plugin table");

}  // namespace fr::nccl_prof
