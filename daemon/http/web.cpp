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

double secs(int64_t ns) { return double(ns) / 1e9; }

std::string secs_text(double s) {
  char buf[32];
  if (s >= 120)
    std::snprintf(buf, sizeof buf, "%.0f min %.0f s", s / 60 - 0.5, s - 60 * int(s / 60));
  else
    std::snprintf(buf, sizeof buf, "%.1f s", s);
  return buf;
}

std::string incident_row(const StatusIncident& i) {
  std::ostringstream o;
  const std::string& id = i.id;
  const std::string& verdict = i.verdict;
  o << "<tr><td><a href=\"/incidents/" << html_escape(id) << "\">" << html_escape(id)
    << "</a></td><td>" << html_escape(i.kind) << "</td><td><span class=\"badge"
    << (i.is_open() ? " bad" : "") << "\">" << html_escape(i.state) << "</span></td><td>"
    << html_escape(i.reason) << "</td><td>";
  if (!verdict.empty())
    o << "<span class=\"badge"
      << (fr::analyzer::is_verdict(verdict, fr::analyzer::VerdictKind::kNoHang) ? " ok" : " bad")
      << "\">" << html_escape(verdict) << "</span> " << html_escape(i.summary);
  else
    o << "<span class=\"muted\">" << (i.error.empty() ? "being gathered" : html_escape(i.error))
      << "</span>";
  o << "</td></tr>";
  return o.str();
}

// Pages write communicator ids as the analysis does: 0x and 16 hex digits.
json comm_of(const StatusComm& c) { return {{"id", "0x" + status_hex_id(c.id)}, {"name", c.name}}; }

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
  std::map<uint64_t, CommProgress> comms;
  double oldest_s = 0;
  std::string oldest_where;
};

JobProgress gather(const CoordinatorStatus& s) {
  JobProgress jp;
  auto& comms = jp.comms;
  double& oldest_s = jp.oldest_s;
  std::string& oldest_where = jp.oldest_where;
  for (const auto& n : s.nodes)
    for (const auto& p : n.processes)
      for (const auto& c : p.comms) {
        CommProgress& cp = comms[c.id];
        cp.comm = comm_of(c);
        cp.size = c.size;
        cp.members++;
        cp.min_done = std::min(cp.min_done, c.completed);
        cp.max_done = std::max(cp.max_done, c.completed);
        cp.max_enq = std::max(cp.max_enq, c.enqueued);
        const double age = secs(c.oldest_in_flight_ns);
        if (age > cp.oldest_s) cp.oldest_s = age, cp.oldest_rank = p.rank;
        if (age > oldest_s) {
          oldest_s = age;
          oldest_where = "rank " + std::to_string(p.rank) + " on " +
                         fr::analyzer::comm_label(cp.comm) + " (node " + n.name + ")";
        }
      }
  return jp;
}

// "Job ID", or what the page knows when no node has named the job: without a token (--insecure)
// no node may, and the coordinator's --job-id names it.
std::string job_title(const CoordinatorStatus& s) {
  const std::string& job = s.job_id;
  return job.empty() ? "Job not named yet (give the coordinator --job-id)" : "Job " + job;
}

// The job at a glance: a sentence, the rank and node counts, the oldest op in flight.
void job_card(std::ostringstream& o, const CoordinatorStatus& s, const JobProgress& jp) {
  const StatusRanks& r = s.ranks;
  const StatusNodeCounts& nc = s.node_counts;
  const auto& incidents = s.incidents;
  size_t open = 0;
  for (const auto& i : incidents) open += i.is_open();
  const double oldest_s = jp.oldest_s;
  const std::string& oldest_where = jp.oldest_where;
  o << "<h1>" << html_escape(job_title(s)) << "</h1>";
  const int dead = r.dead;
  // A job whose processes record nothing of ours is not shown as a healthy one: fr is half blind.
  const std::optional<StatusProcesses>& pc = s.processes;
  const bool blind = pc && pc->recording == 0;
  o << "<section class=\"card verdict" << (open || dead || blind ? "" : " ok")
    << "\"><span class=\"kind\">"
    << (open    ? "incident open"
        : dead  ? "ranks dead"
        : blind ? "not recording"
                : "running")
    << "</span><p class=\"sentence\" id=\"job-sentence\">";
  if (open) {
    for (const auto& i : incidents)
      if (i.is_open()) {
        o << "incident " << html_escape(i.id) << ": "
          << html_escape(i.summary.empty() ? i.reason : i.summary);
        break;
      }
  } else if (blind) {
    o << html_escape(pc->summary) << "; no incident open";
  } else {
    o << r.alive << " of " << (r.expected > 0 ? r.expected : r.known) << " ranks alive"
      << (dead ? ", " + std::to_string(dead) + " dead" : std::string()) << ", no incident open";
  }
  o << "</p><div class=\"facts\"><span>ranks <b>" << r.alive << "</b> alive, <b>" << r.dead
    << "</b> dead, <b>" << r.known << "</b> known";
  if (r.expected > 0) o << " of <b>" << r.expected << "</b> expected";
  if (pc)
    o << "</span><span>processes <b>" << pc->total << "</b>, recording NCCL or NIXL <b>"
      << pc->recording << "</b>";
  o << "</span><span>nodes <b>" << nc.connected << "</b> connected, <b>" << nc.lost
    << "</b> lost</span><span>oldest op in flight <b>"
    << (oldest_s > 0 ? html_escape(secs_text(oldest_s)) + "</b> (" + html_escape(oldest_where) + ")"
                     : "none</b>")
    << "</span></div></section>\n";
}

