// The node stream's bytes (daemon/rpc/wire.h): HeartbeatDecoder gives exactly what protobuf's decoding
// of the NodeMessage and from_proto give, for heartbeats as frd node sends them (taken by its fast
// decoder, which the tests check), for the shapes it leaves to protobuf, and for damaged bytes,
// where both must agree on refusing them.
#include <catch2/catch.hpp>
#include <google/protobuf/stubs/logging.h>

#include <sys/resource.h>

#include <random>
#include <string>
#include <vector>

#include "daemon/rpc/convert.h"
#include "daemon/rpc/wire.h"
#include "proto_fill.h"
#include "report_compare.h"

using namespace fr::daemon;

namespace {

// A heartbeat with varied values: negative and 64-bit numbers, empty and cut names, controls.
fr::v1::NodeMessage sample(std::mt19937_64& rng, int processes, int comms, bool echo) {
  NodeReport r;
  r.seq = rng();
  r.node_time_ns = int64_t(rng());
  for (int i = 0; i < processes; ++i) {
    ProcessReport p;
    p.log = i % 4 == 3 ? "" : "fr.job.node" + std::to_string(rng() % 100000) + ".frlog";
    p.rank = int(rng() % 3) - 1;
    p.world_size = int(rng());
    p.pid = int(rng() % 4000000);
    p.alive = rng() % 2;
    p.exited_cleanly = rng() % 2;
    p.job_id = i % 3 == 0 ? std::string("job\t1", 5) : "job-" + std::string(rng() % 90, 'j');
    p.host = "host" + std::to_string(i);
    p.records = rng();
    p.last_record_age_ns = int64_t(rng());
    p.flags = uint32_t(rng());
    p.gpu_throttle = rng() % 3 ? 0 : rng();
    for (int c = 0; c < comms; ++c) {
      CommProgress cp;
      cp.comm_id = rng();
      cp.size = int(rng() % 70000) - 5;
      cp.rank = int(rng() % 70000) - 5;
      cp.state = uint32_t(rng() % 4);
      cp.coll_seq = rng() % 1000000;
      cp.p2p_seq = rng() % 3;
      cp.enqueued = rng();
      cp.started = rng() % 128;
      cp.completed = 0;
      cp.oldest_age_ns = int64_t(rng());  // negative half of the time: cut to 0
      cp.oldest_seq = rng();
      cp.oldest_op = uint32_t(rng() % 20);
      cp.name = c % 2 ? "tp" + std::to_string(c) : "";
      for (int t = 0; t < int(rng() % (CommProgress::kMaxRecent + 1)); ++t)
        cp.recent.push_back({rng() % 100000, uint32_t(rng() % 20), int64_t(rng()),
                             t % 3 ? int64_t(rng()) : 0,  // negative gpu_ns: cut to 0
                             t % 2 ? int64_t(rng()) : 0, t % 4 ? int64_t(rng()) : 0});
      p.comms.push_back(cp);
    }
    for (int l = 0; l < comms; ++l)
      p.links.push_back({rng(), int32_t(rng() % 64), int32_t(rng() % 70000) - 5, rng() % 2 == 0,
                         rng(), uint32_t(rng()), int64_t(rng())});
    r.processes.push_back(p);
  }
  for (int i = 0; i < processes % 3; ++i)
    r.unreadable.push_back("cannot read x" + std::to_string(i));
  if (processes > 1) r.gpu_alerts.push_back("GPU 0000:3b:00.0 reported Xid 79");
  fr::v1::NodeMessage m;
  to_proto(r, m.mutable_heartbeat());
  if (echo) {
    m.mutable_heartbeat()->mutable_echo()->set_t1_ns(int64_t(rng()));
    m.mutable_heartbeat()->mutable_echo()->set_t2_ns(-5);
    m.mutable_heartbeat()->mutable_echo()->set_t3_ns(7);
  }
  return m;
}

grpc::ByteBuffer buffer(const std::string& bytes, size_t pieces = 1) {
  std::vector<grpc::Slice> slices;
  size_t step = pieces <= 1 ? bytes.size() : bytes.size() / pieces + 1;
  for (size_t at = 0; at < bytes.size() || slices.empty(); at += std::max<size_t>(step, 1))
    slices.emplace_back(bytes.data() + at, std::min(step, bytes.size() - at));
  return grpc::ByteBuffer(slices.data(), slices.size());
}

// What protobuf and from_proto make of the bytes: false when they refuse them or they hold
// something other than a heartbeat.
bool reference(const std::string& bytes, NodeReport* out, fr::v1::PingEcho* echo) {
  fr::v1::NodeMessage m;
  if (!m.ParseFromString(bytes) || !m.has_heartbeat()) return false;
  *out = from_proto(m.heartbeat());
  *echo = m.heartbeat().echo();
  return true;
}

// Decodes `bytes` with `d` (which may have decoded anything before) and compares with the
// reference. Returns whether the fast decoder took it.
bool agrees(HeartbeatDecoder& d, NodeReport& reused, const std::string& bytes, size_t pieces = 1) {
  NodeReport want;
  fr::v1::PingEcho want_echo, echo;
  const bool ok_ref = reference(bytes, &want, &want_echo);
  const uint64_t fast_before = d.fast_decodes();
  const bool ok = d.decode(buffer(bytes, pieces), &reused, &echo);
  REQUIRE(ok == ok_ref);
  const bool fast = d.fast_decodes() != fast_before;
  if (!ok) {
    CHECK_FALSE(fast);
    return false;
  }
  std::string why;
  const bool same = fr::daemon::test::same_report(reused, want, &why);
  INFO(why);
  CHECK(same);
  CHECK(echo.t1_ns() == want_echo.t1_ns());
  CHECK(echo.t2_ns() == want_echo.t2_ns());
  CHECK(echo.t3_ns() == want_echo.t3_ns());
  return fast;
}

std::string with_unknown_field(const fr::v1::NodeMessage& m, int field, const std::string& value) {
  fr::v1::NodeMessage copy = m;
  copy.mutable_heartbeat()
      ->GetReflection()
      ->MutableUnknownFields(copy.mutable_heartbeat())
      ->AddLengthDelimited(field, value);
  return copy.SerializeAsString();
}

}  // namespace

