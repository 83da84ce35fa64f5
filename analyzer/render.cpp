// The text view of an fr-analysis/1 document: the verdict sentence first, then per stalled
// communicator a compact table (ranks that look the same share a row), then findings, skipped
// files and remarks on files that were read. Works from the JSON alone, so the coordinator's
// report.txt and the CLI print the same.
#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <sstream>

#include "analyzer/analyze.h"
#include "analyzer/html.h"
#include "analyzer/model.h"
#include "analyzer/verdicts.h"
#include "log/json_fields.h"

namespace fr::analyzer {
namespace {

using nlohmann::json;

struct Style {
  bool on;
  std::string red() const { return on ? "\033[1;31m" : ""; }
  std::string green() const { return on ? "\033[1;32m" : ""; }
  std::string yellow() const { return on ? "\033[33m" : ""; }
  std::string bold() const { return on ? "\033[1m" : ""; }
  std::string dim() const { return on ? "\033[2m" : ""; }
  std::string reset() const { return on ? "\033[0m" : ""; }
};

std::string ranks_text(const std::vector<int>& r) { return rank_list_text(r); }

const json& evidence_of(const Finding& item) {
  static const json empty = json::array();
  return item.evidence.is_array() ? item.evidence : empty;
}

// comm-local rank -> global rank, from an item's evidence rows.
using GlobalOf = std::map<int, int>;
GlobalOf global_ranks(const Finding& item) {
  GlobalOf out;
  for (const auto& e : evidence_of(item))
    if (e.contains("rank") && e["rank"].is_number_integer() && e.contains("rank_in_comm") &&
        e["rank_in_comm"].is_number_integer())
      out[e["rank_in_comm"].get<int>()] = e["rank"].get<int>();
  return out;
}

// A peer or root as a global rank, its comm-local rank in parentheses.
std::string peer_text(int local, const GlobalOf& global) {
  auto it = global.find(local);
  return it == global.end()
             ? "comm rank " + std::to_string(local)
             : "rank " + std::to_string(it->second) + " (" + std::to_string(local) + ")";
}

std::string op_text(const json& o, const GlobalOf& global) {
  if (o.is_null()) return "-";
  std::string s =
      "#" + std::to_string(o.value("seq", 0ull)) + " " + o.value("op", std::string("?"));
  if (o.contains("dtype")) {
    s += "(" + o.value("dtype", std::string()) + " x" + std::to_string(o.value("count", 0ull));
    if (o.contains("redop")) s += ", " + redop_text(o.value("redop", std::string()));
    if (o.contains("root"))
      s += o.value("root", -1) < 0 ? std::string(", root not recorded")
                                   : ", root " + peer_text(o.value("root", -1), global);
    if (o.contains("peer"))
      s += std::string(o.value("op", std::string()) == "Send" ? ", to " : ", from ") +
           peer_text(o.value("peer", -1), global);
    s += ")";
  }
  return s;
}

// The state of the item's own op (its sequence number) on one rank: what that record says.
std::string stalled_state(const json& e, uint64_t seq) {
  for (const char* k : {"last_enqueued", "last_started", "last_completed"}) {
    const json& o = e.value(k, json());
    if (o.is_object() && o.value("seq", 0ull) == seq) return o.value("state", std::string("?"));
  }
  for (const auto& o : e.value("recent_ops", json::array()))
    if (o.is_object() && o.value("seq", 0ull) == seq && o.value("kind", std::string()) != "api")
      return o.value("state", std::string("?"));
  // No record of it left: what the member's frontier says.
  const std::string st = e.value("state", std::string());
  return st.rfind("not_entered", 0) == 0 ? "not called" : st;
}

// A slow finding's rows: how often each rank was late, ranks with the same share merged.
void slow_table(std::ostringstream& out, const json& ev, const Style& st) {
  std::map<int, std::vector<int>, std::greater<int>> by_pct;
  for (const auto& e : ev)
    if (e.is_object() && e.contains("rank") && e["rank"].is_number_integer())
      by_pct[int(std::lround(100 * e.value("late_share", 0.0)))].push_back(e["rank"].get<int>());
  out << "  " << st.dim() << "late at (share of the collectives):" << st.reset();
  for (const auto& [pct, ranks] : by_pct)
    out << (ranks.size() > 1 ? " ranks " : " rank ") << rank_list_text(ranks) << " " << pct << "%;";
  out << "\n";
}

void table(std::ostringstream& out, const Finding& item, const Style& st) {
  const json& ev = evidence_of(item);
  if (ev.empty() || !item.comm) return;
  if (item.kind == VerdictKind::kSlow) return slow_table(out, ev, st);
  // Rows that read the same are merged: the culprits stand out in a few lines even at 4,096 ranks.
  const GlobalOf global = global_ranks(item);
  const uint64_t seq = item.seq;
  // The item's own op, whose state each row shows first.
  const std::string own = item.op + " #" + std::to_string(seq);
  std::map<std::string, std::vector<int>> rows;
  std::map<std::string, bool> culprit_row;
  std::vector<std::string> order;
  std::string tail_note;
  for (const auto& e : ev) {
    std::string key;
    if (e.value("state", std::string()) == "missing") {
      key = "missing | no dump";
    } else {
      key = e.value("state", std::string("?")) + " | " +
            (own.empty() ? "" : own + ": " + stalled_state(e, seq) + " | ") + "enq " +
            op_text(e.value("last_enqueued", json()), global) + " | started " +
            op_text(e.value("last_started", json()), global) + " | done " +
            op_text(e.value("last_completed", json()), global);
    }
    int r = e["rank"].is_number() ? e["rank"].get<int>() : -1 - e.value("rank_in_comm", 0);
    // Culprits and the rest never share a row, so the star marks culprits only. The first byte
    // of the key says which, and is not printed.
    const bool culprit = e.value("culprit", false);
    key = (culprit ? "*" : " ") + key;
    if (!rows.count(key)) order.push_back(key);
    rows[key].push_back(r);
    if (culprit) culprit_row[key] = true;
  }
  out << "  " << st.dim() << "ranks: state | " << (own.empty() ? "" : own + " | ")
      << "last enqueued | last started | last completed" << st.reset() << "\n";
  // Culprits first, then the rest; a long table is cut (the JSON has every row).
  std::stable_partition(order.begin(), order.end(),
                        [&](const std::string& k) { return culprit_row[k]; });
  const size_t limit = 12;
  if (order.size() > limit) {
    size_t hidden_ranks = 0;
    for (size_t i = limit; i < order.size(); ++i) hidden_ranks += rows[order[i]].size();
    const size_t hidden_rows = order.size() - limit;
    order.resize(limit);
    order.push_back("");
    rows[""] = {};
    culprit_row[""] = false;
    tail_note = "  " + st.dim() + "  ... " + std::to_string(hidden_rows) + " more rows (" +
                std::to_string(hidden_ranks) + " ranks); --json or --rank for all" + st.reset() +
                "\n";
  }
  for (const auto& k : order) {
    if (k.empty()) {
      out << tail_note;
      continue;
    }
    std::vector<int> global, local;
    for (int r : rows[k]) (r >= 0 ? global : local).push_back(r >= 0 ? r : -1 - r);
    std::string who = global.empty() ? "" : ranks_text(global);
    if (!local.empty())
      who += std::string(who.empty() ? "" : ",") + "comm rank " + ranks_text(local);
    const bool c = culprit_row[k];
    out << "  " << (c ? st.red() : "") << (c ? "* " : "  ") << who << ": " << k.substr(1)
        << (c ? st.reset() : "") << "\n";
  }
}

// What the culprits were doing, the ranks whose stacks differ from the rest, and GPU problems.
void stacks_and_gpus(std::ostringstream& out, const Analysis& a, const Style& st) {
  const Finding& v = a.verdict;
  const std::vector<int>& culprits = v.culprit_ranks;
  size_t shown = 0;
  for (const auto& e : evidence_of(v)) {
    if (!e.is_object() || !e.contains("rank") || !e["rank"].is_number_integer()) continue;
    const int r = e["rank"].get<int>();
    if (std::find(culprits.begin(), culprits.end(), r) == culprits.end() || shown >= 8) continue;
    if (e.contains("stack")) {
      out << "  rank " << r << " is in " << st.bold() << stack_line(e["stack"]) << st.reset()
          << "\n";
      ++shown;
    } else if (e.contains("stack_error")) {
      out << "  rank " << r << ": no stack (" << e["stack_error"].get<std::string>() << ")\n";
      ++shown;
    }
  }
  const json groups = a.context.value("stack_groups", json::array());
  if (groups.size() > 1) {
    const bool most = groups[0]["ranks"].size() > groups[1]["ranks"].size();
    out << "  stacks: " << groups.size() << " groups; " << (most ? "most ranks (" : "ranks (")
        << ranks_text(groups[0]["ranks"].get<std::vector<int>>()) << ") are in "
        << stack_line(groups[0]["frames"]) << "\n";
    size_t n = 0;
    for (const auto& g : groups) {
      if (!g.value("outlier", false) || ++n > 6) continue;
      out << "  " << st.yellow() << "outlier" << st.reset() << " ranks "
          << ranks_text(g["ranks"].get<std::vector<int>>()) << " are in " << stack_line(g["frames"])
          << "\n";
    }
  }
  for (const auto& p : v.details.value("gpu_problems", json::array()))
    out << "  " << st.red() << p.value("summary", std::string()) << st.reset() << "\n";
}

// A NIXL verdict's transfer, its posting process and its remote agent's process, with what that
// one was doing (its stack when the dump has one).
void nixl_block(std::ostringstream& out, const Finding& v, const Style& st) {
  const json x = v.details.value("nixl", json());
  if (!x.is_object()) return;
  auto s = [](const json& j, const char* k) { return fr::log::field_or(j, k, std::string("?")); };
  out << "  transfer: " << s(x, "op") << " " << x.value("bytes", uint64_t{0}) << " bytes, "
      << x.value("descs", 0u) << " descs, backend " << s(x, "backend") << ", agent '"
      << s(x, "local_agent") << "' -> '" << s(x, "remote_agent") << "', state " << s(x, "state")
      << ", last status " << s(x, "status_name") << ", posts " << x.value("posts", uint64_t{0});
  if (x.contains("notif"))
    out << ", notif '" << s(x, "notif") << "'" << (x.value("notif_cut", false) ? " (cut)" : "");
  out << "\n";
  if (x.value("transfers_to_remote", 1) > 1)
    out << "  " << x.value("transfers_to_remote", 1) << " transfers to this agent, from "
        << x.value("posting_processes", 1) << " process(es)\n";
  for (const auto& e : evidence_of(v)) {
    if (!e.is_object()) continue;
    const bool remote = e.value("role", std::string()) == "remote";
    out << "  " << (remote ? st.red() + "* remote " : "  posted by ")
        << (e["rank"].is_number() ? "rank " + std::to_string(e["rank"].get<int>()) + " "
                                  : std::string())
        << "pid " << e.value("pid", 0) << " on " << s(e, "host") << ": " << s(e, "state");
    if (e.contains("silent_ns"))
      out << ", silent for " << e["silent_ns"].get<int64_t>() / 1'000'000 << " ms";
    if (remote && e.value("found_by", std::string()) == "only_unnamed_nixl_process")
      out << " (probably: the only unnamed NIXL process)";
    out << (remote ? st.reset() : "") << "\n";
    if (remote && e.contains("stack"))
      out << "    is in " << st.bold() << stack_line(e["stack"]) << st.reset() << "\n";
  }
  if (!x.value("remote", json::object()).value("found", true))
    out << "  the remote agent's process is not in the dump set\n";
  if (!v.culprit_pids.empty()) {
    out << "  culprit pids:";
    for (int p : v.culprit_pids) out << " " << p;
    out << "\n";
  }
}

// The verdict: its sentence, where it stands, its culprits, the mismatch, its table.
void verdict_block(std::ostringstream& out, const Finding& v, const Style& st) {
  const std::string kind = verdict_name(v.kind);
  const bool ok = v.kind == VerdictKind::kNoHang;
  out << (ok ? st.green() : st.red()) << "verdict: " << kind << st.reset() << " - " << st.bold()
      << v.summary << st.reset() << "\n";
  if (v.comm) {
    const CommRef& c = *v.comm;
    out << "  comm " << (c.name.empty() ? c.id : c.name + " (" + c.id + ")") << " size " << c.size
        << ", " << v.seq_kind << " seq " << v.seq << " " << v.op << "\n";
  }
  if (!v.culprit_ranks.empty()) out << "  culprit ranks: " << ranks_text(v.culprit_ranks) << "\n";
  for (const auto& line : torch_lines(v)) out << "  " << line << "\n";
  if (v.mismatch) {
    out << "  " << v.mismatch->field << " values:";
    for (const auto& x : v.mismatch->values)
      out << " " << x.value << " on " << ranks_text(x.ranks) << ";";
    out << "\n";
  }
  table(out, v, st);
  nixl_block(out, v, st);
}

// Ranks found, missing and dead; skipped files; remarks on the files read.
void inputs_block(std::ostringstream& out, const Analysis& a, const Style& st) {
  const Ranks& r = a.ranks;
  out << "\nranks: " << r.found.size() << " found of " << r.expected;
  if (!r.missing.empty()) out << ", missing " << ranks_text(r.missing);
  if (!r.dead.empty()) out << ", dead " << ranks_text(r.dead);
  out << "; clock " << (a.complete ? a.inputs.clock : "?") << "\n";
  for (const auto& s : a.inputs.skipped)
    out << st.yellow() << "skipped " << s.file << ": " << s.text << st.reset() << "\n";
  // Files that were read and analysed, with remarks: one line per distinct remark, naming the
  // first file and how many more share it (a thousand ranks often say the same thing).
  std::vector<std::pair<std::string, std::vector<std::string>>> notes;
  std::map<std::string, size_t> note_index;
  for (const auto& w : a.inputs.warnings) {
    auto [it, fresh] = note_index.emplace(w.text, notes.size());
    if (fresh) notes.push_back({w.text, {}});
    notes[it->second].second.push_back(w.file);
  }
  for (const auto& [msg, files] : notes) {
    out << "warning (read, analysed) " << files.front();
    if (files.size() > 1)
      out << " and " << files.size() - 1 << " more file" << (files.size() > 2 ? "s" : "");
    out << ": " << msg << "\n";
  }
}

}  // namespace

// Text names and values that came from dumps and peers (process-group descriptions, dtypes, file
// names, stack frames) may hold any byte. Every control byte but the line ends this view writes
// is shown as \xNN, so a hostile dump cannot retitle the terminal, move the cursor or overwrite
// the verdict line (CR, ESC, BEL...). With color on, the view's own styles pass: exactly the
// sequences Style writes, none of which hides or moves text.
std::string terminal_safe(const std::string& text, bool color) {
  static const char* const kStyles[] = {"\033[1;31m", "\033[1;32m", "\033[33m",
                                        "\033[1m",    "\033[2m",    "\033[0m"};
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c == '\n' || (c >= 0x20 && c != 0x7f)) {
      out += char(c);
      continue;
    }
    if (c == 0x1b && color) {
      const char* style = nullptr;
      for (const char* s : kStyles)
        if (text.compare(i, std::char_traits<char>::length(s), s) == 0) style = s;
      if (style) {
        const size_t n = std::char_traits<char>::length(style);
        out.append(text, i, n);
        i += n - 1;
        continue;
      }
    }
    static const char kHex[] = "0123456789abcdef";
    out += "\\x";
    out += kHex[c >> 4];
    out += kHex[c & 0xf];
  }
  return out;
}

