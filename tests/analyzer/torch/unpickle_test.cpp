// The safe unpickler: every plain-data opcode, shared mutable containers, refusal of every opcode
// that would import or call code (nothing runs), truncation, cycles and expansion bombs.
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>

#include "analyzer/torch/torch_detail.h"
#include "analyzer/torch/unpickle.h"

using fr::analyzer::torch::unpickle;
using fr::analyzer::torch::UnpickleLimits;
using nlohmann::json;

namespace {

// Builds pickle bytes by hand.
struct P {
  std::string b;
  P& op(uint8_t c) {
    b.push_back(char(c));
    return *this;
  }
  P& raw(const std::string& s) {
    b += s;
    return *this;
  }
  P& u8(uint8_t v) { return op(v); }
  P& le(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) b.push_back(char((v >> (8 * i)) & 0xFF));
    return *this;
  }
  P& proto(int v) { return op(0x80).u8(uint8_t(v)); }
  P& str(const std::string& s) { return op('X').le(s.size(), 4).raw(s); }          // BINUNICODE
  P& sstr(const std::string& s) { return op(0x8c).u8(uint8_t(s.size())).raw(s); }  // SHORT_
  P& i1(uint8_t v) { return op('K').u8(v); }
  P& stop() { return op('.'); }
};

}  // namespace

TEST_CASE("unpickle: plain values of protocol 2", "[torch][unpickle]") {
  P p;
  p.proto(2).op('}').op('q').u8(0).op('(');
  p.str("none").op('N');
  p.str("t").op(0x88).str("f").op(0x89);
  p.str("i1").i1(200);
  p.str("i2").op('M').le(60000, 2);
  p.str("i4").op('J').le(uint32_t(-123456), 4);
  p.str("long8").op(0x8a).u8(8).le(uint64_t(1700000000000000000ull), 8);
  p.str("neg").op(0x8a).u8(2).le(0xFF85, 2);                       // -123 in two bytes
  p.str("u64").op(0x8a).u8(9).le(0xFFFFFFFFFFFFFFFFull, 8).u8(0);  // 2^64-1
  p.str("zero").op(0x8a).u8(0);
  p.str("l4").op(0x8b).le(1, 4).u8(7);
  // BINFLOAT is big-endian: 0.25 = 0x3FD0000000000000
  p.str("f").op('G').raw(std::string("\x3F\xD0\x00\x00\x00\x00\x00\x00", 8));
  p.str("bytes").op('C').u8(3).raw(std::string("a\0b", 3));
  p.str("tuple").str("a").i1(1).op(0x86);
  p.str("t1").i1(5).op(0x85);
  p.str("t3").i1(1).i1(2).i1(3).op(0x87);
  p.str("empty_t").op(')');
  p.str("mtuple").op('(').i1(9).i1(8).op('t');
  p.str("list").op(']').op('q').u8(1).op('(').i1(1).i1(2).op('e');
  p.str("alist").op(']').i1(4).op('a');
  p.str("utf8").str("h\xC3\xA9llo");
  p.op('u').stop();

  auto r = unpickle(p.b);
  REQUIRE(r.ok());
  const json& v = r.value;
  CHECK(v["none"].is_null());
  CHECK(v["t"] == true);
  CHECK(v["f"] == 0.25);
  CHECK(v["i1"] == 200);
  CHECK(v["i2"] == 60000);
  CHECK(v["i4"] == -123456);
  CHECK(v["long8"] == 1700000000000000000ll);
  CHECK(v["neg"] == -123);
  CHECK(v["u64"].get<uint64_t>() == 0xFFFFFFFFFFFFFFFFull);
  CHECK(v["zero"] == 0);
  CHECK(v["l4"] == 7);
  REQUIRE(v["bytes"].is_binary());
  CHECK(v["bytes"].get_binary().size() == 3);
  CHECK(v["tuple"] == json::array({"a", 1}));
  CHECK(v["t1"] == json::array({5}));
  CHECK(v["t3"] == json::array({1, 2, 3}));
  CHECK(v["empty_t"] == json::array());
  CHECK(v["mtuple"] == json::array({9, 8}));
  CHECK(v["list"] == json::array({1, 2}));
  CHECK(v["alist"] == json::array({4}));
  CHECK(v["utf8"] == "h\xC3\xA9llo");
}

