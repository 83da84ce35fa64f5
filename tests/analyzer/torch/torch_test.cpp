// PyTorch Flight Recorder dumps: the hand-written JSON and pickle fixtures of data/, pickles made
// by the system python3 at test time, hostile and corrupt files, and the round trip
// LogFile -> torch JSON -> LogFile.
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>

#include "analyzer/torch/torch_detail.h"
#include "analyzer/torch/torch_dump.h"
#include "analyzer/torch/unpickle.h"
#include "log/reader.h"
#include "skip.h"
#include "temp_dir.h"
#include "testing/files.h"

namespace t = fr::analyzer::torch;
using fr::log::LogFile;
using nlohmann::json;

namespace {

const std::string kData = std::string(FR_SOURCE_DIR) + "/tests/analyzer/torch/data";

using fr::test::slurp;
using fr::test::spit;
using fr::test::TempDir;

bool have_python_pickle() {
  static int have = std::system("python3 -c 'import pickle, json, ast' >/dev/null 2>&1") == 0;
  return have;
}

const fr_comm_entry* comm_named(const LogFile& f, const std::string& name) {
  for (const auto& c : f.comms)
    if (name == c.name) return &c;
  return nullptr;
}

LogFile read_one(const std::string& path) {
  auto r = t::read_torch_dump(path);
  INFO(r.error);
  REQUIRE(r.error.empty());
  REQUIRE(r.logs.size() == 1);
  return r.logs[0];
}

// The fixture rank 0 as the tests expect it (see data/json/nccl_trace_rank_0).
void check_rank0(const LogFile& f) {
  const fr_log_header& h = f.header;
  CHECK(h.magic == FR_LOG_MAGIC);
  CHECK(h.global_rank == 0);  // from the file name
  CHECK(h.world_size == 2);   // default_pg has ranks [0, 1]
  CHECK(h.nccl_version == 22105);
  CHECK((h.flags & FR_LOG_F_SNAPSHOT));
  CHECK(h.writer_alive == 1);
  CHECK(f.is_snapshot);
  CHECK(f.writer_alive);
  CHECK(h.create_ns == 1700000000000000000ull);
  CHECK(h.snapshot_ns == 1700000000004000000ull);

  REQUIRE(f.comms.size() == 2);
  const fr_comm_entry* world = comm_named(f, "default_pg");
  const fr_comm_entry* tp = comm_named(f, "tp");
  REQUIRE(world);
  REQUIRE(tp);
  CHECK(world->id == t::torch_pg_comm_id("0", {0, 1}));
  CHECK(tp->id == t::torch_pg_comm_id("1", {1, 0}));
  CHECK(world->id != tp->id);
  CHECK(world->size == 2);
  CHECK(world->rank == 0);
  CHECK(world->coll_seq == 2);
  CHECK(world->p2p_seq == 2);
  CHECK(tp->coll_seq == 1);

  // The coalesced marker (record 4) is gone; its state went to its group.
  REQUIRE(f.records.size() == 6);
  const uint64_t ids[] = {0, 1, 2, 3, 5, 6};
  for (size_t i = 0; i < 6; ++i) CHECK(f.records[i].raw.id == ids[i]);
  const fr_record& ar = f.records[0].raw;
  CHECK(ar.op == FR_OP_ALLREDUCE);
  CHECK(ar.comm_id == world->id);
  CHECK(ar.seq == 1);
  CHECK(ar.count == 1024);
  CHECK(ar.dtype == 7);  // ncclFloat32
  CHECK(ar.call_ns == 1700000000000000000ull);
  CHECK(ar.tid == 140245u);
  CHECK(f.records[0].gpu_state == FR_GPU_COMPLETED);
  CHECK(ar.group_id == 0);
  CHECK_FALSE((ar.flags & FR_REC_F_IN_GROUP));

  const fr_record& send = f.records[1].raw;
  CHECK(send.op == FR_OP_SEND);
  CHECK(send.seq == 1);
  CHECK(send.peer == 1);
  CHECK(send.dtype == 6);  // ncclFloat16
  CHECK(send.count == 128);

  const fr_record& gs = f.records[2].raw;
  const fr_record& gr = f.records[3].raw;
  CHECK(gs.op == FR_OP_SEND);
  CHECK(gr.op == FR_OP_RECV);
  CHECK(gr.peer == 1);
  CHECK(gs.seq == 2);
  CHECK(gr.seq == 2);
  CHECK(gs.group_id != 0);
  CHECK(gs.group_id == gr.group_id);
  CHECK((gs.flags & FR_REC_F_IN_GROUP));
  CHECK((gr.flags & FR_REC_F_IN_GROUP));
  CHECK(f.records[2].gpu_state == FR_GPU_COMPLETED);  // from the marker
  CHECK(f.records[3].gpu_state == FR_GPU_COMPLETED);

  const fr_record& ag = f.records[4].raw;
  CHECK(ag.op == FR_OP_ALLGATHER);
  CHECK(ag.seq == 2);
  CHECK(ag.count == 1024);
  CHECK(ag.dtype == 9);  // ncclBfloat16
  CHECK(f.records[4].gpu_state == FR_GPU_STARTED);

  const fr_record& rs = f.records[5].raw;
  CHECK(rs.op == FR_OP_REDUCESCATTER);
  CHECK(rs.comm_id == tp->id);
  CHECK(rs.count == 1024);  // the receive count
  CHECK(f.records[5].gpu_state == FR_GPU_ENQUEUED);
}

void check_same(const LogFile& a, const LogFile& b) {
  CHECK(std::memcmp(&a.header, &b.header, sizeof a.header) == 0);
  REQUIRE(a.comms.size() == b.comms.size());
  for (size_t i = 0; i < a.comms.size(); ++i)
    CHECK(std::memcmp(&a.comms[i], &b.comms[i], sizeof a.comms[i]) == 0);
  REQUIRE(a.records.size() == b.records.size());
  for (size_t i = 0; i < a.records.size(); ++i) {
    CHECK(std::memcmp(&a.records[i].raw, &b.records[i].raw, sizeof(fr_record)) == 0);
    CHECK(a.records[i].gpu_state == b.records[i].gpu_state);
  }
}

}  // namespace

