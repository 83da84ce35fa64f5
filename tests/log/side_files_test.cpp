// The dump set's side files (log/side_files.h): <node>.gpu.json (fr-gpu/1) and
// <dump>.stacks.json (fr-stacks/1). frd writes them and fr-analyze reads them, possibly years and
// versions apart, so the bytes are pinned here; and since a dump set may come from a hostile peer,
// what the reader does with wrong types, missing keys and huge arrays is pinned too.
#include <string>

#include <catch2/catch.hpp>

#include "log/side_files.h"

using fr::log::GpuHealth;
using fr::log::NodeGpus;
using fr::log::ProcessStacks;

namespace {

// Every field set, to values that show their type (an unsigned above INT64_MAX, a negative time).
NodeGpus full_node() {
  NodeGpus g;
  g.node = "node7";
  g.time_ns = 1796205600123456789;
  g.driver_version = "550.54.15";
  GpuHealth a;
  a.index = 0;
  a.pci_bus_id = "0000:3b:00.0";
  a.uuid = "GPU-1234";
  a.name = "NVIDIA H100 80GB HBM3";
  a.xids = {{79, 1796205600000000000}, {18446744073709551615ull, -5}};
  a.ecc_volatile_corrected = 5;
  a.ecc_volatile_uncorrected = 0;
  a.retired_pages_pending = 1;
  a.remapped_rows_pending = 0;
  a.remapped_rows_failed = 2;
  a.nvlinks = {{0, true, 1, 2, 3, 4}, {1, false, 0, 0, 0, 18446744073709551615ull}};
  a.throttle_reasons = 0x41;
  a.throttle_names = {"GpuIdle", "HwThermalSlowdown"};
  a.temperature_c = 71;
  a.power_mw = 310000;
  a.pcie_replays = 7;
  a.pids = {101, 102};
  a.own_pids = {7, 0};  // the first in a PID namespace of its own, the second not mapped
  GpuHealth b;          // NVML could give nothing of the incident's set
  b.index = 1;
  b.pci_bus_id = "0000:3c:00.0";
  b.unavailable = {"ecc: Not Supported", "nvlink: Not Supported"};
  g.gpus = {a, b};
  return g;
}

const char* const kFullNodeText = R"({
 "driver_version": "550.54.15",
 "gpus": [
  {
   "ecc_volatile_corrected": 5,
   "ecc_volatile_uncorrected": 0,
   "index": 0,
   "name": "NVIDIA H100 80GB HBM3",
   "nvlinks": [
    {
     "active": true,
     "crc_data_errors": 4,
     "crc_flit_errors": 3,
     "link": 0,
     "recovery_errors": 2,
     "replay_errors": 1
    },
    {
     "active": false,
     "crc_data_errors": 18446744073709551615,
     "crc_flit_errors": 0,
     "link": 1,
     "recovery_errors": 0,
     "replay_errors": 0
    }
   ],
   "own_pids": [
    7,
    0
   ],
   "pci_bus_id": "0000:3b:00.0",
   "pcie_replays": 7,
   "pids": [
    101,
    102
   ],
   "power_mw": 310000,
   "remapped_rows_failed": 2,
   "remapped_rows_pending": 0,
   "retired_pages_pending": 1,
   "temperature_c": 71,
   "throttle_names": [
    "GpuIdle",
    "HwThermalSlowdown"
   ],
   "throttle_reasons": 65,
   "unavailable": [],
   "uuid": "GPU-1234",
   "xids": [
    {
     "time_ns": 1796205600000000000,
     "xid": 79
    },
    {
     "time_ns": -5,
     "xid": 18446744073709551615
    }
   ]
  },
  {
   "index": 1,
   "name": "",
   "nvlinks": [],
   "own_pids": [],
   "pci_bus_id": "0000:3c:00.0",
   "pids": [],
   "throttle_names": [],
   "unavailable": [
    "ecc: Not Supported",
    "nvlink: Not Supported"
   ],
   "uuid": "",
   "xids": []
  }
 ],
 "node": "node7",
 "schema": "fr-gpu/1",
 "time_ns": 1796205600123456789
}
)";