TEST_CASE("heartbeats as nodes send them take the fast decoder and decode as protobuf does",
          "[daemon]") {
  std::mt19937_64 rng(7);
  HeartbeatDecoder d;
  NodeReport reused;
  int fast = 0, n = 0;
  for (int processes : {0, 1, 3, 8, 40})
    for (int comms : {0, 1, 4, 9})
      for (bool echo : {false, true})
        for (size_t pieces : {size_t(1), size_t(3)}) {
          ++n;
          fast +=
              agrees(d, reused, sample(rng, processes, comms, echo).SerializeAsString(), pieces);
        }
  CHECK(fast == n);
  CHECK(d.fast_decodes() == uint64_t(n));
}

// The walk over the Heartbeat message's descriptor: every field, the ones added after this test
// included, goes through from_proto and back through to_proto unchanged (so same_report, which
// compares reports in their wire form, compares every field), and the fast decoder takes it and
// decodes it as protobuf and from_proto do. A field that one of them drops, decodes
// otherwise or leaves to protobuf's slower way fails here, by its name.
TEST_CASE("every field of a heartbeat goes through from_proto and to_proto unchanged", "[daemon]") {
  using namespace fr::daemon::test;
  std::string why;
  fr::v1::Heartbeat all;
  Filler().all(&all);
  all.clear_echo();  // not the report's: the decoders hand it back beside the report
  fr::v1::Heartbeat back;
  to_proto(from_proto(all), &back);
  // The differences name the field ("deleted: processes[0].links[1].state").
  const bool same = same_message(back, all, &why);
  INFO(why);
  CHECK(same);
}

