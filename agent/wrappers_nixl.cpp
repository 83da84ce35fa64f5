// NIXL wrappers: the methods of nixlAgent (NIXL 1.5, libnixl.so) that make, post, poll and release
// transfers, exported under their mangled names so that the Python binding, torch's transport and
// libnixl_capi.so (which call them through the PLT) reach the agent first. The C API needs no
// wrappers of its own: nixl_capi_post_xfer_req and the others call these same methods.
//
// libnixl.so is loaded RTLD_LOCAL by Python, so RTLD_NEXT does not find it: the real functions are
// looked up on the library's own handle (dlopen RTLD_NOLOAD), all at once at the first call. Only
// then does recording start; a process that never calls NIXL never reaches this file. Should a
// function the agent needs be missing (another NIXL version, another signature), or a layout the
// agent reads (nixl_abi.h) fail its checks, NIXL recording turns off for good with one log line
// and the flag FR_LOG_F_NIXL_OFF; the calls keep being forwarded untouched.
#include <dlfcn.h>
#include <sched.h>
#include <string.h>
#include <sys/mman.h>

#include "nixl.h"
#include "nixl_abi.h"
#include "spin_lock.h"
#include "wrappers.h"

namespace fr::agent {

constinit NixlState g_nixl = {};

namespace {

namespace nx = ::fr::agent::nixl;

const char* const kNames[kNixlFns] = {
#define FR_NIXL_FN(fn, wrap, wrapper, op, ret, mangled, ...) mangled,
#include "nixl_api.def"
};
// The functions a transfer's record needs: without any of them NIXL is not recorded.
const NixlFn kRequired[] = {kCtorC1, kCreateXfer, kPost, kStatus, kRelease};

void tlock() { spin_lock(&g_nixl.lock); }
void tunlock() { spin_unlock(&g_nixl.lock); }

void resolve() {
  void* h = os_dlopen("libnixl.so", RTLD_NOLOAD | RTLD_LAZY);
  for (int i = 0; i < kNixlFns; ++i)
    g_nixl.real[i] = h != nullptr ? real_dlsym(h, kNames[i]) : nullptr;
  if (h != nullptr) os_dlclose(h);  // the library stays loaded: its callers hold it
  const char* missing = h == nullptr ? "libnixl.so is not loaded" : nullptr;
  for (NixlFn f : kRequired)
    if (missing == nullptr && g_nixl.real[f] == nullptr) missing = kNames[f];
  if (missing != nullptr) {
    notice_log("NIXL: %s; this NIXL is not the supported 1.5 ABI: its transfers are not recorded",
               missing);
    set_log_flags(FR_LOG_F_NIXL_OFF, 0);
    __atomic_store_n(&g_nixl.mode, (int)kNixlOff, __ATOMIC_RELEASE);
    return;
  }
  set_log_flags(FR_LOG_F_NIXL, 0);
  __atomic_store_n(&g_nixl.mode, (int)kNixlOn, __ATOMIC_RELEASE);
}

// The real function `f`, resolving them all at the first call.
void* real_of(NixlFn f) {
  int m = __atomic_load_n(&g_nixl.mode, __ATOMIC_ACQUIRE);
  if (__builtin_expect(m >= kNixlOn, 1)) return g_nixl.real[f];
  int expected = kNixlUnresolved;
  if (__atomic_compare_exchange_n(&g_nixl.mode, &expected, (int)kNixlResolving, false,
                                  __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
    resolve();
  while (__atomic_load_n(&g_nixl.mode, __ATOMIC_ACQUIRE) == kNixlResolving) sched_yield();
  return g_nixl.real[f];
}

bool nixl_on() { return __atomic_load_n(&g_nixl.mode, __ATOMIC_ACQUIRE) == kNixlOn; }

// A layout check failed: recording stops, forwarding goes on.
void turn_off(const char* why) {
  int expected = kNixlOn;
  if (__atomic_compare_exchange_n(&g_nixl.mode, &expected, (int)kNixlOff, false, __ATOMIC_ACQ_REL,
                                  __ATOMIC_ACQUIRE)) {
    notice_log("NIXL: %s does not read as NIXL 1.5 lays it out; its transfers are not recorded",
               why);
    set_log_flags(FR_LOG_F_NIXL_OFF, FR_LOG_F_NIXL);
  }
}

// Copies a std::string's bytes into `dst` (cap bytes, NUL-terminated, cut to fit); false when
// the string does not read as one.
bool copy_str(char* dst, size_t cap, const nx::StdString* s) {
  memset(dst, 0, cap);
  if (s == nullptr) return true;
  if (!nx::string_ok(s)) return false;
  memcpy(dst, s->data, s->size < cap - 1 ? s->size : cap - 1);
  return true;
}

// Records guarded and NIXL on: `active` false means a plain forward.
struct NixlScope {
  Scope s;
  bool active;
  NixlScope() : active(s.active && nixl_on()) {}
};

const char* agent_name(const void* agent) {
  for (auto& a : g_nixl.agents)
    if (__atomic_load_n(&a.agent, __ATOMIC_ACQUIRE) == (uint64_t)(uintptr_t)agent) return a.name;
  return "";
}

const char* backend_name(uint64_t handle) {
  for (auto& b : g_nixl.backends)
    if (__atomic_load_n(&b.handle, __ATOMIC_ACQUIRE) == handle) return b.name;
  return "";
}

// ---- what a request is made of -----------------------------------------------------------------

// The notification the optional arguments carry (notif, else the legacy notifMsg/hasNotif) into
// x.notif and x.flags; false when they do not read as NIXL 1.5's.
bool read_notif(const nx::OptArgs* extra, fr_xfer_entry& x) {
  if (extra == nullptr) return true;
  const nx::StdString* s = extra->notif.engaged ? &extra->notif.value
                           : extra->has_notif   ? &extra->notif_msg
                                                : nullptr;
  if (s == nullptr) return true;
  if (!nx::string_ok(s)) return false;
  x.flags |= FR_XFER_F_NOTIF | (s->size > sizeof x.notif ? FR_XFER_F_NOTIF_CUT : 0u);
  memset(x.notif, 0, sizeof x.notif);
  memcpy(x.notif, s->data, s->size < sizeof x.notif ? s->size : sizeof x.notif);
  return true;
}

// The request's backend: the one the caller named, else the one NIXL chose.
void read_backend(const void* self, void* req, const nx::OptArgs* extra, fr_xfer_entry& x) {
  uint64_t handle = 0;
  if (extra != nullptr && nx::vector_ok<void*>(extra->backends, 64) &&
      extra->backends.end - extra->backends.begin == sizeof(void*))
    memcpy(&handle, extra->backends.begin, sizeof handle);
  auto query = (int (*)(const void*, const void*, void**))g_nixl.real[kQueryBackend];
  void* chosen = nullptr;
  if (handle == 0 && query != nullptr && query(self, req, &chosen) == nx::kSuccess)
    handle = (uint64_t)(uintptr_t)chosen;
  const char* name = backend_name(handle);
  memcpy(x.backend, name, strnlen(name, sizeof x.backend - 1));
}

// The fixed part common to both ways of making a request.
void start_fixed(fr_xfer_entry& x, const void* self, int op, uint64_t call_ns) {
  x.create_ns = call_ns;
  x.op = op == 0 ? FR_XFER_OP_READ : FR_XFER_OP_WRITE;
  x.tid = current_tid();
  x.agent_handle = (uint64_t)(uintptr_t)self;
  const char* name = agent_name(self);
  memcpy(x.local_agent, name, strnlen(name, FR_NAME_LEN - 1));
}

// Opens the entry of a request just made (res is what NIXL returned) and writes its record.
void made(fr_op op, fr_xfer_entry& x, void* const* req, int res, uint64_t call_ns) {
  uint64_t id = 0;
  if (res == nx::kSuccess && req != nullptr && *req != nullptr) {
    fr_xfer_entry* e = xfer_open((uint64_t)(uintptr_t)*req, x);
    if (e != nullptr) id = x.id;
  }
  nixl_record(op, call_ns, id, x.bytes, 0, res);
}

Dlist* dlist_of(const void* handle) {
  for (auto& d : g_nixl.dlists)
    if (d.handle == (uint64_t)(uintptr_t)handle) return &d;
  return nullptr;
}

// Bytes of the descriptors `idx` of prepared list `d` (false when unknown).
bool dlist_bytes(const Dlist* d, const int* idx, size_t n, uint64_t* bytes) {
  *bytes = 0;
  if (d == nullptr || d->lens == nullptr || (n != 0 && idx == nullptr)) return false;
  for (size_t i = 0; i < n; ++i) {
    if (idx[i] < 0 || (uint32_t)idx[i] >= d->n) return false;
    *bytes += d->lens[idx[i]];
  }
  return true;
}

// A prepared list is remembered with its remote agent and descriptor lengths (basic lists).
void remember_dlist(const nx::StdString* agent, const nx::DescList* descs, bool basic,
                    void* const* out) {
  if (out == nullptr || *out == nullptr) return;
  char name[FR_NAME_LEN];
  if (!copy_str(name, sizeof name, agent)) return turn_off("prepXferDlist's agent name");
  uint32_t n = 0;
  uint64_t* lens = nullptr;
  uint64_t map_bytes = 0;
  if (basic && descs != nullptr) {
    if (!nx::vector_ok<nx::BasicDesc>(descs->descs, 1u << 22))
      return turn_off("prepXferDlist's descriptor list");
    const auto* b = (const nx::BasicDesc*)descs->descs.begin;
    n = (uint32_t)((descs->descs.end - descs->descs.begin) / sizeof(nx::BasicDesc));
    map_bytes = ((uint64_t)n * 8 + 4095) & ~4095ull;
    void* m = n != 0 ? mmap(nullptr, map_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                            -1, 0)
                     : MAP_FAILED;
    if (m != MAP_FAILED) {
      lens = (uint64_t*)m;
      for (uint32_t i = 0; i < n; ++i) lens[i] = b[i].len;
    } else {
      map_bytes = 0;
    }
  }
  tlock();
  Dlist* d = dlist_of(nullptr);  // a free one
  if (d != nullptr) {
    d->handle = (uint64_t)(uintptr_t)*out;
    memcpy(d->agent, name, sizeof name);
    d->n = n;
    d->lens = lens;
    d->map_bytes = map_bytes;
  }
  tunlock();
  if (d == nullptr && lens != nullptr) munmap(lens, map_bytes);
}

void forget_dlist(const void* handle) {
  tlock();
  Dlist* d = handle != nullptr ? dlist_of(handle) : nullptr;
  Dlist copy = {};
  if (d != nullptr) {
    copy = *d;
    *d = Dlist{};
  }
  tunlock();
  if (copy.lens != nullptr) munmap(copy.lens, copy.map_bytes);
}

// A prepared request: its remote agent from the remote list, bytes from the local list's lengths.
void prepped_fixed(fr_xfer_entry& x, const void* local, const int* li, size_t ln,
                   const void* remote) {
  x.flags |= FR_XFER_F_PREPPED;
  x.descs = (uint32_t)ln;
  tlock();
  const Dlist* r = dlist_of(remote);
  if (r != nullptr) memcpy(x.remote_agent, r->agent, sizeof x.remote_agent);
  if (!dlist_bytes(dlist_of(local), li, ln, &x.bytes)) x.flags |= FR_XFER_F_BYTES_UNKNOWN;
  tunlock();
}

// The state a status code puts a posted transfer in.
uint32_t state_of(int status, bool after_post) {
  if (status == nx::kInProg) return after_post ? FR_XFER_POSTED : FR_XFER_IN_PROGRESS;
  return status == nx::kSuccess ? FR_XFER_DONE : FR_XFER_ERROR;
}

}  // namespace
}  // namespace fr::agent

using namespace fr::agent;
namespace nx = fr::agent::nixl;

// The wrappers, exported under the methods' mangled names (the WRAP rows of nixl_api.def). A row
// without its wrapper below is an undefined symbol: kWrapped makes the link refuse it (-z defs).
#define FR_NIXL_API extern "C" __attribute__((visibility("default")))
#define FR_NIXL_DECL_WRAP(wrapper, ret, mangled, ...) \
  FR_NIXL_API ret wrapper(FR_NCCL_PARAMS(__VA_ARGS__)) __asm__(mangled);
#define FR_NIXL_DECL_CALL(wrapper, ret, mangled, ...)
#define FR_NIXL_FN(fn, wrap, wrapper, op, ret, mangled, ...) \
  FR_NIXL_DECL_##wrap(wrapper, ret, mangled, __VA_ARGS__)
#include "nixl_api.def"
namespace {
#define FR_NIXL_ADDR_WRAP(wrapper) (const void*)&wrapper,
#define FR_NIXL_ADDR_CALL(wrapper)
__attribute__((used)) const void* const kWrapped[] = {
#define FR_NIXL_FN(fn, wrap, wrapper, ...) FR_NIXL_ADDR_##wrap(wrapper)
#include "nixl_api.def"
};
}  // namespace

#define FR_NIXL_REAL(f, type)   \
  auto real = (type)real_of(f); \
  if (__builtin_expect(real == nullptr, 0)) return -9; /* NIXL_ERR_NOT_SUPPORTED */

// ---- agents and backends -------------------------------------------------------------------------

namespace {
void ctor(NixlFn f, void* self, const nx::StdString* name, const void* config) {
  auto real = (void (*)(void*, const nx::StdString*, const void*))real_of(f);
  if (real == nullptr) real = (void (*)(void*, const nx::StdString*, const void*))real_of(kCtorC1);
  if (real == nullptr) return;  // cannot happen: the caller linked against this constructor
  const uint64_t call_ns = now_ns();
  real(self, name, config);  // NIXL's constructor may throw: nothing of the agent's is on hold yet
  NixlScope s;
  if (!s.active) return;
  char copy[FR_NAME_LEN];
  if (!copy_str(copy, sizeof copy, name)) return turn_off("nixlAgent's name");
  tlock();
  AgentName* slot = nullptr;
  for (auto& a : g_nixl.agents)
    if (a.agent == (uint64_t)(uintptr_t)self || (slot == nullptr && a.agent == 0)) slot = &a;
  if (slot != nullptr) {
    memcpy(slot->name, copy, sizeof copy);
    __atomic_store_n(&slot->agent, (uint64_t)(uintptr_t)self, __ATOMIC_RELEASE);
  }
  tunlock();
  nixl_record(FR_OP_NIXL_CREATE_AGENT, call_ns, 0, 0, 0, 0);
}
}  // namespace

void fr_nixl_ctor_c1(void* self, const nx::StdString* name, const void* config) {
  ctor(kCtorC1, self, name, config);
}
void fr_nixl_ctor_c2(void* self, const nx::StdString* name, const void* config) {
  ctor(kCtorC2, self, name, config);
}

int fr_nixl_create_backend(void* self, const nx::StdString* type, const void* params, void** out) {
  FR_NIXL_REAL(kCreateBackend, int (*)(void*, const nx::StdString*, const void*, void**));
  NixlScope s;
  if (!s.active) return real(self, type, params, out);
  const uint64_t call_ns = now_ns();
  int res = real(self, type, params, out);
  if (res == nx::kSuccess && out != nullptr && *out != nullptr) {
    char name[16];
    if (!copy_str(name, sizeof name, type)) {
      turn_off("createBackend's type");
      return res;
    }
    tlock();
    for (auto& b : g_nixl.backends)
      if (b.handle == 0) {
        memcpy(b.name, name, sizeof name);
        __atomic_store_n(&b.handle, (uint64_t)(uintptr_t)*out, __ATOMIC_RELEASE);
        break;
      }
    tunlock();
  }
  nixl_record(FR_OP_NIXL_CREATE_BACKEND, call_ns, 0, 0, 0, res);
  return res;
}

// ---- transfer requests ---------------------------------------------------------------------------

int fr_nixl_create_xfer(const void* self, const int* op, const nx::DescList* local,
                        const nx::DescList* remote, const nx::StdString* remote_agent, void** req,
                        const nx::OptArgs* extra) {
  FR_NIXL_REAL(kCreateXfer,
               int (*)(const void*, const int*, const nx::DescList*, const nx::DescList*,
                       const nx::StdString*, void**, const nx::OptArgs*));
  NixlScope s;
  if (!s.active) return real(self, op, local, remote, remote_agent, req, extra);
  const uint64_t call_ns = now_ns();
  const int res = real(self, op, local, remote, remote_agent, req, extra);
  fr_xfer_entry x = {};
  start_fixed(x, self, op != nullptr ? *op : 0, call_ns);
  if (local == nullptr || !nx::vector_ok<nx::BasicDesc>(local->descs, 1u << 24) ||
      !copy_str(x.remote_agent, sizeof x.remote_agent, remote_agent) || !read_notif(extra, x)) {
    turn_off("createXferReq's arguments");
    return res;
  }
  const auto* b = (const nx::BasicDesc*)local->descs.begin;
  x.descs = (uint32_t)((local->descs.end - local->descs.begin) / sizeof(nx::BasicDesc));
  for (uint32_t i = 0; i < x.descs; ++i) x.bytes += b[i].len;
  if (res == nx::kSuccess && req != nullptr) read_backend(self, *req, extra, x);
  made(FR_OP_NIXL_CREATE_XFER, x, req, res, call_ns);
  return res;
}

int fr_nixl_make_xfer_span(const void* self, int op, const void* local, nx::IntSpan li,
                           const void* remote, nx::IntSpan ri, void** req,
                           const nx::OptArgs* extra) {
  FR_NIXL_REAL(kMakeXferSpan, int (*)(const void*, int, const void*, nx::IntSpan, const void*,
                                      nx::IntSpan, void**, const nx::OptArgs*));
  NixlScope s;
  if (!s.active) return real(self, op, local, li, remote, ri, req, extra);
  const uint64_t call_ns = now_ns();
  const int res = real(self, op, local, li, remote, ri, req, extra);
  fr_xfer_entry x = {};
  start_fixed(x, self, op, call_ns);
  if (!read_notif(extra, x)) {
    turn_off("makeXferReq's optional arguments");
    return res;
  }
  prepped_fixed(x, local, li.data, li.size, remote);
  if (res == nx::kSuccess && req != nullptr) read_backend(self, *req, extra, x);
  made(FR_OP_NIXL_MAKE_XFER, x, req, res, call_ns);
  return res;
}

int fr_nixl_make_xfer_vec(const void* self, const int* op, const void* local,
                          const nx::StdVector* li, const void* remote, const nx::StdVector* ri,
                          void** req, const nx::OptArgs* extra) {
  FR_NIXL_REAL(kMakeXferVec,
               int (*)(const void*, const int*, const void*, const nx::StdVector*, const void*,
                       const nx::StdVector*, void**, const nx::OptArgs*));
  NixlScope s;
  if (!s.active) return real(self, op, local, li, remote, ri, req, extra);
  const uint64_t call_ns = now_ns();
  const int res = real(self, op, local, li, remote, ri, req, extra);
  fr_xfer_entry x = {};
  start_fixed(x, self, op != nullptr ? *op : 0, call_ns);
  if (li == nullptr || !nx::vector_ok<int>(*li, 1u << 24) || !read_notif(extra, x)) {
    turn_off("makeXferReq's arguments");
    return res;
  }
  prepped_fixed(x, local, (const int*)li->begin, (size_t)(li->end - li->begin) / sizeof(int),
                remote);
  if (res == nx::kSuccess && req != nullptr) read_backend(self, *req, extra, x);
  made(FR_OP_NIXL_MAKE_XFER, x, req, res, call_ns);
  return res;
}

int fr_nixl_post(const void* self, void* req, const nx::OptArgs* extra) {
  FR_NIXL_REAL(kPost, int (*)(const void*, void*, const nx::OptArgs*));
  NixlScope s;
  if (!s.active) return real(self, req, extra);
  const uint64_t call_ns = now_ns();
  fr_xfer_entry* e = xfer_find((uint64_t)(uintptr_t)req);
  if (e != nullptr) {  // in flight from here: the state says so before NIXL returns
    __atomic_store_n(&e->post_ns, call_ns, __ATOMIC_RELAXED);
    __atomic_store_n(&e->done_ns, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&e->status_calls, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&e->state, (uint32_t)FR_XFER_POSTED, __ATOMIC_RELEASE);
  }
  const int res = real(self, req, extra);
  if (e == nullptr) {
    nixl_record(FR_OP_NIXL_POST_XFER, call_ns, 0, 0, 0, res);
    return res;
  }
  const uint64_t posts = __atomic_add_fetch(&e->posts, 1, __ATOMIC_RELAXED);
  __atomic_store_n(&e->status, (int32_t)res, __ATOMIC_RELAXED);
  if (res != nx::kInProg) __atomic_store_n(&e->done_ns, now_ns(), __ATOMIC_RELAXED);
  __atomic_store_n(&e->state, state_of(res, true), __ATOMIC_RELEASE);
  fr_xfer_entry fixed;
  fr_copy_words_out((uint64_t*)&fixed, (const uint64_t*)e, sizeof fixed / 8);
  if (extra != nullptr && (extra->notif.engaged || extra->has_notif)) {
    if (!read_notif(extra, fixed))
      turn_off("postXferReq's optional arguments");
    else
      xfer_republish(e, fixed);
  }
  nixl_record(FR_OP_NIXL_POST_XFER, call_ns, fixed.id, fixed.bytes, posts, res);
  return res;
}

int fr_nixl_status(const void* self, void* req) {
  FR_NIXL_REAL(kStatus, int (*)(const void*, void*));
  NixlScope s;
  if (!s.active) return real(self, req);
  const int res = real(self, req);
  fr_xfer_entry* e = xfer_find((uint64_t)(uintptr_t)req);
  if (e == nullptr) return res;
  // Polled in loops: one clock read and a few stores, a record only when the status changes.
  const uint64_t now = now_ns();
  __atomic_store_n(&e->status_ns, now, __ATOMIC_RELAXED);
  __atomic_add_fetch(&e->status_calls, 1, __ATOMIC_RELAXED);
  const uint32_t state = state_of(res, false);
  const int32_t before = __atomic_exchange_n(&e->status, (int32_t)res, __ATOMIC_RELAXED);
  const uint32_t was = __atomic_exchange_n(&e->state, state, __ATOMIC_RELEASE);
  if (was == state && before == res) return res;
  if (res != nx::kInProg) __atomic_store_n(&e->done_ns, now, __ATOMIC_RELAXED);
  nixl_record(FR_OP_NIXL_XFER_STATUS, now, __atomic_load_n(&e->id, __ATOMIC_RELAXED),
              __atomic_load_n(&e->bytes, __ATOMIC_RELAXED),
              __atomic_load_n(&e->posts, __ATOMIC_RELAXED), res);
  return res;
}

int fr_nixl_release(const void* self, void* req) {
  FR_NIXL_REAL(kRelease, int (*)(const void*, void*));
  NixlScope s;
  if (!s.active) return real(self, req);
  const uint64_t call_ns = now_ns();
  fr_xfer_entry* e = xfer_find((uint64_t)(uintptr_t)req);
  const int res = real(self, req);
  uint64_t id = 0;
  if (e != nullptr) {
    id = __atomic_load_n(&e->id, __ATOMIC_RELAXED);
    if (res == nx::kSuccess)
      __atomic_store_n(&e->state, (uint32_t)FR_XFER_RELEASED, __ATOMIC_RELEASE);
  }
  nixl_record(FR_OP_NIXL_RELEASE_XFER, call_ns, id, 0, 0, res);
  return res;
}

// ---- prepared lists, notifications, memory and metadata ------------------------------------------

// The four prepXferDlist overloads (their rows name fr_nixl_prep_<fn>).
#define FR_NIXL_PREP(f, with_agent, basic)                                                       \
  int fr_nixl_prep_##f(const void* self, FR_PREP_AGENT_##with_agent const nx::DescList* descs,   \
                       void** out, const nx::OptArgs* extra) {                                   \
    FR_NIXL_REAL(f, int (*)(const void*, FR_PREP_AGENT_##with_agent const nx::DescList*, void**, \
                            const nx::OptArgs*));                                                \
    NixlScope s;                                                                                 \
    if (!s.active) return real(self, FR_PREP_PASS_##with_agent descs, out, extra);               \
    const uint64_t call_ns = now_ns();                                                           \
    const int res = real(self, FR_PREP_PASS_##with_agent descs, out, extra);                     \
    if (res == nx::kSuccess) remember_dlist(FR_PREP_NAME_##with_agent, descs, basic, out);       \
    nixl_record(FR_OP_NIXL_PREP_XFER_DLIST, call_ns, 0, 0, 0, res);                              \
    return res;                                                                                  \
  }
#define FR_PREP_AGENT_1 const nx::StdString *agent,
#define FR_PREP_AGENT_0
#define FR_PREP_PASS_1 agent,
#define FR_PREP_PASS_0
#define FR_PREP_NAME_1 agent
#define FR_PREP_NAME_0 nullptr

FR_NIXL_PREP(kPrepLocal, 0, true)
FR_NIXL_PREP(kPrepStrideLocal, 0, false)
FR_NIXL_PREP(kPrepRemote, 1, true)
FR_NIXL_PREP(kPrepStrideRemote, 1, false)

int fr_nixl_release_dlist(const void* self, void* dlist) {
  FR_NIXL_REAL(kReleaseDlist, int (*)(const void*, void*));
  NixlScope s;
  if (s.active) forget_dlist(dlist);
  return real(self, dlist);
}

int fr_nixl_gen_notif(const void* self, const nx::StdString* remote, const nx::StdString* msg,
                      const nx::OptArgs* extra) {
  FR_NIXL_REAL(kGenNotif, int (*)(const void*, const nx::StdString*, const nx::StdString*,
                                  const nx::OptArgs*));
  NixlScope s;
  if (!s.active) return real(self, remote, msg, extra);
  const uint64_t call_ns = now_ns();
  const int res = real(self, remote, msg, extra);
  nixl_record(FR_OP_NIXL_GEN_NOTIF, call_ns, 0, nx::string_ok(msg) ? msg->size : 0, 0, res);
  return res;
}

// Polled in loops: a record only when notifications arrived (count: how many remote agents sent).
int fr_nixl_get_notifs(void* self, nx::StdHashtable* notifs, const nx::OptArgs* extra) {
  FR_NIXL_REAL(kGetNotifs, int (*)(void*, nx::StdHashtable*, const nx::OptArgs*));
  NixlScope s;
  if (!s.active || notifs == nullptr) return real(self, notifs, extra);
  const size_t before = notifs->element_count;
  const uint64_t call_ns = now_ns();
  const int res = real(self, notifs, extra);
  if (notifs->element_count > before && notifs->element_count < (1u << 20))
    nixl_record(FR_OP_NIXL_GET_NOTIFS, call_ns, 0, notifs->element_count - before, 0, res);
  return res;
}

int fr_nixl_register_mem(void* self, const nx::DescList* descs, const nx::OptArgs* extra) {
  FR_NIXL_REAL(kRegisterMem, int (*)(void*, const nx::DescList*, const nx::OptArgs*));
  NixlScope s;
  if (!s.active) return real(self, descs, extra);
  const uint64_t call_ns = now_ns();
  const int res = real(self, descs, extra);
  uint64_t bytes = 0;
  if (descs != nullptr && nx::vector_ok<nx::BlobDesc>(descs->descs, 1u << 24)) {
    const auto* b = (const nx::BlobDesc*)descs->descs.begin;
    for (const auto* p = b; (const uint8_t*)p < descs->descs.end; ++p) bytes += p->basic.len;
  }
  nixl_record(FR_OP_NIXL_REGISTER_MEM, call_ns, 0, bytes, 0, res);
  return res;
}

int fr_nixl_load_remote_md(void* self, const nx::StdString* blob, nx::StdString* name) {
  FR_NIXL_REAL(kLoadRemoteMD, int (*)(void*, const nx::StdString*, nx::StdString*));
  NixlScope s;
  if (!s.active) return real(self, blob, name);
  const uint64_t call_ns = now_ns();
  const int res = real(self, blob, name);
  nixl_record(FR_OP_NIXL_LOAD_REMOTE_MD, call_ns, 0, nx::string_ok(blob) ? blob->size : 0, 0, res);
  return res;
}