TEST_CASE("torch: JSON fixtures map to our model", "[torch]") {
  LogFile r0 = read_one(kData + "/json/nccl_trace_rank_0");
  check_rank0(r0);

  LogFile r1 = read_one(kData + "/json/nccl_trace_rank_1");
  CHECK(r1.header.global_rank == 1);
  const fr_comm_entry* w0 = comm_named(r0, "default_pg");
  const fr_comm_entry* w1 = comm_named(r1, "default_pg");
  REQUIRE(w1);
  CHECK(w1->id == w0->id);  // every member computes the same id
  CHECK(w1->rank == 1);
  REQUIRE(r1.records.size() == 4);
  CHECK(r1.records[1].raw.op == FR_OP_RECV);
  CHECK(r1.records[1].raw.peer == 0);
  CHECK(w1->coll_seq == 1);
}

TEST_CASE("torch: pickle fixtures (PyTorch's pickle form) read like the JSON ones", "[torch]") {
  for (int rank : {0, 1}) {
    std::string name = "nccl_trace_rank_" + std::to_string(rank);
    CHECK(t::looks_like_torch_dump(kData + "/pickle/" + name));
    LogFile p = read_one(kData + "/pickle/" + name);
    LogFile j = read_one(kData + "/json/" + name);
    if (rank == 0) check_rank0(p);
    check_same(p, j);
  }
  if (have_python_pickle()) {
    // The fixtures themselves pass what fr_trace checks.
    std::string script = kData + "/../fr_trace_check.py";
    CHECK(std::system(("python3 '" + script + "' '" + kData + "/json' json").c_str()) == 0);
    CHECK(std::system(("python3 '" + script + "' '" + kData + "/pickle' pickle").c_str()) == 0);
  }
}

TEST_CASE("torch: pickles written by python3 (protocols 2 to 5)", "[torch]") {
  if (!have_python_pickle()) {
    FR_SKIP("no python3 with pickle");
  }
  TempDir tmp;
  LogFile j = read_one(kData + "/json/nccl_trace_rank_0");
  for (int proto = 2; proto <= 5; ++proto) {
    std::string out = tmp.path + "/p" + std::to_string(proto) + "_rank_0";
    std::string cmd =
        "python3 -c 'import json, pickle, sys; d = json.load(open(sys.argv[1])); "
        "d[\"pg_config\"][\"0\"][\"ranks\"] = [0, 1]; "
        "open(sys.argv[2], \"wb\").write(pickle.dumps(d, protocol=int(sys.argv[3])))' '" +
        kData + "/json/nccl_trace_rank_0' '" + out + "' " + std::to_string(proto);
    REQUIRE(std::system(cmd.c_str()) == 0);
    INFO("protocol " << proto);
    CHECK(t::looks_like_torch_dump(out));
    LogFile p = read_one(out);
    check_same(p, j);  // ranks as a list instead of "[0, 1]": the same group id
  }

  // A pickle that would run a command when loaded with pickle.load: refused, nothing runs.
  std::string marker = tmp.path + "/ran";
  std::string evil = tmp.path + "/evil_rank_3";
  std::string cmd =
      "python3 -c 'import os, pickle, sys\n"
      "class E:\n"
      "    def __reduce__(self): return (os.system, (\"touch " +
      marker +
      "\",))\n"
      "d = {\"version\": \"2.10\", \"pg_config\": {}, \"entries\": [E()]}\n"
      "open(sys.argv[1], \"wb\").write(pickle.dumps(d, protocol=2))' '" +
      evil + "'";
  REQUIRE(std::system(cmd.c_str()) == 0);
  CHECK(t::looks_like_torch_dump(evil));
  auto r = t::read_torch_dump(evil);
  CHECK(r.logs.empty());
  CHECK(r.error.find("GLOBAL") != std::string::npos);
  CHECK(r.error.find(evil) == 0);
  struct stat st;
  CHECK(stat(marker.c_str(), &st) != 0);
}

