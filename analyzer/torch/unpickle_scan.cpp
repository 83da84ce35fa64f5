// The scan of a skipped value (a dump's stack frames, most of its bytes): its opcodes are walked,
// lengths checked and stack height and marks counted, without building anything; one
// placeholder stands for the value (see unpickle.cpp's opening paragraph for when the scan's
// guess is checked and the pickle run again).
#include <array>

#include "analyzer/torch/unpickle_machine.h"

namespace fr::analyzer::torch::unpickle_detail {

namespace {

// A W-byte little-endian argument at *p, which moves past it; false when the input ends first.
template <size_t W>
[[gnu::always_inline]] inline bool take(const unsigned char** p, const unsigned char* end,
                                        uint64_t* v) {
  if (size_t(end - *p) < W) return false;
  *v = load_le<W>(*p);
  *p += W;
  return true;
}

// What the scan does with each opcode byte: its class indexes the scan's table of handlers.
enum ScanClass : uint8_t {
  kScanOther,  // anything else: the full run judges it
  kScanPush,
  kScanFixed1,
  kScanFixed2,
  kScanFixed4,
  kScanFixed8,
  kScanLen1,
  kScanLen4,
  kScanLen8,
  kScanGet1,
  kScanGet4,
  kScanPut1,
  kScanPut4,
  kScanMemoize,
  kScanMark,
  kScanPopMark,
  kScanBuildMark,
  kScanAppend,
  kScanSetItem,
  kScanTuple1,
  kScanTuple2,
  kScanTuple3,
  kScanFrame,
  kScanClasses
};

constexpr std::array<uint8_t, 256> scan_classes() {
  std::array<uint8_t, 256> c{};
  for (uint8_t op : {NONE, NEWTRUE, NEWFALSE, EMPTY_LIST, EMPTY_DICT, EMPTY_TUPLE, EMPTY_SET})
    c[op] = kScanPush;
  c[BININT1] = kScanFixed1;
  c[BININT2] = kScanFixed2;
  c[BININT] = kScanFixed4;
  c[BINFLOAT] = kScanFixed8;
  for (uint8_t op : {LONG1, SHORT_BINUNICODE, SHORT_BINBYTES, SHORT_BINSTRING}) c[op] = kScanLen1;
  c[BINUNICODE] = c[BINBYTES] = kScanLen4;
  c[BINUNICODE8] = c[BINBYTES8] = kScanLen8;
  c[BINGET] = kScanGet1;
  c[LONG_BINGET] = kScanGet4;
  c[BINPUT] = kScanPut1;
  c[LONG_BINPUT] = kScanPut4;
  c[MEMOIZE] = kScanMemoize;
  c[MARK] = kScanMark;
  c[APPENDS] = c[SETITEMS] = c[ADDITEMS] = kScanPopMark;
  c[LIST] = c[TUPLE] = c[DICT] = c[FROZENSET] = kScanBuildMark;
  c[APPEND] = kScanAppend;
  c[SETITEM] = kScanSetItem;
  c[TUPLE1] = kScanTuple1;
  c[TUPLE2] = kScanTuple2;
  c[TUPLE3] = kScanTuple3;
  c[FRAME] = kScanFrame;
  return c;
}
constexpr std::array<uint8_t, 256> kScanClass = scan_classes();

}  // namespace

// A memo get inside a scanned value: of a stored value, or of one made inside a scanned value.
[[gnu::always_inline]] inline bool Machine::scan_get(uint64_t idx, ScanMemo* sm) {
  if ((idx < sm->dense_n && sm->dense[idx] != 0) || (idx >= sm->first && idx < sm->next))
    return true;
  scan_commit(sm);
  bool ok = memo_known(idx);
  *sm = scan_memo();
  return ok;
}

// A memo put inside a scanned value: the entry is unusable outside it. The next index of the
// open range stays in locals.
[[gnu::always_inline]] inline bool Machine::scan_put(uint64_t idx, ScanMemo* sm) {
  if (idx == sm->next && sm->added < sm->room && (idx >= sm->dense_n || sm->dense[idx] == 0)) {
    ++sm->next;
    ++sm->added;
    return true;
  }
  scan_commit(sm);
  bool ok = memo_mark_poison(idx);
  *sm = scan_memo();
  return ok;
}

// The scan's steps, as macros on scan_ops' locals (its handlers below).
// The next opcode: the end of the value once it is complete and the opcode no longer about it.
#define FR_SCAN_NEXT()                                                                             \
  do {                                                                                             \
    if (p >= end) return SIZE_MAX;                                                                 \
    op = *p;                                                                                       \
    if (nmarks == 0 && h == 1 && op != MARK && op != BINPUT && op != LONG_BINPUT && op != MEMOIZE) \
      return size_t(p - begin);                                                                    \
    ++p;                                                                                           \
    goto* kHandlers[kScanClass[op]];                                                               \
  } while (0)
// A scalar with an n-byte payload; a memo get and put with a W-byte index.
#define FR_SCAN_FIXED(len)                      \
  do {                                          \
    n = (len);                                  \
    if (n > uint64_t(end - p)) return SIZE_MAX; \
    p += n;                                     \
    ++h;                                        \
    FR_SCAN_NEXT();                             \
  } while (0)
#define FR_SCAN_LEN(W)                          \
  do {                                          \
    if (!take<W>(&p, end, &n)) return SIZE_MAX; \
    FR_SCAN_FIXED(n);                           \
  } while (0)
#define FR_SCAN_GET(W)                                                  \
  do {                                                                  \
    if (!take<W>(&p, end, &idx) || !scan_get(idx, sm)) return SIZE_MAX; \
    ++h;                                                                \
    FR_SCAN_NEXT();                                                     \
  } while (0)
#define FR_SCAN_PUT(W)                                                           \
  do {                                                                           \
    if (h < 1 || !take<W>(&p, end, &idx) || !scan_put(idx, sm)) return SIZE_MAX; \
    FR_SCAN_NEXT();                                                              \
  } while (0)
#define FR_SCAN_TUPLE(k)                  \
  do {                                    \
    if (h - (k) < floor) return SIZE_MAX; \
    h = h - (k) + 1;                      \
    FR_SCAN_NEXT();                       \
  } while (0)

// The scan itself, on plain pointers and locals kept in registers: the offset just past the
// value, or SIZE_MAX when the scan cannot vouch for it. The hot loop of a dump (a frames list is
// about 12 opcodes a frame), bound by how well the CPU predicts the jump to the next opcode's
// handler: so every handler ends in its own jump through the table (FR_SCAN_NEXT), which each
// learns the opcode that usually follows its own, rather than one shared jump at the loop's top.
// Lengths are skipped, never read as text; a memo put that extends the open range of scanned memo
// indices, and a get of a stored or scanned index, stay in locals (ScanMemo); anything else takes
// the members.
size_t Machine::scan_ops(const unsigned char* p, const unsigned char* const end, ScanMemo* sm) {
  static const void* const kHandlers[kScanClasses] = {
      &&other,      &&push,   &&fixed1,  &&fixed2, &&fixed4, &&fixed8,  &&len1, &&len4,
      &&len8,       &&get1,   &&get4,    &&put1,   &&put4,   &&memoize, &&mark, &&pop_mark,
      &&build_mark, &&append, &&setitem, &&tuple1, &&tuple2, &&tuple3,  &&frame};
  const unsigned char* const begin = reinterpret_cast<const unsigned char*>(in_.data());
  constexpr int kMaxMarks = 64;
  int64_t marks[kMaxMarks];
  int nmarks = 0;
  int64_t floor = 0;  // stack height at the innermost mark
  int64_t h = 0;      // values above the stack as it was
  uint64_t n = 0;     // a payload's length
  uint64_t idx = 0;   // a memo index
  uint8_t op = 0;
  FR_SCAN_NEXT();
push:
  ++h;
  FR_SCAN_NEXT();
fixed1:
  FR_SCAN_FIXED(1);
fixed2:
  FR_SCAN_FIXED(2);
fixed4:
  FR_SCAN_FIXED(4);
fixed8:
  FR_SCAN_FIXED(8);
len1:
  FR_SCAN_LEN(1);
len4:
  FR_SCAN_LEN(4);
len8:
  FR_SCAN_LEN(8);
get1:
  FR_SCAN_GET(1);
get4:
  FR_SCAN_GET(4);
put1:
  FR_SCAN_PUT(1);
put4:
  FR_SCAN_PUT(4);
memoize:
  if (h < 1) return SIZE_MAX;
  scan_commit(sm);
  if (!scan_put(memo_count_, sm)) return SIZE_MAX;
  FR_SCAN_NEXT();
mark:
  if (nmarks == kMaxMarks) return SIZE_MAX;
  marks[nmarks++] = h;
  floor = h;
  FR_SCAN_NEXT();
pop_mark:  // APPENDS, SETITEMS, ADDITEMS
  if (nmarks == 0) return SIZE_MAX;
  h = marks[--nmarks];
  floor = nmarks ? marks[nmarks - 1] : 0;
  if (h < 1) return SIZE_MAX;
  FR_SCAN_NEXT();
build_mark:  // LIST, TUPLE, DICT, FROZENSET
  if (nmarks == 0) return SIZE_MAX;
  h = marks[--nmarks] + 1;
  floor = nmarks ? marks[nmarks - 1] : 0;
  FR_SCAN_NEXT();
append:
  h -= 1;
  if (h < 1 || h < floor) return SIZE_MAX;
  FR_SCAN_NEXT();
setitem:
  h -= 2;
  if (h < 1 || h < floor) return SIZE_MAX;
  FR_SCAN_NEXT();
tuple1:
  FR_SCAN_TUPLE(1);
tuple2:
  FR_SCAN_TUPLE(2);
tuple3:
  FR_SCAN_TUPLE(3);
frame:
  if (end - p < 8 || load_le<8>(p) > uint64_t(end - p - 8)) return SIZE_MAX;
  p += 8;
  FR_SCAN_NEXT();
other:
  return SIZE_MAX;
#undef FR_SCAN_TUPLE
#undef FR_SCAN_PUT
#undef FR_SCAN_GET
#undef FR_SCAN_LEN
#undef FR_SCAN_FIXED
#undef FR_SCAN_NEXT
}

// Scans one complete value from pos_ (see the file comment) and pushes a placeholder for it.
bool Machine::scan_value() {
  const unsigned char* const begin = reinterpret_cast<const unsigned char*>(in_.data());
  const unsigned char* const end = begin + in_.size();
  ScanMemo sm = scan_memo();
  size_t at = scan_ops(begin + pos_, end, &sm);
  scan_commit(&sm);
  if (at == SIZE_MAX) return scan_wrong();
  pos_ = at;
  return push_new(Kind::kSkipped);
}

}  // namespace fr::analyzer::torch::unpickle_detail
