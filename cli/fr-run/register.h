// fr-run's registration of the command it runs (daemon/base/proc_file.h): written once the
// command's process exists, removed with the files the torch hook and the node daemon made beside
// it when fr-run ends. A registration that cannot be written costs the command nothing: the node
// daemon then sees it only from its first NCCL or NIXL call on.
#pragma once

#include <string>

#include "options.h"

namespace fr::run {

class Registration {
 public:
  Registration(std::string log_dir, Env env) : log_dir_(std::move(log_dir)), env_(std::move(env)) {}
  ~Registration();
  Registration(const Registration&) = delete;
  Registration& operator=(const Registration&) = delete;

  // Writes LOG_DIR/fr-proc.<pid> for the command's process; false with *error when it cannot.
  bool write(int pid, std::string* error);

 private:
  std::string log_dir_;
  Env env_;
  int pid_ = 0;
};

}  // namespace fr::run
