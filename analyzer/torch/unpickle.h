// A small, safe unpickler for the plain data that PyTorch Flight Recorder dumps hold.
//
// PyTorch writes its per-rank dump as a pickle (protocol 2 from torch's own C++ pickler, protocol
// 4 or 5 when a dump dict goes through Python's pickle.dumps). Loading such a file with a general
// unpickler runs whatever the file names (GLOBAL + REDUCE is arbitrary code execution), so this
// one knows only the opcodes that build plain values: None, bool, int (any width that fits 64
// bits; wider ones are kept as their decimal text), float, str, bytes, list, tuple, dict, set,
// the memo and marks, and protocol 4 framing. Every opcode that imports, calls or builds objects
// (GLOBAL, STACK_GLOBAL, REDUCE, BUILD, INST, OBJ, NEWOBJ, NEWOBJ_EX, EXT*, PERSID, BINPERSID,
// out-of-band buffers) and every unknown byte is refused with an error naming the opcode and its
// offset. Nothing is ever executed or imported.
//
// The result is a nlohmann::json tree: tuples and sets become arrays, bytes become JSON binary
// values, dict keys must be str or int (ints become their decimal text). Memory and nesting are
// bounded by UnpickleLimits; shared (memoized) subtrees are expanded, within the same bounds.
//
// PickleDoc runs the same machine and leaves its values in place, for readers that pull a few
// fields out of a large pickle (a dump's thousands of entries) without building a JSON tree:
// values are handles, strs are views into the input.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace fr::analyzer::torch {

struct UnpickleLimits {
  size_t max_depth = 128;                     // nesting of containers in the result
  size_t max_objects = size_t{1} << 24;       // values built while running the pickle (a
                                              // 20,000-entry dump with stacks needs ~0.5M)
  size_t max_output_nodes = size_t{1} << 25;  // JSON nodes in the result (shared subtrees count
                                              // once per use)
  size_t max_output_bytes = size_t{1} << 30;  // str/bytes bytes in the result, same rule
  size_t max_memo = size_t{1} << 24;          // memo entries
  std::vector<std::string> skip_keys;         // dict entries with these str keys are left out
                                              // (e.g. "frames": large and not needed)
};

struct UnpickleResult {
  nlohmann::json value;
  std::string error;  // empty on success; one line naming the problem and the byte offset
  bool ok() const { return error.empty(); }
};

// Runs the pickle in `bytes` up to its STOP opcode. Never throws, never runs code.
UnpickleResult unpickle(std::string_view bytes, const UnpickleLimits& limits = {});

namespace unpickle_detail {
class Machine;
}

// A pickle run to its STOP opcode, read in place. The values of skipped keys are only scanned
// (UnpickleLimits::skip_keys) and dict items under them are left out of items(); should a reader
// meet such a value anywhere else, the scan guessed wrong: wrong_guess() turns true and the
// reader runs the pickle again with scan_skipped false, which builds every value.
class PickleDoc {
 public:
  enum class Type : uint8_t {
    kNone,
    kBool,
    kInt,
    kUint,
    kFloat,
    kStr,
    kBytes,
    kList,
    kTuple,
    kDict,
    kSet,
    kOther
  };
  struct Ref {
    uint32_t id = 0;
  };

  PickleDoc();
  ~PickleDoc();
  PickleDoc(const PickleDoc&) = delete;
  PickleDoc& operator=(const PickleDoc&) = delete;

  // The readings below are inline in unpickle_machine.h (include it to use them).
  // Runs `bytes` (which must outlive this object); on failure returns false with `error` set
  // like UnpickleResult::error.
  bool run(std::string_view bytes, const UnpickleLimits& limits, bool scan_skipped,
           std::string* error);
  Ref root() const;
  Type type(Ref v) const;
  int64_t int_value(Ref v) const;      // kBool, kInt
  uint64_t uint_value(Ref v) const;    // kUint
  double float_value(Ref v) const;     // kFloat (also ints wider than 64 bits)
  std::string_view text(Ref v) const;  // kStr, kBytes
  // Items of a list, tuple or set; a dict's keys and values interleaved, without the pairs of
  // skipped keys. Replaces `out`.
  void items(Ref v, std::vector<Ref>* out) const;
  // The value as unpickle() gives it (same limits, skipped keys left out); false with `error`.
  bool to_json(Ref v, nlohmann::json* out, std::string* error) const;
  bool wrong_guess() const { return wrong_guess_; }

 private:
  std::unique_ptr<unpickle_detail::Machine> m_;
  mutable bool wrong_guess_ = false;
};

// The name of a pickle opcode ("GLOBAL", "SHORT_BINUNICODE", ...), or nullptr when unknown.
const char* pickle_opcode_name(uint8_t op);

}  // namespace fr::analyzer::torch
