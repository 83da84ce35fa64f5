/* The recorded program of the Debian 11 root test, as a library: programs built here import
 * __libc_start_main@GLIBC_2.34 and cannot start on glibc 2.31, so the test preloads this next to
 * the agent into the root's own /bin/true, and its constructor makes the NCCL calls. */
#include <stddef.h>
#include <stdio.h>

typedef struct {
  char internal[128];
} ncclUniqueId;
int ncclGetUniqueId(ncclUniqueId* id);
int ncclCommInitRank(void** comm, int nranks, ncclUniqueId id, int rank);
int ncclAllReduce(const void* s, void* r, size_t n, int t, int op, void* comm, void* stream);
int ncclCommDestroy(void* comm);

__attribute__((constructor)) static void drive(void) {
  ncclUniqueId id;
  void* comm = NULL;
  static float buf[4];
  int a = ncclGetUniqueId(&id);
  int b = ncclCommInitRank(&comm, 1, id, 0);
  int c = ncclAllReduce(buf, buf, 4, 7, 0, comm, NULL);
  int d = ncclCommDestroy(comm);
  printf("calls=%d,%d,%d,%d\n", a, b, c, d);
  fflush(stdout);
}
