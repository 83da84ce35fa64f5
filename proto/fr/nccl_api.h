// The NCCL API list (fr/nccl_api.def) as code: the macros that expand a row's parameters, the
// rows as a table (kNcclApi), and what each flight-log op means to the analysis (rooted, reducing,
// its torch name: nccl_op()). Everything that must know the NCCL functions generates it from the
// list through these, so that a function cannot be in one place and missing from another: the
// agent's prototypes (agent/nccl_extra.h), the emulation's aliases and op kinds (sim/nccl), the
// test double, the analyzer's rooted/reducing tests and torch names. tests/agent/nccl_api_test.cpp
// checks the list against what the libraries export and what nccl.h declares.
//
// C++ only (C++20: a parameter list may be empty). The op codes stay those of FR_OP_LIST, the
// flight log's format contract: the list names them, it never numbers them. Its rows are checked
// against FR_OP_LIST here, at compile time, in every file that includes this header.
#pragma once

#include <stdint.h>

#include <string_view>

#include "fr/flight_log.h"

// ---- a row's parameters: (type, name) pairs --------------------------------------------------
// FR_NCCL_PARAMS(params...): "type name, ..." (a declaration's list);
// FR_NCCL_ARGS(params...): "name, ..." (a call's list);
// FR_NCCL_MAP(f, params...): "f(type, name), ..." for any two-argument macro f.
#define FR_NCCL_PARAMS(...) FR_NCCL_MAP(FR_NCCL_DECL_, __VA_ARGS__)
#define FR_NCCL_ARGS(...) FR_NCCL_MAP(FR_NCCL_NAME_, __VA_ARGS__)
#define FR_NCCL_DECL_(type, name) type name
#define FR_NCCL_NAME_(type, name) name

#define FR_NCCL_MAP(f, ...) \
  FR_NCCL_CAT_(FR_NCCL_MAP_, FR_NCCL_COUNT_(__VA_ARGS__))(f __VA_OPT__(, ) __VA_ARGS__)
#define FR_NCCL_CAT_(a, b) FR_NCCL_CAT2_(a, b)
#define FR_NCCL_CAT2_(a, b) a##b
#define FR_NCCL_COUNT_(...) \
  FR_NCCL_COUNT2_(__VA_OPT__(__VA_ARGS__, ) 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0)
#define FR_NCCL_COUNT2_(_1, _2, _3, _4, _5, _6, _7, _8, _9, _10, _11, _12, n, ...) n
#define FR_NCCL_MAP_0(f)
#define FR_NCCL_MAP_1(f, p) f p
#define FR_NCCL_MAP_2(f, p, ...) f p, FR_NCCL_MAP_1(f, __VA_ARGS__)
#define FR_NCCL_MAP_3(f, p, ...) f p, FR_NCCL_MAP_2(f, __VA_ARGS__)
#define FR_NCCL_MAP_4(f, p, ...) f p, FR_NCCL_MAP_3(f, __VA_ARGS__)
#define FR_NCCL_MAP_5(f, p, ...) f p, FR_NCCL_MAP_4(f, __VA_ARGS__)
#define FR_NCCL_MAP_6(f, p, ...) f p, FR_NCCL_MAP_5(f, __VA_ARGS__)
#define FR_NCCL_MAP_7(f, p, ...) f p, FR_NCCL_MAP_6(f, __VA_ARGS__)
#define FR_NCCL_MAP_8(f, p, ...) f p, FR_NCCL_MAP_7(f, __VA_ARGS__)
#define FR_NCCL_MAP_9(f, p, ...) f p, FR_NCCL_MAP_8(f, __VA_ARGS__)
#define FR_NCCL_MAP_10(f, p, ...) f p, FR_NCCL_MAP_9(f, __VA_ARGS__)
#define FR_NCCL_MAP_11(f, p, ...) f p, FR_NCCL_MAP_10(f, __VA_ARGS__)
#define FR_NCCL_MAP_12(f, p, ...) f p, FR_NCCL_MAP_11(f, __VA_ARGS__)

