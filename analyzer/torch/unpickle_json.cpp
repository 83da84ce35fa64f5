// Copies a value of the pickle machine out as a nlohmann::json tree (unpickle(), and
// PickleDoc::to_json for the small parts of a dump read as JSON), within the output budgets of
// UnpickleLimits: a depth limit (which also stops cycles) and node and byte budgets (which stop a
// small file from expanding a shared subtree exponentially).
#include "analyzer/torch/unpickle_machine.h"

namespace fr::analyzer::torch::unpickle_detail {

bool Machine::key_text(uint32_t key, std::string* out) {
  const Obj& o = objs_[key];
  switch (o.kind) {
    case Kind::kSkipped: return scan_wrong();
    case Kind::kStr: out->assign(strs_[o.ref]); return true;
    case Kind::kBytes:
      if (!valid_utf8(strs_[o.ref])) break;
      out->assign(strs_[o.ref]);
      return true;
    case Kind::kInt: *out = std::to_string(o.i); return true;
    case Kind::kUint: *out = std::to_string(o.u); return true;
    case Kind::kBool: *out = o.i ? "True" : "False"; return true;
    case Kind::kNone: *out = "None"; return true;
    default: break;
  }
  error_ = std::string("pickle: dict key of type ") + kind_name(o.kind) + " is not supported";
  return false;
}

bool Machine::to_json(uint32_t id, size_t depth, nlohmann::json* out) {
  if (++out_nodes_ > lim_.max_output_nodes) {
    error_ = "pickle: result too large (more than " + std::to_string(lim_.max_output_nodes) +
             " values once shared parts are expanded)";
    return false;
  }
  const Obj& o = objs_[id];
  switch (o.kind) {
    case Kind::kSkipped: return scan_wrong();  // a placeholder where a value is used
    case Kind::kNone: *out = nullptr; return true;
    case Kind::kBool: *out = o.i != 0; return true;
    case Kind::kInt: *out = o.i; return true;
    case Kind::kUint: *out = o.u; return true;
    case Kind::kBigInt:
    case Kind::kFloat: *out = o.f; return true;
    case Kind::kStr:
    case Kind::kBytes: {
      std::string_view s = strs_[o.ref];
      out_bytes_ += s.size();
      if (out_bytes_ > lim_.max_output_bytes) {
        error_ = "pickle: result too large (more than " + std::to_string(lim_.max_output_bytes) +
                 " bytes of text once shared parts are expanded)";
        return false;
      }
      if (o.kind == Kind::kStr)
        *out = std::string(s);
      else
        *out = nlohmann::json::binary(std::vector<uint8_t>(s.begin(), s.end()));
      return true;
    }
    default: break;
  }
  if (depth >= lim_.max_depth) {
    error_ = "pickle: nested deeper than " + std::to_string(lim_.max_depth) +
             " levels (or a container that holds itself)";
    return false;
  }
  const Seq q = seqs_[o.ref];
  if (o.kind == Kind::kDict) {
    *out = nlohmann::json::object();
    std::string key;
    for (uint32_t g = q.head; g != kNoSeg; g = segs_[g].next) {
      const Seg seg = segs_[g];
      for (uint32_t k = 0; k + 1 < seg.count; k += 2) {
        uint32_t kid = pool_[seg.begin + k], vid = pool_[seg.begin + k + 1];
        if (objs_[kid].kind == Kind::kStr && skipped(strs_[objs_[kid].ref])) continue;
        if (!key_text(kid, &key)) return false;
        nlohmann::json v;
        if (!to_json(vid, depth + 1, &v)) return false;
        (*out)[key] = std::move(v);
      }
    }
    return true;
  }
  *out = nlohmann::json::array();
  for (uint32_t g = q.head; g != kNoSeg; g = segs_[g].next) {
    const Seg seg = segs_[g];
    for (uint32_t k = 0; k < seg.count; ++k) {
      nlohmann::json v;
      if (!to_json(pool_[seg.begin + k], depth + 1, &v)) return false;
      out->push_back(std::move(v));
    }
  }
  return true;
}

}  // namespace fr::analyzer::torch::unpickle_detail
