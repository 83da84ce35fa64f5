// The JSON form of the model's records that more than one daemon file writes. Each reader stays
// with its file: a node's dump header is read strictly, a recovered incident.json tolerantly.
#pragma once

#include <nlohmann/json.hpp>

#include "daemon/base/model.h"

namespace fr::daemon {

// One process of a dump set: {"rank", "world_size", "pid", "host", "job_id", "file", "source",
// "alive", "records", "overwritten", "torn"}, as the dump header and incident.json carry it.
void to_json(nlohmann::json& j, const DumpProcess& p);

}  // namespace fr::daemon