NodeGpus parsed_gpus(const std::string& text) {
  NodeGpus g;
  std::string err;
  INFO(text.substr(0, 200));
  REQUIRE(fr::log::parse_gpus(text, &g, &err));
  CHECK(err.empty());
  return g;
}

std::string refusal(const std::string& text) {
  NodeGpus g;
  g.node = "untouched";
  std::string err;
  REQUIRE_FALSE(fr::log::parse_gpus(text, &g, &err));
  CHECK(g.node == "untouched");  // a refused file leaves the output alone
  return err;
}

std::string gpu_doc(const std::string& gpu) {
  return R"({"schema":"fr-gpu/1","node":"n","gpus":[)" + gpu + "]}";
}

std::string repeated(const std::string& item, size_t n) {
  std::string s;
  for (size_t i = 0; i < n; ++i) s += (i ? "," : "") + item;
  return s;
}

}  // namespace

TEST_CASE("gpu file: the bytes frd writes are pinned, keys, order, numbers and indentation") {
  CHECK(fr::log::gpus_to_text(full_node()) == kFullNodeText);
  NodeGpus failed;
  failed.node = "n0";
  failed.time_ns = 3;
  failed.error = "NVML not available: cannot load libnvidia-ml.so.1";
  CHECK(
      fr::log::gpus_to_text(failed) ==
      "{\n \"driver_version\": \"\",\n \"error\": \"NVML not available: cannot load libnvidia-ml.so.1\",\n"
      " \"gpus\": [],\n \"node\": \"n0\",\n \"schema\": \"fr-gpu/1\",\n \"time_ns\": 3\n}\n");
}

TEST_CASE("gpu file: what is written is read back, field for field") {
  const NodeGpus g = full_node();
  const NodeGpus back = parsed_gpus(fr::log::gpus_to_text(g));
  CHECK(back.node == g.node);
  CHECK(back.time_ns == g.time_ns);
  CHECK(back.error == g.error);
  CHECK(back.driver_version == g.driver_version);
  REQUIRE(back.gpus.size() == 2);
  for (size_t i = 0; i < 2; ++i) {
    const GpuHealth& w = g.gpus[i];
    const GpuHealth& r = back.gpus[i];
    CHECK(r.index == w.index);
    CHECK(r.pci_bus_id == w.pci_bus_id);
    CHECK(r.uuid == w.uuid);
    CHECK(r.name == w.name);
    REQUIRE(r.xids.size() == w.xids.size());
    for (size_t k = 0; k < w.xids.size(); ++k) {
      CHECK(r.xids[k].xid == w.xids[k].xid);
      CHECK(r.xids[k].time_ns == w.xids[k].time_ns);
    }
    REQUIRE(r.nvlinks.size() == w.nvlinks.size());
    for (size_t k = 0; k < w.nvlinks.size(); ++k) {
      CHECK(r.nvlinks[k].link == w.nvlinks[k].link);
      CHECK(r.nvlinks[k].active == w.nvlinks[k].active);
      CHECK(r.nvlinks[k].replay_errors == w.nvlinks[k].replay_errors);
      CHECK(r.nvlinks[k].recovery_errors == w.nvlinks[k].recovery_errors);
      CHECK(r.nvlinks[k].crc_flit_errors == w.nvlinks[k].crc_flit_errors);
      CHECK(r.nvlinks[k].crc_data_errors == w.nvlinks[k].crc_data_errors);
    }
    CHECK(r.ecc_volatile_corrected == w.ecc_volatile_corrected);
    CHECK(r.ecc_volatile_uncorrected == w.ecc_volatile_uncorrected);
    CHECK(r.retired_pages_pending == w.retired_pages_pending);
    CHECK(r.remapped_rows_pending == w.remapped_rows_pending);
    CHECK(r.remapped_rows_failed == w.remapped_rows_failed);
    CHECK(r.throttle_reasons == w.throttle_reasons);
    CHECK(r.throttle_names == w.throttle_names);
    CHECK(r.temperature_c == w.temperature_c);
    CHECK(r.power_mw == w.power_mw);
    CHECK(r.pcie_replays == w.pcie_replays);
    CHECK(r.pids == w.pids);
    CHECK(r.own_pids == w.own_pids);
    CHECK(r.unavailable == w.unavailable);
  }
  // Written again, the same bytes.
  CHECK(fr::log::gpus_to_text(back) == kFullNodeText);
}

