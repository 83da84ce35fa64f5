// Sanitizing peer-supplied names: see names.h.
#include "daemon/base/names.h"

namespace fr::daemon {
namespace {

bool keep(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == '-';
}

}  // namespace

std::string sanitize_name(std::string_view in, size_t max_len) {
  std::string out;
  sanitize_name_into(in, max_len, &out);
  return out;
}

void sanitize_name_into(std::string_view in, size_t max_len, std::string* out) {
  const size_t n = in.size() < max_len ? in.size() : max_len;
  if (n == 0) {
    out->assign(1, '_');
    return;
  }
  out->resize(n);
  char* d = out->data();  // written through a plain pointer: the loop need not reload it
  for (size_t i = 0; i < n; ++i) d[i] = keep(in[i]) ? in[i] : '_';
  if (d[0] == '.') d[0] = '_';
}

bool is_safe_name(std::string_view name, size_t max_len) {
  if (name.empty() || name.size() > max_len || name[0] == '.') return false;
  for (char c : name)
    if (!keep(c)) return false;
  return true;
}

std::string printable(std::string_view in, size_t max_len) {
  std::string out;
  printable_into(in, max_len, &out);
  return out;
}

void printable_into(std::string_view in, size_t max_len, std::string* out) {
  const size_t n = in.size() < max_len ? in.size() : max_len;
  out->resize(n);
  char* d = out->data();
  for (size_t i = 0; i < n; ++i) {
    const char c = in[i];
    d[i] = c >= 0x20 && c < 0x7f ? c : '?';
  }
  if (in.size() > max_len) *out += "...";
}

bool equal_secret(std::string_view a, std::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  size_t n = a.size() > b.size() ? a.size() : b.size();
  for (size_t i = 0; i < n; ++i) {
    unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= static_cast<unsigned char>(x ^ y);
  }
  return diff == 0;
}

bool bearer_matches(std::string_view value, std::string_view token) {
  constexpr std::string_view kScheme = "bearer";
  if (value.size() <= kScheme.size() || value[kScheme.size()] != ' ') return false;
  for (size_t i = 0; i < kScheme.size(); ++i) {
    char c = value[i];
    if (c >= 'A' && c <= 'Z') c = char(c - 'A' + 'a');
    if (c != kScheme[i]) return false;
  }
  value.remove_prefix(kScheme.size());
  while (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  return equal_secret(value, token);
}

}  // namespace fr::daemon
