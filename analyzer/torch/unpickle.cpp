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

#include <cmath>
#include <cstdio>
#include <cstring>
#include <algorithm>
#include <iterator>
#include <unordered_map>
#include <utility>

namespace fr::analyzer::torch {

namespace {

// Opcode bytes (CPython's Lib/pickle.py names).
enum Op : uint8_t {
  MARK = '(', STOP = '.', POP = '0', POP_MARK = '1', DUP = '2', FLOAT = 'F', INT = 'I',
  BININT = 'J', BININT1 = 'K', LONG = 'L', BININT2 = 'M', NONE = 'N', PERSID = 'P',
  BINPERSID = 'Q', REDUCE = 'R', STRING = 'S', BINSTRING = 'T', SHORT_BINSTRING = 'U',
  UNICODE = 'V', BINUNICODE = 'X', APPEND = 'a', BUILD = 'b', GLOBAL = 'c', DICT = 'd',
  EMPTY_DICT = '}', APPENDS = 'e', GET = 'g', BINGET = 'h', INST = 'i', LONG_BINGET = 'j',
  LIST = 'l', EMPTY_LIST = ']', OBJ = 'o', PUT = 'p', BINPUT = 'q', LONG_BINPUT = 'r',
  SETITEM = 's', TUPLE = 't', EMPTY_TUPLE = ')', SETITEMS = 'u', BINFLOAT = 'G',
  PROTO = 0x80, NEWOBJ = 0x81, EXT1 = 0x82, EXT2 = 0x83, EXT4 = 0x84, TUPLE1 = 0x85,
  TUPLE2 = 0x86, TUPLE3 = 0x87, NEWTRUE = 0x88, NEWFALSE = 0x89, LONG1 = 0x8a, LONG4 = 0x8b,
  BINBYTES = 'B', SHORT_BINBYTES = 'C', SHORT_BINUNICODE = 0x8c, BINUNICODE8 = 0x8d,
  BINBYTES8 = 0x8e, EMPTY_SET = 0x8f, ADDITEMS = 0x90, FROZENSET = 0x91, NEWOBJ_EX = 0x92,
  STACK_GLOBAL = 0x93, MEMOIZE = 0x94, FRAME = 0x95, BYTEARRAY8 = 0x96, NEXT_BUFFER = 0x97,
  READONLY_BUFFER = 0x98,
};

enum class Kind : uint8_t {
  kNone, kBool, kInt, kUint, kBigInt, kFloat, kStr, kBytes, kList, kTuple, kDict, kSet,
  kFrozenSet,
  kSkipped,  // stands for the value of a skipped key, which was scanned, not built
};

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::kNone: return "None";
    case Kind::kBool: return "bool";
    case Kind::kInt: case Kind::kUint: case Kind::kBigInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kStr: return "str";
    case Kind::kBytes: return "bytes";
    case Kind::kList: return "list";
    case Kind::kTuple: return "tuple";
    case Kind::kDict: return "dict";
    case Kind::kSet: return "set";
    case Kind::kFrozenSet: return "frozenset";
    case Kind::kSkipped: return "skipped value";
  }
  return "?";
}

// One value. `ref` indexes strs_ (str, bytes) or seqs_ (containers; a dict's sequence holds
// keys and values interleaved, a key and its value always in the same segment).
struct Obj {
  Kind kind;
  uint8_t skip_key = 0;  // str: 0 not yet asked, 1 not a skipped key, 2 a skipped key
  uint32_t ref = 0;
  union {  // by kind: bool/int i, wide unsigned u, float/bigint f
    int64_t i = 0;
    uint64_t u;
    double f;
  };
};
static_assert(sizeof(Obj) == 16, "one value stays small");

bool valid_utf8(std::string_view s) {
  size_t i = 0, n = s.size();
  while (i < n) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    size_t len;
    uint32_t cp;
    if (c < 0x80) { ++i; continue; }
    if ((c & 0xE0) == 0xC0) { len = 2; cp = c & 0x1F; }
    else if ((c & 0xF0) == 0xE0) { len = 3; cp = c & 0x0F; }
    else if ((c & 0xF8) == 0xF0) { len = 4; cp = c & 0x07; }
    else return false;
    if (i + len > n) return false;
    for (size_t k = 1; k < len; ++k) {
      unsigned char cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
        cp > 0x10FFFF)
      return false;
    // Python's pickle writes lone surrogates with "surrogatepass"; they are not valid UTF-8 and
    // cannot be represented in JSON text, so they are refused like any other bad sequence.
    if (cp >= 0xD800 && cp <= 0xDFFF) return false;
    i += len;
  }
  return true;
}

}  // namespace

