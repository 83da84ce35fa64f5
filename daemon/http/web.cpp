// See web.h. The live page aggregates the nodes' reports per communicator: how far its slowest and
// fastest members have completed, and how long its oldest op has been in flight.
#include "daemon/http/web.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <sstream>
#include <vector>

#include "analyzer/html.h"
#include "analyzer/verdicts.h"

namespace fr::daemon {

using fr::analyzer::html_escape;
using nlohmann::json;

namespace {

constexpr int kRefreshSeconds = 5;
constexpr size_t kMaxRankRows = 256;

std::string str(const json& j, const char* key) {
  return j.is_object() && j.contains(key) && j[key].is_string() ? j[key].get<std::string>()
                                                                : std::string();
}

std::string secs_text(double s) {
  char buf[32];
  if (s >= 120)
    std::snprintf(buf, sizeof buf, "%.0f min %.0f s", s / 60 - 0.5, s - 60 * int(s / 60));
  else
    std::snprintf(buf, sizeof buf, "%.1f s", s);
  return buf;
}

bool is_open(const json& inc) {
  const std::string s = str(inc, "state");
  return s == "collecting" || s == "analyzing" || s == "open";
}

std::string incident_row(const json& i) {
  std::ostringstream o;
  const std::string id = str(i, "id"), verdict = str(i, "verdict");
  o << "<tr><td><a href=\"/incidents/" << html_escape(id) << "\">" << html_escape(id)
    << "</a></td><td>" << html_escape(str(i, "kind")) << "</td><td><span class=\"badge"
    << (is_open(i) ? " bad" : "") << "\">" << html_escape(str(i, "state")) << "</span></td><td>"
    << html_escape(str(i, "reason")) << "</td><td>";
  if (!verdict.empty())
    o << "<span class=\"badge"
      << (fr::analyzer::is_verdict(verdict, fr::analyzer::VerdictKind::kNoHang) ? " ok" : " bad")
      << "\">" << html_escape(verdict) << "</span> " << html_escape(str(i, "summary"));
  else
    o << "<span class=\"muted\">"
      << (str(i, "error").empty() ? "being gathered" : html_escape(str(i, "error"))) << "</span>";
  o << "</td></tr>";
  return o.str();
}

// frd-status/1 gives communicator ids as bare hex; pages write them as the analysis does.
json comm_of(const json& c) {
  std::string id = str(c, "id");
  if (!id.empty() && id.rfind("0x", 0) != 0) id = "0x" + id;
  return {{"id", id}, {"name", str(c, "name")}};
}

struct CommProgress {
  json comm;  // {"id", "name"} for the label
  int size = -1;
  int members = 0;
  uint64_t min_done = UINT64_MAX, max_done = 0, max_enq = 0;
  double oldest_s = 0;
  int oldest_rank = -1;
};

// Per communicator: progress across its members; and the oldest op in flight anywhere.
struct JobProgress {
  std::map<std::string, CommProgress> comms;
  double oldest_s = 0;
  std::string oldest_where;
};

JobProgress gather(const json& s) {
  JobProgress jp;
  auto& comms = jp.comms;
  double& oldest_s = jp.oldest_s;
  std::string& oldest_where = jp.oldest_where;
  for (const auto& n : s.value("nodes", json::array()))
    for (const auto& p : n.value("processes", json::array()))
      for (const auto& c : p.value("comms", json::array())) {
        CommProgress& cp = comms[str(c, "id")];
        cp.comm = comm_of(c);
        cp.size = c.value("size", -1);
        cp.members++;
        const uint64_t done = c.value("completed", uint64_t(0));
        cp.min_done = std::min(cp.min_done, done);
        cp.max_done = std::max(cp.max_done, done);
        cp.max_enq = std::max(cp.max_enq, c.value("enqueued", uint64_t(0)));
        const double age = c.value("oldest_in_flight_s", 0.0);
        if (age > cp.oldest_s) cp.oldest_s = age, cp.oldest_rank = p.value("rank", -1);
        if (age > oldest_s) {
          oldest_s = age;
          oldest_where = "rank " + std::to_string(p.value("rank", -1)) + " on " +
                         fr::analyzer::comm_label(cp.comm) + " (node " + str(n, "name") + ")";
        }
      }
  return jp;
}

// "Job ID", or what the page knows when no node has named the job: without a token (--insecure)
// no node may, and the coordinator's --job-id names it.
std::string job_title(const json& s) {
  const std::string job = str(s, "job_id");
  return job.empty() ? "Job not named yet (give the coordinator --job-id)" : "Job " + job;
}

// The job at a glance: a sentence, the rank and node counts, the oldest op in flight.
void job_card(std::ostringstream& o, const json& s, const JobProgress& jp) {
  const json& r = s.value("ranks", json::object());
  const json& nc = s.value("node_counts", json::object());
  const json& incidents = s.value("incidents", json::array());
  size_t open = 0;
  for (const auto& i : incidents) open += is_open(i);
  const double oldest_s = jp.oldest_s;
  const std::string& oldest_where = jp.oldest_where;
  o << "<h1>" << html_escape(job_title(s)) << "</h1>";
  const int dead = r.value("dead", 0);
  // A job whose processes record nothing of ours is not shown as a healthy one: fr is half blind.
  const json& pc = s.value("processes", json::object());
  const bool blind = pc.is_object() && pc.value("recording", 0) == 0;
  o << "<section class=\"card verdict" << (open || dead || blind ? "" : " ok")
    << "\"><span class=\"kind\">"
    << (open    ? "incident open"
        : dead  ? "ranks dead"
        : blind ? "not recording"
                : "running")
    << "</span><p class=\"sentence\" id=\"job-sentence\">";
  if (open) {
    for (const auto& i : incidents)
      if (is_open(i)) {
        o << "incident " << html_escape(str(i, "id")) << ": "
          << html_escape(str(i, "summary").empty() ? str(i, "reason") : str(i, "summary"));
        break;
      }
  } else if (blind) {
    o << html_escape(str(pc, "summary")) << "; no incident open";
  } else {
    o << r.value("alive", 0) << " of "
      << (r.value("expected", -1) > 0 ? r.value("expected", -1) : r.value("known", 0))
      << " ranks alive" << (dead ? ", " + std::to_string(dead) + " dead" : std::string())
      << ", no incident open";
  }
  o << "</p><div class=\"facts\"><span>ranks <b>" << r.value("alive", 0) << "</b> alive, <b>"
    << r.value("dead", 0) << "</b> dead, <b>" << r.value("known", 0) << "</b> known";
  if (r.value("expected", -1) > 0) o << " of <b>" << r.value("expected", -1) << "</b> expected";
  if (pc.is_object())
    o << "</span><span>processes <b>" << pc.value("total", 0) << "</b>, recording NCCL or NIXL <b>"
      << pc.value("recording", 0) << "</b>";
  o << "</span><span>nodes <b>" << nc.value("connected", 0) << "</b> connected, <b>"
    << nc.value("lost", 0) << "</b> lost</span><span>oldest op in flight <b>"
    << (oldest_s > 0 ? html_escape(secs_text(oldest_s)) + "</b> (" + html_escape(oldest_where) + ")"
                     : "none</b>")
    << "</span></div></section>\n";
}

// Open incidents first, then the past ones, newest first.
void incidents_table(std::ostringstream& o, const json& incidents) {
  o << "<h2>Incidents</h2><div class=\"card scroll\">";
  if (incidents.empty()) {
    o << "<p class=\"muted\">none so far</p>";
  } else {
    o << "<table class=\"grid\"><thead><tr><th>id</th><th>kind</th><th>state</th><th>reason</th><th>verdict</th>"
         "</tr></thead><tbody>";
    // Open ones first, then the past ones, newest first.
    for (int pass = 0; pass < 2; ++pass)
      for (auto it = incidents.rbegin(); it != incidents.rend(); ++it)
        if (is_open(*it) == (pass == 0)) o << incident_row(*it);
    o << "</tbody></table>";
  }
  o << "</div>\n";
}

void comms_table(std::ostringstream& o, const std::map<std::string, CommProgress>& comms) {
  o << "<h2>Communicators</h2><div class=\"card scroll\">";
  if (comms.empty()) {
    o << "<p class=\"muted\">no communicator reported yet</p>";
  } else {
    o << "<table class=\"grid\"><thead><tr><th>communicator</th><th>members seen</th><th>completed (slowest / "
         "fastest member)</th><th>progress of the slowest</th><th>oldest op in flight</th></tr></thead><tbody>";
    std::vector<const CommProgress*> sorted;
    for (const auto& [id, cp] : comms) sorted.push_back(&cp);
    std::sort(sorted.begin(), sorted.end(), [](const CommProgress* a, const CommProgress* b) {
      return fr::analyzer::comm_label(a->comm) < fr::analyzer::comm_label(b->comm);
    });
    for (const CommProgress* c : sorted) {
      const CommProgress& cp = *c;
      const double frac = cp.max_enq ? double(cp.min_done) / double(cp.max_enq) : 1.0;
      o << "<tr><td class=\"mono\">" << html_escape(fr::analyzer::comm_label(cp.comm))
        << "</td><td>" << cp.members << (cp.size > 0 ? " of " + std::to_string(cp.size) : "")
        << "</td><td>" << cp.min_done << " / " << cp.max_done << " <span class=\"muted\">of "
        << cp.max_enq << " enqueued</span></td><td><div class=\"progress\"><span style=\"width:"
        << int(frac * 100) << "%\"></span></div></td><td>"
        << (cp.oldest_s > 0 ? "<span class=\"badge warn\">" + html_escape(secs_text(cp.oldest_s)) +
                                  "</span> rank " + std::to_string(cp.oldest_rank)
                            : "<span class=\"muted\">-</span>")
        << "</td></tr>";
    }
    o << "</tbody></table>";
  }
  o << "</div>\n";
}

// Every rank, by node, with its communicators' progress.
void nodes_table(std::ostringstream& o, const json& s) {
  o << "<h2>Nodes and ranks</h2><div class=\"card scroll\"><table class=\"grid\"><thead><tr><th>node</th><th>state</th>"
       "<th>heartbeat</th><th>rank</th><th>pid</th><th>process</th><th>communicators: completed / enqueued</th></tr>"
       "</thead><tbody>";
  size_t rows = 0;
  for (const auto& n : s.value("nodes", json::array())) {
    const bool lost = n.value("lost", false), connected = n.value("connected", false);
    std::string node_cells = "<td>" + html_escape(str(n, "name")) + " <span class=\"muted\">" +
                             html_escape(str(n, "host")) + "</span></td><td><span class=\"badge" +
                             std::string(lost        ? " bad"
                                         : connected ? " ok"
                                                     : " warn") +
                             "\">" +
                             (lost        ? "lost"
                              : connected ? "connected"
                                          : "away") +
                             "</span></td><td>" +
                             html_escape(secs_text(n.value("heartbeat_age_s", 0.0))) + " ago</td>";
    const json& procs = n.value("processes", json::array());
    if (procs.empty())
      o << "<tr>" << node_cells << "<td colspan=\"4\" class=\"muted\">no process</td></tr>";
    for (const auto& p : procs) {
      if (++rows > kMaxRankRows) break;
      const bool alive = p.value("alive", false);
      o << "<tr" << (!alive && !p.value("exited_cleanly", false) ? " class=\"culprit\"" : "") << ">"
        << node_cells << "<td>rank " << p.value("rank", -1) << "</td><td>" << p.value("pid", 0)
        << "</td><td><span class=\"badge"
        << (alive                              ? " ok"
            : p.value("exited_cleanly", false) ? ""
                                               : " bad")
        << "\">"
        << (alive                              ? "alive"
            : p.value("exited_cleanly", false) ? "exited"
                                               : "dead")
        << "</span></td><td class=\"mono\">";
      for (const auto& c : p.value("comms", json::array())) {
        o << html_escape(fr::analyzer::comm_label(comm_of(c)));
        if (c.value("rank", -1) >= 0)
          o << " <span class=\"muted\">(" << c.value("rank", -1) << ")</span>";
        o << ": " << c.value("completed", 0) << " / " << c.value("enqueued", 0);
        const double age = c.value("oldest_in_flight_s", 0.0);
        if (age > 0)
          o << " <span class=\"badge warn\">oldest " << html_escape(secs_text(age)) << "</span>";
        o << "<br>";
      }
      o << "</td></tr>";
    }
  }
  o << "</tbody></table>";
  if (rows > kMaxRankRows)
    o << "<p class=\"muted\">" << rows - kMaxRankRows << " more ranks: see /api/v1/status.</p>";
  const json& pg = s.value("page", json::object());
  if (pg.contains("next_offset") && pg["next_offset"].is_number())
    o << "<p class=\"muted\">more nodes: <a href=\"/api/v1/status?offset="
      << pg["next_offset"].get<size_t>()
      << "\">/api/v1/status?offset=" << pg["next_offset"].get<size_t>() << "</a></p>";
  o << "</div>\n";
}

// The ranks, GPUs and links found slow now (the fail-slow detector's findings), each with its
// evidence and what the job loses.
void slow_card(std::ostringstream& o, const json& s) {
  const json& slow = s.value("slow", json::array());
  if (!slow.is_array() || slow.empty()) return;
  o << "<section class=\"card verdict\" id=\"slow-findings\"><span class=\"kind\">slow</span>";
  for (const auto& f : slow) {
    if (!f.is_object()) continue;
    o << "<p class=\"sentence\">" << html_escape(str(f, "cause")) << ": "
      << html_escape(str(f, "evidence")) << "</p>";
  }
  o << "</section>\n";
}

}  // namespace

std::string render_live_page(const json& s) {
  fr::analyzer::HtmlPage page;
  page.title = "fr: " + job_title(s);
  page.links = {{"/", "live job"}, {"/api/v1/status", "status JSON"}, {"/metrics", "metrics"}};
  page.refresh_s = kRefreshSeconds;
  std::ostringstream o;
  o << fr::analyzer::html_open(page);
  const JobProgress jp = gather(s);
  job_card(o, s, jp);
  slow_card(o, s);
  incidents_table(o, s.value("incidents", json::array()));
  comms_table(o, jp.comms);
  nodes_table(o, s);
  o << fr::analyzer::html_close();
  return o.str();
}

std::string render_incident_page(const json& incident, const json& analysis) {
  fr::analyzer::HtmlPage page;
  const std::string id = str(incident, "id");
  page.title = "fr: incident " + id;
  page.heading = id + " · " + str(incident, "kind") + " · " + str(incident, "state") + " · " +
                 str(incident, "dir");
  page.trigger = str(incident, "reason");
  page.links = {{"/", "live job"}, {"/api/v1/status", "status JSON"}};
  if (!analysis.is_null()) return fr::analyzer::render_incident_html(analysis, page);
  page.refresh_s = 2;
  std::ostringstream o;
  o << fr::analyzer::html_open(page) << "<section class=\"card verdict\"><span class=\"kind\">"
    << html_escape(str(incident, "state"))
    << "</span><p class=\"sentence\" id=\"verdict-sentence\">"
    << (str(incident, "error").empty() ? "the dump set is being gathered and analysed"
                                       : html_escape(str(incident, "error")))
    << "</p><div class=\"facts\"><span>nodes asked <b>" << incident.value("asked", 0)
    << "</b>, dumps in <b>" << incident.value("uploaded", 0) << "</b>, failed <b>"
    << incident.value("failed", json::object()).size() << "</b></span></div></section>"
    << "<p class=\"muted\" id=\"trigger\"><b>trigger</b> (what opened the incident): "
    << html_escape(page.trigger) << "</p>" << fr::analyzer::html_close();
  return o.str();
}

std::string render_missing_incident_page(const std::string& id) {
  fr::analyzer::HtmlPage page;
  page.title = "fr: no incident " + id;
  page.links = {{"/", "live job"}};
  return fr::analyzer::html_open(page) +
         "<section class=\"card verdict\"><p class=\"sentence\">no incident " + html_escape(id) +
         "</p></section>" + fr::analyzer::html_close();
}

}  // namespace fr::daemon
