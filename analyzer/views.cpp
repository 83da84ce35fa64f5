// One process seen twice in a dump set: fr's flight log and torch's own dump of the same rank
// (frd asks fr-run's hook for it at every incident), or either and the stacks frd took of it.
// The view that holds more is matched; the other lends its stacks, host and pid, and torch's
// dump stays beside fr's log for the join of its process groups (torch_join.cpp).
#include <memory>
#include <utility>

#include "analyzer/model.h"

namespace fr::analyzer {
namespace {

// How much a view of a rank holds: fr's flight log with records, torch's dump, a flight log with
// nothing in it, stacks alone.
int view_rank(const Proc& p) {
  if (p.source_kind == "stacks") return 0;
  if (p.source_kind == "torch") return 2;
  return p.comms.empty() && p.xfers.empty() ? 1 : 3;
}

// Two views of one rank of different kinds (fr's flight log, torch's dump of the same process,
// its stacks alone) make one: the richer is kept for matching, and gets the other's stacks when it
// has none. False when both are of one kind (a duplicate).
}  // namespace

bool merge_views(Proc* kept, Proc* other, std::vector<Skip>* warnings) {
  if (kept->source_kind == other->source_kind) return false;
  if (view_rank(*other) > view_rank(*kept)) std::swap(*kept, *other);
  if (!kept->has_stacks && other->has_stacks) {
    kept->stacks = std::move(other->stacks);
    kept->has_stacks = true;
  }
  if (kept->host.empty()) kept->host = other->host;
  if (kept->pid == 0) kept->pid = other->pid;
  if (other->source_kind != "stacks")
    warnings->push_back(
        {other->file, "rank " + std::to_string(kept->rank) + ": " +
                          (other->source_kind == "torch" ? "torch's dump" : "fr's flight log") +
                          " read beside " + kept->file + ", which is matched (it holds more)"});
  // torch's dump of a rank fr's log is matched for stays beside it: its process groups' names
  // and call sites join fr's communicators (torch_join.cpp).
  if (kept->source_kind == "fr" && other->source_kind == "torch") {
    other->stacks = {};
    kept->torch_view = std::make_shared<const Proc>(std::move(*other));
  }
  return true;
}

}  // namespace fr::analyzer
