// What is inferred across PyTorch dumps (analyzer/torch_infer.cpp), on small hand-made gloo-shaped
// dumps: an empty dump joins the world, a stale one is told from a collective that raised, the
// member of a group no dump lists is taken only when one rank fits, unbalanced unrecorded p2p
// in a group of two names the rank that never matched; and odd sets leave everything as it was.
#include <catch2/catch.hpp>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "analyzer/analyze.h"
#include "temp_dir.h"

namespace {

using fr::test::TempDir;
using nlohmann::json;

struct Coll {
  int seq;
  int op_id;
  bool retired;
  std::string pg = "0", desc = "default_pg";
};

// One rank's dump: world pg_config (nameless, as torch 2.15 on gloo writes it) and its entries.
void write_dump(const std::string& dir, int rank, int world, const std::vector<Coll>& colls) {
  json entries = json::array();
  json status = json::object();
  for (size_t i = 0; i < colls.size(); ++i) {
    const Coll& c = colls[i];
    entries.push_back({{"record_id", i},
                       {"collective_seq_id", c.seq},
                       {"p2p_seq_id", 0},
                       {"op_id", c.op_id},
                       {"is_p2p", false},
                       {"pg_id", c.pg == "0" ? 0 : 1},
                       {"process_group", json::array({c.pg, c.desc})},
                       {"profiling_name", "gloo:all_reduce"},
                       {"input_sizes", {{8}}},
                       {"input_dtypes", {"Float"}},
                       {"output_sizes", {{8}}},
                       {"output_dtypes", {"Float"}},
                       {"state", "scheduled"},
                       {"retired", c.retired},
                       {"time_created_ns", 1000 * (i + 1)}});
    status[c.pg == "0" ? "0" : "1"] = {{"last_enqueued_collective", std::to_string(c.op_id)},
                                       {"last_started_collective", "-1"},
                                       {"last_completed_collective", "-1"}};
  }
  std::string ranks = "[";
  for (int r = 0; r < world; ++r) ranks += (r ? ", " : "") + std::to_string(r);
  json d = {{"version", "2.10"},
            {"pg_config", {{"", {{"name", ""}, {"desc", ""}, {"ranks", ranks + "]"}}}}},
            {"pg_status", status}};
  if (!colls.empty()) d["entries"] = entries;
  std::ofstream(dir + "/rank_" + std::to_string(rank) + ".json") << d.dump();
}

// Collectives 1..n of the default group, all finished, op_id = seq; `pending` adds #n+1 unfinished.
std::vector<Coll> done(int n, bool pending = false) {
  std::vector<Coll> v;
  for (int s = 1; s <= n; ++s) v.push_back({s, s, true});
  if (pending) v.push_back({n + 1, n + 1, false});
  return v;
}

json analyze(const TempDir& dir) {
  std::string err;
  json doc = fr::analyzer::analyze_paths({dir.path}, fr::analyzer::Options{}, &err);
  INFO(err);
  REQUIRE(!doc.is_null());
  return doc;
}

std::set<int> culprits(const json& doc) {
  std::set<int> s;
  for (const auto& r : doc["verdict"]["culprit_ranks"]) s.insert(r.get<int>());
  return s;
}

}  // namespace

TEST_CASE("torch inference: an empty dump is the world's member that never entered #1",
          "[analyzer]") {
  TempDir dir;
  for (int r = 0; r < 3; ++r) write_dump(dir.path, r, 4, {{1, 1, false}});
  write_dump(dir.path, 3, 4, {});
  json doc = analyze(dir);
  CHECK(doc["verdict"]["kind"] == "not_entered");
  CHECK(culprits(doc) == std::set<int>{3});
  CHECK(doc["verdict"]["seq"] == 1);
}

TEST_CASE("torch inference: empty dumps with no world to join change nothing", "[analyzer]") {
  TempDir dir;
  for (int r = 0; r < 2; ++r) write_dump(dir.path, r, 2, {});
  json doc = analyze(dir);
  CHECK(doc["verdict"]["kind"] != "not_entered");
  CHECK(culprits(doc).empty());
  TempDir far;  // a rank beyond the world's size is not made a member of it
  write_dump(far.path, 0, 2, {{1, 1, false}});
  write_dump(far.path, 1, 2, {{1, 1, false}});
  write_dump(far.path, 9, 2, {});
  json d2 = analyze(far);
  CHECK(culprits(d2).count(9) == 0);
}

