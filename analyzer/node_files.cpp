// The per-node files of a dump set: <node>.gpu.json (GPU health, NVML) and
// <node>.slow_history.json (what the node's heartbeats said lately, for fail-slow judging). Each
// is opened like every file of a dump set (no link followed, never a FIFO), bounded, and one that
// cannot be read is named in the warnings while the rest of the dump set is analysed.
#include <algorithm>
#include <filesystem>

#include "analyzer/model.h"
#include "log/safe_file.h"
#include "log/side_files.h"
#include "log/slow_history.h"
#include "passes.h"

namespace fr::analyzer {

namespace {

namespace fs = std::filesystem;

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() > suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The file's text; false with no error when it is absent.
bool read_node_file(const std::string& dir, const std::string& name, size_t max, std::string* text,
                    std::string* error) {
  fr::log::OpenedFile f = fr::log::open_beneath(dir, name);
  if (!f.ok()) {
    if (f.error != fr::log::OpenError::kMissing) *error = f.reason;
    return false;
  }
  return fr::log::read_all(f.fd.get(), max, text, error, dir + "/" + name);
}

void load_gpus(const std::string& dir, const std::string& path, const std::string& n,
               Model* model) {
  std::string text, err;
  fr::log::NodeGpus g;
  if (!read_node_file(dir, n, fr::log::kMaxSideFileBytes, &text, &err) ||
      !fr::log::parse_gpus(text, &g, &err)) {
    if (!err.empty()) model->warnings.push_back({path, "GPU health not read: " + err});
    return;
  }
  if (g.node.empty()) g.node = n.substr(0, n.size() - std::string(fr::log::kGpuSuffix).size());
  model->gpus.push_back(std::move(g));
}

void load_history(const std::string& dir, const std::string& path, const std::string& n,
                  Model* model) {
  std::string text, err;
  fr::log::NodeSlowHistory h;
  std::vector<std::string> notes;
  if (!read_node_file(dir, n, fr::log::NodeSlowHistory::kMaxFileBytes, &text, &err) ||
      !fr::log::parse_slow_history(text, &h, &err, &notes)) {
    if (!err.empty()) model->warnings.push_back({path, "heartbeat history not read: " + err});
    return;
  }
  for (const auto& note : notes) model->warnings.push_back({path, "heartbeat history: " + note});
  if (h.node.empty())
    h.node = n.substr(0, n.size() - std::string(fr::log::kSlowHistorySuffix).size());
  model->histories.push_back(std::move(h));
}

}  // namespace

void load_node_files(const std::string& dir, Model* model) {
  std::error_code ec;
  std::vector<std::string> names;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (ends_with(name, fr::log::kGpuSuffix) || ends_with(name, fr::log::kSlowHistorySuffix))
      names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  std::string base = dir;
  while (base.size() > 1 && base.back() == '/') base.pop_back();
  for (const auto& n : names) {
    const std::string path = base + "/" + n;
    if (ends_with(n, fr::log::kGpuSuffix))
      load_gpus(dir, path, n, model);
    else
      load_history(dir, path, n, model);
  }
}

}  // namespace fr::analyzer
