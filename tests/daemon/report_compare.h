// Whether two node reports say the same, field by field, and the differences when not: for the
// tests of the heartbeat's decoders (convert_test.cpp, wire_test.cpp, fuzz_wire.cpp). The reports
// are compared in their wire form (to_proto), which carries every field of the model (wire_test.cpp
// walks the Heartbeat message's fields to check that it does), so a field added later is compared
// without a line here.
#pragma once

#include <google/protobuf/util/message_differencer.h>

#include <string>

#include "daemon/base/model.h"
#include "daemon/rpc/convert.h"

namespace fr::daemon::test {

inline bool same_report(const NodeReport& a, const NodeReport& b, std::string* why) {
  fr::v1::Heartbeat x, y;
  to_proto(a, &x);
  to_proto(b, &y);
  google::protobuf::util::MessageDifferencer d;
  why->clear();
  d.ReportDifferencesToString(why);
  return d.Compare(x, y);
}

}  // namespace fr::daemon::test