namespace unpickle_detail {

class Machine {
 public:
  Machine(std::string_view in, const UnpickleLimits& lim, bool scan = true)
      : in_(in), lim_(lim), scan_(scan) {
    // Values built (frames are scanned, not built) run about one per 50 bytes of a dump.
    objs_.reserve(std::min<size_t>(in.size() / 48 + 64, lim.max_objects));
  }

  UnpickleResult run() {
    UnpickleResult r = run_once();
    if (r.ok() || !rerun_) return r;
    reset();
    scan_ = false;  // build everything: the result cannot depend on the scan
    return run_once();
  }

  // For PickleDoc: runs to STOP without building JSON; the values stay readable below.
  bool execute_only(std::string* error) {
    if (execute(&top_)) return true;
    *error = error_;
    return false;
  }
  uint32_t top_value() const { return top_; }
  Kind kind(uint32_t id) const { return objs_[id].kind; }
  const Obj& obj(uint32_t id) const { return objs_[id]; }
  std::string_view str(uint32_t id) const { return strs_[objs_[id].ref]; }
  bool is_skipped_key(uint32_t id) const {
    const Obj& o = objs_[id];
    if (o.kind != Kind::kStr) return false;
    return o.skip_key ? o.skip_key == 2 : skipped(strs_[o.ref]);  // asked once during the run
  }
  // Items of a container, in order (a dict's keys and values interleaved, pairs under skipped
  // keys left out).
  void items(uint32_t id, std::vector<PickleDoc::Ref>* out) const {
    out->clear();
    const Obj& o = objs_[id];
    if (o.kind < Kind::kList || o.kind > Kind::kFrozenSet) return;
    const Seq q = seqs_[o.ref];
    bool dict = o.kind == Kind::kDict;
    for (uint32_t g = q.head; g != kNoSeg; g = segs_[g].next) {
      const Seg seg = segs_[g];
      const uint32_t* p = pool_.data() + seg.begin;
      if (!dict) {
        for (uint32_t k = 0; k < seg.count; ++k) out->push_back(PickleDoc::Ref{p[k]});
        continue;
      }
      for (uint32_t k = 0; k + 1 < seg.count; k += 2) {
        if (is_skipped_key(p[k])) continue;
        out->push_back(PickleDoc::Ref{p[k]});
        out->push_back(PickleDoc::Ref{p[k + 1]});
      }
    }
  }
  bool json_of(uint32_t id, nlohmann::json* out, std::string* error) {
    out_nodes_ = 0;
    out_bytes_ = 0;
    error_.clear();
    if (to_json(id, 0, out)) return true;
    *error = error_;
    return false;
  }
  bool scan_guessed_wrong() const { return rerun_; }

 private:
  std::string_view in_;
  UnpickleLimits lim_;
  uint32_t top_ = 0;
  bool scan_ = true;    // scan the values of skipped keys instead of building them
  bool rerun_ = false;  // a scan guessed wrong: run again with scan_ off
  static constexpr uint32_t kPoison = UINT32_MAX;  // memo entry made inside a scanned value

  UnpickleResult run_once() {
    UnpickleResult r;
    uint32_t top = 0;
    if (!execute(&top)) {
      r.error = error_;
      return r;
    }
    out_nodes_ = 0;
    out_bytes_ = 0;
    if (!to_json(top, 0, &r.value)) {
      r.value = nullptr;
      r.error = error_;
    }
    return r;
  }

  void reset() {
    pos_ = op_at_ = 0;
    op_ = 0;
    error_.clear();
    rerun_ = false;
    objs_.clear();
    strs_.clear();
    seqs_.clear();
    segs_.clear();
    pool_.clear();
    stack_.clear();
    marks_.clear();
    memo_dense_.clear();
    memo_sparse_.clear();
    poison_.clear();
    memo_count_ = 0;
  }

  // A guess of the scan did not hold: stop, and run() starts over without scanning.
  bool scan_wrong() {
    rerun_ = true;
    if (error_.empty()) error_ = "pickle: internal: skipped value scan abandoned";
    return false;
  }

  // The str just pushed is a skipped key when it is at a key's place in a SETITEMS batch (an
  // even place above the mark, a dict below the mark).
  bool at_key_place() const {
    if (marks_.empty()) return false;
    size_t m = marks_.back(), n = stack_.size();
    return m >= 1 && n > m && (n - m) % 2 == 1 && objs_[stack_[m - 1]].kind == Kind::kDict;
  }

