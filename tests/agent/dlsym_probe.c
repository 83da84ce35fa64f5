/* A C program that reaches NCCL only through dlopen and dlsym, as JAX/XLA, Paddle and NVSHMEM
 * do. Built twice: bound to dlsym@GLIBC_2.34 (today's default; run with the agent preloaded) and,
 * with FR_DLSYM_OLD, to dlsym@GLIBC_2.2.5 (what programs linked on older systems import; linked
 * with the agent first, as preloading puts it). Prints key=value lines for dlsym_test.cpp.
 *
 *   dlsym_probe direct NCCL      one-rank communicator, an AllReduce, through dlsym'ed pointers
 *   dlsym_probe trampoline NCCL  the same through a lazy table: each entry resolves on first call
 *   dlsym_probe lookups NCCL     lookups whose answers must not change (other libraries, names
 *                                NCCL lacks, dlvsym, the agent's own handle, RTLD_NEXT/DEFAULT)
 *   dlsym_probe real NCCL        calls that work without a GPU, on a real libnccl.so.2
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The old version is named explicitly (the probe linked with the agent first would otherwise
 * bind unversioned, to the agent); the default build takes today's default, GLIBC_2.34. */
#if defined(FR_DLSYM_OLD) && defined(__x86_64__)
__asm__(".symver dlsym, dlsym@GLIBC_2.2.5");
#endif

typedef int (*get_version_fn)(int*);
typedef int (*get_unique_id_fn)(void*);
struct uid {  // ncclUniqueId, passed by value to ncclCommInitRank
  char internal[128];
};
typedef int (*init_rank_by_value_fn)(void**, int, struct uid, int);
typedef int (*all_reduce_fn)(const void*, void*, size_t, int, int, void*, void*);
typedef int (*comm_destroy_fn)(void*);
typedef const char* (*error_string_fn)(int);

/* Where a function lives: "agent" when it is one of libfr_agent.so's, else the file's base name. */
static const char* owner(const void* p) {
  Dl_info info;
  if (p == NULL || dladdr(p, &info) == 0 || info.dli_fname == NULL) return "none";
  if (strstr(info.dli_fname, "libfr_agent") != NULL) return "agent";
  const char* slash = strrchr(info.dli_fname, '/');
  return slash != NULL ? slash + 1 : info.dli_fname;
}

static void* must_open(const char* path, int mode) {
  void* h = dlopen(path, mode);
  if (h == NULL) {
    printf("error=dlopen %s: %s\n", path, dlerror());
    exit(2);
  }
  return h;
}

/* One communicator of one rank and an AllReduce on it, through the given functions. */
static int run_calls(get_unique_id_fn get_id, init_rank_by_value_fn init, all_reduce_fn all_reduce,
                     comm_destroy_fn destroy) {
  struct uid id;
  memset(&id, 0, sizeof id);
  int r = get_id(&id);
  printf("get_unique_id=%d\n", r);
  void* comm = NULL;
  r = init(&comm, 1, id, 0);
  printf("init=%d\n", r);
  if (r != 0) return 1;
  static float buf[16];
  r = all_reduce(buf, buf, 16, /* ncclFloat32 */ 7, /* ncclSum */ 0, comm, NULL);
  printf("all_reduce=%d\n", r);
  r = destroy(comm);
  printf("destroy=%d\n", r);
  return 0;
}

static int direct(const char* nccl) {
  void* h = must_open(nccl, RTLD_NOW | RTLD_LOCAL);
  void* get_id = dlsym(h, "ncclGetUniqueId");
  void* init = dlsym(h, "ncclCommInitRank");
  void* all_reduce = dlsym(h, "ncclAllReduce");
  void* destroy = dlsym(h, "ncclCommDestroy");
  printf("owner_get_unique_id=%s\nowner_init=%s\nowner_all_reduce=%s\nowner_destroy=%s\n",
         owner(get_id), owner(init), owner(all_reduce), owner(destroy));
  if (!get_id || !init || !all_reduce || !destroy) return 1;
  return run_calls((get_unique_id_fn)get_id, (init_rank_by_value_fn)init, (all_reduce_fn)all_reduce,
                   (comm_destroy_fn)destroy);
}

/* XLA's shape: a table of entry points, each first pointing at a resolver that looks the real
 * function up with dlsym on first use, stores it and calls it. */
static void* g_nccl;
static void* g_table[4];
static const char* const g_names[4] = {"ncclGetUniqueId", "ncclCommInitRank", "ncclAllReduce",
                                       "ncclCommDestroy"};
static int g_resolved;

static void* resolve(int i) {
  if (g_table[i] == NULL) {
    g_table[i] = dlsym(g_nccl, g_names[i]);
    ++g_resolved;
  }
  return g_table[i];
}
static int lazy_get_id(void* id) { return ((get_unique_id_fn)resolve(0))(id); }
static int lazy_init(void** c, int n, struct uid id, int r) {
  return ((init_rank_by_value_fn)resolve(1))(c, n, id, r);
}
static int lazy_all_reduce(const void* s, void* d, size_t n, int t, int o, void* c, void* st) {
  return ((all_reduce_fn)resolve(2))(s, d, n, t, o, c, st);
}
static int lazy_destroy(void* c) { return ((comm_destroy_fn)resolve(3))(c); }

