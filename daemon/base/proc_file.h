// The processes fr-run starts, made visible before they call NCCL or NIXL. The agent creates a
// flight log only at a process's first NCCL or NIXL call (it does nothing at load), so a job that
// has not called either yet (a gloo job, a job hung in Python before its first collective) left
// no trace a node daemon could see. fr-run therefore registers the process it starts, in the
// log directory the agent writes to, and removes the registration when the process ends:
//   LOG_DIR/fr-proc.<pid>              fr-proc/1: pid, start time, rank, world size, job (fr-run)
//   LOG_DIR/fr-proc.<pid>.torch        fr-torch/1: progress of torch's process groups, rewritten
//                                      when it moves, so its mtime is the last progress (the hook)
//   LOG_DIR/fr-proc.<pid>.dump-request a dump of torch's recorder is asked for (the node daemon)
//   LOG_DIR/fr-proc.<pid>.fr-dump      torch's recorder dump, renamed into place whole (the hook)
// The hook is fr-run's sitecustomize.py (docs/fr-run.md, "torch's recorder"). The log directory
// is writable by every local user, so readers trust a file only when it is a regular file owned
// by an accepted user, and a registration only while its process runs with the start time it
// names (a reused pid is not the process registered).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace fr::daemon {

inline constexpr const char* kProcFilePrefix = "fr-proc.";
inline constexpr const char* kTorchProgressSuffix = ".torch";
inline constexpr const char* kTorchRequestSuffix = ".dump-request";
inline constexpr const char* kTorchDumpSuffix = ".fr-dump";
// A torch recorder dump in a dump set: <node>-pid<P>-rank<R>.torchfr (torch's own pickle).
inline constexpr const char* kTorchDumpFileSuffix = ".torchfr";

struct ProcFile {
  int pid = 0;
  uint64_t start_ticks = 0;  // /proc/<pid>/stat's starttime
  int rank = -1;
  int world_size = -1;
  std::string job_id;
};

// LOG_DIR/fr-proc.<pid>.
std::string proc_file_path(const std::string& log_dir, int pid);
// The pid a directory entry registers (fr-proc.<pid>, nothing after), 0 when it is not one.
int proc_file_pid(const std::string& name);

std::string proc_file_text(const ProcFile& p);
// False with *error when `text` is not an fr-proc/1 document.
bool parse_proc_file(const std::string& text, ProcFile* p, std::string* error);

// A torch progress file's collective count (the sum of every process group's sequence number);
// false when `text` is not an fr-torch/1 document.
bool parse_torch_progress(const std::string& text, uint64_t* seq);

// /proc/<pid>/stat's starttime (clock ticks since boot); 0 when the process is gone.
uint64_t process_start_ticks(int pid);

// The launcher's rank, world size and job id, by the agent's rule (DESIGN.md "Identity"):
// RANK, OMPI_COMM_WORLD_RANK, PMI_RANK, SLURM_PROCID; WORLD_SIZE, OMPI_COMM_WORLD_SIZE,
// PMI_SIZE, SLURM_NTASKS; FR_JOB_ID, TORCHELASTIC_RUN_ID, SLURM_JOB_ID. `get` reads a variable
// ("" when unset).
ProcFile proc_file_from_env(const std::function<std::string(const char*)>& get);

}  // namespace fr::daemon