TEST_CASE("torch: a pickle made byte by byte, the way torch's C++ pickler writes it", "[torch]") {
  // {"version": "2.10", "pg_config": {"0": {"name": "0", "desc": "default_pg",
  //  "ranks": "[0, 1, 2, 3]"}}, "rank": 2, "entries": [{"record_id": 7, "process_group":
  //  ("0", "default_pg"), "collective_seq_id": 9, "p2p_seq_id": 0, "profiling_name":
  //  "nccl:broadcast", "input_sizes": [[3, 5]], "input_dtypes": ["Double"], "state":
  //  "scheduled", "time_created_ns": 2^62}]}
  std::string b("\x80\x02}q\x00(", 6);
  auto str = [&](const std::string& s) {
    b += 'X';
    for (int i = 0; i < 4; ++i) b += char((s.size() >> (8 * i)) & 0xFF);
    b += s;
  };
  str("version");
  str("2.10");
  str("pg_config");
  b += "}(";
  str("0");
  b += "}(";
  str("name");
  str("0");
  str("desc");
  str("default_pg");
  str("ranks");
  str("[0, 1, 2, 3]");
  b += "uu";
  str("rank");
  b += "K\x02";
  str("entries");
  b += "](";
  b += "}(";
  str("record_id");
  b += "K\x07";
  str("process_group");
  str("0");
  str("default_pg");
  b += "\x86";
  str("collective_seq_id");
  b += "K\x09";
  str("p2p_seq_id");
  b += 'K';
  b += '\0';
  str("profiling_name");
  str("nccl:broadcast");
  str("input_sizes");
  b += "](";
  b += "](";
  b += "K\x03K\x05";
  b += "e";
  b += "e";
  str("input_dtypes");
  b += "](";
  str("Double");
  b += "e";
  str("state");
  str("scheduled");
  str("time_created_ns");
  b += "\x8a\x08";
  b += std::string("\x00\x00\x00\x00\x00\x00\x00\x40", 8);
  b += "u";                                                // entry dict
  b += "e";                                                // entries list
  b += "u.";                                               // top dict
  auto r = t::read_torch_dump_bytes(b, "/some/dir/dump");  // no digits: rank from the dump
  INFO(r.error);
  REQUIRE(r.error.empty());
  REQUIRE(r.logs.size() == 1);
  const LogFile& f = r.logs[0];
  CHECK(f.header.global_rank == 2);
  CHECK(f.header.world_size == 4);
  REQUIRE(f.comms.size() == 1);
  CHECK(f.comms[0].rank == 2);
  REQUIRE(f.records.size() == 1);
  CHECK(f.records[0].raw.id == 7);
  CHECK(f.records[0].raw.op == FR_OP_BROADCAST);
  CHECK(f.records[0].raw.seq == 9);
  CHECK(f.records[0].raw.count == 15);
  CHECK(f.records[0].raw.dtype == 8);
  CHECK(f.records[0].raw.call_ns == (uint64_t(1) << 62));
  // Nothing in this dump reports the start of work: its oldest unfinished op counts as started.
  CHECK(f.records[0].gpu_state == FR_GPU_STARTED);

  // Every truncation of it is an error naming the file, never a crash.
  for (size_t n = 0; n < b.size(); ++n) {
    auto rr = t::read_torch_dump_bytes(std::string_view(b).substr(0, n), "cut");
    CHECK(rr.logs.empty());
    CHECK(rr.error.rfind("cut: ", 0) == 0);
  }
}

