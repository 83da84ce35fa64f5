// The coordinator's own heartbeat decoder (daemon/rpc/wire.h, HeartbeatDecoder) against protobuf's:
// for any bytes a node can send, both refuse them or both give the same report and clock echo,
// also when the bytes come in several slices and when the decoder reuses what it decoded before
// (it keeps its strings and submessages from one heartbeat to the next). The decoder exists to
// save CPU at tens of thousands of nodes (frd-decode-bench); this target keeps it exactly
// protobuf's. The first input byte picks how the rest is sliced.
#include <google/protobuf/stubs/logging.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "daemon/rpc/convert.h"
#include "daemon/rpc/wire.h"
#include "report_compare.h"

namespace {

grpc::ByteBuffer sliced(const std::string& bytes, size_t pieces) {
  std::vector<grpc::Slice> slices;
  const size_t step = pieces <= 1 ? bytes.size() : bytes.size() / pieces + 1;
  for (size_t at = 0; at < bytes.size() || slices.empty(); at += std::max<size_t>(step, 1))
    slices.emplace_back(bytes.data() + at, std::min(step, bytes.size() - at));
  return grpc::ByteBuffer(slices.data(), slices.size());
}

[[noreturn]] void differ(const char* what) {
  fprintf(stderr, "fuzz_wire: HeartbeatDecoder and protobuf differ: %s\n", what);
  abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static google::protobuf::LogSilencer quiet;
  // One decoder for the whole run: what it keeps from earlier inputs must never leak into a report.
  static fr::daemon::HeartbeatDecoder decoder;
  static fr::daemon::NodeReport reused;
  if (size == 0) return 0;
  const size_t pieces = 1 + data[0] % 4;
  const std::string bytes(reinterpret_cast<const char*>(data + 1), size - 1);

  fr::v1::NodeMessage m;
  fr::daemon::NodeReport want;
  fr::v1::PingEcho want_echo;
  const bool ok_ref = m.ParseFromString(bytes) && m.has_heartbeat();
  if (ok_ref) {
    want = fr::daemon::from_proto(m.heartbeat());
    want_echo = m.heartbeat().echo();
  }
  fr::v1::PingEcho echo;
  const bool ok = decoder.decode(sliced(bytes, pieces), &reused, &echo);
  if (ok != ok_ref) differ(ok ? "only the decoder took the bytes" : "only protobuf took the bytes");
  if (!ok) return 0;
  std::string why;
  if (!fr::daemon::test::same_report(reused, want, &why)) differ(why.c_str());
  if (echo.t1_ns() != want_echo.t1_ns() || echo.t2_ns() != want_echo.t2_ns() ||
      echo.t3_ns() != want_echo.t3_ns())
    differ("the clock echo");
  return 0;
}