TEST_CASE("gpu file: not ours is refused with the reason") {
  CHECK(refusal("") == "not a JSON object");
  CHECK(refusal("not json") == "not a JSON object");
  CHECK(refusal(R"({"schema":"fr-gpu/1")") == "not a JSON object");  // cut short
  CHECK(refusal(R"([{"schema":"fr-gpu/1"}])") == "not a JSON object");
  CHECK(refusal(R"("fr-gpu/1")") == "not a JSON object");
  CHECK(refusal(R"({"node":"n","gpus":[]})") == "no schema (expected fr-gpu/1)");
  CHECK(refusal(R"({"schema":1})") == "no schema (expected fr-gpu/1)");
  CHECK(refusal(R"({"schema":"fr-gpu/2"})") == "schema 'fr-gpu/2', expected fr-gpu/1");
  CHECK(refusal(R"({"schema":"fr-stacks/1"})") == "schema 'fr-stacks/1', expected fr-gpu/1");
}

TEST_CASE("gpu file: missing keys read as unknown, never as zero") {
  const NodeGpus g = parsed_gpus(R"({"schema":"fr-gpu/1"})");
  CHECK(g.node.empty());
  CHECK(g.time_ns == 0);
  CHECK(g.gpus.empty());
  const NodeGpus one = parsed_gpus(gpu_doc("{}"));
  REQUIRE(one.gpus.size() == 1);
  const GpuHealth& d = one.gpus[0];
  CHECK(d.index == -1);
  CHECK(d.pci_bus_id.empty());
  CHECK(d.ecc_volatile_corrected == -1);
  CHECK(d.ecc_volatile_uncorrected == -1);
  CHECK(d.retired_pages_pending == -1);
  CHECK(d.remapped_rows_pending == -1);
  CHECK(d.remapped_rows_failed == -1);
  CHECK(d.throttle_reasons == -1);
  CHECK(d.temperature_c == -1);
  CHECK(d.power_mw == -1);
  CHECK(d.pcie_replays == -1);
  CHECK(d.xids.empty());
  CHECK(d.nvlinks.empty());
  CHECK(d.pids.empty());
  // An Xid or a link without its numbers is still one, with zeros (counters, not health).
  const NodeGpus parts = parsed_gpus(gpu_doc(R"({"xids":[{}],"nvlinks":[{}]})"));
  REQUIRE(parts.gpus[0].xids.size() == 1);
  CHECK(parts.gpus[0].xids[0].xid == 0);
  REQUIRE(parts.gpus[0].nvlinks.size() == 1);
  CHECK_FALSE(parts.gpus[0].nvlinks[0].active);
}

TEST_CASE("gpu file: a value of the wrong type reads as unknown and the rest is kept") {
  const NodeGpus top = parsed_gpus(R"({"schema":"fr-gpu/1","node":7,"time_ns":"soon","error":[],
                                       "driver_version":{},"gpus":{"0":{}}})");
  CHECK(top.node.empty());
  CHECK(top.time_ns == 0);
  CHECK(top.error.empty());
  CHECK(top.driver_version.empty());
  CHECK(top.gpus.empty());  // "gpus" not an array
  const NodeGpus g = parsed_gpus(gpu_doc(
      R"(1,"gpu",null,[],{"index":"3","pci_bus_id":3,"temperature_c":71.5,"power_mw":true,
         "ecc_volatile_uncorrected":"2","xids":[79,"x",{"xid":"79","time_ns":1.5},{"xid":13}],
         "nvlinks":[true,{"link":"2","active":1,"replay_errors":-1}],
         "pids":[101,"102",103.0,null,104],"throttle_names":["HwSlowdown",7,null],
         "unavailable":[{"ecc":"x"},"ecc: Not Supported"]})"));
  REQUIRE(g.gpus.size() == 1);  // entries that are not objects are dropped
  const GpuHealth& d = g.gpus[0];
  CHECK(d.index == -1);
  CHECK(d.pci_bus_id.empty());
  CHECK(d.temperature_c == -1);
  CHECK(d.power_mw == -1);
  CHECK(d.ecc_volatile_uncorrected == -1);
  REQUIRE(d.xids.size() == 2);  // the two objects
  CHECK(d.xids[0].xid == 0);
  CHECK(d.xids[0].time_ns == 0);
  CHECK(d.xids[1].xid == 13);
  REQUIRE(d.nvlinks.size() == 1);
  CHECK(d.nvlinks[0].link == 0);
  CHECK_FALSE(d.nvlinks[0].active);
  CHECK(d.nvlinks[0].replay_errors == 18446744073709551615ull);  // as written: -1 read unsigned
  CHECK(d.pids == std::vector<int>{101, 104});
  CHECK(d.throttle_names == std::vector<std::string>{"HwSlowdown"});
  CHECK(d.unavailable == std::vector<std::string>{"ecc: Not Supported"});
}