namespace fr {

// ---- the rows as data ----------------------------------------------------------------------

// Where the CPU emulation defines a function (the row's emu column).
enum class NcclEmu : uint8_t { OP, API, COMM, INIT, NONE };

struct NcclFn {
  const char* name;  // "ncclAllReduce"
  uint16_t op;       // fr_op recorded; FR_OP_NONE when only forwarded
  const char* kind;  // "COLL", "P2P", "API" or "QUERY"
  bool rooted;
  bool reducing;
  const char* torch;  // torch's name of the op, or nullptr
  int since;          // NCCL_VERSION_CODE of the first nccl.h that declares it; 0, or -1 (never)
  NcclEmu emu;
};

inline constexpr NcclFn kNcclApi[] = {
#define FR_NCCL_FN(base, ret, op, kind, rooted, reducing, torch, since, emu, ...) \
  {"nccl" #base, FR_OP_##op, #kind, rooted != 0, reducing != 0, torch, since, NcclEmu::emu},
#include "fr/nccl_api.def"
};

// ---- what an op means to the analysis ------------------------------------------------------

struct NcclOp {
  bool rooted = false;          // members must agree on its root (the record's peer)
  bool reducing = false;        // members must agree on its reduction
  const char* torch = nullptr;  // its name in PyTorch's Flight Recorder, when torch has one
};

namespace nccl_api_detail {
inline constexpr uint16_t kOps = 128;  // above every NCCL op code of FR_OP_LIST
struct OpTable {
  NcclOp op[kOps];
};
constexpr OpTable op_table() {
  OpTable t{};
  for (const NcclFn& f : kNcclApi)
    if (f.op < kOps) t.op[f.op] = NcclOp{f.rooted, f.reducing, f.torch};
  return t;
}
inline constexpr OpTable kOpTable = op_table();
}  // namespace nccl_api_detail

// The op's meaning, from the rows that record it (all agree); nothing for ops no row records.
constexpr NcclOp nccl_op(uint16_t op) {
  return op < nccl_api_detail::kOps ? nccl_api_detail::kOpTable.op[op] : NcclOp{};
}

// ---- the rows checked against FR_OP_LIST, at compile time ------------------------------------

namespace nccl_api_detail {
constexpr std::string_view op_kind(uint16_t op) {
  switch (op) {
#define FR_X(e, v, s, k) \
  case v: return #k;
    FR_OP_LIST(FR_X)
#undef FR_X
  }
  return "";
}
constexpr bool same_text(const char* a, const char* b) {
  if (a == nullptr || b == nullptr) return a == b;
  return std::string_view(a) == std::string_view(b);
}
// The row's kind is its op's (QUERY: records nothing), and every row recording the same op says
// the same of it.
constexpr bool row_fits(const NcclFn& f) {
  const std::string_view kind = f.kind;
  if (kind == "QUERY" ? f.op != FR_OP_NONE : kind != op_kind(f.op)) return false;
  if ((f.rooted || f.reducing) && kind != "COLL") return false;
  if (f.torch != nullptr && kind != "COLL" && kind != "P2P") return false;
  for (const NcclFn& g : kNcclApi)
    if (g.op == f.op && (g.rooted != f.rooted || g.reducing != f.reducing ||
                         !same_text(g.torch, f.torch) || !same_text(g.kind, f.kind)))
      return false;
  return f.op < kOps;
}
// One assertion per row, so that the compiler names the row that does not fit.
constexpr bool named_row_fits(std::string_view name) {
  for (const NcclFn& f : kNcclApi)
    if (name == f.name) return row_fits(f);
  return false;
}
}  // namespace nccl_api_detail

#define FR_NCCL_FN(base, ...)                                                                 \
  static_assert(nccl_api_detail::named_row_fits("nccl" #base),                                \
                "fr/nccl_api.def: the op, kind, rooted, reducing or torch name of nccl" #base \
                " disagrees with FR_OP_LIST or with another row of the same op");
#include "fr/nccl_api.def"

}  // namespace fr