// Open incidents first, then the past ones, newest first.
void incidents_table(std::ostringstream& o, const std::vector<StatusIncident>& incidents) {
  o << "<h2>Incidents</h2><div class=\"card scroll\">";
  if (incidents.empty()) {
    o << "<p class=\"muted\">none so far</p>";
  } else {
    o << "<table class=\"grid\"><thead><tr><th>id</th><th>kind</th><th>state</th><th>reason</th><th>verdict</th>"
         "</tr></thead><tbody>";
    // Open ones first, then the past ones, newest first.
    for (int pass = 0; pass < 2; ++pass)
      for (auto it = incidents.rbegin(); it != incidents.rend(); ++it)
        if (it->is_open() == (pass == 0)) o << incident_row(*it);
    o << "</tbody></table>";
  }
  o << "</div>\n";
}

void comms_table(std::ostringstream& o, const std::map<uint64_t, CommProgress>& comms) {
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
void nodes_table(std::ostringstream& o, const CoordinatorStatus& s) {
  o << "<h2>Nodes and ranks</h2><div class=\"card scroll\"><table class=\"grid\"><thead><tr><th>node</th><th>state</th>"
       "<th>heartbeat</th><th>rank</th><th>pid</th><th>process</th><th>communicators: completed / enqueued</th></tr>"
       "</thead><tbody>";
  size_t rows = 0;
  for (const auto& n : s.nodes) {
    const bool lost = n.lost, connected = n.connected;
    std::string node_cells = "<td>" + html_escape(n.name) + " <span class=\"muted\">" +
                             html_escape(n.host) + "</span></td><td><span class=\"badge" +
                             std::string(lost        ? " bad"
                                         : connected ? " ok"
                                                     : " warn") +
                             "\">" +
                             (lost        ? "lost"
                              : connected ? "connected"
                                          : "away") +
                             "</span></td><td>" + html_escape(secs_text(secs(n.heartbeat_age_ns))) +
                             " ago</td>";
    const auto& procs = n.processes;
    if (procs.empty())
      o << "<tr>" << node_cells << "<td colspan=\"4\" class=\"muted\">no process</td></tr>";
    for (const auto& p : procs) {
      if (++rows > kMaxRankRows) break;
      const bool alive = p.alive;
      o << "<tr" << (!alive && !p.exited_cleanly ? " class=\"culprit\"" : "") << ">" << node_cells
        << "<td>rank " << p.rank << "</td><td>" << p.pid << "</td><td><span class=\"badge"
        << (alive              ? " ok"
            : p.exited_cleanly ? ""
                               : " bad")
        << "\">"
        << (alive              ? "alive"
            : p.exited_cleanly ? "exited"
                               : "dead")
        << "</span></td><td class=\"mono\">";
      for (const auto& c : p.comms) {
        o << html_escape(fr::analyzer::comm_label(comm_of(c)));
        if (c.rank >= 0) o << " <span class=\"muted\">(" << c.rank << ")</span>";
        o << ": " << c.completed << " / " << c.enqueued;
        const double age = secs(c.oldest_in_flight_ns);
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
  if (s.page.next_offset)
    o << "<p class=\"muted\">more nodes: <a href=\"/api/v1/status?offset=" << *s.page.next_offset
      << "\">/api/v1/status?offset=" << *s.page.next_offset << "</a></p>";
  o << "</div>\n";
}

// The ranks, GPUs and links found slow now (the fail-slow detector's findings), each with its
// evidence and what the job loses.
void slow_card(std::ostringstream& o, const CoordinatorStatus& s) {
  if (s.slow.empty()) return;
  o << "<section class=\"card verdict\" id=\"slow-findings\"><span class=\"kind\">slow</span>";
  for (const auto& f : s.slow)
    o << "<p class=\"sentence\">" << html_escape(f.cause) << ": " << html_escape(f.evidence)
      << "</p>";
  o << "</section>\n";
}

}  // namespace

std::string render_live_page(const CoordinatorStatus& s) {
  fr::analyzer::HtmlPage page;
  page.title = "fr: " + job_title(s);
  page.links = {{"/", "live job"}, {"/api/v1/status", "status JSON"}, {"/metrics", "metrics"}};
  page.refresh_s = kRefreshSeconds;
  std::ostringstream o;
  o << fr::analyzer::html_open(page);
  const JobProgress jp = gather(s);
  job_card(o, s, jp);
  slow_card(o, s);
  incidents_table(o, s.incidents);
  comms_table(o, jp.comms);
  nodes_table(o, s);
  o << fr::analyzer::html_close();
  return o.str();
}

std::string render_incident_page(const StatusIncident& incident, const json& analysis) {
  fr::analyzer::HtmlPage page;
  const std::string& id = incident.id;
  page.title = "fr: incident " + id;
  page.heading = id + " · " + incident.kind + " · " + incident.state + " · " + incident.dir;
  page.trigger = incident.reason;
  page.links = {{"/", "live job"}, {"/api/v1/status", "status JSON"}};
  if (!analysis.is_null()) return fr::analyzer::render_incident_html(analysis, page);
  page.refresh_s = 2;
  std::ostringstream o;
  o << fr::analyzer::html_open(page) << "<section class=\"card verdict\"><span class=\"kind\">"
    << html_escape(incident.state) << "</span><p class=\"sentence\" id=\"verdict-sentence\">"
    << (incident.error.empty() ? "the dump set is being gathered and analysed"
                               : html_escape(incident.error))
    << "</p><div class=\"facts\"><span>nodes asked <b>" << incident.asked << "</b>, dumps in <b>"
    << incident.uploaded << "</b>, failed <b>" << incident.failed.size()
    << "</b></span></div></section>"
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
