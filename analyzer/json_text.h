// A large JSON document written as text on several threads (fr-analyze's 16,384-rank document is
// 45 MB): the same bytes as nlohmann's dump, made in parts and written in order.
#pragma once

#include <nlohmann/json.hpp>
#include <ostream>

namespace fr::analyzer {

// Writes `doc.dump(indent)` to `out`, byte for byte (no trailing newline). The text of the
// document's large arrays (and the objects that hold them, a few levels down) is made on
// `threads` threads (0: one per core) while the parts already made are written, in order.
// A negative indent (the one-line form) is written by nlohmann's dump alone. Returns whether
// `out` took everything.
bool write_json(const nlohmann::json& doc, int indent, std::ostream& out, unsigned threads = 0);

}  // namespace fr::analyzer