TEST_CASE("the fast decoder takes every field of a heartbeat and decodes it as protobuf does",
          "[daemon]") {
  using namespace fr::daemon::test;
  HeartbeatDecoder d;
  NodeReport reused;
  std::vector<FieldPath> leaves;
  leaf_fields(fr::v1::Heartbeat::descriptor(), {}, &leaves);
  for (Fill fill : {Fill::kPlain, Fill::kHostile})
    for (int k = 0; k < 4; ++k) {
      INFO((fill == Fill::kPlain ? "plain" : "hostile") << " values, variant " << k);
      fr::v1::NodeMessage m;
      Filler{fill, k}.all(m.mutable_heartbeat());
      CHECK(agrees(d, reused, m.SerializeAsString()));
      // One field at a time, so that the one the fast decoder gives up on is named.
      for (const FieldPath& path : leaves) {
        INFO(path_name(path));
        fr::v1::NodeMessage one;
        Filler filler{fill, k};
        set_path(one.mutable_heartbeat(), path, &filler);
        CHECK(agrees(d, reused, one.SerializeAsString()));
      }
    }
}

TEST_CASE("the shapes the fast decoder leaves to protobuf decode the same", "[daemon]") {
  std::mt19937_64 rng(11);
  HeartbeatDecoder d;
  NodeReport reused;
  const fr::v1::NodeMessage m = sample(rng, 3, 2, true);
  const std::string plain = m.SerializeAsString();
  REQUIRE(agrees(d, reused, plain));
  auto slow = [&](const std::string& bytes) { CHECK_FALSE(agrees(d, reused, bytes)); };
  // A field this version does not know, inside the heartbeat and around it.
  slow(with_unknown_field(m, 99, "future"));
  slow(plain + std::string("\xa0\x06\x01", 3));  // NodeMessage field 100, a varint
  slow(std::string("\xa0\x06\x01", 3) + plain);
  // Text that is UTF-8 but not ASCII.
  fr::v1::NodeMessage utf8 = m;
  utf8.mutable_heartbeat()->mutable_processes(0)->set_host("h\xc3\xa9te");
  slow(utf8.SerializeAsString());
  // The heartbeat field twice: protobuf merges the two.
  slow(plain + sample(rng, 1, 1, false).SerializeAsString());
  // Past from_proto's bounds, which cut.
  fr::v1::NodeMessage many = m;
  for (int i = 0; i < 70; ++i) many.mutable_heartbeat()->add_unreadable("u" + std::to_string(i));
  slow(many.SerializeAsString());
  // A varint in more bytes than it needs (seq = 1 as 0x81 0x00).
  fr::v1::NodeMessage tiny;
  tiny.mutable_heartbeat()->set_seq(1);
  std::string padded = tiny.SerializeAsString();
  REQUIRE(padded == std::string("\x12\x02\x08\x01", 4));
  slow(std::string("\x12\x03\x08\x81\x00", 5));
  // And the decoder still takes the usual shape after all of them.
  CHECK(agrees(d, reused, plain));
}

TEST_CASE("recent ops and links past their bounds are cut alike by both decoders", "[daemon]") {
  std::mt19937_64 rng(23);
  fr::v1::NodeMessage m = sample(rng, 2, 2, false);
  auto* hb = m.mutable_heartbeat();
  // 40 recent collectives on a communicator, 100 links on a process: 16 and 64 are kept.
  auto* comm = hb->mutable_processes(0)->mutable_comms(0);
  comm->clear_recent();
  for (int t = 1; t <= 40; ++t) {
    auto* r = comm->add_recent();
    r->set_seq(uint64_t(t));
    r->set_call_ns(t * 1000);
  }
  auto* proc = hb->mutable_processes(1);
  proc->clear_links();
  for (int l = 0; l < 100; ++l) {
    auto* k = proc->add_links();
    k->set_peer(l);
    k->set_step_ns(-l);  // negative: cut to 0
  }
  const std::string bytes = m.SerializeAsString();
  HeartbeatDecoder d;
  NodeReport got;
  CHECK_FALSE(agrees(d, got, bytes));  // past the bounds: protobuf's path, after the trim
  REQUIRE(got.processes[0].comms[0].recent.size() == CommProgress::kMaxRecent);
  CHECK(got.processes[0].comms[0].recent.back().seq == CommProgress::kMaxRecent);
  REQUIRE(got.processes[1].links.size() == ProcessReport::kMaxLinks);
  CHECK(got.processes[1].links.back().peer == int(ProcessReport::kMaxLinks) - 1);
  CHECK(got.processes[1].links.back().step_ns == 0);
  // The trimmed bytes hold no more than the bounds: what protobuf builds is bounded.
  std::string trimmed;
  REQUIRE(
      trim_node_message(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), &trimmed));
  fr::v1::NodeMessage back;
  REQUIRE(back.ParseFromString(trimmed));
  CHECK(back.heartbeat().processes(0).comms(0).recent_size() == int(CommProgress::kMaxRecent));
  CHECK(back.heartbeat().processes(1).links_size() == int(ProcessReport::kMaxLinks));
  // At the bounds exactly, the fast decoder takes it.
  comm->mutable_recent()->DeleteSubrange(16, 24);
  proc->mutable_links()->DeleteSubrange(64, 36);
  CHECK(agrees(d, got, m.SerializeAsString()));
}