  // Memo entries made inside scanned values, as ascending disjoint ranges [first, last]: a
  // pickler numbers its memo in order, so one scanned value (a frames list) makes one range and
  // nothing is written per entry. Indices out of order fall back to kPoison in the tables.
  std::vector<std::pair<uint64_t, uint64_t>> poison_;
  bool in_poison(uint64_t idx) const {
    if (poison_.empty() || idx > poison_.back().second) return false;
    auto it = std::upper_bound(poison_.begin(), poison_.end(), idx,
                               [](uint64_t x, const std::pair<uint64_t, uint64_t>& r) {
                                 return x < r.first;
                               });
    return it != poison_.begin() && idx <= std::prev(it)->second;
  }
  bool memo_mark_poison(uint64_t idx) {
    if (idx < memo_dense_.size() && memo_dense_[idx] != 0) {
      memo_dense_[idx] = kPoison;  // a stored value overwritten by a scanned one
      return true;
    }
    bool beyond = poison_.empty() || idx > poison_.back().second;
    if (beyond && (memo_sparse_.empty() || !memo_sparse_.count(idx))) {
      if (memo_count_ >= lim_.max_memo) return scan_wrong();
      if (!poison_.empty() && idx == poison_.back().second + 1)
        poison_.back().second = idx;
      else
        poison_.emplace_back(idx, idx);
      ++memo_count_;
      return true;
    }
    if (in_poison(idx)) return true;
    bool dense = idx < memo_dense_.size() + 4096 && idx < lim_.max_memo;
    bool fresh = dense ? (idx >= memo_dense_.size() || memo_dense_[idx] == 0)
                       : memo_sparse_.count(idx) == 0;
    if (fresh && memo_count_ >= lim_.max_memo) return scan_wrong();
    if (dense) {
      if (idx >= memo_dense_.size()) memo_dense_.resize(idx + 1, 0);
      memo_dense_[idx] = kPoison;
    } else {
      memo_sparse_[idx] = kPoison;
    }
    memo_count_ += fresh;
    return true;
  }
  bool memo_known(uint64_t idx) {
    if (idx < memo_dense_.size() && memo_dense_[idx] != 0) return true;
    if (in_poison(idx)) {
      // Scanned values fetch the same keys thousands of times: the next look is one load.
      if (idx < memo_dense_.size()) memo_dense_[idx] = kPoison;
      return true;
    }
    return !memo_sparse_.empty() && memo_sparse_.count(idx);
  }
  // memo_mark_poison for the common case, inline in the scan: the next index of the range.
  bool poison_next(uint64_t idx) {
    if (!poison_.empty() && idx == poison_.back().second + 1 && memo_count_ < lim_.max_memo &&
        (idx >= memo_dense_.size() || memo_dense_[idx] == 0) && memo_sparse_.empty()) {
      poison_.back().second = idx;
      ++memo_count_;
      return true;
    }
    return memo_mark_poison(idx);
  }

  static uint64_t le_at(const unsigned char* q, size_t w) {
    uint64_t v = 0;
    for (size_t k = 0; k < w; ++k) v |= uint64_t(q[k]) << (8 * k);
    return v;
  }

  // The scan itself, on plain pointers kept in registers: the offset just past the value, or
  // SIZE_MAX when the scan cannot vouch for it.
  size_t scan_ops(const unsigned char* p, const unsigned char* const end) {
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
      // A scalar: fixed bytes, or a length-prefixed payload.
      if (size_t(end - p) < fixed) return SIZE_MAX;
      p += fixed;
      if (width) {
        if (size_t(end - p) < width) return SIZE_MAX;
        uint64_t n = le_at(p, width);
        p += width;
        if (n > uint64_t(end - p)) return SIZE_MAX;
        p += n;
      }
      ++h;
    }
  }

  // Scans one complete value from pos_ (see the file comment) and pushes a placeholder for it.
  // The hot loop of a dump: a frames list is about 14 opcodes a frame, so each opcode costs a
  // few instructions (lengths are skipped, never read as text; memo puts only extend a range).
  bool scan_value() {
    const unsigned char* const begin = reinterpret_cast<const unsigned char*>(in_.data());
    const unsigned char* const end = begin + in_.size();
    size_t at = scan_ops(begin + pos_, end);
    if (at == SIZE_MAX) return scan_wrong();
    pos_ = at;
    return push_new(Kind::kSkipped);
  }

  bool skipped(std::string_view key) const {
    for (const auto& k : lim_.skip_keys)
      if (key == k) return true;
    return false;
  }
  size_t pos_ = 0;
  size_t op_at_ = 0;  // offset of the opcode being run
  uint8_t op_ = 0;
  std::string error_;

  std::vector<Obj> objs_;
  static constexpr uint32_t kNoSeg = UINT32_MAX;
  struct Seg { uint32_t begin, count, next; };  // pool_[begin, begin + count), then segs_[next]
  struct Seq { uint32_t head = kNoSeg, tail = kNoSeg; };
  std::vector<std::string_view> strs_;
  std::vector<Seq> seqs_;
  std::vector<Seg> segs_;
  std::vector<uint32_t> pool_;
  std::vector<uint32_t> stack_;
  std::vector<size_t> marks_;  // stack sizes at each MARK
  std::vector<uint32_t> memo_dense_;  // memo index -> value + 1; 0: never stored
  std::unordered_map<uint64_t, uint32_t> memo_sparse_;  // indices far beyond the dense part
  size_t memo_count_ = 0;
  size_t out_nodes_ = 0;
  size_t out_bytes_ = 0;

