// The test double of libnccl.so.2 (nccl_double.cpp): what it exposes to tests besides the NCCL API.
#pragma once

#include <nccl.h>
#include <stdint.h>

#include "nccl_extra.h"

extern "C" {
// The last NCCL call the double received on the calling thread, with its arguments widened to
// 64 bits in declaration order (pointers as addresses, enums and ints sign-extended).
struct fr_double_call {
  char name[48];
  int nargs;
  uint64_t args[12];
};
const fr_double_call* fr_double_last();
// The most recent call named `name` among this thread's last 16, or NULL.
const fr_double_call* fr_double_find(const char* name);
// Clears this thread's history.
void fr_double_forget();
// The result the next call on this thread returns (then back to ncclSuccess).
void fr_double_next_result(int result);
// The result the next nested call returns: the ncclBroadcast that ncclBcast makes through the
// exported symbol, which reaches the agent re-entrantly (then back to ncclSuccess).
void fr_double_next_inner_result(int result);
// Calls received, all threads.
uint64_t fr_double_calls();
// What ncclCommGetAsyncError reports for `comm` from now on.
void fr_double_set_async(ncclComm_t comm, ncclResult_t result);
}
