// The emulation loads a profiler plugin as NCCL does: NCCL_PROFILER_PLUGIN names the library (a
// path or file name, else libnccl-profiler-<name>.so; "none" turns it off; unset:
// libnccl-profiler.so), dlopen, then the versioned tables in the order of the NCCL release it
// plays: FRSIM_NCCL_VERSION=2.28 looks up ncclProfiler_v5 only; 2.29, 2.30, 2.31 look up v6, then
// v5; 2.32 looks up v7, then v6, then v5 (unset: the release of the nccl.h it was built with). A
// library with none of them (an older or unknown version) is not used: profiling is off, the job
// runs. Each communicator calls the plugin's init once every member joined, and every init gets
// the same process-wide activation mask, as NCCL's ncclProfilerEventMask: what one init writes
// there holds for every communicator. Events are started with the communicator's context even
// when the plugin returned a null one, as NCCL does. The declarations of the interface come from
// proto/fr/profiler_abi.h, which a test checks against the real libnccl.so.2 builds.
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <string>

#include "fr/profiler_abi.h"
#include "internal.h"

namespace frsim {
namespace {

namespace ap = fr::nccl_prof;

struct Loaded {
  int version = 0;  // 0: no plugin
  const ap::PluginV5* v5 = nullptr;
  const ap::PluginV6* v6 = nullptr;
  const ap::PluginV7* v7 = nullptr;
};

// The process-wide activation mask (NCCL's ncclProfilerEventMask): every init gets its address.
int g_event_mask;

// The minor release whose lookup order to follow: FRSIM_NCCL_VERSION ("2.30", "2.30.7"), else
// the nccl.h this was built with.
int release_minor() {
  const char* v = getenv("FRSIM_NCCL_VERSION");
  int major = 0, minor = 0;
  if (v != nullptr && sscanf(v, "%d.%d", &major, &minor) == 2 && major == 2) return minor;
  return (NCCL_VERSION_CODE / 100) % 100;
}

// Calls `f` with the loaded table, whichever version it is.
template <class F>
void with_table(const Loaded& l, F f) {
  if (l.version == 7)
    f(l.v7);
  else if (l.version == 6)
    f(l.v6);
  else if (l.version == 5)
    f(l.v5);
}

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
  const int minor = release_minor();
  if (minor >= 32 && (l.v7 = static_cast<const ap::PluginV7*>(dlsym(lib, "ncclProfiler_v7"))))
    l.version = 7;
  else if (minor >= 29 && (l.v6 = static_cast<const ap::PluginV6*>(dlsym(lib, "ncclProfiler_v6"))))
    l.version = 6;
  else if ((l.v5 = static_cast<const ap::PluginV5*>(dlsym(lib, "ncclProfiler_v5"))))
    l.version = 5;
  if (l.version == 0) {
    info("External profiler plugin %s is unsupported",
         name != nullptr ? name : "libnccl-profiler.so");
    dlclose(lib);
    return l;
  }
  // NCCL's own lines (2.2x-2.32): which interface it took, then that the plugin is loaded.
  char loaded[192];
  with_table(l, [&](const auto* t) {
    snprintf(loaded, sizeof loaded, "PROFILER/Plugin: Loaded %s (v%d)", t->name, l.version);
  });
  info("%s", loaded);
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
  if (l.version == 0 || c->prof_on) return;
  const uint64_t id = c->nccl_hash != 0 ? c->nccl_hash : c->key;
  int r = 0;
  void* ctx = nullptr;
  with_table(l, [&](auto* t) {
    r = t->init(&ctx, id, &g_event_mask, c->name.c_str(), 1, c->nranks, c->rank, logger);
  });
  if (r != 0) return;  // as NCCL: a failed init profiles nothing
  c->prof_ctx = ctx;
  c->prof_on = true;
}

void prof_comm_finalize(CommState* c) {
  if (!c->prof_on) return;
  // As NCCL: finalize only for a context the plugin gave.
  if (c->prof_ctx != nullptr) with_table(plugin(), [&](auto* t) { t->finalize(c->prof_ctx); });
  c->prof_ctx = nullptr;
  c->prof_on = false;
}

template <class D>
void* start_with(const ap::PluginTable<D>* t, void* ctx, uint64_t type, void* parent, int rank,
                 const ProfDescr& p) {
  D d;
  fill(&d, type, parent, rank, p);
  void* h = nullptr;
  t->startEvent(ctx, &h, &d);
  return h;
}

// NCCL checks the process-wide mask before each event; steps and ops are reported when either
// is active. The context goes as the plugin gave it, null included.
void* prof_start(CommState* c, uint64_t type, void* parent, const ProfDescr& p) {
  if (!c->prof_on) return nullptr;
  uint64_t want = type == ap::kEvProxyOp ? (ap::kEvProxyOp | ap::kEvProxyStep) : type;
  const int mask = __atomic_load_n(&g_event_mask, __ATOMIC_RELAXED);
  if ((static_cast<uint64_t>(mask) & want) == 0) return nullptr;
  void* h = nullptr;
  with_table(plugin(), [&](auto* t) { h = start_with(t, c->prof_ctx, type, parent, c->rank, p); });
  return h;
}

void prof_stop(void* handle) {
  if (handle == nullptr) return;
  with_table(plugin(), [&](auto* t) { t->stopEvent(handle); });
}

void prof_state(void* handle, int state, uint64_t trans_size) {
  if (handle == nullptr) return;
  ap::StateArgs a;
  memset(&a, 0, sizeof a);
  a.proxyStep.transSize = trans_size;
  with_table(plugin(), [&](auto* t) { t->recordEventState(handle, state, &a); });
}

}  // namespace frsim
