// Modules and kernel launches of the CUDA driver emulation, for the subset fr uses:
// cuModuleLoadData (PTX text: the module's functions are its `.entry` names), cuModuleGetFunction,
// cuModuleUnload and cuLaunchKernel (on a stream, or captured into a graph as a kernel node that
// runs again at every launch of the graph, with the arguments copied at the call as CUDA does).
// The emulation cannot run PTX. A function runs only when the emulation has a host-side version of
// it, registered below under the kernel's name and written to do what its PTX does; launching any
// other function fails with CUDA_ERROR_NOT_SUPPORTED, and nothing is queued.
#include <stdlib.h>
#include <string.h>

#include <string>
#include <unordered_set>

#include "driver.h"

using namespace frsim;

namespace {

// A host-side version of a kernel: its parameters' sizes (as the PTX declares them, in order) and
// what one launch does with their values over the whole grid.
struct Emulated {
  const char* name;
  std::vector<size_t> params;
  void (*run)(const std::vector<uint64_t>& args, unsigned threads);
};

// fr_graph_replay (agent/replay_kernel.h): one replay of a CUDA graph. Thread 0 adds one to the
// graph's replay counter; thread i < n resets communicator entry i's graph positions to
// "replay started, no op reached" when they belong to this graph (their ordinal).
void graph_replay(const std::vector<uint64_t>& a, unsigned threads) {
  auto* counter = reinterpret_cast<uint64_t*>(a[0]);
  auto* comms = reinterpret_cast<uint8_t*>(a[1]);
  uint32_t n = static_cast<uint32_t>(a[2]);
  uint32_t ordinal = static_cast<uint32_t>(a[3]);
  const uint64_t zero = static_cast<uint64_t>(ordinal) << 32;
  for (uint32_t i = 0; i < n && i < threads; ++i) {
    for (size_t off : {size_t{216}, size_t{208}}) {  // graph_completed, then graph_started
      auto* w = reinterpret_cast<uint64_t*>(comms + size_t{i} * 256 + off);
      if (static_cast<uint32_t>(__atomic_load_n(w, __ATOMIC_RELAXED) >> 32) == ordinal)
        __atomic_store_n(w, zero, __ATOMIC_RELAXED);
    }
  }
  if (threads > 0)
    __atomic_store_n(counter, __atomic_load_n(counter, __ATOMIC_RELAXED) + 1, __ATOMIC_RELEASE);
}

const Emulated kEmulated[] = {
    {"fr_graph_replay", {8, 8, 4, 4}, graph_replay},
};

const Emulated* emulation_of(const std::string& name) {
  for (const auto& e : kEmulated)
    if (name == e.name) return &e;
  return nullptr;
}

}  // namespace

struct CUfunc_st {
  std::string name;
  const Emulated* emulated;  // null: the emulation cannot run it
};

struct CUmod_st {
  std::vector<std::string> entries;
  std::vector<std::unique_ptr<CUfunc_st>> functions;
};

namespace {

// Live handles: a handle is checked against these before use, so a stale or foreign one is
// refused (CUDA_ERROR_INVALID_HANDLE) instead of read. Queued and captured launches hold copies
// of what they need, never a handle, so unloading frees the module and its functions at once.
std::mutex g_modules_mu;
std::unordered_set<CUmodule> g_modules;
std::unordered_set<CUfunction> g_functions;
// Modules still loaded when the process ends are freed with it, as the driver frees a context's
// modules when the context goes (a caller such as the agent keeps its module for its lifetime).
struct FreeAtExit {
  ~FreeAtExit() {
    std::lock_guard<std::mutex> g(g_modules_mu);
    for (CUmodule m : g_modules) delete m;
    g_modules.clear();
    g_functions.clear();
  }
} g_free_at_exit;

// The `.entry NAME` names of PTX text; false when the text is not PTX (no `.version`).
bool ptx_entries(const char* ptx, std::vector<std::string>* out) {
  std::string text(ptx);
  if (text.find(".version") == std::string::npos) return false;
  for (size_t at = text.find(".entry"); at != std::string::npos; at = text.find(".entry", at + 6)) {
    size_t b = at + 6;
    while (b < text.size() && (text[b] == ' ' || text[b] == '\t' || text[b] == '\n')) ++b;
    size_t e = b;
    while (e < text.size() && (isalnum(static_cast<unsigned char>(text[e])) || text[e] == '_' ||
                               text[e] == '$' || text[e] == '.'))
      ++e;
    if (e > b) out->emplace_back(text.substr(b, e - b));
  }
  return true;
}

}  // namespace

