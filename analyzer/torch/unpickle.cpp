// The safe unpickler: a pickle machine that knows only the plain-data opcodes (see unpickle.h).
//
// Values live in an arena addressed by index rather than behind shared pointers, so the memo and
// the stack can share mutable containers the way pickle means them to (a list is memoized empty,
// then filled) and a hostile file that builds a cycle leaks nothing. Nothing is allocated per
// value: strings are views into the input, a container's items are segments of one shared pool
// (each APPENDS/SETITEMS adds one), the memo is a dense array (a map only for sparse indices).
// A dump of 2,000 entries with 16 stack frames each runs ~300,000 values, a thousand ranks'
// dumps a third of a billion.
//
// The value of a skipped key (UnpickleLimits::skip_keys: a dump's stack frames, four fifths of
// its values) is not even built: right after such a key in a SETITEMS batch, the opcodes of the
// one value that follows are only scanned (lengths checked, stack height and marks counted, memo
// entries it makes recorded as unusable, one range per value) and one placeholder stands for it.
// Should the guess be wrong (the str was no key, the value is shared through the memo, the scan
// meets anything unusual), the whole pickle runs again building everything, so the result never
// depends on it. unpickle() then copies the tree out to JSON with a depth limit (which also stops
// cycles) and output budgets (which stop a small file from expanding a shared subtree
// exponentially); PickleDoc lets a reader walk it in place instead.
#include "analyzer/torch/unpickle.h"

#include "analyzer/torch/unpickle_machine.h"

#include <array>

