// The analysis as a type: what the fr-analysis/1 document (DESIGN.md, docs/fr-analyze.md) holds,
// so that the text view, the incident page, the trace, the coordinator and the CLI read fields
// instead of string keys. `to_json` writes the document, and is the only place that knows its
// keys; `from_json` reads one back (the coordinator's stored analysis.json, fr-simjob's result).
//
// Typed: the top level, the verdict and findings (kind, summary, communicator, op, culprits,
// mismatch), the inputs, the ranks, the communicators and the skew table. Still JSON, because
// they are wide and read by few: each finding's per-member evidence rows and its further details
// by kind (group, missing_members, graph_replay, pairs, shrink_excluded, gpu_problems, nixl), and the
// dump set's context (stack_groups, stacks_unavailable, gpus, gpus_unavailable).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "analyzer/verdicts.h"

namespace fr::analyzer {

// A communicator as every sentence names it: {"id": "0x…", "name", "size"}.
struct CommRef {
  std::string id;
  std::string name;
  int size = -1;
};

// kind == mismatch: which argument differs, and who called which value.
struct Mismatch {
  struct Value {
    std::string value;
    std::vector<int> ranks;
  };
  std::string field;  // op, dtype, count, root or redop
  std::vector<Value> values;
  std::string expected;  // the value the others called; empty when it cannot be told
};

// The verdict, and each finding, in one shape.
struct Finding {
  VerdictKind kind = VerdictKind::kIncomplete;
  std::string summary;
  std::optional<CommRef> comm;  // the stalled op's communicator; absent for job-wide findings
  uint64_t seq = 0;             // with comm: the op's sequence number, its counter and its name
  std::string seq_kind;         // "coll", "p2p" or "api" (a blocking host call)
  std::string op;
  std::vector<int> culprit_ranks;
  // Process ids of the culprits (a process without a global rank has only this). Written for
  // the NIXL kinds always, for the others when known.
  std::vector<int> culprit_pids;
  std::vector<int> blocked_ranks;
  std::optional<Mismatch> mismatch;
  bool consequence = false;                   // a finding the verdict already accounts for...
  std::optional<VerdictKind> consequence_of;  // ...and the verdict's kind
  nlohmann::json evidence;                    // array of per-member rows; null: none written
  nlohmann::json details = nlohmann::json::object();  // further keys by kind (see above)
};

struct FileNote {
  std::string file;
  std::string text;  // "error" of a skipped file, "warning" of one read
};

struct Inputs {
  std::vector<std::string> paths;
  uint64_t files_read = 0;
  std::vector<FileNote> skipped;
  std::vector<FileNote> warnings;
  std::string clock;   // "aligned" or "per_host"
  std::string job_id;  // empty: none known
  // Dumps of other jobs found beside this one's and left out (a mixed dump set): which job, how
  // many files. Not empty: the verdict covers `job_id` alone.
  struct OtherJob {
    std::string job_id;
    uint64_t files = 0;
  };
  std::vector<OtherJob> other_jobs;
  bool filtered = false;  // --rank or --comm given: the two below
  std::vector<int> filter_ranks;
  std::string filter_comm;
};

struct Ranks {
  int expected = 0;
  std::vector<int> found, missing, dead;
  std::optional<std::vector<int>> exited;  // every rank gone and nothing waits: the job ended
};

// How far a communicator's members got, for one sequence-number family.
struct Spread {
  uint64_t min_enqueued = 0, max_enqueued = 0, min_completed = 0, max_completed = 0;
  std::optional<uint64_t> stalled_seq;
};

struct Communicator {
  CommRef comm;
  std::string origin;                        // init, split, shrink, grow...
  std::string parent;                        // parent's id; empty: none
  std::vector<std::pair<int, int>> members;  // (rank in comm, global rank)
  std::optional<Spread> coll, p2p;
  bool stalled = false;
  std::vector<std::pair<int, int>> missing_members;  // (rank in comm, global rank or -1)
};

struct SkewRow {
  int rank = -1;
  int64_t mean_late_ns = 0;
  int64_t max_late_ns = 0;
  uint64_t collectives = 0;
};

struct Analysis {
  // false: a document that only says why there is no analysis (verdict and findings alone).
  bool complete = true;
  Inputs inputs;
  Ranks ranks;
  Finding verdict;
  std::vector<Finding> findings;
  std::vector<Communicator> communicators;
  std::vector<SkewRow> skew;
  nlohmann::json context = nlohmann::json::object();  // stacks and GPUs (see above)

  // The fr-analysis/1 document.
  nlohmann::json to_json() const;
  // The same document, with each finding's evidence (the bulk of a large job's document) moved
  // into it rather than copied: the findings are left without their evidence.
  nlohmann::json take_json();
  // Reads a document back. Throws std::exception subclasses on a document that is not one
  // (wrong types, an unknown verdict kind).
  static Analysis from_json(const nlohmann::json& doc);
};

// nlohmann's conversions, so `json j = analysis;` and `j.get<Analysis>()` work too.
inline void to_json(nlohmann::json& j, const Analysis& a) { j = a.to_json(); }
inline void from_json(const nlohmann::json& j, Analysis& a) { a = Analysis::from_json(j); }

}  // namespace fr::analyzer
