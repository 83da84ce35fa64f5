// Names and ids that come from peers (node names, incident ids, file names) end up in paths and
// logs; everything here makes them safe: a bounded set of characters and a bounded length.
#pragma once

#include <string>
#include <string_view>

namespace fr::daemon {

constexpr size_t kMaxNameLen = 64;

// Keeps [A-Za-z0-9._-], maps anything else to '_', cuts at `max_len`, never returns "", "." or
// "..", never starts with '.'. The result is usable as one path component.
std::string sanitize_name(std::string_view in, size_t max_len = kMaxNameLen);
// The same into *out, reusing its memory (the heartbeat path, which runs for every node).
void sanitize_name_into(std::string_view in, size_t max_len, std::string* out);

// Whether `name` is already a safe single path component (what sanitize_name would keep as is).
bool is_safe_name(std::string_view name, size_t max_len = 255);

// Text from peers that goes into logs and JSON: printable ASCII only, bounded.
std::string printable(std::string_view in, size_t max_len = 256);
void printable_into(std::string_view in, size_t max_len, std::string* out);

// Constant-time comparison for tokens.
bool equal_secret(std::string_view a, std::string_view b);

// Whether an Authorization value is "Bearer TOKEN" for this token: the scheme in any case
// (schemes are case-insensitive, RFC 9110 11.1), one or more spaces, then the token compared in
// constant time.
bool bearer_matches(std::string_view value, std::string_view token);

}  // namespace fr::daemon
