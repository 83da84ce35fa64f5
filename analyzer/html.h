// The incident page: an fr-analysis/1 document as one self-contained HTML page (inline style and
// SVG, no script, nothing fetched), so `fr-analyze --html FILE` can be mailed or attached to a
// ticket and the coordinator's /incidents/ID serves the very same page. The page is built from
// the JSON alone, like the text view. The pieces the coordinator's live page shares (the style,
// escaping, the communicator label) are declared here too.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "analyzer/result.h"

namespace fr::analyzer {

struct HtmlPage {
  std::string title;    // the browser's title; empty: from the verdict
  std::string heading;  // above the verdict, e.g. "incident 3 · stall · job 42"
  // What made the coordinator open the incident (its first sign, which need not be the verdict's
  // op or culprit): shown below the verdict, labelled as the trigger. Empty: none.
  std::string trigger;
  std::vector<std::pair<std::string, std::string>> links;  // (href, text) in the top bar
  int refresh_s = 0;  // > 0: the page reloads itself (live pages)
};

// Text safe inside HTML elements and attribute values.
std::string html_escape(const std::string& text);

// `name (0x…)`, or the id alone when the communicator has no name: the one way a communicator
// is written everywhere. The second form takes a JSON {"id", "name"} object (frd's status).
std::string comm_label(const CommRef& comm);
std::string comm_label(const nlohmann::json& comm);

// A reduction as the views write it: "reduction not recorded" for what a dump does not record.
std::string redop_text(const std::string& redop);

// "0-3,7": a rank list as people write it.
std::string rank_list_text(std::vector<int> ranks);

// The document's head (title, style, optional refresh) up to and including the top bar.
std::string html_open(const HtmlPage& page);
std::string html_close();

// The incident page: verdict, culprits, timeline, evidence table, stacks, findings, inputs. The
// second form reads a stored fr-analysis/1 document (a page, not an exception, when it is odd).
std::string render_incident_html(const Analysis& analysis, const HtmlPage& page);
std::string render_incident_html(const nlohmann::json& analysis, const HtmlPage& page);

}  // namespace fr::analyzer
