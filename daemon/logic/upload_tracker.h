// The coordinator's uploads (a part of CoordinatorState, coordinator.h): whether a dump comes
// from the node that was asked (its connection's upload key and credentials, files named after
// it), where its files go (the incident's directory, or a previous run's incident recovered for
// it), and what its arrival or its failure does to the incident. It works on the incident book
// and reads the node table, both owned by the composition; it owns the count of failed dumps.
#pragma once

#include <cstdint>
#include <string>

#include "daemon/base/model.h"
#include "daemon/logic/coordinator_types.h"
#include "daemon/logic/incident_book.h"
#include "daemon/logic/node_table.h"
#include "daemon/logic/recovery.h"

namespace fr::daemon {

class UploadTracker {
 public:
  UploadTracker(IncidentBook* incidents, const NodeTable* nodes, const Recovery* recovery);

  // Whether an upload (or placed dump) with this header comes from the node it names: that node
  // is connected now, its upload key matches and it was asked for the incident. False: *error.
  bool check_uploader(const DumpHeader& hdr, const PeerAuth& auth, std::string* error) const;
  // Where the files of `hdr` go (the incident's directory) or why not; *duplicate when this
  // node's dump is already in. A dump of another job is refused, and so is one for a closed
  // incident. job_dir_name: the job's directory; job_known: the job's id is given or learned.
  bool begin_upload(const DumpHeader& hdr, const std::string& job_dir_name, bool job_known,
                    std::string* dir, bool* duplicate, std::string* error);
  // `placed`: the node wrote the files into the incident's directory itself (shared dump dir).
  void upload_done(const DumpHeader& hdr, int64_t now_mono, bool placed);
  // The upload broke off: the node keeps its dump and retries; noted as the incident's error.
  void upload_failed(const std::string& incident_id, const std::string& node,
                     const std::string& error);
  // The node says it could not take its dump for the incident: it counts as failed there.
  void dump_failed(const std::string& incident_id, const std::string& node,
                   const std::string& error);
  // Dumps that failed to arrive or to be written.
  uint64_t failures() const { return failures_; }

 private:
  IncidentBook* incidents_;
  const NodeTable* nodes_;
  const Recovery* recovery_;
  uint64_t failures_ = 0;
};

}  // namespace fr::daemon