TEST_CASE("torch: converted logs are valid flight logs for our reader", "[torch]") {
  LogFile f = read_one(kData + "/json/nccl_trace_rank_0");
  std::string bytes = fr::log::encode_snapshot(f, f.header.snapshot_ns);
  auto rr = fr::log::read_log_bytes(bytes.data(), bytes.size(), "converted");
  INFO(rr.message);
  REQUIRE(rr.ok());
  const LogFile& g = *rr.log;
  CHECK(g.header.global_rank == 0);
  CHECK(g.header.world_size == 2);
  REQUIRE(g.comms.size() == f.comms.size());
  REQUIRE(g.records.size() == f.records.size());
  for (size_t i = 0; i < g.records.size(); ++i) {
    CHECK(g.records[i].raw.id == f.records[i].raw.id);
    CHECK(g.records[i].raw.op == f.records[i].raw.op);
    CHECK(g.records[i].raw.seq == f.records[i].raw.seq);
    CHECK(g.records[i].gpu_state == f.records[i].gpu_state);
  }
}

TEST_CASE("torch: sniffing tells dumps from other files", "[torch]") {
  TempDir tmp;
  auto sniff = [&](const std::string& bytes) {
    std::string p = tmp.path + "/f";
    REQUIRE(spit(p, bytes));
    return t::looks_like_torch_dump(p);
  };
  CHECK(t::looks_like_torch_dump(kData + "/json/nccl_trace_rank_0"));
  CHECK(sniff("  \n{\"version\": \"2.10\", \"pg_config\": {}}"));
  CHECK(sniff(slurp(kData + "/pickle/nccl_trace_rank_1")));
  CHECK_FALSE(sniff("{\"schema\": \"fr-dump-set/1\", \"processes\": []}"));  // a manifest
  CHECK_FALSE(sniff(std::string("FLGHTLO1\x01\x00\x00\x00", 12)));           // a flight log
  CHECK_FALSE(sniff("pg_config but not JSON"));
  CHECK_FALSE(sniff(""));
  CHECK_FALSE(sniff(std::string("\x80\x09pg_config", 11)));
  CHECK_FALSE(t::looks_like_torch_dump(tmp.path + "/missing"));
}

TEST_CASE("torch: bad files get one clear error", "[torch]") {
  TempDir tmp;
  auto err = [&](const std::string& name, const std::string& bytes) {
    std::string p = tmp.path + "/" + name;
    REQUIRE(spit(p, bytes));
    auto r = t::read_torch_dump(p);
    CHECK(r.logs.empty());
    CHECK(r.error.rfind(p, 0) == 0);
    CHECK(r.error.find('\n') == std::string::npos);
    return r.error;
  };
  CHECK(err("empty_0", "").find("empty") != std::string::npos);
  std::string full = slurp(kData + "/json/nccl_trace_rank_0");
  CHECK(err("cut_0", full.substr(0, full.size() / 2)).find("not JSON") != std::string::npos);
  std::string pk = slurp(kData + "/pickle/nccl_trace_rank_0");
  CHECK(err("cutpk_0", pk.substr(0, pk.size() - 40)).find("pickle") != std::string::npos);
  CHECK(err("foreign_0", "[1, 2, 3]").find("not a PyTorch") != std::string::npos);
  CHECK(err("object_0", "{\"a\": 1}").find("not a PyTorch") != std::string::npos);
  CHECK(err("entries_0", "{\"pg_config\": {}, \"entries\": 5}").find("entries") !=
        std::string::npos);
  CHECK(err("deep_0", std::string(100000, '[')).find("deeper") != std::string::npos);

  auto missing = t::read_torch_dump(tmp.path + "/nope");
  CHECK(missing.error.find("no such file") != std::string::npos);
  auto dir = t::read_torch_dump(tmp.path);
  CHECK_FALSE(dir.error.empty());
}