TEST_CASE("unpickle: memo shares mutable containers, protocol 4 framing", "[torch][unpickle]") {
  // A list memoized while empty, filled afterwards, then referenced again: both uses see the
  // items (pickle's reference semantics), as Python's pickle.dumps writes shared lists.
  P body;
  body.op(']')
      .op(0x94)  // [] MEMOIZE -> memo 0
      .op('(')
      .sstr("x")
      .op(0x94)
      .sstr("y")
      .op('e')  // APPENDS
      .op('h')
      .u8(0)  // BINGET 0
      .op('j')
      .le(1, 4)  // LONG_BINGET 1 ("x")
      .op(0x87)  // TUPLE3 (list, list, "x")
      .op(0x8f)
      .op('(')
      .i1(3)
      .i1(4)
      .op(0x90)  // EMPTY_SET ADDITEMS
      .op('(')
      .i1(5)
      .op(0x91)  // FROZENSET
      .op(0x86)  // TUPLE2 (set, frozenset)
      .op(0x86)  // ((list,list,x),(set,frozenset))
      .stop();
  P p;
  p.proto(4).op(0x95).le(body.b.size(), 8).raw(body.b);
  auto r = unpickle(p.b);
  REQUIRE(r.ok());
  CHECK(r.value[0][0] == json::array({"x", "y"}));
  CHECK(r.value[0][1] == json::array({"x", "y"}));
  CHECK(r.value[0][2] == "x");
  CHECK(r.value[1][0] == json::array({3, 4}));
  CHECK(r.value[1][1] == json::array({5}));

  // Text PUT/GET, DICT with MARK, SETITEM, POP, POP_MARK, DUP.
  P q;
  q.proto(2)
      .op('(')
      .str("k")
      .i1(1)
      .op('d')
      .op('p')
      .raw("7\n")
      .op('0')
      .op('g')
      .raw("7\n")
      .str("k2")
      .i1(2)
      .op('s')
      .op('2')
      .op('(')
      .i1(1)
      .i1(2)
      .op('1')
      .op(0x86)
      .stop();
  auto r2 = unpickle(q.b);
  REQUIRE(r2.ok());
  CHECK(r2.value[0] == json({{"k", 1}, {"k2", 2}}));
  CHECK(r2.value[1] == r2.value[0]);
}

TEST_CASE("unpickle: skip_keys leaves entries out", "[torch][unpickle]") {
  P p;
  p.proto(2).op('}').op('(').str("frames").op(']').str("keep").i1(1).op('u').stop();
  UnpickleLimits lim;
  lim.skip_keys = {"frames"};
  auto r = unpickle(p.b, lim);
  REQUIRE(r.ok());
  CHECK(r.value == json({{"keep", 1}}));
}

TEST_CASE("unpickle: a skipped value is scanned, and the result never depends on the scan",
          "[torch][unpickle]") {
  UnpickleLimits lim;
  lim.skip_keys = {"frames"};
  const uint8_t kBinput = 'q', kBinget = 'h';
  SECTION("a nested value with memo entries, as torch writes frames") {
    P p;
    p.proto(2).op('}').op('(').str("frames").op(']').op('(');
    p.op('}').op('(').str("name").op(kBinput).u8(1).str("f").i1(3).op('u');
    p.op('}').op('(').op(kBinget).u8(1).str("g").op('u').op('e');
    p.str("keep").i1(1).op('u').stop();
    auto r = unpickle(p.b, lim);
    REQUIRE(r.ok());
    CHECK(r.value == json({{"keep", 1}}));
  }
  SECTION("a memo entry made inside the skipped value and used outside it") {
    P p;
    p.proto(2).op('}').op('(').str("frames").op(']').str("shared").op(kBinput).u8(7).op('a');
    p.str("keep").op(kBinget).u8(7).op('u').stop();
    auto r = unpickle(p.b, lim);
    INFO(r.error);
    REQUIRE(r.ok());
    CHECK(r.value == json({{"keep", "shared"}}));
  }
  SECTION("\"frames\" as a value, or in a list, is no key") {
    P p;
    p.proto(2).op('}').op('(').str("a").str("frames").str("b").i1(2).op('u').stop();
    auto r = unpickle(p.b, lim);
    REQUIRE(r.ok());
    CHECK(r.value == json({{"a", "frames"}, {"b", 2}}));
    P q;
    q.proto(2).op(']').op('(').str("frames").i1(5).op('e').stop();
    auto r2 = unpickle(q.b, lim);
    REQUIRE(r2.ok());
    CHECK(r2.value == json({"frames", 5}));
  }
  SECTION("a broken skipped value gives the same error as without skipping") {
    P p;
    p.proto(2).op('}').op('(').str("frames").op('c').raw("os\nsystem\n").op('u').stop();
    auto with = unpickle(p.b, lim);
    auto without = unpickle(p.b);
    CHECK(!with.ok());
    CHECK(with.error == without.error);
  }
}