TEST_CASE("damaged heartbeats are refused as protobuf refuses them", "[daemon]") {
  google::protobuf::LogSilencer quiet;  // protobuf logs each string that is not UTF-8
  std::mt19937_64 rng(13);
  HeartbeatDecoder d;
  NodeReport reused;
  const fr::v1::NodeMessage m = sample(rng, 4, 3, true);
  const std::string plain = m.SerializeAsString();
  // Not UTF-8 (proto3 strings must be).
  fr::v1::NodeMessage bad = m;
  bad.mutable_heartbeat()->mutable_processes(1)->set_log("x\xff");
  CHECK_FALSE(agrees(d, reused, bad.SerializeAsString()));
  // Cut short, anywhere.
  for (size_t len = 0; len < plain.size(); len += 7) agrees(d, reused, plain.substr(0, len));
  // A heartbeat followed by a hello in the same message: the hello is the message's body.
  fr::v1::NodeMessage hello;
  hello.mutable_hello()->set_node_name("n");
  CHECK_FALSE(agrees(d, reused, plain + hello.SerializeAsString()));
  // Bytes that are no message at all.
  CHECK_FALSE(agrees(d, reused, std::string("\x12\xff\xff\xff\xff\x0f", 6)));
  CHECK_FALSE(agrees(d, reused, std::string("\x12\x05\x07\x07\x07\x07\x07", 7)));
  CHECK_FALSE(agrees(d, reused, ""));
}

TEST_CASE("every mutation of a heartbeat decodes as protobuf decodes it, or is refused by both",
          "[daemon]") {
  google::protobuf::LogSilencer quiet;
  std::mt19937_64 rng(17);
  HeartbeatDecoder d;
  NodeReport reused;
  int taken = 0, refused = 0;
  for (int round = 0; round < 3000; ++round) {
    std::string bytes = sample(rng, int(rng() % 5), int(rng() % 4), rng() % 2).SerializeAsString();
    const int edits = 1 + int(rng() % 3);
    for (int e = 0; e < edits && !bytes.empty(); ++e) {
      const size_t at = rng() % bytes.size();
      switch (rng() % 4) {
        case 0: bytes[at] = char(rng()); break;                           // a byte changed
        case 1: bytes[at] = char(bytes[at] ^ (1 << (rng() % 8))); break;  // a bit flipped
        case 2: bytes.erase(at, 1 + rng() % 3); break;                    // bytes lost
        default: bytes.insert(at, 1, char(rng())); break;                 // a byte added
      }
    }
    if (agrees(d, reused, bytes, 1 + rng() % 3))
      ++taken;
    else
      ++refused;
  }
  INFO("fast " << taken << ", protobuf or refused " << refused);
  CHECK(taken > 100);  // the fast decoder met mutated messages it could take, and agreed
}

