// The profiler plugin interface as fr declares it (proto/fr/profiler_abi.h) against the real
// NCCL builds at hand: 2.28.9 (the CUDA toolkit's), 2.30.7 (torch 2.15's) and 2.32.3 (PyPI's
// nvidia-nccl-cu13). NCCL ships no header of the plugin interface, but its libnccl.so.2 carries
// DWARF debug information, which libdw reads: for every interface version the library knows and
// the agent exports (v5, v6, v7), the size of the descriptor, the state arguments and the plugin
// table, the offset and size of every member fr reads or fills, and the value of every event type
// and state fr uses must equal ours. A library that is absent, or one without debug information,
// makes its test report itself skipped with the reason.
#include <dwarf.h>
#include <elfutils/libdw.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <map>
#include <string>
#include <vector>

#include "fr/profiler_abi.h"
#include "skip.h"

namespace ap = fr::nccl_prof;

namespace {

// The types and enumerators of NCCL's profiler compilation units, by name.
struct NcclDwarf {
  int fd = -1;
  Dwarf* dw = nullptr;
  std::map<std::string, Dwarf_Die> types;  // typedef name -> the type it names
  std::map<std::string, int64_t> enums;
  ~NcclDwarf() {
    if (dw != nullptr) dwarf_end(dw);
    if (fd >= 0) close(fd);
  }
};

// Whether an enumeration's underlying type is unsigned (its constants are then read unsigned: a
// one-byte 128 is 128, not -128).
bool unsigned_enum(Dwarf_Die* e) {
  Dwarf_Attribute a;
  Dwarf_Die t;
  Dwarf_Word enc = 0;
  if (dwarf_attr_integrate(e, DW_AT_type, &a) == nullptr || dwarf_formref_die(&a, &t) == nullptr ||
      dwarf_peel_type(&t, &t) != 0 || dwarf_attr(&t, DW_AT_encoding, &a) == nullptr ||
      dwarf_formudata(&a, &enc) != 0)
    return false;
  return enc == DW_ATE_unsigned || enc == DW_ATE_unsigned_char;
}

void collect(Dwarf_Die* die, NcclDwarf* out, bool is_unsigned = false) {
  Dwarf_Die child;
  if (dwarf_child(die, &child) != 0) return;
  do {
    const int tag = dwarf_tag(&child);
    const char* name = dwarf_diename(&child);
    if (tag == DW_TAG_typedef && name != nullptr && strncmp(name, "ncclProfiler", 12) == 0) {
      Dwarf_Attribute a;
      Dwarf_Die t;
      if (dwarf_attr_integrate(&child, DW_AT_type, &a) != nullptr &&
          dwarf_formref_die(&a, &t) != nullptr && dwarf_peel_type(&t, &t) == 0)
        out->types.emplace(name, t);
    } else if (tag == DW_TAG_enumerator && name != nullptr) {
      Dwarf_Attribute a;
      Dwarf_Sword v;
      Dwarf_Word u;
      if (dwarf_attr(&child, DW_AT_const_value, &a) == nullptr) continue;
      if (is_unsigned ? dwarf_formudata(&a, &u) == 0 : dwarf_formsdata(&a, &v) == 0)
        out->enums.emplace(name, is_unsigned ? int64_t(u) : int64_t(v));
    }
    if (tag == DW_TAG_enumeration_type) collect(&child, out, unsigned_enum(&child));
    if (tag == DW_TAG_namespace || tag == DW_TAG_lexical_block) collect(&child, out);
  } while (dwarf_siblingof(&child, &child) == 0);
}

// Reads the compilation units of NCCL's profiler code (src/plugin/profiler*); "" when it did,
// else why not.
std::string load(const char* path, NcclDwarf* out) {
  out->fd = open(path, O_RDONLY | O_CLOEXEC);
  if (out->fd < 0) return std::string(path) + " is not here";
  out->dw = dwarf_begin(out->fd, DWARF_C_READ);
  if (out->dw == nullptr)
    return std::string(path) + " has no DWARF debug information (" + dwarf_errmsg(-1) + ")";
  Dwarf_Off off = 0, next;
  size_t header;
  while (dwarf_nextcu(out->dw, off, &next, &header, nullptr, nullptr, nullptr) == 0) {
    Dwarf_Die cu;
    if (dwarf_offdie(out->dw, off + header, &cu) != nullptr) {
      const char* name = dwarf_diename(&cu);
      if (name != nullptr && strstr(name, "plugin/profiler") != nullptr) collect(&cu, out);
    }
    off = next;
  }
  if (out->types.empty()) return std::string(path) + ": no profiler types in its debug information";
  return "";
}

// The offset and size of `path` ("coll.seqNumber") in `type`, looking through anonymous members
// (the descriptor's union); false when there is no such member.
bool member(Dwarf_Die* type, const std::string& path, uint64_t base, uint64_t* off,
            uint64_t* size) {
  const size_t dot = path.find('.');
  const std::string head = path.substr(0, dot);
  Dwarf_Die m;
  if (dwarf_child(type, &m) != 0) return false;
  do {
    if (dwarf_tag(&m) != DW_TAG_member) continue;
    Dwarf_Word at = 0;
    Dwarf_Attribute a;
    if (dwarf_attr(&m, DW_AT_data_member_location, &a) != nullptr) dwarf_formudata(&a, &at);
    Dwarf_Die mt;
    if (dwarf_attr_integrate(&m, DW_AT_type, &a) == nullptr ||
        dwarf_formref_die(&a, &mt) == nullptr || dwarf_peel_type(&mt, &mt) != 0)
      continue;
    const char* name = dwarf_diename(&m);
    if (name == nullptr) {  // an anonymous union or struct: its members are the parent's
      if (member(&mt, path, base + at, off, size)) return true;
      continue;
    }
    if (head != name) continue;
    if (dot != std::string::npos) return member(&mt, path.substr(dot + 1), base + at, off, size);
    Dwarf_Word bytes = 0;
    if (dwarf_aggregate_size(&mt, &bytes) != 0) return false;
    *off = base + at;
    *size = bytes;
    return true;
  } while (dwarf_siblingof(&m, &m) == 0);
  return false;
}

struct Field {
  const char* path;
  size_t offset, size;
};
#define FR_FIELD(T, p) \
  Field { #p, offsetof(T, p), sizeof(((T*)nullptr)->p) }

template <class D>
std::vector<Field> descr_fields(int version) {
  std::vector<Field> f = {
      FR_FIELD(D, type),
      FR_FIELD(D, parentObj),
      FR_FIELD(D, rank),
      FR_FIELD(D, coll.seqNumber),
      FR_FIELD(D, coll.func),
      FR_FIELD(D, coll.sendBuff),
      FR_FIELD(D, coll.recvBuff),
      FR_FIELD(D, coll.count),
      FR_FIELD(D, coll.root),
      FR_FIELD(D, coll.datatype),
      FR_FIELD(D, coll.nChannels),
      FR_FIELD(D, coll.nWarps),
      FR_FIELD(D, coll.algo),
      FR_FIELD(D, coll.proto),
      FR_FIELD(D, coll.parentGroup),
      FR_FIELD(D, p2p.func),
      FR_FIELD(D, p2p.buff),
      FR_FIELD(D, p2p.datatype),
      FR_FIELD(D, p2p.count),
      FR_FIELD(D, p2p.peer),
      FR_FIELD(D, p2p.nChannels),
      FR_FIELD(D, p2p.parentGroup),
      FR_FIELD(D, proxyOp.pid),
      FR_FIELD(D, proxyOp.channelId),
      FR_FIELD(D, proxyOp.peer),
      FR_FIELD(D, proxyOp.nSteps),
      FR_FIELD(D, proxyOp.chunkSize),
      FR_FIELD(D, proxyOp.isSend),
      FR_FIELD(D, proxyStep.step),
      FR_FIELD(D, kernelCh.channelId),
      FR_FIELD(D, kernelCh.pTimer),
  };
  if (version >= 7) {
    const std::vector<Field> v7 = {
        FR_FIELD(ap::DescrV7, coll.kernelVariant),    FR_FIELD(ap::DescrV7, coll.isSymColl),
        FR_FIELD(ap::DescrV7, coll.userTag),          FR_FIELD(ap::DescrV7, p2p.userTag),
        FR_FIELD(ap::DescrV7, kernelPhase.channelId), FR_FIELD(ap::DescrV7, kernelPhase.phaseId),
        FR_FIELD(ap::DescrV7, kernelPhase.phaseName), FR_FIELD(ap::DescrV7, kernelPhase.pTimer)};
    f.insert(f.end(), v7.begin(), v7.end());
  }
  return f;
}

template <class T>
std::vector<Field> table_fields() {
  return {FR_FIELD(T, name),
          FR_FIELD(T, init),
          FR_FIELD(T, startEvent),
          FR_FIELD(T, stopEvent),
          FR_FIELD(T, recordEventState),
          FR_FIELD(T, finalize)};
}

std::vector<Field> state_fields() {
  return {FR_FIELD(ap::StateArgs, proxyStep.transSize),
          FR_FIELD(ap::StateArgs, proxyCtrl.appendedProxyOps),
          FR_FIELD(ap::StateArgs, netPlugin.data), FR_FIELD(ap::StateArgs, kernelCh.pTimer)};
}

// Each of `fields` and the whole size of `ours` against NCCL's type `name`.
void check_type(NcclDwarf& n, const std::string& name, size_t ours,
                const std::vector<Field>& fields) {
  INFO(name);
  auto it = n.types.find(name);
  REQUIRE(it != n.types.end());
  Dwarf_Word bytes = 0;
  REQUIRE(dwarf_aggregate_size(&it->second, &bytes) == 0);
  CHECK(bytes == ours);
  for (const Field& f : fields) {
    INFO(f.path);
    uint64_t off = 0, size = 0;
    REQUIRE(member(&it->second, f.path, 0, &off, &size));
    CHECK(off == f.offset);
    CHECK(size == f.size);
  }
}

struct Enumerator {
  const char* name;
  int64_t ours;
  int since;  // the interface version that brought it
};

void check_library(const char* release, const char* path) {
  NcclDwarf n;
  const std::string why = load(path, &n);
  if (!why.empty()) FR_SKIP("NCCL " << release << ": " << why);
  auto knows = [&](int v) {
    return n.types.count("ncclProfilerEventDescr_v" + std::to_string(v) + "_t") != 0;
  };
  REQUIRE(knows(5));  // every release fr supports has v5
  int checked = 0;
  for (int v : {5, 6, 7}) {
    if (!knows(v)) continue;
    ++checked;
    const std::string s = "_v" + std::to_string(v) + "_t";
    if (v == 5)
      check_type(n, "ncclProfilerEventDescr" + s, sizeof(ap::DescrV5),
                 descr_fields<ap::DescrV5>(5));
    if (v == 6)
      check_type(n, "ncclProfilerEventDescr" + s, sizeof(ap::DescrV6),
                 descr_fields<ap::DescrV6>(6));
    if (v == 7)
      check_type(n, "ncclProfilerEventDescr" + s, sizeof(ap::DescrV7),
                 descr_fields<ap::DescrV7>(7));
    check_type(n, "ncclProfilerEventStateArgs" + s, sizeof(ap::StateArgs), state_fields());
    check_type(n, "ncclProfiler" + s, sizeof(ap::PluginV5), table_fields<ap::PluginV5>());
  }
  // A newer interface than the agent exports: NCCL falls back to v7, but say so.
  if (knows(8)) WARN("NCCL " << release << " knows profiler interface v8; the agent exports v7");
  const int newest = knows(7) ? 7 : knows(6) ? 6 : 5;
  const Enumerator enums[] = {
      {"ncclProfileGroup", int64_t(ap::kEvGroup), 5},
      {"ncclProfileColl", int64_t(ap::kEvColl), 5},
      {"ncclProfileP2p", int64_t(ap::kEvP2p), 5},
      {"ncclProfileProxyOp", int64_t(ap::kEvProxyOp), 5},
      {"ncclProfileProxyStep", int64_t(ap::kEvProxyStep), 5},
      {"ncclProfileProxyCtrl", int64_t(ap::kEvProxyCtrl), 5},
      {"ncclProfileKernelCh", int64_t(ap::kEvKernelCh), 5},
      {"ncclProfileNetPlugin", int64_t(ap::kEvNetPlugin), 5},
      {"ncclProfileGroupApi", int64_t(ap::kEvGroupApi), 5},
      {"ncclProfileCollApi", int64_t(ap::kEvCollApi), 5},
      {"ncclProfileP2pApi", int64_t(ap::kEvP2pApi), 5},
      {"ncclProfileKernelLaunch", int64_t(ap::kEvKernelLaunch), 5},
      {"ncclProfileCeColl", int64_t(ap::kEvCeColl), 6},
      {"ncclProfileCeSync", int64_t(ap::kEvCeSync), 6},
      {"ncclProfileCeBatch", int64_t(ap::kEvCeBatch), 6},
      {"ncclProfileKernelPhase", int64_t(ap::kEvKernelPhase), 7},
      {"ncclProfilerProxyStepSendGPUWait", ap::kStSendGpuWait, 5},
      {"ncclProfilerProxyStepSendWait", ap::kStSendWait, 5},
      {"ncclProfilerProxyStepRecvWait", ap::kStRecvWait, 5},
      {"ncclProfilerProxyStepRecvFlushWait", ap::kStRecvFlushWait, 5},
      {"ncclProfilerProxyStepRecvGPUWait", ap::kStRecvGpuWait, 5},
      {"ncclProfilerProxyOpInProgress_v4", ap::kStProxyOpInProgress, 5},
      {"ncclProfilerProxyStepSendPeerWait_v4", ap::kStSendPeerWait, 5},
      {"ncclProfilerKernelChStop", ap::kStKernelChStop, 5},
      {"ncclProfilerKernelPhaseStop", ap::kStKernelPhaseStop, 7},
  };
  for (const Enumerator& e : enums) {
    INFO(e.name);
    auto it = n.enums.find(e.name);
    if (it == n.enums.end() && e.since > newest) continue;  // a later version's: not here yet
    REQUIRE(it != n.enums.end());
    CHECK(it->second == e.ours);
  }
  printf("NCCL %s (%s): interface versions 5 to %d checked (%d), %zu types, %zu enumerators\n",
         release, path, newest, checked, n.types.size(), n.enums.size());
}

}  // namespace

TEST_CASE("profiler ABI: the declarations match NCCL 2.28.9's debug information",
          "[agent][profiler]") {
  check_library("2.28.9", FR_REAL_NCCL_228);
}

TEST_CASE("profiler ABI: the declarations match NCCL 2.30.7's debug information",
          "[agent][profiler]") {
  check_library("2.30.7", FR_REAL_NCCL_230);
}

TEST_CASE("profiler ABI: the declarations match NCCL 2.32.3's debug information",
          "[agent][profiler]") {
  check_library("2.32.3", FR_REAL_NCCL_232);
}