TEST_CASE("unpickle: code-running opcodes are refused and nothing runs", "[torch][unpickle]") {
  char dir[] = "/tmp/fr-unpickle-XXXXXX";
  REQUIRE(mkdtemp(dir));
  std::string marker = std::string(dir) + "/ran";
  std::string cmd = "touch " + marker;

  // pickle.loads of this would call os.system("touch <marker>").
  P global;
  global.proto(2).op('c').raw("os\nsystem\n").str(cmd).op(0x85).op('R').stop();
  auto r = unpickle(global.b);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error.find("GLOBAL") != std::string::npos);
  CHECK(r.error.find("offset 2") != std::string::npos);

  P stack_global;
  stack_global.proto(4).sstr("os").sstr("system").op(0x93).sstr(cmd).op(0x85).op('R').stop();
  r = unpickle(stack_global.b);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error.find("STACK_GLOBAL") != std::string::npos);
  CHECK(r.error.find("offset 14") != std::string::npos);

  // REDUCE on plain values (a callable would have to come from somewhere; still refused).
  P reduce;
  reduce.proto(2).str("f").op(')').op('R').stop();
  r = unpickle(reduce.b);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error.find("REDUCE") != std::string::npos);

  struct Case {
    uint8_t op;
    const char* name;
  };
  for (Case c : {Case{'b', "BUILD"}, Case{'i', "INST"}, Case{'o', "OBJ"}, Case{0x81, "NEWOBJ"},
                 Case{0x92, "NEWOBJ_EX"}, Case{0x82, "EXT1"}, Case{0x83, "EXT2"},
                 Case{0x84, "EXT4"}, Case{'P', "PERSID"}, Case{'Q', "BINPERSID"},
                 Case{0x97, "NEXT_BUFFER"}, Case{0x98, "READONLY_BUFFER"}, Case{'I', "INT"}}) {
    P x;
    x.proto(2).op('N').op('N').op(c.op).stop();
    auto rr = unpickle(x.b);
    INFO(c.name);
    REQUIRE_FALSE(rr.ok());
    CHECK(rr.error.find(c.name) != std::string::npos);
    CHECK(rr.error.find("offset 4") != std::string::npos);
  }

  P unknown;
  unknown.proto(2).op(0xFF).stop();
  r = unpickle(unknown.b);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error.find("0xff") != std::string::npos);
  CHECK(r.error.find("unknown opcode") != std::string::npos);

  struct stat st;
  CHECK(stat(marker.c_str(), &st) != 0);  // nothing ran
  rmdir(dir);
}

