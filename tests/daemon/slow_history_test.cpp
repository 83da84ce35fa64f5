// The node's heartbeat history for fail-slow (daemon/host/slow_history.h): each collective kept
// once, the samples per process and the processes bounded, dead processes adding nothing, and the
// document a dump writes read back whole (log/slow_history.h).
#include <catch2/catch.hpp>

#include <string>

#include "daemon/host/slow_history.h"
#include "fr/flight_log.h"
#include "log/slow_history.h"

using fr::daemon::CollTiming;
using fr::daemon::CommProgress;
using fr::daemon::LinkTiming;
using fr::daemon::ProcessReport;
using fr::daemon::SlowHistory;

namespace {

// A process whose summary shows collectives [from, to] on one communicator, a send slot and an
// op in flight.
ProcessReport report(int rank, uint64_t from, uint64_t to, bool alive = true) {
  ProcessReport p;
  p.log = "fr-" + std::to_string(rank) + ".log";
  p.rank = rank;
  p.pid = 100 + rank;
  p.alive = alive;
  CommProgress c;
  c.comm_id = 0xabcdef0123456789ull;
  c.rank = rank;
  c.size = 8;
  c.enqueued = 5;
  c.completed = 4;
  for (uint64_t s = from; s <= to; ++s)
    c.recent.push_back({s, FR_OP_ALLREDUCE, int64_t(s) * 1000, int64_t(s % 3) * 7});
  p.comms.push_back(c);
  LinkTiming l;
  l.comm_id = c.comm_id;
  l.channel = 1;
  l.peer = (rank + 1) % 8;
  l.send = true;
  l.op_seq = to;
  l.steps = 8;
  l.step_ns = 12345;
  l.state = FR_CHANST_SEND_WAIT;
  p.links.push_back(l);
  return p;
}

}  // namespace

TEST_CASE("slow history: each collective once, samples and processes bounded", "[daemon][slow]") {
  SlowHistory h(4, 2);
  h.add({report(0, 1, 16), report(1, 1, 16)}, 10);
  h.add({report(0, 5, 20), report(1, 5, 20)}, 20);  // 17..20 are new
  auto snap = h.snapshot("node3", 99);
  REQUIRE(snap.node == "node3");
  REQUIRE(snap.processes.size() == 2);
  const auto& p0 = snap.processes[0];
  CHECK(p0.rank == 0);
  CHECK(p0.pid == 100);
  REQUIRE(p0.samples.size() == 2);
  CHECK(p0.samples[0].time_ns == 10);
  REQUIRE(p0.samples[0].comms.size() == 1);
  CHECK(p0.samples[0].comms[0].busy);
  CHECK(p0.samples[0].comms[0].colls.size() == 16);
  REQUIRE(p0.samples[1].comms[0].colls.size() == 4);
  CHECK(p0.samples[1].comms[0].colls[0].seq == 17);
  CHECK(p0.samples[1].comms[0].colls[3].gpu_ns == 20 % 3 * 7);
  REQUIRE(p0.samples[1].links.size() == 1);
  CHECK(p0.samples[1].links[0].state == FR_CHANST_SEND_WAIT);
  CHECK(p0.samples[1].links[0].step_ns == 12345);
  // At most 4 samples: the oldest go.
  for (int t = 3; t <= 8; ++t) h.add({report(0, 1, uint64_t(t) * 16)}, t * 10);
  snap = h.snapshot("node3", 99);
  REQUIRE(snap.processes[0].samples.size() == 4);
  CHECK(snap.processes[0].samples.front().time_ns == 50);
  // A dead process adds nothing; a third process pushes out the one unheard of longest (rank 1).
  h.add({report(0, 1, 200, false), report(2, 1, 3)}, 90);
  snap = h.snapshot("node3", 99);
  REQUIRE(snap.processes.size() == 2);
  CHECK(snap.processes[0].rank == 0);
  CHECK(snap.processes[0].samples.back().time_ns == 80);
  CHECK(snap.processes[1].rank == 2);
}

TEST_CASE("slow history: a document past the readers' bound keeps each process's newest samples",
          "[daemon][slow]") {
  SlowHistory h;
  for (int t = 1; t <= 100; ++t) h.add({report(0, 1, uint64_t(t)), report(1, 1, uint64_t(t))}, t);
  CHECK(SlowHistory().text("n", 1).empty());  // nothing heard yet: no file
  const std::string whole = h.text("n", 1);
  const std::string cut = h.text("n", 1, whole.size() / 3);
  REQUIRE(cut.size() <= whole.size() / 3);
  fr::log::NodeSlowHistory back;
  std::string err;
  std::vector<std::string> notes;
  REQUIRE(fr::log::parse_slow_history(cut, &back, &err, &notes));
  REQUIRE(back.processes.size() == 2);
  REQUIRE(back.processes[0].samples.size() < 50);
  REQUIRE_FALSE(back.processes[0].samples.empty());
  CHECK(back.processes[0].samples.back().time_ns == 100);
}

