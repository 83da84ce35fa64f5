// fr-run's command line and the environment it gives the command: pure functions over strings,
// so the contract (which flags, which variables, what wins over what) is tested without
// starting a process.
//
//   fr-run [--coordinator ADDR] [--job-id ID] [--log-dir DIR] [--token-file F] [--node-name N]
//          [--agent PATH] [--frd PATH] [--daemon-log FILE] [--frd-arg ARG]... [--no-daemon]
//          [--verbose] -- CMD ARGS...
//
// Each flag also has an environment variable (the flag wins): FR_COORDINATOR, FR_JOB_ID,
// FR_LOG_DIR, FR_TOKEN_FILE, FR_AGENT. The first argument that is not a flag also starts the
// command, so `fr-run python train.py` works; `--` is needed only when CMD itself starts with `-`.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace fr::run {

struct Options {
  std::string coordinator;  // empty: no node daemon is started
  std::string job_id;       // empty: the agent's own rule (TORCHELASTIC_RUN_ID, SLURM_JOB_ID)
  std::string log_dir;      // where the agent writes and the node daemon reads
  std::string token_file;   // passed to the node daemon this fr-run starts
  std::string node_name;    // passed to the node daemon
  std::string agent;        // libfr_agent.so
  std::string frd;          // the frd executable
  std::string daemon_log;   // the started node daemon's stdout and stderr
  std::vector<std::string> frd_args;  // more flags for `frd node` (TLS, --stall-after, ...)
  // The node daemon it starts leaves after this many seconds without a live flight log or an
  // fr-run on the node (`frd node --exit-when-idle`); "0": never.
  std::string daemon_exit_when_idle = "60";
  // The signal the command gets when fr-run itself dies (even by SIGKILL): --parent-death-signal,
  // KILL by default, 0 for none (`none`).
  int parent_death_signal = 9;
  bool no_daemon = false;
  // The folder of fr-run's sitecustomize.py (torch's recorder on request, docs/fr-run.md), put
  // first on the command's PYTHONPATH; empty: none (--no-torch-hook, or not installed).
  std::string python_hook;
  bool no_torch_hook = false;
  // Ask NCCL for kernel-channel events too (FR_PROFILER_KERNEL_CH=1 for the command): off by
  // default, since they change how NCCL runs every collective (docs/agent.md).
  bool kernel_channels = false;
  bool verbose = false;
  bool help = false;
  bool version = false;
  std::vector<std::string> command;
};

using Env = std::map<std::string, std::string>;

// Parses argv (without argv[0]). Returns false with *error on bad usage.
bool parse_args(const std::vector<std::string>& args, Options* o, std::string* error);

// Fills what flags left empty from the environment and from defaults: FR_* variables; the agent
// in <exe_dir>/../lib and frd in <exe_dir>; the log directory /dev/shm; the daemon's log file
// LOG_DIR/frd-node.log; the token file ${FR_TOKEN_FILE:-${XDG_RUNTIME_DIR:-/tmp}/frd-<uid>/token}
// when that file exists (token_exists tells whether it does).
void resolve(Options* o, const Env& env, const std::string& exe_dir, unsigned uid,
             bool (*token_exists)(const std::string& path));

// Makes every path the node daemon and the command are given absolute, from `cwd`: the
// detached daemon runs in /, the command wherever it changes to. The log directory, the token
// file, the daemon's log, the agent, frd, and the paths of --frd-arg flags that take one
// (--token-file, --tls-ca, --tls-cert, --tls-key, --dump-dir, in both `--flag V` and
// `--flag=V` forms).
void make_paths_absolute(Options* o, const std::string& cwd);

// The default token file: ${XDG_RUNTIME_DIR:-/tmp}/frd-<uid>/token.
std::string default_token_file(const Env& env, unsigned uid);

// The command's environment: `env` with the agent prepended to LD_PRELOAD (once), the agent as
// NCCL_PROFILER_PLUGIN unless the user named one, FR_LOG_DIR, FR_JOB_ID when given, and
// FR_PROFILER_KERNEL_CH=1 with --profiler-kernel-channels, the python hook's folder first on
// PYTHONPATH (once) when there is one. agent_ok false: the agent is missing, LD_PRELOAD stays as it was.
Env child_env(const Options& o, const Env& env, bool agent_ok);

// `frd node ...` for this node.
std::vector<std::string> frd_node_argv(const Options& o);

std::string usage_text();

// The signal a --parent-death-signal value names (KILL, TERM, INT, HUP, QUIT, USR1, USR2, with or
// without SIG, or a number 1..64), 0 for `none`; -1 when it names none.
int parse_signal_name(const std::string& v);

}  // namespace fr::run
