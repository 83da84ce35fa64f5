// The scan of a skipped value (a dump's stack frames, most of its bytes): its opcodes are walked,
// lengths checked and stack height and marks counted, without building anything; one
// placeholder stands for the value (see unpickle.cpp's opening paragraph for when the scan's
// guess is checked and the pickle run again).
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

// The scan itself, on plain pointers and locals kept in registers: the offset just past the
// value, or SIZE_MAX when the scan cannot vouch for it. The hot loop of a dump (a frames list is
// about 14 opcodes a frame): each opcode costs a handful of instructions. Lengths are skipped,
// never read as text; a memo put that extends the open range of scanned memo indices, and a get
// of a stored or scanned index, stay in locals (ScanMemo); anything else takes the members.
[[gnu::always_inline]] inline size_t Machine::scan_ops(const unsigned char* p,
                                                      const unsigned char* const end, ScanMemo* sm) {
  const unsigned char* const begin = reinterpret_cast<const unsigned char*>(in_.data());
  constexpr int kMaxMarks = 64;
  int64_t marks[kMaxMarks];
  int nmarks = 0;
  int64_t floor = 0;  // stack height at the innermost mark
  int64_t h = 0;      // values above the stack as it was
  uint64_t n = 0;     // a payload's length
  uint64_t idx = 0;   // a memo index
  while (true) {
    if (p >= end) return SIZE_MAX;
    const uint8_t op = *p;
    if (nmarks == 0 && h == 1 && op != MARK && op != BINPUT && op != LONG_BINPUT &&
        op != MEMOIZE)
      return size_t(p - begin);  // complete: the next opcode is no longer about this value
    ++p;
    switch (op) {
      case NONE: case NEWTRUE: case NEWFALSE: case EMPTY_LIST: case EMPTY_DICT:
      case EMPTY_TUPLE: case EMPTY_SET:
        ++h;
        continue;
      case BININT1: n = 1; goto fixed;  // fixed-size payloads
      case BININT2: n = 2; goto fixed;
      case BININT: n = 4; goto fixed;
      case BINFLOAT: n = 8; goto fixed;
      case LONG1: case SHORT_BINUNICODE: case SHORT_BINBYTES: case SHORT_BINSTRING:
        if (!take<1>(&p, end, &n)) return SIZE_MAX;
        goto fixed;
      case BINUNICODE: case BINBYTES:
        if (!take<4>(&p, end, &n)) return SIZE_MAX;
        goto fixed;
      case BINUNICODE8: case BINBYTES8:
        if (!take<8>(&p, end, &n)) return SIZE_MAX;
        goto fixed;
      case BINGET:
        if (!take<1>(&p, end, &idx)) return SIZE_MAX;
        goto get;
      case LONG_BINGET:
        if (!take<4>(&p, end, &idx)) return SIZE_MAX;
        goto get;
      case BINPUT:
        if (h < 1 || !take<1>(&p, end, &idx)) return SIZE_MAX;
        goto put;
      case LONG_BINPUT:
        if (h < 1 || !take<4>(&p, end, &idx)) return SIZE_MAX;
        goto put;
      case MEMOIZE:
        if (h < 1) return SIZE_MAX;
        scan_commit(sm);
        idx = memo_count_;
        goto put;
      case MARK:
        if (nmarks == kMaxMarks) return SIZE_MAX;
        marks[nmarks++] = h;
        floor = h;
        continue;
      case APPENDS: case SETITEMS: case ADDITEMS:
        if (nmarks == 0) return SIZE_MAX;
        h = marks[--nmarks];
        floor = nmarks ? marks[nmarks - 1] : 0;
        if (h < 1) return SIZE_MAX;
        continue;
      case LIST: case TUPLE: case DICT: case FROZENSET:
        if (nmarks == 0) return SIZE_MAX;
        h = marks[--nmarks] + 1;
        floor = nmarks ? marks[nmarks - 1] : 0;
        continue;
      case APPEND: h -= 1; if (h < 1 || h < floor) return SIZE_MAX; continue;
      case SETITEM: h -= 2; if (h < 1 || h < floor) return SIZE_MAX; continue;
      case TUPLE1: case TUPLE2: case TUPLE3: {
        int64_t k = op - TUPLE1 + 1;
        if (h - k < floor) return SIZE_MAX;
        h = h - k + 1;
        continue;
      }
      case FRAME:
        if (end - p < 8 || load_le<8>(p) > uint64_t(end - p - 8)) return SIZE_MAX;
        p += 8;
        continue;
      default:
        return SIZE_MAX;  // anything else: the full run judges it
    }
  fixed:  // a scalar's payload of n bytes
    if (n > uint64_t(end - p)) return SIZE_MAX;
    p += n;
    ++h;
    continue;
  get:
    if (!scan_get(idx, sm)) return SIZE_MAX;
    ++h;
    continue;
  put:
    if (!scan_put(idx, sm)) return SIZE_MAX;
    continue;
  }
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
