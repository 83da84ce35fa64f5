// A fresh temporary directory for one test, removed with everything in it when the test ends.
// Every test folder's include root reaches this file (tests/ is on each test's include path), so
// tests share this one instead of each writing its own.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <stdexcept>
#include <string>
#include <system_error>

namespace fr::test {

struct TempDir {
  std::string path;
  // `prefix` names the directory (/tmp/PREFIX.XXXXXX), so a leftover says which test made it.
  explicit TempDir(const std::string& prefix = "fr-test") {
    std::string tmpl = (std::filesystem::temp_directory_path() / (prefix + ".XXXXXX")).string();
    if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp " + tmpl + " failed");
    path = tmpl;
  }
  ~TempDir() {
    if (::getenv("FR_KEEP_TMP") != nullptr) return;  // kept to look at after a failure
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  // A path inside the directory.
  std::string sub(const std::string& name) const {
    return (std::filesystem::path(path) / name).string();
  }
};

}  // namespace fr::test