static int trampoline(const char* nccl) {
  g_nccl = must_open(nccl, RTLD_LAZY | RTLD_LOCAL);
  printf("resolved_before=%d\n", g_resolved);
  int rc = run_calls(lazy_get_id, lazy_init, lazy_all_reduce, lazy_destroy);
  printf("resolved_after=%d\n", g_resolved);
  printf("owner_all_reduce=%s\n", owner(g_table[2]));
  return rc;
}

static const char* text(const char* s) { return s != NULL ? s : "(null)"; }

static int lookups(const char* nccl) {
  void* h = must_open(nccl, RTLD_NOW | RTLD_LOCAL);
  /* A name NCCL lacks: NULL, with the loader's own message. */
  dlerror();
  void* p = dlsym(h, "ncclNoSuchFunction");
  const char* err = dlerror();
  printf("missing=%s\nmissing_error=%s\n", p == NULL ? "null" : "found",
         err != NULL && strstr(err, "ncclNoSuchFunction") != NULL ? "names_it" : text(err));
  printf("error_after_read=%s\n", text(dlerror()));
  /* A successful lookup leaves no error behind. */
  p = dlsym(h, "ncclGetVersion");
  printf("clean_after_success=%s\n", dlerror() == NULL ? "yes" : "no");
  /* A name NCCL has and the agent does not wrap (its profiling alias): NCCL's own. */
  printf("owner_pnccl=%s\n", owner(dlsym(h, "pncclAllReduce")));
  /* dlvsym: NCCL's symbols carry no version, so a versioned lookup finds nothing, agent or not. */
  printf("dlvsym=%s\n", dlvsym(h, "ncclGetVersion", "GLIBC_2.2.5") == NULL ? "null" : "found");
  dlerror();
  /* Another library. */
  void* m = must_open("libm.so.6", RTLD_NOW | RTLD_LOCAL);
  printf("owner_cos=%s\n", owner(dlsym(m, "cos")));
  printf("libm_missing=%s\n", dlsym(m, "ncclAllReduce") == NULL ? "null" : "found");
  dlerror();
  /* The agent's own handle: its own functions, as for any library. */
  void* self = dlopen("libfr_agent.so", RTLD_NOW | RTLD_NOLOAD);
  printf("agent_handle=%s\n", self != NULL ? "yes" : "no");
  if (self != NULL) printf("owner_agent_lookup=%s\n", owner(dlsym(self, "ncclAllReduce")));
  dlerror();
  /* RTLD_DEFAULT and RTLD_NEXT see the caller: from this program, the next definition of an NCCL
   * function is the agent's (preloaded right after the program). */
  printf("owner_default=%s\n", owner(dlsym(RTLD_DEFAULT, "ncclAllReduce")));
  printf("owner_next=%s\n", owner(dlsym(RTLD_NEXT, "ncclAllReduce")));
  printf("next_getpid=%s\n", dlsym(RTLD_NEXT, "getpid") == (void*)&getpid ? "same" : "other");
  /* A function this NCCL lacks, called through the agent's export: what NCCL says of a feature it
   * cannot serve (ncclInvalidUsage). */
  typedef int (*query_fn)(void*, void*);
  query_fn query = (query_fn)dlsym(RTLD_DEFAULT, "ncclCommQueryProperties");
  printf("owner_query=%s\n", owner((void*)query));
  if (query != NULL) printf("missing_call=%d\n", query(NULL, NULL));
  printf("nccl_query=%s\n", dlsym(h, "ncclCommQueryProperties") == NULL ? "null" : "found");
  return 0;
}

static int real(const char* nccl) {
  void* h = must_open(nccl, RTLD_NOW | RTLD_LOCAL);
  void* gv = dlsym(h, "ncclGetVersion");
  void* es = dlsym(h, "ncclGetErrorString");
  void* gid = dlsym(h, "ncclGetUniqueId");
  printf("owner_get_version=%s\nowner_error_string=%s\nowner_get_unique_id=%s\n", owner(gv),
         owner(es), owner(gid));
  if (!gv || !es || !gid) return 1;
  int v = 0;
  int r = ((get_version_fn)gv)(&v);
  printf("get_version=%d\nversion=%d\n", r, v);
  printf("error_string=%s\n", ((error_string_fn)es)(/* ncclInvalidUsage */ 5));
  struct uid id;
  r = ((get_unique_id_fn)gid)(&id);
  printf("get_unique_id=%d\n", r);
  return 0;
}

int main(int argc, char** argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc < 3) {
    fprintf(stderr, "usage: %s direct|trampoline|lookups|real NCCL\n", argv[0]);
    return 2;
  }
  if (strcmp(argv[1], "direct") == 0) return direct(argv[2]);
  if (strcmp(argv[1], "trampoline") == 0) return trampoline(argv[2]);
  if (strcmp(argv[1], "lookups") == 0) return lookups(argv[2]);
  if (strcmp(argv[1], "real") == 0) return real(argv[2]);
  return 2;
}