TEST_CASE("gpu file: huge arrays and long strings are cut to the reader's bounds") {
  const std::string xid = R"({"xid":79,"time_ns":1})";
  const std::string link = R"({"link":1,"active":true})";
  const std::string gpu =
      R"({"index":0,"pids":[)" + repeated("7", 5000) + R"(],"xids":[)" + repeated(xid, 5000) +
      R"(],"nvlinks":[)" + repeated(link, 5000) + R"(],"throttle_names":[)" +
      repeated("\"" + std::string(100, 't') + "\"", 500) + R"(],"unavailable":[)" +
      repeated("\"" + std::string(300, 'u') + "\"", 500) + R"(],"name":")" +
      std::string(5000, 'n') + "\"}";
  const NodeGpus g = parsed_gpus(gpu_doc(repeated(gpu, 2) + "," + repeated("{}", 3000)));
  REQUIRE(g.gpus.size() == 1024);
  const GpuHealth& d = g.gpus[0];
  CHECK(d.pids.size() == 1024);
  CHECK(d.xids.size() == 1024);
  CHECK(d.nvlinks.size() == 1024);
  REQUIRE(d.throttle_names.size() == 64);
  CHECK(d.throttle_names[0] == std::string(64, 't'));
  REQUIRE(d.unavailable.size() == 64);
  CHECK(d.unavailable[0] == std::string(200, 'u'));
  CHECK(d.name == std::string(1024, 'n'));
  CHECK(g.gpus[1].pids.size() == 1024);
  CHECK(g.gpus[2].index == -1);
}

TEST_CASE("stacks file: the bytes frd writes are pinned, and read back") {
  ProcessStacks s;
  s.pid = 42;
  s.rank = 3;
  s.taker = "libdw+py-spy";
  s.python = true;
  s.python_error = "py-spy: timeout";
  s.time_ns = 1796205600000000000;
  s.took_ns = 1500;
  fr::log::ThreadStack t;
  t.tid = 42;
  t.name = "python3";
  t.state = "S";
  t.frames = {
      {"ncclAllReduce", "src/collectives.cc", 120, "/usr/lib/libnccl.so.2", "native", 0x7f00},
      {"train", "train.py", 9, "", "python", 0}};
  fr::log::ThreadStack u;
  u.tid = 43;
  u.error = "gone";
  s.threads = {t, u};
  const std::string text = fr::log::stacks_to_text(s);
  CHECK(
      text ==
      R"({"pid":42,"python":true,"python_error":"py-spy: timeout","rank":3,"schema":"fr-stacks/1",)"
      R"("taker":"libdw+py-spy","threads":[{"frames":[{"file":"src/collectives.cc","function":"ncclAllReduce",)"
      R"("kind":"native","line":120,"module":"/usr/lib/libnccl.so.2","pc":32512},{"file":"train.py",)"
      R"("function":"train","kind":"python","line":9,"module":""}],"name":"python3","state":"S","tid":42},)"
      R"({"error":"gone","frames":[],"name":"","state":"","tid":43}],"time_ns":1796205600000000000,"took_ns":1500})"
      "\n");
  ProcessStacks back;
  std::string err;
  REQUIRE(fr::log::parse_stacks(text, &back, &err));
  CHECK(fr::log::stacks_to_text(back) == text);
}