TEST_CASE("torch: odd but readable dumps give warnings and keep the rest", "[torch]") {
  json d = json::parse(slurp(kData + "/json/nccl_trace_rank_0"));
  // Unknown op, a group missing from pg_config, an unknown dtype, ids out of order, a newer
  // version, and ranks as a list.
  d["version"] = "3.1";
  d["entries"][0]["profiling_name"] = "nccl:frobnicate";
  d["entries"][6]["process_group"] = json::array({"77", "mystery"});
  d["entries"][5]["input_dtypes"] = json::array({"ComplexFloat"});
  std::swap(d["entries"][1]["record_id"], d["entries"][2]["record_id"]);
  d["pg_config"]["1"]["ranks"] = json::array({0, 1});
  auto r = t::convert_torch_document(d, "x/nccl_trace_rank_0");
  INFO(r.error);
  REQUIRE(r.error.empty());
  REQUIRE(r.logs.size() == 1);
  const LogFile& f = r.logs[0];
  std::string all;
  for (const auto& w : r.warnings) all += w + "\n";
  INFO(all);
  CHECK(all.find("newer") != std::string::npos);
  CHECK(all.find("frobnicate") != std::string::npos);
  CHECK(all.find("77") != std::string::npos);
  CHECK(all.find("ComplexFloat") != std::string::npos);
  CHECK(all.find("renumbered") != std::string::npos);
  REQUIRE(f.records.size() == 5);
  for (size_t i = 0; i < f.records.size(); ++i) CHECK(f.records[i].raw.id == i);
  CHECK(f.records[3].raw.dtype == 255);
  const fr_comm_entry* mystery = comm_named(f, "mystery");
  REQUIRE(mystery);
  CHECK(mystery->size == -1);
  CHECK(f.records[4].raw.comm_id == mystery->id);
  const fr_comm_entry* tp = comm_named(f, "tp");
  REQUIRE(tp);
  CHECK(tp->id == t::torch_pg_comm_id("1", {0, 1}));

  // Several ranks in one file: {rank: dump}.
  json two = json::object();
  two["0"] = json::parse(slurp(kData + "/json/nccl_trace_rank_0"));
  two["1"] = json::parse(slurp(kData + "/json/nccl_trace_rank_1"));
  auto m = t::convert_torch_document(two, "all.json");
  REQUIRE(m.logs.size() == 2);
  CHECK(m.logs[0].header.global_rank == 0);
  CHECK(m.logs[1].header.global_rank == 1);
}

TEST_CASE("torch: older dumps without the newer fields", "[torch]") {
  // As a 2.2-era dump: no is_p2p, no p2p_seq_id, no pg_status, the NCCL version under
  // "nccl_version", ranks given as a list, discovered times only.
  json d = json::parse(R"({
    "version": "2.2", "nccl_version": "2.18.1",
    "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": [0, 1, 2]}},
    "entries": [
      {"record_id": 0, "pg_id": 0, "process_group": ["0", "default_pg"], "collective_seq_id": 1,
       "op_id": 1, "profiling_name": "nccl:all_reduce", "time_created_ns": 10,
       "input_sizes": [[2, 3]], "output_sizes": [[2, 3]], "state": "scheduled",
       "time_discovered_started_ns": 11, "time_discovered_completed_ns": null},
      {"record_id": 1, "pg_id": 0, "process_group": ["0", "default_pg"], "collective_seq_id": 2,
       "op_id": 2, "profiling_name": "nccl:recv 2<-0", "time_created_ns": 20,
       "input_sizes": [[4]], "output_sizes": [[4]], "state": "scheduled"}
    ]})");
  auto r = t::convert_torch_document(d, "old/nccl_trace_rank_2");
  INFO(r.error);
  REQUIRE(r.logs.size() == 1);
  const LogFile& f = r.logs[0];
  CHECK(f.header.nccl_version == 21801);
  CHECK(f.header.global_rank == 2);
  CHECK(f.header.world_size == 3);
  REQUIRE(f.records.size() == 2);
  CHECK(f.records[0].raw.op == FR_OP_ALLREDUCE);
  CHECK(f.records[0].raw.count == 6);
  CHECK(f.records[0].raw.dtype == 255);             // no input_dtypes: unknown
  CHECK(f.records[0].gpu_state == FR_GPU_STARTED);  // from the discovered-started time
  CHECK(f.records[1].raw.op == FR_OP_RECV);
  CHECK(f.records[1].raw.peer == 0);
  CHECK(f.records[1].raw.seq == 2);  // p2p counted with the collectives then
  CHECK(f.comms[0].rank == 2);
  CHECK(f.comms[0].p2p_seq == 2);
  CHECK(f.comms[0].coll_seq == 1);
}