namespace fr::analyzer::torch {

namespace unpickle_detail {

namespace {

// Which of the opcode functions below handles an opcode; kRefused for every other byte.
enum class OpGroup : uint8_t { kRefused, kFraming, kScalar, kContainer, kMemo };

constexpr std::array<OpGroup, 256> kOpGroups = [] {
  std::array<OpGroup, 256> t{};
  for (uint8_t op : {PROTO, FRAME, STOP, MARK, POP, POP_MARK, DUP}) t[op] = OpGroup::kFraming;
  for (uint8_t op : {NONE, NEWTRUE, NEWFALSE, BININT, BININT1, BININT2, LONG1, LONG4, BINFLOAT,
                     SHORT_BINUNICODE, BINUNICODE, BINUNICODE8, SHORT_BINBYTES, SHORT_BINSTRING,
                     BINBYTES, BINSTRING, BINBYTES8, BYTEARRAY8})
    t[op] = OpGroup::kScalar;
  for (uint8_t op : {EMPTY_LIST, EMPTY_TUPLE, EMPTY_DICT, EMPTY_SET, APPEND, APPENDS, ADDITEMS,
                     SETITEM, SETITEMS, LIST, TUPLE, DICT, FROZENSET, TUPLE1, TUPLE2, TUPLE3})
    t[op] = OpGroup::kContainer;
  for (uint8_t op : {BINPUT, LONG_BINPUT, MEMOIZE, PUT, BINGET, LONG_BINGET, GET})
    t[op] = OpGroup::kMemo;
  return t;
}();

}  // namespace

// The stack and framing opcodes, and STOP (the result into *result).
Machine::Step Machine::framing_op(uint32_t* result) {
  uint32_t a = 0;
  size_t k = 0;
  switch (op_) {
    case PROTO: {
      if (!need(1)) return Step::kFail;
      uint8_t v = static_cast<uint8_t>(in_[pos_++]);
      if (v > 5) return failed("unsupported protocol " + std::to_string(v));
      return Step::kNext;
    }
    case FRAME: {
      if (!need(8)) return Step::kFail;
      uint64_t n = read_le<8>();
      if (n > in_.size() - pos_) return failed("frame longer than the rest of the input");
      return Step::kNext;
    }
    case STOP:
      if (!pop(result)) return Step::kFail;
      return Step::kStop;
    case MARK: marks_.push_back(stack_.size()); return Step::kNext;
    case POP:
      if (stack_.size() > fence()) {
        stack_.pop_back();
      } else if (!marks_.empty()) {
        marks_.pop_back();
      } else {
        return failed("stack underflow");
      }
      return Step::kNext;
    case POP_MARK:
      if (!pop_mark(&k)) return Step::kFail;
      stack_.resize(k);
      return Step::kNext;
    case DUP:
      if (!top(&a)) return Step::kFail;
      stack_.push_back(a);
      return Step::kNext;
    default: return Step::kOther;
  }
}

// The opcodes that push one plain value: none, booleans, integers, floats, text and bytes.
Machine::Step Machine::scalar_op() {
  uint32_t id = 0;
  switch (op_) {
    case NONE:
      if (!push_new(Kind::kNone)) return Step::kFail;
      return Step::kNext;
    case NEWTRUE:
    case NEWFALSE:
      if (!push_new(Kind::kBool, &id)) return Step::kFail;
      objs_[id].i = op_ == NEWTRUE;
      return Step::kNext;
    case BININT:
      if (!need(4)) return Step::kFail;
      if (!push_new(Kind::kInt, &id)) return Step::kFail;
      objs_[id].i = static_cast<int32_t>(static_cast<uint32_t>(read_le<4>()));
      return Step::kNext;
    case BININT1:
      if (!need(1)) return Step::kFail;
      if (!push_new(Kind::kInt, &id)) return Step::kFail;
      objs_[id].i = static_cast<int64_t>(read_le<1>());
      return Step::kNext;
    case BININT2:
      if (!need(2)) return Step::kFail;
      if (!push_new(Kind::kInt, &id)) return Step::kFail;
      objs_[id].i = static_cast<int64_t>(read_le<2>());
      return Step::kNext;
    case LONG1: {
      if (!need(1)) return Step::kFail;
      size_t n = static_cast<size_t>(read_le<1>());
      if (!push_long(n)) return Step::kFail;
      return Step::kNext;
    }
    case LONG4: {
      if (!need(4)) return Step::kFail;
      int32_t n = static_cast<int32_t>(static_cast<uint32_t>(read_le<4>()));
      if (n < 0) return failed("negative length");
      if (!push_long(static_cast<size_t>(n))) return Step::kFail;
      return Step::kNext;
    }
    case BINFLOAT: {
      if (!need(8)) return Step::kFail;
      uint64_t bits = 0;
      for (size_t q = 0; q < 8; ++q) bits = (bits << 8) | static_cast<unsigned char>(in_[pos_ + q]);
      pos_ += 8;
      double d;
      std::memcpy(&d, &bits, sizeof d);
      if (!push_new(Kind::kFloat, &id)) return Step::kFail;
      objs_[id].f = d;
      return Step::kNext;
    }
    case SHORT_BINUNICODE:
      if (!need(1)) return Step::kFail;
      if (!push_str(Kind::kStr, read_le<1>())) return Step::kFail;
      return Step::kNext;
    case BINUNICODE:
      if (!need(4)) return Step::kFail;
      if (!push_str(Kind::kStr, read_le<4>())) return Step::kFail;
      return Step::kNext;
    case BINUNICODE8: {
      if (!need(8)) return Step::kFail;
      uint64_t n = read_le<8>();
      if (n > in_.size()) return failed("length beyond the input");
      if (!push_str(Kind::kStr, static_cast<size_t>(n))) return Step::kFail;
      return Step::kNext;
    }
    case SHORT_BINBYTES:
    case SHORT_BINSTRING:
      if (!need(1)) return Step::kFail;
      if (!push_str(Kind::kBytes, read_le<1>())) return Step::kFail;
      return Step::kNext;
    case BINBYTES:
      if (!need(4)) return Step::kFail;
      if (!push_str(Kind::kBytes, read_le<4>())) return Step::kFail;
      return Step::kNext;
    case BINSTRING: {
      if (!need(4)) return Step::kFail;
      int32_t n = static_cast<int32_t>(static_cast<uint32_t>(read_le<4>()));
      if (n < 0) return failed("negative length");
      if (!push_str(Kind::kBytes, static_cast<size_t>(n))) return Step::kFail;
      return Step::kNext;
    }
    case BINBYTES8:
    case BYTEARRAY8: {
      if (!need(8)) return Step::kFail;
      uint64_t n = read_le<8>();
      if (n > in_.size()) return failed("length beyond the input");
      if (!push_str(Kind::kBytes, static_cast<size_t>(n))) return Step::kFail;
      return Step::kNext;
    }
    default: return Step::kOther;
  }
}

// The opcodes that make containers or add items to them.
Machine::Step Machine::container_op() {
  uint32_t a = 0, b = 0, id = 0;
  size_t k = 0;
  switch (op_) {
    case EMPTY_LIST:
      if (!push_new(Kind::kList)) return Step::kFail;
      return Step::kNext;
    case EMPTY_TUPLE:
      if (!push_new(Kind::kTuple)) return Step::kFail;
      return Step::kNext;
    case EMPTY_DICT:
      if (!push_new(Kind::kDict)) return Step::kFail;
      return Step::kNext;
    case EMPTY_SET:
      if (!push_new(Kind::kSet)) return Step::kFail;
      return Step::kNext;
    case APPEND:
      if (!pop(&a) || !top(&b)) return Step::kFail;
      if (!seq_append(b, &a, 1, Kind::kList)) return Step::kFail;
      return Step::kNext;
    case APPENDS:
    case ADDITEMS:
      if (!pop_mark(&k) || !below_mark(k, &b)) return Step::kFail;
      if (!seq_append(b, stack_.data() + k, stack_.size() - k,
                      op_ == APPENDS ? Kind::kList : Kind::kSet))
        return Step::kFail;
      stack_.resize(k);
      return Step::kNext;
    case SETITEM: {
      uint32_t kv[2];
      if (!pop(&kv[1]) || !pop(&kv[0]) || !top(&b)) return Step::kFail;
      if (!seq_append(b, kv, 2, Kind::kDict)) return Step::kFail;
      return Step::kNext;
    }
    case SETITEMS:
      if (!pop_mark(&k) || !below_mark(k, &b)) return Step::kFail;
      if ((stack_.size() - k) % 2) return failed("odd number of items for a dict");
      if (!seq_append(b, stack_.data() + k, stack_.size() - k, Kind::kDict)) return Step::kFail;
      stack_.resize(k);
      return Step::kNext;
    case LIST:
    case TUPLE:
    case DICT:
    case FROZENSET: {
      if (!pop_mark(&k)) return Step::kFail;
      Kind kind = op_ == LIST    ? Kind::kList
                  : op_ == TUPLE ? Kind::kTuple
                  : op_ == DICT  ? Kind::kDict
                                 : Kind::kFrozenSet;
      if (kind == Kind::kDict && (stack_.size() - k) % 2)
        return failed("odd number of items for a dict");
      if (!new_obj(kind, &id)) return Step::kFail;
      if (pool_.size() + (stack_.size() - k) >= UINT32_MAX) return failed("too many items");
      seq_add(objs_[id].ref, stack_.data() + k, stack_.size() - k);
      stack_.resize(k);
      stack_.push_back(id);
      return Step::kNext;
    }
    case TUPLE1:
    case TUPLE2:
    case TUPLE3: {
      size_t n = size_t(op_ - TUPLE1) + 1;
      if (stack_.size() < fence() + n) return failed("stack underflow");
      if (!new_obj(Kind::kTuple, &id)) return Step::kFail;
      seq_add(objs_[id].ref, stack_.data() + stack_.size() - n, n);
      stack_.resize(stack_.size() - n);
      stack_.push_back(id);
      return Step::kNext;
    }
    default: return Step::kOther;
  }
}

// The memo: putting the top of the stack and getting it back.
Machine::Step Machine::memo_op() {
  switch (op_) {
    case BINPUT:
      if (!need(1)) return Step::kFail;
      if (!memo_put(read_le<1>())) return Step::kFail;
      return Step::kNext;
    case LONG_BINPUT:
      if (!need(4)) return Step::kFail;
      if (!memo_put(read_le<4>())) return Step::kFail;
      return Step::kNext;
    case MEMOIZE:
      if (!memo_put(memo_count_)) return Step::kFail;
      return Step::kNext;
    case PUT: {
      uint64_t idx;
      if (!read_decimal_line(&idx) || !memo_put(idx)) return Step::kFail;
      return Step::kNext;
    }
    case BINGET:
      if (!need(1)) return Step::kFail;
      if (!memo_get(read_le<1>())) return Step::kFail;
      return Step::kNext;
    case LONG_BINGET:
      if (!need(4)) return Step::kFail;
      if (!memo_get(read_le<4>())) return Step::kFail;
      return Step::kNext;
    case GET: {
      uint64_t idx;
      if (!read_decimal_line(&idx) || !memo_get(idx)) return Step::kFail;
      return Step::kNext;
    }
    default: return Step::kOther;
  }
}

// Why an opcode outside the plain-data set is refused.
const char* refusal(uint8_t op) {
  switch (op) {
    case GLOBAL:
    case STACK_GLOBAL:
    case INST: return "refused: it imports a Python object (only plain data is read)";
    case REDUCE:
    case BUILD:
    case OBJ:
    case NEWOBJ:
    case NEWOBJ_EX: return "refused: it calls or builds a Python object (only plain data is read)";
    case EXT1:
    case EXT2:
    case EXT4: return "refused: extension registry objects are not plain data";
    case PERSID:
    case BINPERSID: return "refused: persistent ids need the writer's resolver";
    case NEXT_BUFFER:
    case READONLY_BUFFER: return "refused: out-of-band buffers are not supported";
    case INT:
    case LONG:
    case FLOAT:
    case STRING:
    case UNICODE:
      return "refused: protocol 0 text opcodes are not supported (dumps use 2 or later)";
    default: return "unknown opcode";
  }
}

// The opcode loop: each opcode goes to the function of its group (kOpGroups).
bool Machine::execute(uint32_t* result) {
  if (in_.empty()) {
    op_at_ = 0;
    error_ = "pickle: empty input";
    return false;
  }
  // Protocol 2 and later begin with PROTO, as every dump does; the reader takes a file for a
  // pickle by it, and so does the machine (never a pickle that only the JSON path would read).
  if (static_cast<uint8_t>(in_[0]) != PROTO) {
    op_at_ = 0;
    error_ = "pickle: does not begin with the PROTO opcode (dumps are protocol 2 or later)";
    return false;
  }
  while (true) {
    if (pos_ >= in_.size()) {
      op_at_ = pos_;
      error_ = "pickle: truncated at offset " + std::to_string(pos_) + " (no STOP opcode)";
      return false;
    }
    op_at_ = pos_;
    op_ = static_cast<uint8_t>(in_[pos_++]);
    Step step;
    switch (kOpGroups[op_]) {
      case OpGroup::kFraming: step = framing_op(result); break;
      case OpGroup::kScalar: step = scalar_op(); break;
      case OpGroup::kContainer: step = container_op(); break;
      case OpGroup::kMemo: step = memo_op(); break;
      default: return fail(refusal(op_));
    }
    if (step == Step::kNext) continue;
    if (step == Step::kOther) return fail(refusal(op_));  // not in its group's switch
    return step == Step::kStop;
  }
}

}  // namespace unpickle_detail

using namespace unpickle_detail;  // opcode names, Kind

const char* pickle_opcode_name(uint8_t op) {
  switch (op) {
    // A table of names, several to a line.
    // clang-format off
#define FR_OPNAME(x) case x: return #x;
    FR_OPNAME(MARK) FR_OPNAME(STOP) FR_OPNAME(POP) FR_OPNAME(POP_MARK) FR_OPNAME(DUP)
    FR_OPNAME(FLOAT) FR_OPNAME(INT) FR_OPNAME(BININT) FR_OPNAME(BININT1) FR_OPNAME(LONG)
    FR_OPNAME(BININT2) FR_OPNAME(NONE) FR_OPNAME(PERSID) FR_OPNAME(BINPERSID) FR_OPNAME(REDUCE)
    FR_OPNAME(STRING) FR_OPNAME(BINSTRING) FR_OPNAME(SHORT_BINSTRING) FR_OPNAME(UNICODE)
    FR_OPNAME(BINUNICODE) FR_OPNAME(APPEND) FR_OPNAME(BUILD) FR_OPNAME(GLOBAL) FR_OPNAME(DICT)
    FR_OPNAME(EMPTY_DICT) FR_OPNAME(APPENDS) FR_OPNAME(GET) FR_OPNAME(BINGET) FR_OPNAME(INST)
    FR_OPNAME(LONG_BINGET) FR_OPNAME(LIST) FR_OPNAME(EMPTY_LIST) FR_OPNAME(OBJ) FR_OPNAME(PUT)
    FR_OPNAME(BINPUT) FR_OPNAME(LONG_BINPUT) FR_OPNAME(SETITEM) FR_OPNAME(TUPLE)
    FR_OPNAME(EMPTY_TUPLE) FR_OPNAME(SETITEMS) FR_OPNAME(BINFLOAT) FR_OPNAME(PROTO)
    FR_OPNAME(NEWOBJ) FR_OPNAME(EXT1) FR_OPNAME(EXT2) FR_OPNAME(EXT4) FR_OPNAME(TUPLE1)
    FR_OPNAME(TUPLE2) FR_OPNAME(TUPLE3) FR_OPNAME(NEWTRUE) FR_OPNAME(NEWFALSE) FR_OPNAME(LONG1)
    FR_OPNAME(LONG4) FR_OPNAME(BINBYTES) FR_OPNAME(SHORT_BINBYTES) FR_OPNAME(SHORT_BINUNICODE)
    FR_OPNAME(BINUNICODE8) FR_OPNAME(BINBYTES8) FR_OPNAME(EMPTY_SET) FR_OPNAME(ADDITEMS)
    FR_OPNAME(FROZENSET) FR_OPNAME(NEWOBJ_EX) FR_OPNAME(STACK_GLOBAL) FR_OPNAME(MEMOIZE)
    FR_OPNAME(FRAME) FR_OPNAME(BYTEARRAY8) FR_OPNAME(NEXT_BUFFER) FR_OPNAME(READONLY_BUFFER)
#undef FR_OPNAME
        // clang-format on
        // clang-format on
        default : return nullptr;
  }
}

UnpickleResult unpickle(std::string_view bytes, const UnpickleLimits& limits) {
  unpickle_detail::Machine m(bytes, limits);
  return m.run();
}

PickleDoc::PickleDoc() = default;
PickleDoc::~PickleDoc() = default;

bool PickleDoc::run(std::string_view bytes, const UnpickleLimits& limits, bool scan_skipped,
                    std::string* error) {
  wrong_guess_ = false;
  m_ = std::make_unique<unpickle_detail::Machine>(bytes, limits, scan_skipped);
  if (m_->execute_only(error)) return true;
  wrong_guess_ = m_->scan_guessed_wrong();
  return false;
}

bool PickleDoc::to_json(Ref v, nlohmann::json* out, std::string* error) const {
  bool ok = m_->json_of(v.id, out, error);
  if (m_->scan_guessed_wrong()) wrong_guess_ = true;
  return ok;
}

}  // namespace fr::analyzer::torch
