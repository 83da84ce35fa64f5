// The Python stacks torch keeps with each Flight Recorder entry ("frames": a list of {name,
// filename, line}, innermost first), read for one entry at a time. read_torch_dump never builds
// them (they are most of a dump's bytes, see unpickle.cpp); an analysis asks here for the few
// entries its verdict names, and gets the call site: the innermost frame outside torch's own
// package, the program's line that issued the collective.
//
// Bounded: the file as read_torch_dump reads it (1 GiB, the same safe unpickler), at most
// kMaxTorchFrames frames of an entry and kMaxFrameText bytes of each name kept.
#include <algorithm>

#include "analyzer/torch/torch_detail.h"
#include "analyzer/torch/torch_dump.h"
#include "analyzer/torch/torch_entries.h"
#include "analyzer/torch/torch_values.h"
#include "analyzer/torch/unpickle_machine.h"
#include "log/safe_file.h"

namespace fr::analyzer::torch {

using nlohmann::json;

namespace {

constexpr uint64_t kMaxFileBytes = uint64_t{1} << 30;

// A frame's name cut to kMaxFrameText bytes, on a UTF-8 character boundary.
std::string cut(std::string s) {
  if (s.size() <= kMaxFrameText) return s;
  size_t n = kMaxFrameText;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  s.resize(n);
  return s;
}

bool frames_from_json(const json& v, TorchCallSite* out) {
  if (!v.is_array()) return false;
  for (const json& f : v) {
    if (out->frames.size() == kMaxTorchFrames) break;
    if (!f.is_object()) continue;
    TorchFrame t;
    t.function = cut(as_text(field(f, "name")));
    t.file = cut(as_text(field(f, "filename")));
    int64_t line;
    if (as_int(field(f, "line"), &line)) t.line = line;
    if (t.function.empty() && t.file.empty()) continue;
    out->frames.push_back(std::move(t));
  }
  out->user = torch_user_frame(out->frames);
  return !out->frames.empty();
}

// Whether an entry (its process group's name, sequence numbers and kind) is the one asked for.
struct Want {
  const std::string& pg;
  int64_t seq;
  bool p2p;
};

bool entry_is(const json& e, const Want& w) {
  std::string pg;
  if (const json* g = field(e, "process_group"); g && g->is_array() && !g->empty())
    pg = as_text(&(*g)[0]);
  else if (g)
    pg = as_text(g);
  if (pg != w.pg) return false;
  // Before 2.3 there is no is_p2p: point-to-point ops share collective_seq_id.
  const json* p2p_field = field(e, "is_p2p");
  if (p2p_field && as_bool(p2p_field, false) != w.p2p) return false;
  int64_t seq = -1;
  as_int(field(e, (w.p2p && p2p_field) ? "p2p_seq_id" : "collective_seq_id"), &seq);
  return seq == w.seq;
}

bool site_from_json(const json& doc, const Want& w, TorchCallSite* out, std::string* error) {
  const json* entries = doc.is_object() ? field(doc, "entries") : nullptr;
  if (!entries || !entries->is_array()) {
    *error = "no entries";
    return false;
  }
  for (const json& e : *entries) {
    if (!e.is_object() || !entry_is(e, w)) continue;
    const json* f = field(e, "frames");
    if (f && frames_from_json(*f, out)) return true;
    *error = "the entry holds no frames";
    return false;
  }
  *error = "no such entry";
  return false;
}

// The pickle form, walked in place: only the entry asked for is turned into JSON.
bool site_from_pickle(std::string_view bytes, const Want& w, TorchCallSite* out,
                      std::string* error) {
  UnpickleLimits lim;
  lim.skip_keys = {"thread_name", "nccl_comm_state"};
  PickleDoc doc;
  if (!doc.run(bytes, lim, false, error)) return false;
  using PRef = PickleDoc::Ref;
  std::vector<PRef> top, list, items;
  if (doc.type(doc.root()) != PickleDoc::Type::kDict) {
    *error = "not a dump (no dict at the top)";
    return false;
  }
  doc.items(doc.root(), &top);
  for (size_t i = 0; i + 1 < top.size(); i += 2) {
    if (doc.type(top[i]) != PickleDoc::Type::kStr || doc.text(top[i]) != "entries") continue;
    if (!p_is_seq(doc.type(top[i + 1]))) break;
    doc.items(top[i + 1], &list);
    for (PRef e : list) {
      if (doc.type(e) != PickleDoc::Type::kDict) continue;
      // The few keys entry_is reads first; the whole entry only for the one asked for.
      json head = json::object();
      PRef frames{};
      bool has_frames = false;
      doc.items(e, &items);
      for (size_t k = 0; k + 1 < items.size(); k += 2) {
        if (doc.type(items[k]) != PickleDoc::Type::kStr) continue;
        std::string_view key = doc.text(items[k]);
        if (key == "frames") {
          frames = items[k + 1], has_frames = true;
        } else if (key == "process_group" || key == "is_p2p" || key == "collective_seq_id" ||
                   key == "p2p_seq_id") {
          json v;
          std::string err;
          if (doc.to_json(items[k + 1], &v, &err)) head[std::string(key)] = std::move(v);
        }
      }
      if (!entry_is(head, w)) continue;
      json fv;
      if (has_frames && doc.to_json(frames, &fv, error) && frames_from_json(fv, out)) return true;
      if (error->empty()) *error = "the entry holds no frames";
      return false;
    }
    *error = "no such entry";
    return false;
  }
  *error = "no entries";
  return false;
}

}  // namespace

int torch_user_frame(const std::vector<TorchFrame>& frames) {
  // torch's package is where the innermost frame lies when it is torch's (distributed_c10d.py,
  // c10d_logger.py): the folder above its "torch/" part. Installed torch also sits under
  // site-packages or dist-packages; a program's own folder named "torch" is not torch.
  std::string root;
  for (const TorchFrame& f : frames) {
    size_t at = f.file.rfind("/torch/distributed/");
    if (at != std::string::npos) {
      root = f.file.substr(0, at + 7);
      break;
    }
  }
  for (size_t i = 0; i < frames.size(); ++i) {
    const std::string& file = frames[i].file;
    if (!root.empty() && file.rfind(root, 0) == 0) continue;
    if (file.find("-packages/torch/") != std::string::npos) continue;
    if (file.empty() || file[0] == '<') continue;  // "<frozen runpy>", "<string>"
    return int(i);
  }
  return -1;
}

bool read_torch_call_site(const std::string& path, std::pair<uint64_t, uint64_t> file_id,
                          const std::string& pg_name, int64_t seq, bool p2p, TorchCallSite* out,
                          std::string* error) {
  *out = {};
  error->clear();
  fr::log::OpenedFile f = fr::log::open_regular(path, fr::log::Links::kFollow);
  if (!f.ok()) {
    *error = f.message;
    return false;
  }
  if (file_id != std::pair<uint64_t, uint64_t>{0, 0} &&
      file_id != std::pair<uint64_t, uint64_t>{uint64_t(f.st.st_dev), uint64_t(f.st.st_ino)}) {
    *error = path + ": not the file read before (replaced since)";
    return false;
  }
  std::string bytes;
  if (!fr::log::read_all(f.fd.get(), kMaxFileBytes, &bytes, error, path)) return false;
  const Want w{pg_name, seq, p2p};
  if (!bytes.empty() && static_cast<unsigned char>(bytes[0]) == 0x80)
    return site_from_pickle(bytes, w, out, error);
  if (torch_json_too_deep(bytes)) {
    *error = "JSON nested too deep";
    return false;
  }
  json doc = json::parse(bytes, nullptr, false);
  if (doc.is_discarded()) {
    *error = "not JSON or pickle";
    return false;
  }
  return site_from_json(doc, w, out, error);
}

}  // namespace fr::analyzer::torch
