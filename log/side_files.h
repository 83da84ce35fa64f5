// The two side files a dump set carries beside the flight-log dumps (docs/dump-set.md):
//   <dump file>.stacks.json  schema "fr-stacks/1": every thread's stack of that rank's process at
//                            the dump, native frames (libdw) and Python frames (py-spy);
//   <node>.gpu.json          schema "fr-gpu/1": the health of every GPU of a node at the dump
//                            (NVML), with the PIDs running on each, so ranks join through PIDs.
// `frd snapshot` and `frd node` write them, fr-analyze reads them. This header owns both formats:
// the writer and the reader are the two functions below each document type, over one to_json and
// one from_json per type in side_files.cpp, so they cannot drift. Readers
// accept unknown fields and refuse another schema; everything read is bounded (frames, threads,
// text lengths), since a dump set may come from a hostile peer.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fr::log {

inline constexpr const char* kStacksSchema = "fr-stacks/1";
inline constexpr const char* kGpuSchema = "fr-gpu/1";
inline constexpr const char* kStacksSuffix = ".stacks.json";
inline constexpr const char* kGpuSuffix = ".gpu.json";
inline constexpr size_t kMaxStackThreads = 4096;
inline constexpr size_t kMaxStackFrames = 256;
inline constexpr size_t kMaxSideFileBytes = 64u << 20;

// ---- fr-stacks/1 -------------------------------------------------------------------------------

struct StackFrame {
  std::string function;         // demangled; "" when no symbol covers the address
  std::string file;             // source file when debug info has it
  int line = 0;                 // 0 when unknown
  std::string module;           // the ELF object (path) the address lies in
  std::string kind = "native";  // "native", "python" or "kernel"
  uint64_t pc = 0;
};

struct ThreadStack {
  int tid = 0;
  std::string name;                // /proc/<pid>/task/<tid>/comm, or Python's thread name
  std::string state;               // the kernel's state letter at the capture (R, S, D, T, t, ...)
  std::vector<StackFrame> frames;  // innermost first
  std::string error;               // why this thread has no (or a partial) stack
};

struct ProcessStacks {
  int pid = 0;
  int rank = -1;
  std::string taker;                 // "libdw", "libdw+py-spy"
  bool python = false;               // a Python interpreter: frames merged from py-spy
  std::string error;                 // why no stack at all (one line), e.g. ptrace not permitted
  std::string python_error;          // why py-spy gave nothing, for a Python process
  int64_t time_ns = 0;               // CLOCK_REALTIME at the capture
  int64_t took_ns = 0;               // how long the process was held
  std::vector<ThreadStack> threads;  // the main thread (tid == pid) first
};

std::string stacks_to_text(const ProcessStacks& s);
bool parse_stacks(const std::string& text, ProcessStacks* out, std::string* error);

// ---- fr-gpu/1 ----------------------------------------------------------------------------------

struct XidEvent {
  uint64_t xid = 0;
  int64_t time_ns = 0;  // CLOCK_REALTIME when the daemon received it
};

struct NvLinkState {
  int link = 0;
  bool active = false;
  uint64_t replay_errors = 0;
  uint64_t recovery_errors = 0;
  uint64_t crc_flit_errors = 0;
  uint64_t crc_data_errors = 0;
};

// One GPU. A field NVML could not give stays at -1 (or empty) and `unavailable` names it with
// NVML's reason, so "not supported" never reads as "zero errors".
struct GpuHealth {
  int index = -1;
  std::string pci_bus_id;  // "0000:3b:00.0"
  std::string uuid;
  std::string name;
  std::vector<XidEvent> xids;  // since the daemon started
  int64_t ecc_volatile_corrected = -1;
  int64_t ecc_volatile_uncorrected = -1;
  int64_t retired_pages_pending = -1;  // 1 when a page retirement waits for a reset
  int64_t remapped_rows_pending = -1;  // 1 when a row remap waits for a reset
  int64_t remapped_rows_failed = -1;
  std::vector<NvLinkState> nvlinks;
  int64_t throttle_reasons = -1;  // NVML's clocks-event bit mask
  std::vector<std::string> throttle_names;
  int64_t temperature_c = -1;
  int64_t power_mw = -1;
  int64_t pcie_replays = -1;
  std::vector<int> pids;  // compute processes running on it, as NVML reports them (the host's PIDs)
  // The same processes as each sees itself (the innermost pid of /proc/PID/status NSpid, read by
  // the node daemon; 0 where unknown): what a rank in a container records as its pid.
  std::vector<int> own_pids;
  std::vector<std::string> unavailable;  // "ecc: Not Supported", ...
};

struct NodeGpus {
  std::string node;
  int64_t time_ns = 0;
  std::string error;  // NVML absent or failing: one line; then `gpus` is empty
  std::string driver_version;
  std::vector<GpuHealth> gpus;
};

std::string gpus_to_text(const NodeGpus& g);
bool parse_gpus(const std::string& text, NodeGpus* out, std::string* error);

// "<dump file>.stacks.json"; whether a dump-set entry is one of the side files.
std::string stacks_file_for(const std::string& dump_file);
bool is_side_file(const std::string& name);

}  // namespace fr::log