  std::string op_label() const {
    char buf[64];
    const char* name = pickle_opcode_name(op_);
    if (name)
      snprintf(buf, sizeof buf, "%s (0x%02x)", name, op_);
    else
      snprintf(buf, sizeof buf, "0x%02x", op_);
    return buf;
  }

  bool fail(const std::string& what) {
    if (error_.empty())
      error_ = "pickle: opcode " + op_label() + " at offset " + std::to_string(op_at_) + ": " + what;
    return false;
  }

  bool need(size_t n) { return in_.size() - pos_ >= n || truncated(n); }
  [[gnu::noinline, gnu::cold]] bool truncated(size_t n) {
    return fail("truncated (needs " + std::to_string(n) + " more bytes, " +
                std::to_string(in_.size() - pos_) + " left)");
  }
  uint64_t read_le(size_t n) {
    uint64_t v = 0;
    for (size_t k = 0; k < n; ++k) v |= uint64_t(static_cast<unsigned char>(in_[pos_ + k])) << (8 * k);
    pos_ += n;
    return v;
  }

  [[gnu::noinline, gnu::cold]] bool too_many() {
    return fail("too many values (limit " + std::to_string(lim_.max_objects) + ")");
  }
  bool new_obj(Kind k, uint32_t* id) {
    if (objs_.size() >= lim_.max_objects || objs_.size() >= UINT32_MAX - 1) return too_many();
    Obj o;
    o.kind = k;
    if (k == Kind::kStr || k == Kind::kBytes) {
      o.ref = static_cast<uint32_t>(strs_.size());
      strs_.emplace_back();
    } else if (k >= Kind::kList && k <= Kind::kFrozenSet) {
      o.ref = static_cast<uint32_t>(seqs_.size());
      seqs_.emplace_back();
    }
    *id = static_cast<uint32_t>(objs_.size());
    objs_.push_back(o);
    return true;
  }
  bool push_new(Kind k, uint32_t* id = nullptr) {
    uint32_t x;
    if (!new_obj(k, &x)) return false;
    stack_.push_back(x);
    if (id) *id = x;
    return true;
  }

  size_t fence() const { return marks_.empty() ? 0 : marks_.back(); }
  bool pop(uint32_t* v) {
    if (stack_.size() <= fence()) return fail("stack underflow");
    *v = stack_.back();
    stack_.pop_back();
    return true;
  }
  bool top(uint32_t* v) {
    if (stack_.size() <= fence()) return fail("stack underflow");
    *v = stack_.back();
    return true;
  }
  bool pop_mark(size_t* k) {
    if (marks_.empty()) return fail("no MARK to pop to");
    *k = marks_.back();
    marks_.pop_back();
    return true;
  }
  // After pop_mark(k): the container just below the marked items.
  bool below_mark(size_t k, uint32_t* v) {
    if (k == 0 || k - 1 < fence()) return fail("stack underflow (no container below MARK)");
    *v = stack_[k - 1];
    return true;
  }

  bool push_str(Kind k, size_t n) {
    if (!need(n)) return false;
    std::string_view s = in_.substr(pos_, n);
    if (k == Kind::kStr && !valid_utf8(s)) return fail("str is not valid UTF-8");
    uint32_t id;
    if (!push_new(k, &id)) return false;
    strs_[objs_[id].ref] = s;
    pos_ += n;
    return maybe_scan();
  }

  // After a str was pushed (read or taken from the memo): when it is a skipped key, its own memo
  // entries are made as usual, then the value that follows is scanned.
  bool maybe_scan() {
    Obj& o = objs_[stack_.back()];
    if (!scan_ || o.kind != Kind::kStr) return true;
    // Keys come back through the memo thousands of times: ask once per value.
    if (o.skip_key == 0) o.skip_key = skipped(strs_[o.ref]) ? 2 : 1;
    if (o.skip_key != 2 || !at_key_place()) return true;
    while (pos_ < in_.size()) {
      op_at_ = pos_;
      op_ = static_cast<uint8_t>(in_[pos_]);
      if (op_ == BINPUT) {
        ++pos_;
        if (!need(1) || !memo_put(read_le(1))) return false;
      } else if (op_ == LONG_BINPUT) {
        ++pos_;
        if (!need(4) || !memo_put(read_le(4))) return false;
      } else if (op_ == MEMOIZE) {
        ++pos_;
        if (!memo_put(memo_count_)) return false;
      } else {
        break;
      }
    }
    return scan_value();
  }

