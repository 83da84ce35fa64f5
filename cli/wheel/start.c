// The start code of the wheel's tools (cli/wheel/glibc-stubs assembles it into the Scrt1.o and
// crt1.o the tools link), in place of the system's: glibc 2.34's start code passes no init
// function to __libc_start_main, and a glibc older than 2.34 then never runs the program's
// constructors (its .init_array: every C++ static initializer). This one passes fr_start_init,
// which runs _init and .init_array as glibc 2.33's __libc_csu_init did. glibc 2.34 and newer
// call a non-null init of a program linked against __libc_start_main@GLIBC_2.2.5 in place of
// running .init_array themselves, so the constructors run exactly once on every glibc.
// .fini_array needs nothing: the dynamic loader runs it at exit on every glibc.
#include <stddef.h>

typedef void (*fr_init_fn)(int, char**, char**);

extern fr_init_fn __init_array_start[] __attribute__((visibility("hidden")));
extern fr_init_fn __init_array_end[] __attribute__((visibility("hidden")));
extern void _init(void);

__attribute__((visibility("hidden"), used)) void fr_start_init(int argc, char** argv, char** envp) {
  _init();
  const size_t n = (size_t)(__init_array_end - __init_array_start);
  for (size_t i = 0; i < n; ++i) (*__init_array_start[i])(argc, argv, envp);
}

// x86_64 _start as glibc's sysdeps/x86_64/start.S has it, but for the init function: rdi main,
// rsi argc, rdx argv, rcx init, r8 fini (none), r9 the loader's fini, and the stack end pushed.
__asm__(
    "  .pushsection .text\n"
    "  .globl _start\n"
    "  .type _start, @function\n"
    "_start:\n"
    "  .cfi_startproc\n"
    "  .cfi_undefined rip\n"
    "  xorl %ebp, %ebp\n"
    "  movq %rdx, %r9\n"
    "  popq %rsi\n"
    "  movq %rsp, %rdx\n"
    "  andq $~15, %rsp\n"
    "  pushq %rax\n"
    "  pushq %rsp\n"
    "  xorl %r8d, %r8d\n"
    "  leaq fr_start_init(%rip), %rcx\n"
    "  movq main@GOTPCREL(%rip), %rdi\n"
    "  call *__libc_start_main@GOTPCREL(%rip)\n"
    "  hlt\n"
    "  .cfi_endproc\n"
    "  .size _start, . - _start\n"
    "  .popsection\n"
    // glibc's libio reads _IO_stdin_used to tell this program from one of before glibc 2.1.
    "  .pushsection .rodata\n"
    "  .balign 4\n"
    "  .globl _IO_stdin_used\n"
    "  .type _IO_stdin_used, @object\n"
    "  .size _IO_stdin_used, 4\n"
    "_IO_stdin_used:\n"
    "  .long 0x20001\n"
    "  .popsection\n"
    "  .pushsection .data\n"
    "  .globl __data_start\n"
    "  .weak data_start\n"
    "__data_start:\n"
    "data_start:\n"
    "  .long 0\n"
    "  .popsection\n");
