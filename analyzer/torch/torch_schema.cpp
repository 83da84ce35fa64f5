// Picks the row of the torch schema table (torch_schema.h) a dump's version is read by.
#include "analyzer/torch/torch_schema.h"

#include <cstdio>
#include <iterator>

namespace fr::analyzer::torch {

namespace {

// "<major>.<minor>" with nothing after it; false for anything else.
bool parse_version(std::string_view v, int* major, int* minor) {
  if (v.empty() || v.size() > 16) return false;
  std::string s(v);
  int used = 0;
  if (std::sscanf(s.c_str(), "%d.%d%n", major, minor, &used) != 2 || used != int(s.size()))
    return false;
  return *major >= 0 && *minor >= 0;
}

bool before(int major, int minor, const TorchSchema& row) {
  return major < row.major || (major == row.major && minor < row.minor);
}

}  // namespace

const TorchSchema& newest_torch_schema() { return kTorchSchemas[std::size(kTorchSchemas) - 1]; }

SchemaChoice choose_torch_schema(std::string_view version) {
  SchemaChoice c;
  const TorchSchema& newest = newest_torch_schema();
  const TorchSchema& oldest = kTorchSchemas[0];
  const std::string shown(version.substr(0, 32));
  int major = 0, minor = 0;
  if (version.empty()) {
    c.fit = SchemaFit::kMissing;
    c.schema = &newest;
    c.note = std::string("no schema version; read as ") + newest.version;
    return c;
  }
  if (!parse_version(version, &major, &minor)) {
    c.fit = SchemaFit::kUnreadable;
    c.schema = &newest;
    c.note = "unreadable schema version \"" + shown + "\"; read as " + newest.version;
    return c;
  }
  if (before(major, minor, oldest)) {
    c.fit = SchemaFit::kOlder;
    c.note = "schema version " + shown + " is older than any this reader knows (oldest " +
             oldest.version + "); not read";
    return c;
  }
  if (!before(major, minor, newest) && !(major == newest.major && minor == newest.minor)) {
    c.fit = SchemaFit::kNewer;
    c.schema = &newest;
    c.note = "schema version " + shown + " is newer than " + newest.version + "; read as " +
             newest.version + " on a best-effort basis";
    return c;
  }
  for (const TorchSchema& row : kTorchSchemas)
    if (!before(major, minor, row)) c.schema = &row;
  return c;
}

}  // namespace fr::analyzer::torch
