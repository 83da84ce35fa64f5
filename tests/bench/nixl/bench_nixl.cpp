// Host time the agent adds per NIXL transfer. One transfer's life is createXferReq (one 4 KiB
// descriptor and a notification), postXferReq (in progress), getXferStatus (done) and
// releaseXferReq, called through the PLT as NIXL's Python binding calls them, against a no-op
// libnixl.so; also a status poll on its own, the call a waiting caller repeats. run.sh runs it
// plainly and with the agent preloaded; the difference is what the agent adds. Prints medians of
// many batches.
//
// `fr_bench_nixl --calls N` makes N transfers and prints nothing (run.sh counts instructions under
// callgrind at two values of N).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <algorithm>
#include <vector>

#include "nixl_abi.h"

namespace nx = fr::agent::nixl;

void nixl_ctor(void*, const nx::StdString*, const void*) __asm__(
    "_ZN9nixlAgentC1ERKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEERK15nixlAgentConfig");
int nixl_create(const void*, const int*, const nx::DescList*, const nx::DescList*, const nx::StdString*, void**, const nx::OptArgs*) __asm__(
    "_ZNK9nixlAgent13createXferReqERK14nixl_xfer_op_tRK12nixlDescListI13nixlBasicDescES7_RK"
    "NSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEERP12nixlXferReqHPK21nixlAgentOp"
    "tionalArgs");
int nixl_post(const void*, void*, const nx::OptArgs*) __asm__(
    "_ZNK9nixlAgent11postXferReqEP12nixlXferReqHPK21nixlAgentOptionalArgs");
int nixl_status(const void*, void*) __asm__("_ZNK9nixlAgent13getXferStatusEP12nixlXferReqH");
int nixl_release(const void*, void*) __asm__("_ZNK9nixlAgent14releaseXferReqEP12nixlXferReqH");

namespace {

// A std::string in the cxx11 layout, pointing at a literal (never destroyed).
nx::StdString str(const char* s) {
  nx::StdString v{};
  v.data = s;
  v.size = strlen(s);
  return v;
}

struct Transfer {
  alignas(16) unsigned char agent[256] = {};
  nx::BasicDesc local_desc{0x100000, 4096, 0}, remote_desc{0x200000, 4096, 0};
  nx::DescList local{}, remote{};
  nx::StdString remote_name = str("bench-target");
  nx::OptArgs extra{};
  int op = 1;  // NIXL_WRITE

  Transfer() {
    nx::StdString name = str("bench-initiator");
    nixl_ctor(agent, &name, nullptr);
    for (auto [list, desc] : {std::pair{&local, &local_desc}, std::pair{&remote, &remote_desc}}) {
      list->descs.begin = reinterpret_cast<const uint8_t*>(desc);
      list->descs.end = list->descs.cap = list->descs.begin + sizeof *desc;
    }
    extra.notif.value = str("bench-notification");
    extra.notif.engaged = true;
  }
  void one() {
    void* req = nullptr;
    if (nixl_create(agent, &op, &local, &remote, &remote_name, &req, &extra) != nx::kSuccess)
      abort();
    nixl_post(agent, req, nullptr);
    while (nixl_status(agent, req) == nx::kInProg) {
    }
    nixl_release(agent, req);
  }
};

uint64_t now() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

template <class F>
double median_ns(F f, int per_batch) {
  std::vector<double> v;
  for (int b = 0; b < 41; ++b) {
    uint64_t t0 = now();
    for (int i = 0; i < per_batch; ++i) f();
    v.push_back((double)(now() - t0) / per_batch);
  }
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  Transfer t;
  for (int i = 0; i < 2000; ++i) t.one();  // warm up: the agent resolves NIXL at its first call
  if (argc == 3 && strcmp(argv[1], "--calls") == 0) {
    long n = atol(argv[2]);
    for (long i = 0; i < n; ++i) t.one();
    return 0;
  }
  void* req = nullptr;
  nixl_create(t.agent, &t.op, &t.local, &t.remote, &t.remote_name, &req, &t.extra);
  nixl_post(t.agent, req, nullptr);
  printf("transfer_ns=%.1f\n", median_ns([&] { t.one(); }, 2000));
  printf("status_ns=%.1f\n", median_ns([&] { nixl_status(t.agent, req); }, 20000));
  nixl_release(t.agent, req);
  return 0;
}
