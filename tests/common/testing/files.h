// Whole files for tests: read one, write one, ask whether a path is there. Every test folder used
// to keep its own copy of these one-liners, and the copies drifted (one `exists` followed links,
// another did not); this is the one copy, with the two meanings of "exists" under two names.
// Included as "testing/files.h" (library fr_test_common), a name no shipped header can take.
#pragma once

#include <string>

namespace fr::test {

// The whole file, byte for byte; "" when it cannot be read (missing, a directory, no permission).
std::string slurp(const std::string& path);

// Writes `bytes` to `path`, created or truncated; whether all of it was written.
bool spit(const std::string& path, const std::string& bytes);

// Whether `path` names something that exists, following links (stat(2)): a link to nothing is
// not there.
bool exists(const std::string& path);

// Whether `path` itself exists, without following a final link (lstat(2)): a dangling link, or
// a link a test planted where a file must never appear, counts.
bool exists_no_follow(const std::string& path);

}  // namespace fr::test