TEST_CASE("torch inference: stale dumps and collectives that raised are told apart", "[analyzer]") {
  TempDir stale;  // rank 2 ends at #3; 0 and 1 completed #4..#6 with it, then wait in #7
  write_dump(stale.path, 0, 3, done(6, true));
  write_dump(stale.path, 1, 3, done(6, true));
  write_dump(stale.path, 2, 3, done(3));
  json doc = analyze(stale);
  CHECK(doc["verdict"]["kind"] == "rank_dead");
  CHECK(culprits(doc) == std::set<int>{2});
  CHECK(doc["verdict"]["seq"] == 7);
  CHECK(doc["verdict"]["stale_ranks"] == json::array({2}));

  TempDir raised;  // rank 0's #4 finished although rank 1 never came: it raised
  write_dump(raised.path, 0, 2, done(4));
  write_dump(raised.path, 1, 2, done(3));
  json d2 = analyze(raised);
  CHECK(d2["verdict"]["kind"] == "not_entered");
  CHECK(culprits(d2) == std::set<int>{1});
  CHECK(d2["verdict"]["seq"] == 4);
  bool shown = false;
  for (const auto& e : d2["verdict"]["evidence"])
    if (e["rank"] == 0) shown = e["state"] == "raised";
  CHECK(shown);
}

TEST_CASE("torch inference: a group's missing member is taken only when one rank fits",
          "[analyzer]") {
  auto with_sub = [](bool pending) {
    std::vector<Coll> v = done(2);
    v.push_back({1, 3, false, "1", "sub"});
    if (!pending) v.pop_back();
    return v;
  };
  TempDir one;  // 1 and 2 wait in sub #1; 0 waits in the world's #3; 3 has nothing pending
  write_dump(one.path, 0, 4, done(2, true));
  write_dump(one.path, 1, 4, with_sub(true));
  write_dump(one.path, 2, 4, with_sub(true));
  write_dump(one.path, 3, 4, done(2));
  json doc = analyze(one);
  CHECK(doc["verdict"]["kind"] == "not_entered");
  CHECK(culprits(doc) == std::set<int>{3});
  CHECK(doc["verdict"]["comm"]["name"] == "sub");

  TempDir none;  // 3 hung before anything (an empty dump); 1, 2 wait in sub #1, 0 in the world's #1
  write_dump(none.path, 0, 4, {{1, 1, false}});
  write_dump(none.path, 1, 4, {{1, 1, false, "1", "sub"}});
  write_dump(none.path, 2, 4, {{1, 1, false, "1", "sub"}});
  write_dump(none.path, 3, 4, {});
  json d0 = analyze(none);
  CHECK(d0["verdict"]["kind"] == "not_entered");
  CHECK(culprits(d0) == std::set<int>{3});
  CHECK(d0["verdict"]["comm"]["name"] == "sub");

  TempDir two;  // 0 and 3 both have nothing pending: either could be the member
  write_dump(two.path, 0, 4, done(2));
  write_dump(two.path, 1, 4, with_sub(true));
  write_dump(two.path, 2, 4, with_sub(true));
  write_dump(two.path, 3, 4, done(2));
  json d2 = analyze(two);
  CHECK(d2["verdict"]["kind"] == "incomplete");
  CHECK(culprits(d2).empty());
}

TEST_CASE("torch inference: unbalanced unrecorded p2p in a group of two, hostile op_ids",
          "[analyzer]") {
  TempDir dir;  // before #3 rank 0 counted 2 unrecorded ops, rank 1 one
  write_dump(dir.path, 0, 2, {{1, 1, true}, {2, 2, true}, {3, 5, true}});
  write_dump(dir.path, 1, 2, {{1, 1, true}, {2, 2, true}, {3, 4, true}});
  json doc = analyze(dir);
  CHECK(doc["verdict"]["kind"] == "p2p_unmatched");
  CHECK(culprits(doc) == std::set<int>{1});
  CHECK(doc["verdict"]["seq"] == 2);

  TempDir odd;  // op_ids that go backwards or below the collective count
  write_dump(odd.path, 0, 2, {{1, 9, true}, {2, 3, true}, {3, 1, true}});
  write_dump(odd.path, 1, 2, {{1, 0, true}, {2, -4, true}, {3, 2, true}});
  json d2 = analyze(odd);
  CHECK(d2["verdict"]["kind"] != "p2p_unmatched");
}