std::string mixed_jobs_text(const Inputs& in) {
  if (in.other_jobs.empty()) return "";
  std::string others;
  for (const auto& o : in.other_jobs)
    others += (others.empty() ? "'" : ", '") + o.job_id + "' (" + std::to_string(o.files) +
              (o.files == 1 ? " file)" : " files)");
  return "this dump set mixes " + std::to_string(in.other_jobs.size() + 1) +
         " jobs: the verdict is about job '" + in.job_id + "' alone; left out: " + others +
         " (analyse each job's dumps on their own)";
}

std::string render_text(const Analysis& a, bool color) {
  Style st{color};
  std::ostringstream out;
  if (const std::string mixed = mixed_jobs_text(a.inputs); !mixed.empty())
    out << st.red() << "MIXED JOBS: " << st.reset() << st.bold() << mixed << st.reset() << "\n\n";
  verdict_block(out, a.verdict, st);
  stacks_and_gpus(out, a, st);
  if (!a.findings.empty()) {
    out << "\n" << st.bold() << "findings (" << a.findings.size() << "):" << st.reset() << "\n";
    size_t shown = 0;
    for (const auto& f : a.findings) {
      out << st.yellow() << "- " << verdict_name(f.kind) << st.reset()
          << (f.consequence ? " (consequence of the verdict)" : "") << ": " << f.summary << "\n";
      // Tables for the first few only; the JSON has them all.
      if (++shown <= 4) table(out, f, st);
    }
  }
  inputs_block(out, a, st);
  return terminal_safe(out.str(), color);
}

std::string render_text(const json& a, bool color) {
  if (!a.is_object() || !a.contains("verdict")) return "no analysis\n";
  return render_text(Analysis::from_json(a), color);
}

}  // namespace fr::analyzer