  // LONG1/LONG4: little-endian two's complement of n bytes.
  bool push_long(size_t n) {
    if (!need(n)) return false;
    const unsigned char* b = reinterpret_cast<const unsigned char*>(in_.data() + pos_);
    pos_ += n;
    uint32_t id;
    if (n == 0) {
      if (!push_new(Kind::kInt, &id)) return false;
      objs_[id].i = 0;
      return true;
    }
    bool neg = b[n - 1] & 0x80;
    if (n <= 8) {
      uint64_t v = 0;
      for (size_t k = 0; k < n; ++k) v |= uint64_t(b[k]) << (8 * k);
      if (neg && n < 8) v |= ~uint64_t{0} << (8 * n);
      if (!push_new(Kind::kInt, &id)) return false;
      objs_[id].i = static_cast<int64_t>(v);
      return true;
    }
    // Wider: fits in uint64 when non-negative and every byte past the eighth is zero.
    bool fits_u64 = !neg;
    for (size_t k = 8; k < n && fits_u64; ++k) fits_u64 = b[k] == 0;
    if (fits_u64) {
      uint64_t v = 0;
      for (size_t k = 0; k < 8; ++k) v |= uint64_t(b[k]) << (8 * k);
      if (!push_new(Kind::kUint, &id)) return false;
      objs_[id].u = v;
      return true;
    }
    // Beyond 64 bits: kept as an approximate float (nothing in a dump is this wide).
    double d = 0;
    for (size_t k = n; k-- > 0;) d = d * 256.0 + (neg ? double(0xFF - b[k]) : double(b[k]));
    if (neg) d = -(d + 1);
    if (!push_new(Kind::kBigInt, &id)) return false;
    objs_[id].f = d;
    return true;
  }

  bool memo_put(uint64_t idx) {
    uint32_t v = 0;
    if (!top(&v)) return false;
    bool dense = idx < memo_dense_.size() + 4096 && idx < lim_.max_memo;
    bool fresh = dense ? (idx >= memo_dense_.size() || memo_dense_[idx] == 0)
                       : memo_sparse_.count(idx) == 0;
    if (fresh && in_poison(idx)) fresh = false;  // counted when the scan made it
    if (fresh && memo_count_ >= lim_.max_memo)
      return fail("memo too large (limit " + std::to_string(lim_.max_memo) + ")");
    if (dense) {
      // Grown by half at a time: a pickler's memo is numbered in order.
      if (idx >= memo_dense_.size())
        memo_dense_.resize(std::min<size_t>(std::max(idx + 1, memo_dense_.size() * 3 / 2),
                                            lim_.max_memo),
                           0);
      memo_dense_[idx] = v + 1;
    } else {
      memo_sparse_[idx] = v;
    }
    memo_count_ += fresh;
    return true;
  }
  bool memo_get(uint64_t idx) {
    if (idx < memo_dense_.size() && memo_dense_[idx] != 0) {
      if (memo_dense_[idx] == kPoison) return scan_wrong();  // shared with a scanned value
      stack_.push_back(memo_dense_[idx] - 1);
      return maybe_scan();
    }
    auto it = memo_sparse_.find(idx);
    if (it == memo_sparse_.end()) {
      if (in_poison(idx)) return scan_wrong();  // shared with a scanned value
      return fail("memo key " + std::to_string(idx) + " was never stored");
    }
    if (it->second == kPoison) return scan_wrong();
    stack_.push_back(it->second);
    return maybe_scan();
  }
  // Adds n items to a container's sequence as one segment.
  void seq_add(uint32_t ref, const uint32_t* items, size_t n) {
    if (n == 0) return;
    Seg g{static_cast<uint32_t>(pool_.size()), static_cast<uint32_t>(n), kNoSeg};
    pool_.insert(pool_.end(), items, items + n);
    uint32_t gi = static_cast<uint32_t>(segs_.size());
    segs_.push_back(g);
    Seq& q = seqs_[ref];
    if (q.tail == kNoSeg)
      q.head = gi;
    else
      segs_[q.tail].next = gi;
    q.tail = gi;
  }
  bool read_decimal_line(uint64_t* v) {
    size_t nl = in_.find('\n', pos_);
    if (nl == std::string_view::npos) return fail("truncated (no end of line)");
    std::string_view line = in_.substr(pos_, nl - pos_);
    if (line.empty() || line.size() > 19) return fail("bad memo index");
    uint64_t x = 0;
    for (char c : line) {
      if (c < '0' || c > '9') return fail("bad memo index");
      x = x * 10 + uint64_t(c - '0');
    }
    pos_ = nl + 1;
    *v = x;
    return true;
  }

