// What a restarted coordinator recovers (a part of CoordinatorState, coordinator.h), read from
// the dump directory: the incidents a previous run left not closed (each incident's
// incident.json), and the incident of a previous run that a node delivers a kept dump for. Both
// come back as Incident values, marked recovered, for the incident book (incident_book.h) to
// hold; partial uploads a killed coordinator left behind are removed on the way.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "daemon/base/model.h"
#include "daemon/logic/coordinator_types.h"

namespace fr::daemon {

class Recovery {
 public:
  // Uses cfg's dump_dir, job_id (already sanitised; empty: every job's directory is read) and
  // dump_deadline_ns.
  explicit Recovery(const CoordinatorConfig& cfg);

  // The incidents left on disk not closed, by job and id. Collecting: the nodes reconnect and
  // are asked again; analysing: collecting with its deadline now, so the set is written again;
  // open: stays open, so the same hang does not open a second one.
  std::vector<Incident> open_incidents() const;
  // For a dump of incident hdr.incident_id that this run does not know: the incident a previous
  // run left in its directory (under hdr.job_id, else job_dir_name, else the one job whose
  // directory holds it while the job is not known), into *out, open. False: refused (*error:
  // no such incident, or it is closed); true with *duplicate: this node's dump is already in a
  // closed one, *out untouched.
  bool incident_for_upload(const DumpHeader& hdr, const std::string& job_dir_name, bool job_known,
                           Incident* out, bool* duplicate, std::string* error) const;

 private:
  CoordinatorConfig cfg_;
};

}  // namespace fr::daemon
