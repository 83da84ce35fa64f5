// What every rank was doing at the dump and how its GPU was, from the dump set's side files
// (fr-stacks/1, fr-gpu/1; docs/dump-set.md), joined into the analysis after the verdict is made:
//   - `stack` on each evidence entry of the verdict and the findings: the rank's main thread,
//     frames innermost first;
//   - `stack_groups`: ranks whose main threads stand in the same frames, largest group first, the
//     smaller ones flagged `outlier` (the rank doing something else is usually the story);
//   - `gpus`: every GPU with the ranks running on it (joined through PIDs, per host), and on the
//     verdict `gpu_problems`, one sentence per problem on a rank's GPU.
// The stacks never change the verdict: they explain it.
#include <algorithm>
#include <ctime>
#include <map>
#include <set>

#include "analyzer/html.h"
#include "analyzer/model.h"
#include "passes.h"

namespace fr::analyzer {
namespace {

using fr::log::GpuHealth;
using fr::log::StackFrame;
using fr::log::ThreadStack;
using nlohmann::json;

const ThreadStack* main_thread(const Proc& p) {
  if (!p.has_stacks) return nullptr;
  for (const auto& t : p.stacks.threads)
    if (t.tid == p.stacks.pid && !t.frames.empty()) return &t;
  for (const auto& t : p.stacks.threads)
    if (!t.frames.empty()) return &t;
  return nullptr;
}

json frames_json(const std::vector<StackFrame>& frames) {
  json out = json::array();
  for (const auto& f : frames)
    out.push_back({{"function", f.function},
                   {"file", f.file},
                   {"line", f.line},
                   {"module", f.module},
                   {"kind", f.kind}});
  return out;
}

// What makes two stacks "the same": the functions (or the module where no symbol is known), not
// the addresses, which differ per process.
std::string signature(const std::vector<StackFrame>& frames) {
  std::string s;
  for (const auto& f : frames) {
    // An unsymbolized frame (py-spy names it by its address) counts by its module.
    const bool unnamed = f.function.empty() || f.function.rfind("0x", 0) == 0;
    s += (unnamed ? "?" + f.module : f.function) + "\n";
  }
  return s;
}

std::string time_of_day(int64_t ns) {
  time_t t = time_t(ns / 1'000'000'000);
  struct tm tm;
  gmtime_r(&t, &tm);
  char b[32];
  std::strftime(b, sizeof b, "%H:%M:%S", &tm);
  return b;
}

// The problems worth a sentence, each "reported Xid 79 at 12:03:11", "NVLink 2 down", ...
std::vector<std::string> gpu_problems(const GpuHealth& g) {
  std::vector<std::string> out;
  for (const auto& x : g.xids)
    out.push_back("reported Xid " + std::to_string(x.xid) + " at " + time_of_day(x.time_ns) +
                  " UTC");
  if (g.ecc_volatile_uncorrected > 0)
    out.push_back("has " + std::to_string(g.ecc_volatile_uncorrected) +
                  " uncorrected ECC error(s)");
  if (g.remapped_rows_pending > 0) out.push_back("has a row remap pending (needs a reset)");
  if (g.remapped_rows_failed > 0) out.push_back("failed a row remap");
  if (g.retired_pages_pending > 0) out.push_back("has a page retirement pending (needs a reset)");
  for (const auto& l : g.nvlinks)
    if (!l.active) out.push_back("has NVLink " + std::to_string(l.link) + " down");
  for (const auto& t : g.throttle_names)
    if (t == "HwSlowdown" || t == "HwThermalSlowdown" || t == "HwPowerBrakeSlowdown")
      out.push_back("is throttled (" + t + ")");
  return out;
}

void add_stacks(const Model& m, Finding& item) {
  if (!item.evidence.is_array()) return;
  for (auto& e : item.evidence) {
    if (!e.is_object() || !e.contains("rank") || !e["rank"].is_number_integer()) continue;
    const int rank = e["rank"].get<int>();
    auto it = std::lower_bound(m.procs.begin(), m.procs.end(), rank,
                               [](const Proc& p, int r) { return p.rank < r; });
    if (it == m.procs.end() || it->rank != rank || !it->has_stacks) continue;
    if (const ThreadStack* t = main_thread(*it))
      e["stack"] = frames_json(t->frames);
    else if (!it->stacks.error.empty())
      e["stack_error"] = it->stacks.error;
    if (!it->stacks.python_error.empty()) e["python_stack_error"] = it->stacks.python_error;
  }
}

// Stack groups over every rank with a main-thread stack.
void add_stack_groups(const Model& m, json* context) {
  std::map<std::string, std::vector<int>> by_sig;
  std::map<std::string, const ThreadStack*> example;
  std::vector<json> unavailable;
  for (const auto& p : m.procs) {
    if (!p.has_stacks) continue;
    const ThreadStack* t = main_thread(p);
    if (!t) {
      unavailable.push_back({{"rank", p.rank},
                             {"pid", p.pid},
                             {"error", p.stacks.error.empty() ? "no frames" : p.stacks.error}});
      continue;
    }
    std::string sig = signature(t->frames);
    by_sig[sig].push_back(p.rank);
    example.emplace(sig, t);
  }
  std::vector<std::pair<std::string, std::vector<int>>> groups(by_sig.begin(), by_sig.end());
  std::stable_sort(groups.begin(), groups.end(), [](const auto& a, const auto& b) {
    return a.second.size() != b.second.size() ? a.second.size() > b.second.size()
                                              : a.second.front() < b.second.front();
  });
  json sg = json::array();
  for (size_t i = 0; i < groups.size(); ++i) {
    const bool outlier =
        groups.size() > 1 && groups[i].second.size() < groups.front().second.size();
    sg.push_back({{"ranks", groups[i].second},
                  {"frames", frames_json(example[groups[i].first]->frames)},
                  {"outlier", outlier}});
  }
  if (!sg.empty() || !unavailable.empty()) {
    (*context)["stack_groups"] = sg;
    if (!unavailable.empty()) (*context)["stacks_unavailable"] = unavailable;
  }
}

// One GPU of a node: what NVML said, with the ranks running on it.
json gpu_json(const std::string& node, const GpuHealth& g, const std::vector<int>& ranks,
              const std::vector<std::string>& problems) {
  json gj = {{"node", node},   {"index", g.index}, {"pci_bus_id", g.pci_bus_id}, {"uuid", g.uuid},
             {"ranks", ranks}, {"pids", g.pids},   {"problems", problems}};
  json xids = json::array();
  for (const auto& x : g.xids) xids.push_back({{"xid", x.xid}, {"time_ns", x.time_ns}});
  gj["xids"] = xids;
  auto put = [&](const char* k, int64_t v) {
    if (v >= 0) gj[k] = v;
  };
  put("temperature_c", g.temperature_c);
  put("power_mw", g.power_mw);
  put("ecc_volatile_uncorrected", g.ecc_volatile_uncorrected);
  put("ecc_volatile_corrected", g.ecc_volatile_corrected);
  put("remapped_rows_pending", g.remapped_rows_pending);
  put("retired_pages_pending", g.retired_pages_pending);
  put("pcie_replays", g.pcie_replays);
  gj["throttle"] = g.throttle_names;
  return gj;
}

// "rank 3's GPU 0000:…", "the GPU 0000:… of ranks 2,3" or "GPU 0000:… on node".
std::string gpu_owner(const std::string& node, const GpuHealth& g, const std::vector<int>& ranks) {
  if (ranks.empty()) return "GPU " + g.pci_bus_id + " on " + node;
  if (ranks.size() == 1) return "rank " + std::to_string(ranks[0]) + "'s GPU " + g.pci_bus_id;
  std::string s;
  for (int r : ranks) s += (s.empty() ? "" : ",") + std::to_string(r);
  return "the GPU " + g.pci_bus_id + " of ranks " + s;
}

// GPUs, joined to ranks through the PIDs running on them (PIDs are per host). NVML reports the
// host's PIDs; a rank in a container (its own PID namespace) recorded the pid it sees itself as,
// which the node daemon read from /proc/PID/status NSpid (own_pids): either one joins.
void add_gpus(const Model& m, Analysis* a) {
  if (m.gpus.empty()) return;
  Finding& verdict = a->verdict;
  std::map<std::pair<std::string, int>, int> rank_of;  // (host, pid) -> rank
  for (const auto& p : m.procs) rank_of[{p.host, p.pid}] = p.rank;
  json gpus = json::array(), problems = json::array(), nodes_without = json::array();
  const std::set<int> culprits(verdict.culprit_ranks.begin(), verdict.culprit_ranks.end());
  std::vector<json> culprit_first, others;
  for (const auto& node : m.gpus) {
    if (!node.error.empty()) nodes_without.push_back({{"node", node.node}, {"error", node.error}});
    for (const auto& g : node.gpus) {
      std::vector<int> ranks;
      for (size_t k = 0; k < g.pids.size(); ++k) {
        auto it = rank_of.find({node.node, g.pids[k]});
        if (it == rank_of.end() && k < g.own_pids.size() && g.own_pids[k] > 0)
          it = rank_of.find({node.node, g.own_pids[k]});
        if (it != rank_of.end()) ranks.push_back(it->second);
      }
      std::sort(ranks.begin(), ranks.end());
      std::vector<std::string> probs = gpu_problems(g);
      gpus.push_back(gpu_json(node.node, g, ranks, probs));
      for (const auto& pr : probs) {
        const std::string who = gpu_owner(node.node, g, ranks);
        json pj = {{"ranks", ranks},
                   {"node", node.node},
                   {"pci_bus_id", g.pci_bus_id},
                   {"summary", who + " " + pr}};
        bool is_culprit =
            std::any_of(ranks.begin(), ranks.end(), [&](int r) { return culprits.count(r) > 0; });
        (is_culprit ? culprit_first : others).push_back(std::move(pj));
      }
    }
  }
  for (auto& p : culprit_first) problems.push_back(std::move(p));
  for (auto& p : others) problems.push_back(std::move(p));
  a->context["gpus"] = gpus;
  if (!nodes_without.empty()) a->context["gpus_unavailable"] = nodes_without;
  if (!problems.empty()) verdict.details["gpu_problems"] = problems;
  // Each evidence entry of the verdict names its rank's GPU.
  if (verdict.evidence.is_array())
    for (auto& e : verdict.evidence) {
      if (!e.is_object() || !e.contains("rank") || !e["rank"].is_number_integer()) continue;
      for (const auto& g : gpus)
        for (const auto& r : g["ranks"])
          if (r == e["rank"])
            e["gpu"] = {{"pci_bus_id", g["pci_bus_id"]}, {"problems", g["problems"]}};
    }
}

std::string base_name(const std::string& path) { return path.substr(path.rfind('/') + 1); }

// "hang_in_python <- main (job.py:35)": the innermost frames of a group, for a summary.
std::string frames_text(const json& frames) {
  // A Python program is told by its Python frames where it has them.
  bool python = false;
  for (const auto& f : frames) python |= f.value("kind", std::string()) == "python";
  std::string s;
  int n = 0;
  for (const auto& f : frames) {
    if (n == 3) break;
    if (python && f.value("kind", std::string()) != "python") continue;
    const std::string fn = f.value("function", std::string());
    if (fn.empty() || fn.rfind("0x", 0) == 0) continue;
    if (n++) s += " <- ";
    s += fn;
    if (n == 1 && !f.value("file", std::string()).empty())
      s += " (" + base_name(f.value("file", std::string())) + ":" +
           std::to_string(f.value("line", 0)) + ")";
  }
  return s.empty() ? "unnamed frames" : s;
}

// Where no recorder shows the hang (nothing recorded an op: a job on gloo whose torch recorder did
// not answer, one hung before its first collective), the stacks may: when the ranks' main threads
// stand in one set of frames but for a smaller group elsewhere, the ranks apart are the verdict's
// culprits (three ranks waiting in the same collective frame, the fourth in its own loop).
void stack_outlier_verdict(const Model& m, Analysis* a) {
  if (a->verdict.kind != VerdictKind::kIncomplete && a->verdict.kind != VerdictKind::kNoHang)
    return;
  for (const auto& p : m.procs)
    if (!p.ops.empty()) return;
  const json& groups = a->context.value("stack_groups", json::array());
  if (groups.size() < 2 || groups[0]["ranks"].size() < 2 ||
      groups[1]["ranks"].size() >= groups[0]["ranks"].size())
    return;
  Finding v;
  v.kind = VerdictKind::kStackOutlier;
  v.evidence = json::array();
  std::string apart;
  for (size_t i = 1; i < groups.size(); ++i) {
    std::vector<int> ranks = groups[i]["ranks"].get<std::vector<int>>();
    v.culprit_ranks.insert(v.culprit_ranks.end(), ranks.begin(), ranks.end());
    apart += (apart.empty() ? "" : "; ") + ranks_word(ranks.size()) + rank_list_text(ranks) +
             " in " + frames_text(groups[i]["frames"]);
  }
  std::sort(v.culprit_ranks.begin(), v.culprit_ranks.end());
  const std::vector<int> most = groups[0]["ranks"].get<std::vector<int>>();
  v.blocked_ranks = most;
  v.summary = "no recorder shows where the job waits; by the stacks, " + ranks_word(most.size()) +
              rank_list_text(most) + " stand in the same frames (" +
              frames_text(groups[0]["frames"]) + "), " + apart;
  for (int r : v.culprit_ranks) v.evidence.push_back({{"rank", r}, {"culprit", true}});
  for (int r : most) v.evidence.push_back({{"rank", r}, {"culprit", false}});
  a->verdict = std::move(v);
}

}  // namespace

json main_stack(const Proc& p) {
  const ThreadStack* t = main_thread(p);
  return t ? frames_json(t->frames) : json(nullptr);
}

void add_context(const Model& m, Analysis* a) {
  add_stack_groups(m, &a->context);
  stack_outlier_verdict(m, a);
  add_stacks(m, a->verdict);
  for (auto& f : a->findings) add_stacks(m, f);
  add_gpus(m, a);
}

// "hang_forever ← run_step ← main (rank_main.cpp:340)": from the first frame of the program's own
// (not a system library's), three functions outward, with the first one's file and line.
std::string stack_line(const json& frames) {
  if (!frames.is_array() || frames.empty()) return "";
  auto system = [](const json& f) {
    const std::string mod = f.value("module", std::string());
    return f.value("kind", std::string()) == "kernel" || mod.rfind("/lib/", 0) == 0 ||
           mod.rfind("/usr/lib/", 0) == 0 || mod.rfind("/lib64/", 0) == 0;
  };
  size_t start = 0;
  while (start < frames.size() &&
         (system(frames[start]) || frames[start].value("function", std::string()).empty()))
    ++start;
  if (start == frames.size()) start = 0;
  // The name without namespaces, template arguments or parameters:
  // "fr::simjob::(anonymous namespace)::hang_forever()" -> "hang_forever".
  auto short_name = [](std::string n) {
    const std::string anon = "(anonymous namespace)::";
    for (size_t p; (p = n.find(anon)) != std::string::npos;) n.erase(p, anon.size());
    std::string out;
    int angle = 0;
    for (size_t i = 0; i < n.size(); ++i) {
      const char c = n[i];
      const bool after_operator = i >= 8 && n.compare(i - 8, 8, "operator") == 0;
      if (c == '<' && !after_operator)
        ++angle;
      else if (c == '>' && angle > 0)
        --angle;
      else if (angle == 0 && c == '(' && !out.empty())
        break;
      else if (angle == 0)
        out += c;
    }
    // The function's own name: namespaces and classes differ with inlining and build types
    // (hang_forever, fr::simjob::(anonymous namespace)::hang_forever); the JSON has them whole.
    size_t colon = out.rfind("::");
    if (colon != std::string::npos && colon + 2 < out.size()) out = out.substr(colon + 2);
    return out.empty() ? std::string("??") : out;
  };
  std::string s;
  size_t shown = 0;
  const json* where = nullptr;  // the first shown frame with a source position
  for (size_t i = start; i < frames.size() && shown < 3; ++i) {
    std::string fn = frames[i].value("function", std::string());
    if (fn.empty() || fn.rfind("0x", 0) == 0) continue;
    s += (shown ? " \u2190 " : "") + short_name(fn);
    ++shown;
    if (!where && !frames[i].value("file", std::string()).empty()) where = &frames[i];
  }
  if (where) {
    const std::string file = where->value("file", std::string());
    s += " (" + file.substr(file.find_last_of('/') + 1);
    if (where->value("line", 0) > 0) s += ":" + std::to_string(where->value("line", 0));
    s += ")";
  }
  return s;
}

}  // namespace fr::analyzer