  bool seq_append(uint32_t container, const uint32_t* items, size_t n, Kind want) {
    Kind k = objs_[container].kind;
    if (k == Kind::kSkipped) return scan_wrong();
    if (k != want)
      return fail(std::string("cannot add items to a ") + kind_name(k));
    if (pool_.size() + n >= UINT32_MAX || segs_.size() >= UINT32_MAX - 1)
      return fail("too many items");
    seq_add(objs_[container].ref, items, n);
    return true;
  }

  bool execute(uint32_t* result) {
    if (in_.empty()) {
      op_at_ = 0;
      error_ = "pickle: empty input";
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
      uint32_t a = 0, b = 0, id = 0;
      size_t k = 0;
      switch (op_) {
        case PROTO: {
          if (!need(1)) return false;
          uint8_t v = static_cast<uint8_t>(in_[pos_++]);
          if (v > 5) return fail("unsupported protocol " + std::to_string(v));
          break;
        }
        case FRAME: {
          if (!need(8)) return false;
          uint64_t n = read_le(8);
          if (n > in_.size() - pos_) return fail("frame longer than the rest of the input");
          break;
        }
        case STOP:
          if (!pop(result)) return false;
          return true;
        case MARK: marks_.push_back(stack_.size()); break;
        case POP:
          if (stack_.size() > fence()) {
            stack_.pop_back();
          } else if (!marks_.empty()) {
            marks_.pop_back();
          } else {
            return fail("stack underflow");
          }
          break;
        case POP_MARK:
          if (!pop_mark(&k)) return false;
          stack_.resize(k);
          break;
        case DUP:
          if (!top(&a)) return false;
          stack_.push_back(a);
          break;
        case NONE: if (!push_new(Kind::kNone)) return false; break;
        case NEWTRUE:
        case NEWFALSE:
          if (!push_new(Kind::kBool, &id)) return false;
          objs_[id].i = op_ == NEWTRUE;
          break;
        case BININT:
          if (!need(4)) return false;
          if (!push_new(Kind::kInt, &id)) return false;
          objs_[id].i = static_cast<int32_t>(static_cast<uint32_t>(read_le(4)));
          break;
        case BININT1:
          if (!need(1)) return false;
          if (!push_new(Kind::kInt, &id)) return false;
          objs_[id].i = static_cast<int64_t>(read_le(1));
          break;
        case BININT2:
          if (!need(2)) return false;
          if (!push_new(Kind::kInt, &id)) return false;
          objs_[id].i = static_cast<int64_t>(read_le(2));
          break;
        case LONG1: {
          if (!need(1)) return false;
          size_t n = static_cast<size_t>(read_le(1));
          if (!push_long(n)) return false;
          break;
        }
        case LONG4: {
          if (!need(4)) return false;
          int32_t n = static_cast<int32_t>(static_cast<uint32_t>(read_le(4)));
          if (n < 0) return fail("negative length");
          if (!push_long(static_cast<size_t>(n))) return false;
          break;
        }
        case BINFLOAT: {
          if (!need(8)) return false;
          uint64_t bits = 0;
          for (size_t q = 0; q < 8; ++q)
            bits = (bits << 8) | static_cast<unsigned char>(in_[pos_ + q]);
          pos_ += 8;
          double d;
          std::memcpy(&d, &bits, sizeof d);
          if (!push_new(Kind::kFloat, &id)) return false;
          objs_[id].f = d;
          break;
        }
        case SHORT_BINUNICODE:
          if (!need(1)) return false;
          if (!push_str(Kind::kStr, read_le(1))) return false;
          break;
        case BINUNICODE:
          if (!need(4)) return false;
          if (!push_str(Kind::kStr, read_le(4))) return false;
          break;
        case BINUNICODE8: {
          if (!need(8)) return false;
          uint64_t n = read_le(8);
          if (n > in_.size()) return fail("length beyond the input");
          if (!push_str(Kind::kStr, static_cast<size_t>(n))) return false;
          break;
        }
        case SHORT_BINBYTES:
        case SHORT_BINSTRING:
          if (!need(1)) return false;
          if (!push_str(Kind::kBytes, read_le(1))) return false;
          break;
        case BINBYTES:
          if (!need(4)) return false;
          if (!push_str(Kind::kBytes, read_le(4))) return false;
          break;
        case BINSTRING: {
          if (!need(4)) return false;
          int32_t n = static_cast<int32_t>(static_cast<uint32_t>(read_le(4)));
          if (n < 0) return fail("negative length");
          if (!push_str(Kind::kBytes, static_cast<size_t>(n))) return false;
          break;
        }
        case BINBYTES8:
        case BYTEARRAY8: {
          if (!need(8)) return false;
          uint64_t n = read_le(8);
          if (n > in_.size()) return fail("length beyond the input");
          if (!push_str(Kind::kBytes, static_cast<size_t>(n))) return false;
          break;
        }
        case EMPTY_LIST: if (!push_new(Kind::kList)) return false; break;
        case EMPTY_TUPLE: if (!push_new(Kind::kTuple)) return false; break;
        case EMPTY_DICT: if (!push_new(Kind::kDict)) return false; break;
        case EMPTY_SET: if (!push_new(Kind::kSet)) return false; break;
        case APPEND:
          if (!pop(&a) || !top(&b)) return false;
          if (!seq_append(b, &a, 1, Kind::kList)) return false;
          break;
        case APPENDS:
        case ADDITEMS:
          if (!pop_mark(&k) || !below_mark(k, &b)) return false;
          if (!seq_append(b, stack_.data() + k, stack_.size() - k,
                          op_ == APPENDS ? Kind::kList : Kind::kSet))
            return false;
          stack_.resize(k);
          break;
        case SETITEM: {
          uint32_t kv[2];
          if (!pop(&kv[1]) || !pop(&kv[0]) || !top(&b)) return false;
          if (!seq_append(b, kv, 2, Kind::kDict)) return false;
          break;
        }
        case SETITEMS:
          if (!pop_mark(&k) || !below_mark(k, &b)) return false;
          if ((stack_.size() - k) % 2) return fail("odd number of items for a dict");
          if (!seq_append(b, stack_.data() + k, stack_.size() - k, Kind::kDict)) return false;
          stack_.resize(k);
          break;
        case LIST:
        case TUPLE:
        case DICT:
        case FROZENSET: {
          if (!pop_mark(&k)) return false;
          Kind kind = op_ == LIST ? Kind::kList
                      : op_ == TUPLE ? Kind::kTuple
                      : op_ == DICT ? Kind::kDict
                                    : Kind::kFrozenSet;
          if (kind == Kind::kDict && (stack_.size() - k) % 2)
            return fail("odd number of items for a dict");
          if (!new_obj(kind, &id)) return false;
          if (pool_.size() + (stack_.size() - k) >= UINT32_MAX) return fail("too many items");
          seq_add(objs_[id].ref, stack_.data() + k, stack_.size() - k);
          stack_.resize(k);
          stack_.push_back(id);
          break;
        }
        case TUPLE1:
        case TUPLE2:
        case TUPLE3: {
          size_t n = size_t(op_ - TUPLE1) + 1;
          if (stack_.size() < fence() + n) return fail("stack underflow");
          if (!new_obj(Kind::kTuple, &id)) return false;
          seq_add(objs_[id].ref, stack_.data() + stack_.size() - n, n);
          stack_.resize(stack_.size() - n);
          stack_.push_back(id);
          break;
        }
        case BINPUT:
          if (!need(1)) return false;
          if (!memo_put(read_le(1))) return false;
          break;
        case LONG_BINPUT:
          if (!need(4)) return false;
          if (!memo_put(read_le(4))) return false;
          break;
        case MEMOIZE:
          if (!memo_put(memo_count_)) return false;
          break;
        case PUT: {
          uint64_t idx;
          if (!read_decimal_line(&idx) || !memo_put(idx)) return false;
          break;
        }
        case BINGET:
          if (!need(1)) return false;
          if (!memo_get(read_le(1))) return false;
          break;
        case LONG_BINGET:
          if (!need(4)) return false;
          if (!memo_get(read_le(4))) return false;
          break;
        case GET: {
          uint64_t idx;
          if (!read_decimal_line(&idx) || !memo_get(idx)) return false;
          break;
        }
        case GLOBAL:
        case STACK_GLOBAL:
        case INST:
          return fail("refused: it imports a Python object (only plain data is read)");
        case REDUCE:
        case BUILD:
        case OBJ:
        case NEWOBJ:
        case NEWOBJ_EX:
          return fail("refused: it calls or builds a Python object (only plain data is read)");
        case EXT1:
        case EXT2:
        case EXT4:
          return fail("refused: extension registry objects are not plain data");
        case PERSID:
        case BINPERSID:
          return fail("refused: persistent ids need the writer's resolver");
        case NEXT_BUFFER:
        case READONLY_BUFFER:
          return fail("refused: out-of-band buffers are not supported");
        case INT:
        case LONG:
        case FLOAT:
        case STRING:
        case UNICODE:
          return fail("refused: protocol 0 text opcodes are not supported (dumps use 2 or later)");
        default:
          return fail("unknown opcode");
      }
    }
  }

