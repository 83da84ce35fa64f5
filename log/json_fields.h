// Tolerant readers of fr's own JSON documents (manifest.json, dump.json, incident.json, the side
// files, the coordinator's status), written once so that every reader applies the same rules.
// These documents may come from an older fr, a foreign tool or a hostile peer: a field is taken
// only when it is there, of the right JSON type and within the bounds below; otherwise it counts
// as missing: the destination is left as it was and the reader returns false. Nothing throws.
//
//   lookup    a key of a value that is not an object is missing; an object or array member that
//             is missing or of another kind reads as an empty one (object_or_empty,
//             array_or_empty).
//   string    a JSON string only. With a bound, cut to at most max_bytes bytes, backed off to the
//             start of a UTF-8 sequence, so that a cut never leaves half a character.
//   bool      a JSON boolean only (not 0 or 1, not "true").
//   integer   a JSON integer (signed or unsigned) whose value lies within [lo, hi], by default the
//             whole range of the destination's type. A value outside is wrong: never wrapped,
//             truncated or clamped into range. A float is wrong too (even 3.0), unless the caller
//             takes whole floats (Floats::kWholeTaken): then 3.0 is 3, 3.5 is still wrong.
//   double    any finite JSON number.
//   clamped   number_in(): a finite JSON number clamped into [lo, hi], else the default (for
//             ratios and durations, where the nearest bound is the honest reading).
//   list      a JSON array; each element is read by the rules above, the ones that fail are
//             skipped, and at most max_count are kept. A field that is not an array is missing
//             and leaves the list as it was; an array replaces it.
#pragma once

#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace fr::log {

inline constexpr size_t kNoBound = std::numeric_limits<size_t>::max();

// j[key] when j is an object that has key; nullptr otherwise.
const nlohmann::json* field_of(const nlohmann::json& j, std::string_view key);
// j[key] when it is an object (object_field) or an array (array_field), else nullptr.
const nlohmann::json* object_field(const nlohmann::json& j, std::string_view key);
const nlohmann::json* array_field(const nlohmann::json& j, std::string_view key);

// j[key] by reference when it is an object (an array), else an empty one: for walking a member
// that may be absent without a copy (nlohmann's value() copies) and without a check at each use.
const nlohmann::json& object_or_empty(const nlohmann::json& j, std::string_view key);
const nlohmann::json& array_or_empty(const nlohmann::json& j, std::string_view key);

// ---- one value ---------------------------------------------------------------------------------
bool read_value(const nlohmann::json& v, std::string* out, size_t max_bytes = kNoBound);
bool read_value(const nlohmann::json& v, bool* out);
bool read_value(const nlohmann::json& v, double* out);

// How an integer reader treats a JSON float: refused (the default), or taken when it is whole and
// at most 2^53 in magnitude (where a double holds every integer exactly), for documents that any
// writer may have produced (3.0 for 3).
enum class Floats : bool { kRefused, kWholeTaken };

// An integer destination (bool has its own reader).
template <typename T>
concept Integer = std::integral<T> && !std::same_as<T, bool>;

template <Integer Int>
bool read_value(const nlohmann::json& v, Int* out, Int lo, Int hi,
                Floats floats = Floats::kRefused) {
  auto take = [&](auto x) {
    if (!std::cmp_greater_equal(x, lo) || !std::cmp_less_equal(x, hi)) return false;
    *out = static_cast<Int>(x);
    return true;
  };
  if (v.is_number_unsigned()) return take(v.get<uint64_t>());
  if (v.is_number_integer()) return take(v.get<int64_t>());
  if (v.is_number_float() && floats == Floats::kWholeTaken) {
    const double d = v.get<double>();
    constexpr double kExact = 9007199254740992.0;  // 2^53
    if (!std::isfinite(d) || d != std::trunc(d) || std::fabs(d) > kExact) return false;
    return take(static_cast<int64_t>(d));
  }
  return false;
}
template <Integer Int>
bool read_value(const nlohmann::json& v, Int* out, Floats floats = Floats::kRefused) {
  return read_value(v, out, std::numeric_limits<Int>::lowest(), std::numeric_limits<Int>::max(),
                    floats);
}

// An optional destination: set when the value reads as its type.
template <typename T, typename... Bounds>
bool read_value(const nlohmann::json& v, std::optional<T>* out, Bounds... bounds) {
  T item{};
  if (!read_value(v, &item, bounds...)) return false;
  *out = std::move(item);
  return true;
}

// ---- one field of an object: the value's rules, after the lookup ---------------------------------
template <typename T, typename... Bounds>
bool read_field(const nlohmann::json& j, std::string_view key, T* out, Bounds... bounds) {
  const nlohmann::json* v = field_of(j, key);
  return v != nullptr && read_value(*v, out, bounds...);
}

// The field read as above, or dflt where it is missing (its type is the destination's).
template <typename T, typename... Bounds>
T field_or(const nlohmann::json& j, std::string_view key, T dflt, Bounds... bounds) {
  read_field(j, key, &dflt, bounds...);
  return dflt;
}

// A finite number clamped into [lo, hi]; dflt when the field is missing or not a finite number.
double number_in(const nlohmann::json& j, std::string_view key, double lo, double hi, double dflt);

// ---- lists ---------------------------------------------------------------------------------------
// The elements of j[key] that read as T (with the value's bounds), at most max_count of them.
template <typename T, typename... Bounds>
bool read_list(const nlohmann::json& j, std::string_view key, std::vector<T>* out, size_t max_count,
               Bounds... bounds) {
  const nlohmann::json* a = array_field(j, key);
  if (a == nullptr) return false;
  out->clear();
  for (const auto& e : *a) {
    if (out->size() >= max_count) break;
    T item{};
    if (read_value(e, &item, bounds...)) out->push_back(std::move(item));
  }
  return true;
}

}  // namespace fr::log
