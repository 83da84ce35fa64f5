// A large JSON document written as text on several threads (fr-analyze's 16,384-rank document is
// 45 MB): the same bytes as nlohmann's dump, made in parts and written in order.
#pragma once

#include <nlohmann/json.hpp>
#include <ostream>

namespace fr::analyzer {

// Writes `doc.dump(indent)` to `out`, byte for byte (no trailing newline), except that bytes
// that are not UTF-8 are written as U+FFFD (nlohmann's error_handler_t::replace) where dump
// would throw: one damaged name does not lose the document. The text of the document's large
// arrays (and the objects that hold them, a few levels down) is made on `threads` threads (0:
// one per core) while the parts already made are written, in order. A negative indent (the
// one-line form) is written by nlohmann's dump alone. Returns whether `out` took everything;
// what a part throws (out of memory) is thrown once the text before it is written.
bool write_json(const nlohmann::json& doc, int indent, std::ostream& out, unsigned threads = 0);

}  // namespace fr::analyzer