  bool key_text(uint32_t key, std::string* out) {
    const Obj& o = objs_[key];
    switch (o.kind) {
      case Kind::kSkipped: return scan_wrong();
      case Kind::kStr: out->assign(strs_[o.ref]); return true;
      case Kind::kBytes:
        if (!valid_utf8(strs_[o.ref])) break;
        out->assign(strs_[o.ref]);
        return true;
      case Kind::kInt: *out = std::to_string(o.i); return true;
      case Kind::kUint: *out = std::to_string(o.u); return true;
      case Kind::kBool: *out = o.i ? "True" : "False"; return true;
      case Kind::kNone: *out = "None"; return true;
      default: break;
    }
    error_ = std::string("pickle: dict key of type ") + kind_name(o.kind) + " is not supported";
    return false;
  }

  bool to_json(uint32_t id, size_t depth, nlohmann::json* out) {
    if (++out_nodes_ > lim_.max_output_nodes) {
      error_ = "pickle: result too large (more than " + std::to_string(lim_.max_output_nodes) +
               " values once shared parts are expanded)";
      return false;
    }
    const Obj& o = objs_[id];
    switch (o.kind) {
      case Kind::kSkipped: return scan_wrong();  // a placeholder where a value is used
      case Kind::kNone: *out = nullptr; return true;
      case Kind::kBool: *out = o.i != 0; return true;
      case Kind::kInt: *out = o.i; return true;
      case Kind::kUint: *out = o.u; return true;
      case Kind::kBigInt:
      case Kind::kFloat: *out = o.f; return true;
      case Kind::kStr:
      case Kind::kBytes: {
        std::string_view s = strs_[o.ref];
        out_bytes_ += s.size();
        if (out_bytes_ > lim_.max_output_bytes) {
          error_ = "pickle: result too large (more than " + std::to_string(lim_.max_output_bytes) +
                   " bytes of text once shared parts are expanded)";
          return false;
        }
        if (o.kind == Kind::kStr)
          *out = std::string(s);
        else
          *out = nlohmann::json::binary(std::vector<uint8_t>(s.begin(), s.end()));
        return true;
      }
      default: break;
    }
    if (depth >= lim_.max_depth) {
      error_ = "pickle: nested deeper than " + std::to_string(lim_.max_depth) +
               " levels (or a container that holds itself)";
      return false;
    }
    const Seq q = seqs_[o.ref];
    if (o.kind == Kind::kDict) {
      *out = nlohmann::json::object();
      std::string key;
      for (uint32_t g = q.head; g != kNoSeg; g = segs_[g].next) {
        const Seg seg = segs_[g];
        for (uint32_t k = 0; k + 1 < seg.count; k += 2) {
          uint32_t kid = pool_[seg.begin + k], vid = pool_[seg.begin + k + 1];
          if (objs_[kid].kind == Kind::kStr && skipped(strs_[objs_[kid].ref])) continue;
          if (!key_text(kid, &key)) return false;
          nlohmann::json v;
          if (!to_json(vid, depth + 1, &v)) return false;
          (*out)[key] = std::move(v);
        }
      }
      return true;
    }
    *out = nlohmann::json::array();
    for (uint32_t g = q.head; g != kNoSeg; g = segs_[g].next) {
      const Seg seg = segs_[g];
      for (uint32_t k = 0; k < seg.count; ++k) {
        nlohmann::json v;
        if (!to_json(pool_[seg.begin + k], depth + 1, &v)) return false;
        out->push_back(std::move(v));
      }
    }
    return true;
  }
};

}  // namespace unpickle_detail