namespace {

// Three ranks: a world communicator, a two-member one (ranks 0 and 2) and one that only rank 0's
// log knows. Collectives, p2p, a group, an API call.
std::vector<LogFile> synthetic_job() {
  const uint64_t kWorld = 0x1111222233334444ull, kPP = 0x00000000000a0b0cull;
  std::vector<LogFile> logs;
  for (int rank = 0; rank < 3; ++rank) {
    LogFile f;
    f.path = "rank" + std::to_string(rank) + ".frlog";
    f.is_snapshot = true;
    f.writer_alive = rank != 1;
    fr_log_header& h = f.header;
    std::memset(&h, 0, sizeof h);
    h.magic = FR_LOG_MAGIC;
    h.version = FR_LOG_VERSION;
    h.global_rank = rank;
    h.world_size = 3;
    h.nccl_version = 22809;
    h.snapshot_ns = 5000;
    std::snprintf(h.hostname, sizeof h.hostname, "node-%c", 'a' + rank);
    auto comm = [&](uint64_t id, int size, int crank, const char* name) {
      fr_comm_entry c;
      std::memset(&c, 0, sizeof c);
      c.id = id;
      c.size = size;
      c.rank = crank;
      std::snprintf(c.name, sizeof c.name, "%s", name);
      f.comms.push_back(c);
    };
    comm(kWorld, 3, rank, "");
    if (rank != 1) comm(kPP, 2, rank == 0 ? 0 : 1, "pp");
    uint64_t id = 10;
    auto rec = [&](uint64_t comm_id, uint16_t op, uint64_t seq, uint64_t count, int dtype, int peer,
                   fr_gpu_state st, uint64_t group = 0) {
      fr::log::Record r{};
      std::memset(&r.raw, 0, sizeof r.raw);
      r.raw.id = id++;
      r.raw.comm_id = comm_id;
      r.raw.op = op;
      r.raw.seq = seq;
      r.raw.count = count;
      r.raw.dtype = uint8_t(dtype);
      r.raw.peer = peer;
      r.raw.call_ns = 1000 * id;
      r.raw.tid = 4242;
      r.raw.group_id = group;
      r.raw.flags = FR_REC_F_LAUNCHED | (group ? FR_REC_F_IN_GROUP : 0);
      r.raw.redop = 0;
      r.raw.gpu_state = uint8_t(st);
      r.gpu_state = st;
      f.records.push_back(r);
    };
    rec(kWorld, FR_OP_COMM_INIT_RANK, 0, 0, 0, -1, FR_GPU_NONE);  // not exported
    rec(kWorld, FR_OP_ALLREDUCE, 1, 70000, 7, -1, FR_GPU_COMPLETED);
    rec(kWorld, FR_OP_ALLGATHER, 2, 100, 9, -1, FR_GPU_COMPLETED, 77);
    rec(kWorld, FR_OP_REDUCESCATTER, 3, 50, 9, -1, FR_GPU_COMPLETED, 77);
    if (rank == 0) rec(kPP, FR_OP_SEND, 1, 8, 4, 1, FR_GPU_STARTED);
    if (rank == 2) rec(kPP, FR_OP_RECV, 1, 8, 4, 0, FR_GPU_ENQUEUED);
    rec(kWorld, FR_OP_BROADCAST, 4, 16, 0, -1, rank == 1 ? FR_GPU_ENQUEUED : FR_GPU_STARTED);
    // Wide values: 8- and 5-byte LONG1 in the pickle form.
    f.records.back().raw.call_ns = (uint64_t(1) << 62) + 12345;
    f.records.back().raw.count = 5000000000ull;
    h.record_counter = id;
    logs.push_back(f);
  }
  return logs;
}

}  // namespace

