// The kinds of verdict and finding the analysis gives (`kind` in fr-analysis/1), in one list:
// its name in the JSON, and a one-line meaning. The order of the list is the ranking: when
// several stalls compete for the verdict, the kind listed first explains more (after whether its
// culprits wait elsewhere; see Stall in passes.h). NIXL transfers (one-sided, on no communicator)
// come after the collective kinds: a stalled transfer and a collective hang that do not explain
// each other give the collective (it holds a whole group) as the verdict; when one explains the
// other (a rank waits for the transfer, or the transfer's remote waits in the collective), the
// tier decides first. node_lost and rank_dead override every stall, except that a dead process
// a NIXL verdict already names stays that verdict's culprit (overrides.cpp); no_hang is the
// verdict when nothing waits; skew, slow and inconsistent are only ever findings.
//
// Adding a kind: one line here, then where the analysis decides it (a matching pass or
// overrides.cpp) and, if it needs its own words, the text and page views (render.cpp, html.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

// X(Enumerator, "json name", "meaning")
#define FR_VERDICT_KINDS(X)                                                                        \
  X(kNodeLost, "node_lost", "every rank of a node is missing or dead while the others wait")       \
  X(kRankDead, "rank_dead", "ranks died (their writers were gone at the dump) while others wait")  \
  X(kMismatch, "mismatch", "members called the same sequence number with different arguments")     \
  X(kNotEntered, "not_entered", "some members never called the op the others are blocked in")      \
  X(kP2pUnmatched, "p2p_unmatched", "a send, receive or signal wait has no counterpart")           \
  X(kStuckInCollective, "stuck_in_collective", "all entered; some GPUs never started or finished") \
  X(kNixlDisconnected, "nixl_disconnected", "a NIXL transfer failed: its remote agent went away")  \
  X(kNixlStalled, "nixl_stalled", "a NIXL transfer is still in flight past the stall threshold")   \
  X(kStackOutlier, "stack_outlier",                                                                \
    "no recorder shows the hang; the stacks show some ranks apart from all the others")            \
  X(kIncomplete, "incomplete", "the members that would decide it have no dump")                    \
  X(kNoHang, "no_hang", "nothing is left waiting")                                                 \
  X(kSkew, "skew", "a straggler: some ranks arrive much later than the rest (finding only)")       \
  X(kSlow, "slow",                                                                                 \
    "fail-slow: one rank consistently keeps the others waiting, with its cause and cost (finding " \
    "only)")                                                                                       \
  X(kInconsistent, "inconsistent",                                                                 \
    "dumps that differ where it cannot hang a job: an output unlike its input, mixed recorder "    \
    "versions (finding only)")

namespace fr::analyzer {

enum class VerdictKind : uint8_t {
#define FR_VERDICT_ENUM(e, name, meaning) e,
  FR_VERDICT_KINDS(FR_VERDICT_ENUM)
#undef FR_VERDICT_ENUM
};

inline constexpr int kVerdictKindCount = 0
#define FR_VERDICT_COUNT(e, name, meaning) +1
    FR_VERDICT_KINDS(FR_VERDICT_COUNT)
#undef FR_VERDICT_COUNT
    ;

// The kind's name in the JSON ("not_entered").
inline const char* verdict_name(VerdictKind k) {
  switch (k) {
#define FR_VERDICT_NAME(e, name, meaning) \
  case VerdictKind::e: return name;
    FR_VERDICT_KINDS(FR_VERDICT_NAME)
#undef FR_VERDICT_NAME
  }
  return "?";
}

// What the kind means, in one line.
inline const char* verdict_meaning(VerdictKind k) {
  switch (k) {
#define FR_VERDICT_MEANING(e, name, meaning) \
  case VerdictKind::e: return meaning;
    FR_VERDICT_KINDS(FR_VERDICT_MEANING)
#undef FR_VERDICT_MEANING
  }
  return "?";
}

// The kind named `name`; false when no kind has that name.
inline bool verdict_from_name(std::string_view name, VerdictKind* out) {
#define FR_VERDICT_PARSE(e, n, meaning) \
  if (name == n) {                      \
    *out = VerdictKind::e;              \
    return true;                        \
  }
  FR_VERDICT_KINDS(FR_VERDICT_PARSE)
#undef FR_VERDICT_PARSE
  return false;
}

// Whether kind `k` is only ever a finding, never a verdict.
inline bool finding_only(VerdictKind k) {
  return k == VerdictKind::kSkew || k == VerdictKind::kSlow || k == VerdictKind::kInconsistent;
}

// Whether `name` (a JSON `kind`) is kind `k`.
inline bool is_verdict(std::string_view name, VerdictKind k) { return name == verdict_name(k); }

}  // namespace fr::analyzer
