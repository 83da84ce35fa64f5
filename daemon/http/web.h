// The coordinator's web pages, drawn from its typed status (daemon/base/status.h, what
// `frd status --json` returns as frd-status/1) and from an incident's analysis.json, so they are
// tested without sockets; CoordinatorPages (coordinator_pages.h) routes to them. The incident page is the analyzer's (analyzer/html.h): the
// coordinator and `fr-analyze --html` draw the same page.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "daemon/base/status.h"

namespace fr::daemon {

// `/`: the live job: ranks and nodes, per-communicator progress, the oldest op in flight, open
// and past incidents. Reloads itself every few seconds.
std::string render_live_page(const CoordinatorStatus& status);

// `/incidents/ID`: `incident` is the incident's entry in the status; `analysis` its analysis.json,
// or null while the dump set is still being gathered or analysed (the page then reloads itself).
std::string render_incident_page(const StatusIncident& incident, const nlohmann::json& analysis);

// The page for an unknown incident id.
std::string render_missing_incident_page(const std::string& id);

}  // namespace fr::daemon
