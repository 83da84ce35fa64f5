// Runs the command as fr-run's child and stands in for it: every catchable signal that a launcher,
// a scheduler or a user sends to fr-run (SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2,
// SIGALRM, SIGCONT, SIGWINCH, ...) is passed on to the command, and fr-run exits with the
// command's status: its exit code, or 128+N when signal N killed it. stdin, stdout and stderr are
// the command's own, untouched. A signal that the terminal sent to the whole foreground process
// group (Ctrl-C) already reached the command, so it is not sent twice.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "options.h"

namespace fr::run {

// Runs argv[0] (looked up on PATH in `env`) with `env`; returns the status fr-run should exit
// with: the command's, or 127 (not found) / 126 (not executable) with a message on stderr.
// `death_signal` (0: none) is what the command gets when fr-run dies first, however it dies
// (PR_SET_PDEATHSIG): a killed fr-run leaves no command running on the GPU. The kernel clears it
// when the command is a set-user-id program.
// `started` (may be empty) runs in fr-run once the command's process exists, with its pid.
int run_command(const std::vector<std::string>& argv, const Env& env, int death_signal,
                const std::function<void(int pid)>& started = {});

}  // namespace fr::run
