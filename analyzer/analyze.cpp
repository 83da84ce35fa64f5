// First cut of the analysis entry points; the real pipeline replaces this.
#include "analyzer/analyze.h"

namespace fr::analyzer {

nlohmann::json analyze_paths(const std::vector<std::string>& paths, const Options&,
                             std::string* fatal_error) {
  if (paths.empty()) {
    if (fatal_error) *fatal_error = "no input paths given";
    return nullptr;
  }
  nlohmann::json doc;
  doc["schema"] = "fr-analysis/1";
  doc["inputs"] = {{"paths", paths}, {"files_read", 0}, {"skipped", nlohmann::json::array()},
                   {"clock", "per_host"}};
  doc["ranks"] = {{"expected", 0}, {"found", nlohmann::json::array()},
                  {"missing", nlohmann::json::array()}, {"dead", nlohmann::json::array()}};
  doc["verdict"] = {{"kind", "incomplete"}, {"summary", "analysis not available yet"},
                    {"culprit_ranks", nlohmann::json::array()}};
  doc["findings"] = nlohmann::json::array();
  doc["communicators"] = nlohmann::json::array();
  doc["skew"] = nlohmann::json::array();
  return doc;
}

std::string render_text(const nlohmann::json& analysis, bool) {
  if (!analysis.is_object() || !analysis.contains("verdict")) return "no analysis\n";
  return analysis["verdict"].value("summary", std::string()) + "\n";
}

}  // namespace fr::analyzer