TEST_CASE("torch: export to PyTorch's JSON schema and read back", "[torch]") {
  TempDir tmp;
  std::vector<LogFile> logs = synthetic_job();
  std::string error;
  REQUIRE(t::export_torch_json(logs, tmp.path + "/out", &error));
  CHECK(error.empty());

  for (const LogFile& orig : logs) {
    int rank = orig.header.global_rank;
    std::string path = tmp.path + "/out/nccl_trace_rank_" + std::to_string(rank);
    CHECK(t::looks_like_torch_dump(path));
    LogFile back = read_one(path);
    CHECK(back.header.global_rank == rank);
    CHECK(back.header.world_size == 3);
    CHECK(back.header.nccl_version == 22809);
    CHECK(back.header.snapshot_ns == 5000);
    CHECK(back.writer_alive == orig.writer_alive);
    CHECK(back.hostname() == orig.hostname());
    REQUIRE(back.comms.size() == orig.comms.size());
    for (const auto& c : orig.comms) {
      const fr_comm_entry* b = back.find_comm(c.id);
      REQUIRE(b);
      CHECK(b->size == c.size);
      CHECK(b->rank == c.rank);
      // The unnamed world communicator is PyTorch's default group; other unnamed ones have no
      // description.
      std::string want = c.name[0]                       ? std::string(c.name)
                         : c.id == 0x1111222233334444ull ? std::string("default_pg")
                                                         : std::string("undefined");
      CHECK(std::string(b->name) == want);
    }
    // Every record but the API call, field for field.
    REQUIRE(back.records.size() == orig.records.size() - 1);
    for (size_t i = 0; i < back.records.size(); ++i) {
      const fr_record& a = orig.records[i + 1].raw;
      const fr_record& b = back.records[i].raw;
      INFO("rank " << rank << " record " << a.id);
      CHECK(b.id == a.id);
      CHECK(b.comm_id == a.comm_id);
      CHECK(b.op == a.op);
      CHECK(b.seq == a.seq);
      CHECK(b.count == a.count);
      CHECK(b.dtype == a.dtype);
      CHECK(b.peer == a.peer);
      CHECK(b.call_ns == a.call_ns);
      CHECK(b.tid == a.tid);
      CHECK(b.group_id == a.group_id);
      CHECK((b.flags & FR_REC_F_IN_GROUP) == (a.flags & FR_REC_F_IN_GROUP));
      CHECK(back.records[i].gpu_state == orig.records[i + 1].gpu_state);
    }
  }

  // What PyTorch's fr_trace reads from each file holds: ranks parse as Python literals, the
  // profiling names split as its Op class splits them, p2p ranks are group ranks.
  json d0 = json::parse(slurp(tmp.path + "/out/nccl_trace_rank_0"));
  CHECK(d0["version"] == t::kTorchExportVersion);
  CHECK(d0["pg_config"]["1111222233334444"]["ranks"] == "[0, 1, 2]");
  CHECK(d0["pg_config"]["00000000000a0b0c"]["ranks"] == "[0, 2]");
  CHECK(d0["pg_config"]["00000000000a0b0c"]["desc"] == "pp");
  std::set<std::string> names;
  for (const auto& e : d0["entries"]) names.insert(e["profiling_name"].get<std::string>());
  CHECK(names.count("nccl:send 0->1"));
  CHECK(names.count("nccl:all_reduce"));
  for (const auto& e : d0["entries"]) {
    if (e["profiling_name"] == "nccl:all_gather") {
      CHECK(e["input_sizes"] == json::parse("[[100]]"));
      CHECK(e["output_sizes"] == json::parse("[[300]]"));
      CHECK(e["input_dtypes"] == json::parse("[\"BFloat16\"]"));
    }
  }
  CHECK(d0["pg_status"]["0"]["last_enqueued_collective"] == "4");
  CHECK(d0["pg_status"]["0"]["last_completed_collective"] == "3");
  CHECK(d0["pg_status"]["0"]["last_started_collective"] == "4");

  // The pickle form holds the same content: read back, it gives the same logs.
  REQUIRE(t::export_torch_pickle(logs, tmp.path + "/pk", &error));
  for (const LogFile& orig : logs) {
    std::string name = "/nccl_trace_rank_" + std::to_string(orig.header.global_rank);
    std::string bytes = slurp(tmp.path + "/pk" + name);
    REQUIRE(!bytes.empty());
    CHECK(static_cast<unsigned char>(bytes[0]) == 0x80);
    check_same(read_one(tmp.path + "/pk" + name), read_one(tmp.path + "/out" + name));
  }

  if (have_python_pickle()) {
    // What fr_trace's loader and Op class do with the files, done by Python itself.
    std::string script = kData + "/../fr_trace_check.py";
    CHECK(std::system(("python3 '" + script + "' '" + tmp.path + "/out' json").c_str()) == 0);
    CHECK(std::system(("python3 '" + script + "' '" + tmp.path + "/pk' pickle").c_str()) == 0);
  }
}

TEST_CASE("torch: export refuses what PyTorch's layout cannot hold", "[torch]") {
  TempDir tmp;
  std::vector<LogFile> logs = synthetic_job();
  std::string error;
  logs[1].header.global_rank = 0;
  CHECK_FALSE(t::export_torch_json(logs, tmp.path + "/dup", &error));
  CHECK(error.find("more than one") != std::string::npos);
  logs[1].header.global_rank = -1;
  CHECK_FALSE(t::export_torch_json(logs, tmp.path + "/unknown", &error));
  CHECK(error.find("rank unknown") != std::string::npos);
  REQUIRE(spit(tmp.path + "/file", "x"));
  logs = synthetic_job();
  CHECK_FALSE(t::export_torch_json(logs, tmp.path + "/file", &error));
  CHECK_FALSE(error.empty());
  // Names that are not UTF-8 still give valid JSON.
  std::memcpy(logs[0].comms[1].name, "p\xff\xfe", 4);
  REQUIRE(t::export_torch_json(logs, tmp.path + "/ok", &error));
  REQUIRE(t::export_torch_pickle(logs, tmp.path + "/okp", &error));
  for (const char* dir : {"/ok", "/okp"}) {
    auto back = t::read_torch_dump(tmp.path + dir + "/nccl_trace_rank_0");
    INFO(back.error);
    REQUIRE(back.logs.size() == 1);
    const fr_comm_entry* pp = back.logs[0].find_comm(logs[0].comms[1].id);
    REQUIRE(pp);
    CHECK(std::string(pp->name) == "p\xEF\xBF\xBD\xEF\xBF\xBD");
  }
  if (have_python_pickle())
    CHECK(std::system(("python3 -c 'import pickle, sys; pickle.load(open(sys.argv[1], \"rb\"))' '" +
                       tmp.path + "/okp/nccl_trace_rank_0'")
                          .c_str()) == 0);
}