TEST_CASE("unpickle: truncated and malformed input gives errors, never crashes",
          "[torch][unpickle]") {
  P p;
  p.proto(2)
      .op('}')
      .op('q')
      .u8(0)
      .op('(')
      .str("a")
      .op(0x8a)
      .u8(8)
      .le(77, 8)
      .str("b")
      .op('G')
      .raw(std::string(8, '\0'))
      .str("c")
      .op('(')
      .i1(1)
      .op('l')
      .op('u')
      .stop();
  REQUIRE(unpickle(p.b).ok());
  for (size_t n = 0; n < p.b.size(); ++n) {
    auto r = unpickle(std::string_view(p.b).substr(0, n));
    INFO(n);
    CHECK_FALSE(r.ok());
    CHECK_FALSE(r.error.empty());
  }
  CHECK(unpickle("").error == "pickle: empty input");
  // A pickle without PROTO first (here NEWTRUE, then PROTO and a dict: Python's loads takes it)
  // is none of a dump's protocols: refused by the machine as by the reader, which takes a file
  // for a pickle by its first byte.
  const std::string late_proto("\x88\x80\x02}.", 5);
  CHECK(unpickle(late_proto).error ==
        "pickle: does not begin with the PROTO opcode (dumps are protocol 2 or later)");
  CHECK(fr::analyzer::torch::read_torch_dump_bytes(late_proto, "nccl_trace_rank_1").logs.empty());

  // Stack underflow, mark misuse, wrong container types, bad memo, invalid UTF-8, bad protocol.
  for (std::string bad : {
           std::string("\x80\x02.", 3),    // STOP on empty stack
           std::string("\x80\x02(e.", 4),  // APPENDS with no list below
           std::string("\x80\x02Na.", 5),  // APPEND with one value
           std::string("\x80\x02)K\x01"
                       "a.",
                       7),                           // APPEND to a tuple
           std::string("\x80\x02]K\x01K\x02s.", 9),  // SETITEM on a list
           std::string("\x80\x02(K\x01"
                       "d.",
                       7),                                         // DICT with odd items
           std::string("\x80\x02h\x05.", 5),                       // BINGET of a missing memo key
           std::string("\x80\x02X\x02\x00\x00\x00\xC3\x28.", 10),  // invalid UTF-8
           std::string("\x80\x09N.", 4),                           // protocol 9
           std::string("\x80\x02\x8b\xff\xff\xff\xff.", 8),        // LONG4 negative length
           std::string("\x80\x04\x95\xff\xff\xff\xff\x00\x00\x00\x00N.", 13),  // frame too long
           std::string("\x80\x02"
                       "1.",
                       4),                     // POP_MARK without MARK
           std::string("\x80\x02N(\x85.", 6),  // TUPLE1 across a MARK
       }) {
    auto r = unpickle(bad);
    INFO(bad.size());
    CHECK_FALSE(r.ok());
    CHECK(r.error.rfind("pickle: ", 0) == 0);
  }

  // Random corruption of a valid pickle: errors or values, never a crash or a hang.
  std::mt19937 rng(42);
  for (int i = 0; i < 3000; ++i) {
    std::string m = p.b;
    int flips = 1 + int(rng() % 4);
    for (int k = 0; k < flips; ++k) m[rng() % m.size()] = char(rng() & 0xFF);
    auto r = unpickle(m);
    if (!r.ok()) CHECK_FALSE(r.error.empty());
  }
}

TEST_CASE("unpickle: cycles and expansion bombs hit the limits", "[torch][unpickle]") {
  // A list that contains itself.
  P cyc;
  cyc.proto(2).op(']').op('q').u8(0).op('h').u8(0).op('a').stop();
  auto r = unpickle(cyc.b);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error.find("deeper") != std::string::npos);

  // 60 levels of a list holding the previous level twice: 2^60 values once expanded.
  P bomb;
  bomb.proto(2).op(']').op('q').u8(0);
  for (int i = 1; i <= 60; ++i) {
    bomb.op('(')
        .op('h')
        .u8(uint8_t(i - 1))
        .op('h')
        .u8(uint8_t(i - 1))
        .op('l')
        .op('q')
        .u8(uint8_t(i));
  }
  bomb.stop();
  UnpickleLimits lim;
  lim.max_output_nodes = 1 << 20;
  r = unpickle(bomb.b, lim);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error.find("too large") != std::string::npos);

  // Deep nesting without sharing.
  P deep;
  deep.proto(2);
  for (int i = 0; i < 1000; ++i) deep.op(']');
  for (int i = 0; i < 999; ++i) deep.op('a');
  deep.stop();
  r = unpickle(deep.b);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error.find("deeper") != std::string::npos);

  // Too many values.
  P many;
  many.proto(2).op('(');
  for (int i = 0; i < 5000; ++i) many.op('N');
  many.op('l').stop();
  lim = UnpickleLimits{};
  lim.max_objects = 1000;
  r = unpickle(many.b, lim);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error.find("too many values") != std::string::npos);
}