FRSIM_API CUresult cuModuleLoadData(CUmodule* module, const void* image) {
  if (module == nullptr || image == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ready();
  if (tls_ctx_stack.empty() || tls_ctx_stack.back() == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  // FRSIM_NO_MODULES: a driver that cannot load modules (tests of the callers' fallbacks).
  const char* off = getenv("FRSIM_NO_MODULES");
  if (off != nullptr && *off != '\0' && strcmp(off, "0") != 0) return CUDA_ERROR_NOT_SUPPORTED;
  auto m = std::make_unique<CUmod_st>();
  if (!ptx_entries(static_cast<const char*>(image), &m->entries))
    return CUDA_ERROR_INVALID_IMAGE;  // cubin and fatbin images are not emulated
  std::lock_guard<std::mutex> g(g_modules_mu);
  *module = m.release();
  g_modules.insert(*module);
  return CUDA_SUCCESS;
}

FRSIM_API CUresult cuModuleGetFunction(CUfunction* fn, CUmodule module, const char* name) {
  if (fn == nullptr || name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> g(g_modules_mu);
  if (!g_modules.count(module)) return CUDA_ERROR_INVALID_HANDLE;
  for (const auto& f : module->functions)
    if (f->name == name) {
      *fn = f.get();
      return CUDA_SUCCESS;
    }
  for (const auto& e : module->entries)
    if (e == name) {
      module->functions.push_back(std::make_unique<CUfunc_st>(CUfunc_st{e, emulation_of(e)}));
      *fn = module->functions.back().get();
      g_functions.insert(*fn);
      return CUDA_SUCCESS;
    }
  return CUDA_ERROR_NOT_FOUND;
}

FRSIM_API CUresult cuModuleUnload(CUmodule module) {
  std::lock_guard<std::mutex> g(g_modules_mu);
  if (!g_modules.erase(module)) return CUDA_ERROR_INVALID_HANDLE;
  for (const auto& f : module->functions) g_functions.erase(f.get());
  delete module;
  return CUDA_SUCCESS;
}

FRSIM_API CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                  unsigned by, unsigned bz, unsigned shared_bytes, CUstream h,
                                  void** params, void** extra) {
  (void)shared_bytes;
  const Emulated* e = nullptr;
  {
    std::lock_guard<std::mutex> g(g_modules_mu);
    if (!g_functions.count(f)) return CUDA_ERROR_INVALID_HANDLE;
    e = f->emulated;
  }
  if (gx == 0 || gy == 0 || gz == 0 || bx == 0 || by == 0 || bz == 0 || bx * by * bz > 1024)
    return CUDA_ERROR_INVALID_VALUE;
  if (extra != nullptr) return CUDA_ERROR_NOT_SUPPORTED;  // packed arguments: not emulated
  if (e == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  auto st = get_stream(h);
  if (!st) return CUDA_ERROR_INVALID_HANDLE;
  if (!e->params.empty() && params == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::vector<uint64_t> args;  // copied now: later changes to the caller's values do not count
  for (size_t i = 0; i < e->params.size(); ++i) {
    uint64_t v = 0;
    memcpy(&v, params[i], e->params[i]);
    args.push_back(v);
  }
  unsigned threads = gx * gy * gz * bx * by * bz;
  return enqueue(st, [e, args, threads] { e->run(args, threads); });
}
