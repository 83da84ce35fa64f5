// Lookups on NCCL's own handle: the agent's dlsym and dlvsym; and the few glibc functions whose
// current symbol versions are newer than 2.28, bound to old ones (glibc_compat.h).
//
// Programs that dlopen libnccl.so.2 and call through dlsym(handle, "ncclAllReduce") (JAX/XLA's
// lazy trampolines, ctypes in vLLM and SGLang, Paddle's dynload, NVSHMEM) never reach a preloaded wrapper through the dynamic linker:
// they get NCCL's own function. So the agent exports dlsym and dlvsym, and when a lookup on a
// handle of libnccl.so.2 finds a function the agent wraps, it answers the wrapper instead.
// Everything else is left exactly as it was:
//  - RTLD_DEFAULT and RTLD_NEXT lookups depend on who calls (the caller's object and scope), so the
//    exported entry points jump to the real function without a frame of their own (a few lines
//    of assembly, x86-64 only; elsewhere the agent does not export dlsym and dlvsym at all);
//  - lookups on any other handle, and names NCCL lacks, return what the real call returned, with
//    dlerror untouched.
// The real functions are found by reading the dynamic symbol tables of the loaded objects, not
// with dlsym: the agent's own references to dlsym would bind to its own export (recursion), and
// a versioned reference would too (an unversioned definition satisfies every version). This file
// is built without sanitizer instrumentation: a sanitizer runtime calls dlsym while it starts.
#include <dlfcn.h>
#include <elf.h>
#include <link.h>

#include "agent.h"
#include "glibc_compat.h"  // this file alone: link-time optimization drops .symver elsewhere

using namespace fr::agent;

namespace {

// One loaded object's dynamic symbol table.
struct ElfObj {
  uintptr_t base;
  const ElfW(Sym) * symtab;
  const char* strtab;
  const ElfW(Half) * versym;
  uint32_t nsyms;
};

// Number of symbols in a DT_GNU_HASH table: past the highest bucket start, to the chain's end.
uint32_t gnu_hash_count(const uint32_t* h) {
  uint32_t nbuckets = h[0], symoffset = h[1], bloom_size = h[2];
  const uint32_t* buckets = (const uint32_t*)((const ElfW(Addr)*)(h + 4) + bloom_size);
  const uint32_t* chain = buckets + nbuckets;
  uint32_t last = 0;
  for (uint32_t b = 0; b < nbuckets; ++b)
    if (buckets[b] > last) last = buckets[b];
  if (last < symoffset) return symoffset;
  while (!(chain[last - symoffset] & 1u)) ++last;
  return last + 1;
}

// Plain byte comparisons: this code may run inside a sanitizer's start-up, before its
// interceptors of the string functions work.
bool same(const char* a, const char* b) {
  while (*a != '\0' && *a == *b) ++a, ++b;
  return *a == *b;
}
bool starts_with(const char* s, const char* prefix) {
  while (*prefix != '\0' && *s == *prefix) ++s, ++prefix;
  return *prefix == '\0';
}

bool elf_obj(const struct link_map* lm, ElfObj* o) {
  const ElfW(Dyn)* dyn = lm->l_ld;
  if (dyn == nullptr) return false;
  // The loader relocates these entries in place on most targets, but not in every object (the
  // vDSO): an address below the load base is still relative.
  auto fix = [&](ElfW(Addr) a) { return a < lm->l_addr ? a + lm->l_addr : a; };
  *o = ElfObj{lm->l_addr, nullptr, nullptr, nullptr, 0};
  const uint32_t* hash = nullptr;
  const uint32_t* gnu = nullptr;
  for (; dyn->d_tag != DT_NULL; ++dyn) {
    switch (dyn->d_tag) {
      case DT_SYMTAB: o->symtab = (const ElfW(Sym)*)fix(dyn->d_un.d_ptr); break;
      case DT_STRTAB: o->strtab = (const char*)fix(dyn->d_un.d_ptr); break;
      case DT_VERSYM: o->versym = (const ElfW(Half)*)fix(dyn->d_un.d_ptr); break;
      case DT_HASH: hash = (const uint32_t*)fix(dyn->d_un.d_ptr); break;
      case DT_GNU_HASH: gnu = (const uint32_t*)fix(dyn->d_un.d_ptr); break;
      default: break;
    }
  }
  if (o->symtab == nullptr || o->strtab == nullptr) return false;
  o->nsyms = hash != nullptr ? hash[1] : gnu != nullptr ? gnu_hash_count(gnu) : 0;
  return o->nsyms != 0;
}

// The default-version definition of function `name` in `o`, or nullptr.
void* elf_find(const ElfObj& o, const char* name) {
  for (uint32_t i = 1; i < o.nsyms; ++i) {
    const ElfW(Sym)& s = o.symtab[i];
    if (s.st_shndx == SHN_UNDEF || s.st_value == 0) continue;
    if (ELF64_ST_TYPE(s.st_info) != STT_FUNC && ELF64_ST_TYPE(s.st_info) != STT_GNU_IFUNC) continue;
    if (ELF64_ST_BIND(s.st_info) == STB_LOCAL) continue;
    if (o.versym != nullptr && (o.versym[i] & 0x8000)) continue;  // an older, hidden version
    if (!same(o.strtab + s.st_name, name)) continue;
    void* p = (void*)(o.base + s.st_value);
    if (ELF64_ST_TYPE(s.st_info) == STT_GNU_IFUNC) p = ((void* (*)())p)();
    return p;
  }
  return nullptr;
}

ElfObj g_self;  // written before fr_dl_resolved is published

}  // namespace

