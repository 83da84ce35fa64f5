// The agent loads into any process on glibc 2.28 and newer (manylinux_2_28, as PyTorch's wheels).
// glibc 2.34 moved dlopen, pthread_create and friends into libc under new symbol versions, and a
// library linked on a newer system asks for those: loading it on an older one fails, and with it
// every program it is preloaded into. So each function the agent calls whose default version is
// newer than 2.28 is bound here to its oldest version, which every glibc since keeps.
// Included by dl.cpp only (built without link-time optimization, which drops .symver), where the
// agent's only calls to these functions are. tests/agent checks the built library: no required
// version above GLIBC_2.28.
#pragma once

#if defined(__GLIBC__) && !defined(__ASSEMBLER__)
#if defined(__x86_64__)
#define FR_GLIBC_BASE "GLIBC_2.2.5"
#elif defined(__aarch64__)
#define FR_GLIBC_BASE "GLIBC_2.17"
#endif
#ifdef FR_GLIBC_BASE
__asm__(".symver dlopen, dlopen@" FR_GLIBC_BASE);
__asm__(".symver dlclose, dlclose@" FR_GLIBC_BASE);
__asm__(".symver dlerror, dlerror@" FR_GLIBC_BASE);
__asm__(".symver dladdr, dladdr@" FR_GLIBC_BASE);
__asm__(".symver pthread_create, pthread_create@" FR_GLIBC_BASE);
__asm__(".symver pthread_sigmask, pthread_sigmask@" FR_GLIBC_BASE);
#if defined(__x86_64__)
__asm__(".symver dlinfo, dlinfo@GLIBC_2.3.3");
#else
__asm__(".symver dlinfo, dlinfo@" FR_GLIBC_BASE);
#endif
#endif
#endif
