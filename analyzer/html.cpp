// The incident page (see html.h). One pass per part of the page: the verdict card, the timeline
// (an SVG drawn from the verdict's per-rank recent_ops), the evidence table, the stacks, the
// findings and what was read. Long tables are cut with a note: the JSON keeps every row.
#include "analyzer/html.h"

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>

#include "analyzer/analyze.h"
#include "analyzer/verdicts.h"
#include "fr/version.h"
#include "log/json_fields.h"

namespace fr::analyzer {

using nlohmann::json;

namespace {

constexpr size_t kMaxTableRows = 512;
constexpr size_t kMaxTimelineRows = 32;

using fr::log::array_or_empty;
using fr::log::object_or_empty;

// A text of the document, "" when missing (json_fields.h's rules).
std::string str(const json& j, const char* key) { return fr::log::field_or(j, key, std::string()); }

const char* kStyle = R"(
:root{--bg:#f5f6f8;--card:#fff;--ink:#1d2330;--muted:#667085;--line:#dde1e8;--bad:#c62828;
--badbg:#fdecea;--ok:#2e7d32;--okbg:#e8f5e9;--warn:#b26a00;--warnbg:#fff4e0;--accent:#1f4e8c}
*{box-sizing:border-box}
body{margin:0;background:var(--bg);color:var(--ink);font:14px/1.45 system-ui,-apple-system,
"Segoe UI",Roboto,"DejaVu Sans",sans-serif}
header.top{background:#1b2433;color:#fff;padding:10px 24px;display:flex;gap:18px;align-items:center}
header.top .brand{font-weight:700;letter-spacing:.02em}
header.top a{color:#c9d7ee;text-decoration:none}header.top a:hover{text-decoration:underline}
main{max-width:1240px;margin:0 auto;padding:18px 24px 40px}
h1{font-size:22px;margin:4px 0 6px}h2{font-size:16px;margin:26px 0 8px}
.card{background:var(--card);border:1px solid var(--line);border-radius:8px;padding:14px 18px;
margin:12px 0}
.verdict{border-left:6px solid var(--bad)}.verdict.ok{border-left-color:var(--ok)}
.verdict .kind{display:inline-block;font-weight:700;text-transform:uppercase;font-size:12px;
letter-spacing:.05em;color:#fff;background:var(--bad);border-radius:4px;padding:2px 8px}
.verdict.ok .kind{background:var(--ok)}
.sentence{font-size:20px;font-weight:600;margin:8px 0 6px}
.facts{display:flex;flex-wrap:wrap;gap:6px 26px;color:var(--muted)}.facts b{color:var(--ink)}
.muted{color:var(--muted)}.mono,code,pre{font-family:ui-monospace,"DejaVu Sans Mono",Menlo,monospace;font-size:12.5px}
table.grid{border-collapse:collapse;width:100%;background:var(--card)}
table.grid th,table.grid td{text-align:left;padding:5px 9px;border-bottom:1px solid var(--line);
vertical-align:top}
table.grid th{background:#eef1f5;font-weight:600;font-size:12.5px;position:sticky;top:0}
table.grid tr.culprit td{background:var(--badbg)}
table.grid tr.culprit td:first-child{box-shadow:inset 4px 0 0 var(--bad)}
.badge{display:inline-block;border-radius:10px;padding:0 8px;font-size:12px;font-weight:600;
background:#e8ecf2;color:#344054;white-space:nowrap}
.badge.bad{background:var(--badbg);color:var(--bad)}.badge.ok{background:var(--okbg);color:var(--ok)}
.badge.warn{background:var(--warnbg);color:var(--warn)}
.scroll{overflow-x:auto}
.findings li{margin:6px 0}
details{margin:6px 0}summary{cursor:pointer;font-weight:600}
pre.stack{background:#0f1724;color:#dfe7f3;border-radius:6px;padding:10px 12px;overflow-x:auto;margin:6px 0}
pre.stack .fn{color:#ffd580}pre.stack .loc{color:#9ec1ff}pre.stack .mod{color:#8b97a8}
.legend{display:flex;gap:18px;flex-wrap:wrap;color:var(--muted);font-size:12.5px;margin-top:6px}
.sw{display:inline-block;width:14px;height:10px;border-radius:2px;vertical-align:middle;margin-right:5px}
svg.timeline text{font-family:system-ui,"DejaVu Sans",sans-serif}
.progress{background:#e8ecf2;border-radius:4px;height:8px;min-width:80px;overflow:hidden}
.progress>span{display:block;height:8px;background:var(--accent)}
)";

std::string op_label(const json& o, const std::map<int, int>& global_of_local) {
  if (!o.is_object()) return "-";
  std::string s = "#" + std::to_string(o.value("seq", 0ull)) + " " + str(o, "op");
  if (o.contains("dtype")) {
    s += "(" + str(o, "dtype") + " ×" + std::to_string(o.value("count", 0ull));
    if (o.contains("redop")) s += ", " + redop_text(str(o, "redop"));
    auto peer = [&](int local) {
      auto it = global_of_local.find(local);
      return it == global_of_local.end()
                 ? "comm rank " + std::to_string(local)
                 : "rank " + std::to_string(it->second) + " (" + std::to_string(local) + ")";
    };
    if (o.contains("root"))
      s += o.value("root", -1) < 0 ? std::string(", root not recorded")
                                   : ", root " + peer(o.value("root", -1));
    if (o.contains("peer"))
      s += std::string(str(o, "op") == "Send" ? ", to " : ", from ") + peer(o.value("peer", -1));
    s += ")";
  }
  if (o.contains("state")) s += " · " + str(o, "state");
  return s;
}

const json& evidence_of(const Finding& item) {
  static const json empty = json::array();
  return item.evidence.is_array() ? item.evidence : empty;
}

// comm-local rank -> global rank, from an item's evidence rows.
std::map<int, int> global_ranks(const Finding& item) {
  std::map<int, int> out;
  for (const auto& e : evidence_of(item))
    if (e.contains("rank") && e["rank"].is_number_integer() && e.contains("rank_in_comm") &&
        e["rank_in_comm"].is_number_integer())
      out[e["rank_in_comm"].get<int>()] = e["rank"].get<int>();
  return out;
}

std::string rank_cell(const json& e) {
  std::string s = e.contains("rank") && e["rank"].is_number_integer()
                      ? "rank " + std::to_string(e["rank"].get<int>())
                      : "rank ?";
  if (e.contains("rank_in_comm") && e["rank_in_comm"].is_number_integer())
    s += " <span class=\"muted\">(" + std::to_string(e["rank_in_comm"].get<int>()) + ")</span>";
  return s;
}

std::string state_badge(const std::string& state) {
  const char* cls = "";
  if (state.find("dead") != std::string::npos || state == "missing" || state == "not_entered")
    cls = " bad";
  else if (state == "completed")
    cls = " ok";
  else if (state == "enqueued" || state == "started" || state == "in_call" || state == "entered")
    cls = " warn";
  return "<span class=\"badge" + std::string(cls) + "\">" +
         html_escape(state.empty() ? "?" : state) + "</span>";
}

// The op of an evidence row that the verdict is about: the last enqueued one when it is the
// verdict's sequence number, else what the row shows as its furthest point.
const json* stalled_op(const json& e, uint64_t seq) {
  for (const char* k : {"last_enqueued", "last_started", "last_completed"})
    if (e.contains(k) && e[k].is_object() && e[k].value("seq", 0ull) == seq) return &e[k];
  for (const auto& o : array_or_empty(e, "recent_ops"))
    if (o.is_object() && o.value("seq", 0ull) == seq && str(o, "kind") != "api") return &o;
  return nullptr;
}

void verdict_card(std::ostringstream& o, const Finding& v) {
  const std::string kind = verdict_name(v.kind);
  o << "<section class=\"card verdict" << (v.kind == VerdictKind::kNoHang ? " ok" : "")
    << "\" id=\"verdict\">"
    << "<span class=\"kind\">" << html_escape(kind) << "</span>"
    << "<p class=\"sentence\" id=\"verdict-sentence\">" << html_escape(v.summary) << "</p>"
    << "<div class=\"facts\">";
  if (v.comm) {
    o << "<span>communicator <b>" << html_escape(comm_label(*v.comm)) << "</b>, size "
      << v.comm->size << "</span>";
    o << "<span>" << html_escape(v.seq_kind) << " seq <b>" << v.seq << " " << html_escape(v.op)
      << "</b></span>";
  }
  const auto& culprits = v.culprit_ranks;
  if (!culprits.empty())
    o << "<span>culprit rank" << (culprits.size() > 1 ? "s" : "")
      << " <b style=\"color:var(--bad)\">" << html_escape(rank_list_text(culprits))
      << "</b></span>";
  // A NIXL verdict: the transfer, and the remote agent's process by pid (it may have no rank).
  const nlohmann::json nixl = v.details.value("nixl", nlohmann::json());
  if (nixl.is_object()) {
    o << "<span>NIXL <b>" << html_escape(str(nixl, "op")) << " " << nixl.value("bytes", uint64_t{0})
      << " bytes</b> '" << html_escape(str(nixl, "local_agent")) << "' &rarr; '"
      << html_escape(str(nixl, "remote_agent")) << "', " << html_escape(str(nixl, "state")) << ", "
      << html_escape(str(nixl, "status_name")) << "</span>";
    if (!v.culprit_pids.empty()) {
      std::string pids;
      for (int p : v.culprit_pids) pids += (pids.empty() ? "" : ", ") + std::to_string(p);
      o << "<span>remote pid" << (v.culprit_pids.size() > 1 ? "s" : "")
        << " <b style=\"color:var(--bad)\">" << html_escape(pids) << "</b></span>";
    } else {
      o << "<span>the remote agent's process is not in the dump set</span>";
    }
  }
  o << "</div>";
  for (const auto& line : torch_lines(v)) o << "<p class=\"torch\">" << html_escape(line) << "</p>";
  if (v.mismatch) {
    o << "<p>" << html_escape(v.mismatch->field) << " differs:";
    for (const auto& x : v.mismatch->values)
      o << " <span class=\"badge\">" << html_escape(x.value) << " on ranks "
        << html_escape(rank_list_text(x.ranks)) << "</span>";
    o << "</p>";
  }
  o << "</section>\n";
}

std::string fmt_span(double ns) {
  char buf[32];
  const double a = std::fabs(ns);
  if (a >= 1e9)
    std::snprintf(buf, sizeof buf, "%.3g s", ns / 1e9);
  else if (a >= 1e6)
    std::snprintf(buf, sizeof buf, "%.3g ms", ns / 1e6);
  else if (a >= 1e3)
    std::snprintf(buf, sizeof buf, "%.3g µs", ns / 1e3);
  else
    std::snprintf(buf, sizeof buf, "%.0f ns", ns);
  return buf;
}

// Where the timeline's times fall: [t_min, t_max] across plot_w pixels, 0 at t_zero (the first
// enqueue of the verdict's op).
struct TimeScale {
  double t_min = INFINITY, t_max = -INFINITY, t_zero = INFINITY;
  static constexpr int kLabelW = 250, kPlotX = kLabelW + 12, kPlotW = 760, kRowH = 24, kTop = 26;
  double x(double t) const { return kPlotX + (t - t_min) / (t_max - t_min) * kPlotW; }
};

// The verdict's own op in a row's recent ops.
struct StalledOp {
  uint64_t seq;
  std::string kind;
  bool operator()(const json& op) const {
    return op.value("seq", 0ull) == seq && str(op, "kind") == kind;
  }
};

bool pending(const json& op) {
  const std::string s = str(op, "state");
  return str(op, "kind") != "api" && s != "completed" && s != "never_launched";
}

// Round steps along the time axis, 0 at the verdict's op.
void timeline_axis(std::ostringstream& o, const TimeScale& ts, int height) {
  const double span = ts.t_max - ts.t_min;
  double step = std::pow(10.0, std::floor(std::log10(span / 6)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (span / (step * m) <= 8) {
      step *= m;
      break;
    }
  const double first_tick = std::ceil((ts.t_min - ts.t_zero) / step) * step;
  for (double t = first_tick; ts.t_zero + t <= ts.t_max; t += step) {
    if (std::fabs(t) < step / 1e6) t = 0;  // no "-0 ns" from rounding
    const double x = ts.x(ts.t_zero + t);
    o << "<line x1=\"" << x << "\" x2=\"" << x << "\" y1=\"" << TimeScale::kTop - 4 << "\" y2=\""
      << height - 28 << "\" stroke=\"#e3e7ee\"/><text x=\"" << x << "\" y=\"" << height - 12
      << "\" font-size=\"11\" fill=\"#667085\" text-anchor=\"middle\">" << (t > 0 ? "+" : "")
      << html_escape(fmt_span(t)) << "</text>";
  }
}

// One rank's row: its label and state, the in-flight bands, then the host calls over them.
void timeline_row(std::ostringstream& o, const json& e, size_t i, const TimeScale& ts,
                  const StalledOp& is_stalled, int width) {
  const bool culprit = e.value("culprit", false);
  const int row_h = TimeScale::kRowH, y = TimeScale::kTop + int(i) * row_h;
  if (culprit)
    o << "<rect x=\"0\" y=\"" << y << "\" width=\"" << width << "\" height=\"" << row_h
      << "\" fill=\"#fdecea\"/>";
  else if (i % 2)
    o << "<rect x=\"0\" y=\"" << y << "\" width=\"" << width << "\" height=\"" << row_h
      << "\" fill=\"#f8f9fb\"/>";
  std::string label = "rank " + std::to_string(e.value("rank", -1));
  if (e.contains("rank_in_comm")) label += " (" + std::to_string(e.value("rank_in_comm", -1)) + ")";
  o << "<text x=\"8\" y=\"" << y + 16 << "\" font-size=\"12.5\""
    << (culprit ? " fill=\"#c62828\" font-weight=\"700\"" : " fill=\"#1d2330\"") << ">"
    << (culprit ? "▲ " : "") << html_escape(label) << "</text>"
    << "<text x=\"" << TimeScale::kLabelW << "\" y=\"" << y + 16
    << "\" font-size=\"11\" fill=\"#667085\" text-anchor=\"end\">" << html_escape(str(e, "state"))
    << "</text>";
  const double read = e.contains("read_ns") ? e["read_ns"].get<double>() : ts.t_max;
  // In-flight bands first (the verdict's op last, on top: later ops queue behind it), then the
  // host calls over them.
  for (int pass = 0; pass < 2; ++pass)
    for (const auto& op : e["recent_ops"]) {
      if (!op.is_object() || is_stalled(op) != (pass == 1) || !pending(op)) continue;
      const double c = op.value("call_ns", 0.0), end = c + op.value("duration_ns", 0.0);
      if (read <= end) continue;
      o << "<rect x=\"" << ts.x(end) << "\" y=\"" << y + 8 << "\" width=\""
        << std::max(1.0, ts.x(read) - ts.x(end)) << "\" height=\"8\" rx=\"2\" fill=\""
        << (pass ? "#ef9a9a" : "#ffcc80") << "\"><title>"
        << html_escape(op_label(op, {}) + " at " + fmt_span(c - ts.t_zero) +
                       ", in flight until the dump")
        << "</title></rect>";
    }
  for (const auto& op : e["recent_ops"]) {
    if (!op.is_object()) continue;
    const double c = op.value("call_ns", 0.0), end = c + op.value("duration_ns", 0.0);
    const std::string tip = op_label(op, {}) + " at " + fmt_span(c - ts.t_zero);
    o << "<rect x=\"" << ts.x(c) << "\" y=\"" << y + 5 << "\" width=\""
      << std::max(3.0, ts.x(end) - ts.x(c)) << "\" height=\"14\" rx=\"2\" fill=\""
      << (is_stalled(op)             ? "#c62828"
          : str(op, "kind") == "api" ? "#98a2b3"
                                     : "#1f4e8c")
      << "\"><title>" << html_escape(tip) << "</title></rect>";
  }
}

// Every rank's last ops on the verdict's communicator, one row per rank, time across: the host
// call as a solid bar, the time an op stayed in flight up to the dump as a lighter band, the
// verdict's op in red, culprit rows marked.
void timeline(std::ostringstream& o, const Finding& v) {
  std::vector<const json*> rows;
  for (const auto& e : evidence_of(v))
    if (e.is_object() && e.contains("recent_ops") && e["recent_ops"].is_array() &&
        !e["recent_ops"].empty())
      rows.push_back(&e);
  if (rows.empty()) return;
  std::stable_partition(rows.begin(), rows.end(),
                        [](const json* e) { return e->value("culprit", false); });
  const size_t hidden = rows.size() > kMaxTimelineRows ? rows.size() - kMaxTimelineRows : 0;
  rows.resize(rows.size() - hidden);
  const StalledOp is_stalled{v.seq, v.seq_kind == "p2p" ? "p2p" : "coll"};
  TimeScale ts;
  for (const json* e : rows) {
    for (const auto& op : (*e)["recent_ops"]) {
      const double c = op.value("call_ns", 0.0), end = c + op.value("duration_ns", 0.0);
      ts.t_min = std::min(ts.t_min, c);
      ts.t_max = std::max(ts.t_max, end);
      if (is_stalled(op)) ts.t_zero = std::min(ts.t_zero, c);
    }
    if (e->contains("read_ns")) ts.t_max = std::max(ts.t_max, (*e)["read_ns"].get<double>());
  }
  if (!std::isfinite(ts.t_zero)) ts.t_zero = ts.t_min;
  if (!(ts.t_max > ts.t_min)) ts.t_max = ts.t_min + 1e6;
  const int width = TimeScale::kPlotX + TimeScale::kPlotW + 30;
  const int height = TimeScale::kTop + int(rows.size()) * TimeScale::kRowH + 34;
  o << "<h2>Timeline: each rank's last ops on "
    << html_escape(v.comm ? comm_label(*v.comm) : std::string("?"))
    << "</h2><div class=\"card scroll\"><svg class=\"timeline\" xmlns=\"http://www.w3.org/2000/svg\" width=\""
    << width << "\" height=\"" << height << "\" viewBox=\"0 0 " << width << " " << height
    << "\" role=\"img\" aria-label=\"timeline of each rank's last operations\">";
  timeline_axis(o, ts, height);
  o << "<text x=\"" << TimeScale::kPlotX
    << "\" y=\"14\" font-size=\"11\" fill=\"#667085\">time relative to the first enqueue of "
    << html_escape(v.op) << " #" << v.seq << "</text>";
  for (size_t i = 0; i < rows.size(); ++i) timeline_row(o, *rows[i], i, ts, is_stalled, width);
  const double dump_x = ts.x(ts.t_max);
  o << "<line x1=\"" << dump_x << "\" x2=\"" << dump_x << "\" y1=\"" << TimeScale::kTop - 4
    << "\" y2=\"" << height - 28 << "\" stroke=\"#1d2330\" stroke-dasharray=\"3 3\"/><text x=\""
    << dump_x - 4 << "\" y=\"14\" font-size=\"11\" "
    << "fill=\"#1d2330\" text-anchor=\"end\">dump</text></svg>";
  o << "<div class=\"legend\"><span><span class=\"sw\" style=\"background:#1f4e8c\"></span>host call</span>"
       "<span><span class=\"sw\" style=\"background:#ffcc80\"></span>in flight at the dump</span>"
       "<span><span class=\"sw\" style=\"background:#c62828\"></span>the verdict's op ("
    << html_escape(v.op) << " #" << v.seq
    << ")</span><span><span class=\"sw\" style=\"background:#98a2b3\"></span>other API call</span>"
       "<span style=\"color:#c62828;font-weight:700\">▲ culprit</span></div>";
  if (hidden)
    o << "<p class=\"muted\">" << hidden << " more ranks not drawn (the JSON has them all).</p>";
  o << "</div>\n";
}

void evidence_table(std::ostringstream& o, const Finding& item, const char* caption) {
  const json& ev = evidence_of(item);
  if (ev.empty() || !item.comm) return;
  const auto globals = global_ranks(item);
  const uint64_t seq = item.seq;
  o << "<h2>" << caption
    << "</h2><div class=\"card scroll\"><table class=\"grid evidence\"><thead><tr>"
       "<th>rank (in comm)</th><th>host</th><th>state</th><th>"
    << html_escape(item.op) << " #" << seq
    << "</th><th>last enqueued</th><th>last started</th><th>last completed</th></tr></thead><tbody>";
  std::vector<const json*> rows;
  for (const auto& e : ev)
    if (e.is_object()) rows.push_back(&e);
  std::stable_partition(rows.begin(), rows.end(),
                        [](const json* e) { return e->value("culprit", false); });
  size_t shown = 0;
  for (const json* e : rows) {
    if (++shown > kMaxTableRows) break;
    const json* s = stalled_op(*e, seq);
    o << "<tr" << (e->value("culprit", false) ? " class=\"culprit\"" : "") << "><td>"
      << rank_cell(*e) << "</td><td>"
      << html_escape(str(*e, "host").empty() ? "not recorded" : str(*e, "host")) << "</td><td>"
      << state_badge(str(*e, "state")) << "</td><td class=\"mono\">"
      << html_escape(s                                               ? str(*s, "state")
                     : str(*e, "state").rfind("not_entered", 0) == 0 ? "not called"
                                                                     : str(*e, "state"))
      << "</td>";
    for (const char* k : {"last_enqueued", "last_started", "last_completed"})
      o << "<td class=\"mono\">" << html_escape(op_label(e->value(k, json()), globals)) << "</td>";
    o << "</tr>";
  }
  o << "</tbody></table>";
  if (rows.size() > kMaxTableRows)
    o << "<p class=\"muted\">" << rows.size() - kMaxTableRows
      << " more rows: fr-analyze --json has them all.</p>";
  o << "</div>\n";
}

void frames(std::ostringstream& o, const json& fs) {
  o << "<pre class=\"stack\">";
  size_t i = 0;
  for (const auto& f : fs) {
    if (!f.is_object()) continue;
    char num[16];
    std::snprintf(num, sizeof num, "#%-3zu", i++);
    o << num << "<span class=\"fn\">"
      << html_escape(str(f, "function").empty() ? "??" : str(f, "function")) << "</span>";
    if (!str(f, "file").empty()) {
      o << "  <span class=\"loc\">" << html_escape(str(f, "file"));
      if (f.contains("line") && f["line"].is_number_integer() && f["line"].get<int64_t>() > 0)
        o << ":" << f["line"].get<int64_t>();
      o << "</span>";
    }
    if (!str(f, "module").empty())
      o << "  <span class=\"mod\">" << html_escape(str(f, "module")) << "</span>";
    if (!str(f, "kind").empty())
      o << "  <span class=\"mod\">[" << html_escape(str(f, "kind")) << "]</span>";
    o << "\n";
  }
  o << "</pre>";
}

// Stacks: the analysis's groups (ranks that share a stack), else each evidence row's own.
void stacks(std::ostringstream& o, const Analysis& a) {
  const json& groups = array_or_empty(a.context, "stack_groups");
  std::vector<const json*> single;
  for (const auto& e : evidence_of(a.verdict))
    if (e.is_object() && e.contains("stack") && e["stack"].is_array() && !e["stack"].empty())
      single.push_back(&e);
  if (groups.empty() && single.empty()) return;
  o << "<h2>Stacks</h2><div class=\"card\">";
  if (!groups.empty()) {
    size_t i = 0;
    for (const auto& g : groups) {
      std::vector<int> ranks;
      for (const auto& r : g.value("ranks", json::array()))
        if (r.is_number_integer()) ranks.push_back(r.get<int>());
      o << "<details" << (i++ < 3 ? " open" : "") << "><summary>rank"
        << (ranks.size() > 1 ? "s " : " ") << html_escape(rank_list_text(ranks))
        << " <span class=\"muted\">(" << ranks.size() << ")</span></summary>";
      frames(o, g.value("frames", json::array()));
      o << "</details>";
    }
  } else {
    size_t i = 0;
    for (const json* e : single) {
      o << "<details" << (e->value("culprit", false) || i < 2 ? " open" : "") << "><summary>"
        << rank_cell(*e) << "</summary>";
      frames(o, (*e)["stack"]);
      o << "</details>";
      ++i;
    }
  }
  o << "<p class=\"muted\">innermost frame first</p></div>\n";
}

void findings(std::ostringstream& o, const Analysis& a) {
  if (a.findings.empty()) return;
  o << "<h2>Findings (" << a.findings.size() << ")</h2><div class=\"card\"><ul class=\"findings\">";
  for (const auto& f : a.findings) {
    o << "<li><span class=\"badge warn\">" << html_escape(verdict_name(f.kind)) << "</span> ";
    if (f.consequence) o << "<span class=\"badge\">consequence of the verdict</span> ";
    if (f.kind == VerdictKind::kSlow && f.details.contains("slow")) {  // cause and factor first
      const json& sl = f.details["slow"];
      char factor[32];
      std::snprintf(factor, sizeof factor, "%.1fx", sl.value("factor", 0.0));
      o << "<span class=\"badge bad\">" << html_escape(sl.value("cause", std::string("?"))) << " "
        << factor << "</span> ";
    }
    o << html_escape(f.summary);
    o << "</li>";
  }
  o << "</ul></div>\n";
}

void inputs(std::ostringstream& o, const Analysis& a) {
  const Ranks& r = a.ranks;
  const Inputs& in = a.inputs;
  o << "<h2>Ranks and inputs</h2><div class=\"card\"><div class=\"facts\"><span><b>"
    << r.found.size() << "</b> ranks found of <b>" << r.expected << "</b></span>";
  const std::vector<int> none;
  for (const auto& [k, list] :
       {std::pair<const char*, const std::vector<int>*>{"missing", &r.missing},
        {"dead", &r.dead},
        {"exited", r.exited ? &*r.exited : &none}})
    if (!list->empty())
      o << "<span>" << k << " <b>" << html_escape(rank_list_text(*list)) << "</b></span>";
  o << "<span>clock <b>" << html_escape(in.clock.empty() ? "?" : in.clock) << "</b></span></div>";
  if (!in.skipped.empty() || !in.warnings.empty()) {
    o << "<ul>";
    size_t n = 0;
    for (const auto& s : in.skipped)
      if (++n <= 50)
        o << "<li><span class=\"badge bad\">skipped</span> <code>" << html_escape(s.file)
          << "</code>: " << html_escape(s.text) << "</li>";
    for (const auto& w : in.warnings)
      if (++n <= 50)
        o << "<li><span class=\"badge warn\">warning</span> <code>" << html_escape(w.file)
          << "</code>: " << html_escape(w.text) << "</li>";
    if (n > 50) o << "<li class=\"muted\">" << n - 50 << " more</li>";
    o << "</ul>";
  }
  o << "</div>\n";
}

// A document this renderer does not understand (hand-made, or from a newer writer): say so.
std::string malformed(const std::string& summary, const std::string& why) {
  return "<section class=\"card verdict\"><p class=\"sentence\" id=\"verdict-sentence\">" +
         html_escape(summary.empty() ? "the analysis document cannot be shown" : summary) +
         "</p><p class=\"muted\">" + html_escape("malformed analysis document: " + why) +
         "</p></section>";
}

}  // namespace

std::string html_escape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string comm_label(const CommRef& comm) {
  if (comm.name.empty()) return comm.id.empty() ? "?" : comm.id;
  return comm.id.empty() ? comm.name : comm.name + " (" + comm.id + ")";
}

std::string comm_label(const json& comm) {
  return comm_label(CommRef{str(comm, "id"), str(comm, "name"), -1});
}

std::string rank_list_text(std::vector<int> r) {
  std::sort(r.begin(), r.end());
  r.erase(std::unique(r.begin(), r.end()), r.end());
  std::string out;
  for (size_t i = 0; i < r.size();) {
    size_t j = i;
    while (j + 1 < r.size() && r[j + 1] == r[j] + 1) ++j;
    if (!out.empty()) out += ",";
    out += std::to_string(r[i]);
    if (j > i) out += (j == i + 1 ? "," : "-") + std::to_string(r[j]);
    i = j + 1;
  }
  return out;
}

std::string redop_text(const std::string& redop) {
  return redop == "not recorded" ? "reduction not recorded" : redop;
}

std::string html_open(const HtmlPage& page) {
  std::ostringstream o;
  o << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
       "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">";
  if (page.refresh_s > 0) o << "<meta http-equiv=\"refresh\" content=\"" << page.refresh_s << "\">";
  o << "<title>" << html_escape(page.title) << "</title><style>" << kStyle
    << "</style></head><body>"
    << "<header class=\"top\"><span class=\"brand\">fr · flight recorder</span>";
  for (const auto& [href, text] : page.links)
    o << "<a href=\"" << html_escape(href) << "\">" << html_escape(text) << "</a>";
  o << "</header><main>";
  if (!page.heading.empty()) o << "<div class=\"muted\">" << html_escape(page.heading) << "</div>";
  return o.str();
}

std::string html_close() {
  return "<p class=\"muted\" style=\"margin-top:30px\">fr " FR_VERSION
         "</p></main></body></html>\n";
}

std::string render_incident_html(const Analysis& a, const HtmlPage& page_in) {
  HtmlPage page = page_in;
  if (page.title.empty()) page.title = std::string("fr: ") + verdict_name(a.verdict.kind);
  std::ostringstream o;
  o << html_open(page);
  std::ostringstream body;
  try {
    if (const std::string mixed = mixed_jobs_text(a.inputs); !mixed.empty())
      body
          << "<section class=\"card\" id=\"mixed-jobs\"><span class=\"badge bad\">mixed jobs</span> "
          << html_escape(mixed) << "</section>\n";
    verdict_card(body, a.verdict);
    if (!page.trigger.empty())
      body << "<p class=\"muted\" id=\"trigger\"><b>trigger</b> (what opened the incident): "
           << html_escape(page.trigger) << "</p>\n";
    timeline(body, a.verdict);
    evidence_table(body, a.verdict, "Evidence: every member at the verdict's op");
    stacks(body, a);
    findings(body, a);
    inputs(body, a);
    o << body.str();
  } catch (const std::exception& e) {
    o << malformed(a.verdict.summary, e.what());
  }
  o << html_close();
  return o.str();
}

std::string render_incident_html(const json& doc, const HtmlPage& page) {
  const json& v = object_or_empty(doc, "verdict");
  if (v.empty()) {
    HtmlPage empty = page;
    if (empty.title.empty()) empty.title = "fr: no analysis";
    return html_open(empty) +
           "<section class=\"card verdict\"><p class=\"sentence\" id=\"verdict-sentence\">no analysis</p></section>" +
           html_close();
  }
  try {
    return render_incident_html(Analysis::from_json(doc), page);
  } catch (const std::exception& e) {
    HtmlPage odd = page;
    if (odd.title.empty())
      odd.title = "fr: " + (str(v, "kind").empty() ? std::string("no analysis") : str(v, "kind"));
    return html_open(odd) + malformed(str(v, "summary"), e.what()) + html_close();
  }
}

}  // namespace fr::analyzer
