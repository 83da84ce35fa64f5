/* A minimal libnccl.so.2 in plain C for the Debian 11 root test (oldroot_driver.c): the emulation
 * and the test double are C++ built against this machine's newer glibc and libstdc++ and cannot
 * load there. Only what the driver and the agent call; each call succeeds. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef struct {
  char internal[128];
} ncclUniqueId;
typedef struct {
  int nranks, rank;
} fake_comm;
static fake_comm g_comm;

int ncclGetVersion(int* v) {
  *v = 22809;
  return 0;
}
int ncclGetUniqueId(ncclUniqueId* id) {
  memset(id, 0, sizeof *id);
  strcpy(id->internal, "oldroot");
  return 0;
}
int ncclCommInitRank(void** comm, int nranks, ncclUniqueId id, int rank) {
  (void)id;
  g_comm.nranks = nranks;
  g_comm.rank = rank;
  *comm = &g_comm;
  return 0;
}
int ncclCommCount(const void* comm, int* n) {
  *n = ((const fake_comm*)comm)->nranks;
  return 0;
}
int ncclCommUserRank(const void* comm, int* r) {
  *r = ((const fake_comm*)comm)->rank;
  return 0;
}
int ncclCommCuDevice(const void* comm, int* d) {
  (void)comm;
  *d = 0;
  return 0;
}
int ncclAllReduce(const void* s, void* r, size_t n, int t, int op, void* comm, void* stream) {
  (void)s, (void)r, (void)n, (void)t, (void)op, (void)comm, (void)stream;
  return 0;
}
int ncclCommDestroy(void* comm) {
  (void)comm;
  return 0;
}