TEST_CASE("slow history: the dump's document reads back as written", "[daemon][slow]") {
  SlowHistory h;
  for (int t = 1; t <= 130; ++t) h.add({report(0, 1, uint64_t(t)), report(5, 1, uint64_t(t))}, t);
  const fr::log::NodeSlowHistory snap = h.snapshot("node1", 1796205600123456789);
  REQUIRE(snap.processes[0].samples.size() == fr::log::NodeSlowHistory::kMaxSamples);
  const std::string text = fr::log::slow_history_to_text(snap);
  fr::log::NodeSlowHistory back;
  std::string err;
  std::vector<std::string> notes;
  REQUIRE(fr::log::parse_slow_history(text, &back, &err, &notes));
  CHECK(notes.empty());
  CHECK(back.node == "node1");
  CHECK(back.time_ns == 1796205600123456789);
  REQUIRE(back.processes.size() == 2);
  CHECK(back.processes[1].rank == 5);
  CHECK(back.processes[1].log == "fr-5.log");
  REQUIRE(back.processes[1].samples.size() == snap.processes[1].samples.size());
  const auto& a = snap.processes[1].samples.back();
  const auto& b = back.processes[1].samples.back();
  CHECK(b.time_ns == a.time_ns);
  REQUIRE(b.comms.size() == 1);
  CHECK(b.comms[0].id == 0xabcdef0123456789ull);  // above INT64_MAX: kept unsigned
  CHECK(b.comms[0].busy == a.comms[0].busy);
  REQUIRE(b.comms[0].colls.size() == a.comms[0].colls.size());
  CHECK(b.comms[0].colls[0].seq == a.comms[0].colls[0].seq);
  CHECK(b.comms[0].colls[0].call_ns == a.comms[0].colls[0].call_ns);
  CHECK(b.comms[0].colls[0].gpu_ns == a.comms[0].colls[0].gpu_ns);
  REQUIRE(b.links.size() == 1);
  CHECK(b.links[0].channel == 1);
  CHECK(b.links[0].peer == 6);
  CHECK(b.links[0].send);
  CHECK(b.links[0].op_seq == a.links[0].op_seq);
  CHECK(b.links[0].steps == 8);
  // Refused whole: not JSON, cut short, another schema.
  CHECK_FALSE(fr::log::parse_slow_history("nope", &back, &err, &notes));
  CHECK_FALSE(fr::log::parse_slow_history(text.substr(0, text.size() / 2), &back, &err, &notes));
  CHECK(err == "not a JSON object");
  CHECK_FALSE(fr::log::parse_slow_history(R"({"schema":"fr-gpu/1"})", &back, &err, &notes));
  CHECK(err == "not schema fr-slow-history/1");
  // A negative count in one entry: that process left out, named, the other kept.
  std::string bad = text;
  const auto at = bad.find("\"rank\":0");
  REQUIRE(at != std::string::npos);
  const auto steps = bad.find(",8,12345,", at);
  REQUIRE(steps != std::string::npos);
  bad.replace(steps, 3, ",-8,");
  notes.clear();
  REQUIRE(fr::log::parse_slow_history(bad, &back, &err, &notes));
  REQUIRE(notes.size() == 1);
  CHECK(notes[0].find("process entry 0 left out: a count is negative") == 0);
  REQUIRE(back.processes.size() == 1);
  CHECK(back.processes[0].rank == 5);
}

TEST_CASE("slow history: sampled GPU times are kept once each, when the node first knows them",
          "[daemon][slow]") {
  // Collectives 1..4, of which the GPU finished 1..2 at the first heartbeat (3 reached, 4 not);
  // at the second 3 and 4 are finished too.
  auto with_marks = [](uint64_t finished, uint64_t reached) {
    ProcessReport p = report(0, 1, 4);
    for (CollTiming& t : p.comms[0].recent) {
      if (t.seq <= reached) t.gpu_start_ns = int64_t(t.seq) * 1000 + 100;
      if (t.seq <= finished) t.gpu_end_ns = int64_t(t.seq) * 1000 + 600;
    }
    return p;
  };
  SlowHistory h;
  h.add({with_marks(2, 3)}, 10);
  h.add({with_marks(4, 4)}, 20);
  h.add({with_marks(4, 4)}, 30);  // nothing new
  const auto snap = h.snapshot("n", 40);
  REQUIRE(snap.processes.size() == 1);
  const auto& s = snap.processes[0].samples;
  REQUIRE(s.size() == 3);
  REQUIRE(s[0].comms[0].marks.size() == 2);
  CHECK(s[0].comms[0].marks[0].seq == 1);
  CHECK(s[0].comms[0].marks[1].gpu_start_ns == 2100);
  CHECK(s[0].comms[0].marks[1].gpu_end_ns == 2600);
  CHECK(s[1].comms[0].colls.empty());  // the collectives themselves were kept before
  REQUIRE(s[1].comms[0].marks.size() == 2);
  CHECK(s[1].comms[0].marks[0].seq == 3);
  CHECK(s[1].comms[0].marks[1].seq == 4);
  CHECK(s[2].comms[0].marks.empty());
  // Written and read back; a sample without marks has no "marks" key (readers before them read
  // the document as ever).
  const std::string text = fr::log::slow_history_to_text(snap);
  CHECK(text.find("\"marks\":[[1,1100,1600],[2,2100,2600]]") != std::string::npos);
  size_t keys = 0;
  for (size_t at = text.find("\"marks\""); at != std::string::npos;
       at = text.find("\"marks\"", at + 1))
    keys++;
  CHECK(keys == 2);
  fr::log::NodeSlowHistory back;
  std::string err;
  std::vector<std::string> notes;
  REQUIRE(fr::log::parse_slow_history(text, &back, &err, &notes));
  CHECK(notes.empty());
  const auto& b = back.processes[0].samples;
  REQUIRE(b[1].comms[0].marks.size() == 2);
  CHECK(b[1].comms[0].marks[1].seq == 4);
  CHECK(b[1].comms[0].marks[1].gpu_start_ns == 4100);
  CHECK(b[1].comms[0].marks[1].gpu_end_ns == 4600);
  CHECK(b[2].comms[0].marks.empty());
}
