// Value readers of the torch dump reader (torch_values.h): every form a field takes in JSON or
// pickled dumps, read the same way, bounded, never throwing.
#include "analyzer/torch/torch_values.h"

#include <cmath>
#include <cstdio>
#include <cstring>

#include "fr/flight_log.h"

namespace fr::analyzer::torch {

using nlohmann::json;

const json* field(const json& obj, const char* key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(key);
  return it == obj.end() ? nullptr : &*it;
}

bool parse_int_text(std::string_view s, int64_t* out) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  bool neg = false;
  if (!s.empty() && (s.front() == '-' || s.front() == '+')) {
    neg = s.front() == '-';
    s.remove_prefix(1);
  }
  if (s.empty() || s.size() > 18) return false;
  int64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  *out = neg ? -v : v;
  return true;
}

bool as_int(const json* v, int64_t* out) {
  if (!v) return false;
  switch (v->type()) {
    case json::value_t::number_integer: *out = v->get<int64_t>(); return true;
    case json::value_t::number_unsigned: {
      uint64_t u = v->get<uint64_t>();
      *out = u > uint64_t(INT64_MAX) ? INT64_MAX : int64_t(u);
      return true;
    }
    case json::value_t::number_float: {
      double d = v->get<double>();
      if (!std::isfinite(d) || d > 9.2e18 || d < -9.2e18) return false;
      *out = static_cast<int64_t>(d);
      return true;
    }
    case json::value_t::boolean: *out = v->get<bool>() ? 1 : 0; return true;
    case json::value_t::string: return parse_int_text(v->get_ref<const std::string&>(), out);
    default: return false;
  }
}

int64_t int_or(const json& obj, const char* key, int64_t dflt) {
  int64_t v;
  return as_int(field(obj, key), &v) ? v : dflt;
}

std::string as_text(const json* v) {
  if (!v) return {};
  if (v->is_string()) return v->get<std::string>();
  if (v->is_binary()) {
    const auto& b = v->get_binary();
    return std::string(b.begin(), b.end());
  }
  if (v->is_number_integer() || v->is_number_unsigned()) return v->dump();
  return {};
}

bool as_bool(const json* v, bool dflt) {
  if (!v) return dflt;
  if (v->is_boolean()) return v->get<bool>();
  int64_t i;
  if (v->is_number() && as_int(v, &i)) return i != 0;
  if (v->is_string()) {
    const std::string& s = v->get_ref<const std::string&>();
    if (s == "true" || s == "True" || s == "1") return true;
    if (s == "false" || s == "False" || s == "0") return false;
  }
  return dflt;
}

void copy_name(char* dst, const std::string& s) {
  size_t n = std::min(s.size(), size_t(FR_NAME_LEN - 1));
  std::memcpy(dst, s.data(), n);
  dst[n] = '\0';
}

int rank_from_name(const std::string& name) {
  std::string base =
      name.substr(name.find_last_of('/') == std::string::npos ? 0 : name.find_last_of('/') + 1);
  for (const char* ext : {".json", ".pkl", ".pickle", ".torchfr"}) {
    size_t n = std::strlen(ext);
    if (base.size() > n && base.compare(base.size() - n, n, ext) == 0) {
      base.resize(base.size() - n);
      break;
    }
  }
  size_t end = base.size(), start = end;
  while (start > 0 && base[start - 1] >= '0' && base[start - 1] <= '9') --start;
  if (start == end || end - start > 9) return -1;
  return std::stoi(base.substr(start));
}

bool parse_ranks(const json* v, std::vector<int64_t>* out) {
  out->clear();
  if (!v) return false;
  if (v->is_array()) {
    for (const auto& x : *v) {
      int64_t r;
      if (!as_int(&x, &r) || r < 0 || r >= kMaxRanks) return false;
      out->push_back(r);
    }
    return true;
  }
  if (!v->is_string()) return false;
  std::string_view s = v->get_ref<const std::string&>();
  size_t i = 0;
  auto skip_ws = [&] {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
  };
  skip_ws();
  if (i >= s.size() || s[i] != '[') return false;
  ++i;
  skip_ws();
  if (i < s.size() && s[i] == ']') return true;
  while (i < s.size()) {
    skip_ws();
    size_t start = i;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
    int64_t r;
    if (!parse_int_text(s.substr(start, i - start), &r) || r >= kMaxRanks) return false;
    out->push_back(r);
    skip_ws();
    if (s.substr(i, 2) == "..") {  // a range "a..b", as some versions print a long list
      i += 2;
      skip_ws();
      size_t end_start = i;
      while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
      int64_t last;
      if (!parse_int_text(s.substr(end_start, i - end_start), &last) || last < r ||
          last >= kMaxRanks || out->size() + size_t(last - r) > size_t(kMaxRanks))
        return false;
      for (int64_t x = r + 1; x <= last; ++x) out->push_back(x);
      skip_ws();
    }
    if (i < s.size() && s[i] == ',') {
      ++i;
      continue;
    }
    if (i < s.size() && s[i] == ']') return true;
    return false;
  }
  return false;
}

int nccl_version_code(const std::string& v) {
  int x = 0, y = 0, z = 0;
  if (sscanf(v.c_str(), "%d.%d.%d", &x, &y, &z) < 2 || x < 0 || y < 0 || z < 0 || x > 99 ||
      y > 99 || z > 99)
    return 0;
  return (x <= 2 && y <= 8) ? x * 1000 + y * 100 + z : x * 10000 + y * 100 + z;
}

uint64_t element_count(const json* sizes, bool* ok, uint64_t* dims) {
  *ok = false;
  if (!sizes || !sizes->is_array()) return 0;
  uint64_t total = 0;
  for (const auto& t : *sizes) {
    if (!t.is_array()) return 0;
    if (dims) *dims += t.size();
    uint64_t prod = 1;
    for (const auto& d : t) {
      uint64_t dim;
      int64_t sdim;
      if (d.is_number_unsigned())
        dim = d.get<uint64_t>();
      else if (as_int(&d, &sdim) && sdim >= 0)
        dim = uint64_t(sdim);
      else
        return 0;
      prod = saturating_mul(prod, dim);
    }
    total = saturating_add(total, prod);
  }
  *ok = !sizes->empty();
  return total;
}

}  // namespace fr::analyzer::torch