// Read by the assembly entry points below, hence C names.
extern "C" {
FR_HIDDEN void* fr_real_dlsym_fn;
FR_HIDDEN void* fr_real_dlvsym_fn;
FR_HIDDEN int fr_dl_resolved;
// _DYNAMIC (link.h): the agent's own dynamic section, defined by the linker.

// Walks the loader's list of objects (not dl_iterate_phdr: a sanitizer runtime intercepts that,
// and asks for dlsym before its interceptors can run): the first dlsym and dlvsym defined after
// the agent in load order, else anywhere but in the agent.
FR_HIDDEN void fr_resolve_dl() {
  if (__atomic_load_n(&fr_dl_resolved, __ATOMIC_ACQUIRE)) return;
  void *s_after = nullptr, *v_after = nullptr, *s_any = nullptr, *v_any = nullptr;
  bool past_self = false, have_self = false;
  ElfObj o;
  for (const struct link_map* lm = _r_debug.r_map; lm != nullptr; lm = lm->l_next) {
    if (lm->l_ld == _DYNAMIC) {
      past_self = true;
      have_self = elf_obj(lm, &g_self);
      continue;
    }
    if (!elf_obj(lm, &o)) continue;
    void* s = elf_find(o, "dlsym");
    void* v = elf_find(o, "dlvsym");
    if (past_self && s_after == nullptr) s_after = s;
    if (past_self && v_after == nullptr) v_after = v;
    if (s_any == nullptr) s_any = s;
    if (v_any == nullptr) v_any = v;
  }
  __atomic_store_n(&fr_real_dlsym_fn, s_after ? s_after : s_any, __ATOMIC_RELEASE);
  __atomic_store_n(&fr_real_dlvsym_fn, v_after ? v_after : v_any, __ATOMIC_RELEASE);
  __atomic_store_n(&fr_dl_resolved, have_self ? 1 : 0, __ATOMIC_RELEASE);
}
}

namespace fr::agent {

void* real_dlsym(void* handle, const char* name) {
  fr_resolve_dl();
  auto fn = (void* (*)(void*, const char*))__atomic_load_n(&fr_real_dlsym_fn, __ATOMIC_ACQUIRE);
  return fn != nullptr ? fn(handle, name) : nullptr;
}

void* real_dlvsym(void* handle, const char* name, const char* version) {
  fr_resolve_dl();
  auto fn = (void* (*)(void*, const char*, const char*))__atomic_load_n(&fr_real_dlvsym_fn,
                                                                        __ATOMIC_ACQUIRE);
  return fn != nullptr ? fn(handle, name, version) : nullptr;
}

void* os_dlopen(const char* file, int mode) { return dlopen(file, mode); }
int os_dlclose(void* handle) { return dlclose(handle); }
int os_pthread_create(pthread_t* th, const pthread_attr_t* attr, void* (*fn)(void*), void* arg) {
  return pthread_create(th, attr, fn, arg);
}
int os_pthread_sigmask(int how, const sigset_t* set, sigset_t* old) {
  return pthread_sigmask(how, set, old);
}

}  // namespace fr::agent

