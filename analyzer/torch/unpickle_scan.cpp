// The scan of a skipped value (a dump's stack frames, most of its bytes): its opcodes are walked,
// lengths checked and stack height and marks counted, without building anything; one
// placeholder stands for the value (see unpickle.cpp's opening paragraph for when the scan's
// guess is checked and the pickle run again).
#include "analyzer/torch/unpickle_machine.h"

namespace fr::analyzer::torch::unpickle_detail {

namespace {

// Past a scalar's payload: `fixed` bytes, or a `width`-byte length and that many bytes. nullptr
// when the input ends first.
[[gnu::always_inline]] inline const unsigned char* skip_scalar(const unsigned char* p,
                                                               const unsigned char* end,
                                                               size_t width, size_t fixed) {
  if (size_t(end - p) < fixed) return nullptr;
  p += fixed;
  if (!width) return p;
  if (size_t(end - p) < width) return nullptr;
  uint64_t n = 0;
  for (size_t k = 0; k < width; ++k) n |= uint64_t(p[k]) << (8 * k);
  p += width;
  if (n > uint64_t(end - p)) return nullptr;
  return p + n;
}

}  // namespace

// The scan itself, on plain pointers kept in registers: the offset just past the value, or
// SIZE_MAX when the scan cannot vouch for it.
size_t Machine::scan_ops(const unsigned char* p, const unsigned char* const end) {
  const unsigned char* const begin = reinterpret_cast<const unsigned char*>(in_.data());
  constexpr int kMaxMarks = 64;
  int64_t marks[kMaxMarks];
  int nmarks = 0;
  int64_t floor = 0;  // stack height at the innermost mark
  int64_t h = 0;      // values above the stack as it was
  size_t width = 0;   // length prefix of the payload that follows
  size_t fixed = 0;   // or bytes of the scalar
  while (true) {
    if (p >= end) return SIZE_MAX;
    uint8_t op = *p;
    if (nmarks == 0 && h == 1 && op != MARK && op != BINPUT && op != LONG_BINPUT &&
        op != MEMOIZE)
      return size_t(p - begin);  // complete: the next opcode is no longer about this value
    ++p;
    switch (op) {
      case NONE: case NEWTRUE: case NEWFALSE: case EMPTY_LIST: case EMPTY_DICT:
      case EMPTY_TUPLE: case EMPTY_SET:
        ++h;
        continue;
      case BININT1: width = 0; fixed = 1; break;
      case BININT2: width = 0; fixed = 2; break;
      case BININT: width = 0; fixed = 4; break;
      case BINFLOAT: width = 0; fixed = 8; break;
      case LONG1: case SHORT_BINUNICODE: case SHORT_BINBYTES: case SHORT_BINSTRING:
        width = 1;
        fixed = 0;
        break;
      case BINUNICODE: case BINBYTES:
        width = 4;
        fixed = 0;
        break;
      case BINUNICODE8: case BINBYTES8:
        width = 8;
        fixed = 0;
        break;
      case BINGET:
        if (end - p < 1 || !memo_known(p[0])) return SIZE_MAX;
        p += 1;
        ++h;
        continue;
      case LONG_BINGET:
        if (end - p < 4 || !memo_known(le_at(p, 4))) return SIZE_MAX;
        p += 4;
        ++h;
        continue;
      case BINPUT:
        if (h < 1 || end - p < 1 || !poison_next(p[0])) return SIZE_MAX;
        p += 1;
        continue;
      case LONG_BINPUT:
        if (h < 1 || end - p < 4 || !poison_next(le_at(p, 4))) return SIZE_MAX;
        p += 4;
        continue;
      case MEMOIZE:
        if (h < 1 || !memo_mark_poison(memo_count_)) return SIZE_MAX;
        continue;
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
        int64_t n = op - TUPLE1 + 1;
        if (h - n < floor) return SIZE_MAX;
        h = h - n + 1;
        continue;
      }
      case FRAME:
        if (end - p < 8 || le_at(p, 8) > uint64_t(end - p - 8)) return SIZE_MAX;
        p += 8;
        continue;
      default:
        return SIZE_MAX;  // anything else: the full run judges it
    }
    p = skip_scalar(p, end, width, fixed);
    if (!p) return SIZE_MAX;
    ++h;
  }
}

// Scans one complete value from pos_ (see the file comment) and pushes a placeholder for it.
// The hot loop of a dump: a frames list is about 14 opcodes a frame, so each opcode costs a
// few instructions (lengths are skipped, never read as text; memo puts only extend a range).
bool Machine::scan_value() {
  const unsigned char* const begin = reinterpret_cast<const unsigned char*>(in_.data());
  const unsigned char* const end = begin + in_.size();
  size_t at = scan_ops(begin + pos_, end);
  if (at == SIZE_MAX) return scan_wrong();
  pos_ = at;
  return push_new(Kind::kSkipped);
}

}  // namespace fr::analyzer::torch::unpickle_detail
