// The coordinator's incidents (a part of CoordinatorState, coordinator.h): the list of them, in
// the order they opened, with the latest closed ones kept in memory (all stay on disk); which
// one is active or holds back detection; a new incident's id and directory (never one a previous
// run left on disk); its incident.json, written when it changes (at most once a second while
// dumps come in); the verdict hook's once-only flag; and the steps of its life the dumps and the
// analysis drive (collected, analysed). Whom to ask for dumps and when a condition cleared are
// the composition's (coordinator_incidents.cpp): they need the nodes.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "daemon/logic/coordinator_types.h"

namespace fr::daemon {

class IncidentBook {
 public:
  using List = std::vector<Incident>;
  // Incidents go to dump_dir/<job>/<id>; incident.json names coordinator_id.
  IncidentBook(std::string dump_dir, std::string coordinator_id);

  const std::string& coordinator_id() const { return coordinator_id_; }
  size_t size() const { return incidents_.size(); }
  const List& list() const { return incidents_; }
  List::iterator begin() { return incidents_.begin(); }
  List::iterator end() { return incidents_.end(); }
  List::const_iterator begin() const { return incidents_.begin(); }
  List::const_iterator end() const { return incidents_.end(); }
  Incident& back() { return incidents_.back(); }

  // The incident with this id (an index, not a walk: /incidents/ID asks for one among every
  // incident kept); null when none.
  Incident* find(const std::string& id);
  const Incident* find(const std::string& id) const;
  // The incident collecting, being analysed or open, if any.
  Incident* active();
  // The incident that holds back automatic detection: any incident collecting or analysing, and
  // any open one but a slow one (a hang while the job is slow is still found).
  Incident* blocking();
  // The incident collecting or being analysed, if any (a manual trigger reuses it).
  Incident* collecting();
  // Whether any incident is collecting or being analysed.
  bool busy() { return collecting() != nullptr; }

  // A new incident, collecting, with its id, its directory (created now, so that a restarted
  // coordinator still accepts the dumps taken for it; a failure is its error), its times and its
  // deadline. The caller fills in whom it asks and what triggered it. The reference (as any
  // into the book) holds until the next incident opens or is added.
  Incident& open(IncidentKind kind, const std::string& reason, const std::string& job_id,
                 int64_t now_mono, int64_t deadline_ns);
  // An incident a previous run left (recovery.h).
  Incident& add(Incident inc);

  // incident.json's contents, and writing it (an Actions::persist entry).
  nlohmann::json to_json(const Incident& inc) const;
  void persist(const Incident& inc, Actions* actions) const;
  // Writes the incidents changed since their last write: at once once they no longer collect,
  // at most once a second while they do.
  void persist_changed(int64_t now_mono, Actions* actions);
  // The verdict hook may run for this incident (once per incident, also across restarts).
  bool take_hook(const std::string& incident_id, Actions* actions);

  // Whether an incident not closed asked this node to dump or was triggered by it (the node is
  // not forgotten then).
  bool needs_node(const std::string& node) const;
  // Adds the flight logs of node `node` that triggered an incident not closed.
  void watched_logs(const std::string& node, std::set<std::string>* logs) const;
  // Closed incidents beyond the latest max_closed are dropped from memory.
  void trim_closed(size_t max_closed);

  // inc's dumps are in (or its deadline passed): it is analysed next.
  void mark_collected(Incident& inc, int64_t now_mono);
  // inc's analysis finished with r. False: a dump arrived meanwhile, the set is to be assembled
  // again (inc stays analysing); true: inc is closed (manual) or open, its verdict set (a slow
  // incident's verdict is the detector's).
  bool mark_analysed(Incident& inc, const AssemblyResult& r, int64_t now_mono);
  // How long the last incident took to collect, and to analyse.
  double last_dump_seconds() const { return last_dump_seconds_; }
  double last_analysis_seconds() const { return last_analysis_seconds_; }

 private:
  std::string dump_dir_;
  std::string coordinator_id_;
  List incidents_;
  // Each incident's position in incidents_, by id (the first, should two share one): kept as
  // incidents are added, rebuilt when trim_closed drops some.
  std::unordered_map<std::string, size_t> by_id_;
  void reindex();
  int next_incident_ = 1;
  double last_dump_seconds_ = 0;
  double last_analysis_seconds_ = 0;
};

}  // namespace fr::daemon