namespace {

// Whether `handle` (valid: a lookup on it just succeeded) is one of `lib`'s (a file name prefix).
bool is_handle_of(void* handle, const char* lib) {
  struct link_map* lm = nullptr;
  if (dlinfo(handle, RTLD_DI_LINKMAP, &lm) != 0 || lm == nullptr || lm->l_name == nullptr)
    return false;
  const char* base = lm->l_name;
  for (const char* c = lm->l_name; *c != '\0'; ++c)
    if (*c == '/') base = c + 1;
  return starts_with(base, lib);
}

// The agent's own wrapper of `name`, when it exports one.
void* own_wrapper(const char* name) {
  if (!__atomic_load_n(&fr_dl_resolved, __ATOMIC_ACQUIRE)) return nullptr;
  return elf_find(g_self, name);
}

// NCCL's functions on its handles; the graph entries (and cuGetProcAddress, through which the
// runtime reaches the driver) on the driver's and the runtime's handles.
void* substitute(void* handle, const char* name, void* found) {
  if (found == nullptr || name == nullptr) return found;
  const char* lib = starts_with(name, "nccl")        ? "libnccl.so"
                    : starts_with(name, "cudaGraph") ? "libcudart.so"
                    : starts_with(name, "cuGraph") || starts_with(name, "cuGetProcAddress")
                        ? "libcuda.so"
                        : nullptr;
  if (lib == nullptr || !is_handle_of(handle, lib)) return found;
  void* w = own_wrapper(name);
  if (w != nullptr) debug_log("dlsym(%s, %s): answering the agent's wrapper", lib, name);
  return w != nullptr ? w : found;
}

}  // namespace

// Lookups on real handles (the assembly entry points handle RTLD_DEFAULT and RTLD_NEXT). The
// result of a lookup on a handle does not depend on the caller, so a frame of ours is harmless.
extern "C" FR_HIDDEN void* fr_dlsym_handle(void* handle, const char* name) {
  return substitute(handle, name, real_dlsym(handle, name));
}

extern "C" FR_HIDDEN void* fr_dlvsym_handle(void* handle, const char* name, const char* version) {
  return substitute(handle, name, real_dlvsym(handle, name, version));
}

#if defined(__x86_64__)
// dlsym(handle, name) / dlvsym(handle, name, version): pseudo-handles (RTLD_DEFAULT = 0,
// RTLD_NEXT = -1) jump straight to the real function, so it sees the original return address;
// the first such call resolves the real functions, keeping the argument registers.
__asm__(R"(
  .text
  .globl dlsym
  .type dlsym, @function
  .p2align 4
dlsym:
  .cfi_startproc
  testq %rdi, %rdi
  je 1f
  cmpq $-1, %rdi
  je 1f
  jmp fr_dlsym_handle
1:
  movq fr_real_dlsym_fn(%rip), %rax
  testq %rax, %rax
  je 2f
  jmp *%rax
2:
  pushq %rdi
  .cfi_adjust_cfa_offset 8
  pushq %rsi
  .cfi_adjust_cfa_offset 8
  subq $8, %rsp
  .cfi_adjust_cfa_offset 8
  call fr_resolve_dl
  addq $8, %rsp
  .cfi_adjust_cfa_offset -8
  popq %rsi
  .cfi_adjust_cfa_offset -8
  popq %rdi
  .cfi_adjust_cfa_offset -8
  movq fr_real_dlsym_fn(%rip), %rax
  testq %rax, %rax
  je 3f
  jmp *%rax
3:
  xorl %eax, %eax
  ret
  .cfi_endproc
  .size dlsym, .-dlsym

  .globl dlvsym
  .type dlvsym, @function
  .p2align 4
dlvsym:
  .cfi_startproc
  testq %rdi, %rdi
  je 1f
  cmpq $-1, %rdi
  je 1f
  jmp fr_dlvsym_handle
1:
  movq fr_real_dlvsym_fn(%rip), %rax
  testq %rax, %rax
  je 2f
  jmp *%rax
2:
  pushq %rdi
  .cfi_adjust_cfa_offset 8
  pushq %rsi
  .cfi_adjust_cfa_offset 8
  pushq %rdx
  .cfi_adjust_cfa_offset 8
  call fr_resolve_dl
  popq %rdx
  .cfi_adjust_cfa_offset -8
  popq %rsi
  .cfi_adjust_cfa_offset -8
  popq %rdi
  .cfi_adjust_cfa_offset -8
  movq fr_real_dlvsym_fn(%rip), %rax
  testq %rax, %rax
  je 3f
  jmp *%rax
3:
  xorl %eax, %eax
  ret
  .cfi_endproc
  .size dlvsym, .-dlvsym
)");
#endif
