// See json_fields.h: the rules of every tolerant reader of fr's JSON, the ones that need no template.
#include "log/json_fields.h"

#include <algorithm>

namespace fr::log {

using nlohmann::json;

const json* field_of(const json& j, std::string_view key) {
  if (!j.is_object()) return nullptr;
  auto it = j.find(key);
  return it == j.end() ? nullptr : &*it;
}

const json* object_field(const json& j, std::string_view key) {
  const json* v = field_of(j, key);
  return v != nullptr && v->is_object() ? v : nullptr;
}

const json* array_field(const json& j, std::string_view key) {
  const json* v = field_of(j, key);
  return v != nullptr && v->is_array() ? v : nullptr;
}

const json& object_or_empty(const json& j, std::string_view key) {
  static const json empty = json::object();
  const json* v = object_field(j, key);
  return v != nullptr ? *v : empty;
}

const json& array_or_empty(const json& j, std::string_view key) {
  static const json empty = json::array();
  const json* v = array_field(j, key);
  return v != nullptr ? *v : empty;
}

bool read_value(const json& v, std::string* out, size_t max_bytes) {
  if (!v.is_string()) return false;
  const auto& s = v.get_ref<const std::string&>();
  if (s.size() <= max_bytes) {
    *out = s;
    return true;
  }
  // Back off over continuation bytes (10xxxxxx) to the start of the character the bound cuts.
  size_t n = max_bytes;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  *out = s.substr(0, n);
  return true;
}

bool read_value(const json& v, bool* out) {
  if (!v.is_boolean()) return false;
  *out = v.get<bool>();
  return true;
}

bool read_value(const json& v, double* out) {
  if (!v.is_number()) return false;
  const double d = v.get<double>();
  if (!std::isfinite(d)) return false;
  *out = d;
  return true;
}

double number_in(const json& j, std::string_view key, double lo, double hi, double dflt) {
  double v = 0;
  return read_field(j, key, &v) ? std::clamp(v, lo, hi) : dflt;
}

}  // namespace fr::log
