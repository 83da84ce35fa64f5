// Reading the values of a PyTorch Flight Recorder dump whatever form they arrive in: ints as
// JSON numbers, pickle ints or decimal strings; texts as str or bytes; rank lists as a list or as
// PyTorch's printed "[0, 1]" and "[0..5]"; tensor shapes as element counts. Also the warnings a
// reader collects. Shared by the entry readers (torch_entries.cpp) and the dump converter
// (torch_convert.cpp); not part of the analyzer's public surface.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace fr::analyzer::torch {

inline constexpr size_t kMaxWarnings = 24;
inline constexpr int64_t kMaxRanks = int64_t{1} << 24;

// Collects warnings, one line per distinct message with a repeat count.
class Warnings {
 public:
  void add(const std::string& msg) {
    auto it = index_.find(msg);
    if (it != index_.end()) {
      ++items_[it->second].second;
      return;
    }
    index_.emplace(msg, items_.size());
    items_.emplace_back(msg, 1);
  }
  void flush(std::vector<std::string>* out) {
    size_t shown = 0;
    for (auto& [msg, n] : items_) {
      if (shown++ == kMaxWarnings) {
        out->push_back("... and " + std::to_string(items_.size() - kMaxWarnings) +
                       " more kinds of warnings");
        break;
      }
      out->push_back(n > 1 ? msg + " (" + std::to_string(n) + " times)" : msg);
    }
    items_.clear();
    index_.clear();
  }

 private:
  std::vector<std::pair<std::string, uint64_t>> items_;
  std::unordered_map<std::string, size_t> index_;
};

// The value under `key` of a JSON dict; nullptr when absent or not a dict.
const nlohmann::json* field(const nlohmann::json& obj, const char* key);
// A decimal integer, blanks around it allowed.
bool parse_int_text(std::string_view s, int64_t* out);
// Integers arrive as JSON numbers, pickle ints, or (JSON pg_status) decimal strings.
bool as_int(const nlohmann::json* v, int64_t* out);
int64_t int_or(const nlohmann::json& obj, const char* key, int64_t dflt);
std::string as_text(const nlohmann::json* v);  // str, bytes or an int's digits; else empty
bool as_bool(const nlohmann::json* v, bool dflt);
void copy_name(char* dst, const std::string& s);  // into a FR_NAME_LEN field, cut to fit
// Trailing decimal digits of a file's base name (extension .json/.pkl/.pickle/.torchfr, frd's name
// for a dump it gathered, ignored), -1 if
// there are none.
int rank_from_name(const std::string& name);
// "[0, 1, 2]", "[0..5]" or a list of ints.
bool parse_ranks(const nlohmann::json* v, std::vector<int64_t>* out);
// NCCL_VERSION_CODE of "2.21.5"; 0 when unreadable.
int nccl_version_code(const std::string& v);
// Sum over tensors of the product of their dims; saturates instead of overflowing.
// Saturating arithmetic for element counts, so that a hostile shape cannot wrap a count around.
inline uint64_t saturating_mul(uint64_t a, uint64_t b) {
  return b != 0 && a > UINT64_MAX / b ? UINT64_MAX : a * b;
}
inline uint64_t saturating_add(uint64_t a, uint64_t b) {
  return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

// `dims`, when given, gets the number of dimensions over all shapes added to it.
uint64_t element_count(const nlohmann::json* sizes, bool* ok, uint64_t* dims = nullptr);

}  // namespace fr::analyzer::torch