const char* pickle_opcode_name(uint8_t op) {
  switch (op) {
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
    default: return nullptr;
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

PickleDoc::Ref PickleDoc::root() const { return Ref{m_->top_value()}; }

PickleDoc::Type PickleDoc::type(Ref v) const {
  switch (m_->kind(v.id)) {
    case Kind::kNone: return Type::kNone;
    case Kind::kBool: return Type::kBool;
    case Kind::kInt: return Type::kInt;
    case Kind::kUint: return Type::kUint;
    case Kind::kBigInt: case Kind::kFloat: return Type::kFloat;
    case Kind::kStr: return Type::kStr;
    case Kind::kBytes: return Type::kBytes;
    case Kind::kList: return Type::kList;
    case Kind::kTuple: return Type::kTuple;
    case Kind::kDict: return Type::kDict;
    case Kind::kSet: case Kind::kFrozenSet: return Type::kSet;
    case Kind::kSkipped: wrong_guess_ = true; return Type::kOther;
  }
  return Type::kOther;
}

int64_t PickleDoc::int_value(Ref v) const { return m_->obj(v.id).i; }
uint64_t PickleDoc::uint_value(Ref v) const { return m_->obj(v.id).u; }
double PickleDoc::float_value(Ref v) const { return m_->obj(v.id).f; }
std::string_view PickleDoc::text(Ref v) const { return m_->str(v.id); }

void PickleDoc::items(Ref v, std::vector<Ref>* out) const {
  m_->items(v.id, out);
}

bool PickleDoc::to_json(Ref v, nlohmann::json* out, std::string* error) const {
  bool ok = m_->json_of(v.id, out, error);
  if (m_->scan_guessed_wrong()) wrong_guess_ = true;
  return ok;
}

}  // namespace fr::analyzer::torch
