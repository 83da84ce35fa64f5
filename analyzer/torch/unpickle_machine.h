// The pickle machine behind unpickle() and PickleDoc (unpickle.h): its value arena, stack, memo
// and the scan of skipped values. Internal to analyzer/torch: unpickle.cpp runs the opcode loop,
// unpickle_scan.cpp scans skipped values, unpickle_json.cpp copies values out as JSON. The small
// helpers the opcode loop calls for every value stay here, inline, so the loop keeps its speed.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "analyzer/torch/unpickle.h"

namespace fr::analyzer::torch::unpickle_detail {

// Opcode bytes (CPython's Lib/pickle.py names).
// clang-format off
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
// clang-format on

enum class Kind : uint8_t {
  kNone,
  kBool,
  kInt,
  kUint,
  kBigInt,
  kFloat,
  kStr,
  kBytes,
  kList,
  kTuple,
  kDict,
  kSet,
  kFrozenSet,
  kSkipped,  // stands for the value of a skipped key, which was scanned, not built
};

inline const char* kind_name(Kind k) {
  switch (k) {
    case Kind::kNone: return "None";
    case Kind::kBool: return "bool";
    case Kind::kInt:
    case Kind::kUint:
    case Kind::kBigInt: return "int";
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

// A little-endian unsigned of W bytes (1, 2, 4 or 8) at q: one load on a little-endian host.
template <size_t W>
inline uint64_t load_le(const unsigned char* q) {
  static_assert(W == 1 || W == 2 || W == 4 || W == 8);
  if constexpr (W == 1) {
    return q[0];
  } else if constexpr (std::endian::native == std::endian::little) {
    using U = std::conditional_t<W == 2, uint16_t, std::conditional_t<W == 4, uint32_t, uint64_t>>;
    U v;
    std::memcpy(&v, q, W);
    return v;
  } else {
    uint64_t v = 0;
    for (size_t k = 0; k < W; ++k) v |= uint64_t(q[k]) << (8 * k);
    return v;
  }
}

inline bool valid_utf8(std::string_view s) {
  size_t i = 0, n = s.size();
  while (i < n) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    size_t len;
    uint32_t cp;
    if (c < 0x80) {
      ++i;
      continue;
    }
    if ((c & 0xE0) == 0xC0) {
      len = 2;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4;
      cp = c & 0x07;
    } else
      return false;
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

class Machine {
 public:
  Machine(std::string_view in, const UnpickleLimits& lim, bool scan = true)
      : in_(in), lim_(lim), scan_(scan) {
    // Sized for a dump whose frames are scanned, not built (about one value built per 32 bytes,
    // one memo entry per 24), so that none of these tables is copied while it grows.
    objs_.reserve(std::min<size_t>(in.size() / 32 + 64, lim.max_objects));
    pool_.reserve(in.size() / 24 + 64);
    segs_.reserve(in.size() / 128 + 16);
    seqs_.reserve(in.size() / 128 + 16);
    strs_.reserve(in.size() / 256 + 16);
    memo_dense_.reserve(std::min<size_t>(in.size() / 24 + 64, lim.max_memo));
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
    auto it = std::upper_bound(
        poison_.begin(), poison_.end(), idx,
        [](uint64_t x, const std::pair<uint64_t, uint64_t>& r) { return x < r.first; });
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
    bool fresh =
        dense ? (idx >= memo_dense_.size() || memo_dense_[idx] == 0) : memo_sparse_.count(idx) == 0;
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
  // The memo as the scan sees it, held in locals: the dense table, and the range of memo indices
  // made inside scanned values that is being extended, [first, next), `added` of them not yet
  // committed to poison_ and memo_count_, `room` more allowed by the memo limit. With no range
  // open (or a sparse memo in use) first and next are UINT64_MAX and every look takes the
  // member functions above.
  struct ScanMemo {
    const uint32_t* dense = nullptr;
    size_t dense_n = 0;
    uint64_t first = UINT64_MAX, next = UINT64_MAX;
    size_t added = 0, room = 0;
  };
  [[gnu::always_inline]] ScanMemo scan_memo() const {
    ScanMemo sm;
    sm.dense = memo_dense_.data();
    sm.dense_n = memo_dense_.size();
    sm.room = memo_count_ < lim_.max_memo ? lim_.max_memo - memo_count_ : 0;
    if (!poison_.empty() && memo_sparse_.empty()) {
      sm.first = poison_.back().first;
      sm.next = poison_.back().second + 1;
    }
    return sm;
  }
  [[gnu::always_inline]] void scan_commit(ScanMemo* sm) {
    if (sm->added == 0) return;
    poison_.back().second += sm->added;
    memo_count_ += sm->added;
    sm->room -= sm->added;
    sm->added = 0;
  }

  // The scan itself, on plain pointers kept in registers: the offset just past the value, or
  // SIZE_MAX when the scan cannot vouch for it (unpickle_scan.cpp).
  size_t scan_ops(const unsigned char* p, const unsigned char* const end, ScanMemo* sm);
  bool scan_get(uint64_t idx, ScanMemo* sm);
  bool scan_put(uint64_t idx, ScanMemo* sm);

  // Scans one complete value from pos_ (see unpickle.cpp) and pushes a placeholder for it
  // (unpickle_scan.cpp).
  bool scan_value();

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
  struct Seg {
    uint32_t begin, count, next;
  };  // pool_[begin, begin + count), then segs_[next]
  struct Seq {
    uint32_t head = kNoSeg, tail = kNoSeg;
  };
  std::vector<std::string_view> strs_;
  std::vector<Seq> seqs_;
  std::vector<Seg> segs_;
  std::vector<uint32_t> pool_;
  std::vector<uint32_t> stack_;
  std::vector<size_t> marks_;                           // stack sizes at each MARK
  std::vector<uint32_t> memo_dense_;                    // memo index -> value + 1; 0: never stored
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
      error_ =
          "pickle: opcode " + op_label() + " at offset " + std::to_string(op_at_) + ": " + what;
    return false;
  }

  bool need(size_t n) { return in_.size() - pos_ >= n || truncated(n); }
  [[gnu::noinline, gnu::cold]] bool truncated(size_t n) {
    return fail("truncated (needs " + std::to_string(n) + " more bytes, " +
                std::to_string(in_.size() - pos_) + " left)");
  }
  template <size_t W>
  uint64_t read_le() {
    uint64_t v = load_le<W>(reinterpret_cast<const unsigned char*>(in_.data()) + pos_);
    pos_ += W;
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
    uint32_t x = 0;
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
        if (!need(1) || !memo_put(read_le<1>())) return false;
      } else if (op_ == LONG_BINPUT) {
        ++pos_;
        if (!need(4) || !memo_put(read_le<4>())) return false;
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
    bool fresh =
        dense ? (idx >= memo_dense_.size() || memo_dense_[idx] == 0) : memo_sparse_.count(idx) == 0;
    if (fresh && in_poison(idx)) fresh = false;  // counted when the scan made it
    if (fresh && memo_count_ >= lim_.max_memo)
      return fail("memo too large (limit " + std::to_string(lim_.max_memo) + ")");
    if (dense) {
      // Grown by half at a time: a pickler's memo is numbered in order.
      if (idx >= memo_dense_.size())
        memo_dense_.resize(
            std::min<size_t>(std::max(idx + 1, memo_dense_.size() * 3 / 2), lim_.max_memo), 0);
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
    if (k != want) return fail(std::string("cannot add items to a ") + kind_name(k));
    if (pool_.size() + n >= UINT32_MAX || segs_.size() >= UINT32_MAX - 1)
      return fail("too many items");
    seq_add(objs_[container].ref, items, n);
    return true;
  }

  // The opcode loop and the opcodes, by group (unpickle.cpp). An opcode function returns kOther
  // for an opcode that is not of its group.
  enum class Step { kNext, kStop, kFail, kOther };
  bool execute(uint32_t* result);
  Step framing_op(uint32_t* result);
  Step scalar_op();
  Step container_op();
  Step memo_op();
  Step failed(const std::string& what) {
    fail(what);
    return Step::kFail;
  }

  // The JSON copy of a value (unpickle_json.cpp).
  bool key_text(uint32_t key, std::string* out);

  bool to_json(uint32_t id, size_t depth, nlohmann::json* out);
};

}  // namespace fr::analyzer::torch::unpickle_detail

namespace fr::analyzer::torch {

// PickleDoc's readings, inline: a dump's reader asks them for every field of thousands of
// entries (they are declared in unpickle.h; a reader includes this header to use them).
inline PickleDoc::Ref PickleDoc::root() const { return Ref{m_->top_value()}; }

inline PickleDoc::Type PickleDoc::type(Ref v) const {
  using K = unpickle_detail::Kind;
  switch (m_->kind(v.id)) {
    case K::kNone: return Type::kNone;
    case K::kBool: return Type::kBool;
    case K::kInt: return Type::kInt;
    case K::kUint: return Type::kUint;
    case K::kBigInt:
    case K::kFloat: return Type::kFloat;
    case K::kStr: return Type::kStr;
    case K::kBytes: return Type::kBytes;
    case K::kList: return Type::kList;
    case K::kTuple: return Type::kTuple;
    case K::kDict: return Type::kDict;
    case K::kSet:
    case K::kFrozenSet: return Type::kSet;
    case K::kSkipped: wrong_guess_ = true; return Type::kOther;
  }
  return Type::kOther;
}

inline int64_t PickleDoc::int_value(Ref v) const { return m_->obj(v.id).i; }
inline uint64_t PickleDoc::uint_value(Ref v) const { return m_->obj(v.id).u; }
inline double PickleDoc::float_value(Ref v) const { return m_->obj(v.id).f; }
inline std::string_view PickleDoc::text(Ref v) const { return m_->str(v.id); }

inline void PickleDoc::items(Ref v, std::vector<Ref>* out) const { m_->items(v.id, out); }

}  // namespace fr::analyzer::torch