// A pickled dump's entries are read in place (no JSON tree); the same bytes read through the
// whole JSON document must give the same log and the same warnings, whatever the values' odd
// forms, and a frames list shared through the memo with a kept field (the scan of skipped values
// guesses wrong) must change nothing.
TEST_CASE("torch: pickled entries read in place give what the JSON document gives", "[torch]") {
  if (!have_python_pickle()) {
    FR_SKIP("no python3 with pickle");
  }
  TempDir tmp;
  const std::string script =
      "import pickle, sys\n"
      "def fr(i): return [{'name': 'f%d' % k, 'filename': 'x.py', 'line': k + i} for k in range(3)]\n"
      "es = []\n"
      "for i in range(40):\n"
      "    e = {'frames': fr(i), 'record_id': i, 'pg_id': i % 2,\n"
      "         'process_group': ('0', 'default_pg') if i % 2 == 0 else ['7', 'tp'],\n"
      "         'collective_seq_id': i // 2 + 1, 'p2p_seq_id': i % 3, 'op_id': i,\n"
      "         'profiling_name': ['nccl:all_reduce', 'nccl:send 0->1', 'nccl:recv 0<-1',\n"
      "                            'nccl:reduce_scatter', 'nccl:coalesced', 'gloo:broadcast'][i % 6],\n"
      "         'time_created_ns': 1000 + i if i % 5 else str(1000 + i),\n"
      "         'input_sizes': [[4, i + 1]] if i % 4 else ((2, 3), [5]), 'input_dtypes': ['Float'],\n"
      "         'output_sizes': [[i]], 'output_dtypes': ['BFloat16'] if i % 3 else [],\n"
      "         'state': ['completed', 'started', 'scheduled', 'weird'][i % 4],\n"
      "         'time_discovered_started_ns': None if i % 3 else 2000 + i,\n"
      "         'time_discovered_completed_ns': 3000 + i if i % 4 == 0 else None,\n"
      "         'retired': [True, False, 'True', 0][i % 4], 'is_p2p': [None, 'no', 1][i % 3],\n"
      "         'thread_id': '140000000000000' if i % 2 else 77, 'thread_name': 'main',\n"
      "         'timeout_ms': 600000, 'duration_ms': None, 'fr_group_id': i % 7}\n"
      "    if i == 7: e['input_dtypes'] = ()\n"
      "    if i == 9: e = 'not a dict'\n"
      "    es.append(e)\n"
      "if sys.argv[2] == 'shared': es[3]['output_sizes'] = es[2]['frames']\n"
      "d = {'version': '2.10', 'pg_config': {'0': {'name': '0', 'desc': 'default_pg',\n"
      "     'ranks': '[0, 1]'}, '7': {'name': '7', 'desc': 'tp', 'ranks': [0, 1]}},\n"
      "     'pg_status': {'0': {'last_enqueued_collective': 20, 'last_started_collective': 19,\n"
      "     'last_completed_collective': 3}}, 'comm_lib_version': '2.30.7', 'entries': es}\n"
      "open(sys.argv[1], 'wb').write(pickle.dumps(d, protocol=int(sys.argv[3])))\n";
  REQUIRE(spit(tmp.path + "/gen.py", script));
  for (std::string form : {"plain", "shared"}) {
    for (int proto : {2, 4}) {
      std::string out = tmp.path + "/nccl_trace_rank_1";
      REQUIRE(std::system(("python3 '" + tmp.path + "/gen.py' '" + out + "' " + form + " " +
                           std::to_string(proto))
                              .c_str()) == 0);
      INFO(form << ", protocol " << proto);
      std::string bytes = slurp(out);
      t::TorchReadResult fast = t::read_torch_dump_bytes(bytes, out);
      fr::analyzer::torch::UnpickleLimits lim;
      lim.skip_keys = {"frames"};
      auto u = fr::analyzer::torch::unpickle(bytes, lim);
      INFO(u.error);
      REQUIRE(u.ok());
      t::TorchReadResult slow = t::convert_torch_document(u.value, out);
      REQUIRE(fast.error == slow.error);
      REQUIRE(fast.logs.size() == 1);
      REQUIRE(slow.logs.size() == 1);
      CHECK(fast.warnings == slow.warnings);
      CHECK(!fast.warnings.empty());  // the odd entries are told, not dropped silently
      check_same(fast.logs[0], slow.logs[0]);
      CHECK(fast.logs[0].records.size() >= 30);
    }
  }
}
