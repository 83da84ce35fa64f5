// The little code model.h declares: the clocks every daemon library reads, and a report's oldest
// op. Here, in the base library, rather than with the log watcher that first needed them, so the
// coordinator's logic links them without linking the node's I/O.
#include "daemon/base/model.h"

#include <time.h>

#include <algorithm>
#include <iterator>
#include <string>

namespace fr::daemon {

int64_t mono_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

int64_t real_ns() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

uint32_t agree_protocol(uint32_t peer, std::string* error) {
  if (peer < kMinProtocol) {
    *error = "the peer speaks protocol " + std::to_string(peer) + "; this side speaks " +
             std::to_string(kMinProtocol) + " to " + std::to_string(kProtocol);
    return 0;
  }
  return std::min(peer, kProtocol);
}

namespace {
constexpr MessageRow kNodeRows[] = {
#define FR_NODE_MESSAGE(kind, field, since) {field, since},
#define FR_COORDINATOR_MESSAGE(kind, field, since)
#include "fr/frd_messages.def"
};
constexpr MessageRow kCoordinatorRows[] = {
#define FR_NODE_MESSAGE(kind, field, since)
#define FR_COORDINATOR_MESSAGE(kind, field, since) {field, since},
#include "fr/frd_messages.def"
};
}  // namespace

uint32_t MessageRows::since(int field) const {
  for (size_t i = 0; i < count; ++i)
    if (rows[i].field == field) return rows[i].since;
  return 0;
}

MessageRows node_messages() { return {kNodeRows, std::size(kNodeRows)}; }
MessageRows coordinator_messages() { return {kCoordinatorRows, std::size(kCoordinatorRows)}; }

bool may_send(const MessageRows& rows, int field, uint32_t agreed) {
  const uint32_t since = rows.since(field);
  return since != 0 && since <= agreed;
}

bool may_send(NodeMessageKind k, uint32_t agreed) {
  return may_send(node_messages(), kNodeRows[size_t(k)].field, agreed);
}
bool may_send(CoordinatorMessageKind k, uint32_t agreed) {
  return may_send(coordinator_messages(), kCoordinatorRows[size_t(k)].field, agreed);
}

int64_t ProcessReport::oldest_age_ns() const {
  int64_t m = 0;
  for (const auto& c : comms) m = std::max(m, c.oldest_age_ns);
  for (const auto& x : xfers) m = std::max(m, x.oldest_age_ns);
  return m;
}

uint64_t nixl_model_id(const std::string& local_agent, const std::string& remote_agent) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a over "nixl\0local\0remote"
  auto mix = [&](const std::string& s) {
    for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
    h = (h ^ 0) * 0x100000001b3ull;
  };
  mix("nixl");
  mix(local_agent);
  mix(remote_agent);
  return h | 1;  // never 0
}

std::vector<std::string> slowing_throttle_names(uint64_t mask) {
  static const struct {
    uint64_t bit;
    const char* name;
  } kSlowing[] = {{kThrottleSwPowerCap, "SwPowerCap"},
                  {kThrottleHwSlowdown, "HwSlowdown"},
                  {kThrottleSwThermalSlowdown, "SwThermalSlowdown"},
                  {kThrottleHwThermalSlowdown, "HwThermalSlowdown"},
                  {kThrottleHwPowerBrakeSlowdown, "HwPowerBrakeSlowdown"}};
  std::vector<std::string> out;
  for (const auto& r : kSlowing)
    if (mask & r.bit) out.push_back(r.name);
  return out;
}

std::string throttle_words(const std::vector<std::string>& names) {
  std::vector<std::string> words;
  for (const auto& n : names) {
    const char* w = n.find("Thermal") != std::string::npos ? "thermal"
                    : n.find("Power") != std::string::npos ? "power"
                                                           : "hardware slowdown";
    if (std::find(words.begin(), words.end(), w) == words.end()) words.push_back(w);
  }
  std::string out;
  for (const auto& w : words) out += (out.empty() ? "" : ", ") + w;
  return out;
}

}  // namespace fr::daemon
