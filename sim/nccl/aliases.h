// The pncclX names of the emulation: aliases of ncclX, as in the real library, made from the NCCL
// API list (fr/nccl_api.def). An alias needs its target in the same file, so each file that
// defines functions of the list includes this at its end, after naming the rows it holds by their
// emu column:
//   #define FRSIM_ALIASES_OF_COMM
//   #include "aliases.h"
// A row whose function the file does not define then fails to compile, and a function missing
// from the list has no alias (tests/agent/nccl_api_test.cpp finds it). Included once per file.
#include "fr/nccl_api.h"

#define FRSIM_ALIAS(ret, base, ...)                                      \
  extern "C" __attribute__((visibility("default"), alias("nccl" #base))) \
  ret pnccl##base(FR_NCCL_PARAMS(__VA_ARGS__));
#define FRSIM_NO_ALIAS(ret, base, ...)

#ifdef FRSIM_ALIASES_OF_OP
#define FRSIM_ALIAS_OP FRSIM_ALIAS
#else
#define FRSIM_ALIAS_OP FRSIM_NO_ALIAS
#endif
#ifdef FRSIM_ALIASES_OF_API
#define FRSIM_ALIAS_API FRSIM_ALIAS
#else
#define FRSIM_ALIAS_API FRSIM_NO_ALIAS
#endif
#ifdef FRSIM_ALIASES_OF_COMM
#define FRSIM_ALIAS_COMM FRSIM_ALIAS
#else
#define FRSIM_ALIAS_COMM FRSIM_NO_ALIAS
#endif
#ifdef FRSIM_ALIASES_OF_INIT
#define FRSIM_ALIAS_INIT FRSIM_ALIAS
#else
#define FRSIM_ALIAS_INIT FRSIM_NO_ALIAS
#endif
#define FRSIM_ALIAS_NONE FRSIM_NO_ALIAS

#define FR_NCCL_FN(base, ret, op, kind, rooted, reducing, torch, since, emu, ...) \
  FRSIM_ALIAS_##emu(ret, base, __VA_ARGS__)
#include "fr/nccl_api.def"