TEST_CASE("messages for nodes are encoded once and read back whole", "[daemon]") {
  fr::v1::CoordinatorMessage m;
  m.mutable_dump_request()->set_incident_id("incident-0001");
  m.mutable_dump_request()->set_deadline_ms(5000);
  auto wire = to_wire(m);
  grpc::Slice one;
  REQUIRE(wire->bytes.TrySingleSlice(&one).ok());
  CHECK(wire->since == 1);
  fr::v1::CoordinatorMessage back;
  REQUIRE(back.ParseFromArray(one.begin(), int(one.size())));
  CHECK(back.dump_request().incident_id() == "incident-0001");
  CHECK(back.dump_request().deadline_ms() == 5000);

  fr::v1::NodeMessage hb;
  hb.mutable_heartbeat()->set_seq(3);
  fr::v1::NodeMessage hello;
  hello.mutable_hello()->set_node_name("n1");
  CHECK(starts_with_heartbeat(buffer(hb.SerializeAsString(), 2)));
  CHECK_FALSE(starts_with_heartbeat(buffer(hello.SerializeAsString())));
  CHECK_FALSE(starts_with_heartbeat(buffer("")));
  fr::v1::NodeMessage decoded;
  REQUIRE(decode(buffer(hello.SerializeAsString(), 3), &decoded));
  CHECK(decoded.hello().node_name() == "n1");
  CHECK_FALSE(decode(buffer(std::string("\x0a\x05zz", 4)), &decoded));
}

TEST_CASE("a heartbeat of two million empty processes costs a few times its size, not a hundred",
          "[daemon]") {
  // 4 MiB of empty ProcessReports (#37): protobuf built all of them (about 300 MB) before
  // from_proto kept 1,024. The bytes are cut to the bounds first.
  std::string body;
  for (int i = 0; i < 2'000'000; ++i) body.append("\x22\x00", 2);
  // An unknown field 15 too (the fast decoder leaves such a heartbeat to protobuf).
  body.append("\x7a\x01x", 3);
  std::string bytes = "\x12";  // NodeMessage.heartbeat, then its length
  {
    uint64_t v = body.size();
    while (v >= 0x80) {
      bytes.push_back(char(v | 0x80));
      v >>= 7;
    }
    bytes.push_back(char(v));
  }
  bytes += body;
  HeartbeatDecoder d;
  NodeReport out;
  fr::v1::PingEcho echo;
  struct rusage before {};
  ::getrusage(RUSAGE_SELF, &before);
  REQUIRE(d.decode(buffer(bytes), &out, &echo));
  struct rusage after {};
  ::getrusage(RUSAGE_SELF, &after);
  CHECK(out.processes.size() == kMaxProcessesPerNode);
  const long grew_kib = after.ru_maxrss - before.ru_maxrss;
  INFO("peak RSS grew " << grew_kib / 1024 << " MiB for a message of " << bytes.size() / 1024
                        << " KiB");
  CHECK(grew_kib < 64 * 1024);

  // The same processes spread over many heartbeat fields of one message (protobuf merges them):
  // counted together.
  std::string many;
  for (int field = 0; field < 1000; ++field) {
    std::string part;
    for (int i = 0; i < 2000; ++i) part.append("\x22\x00", 2);
    many.push_back('\x12');
    for (uint64_t v = part.size();; v >>= 7) {
      many.push_back(char(v >= 0x80 ? (v & 0x7f) | 0x80 : v));
      if (v < 0x80) break;
    }
    many += part;
  }
  many.append("\x0a\x00", 2);  // a hello too: not the usual shape, decoded as a whole message
  ::getrusage(RUSAGE_SELF, &before);
  const bool decoded = d.decode(buffer(many), &out, &echo);
  ::getrusage(RUSAGE_SELF, &after);
  INFO("merged: peak RSS grew " << (after.ru_maxrss - before.ru_maxrss) / 1024 << " MiB");
  CHECK(after.ru_maxrss - before.ru_maxrss < 64 * 1024);
  if (decoded) CHECK(out.processes.size() <= kMaxProcessesPerNode);

  // What the trimmer keeps of a message within the bounds is the message.
  std::mt19937_64 rng(23);
  const std::string whole = sample(rng, 5, 7, true).heartbeat().SerializeAsString();
  std::string trimmed;
  REQUIRE(trim_heartbeat(reinterpret_cast<const uint8_t*>(whole.data()), whole.size(), &trimmed));
  CHECK(trimmed == whole);
}
