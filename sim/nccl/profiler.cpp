// The emulation loads a profiler plugin as NCCL does: NCCL_PROFILER_PLUGIN names the library (a
// path or file name, else libnccl-profiler-<name>.so; "none" turns it off; unset:
// libnccl-profiler.so), dlopen, then the versioned table, newest first: ncclProfiler_v6 (as NCCL
// 2.29 to 2.32; FRSIM_PROFILER_MAX_VERSION=5 looks as 2.28 does, from v5), ncclProfiler_v5. A
// library with neither (an older or unknown version) is not used: profiling is off, the job runs.
// Each communicator calls the plugin's init once every member joined, with the activation mask
// the plugin sets deciding which events it gets. The declarations of the interface are the
// agent's (agent/profiler_abi.h): the same documented layout, one copy.
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <mutex>
#include <string>

#include "internal.h"
#include "profiler_abi.h"

namespace frsim {
namespace {

namespace ap = fr::agent::prof;

struct Loaded {
  int version = 0;  // 0: no plugin
  const ap::PluginV5* v5 = nullptr;
  const ap::PluginV6* v6 = nullptr;
};

bool debug_info() {
  const char* d = getenv("NCCL_DEBUG");
  return d != nullptr && (strcasecmp(d, "INFO") == 0 || strcasecmp(d, "TRACE") == 0);
}

void info(const char* fmt, const char* arg) {
  if (!debug_info()) return;
  fprintf(stderr, "%s:%d NCCL INFO ", "frsim", static_cast<int>(getpid()));
  fprintf(stderr, fmt, arg);
  fputc('\n', stderr);
}

void* open_lib(const char* name) {
  std::string file = name != nullptr && name[0] != '\0' ? name : "libnccl-profiler.so";
  void* h = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (h != nullptr || name == nullptr) return h;
  size_t n = strlen(name);
  bool plain = strchr(name, '/') == nullptr &&
               (strncmp(name, "lib", 3) != 0 || n < 3 || strcmp(name + n - 3, ".so") != 0);
  if (!plain) return nullptr;
  file = std::string("libnccl-profiler-") + name + ".so";
  return dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
}

Loaded load() {
  Loaded l;
  const char* name = getenv("NCCL_PROFILER_PLUGIN");
  if (name != nullptr && strcasecmp(name, "none") == 0) return l;
  void* lib = open_lib(name);
  if (lib == nullptr) return l;
  const char* max = getenv("FRSIM_PROFILER_MAX_VERSION");
  int newest = max != nullptr ? atoi(max) : 6;
  if (newest >= 6) l.v6 = static_cast<const ap::PluginV6*>(dlsym(lib, "ncclProfiler_v6"));
  if (l.v6 != nullptr) {
    l.version = 6;
  } else if (newest >= 5 &&
             (l.v5 = static_cast<const ap::PluginV5*>(dlsym(lib, "ncclProfiler_v5")))) {
    l.version = 5;
  } else {
    info("External profiler plugin %s is unsupported",
         name != nullptr ? name : "libnccl-profiler.so");
    dlclose(lib);
    return l;
  }
  info("Successfully loaded external profiler plugin %s",
       name != nullptr ? name : "libnccl-profiler.so");
  return l;
}

const Loaded& plugin() {
  static Loaded l = load();  // once per process, as NCCL's loader
  return l;
}

void logger(int, unsigned long, const char*, int, const char*, ...) {}

template <typename Descr>
void fill(Descr* d, uint64_t type, void* parent, int rank, const ProfDescr& p) {
  memset(d, 0, sizeof *d);
  d->type = type;
  d->parentObj = parent;
  d->rank = rank;
  switch (type) {
    case ap::kEvColl:
      d->coll.seqNumber = p.seq;
      d->coll.func = p.func;
      d->coll.count = p.count;
      d->coll.root = p.peer;
      d->coll.datatype = "";
      d->coll.nChannels = static_cast<uint8_t>(sim_channels());
      d->coll.algo = "RING";
      d->coll.proto = "SIMPLE";
      break;
    case ap::kEvP2p:
      d->p2p.func = p.func;
      d->p2p.count = p.count;
      d->p2p.peer = p.peer;
      d->p2p.datatype = "";
      d->p2p.nChannels = 1;
      break;
    case ap::kEvProxyOp:
      d->proxyOp.pid = getpid();
      d->proxyOp.channelId = static_cast<uint8_t>(p.channel);
      d->proxyOp.peer = p.peer;
      d->proxyOp.nSteps = p.nsteps;
      d->proxyOp.isSend = p.is_send;
      break;
    case ap::kEvProxyStep: d->proxyStep.step = p.step; break;
    case ap::kEvKernelCh: d->kernelCh.channelId = static_cast<uint8_t>(p.channel); break;
    default: break;
  }
}

}  // namespace

void prof_comm_init(CommState* c) {
  const Loaded& l = plugin();
  if (l.version == 0 || c->prof_ctx != nullptr) return;
  int nodes = 1;
  int mask = 0;
  void* ctx = nullptr;
  int r = 0;
  if (l.version == 6)
    r = l.v6->init(&ctx, c->key, &mask, c->name.c_str(), nodes, c->nranks, c->rank, logger);
  else
    r = l.v5->init(&ctx, c->key, &mask, c->name.c_str(), nodes, c->nranks, c->rank, logger);
  if (r != 0 || mask == 0) return;  // as NCCL: a failed init or an empty mask profiles nothing
  c->prof_ctx = ctx;
  c->prof_mask = mask;
}

void prof_comm_finalize(CommState* c) {
  const Loaded& l = plugin();
  if (c->prof_ctx == nullptr) return;
  if (l.version == 6)
    l.v6->finalize(c->prof_ctx);
  else
    l.v5->finalize(c->prof_ctx);
  c->prof_ctx = nullptr;
}

// NCCL checks the mask before each event; steps and ops are reported when either is active.
void* prof_start(CommState* c, uint64_t type, void* parent, const ProfDescr& p) {
  if (c->prof_ctx == nullptr) return nullptr;
  uint64_t want = type == ap::kEvProxyOp ? (ap::kEvProxyOp | ap::kEvProxyStep) : type;
  if ((static_cast<uint64_t>(c->prof_mask) & want) == 0) return nullptr;
  const Loaded& l = plugin();
  void* h = nullptr;
  if (l.version == 6) {
    ap::DescrV6 d;
    fill(&d, type, parent, c->rank, p);
    l.v6->startEvent(c->prof_ctx, &h, &d);
  } else {
    ap::DescrV5 d;
    fill(&d, type, parent, c->rank, p);
    l.v5->startEvent(c->prof_ctx, &h, &d);
  }
  return h;
}

void prof_stop(void* handle) {
  if (handle == nullptr) return;
  const Loaded& l = plugin();
  if (l.version == 6)
    l.v6->stopEvent(handle);
  else if (l.version == 5)
    l.v5->stopEvent(handle);
}

void prof_state(void* handle, int state, uint64_t trans_size) {
  if (handle == nullptr) return;
  ap::StateArgs a;
  memset(&a, 0, sizeof a);
  a.proxyStep.transSize = trans_size;
  const Loaded& l = plugin();
  if (l.version == 6)
    l.v6->recordEventState(handle, state, &a);
  else if (l.version == 5)
    l.v5->recordEventState(handle, state, &a);
}

}  // namespace frsim
