// NCCL's profiler plugin interface, as far as the agent serves it: the event types, the states,
// and the descriptor and plugin tables of interface versions 5 and 6 (NCCL 2.28 looks up
// ncclProfiler_v5 first; 2.29 to 2.32 look up ncclProfiler_v6 first). Declared here from the
// interface's documented layout, not from NCCL's headers (the agent builds without them); the
// static asserts pin every offset the agent reads, so a layout slip fails the build.
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

namespace fr::agent::prof {

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
};

// Event states (recordEventState), the numbers both versions use.
enum : int {
  kStProxyOpInProgress = 19,
  kStSendGpuWait = 8,
  kStSendPeerWait = 20,
  kStSendWait = 9,
  kStRecvWait = 10,
  kStRecvFlushWait = 11,
  kStRecvGpuWait = 12,
  kStKernelChStop = 22,
};

// ncclDebugLogger_t: level (an enum, passed as int), flags, file, line, format.
using Logger = void (*)(int, unsigned long, const char*, int, const char*, ...);
using Result = int;  // ncclResult_t

// The descriptor's union members both versions share (v6 appends copy-engine members that the
// agent never activates, and that do not make the union bigger).
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
struct P2pDescr {
  const char* func;
  void* buff;
  const char* datatype;
  size_t count;
  int peer;
  uint8_t nChannels;
  void* parentGroup;
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
// v6's copy-engine collective: the largest member of its union.
struct CeCollDescr {
  uint64_t seqNumber;
  const char* func;
  const void* sendBuff;
  void* recvBuff;
  size_t count;
  int root;
  const char* datatype;
  const char* syncStrategy;
  bool intraBatchSync;
  uint32_t batchSize;
  uint32_t numBatches;
  uint32_t ceSeqNum;
  void* stream;
};

struct DescrV5 {
  uint64_t type;
  void* parentObj;
  int rank;
  union {
    CollDescr coll;
    P2pDescr p2p;
    ProxyOpDescr proxyOp;
    ProxyStepDescr proxyStep;
    KernelChDescr kernelCh;
  };
};
struct DescrV6 {
  uint64_t type;
  void* parentObj;
  int rank;
  union {
    CollDescr coll;
    P2pDescr p2p;
    ProxyOpDescr proxyOp;
    ProxyStepDescr proxyStep;
    KernelChDescr kernelCh;
    CeCollDescr ceColl;
  };
};

// The state arguments (same in both versions).
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

template <typename Descr>
struct PluginTable {
  const char* name;
  Result (*init)(void** context, uint64_t commId, int* eActivationMask, const char* commName,
                 int nNodes, int nranks, int rank, Logger logfn);
  Result (*startEvent)(void* context, void** eHandle, Descr* eDescr);
  Result (*stopEvent)(void* eHandle);
  Result (*recordEventState)(void* eHandle, int eState, StateArgs* eStateArgs);
  Result (*finalize)(void* context);
};
using PluginV5 = PluginTable<DescrV5>;
using PluginV6 = PluginTable<DescrV6>;

static_assert(offsetof(DescrV5, parentObj) == 8 && offsetof(DescrV5, rank) == 16, "v5 descriptor");
static_assert(offsetof(DescrV5, coll) == 24 && sizeof(DescrV5) == 112, "v5 descriptor");
static_assert(offsetof(DescrV6, coll) == 24 && sizeof(DescrV6) == 112, "v6 descriptor");
static_assert(offsetof(CollDescr, func) == 8 && offsetof(CollDescr, root) == 40, "coll descriptor");
static_assert(offsetof(CollDescr, nChannels) == 56 && offsetof(CollDescr, algo) == 64,
              "coll descriptor");
static_assert(sizeof(CollDescr) == 88 && sizeof(CeCollDescr) == 88, "coll descriptors");
static_assert(offsetof(P2pDescr, peer) == 32 && offsetof(P2pDescr, nChannels) == 36,
              "p2p descriptor");
static_assert(offsetof(ProxyOpDescr, channelId) == 4 && offsetof(ProxyOpDescr, peer) == 8,
              "proxy op");
static_assert(offsetof(ProxyOpDescr, nSteps) == 12 && offsetof(ProxyOpDescr, isSend) == 20,
              "proxy op");
static_assert(offsetof(KernelChDescr, pTimer) == 8, "kernel channel descriptor");
static_assert(sizeof(StateArgs) == 8, "state arguments");
static_assert(sizeof(PluginV5) == 48 && offsetof(PluginV5, finalize) == 40, "plugin table");

}  // namespace fr::agent::prof
