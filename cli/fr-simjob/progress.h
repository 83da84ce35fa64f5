// The progress board: a small file that the launcher maps and every rank process writes into, one
// cache line per rank. The launcher decides "no rank has progressed" from it, so stall detection
// works the same with and without the agent; result.json takes steps_done from it.
#pragma once

#include <atomic>
#include <cstdint>

namespace fr::simjob {

constexpr uint64_t kProgressMagic = 0x4252414F42534A46ull;  // "FJSBOARB"

enum class RankPhase : uint32_t {
  kStarting = 0,
  kInit = 1,      // creating communicators
  kRunning = 2,   // in the training loop
  kFinished = 3,  // every step done, communicators destroyed
  kFailed = 4,    // an NCCL/CUDA error or a failed result check
};

struct alignas(64) RankSlot {
  std::atomic<uint64_t> progress;        // bumped after every call and step: any change = progress
  std::atomic<uint64_t> steps_done;      // steps whose results were synchronized
  std::atomic<uint64_t> check_failures;  // result checks that found wrong data
  std::atomic<uint32_t> phase;           // RankPhase
  std::atomic<int32_t> pid;
};
static_assert(sizeof(RankSlot) == 64);
static_assert(std::atomic<uint64_t>::is_always_lock_free);

struct ProgressBoard {
  uint64_t magic;
  uint32_t ranks;
  uint32_t reserved;
  uint8_t pad[48];
  RankSlot slots[1];  // `ranks` of them

  static uint64_t bytes_for(int ranks) {
    return sizeof(ProgressBoard) +
           sizeof(RankSlot) * static_cast<uint64_t>(ranks > 1 ? ranks - 1 : 0);
  }
};

// The exit code of the rank that leaves the job at --elastic STEP: fr-simjob starts its successor.
inline constexpr int kRankExitLeft = 10;

// Environment variables the launcher hands to its rank processes (besides the launcher-standard
// RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE and FR_JOB_ID).
inline constexpr const char* kEnvBoard = "FRSIMJOB_BOARD";     // the progress board file
inline constexpr const char* kEnvRunDir = "FRSIMJOB_RUN_DIR";  // unique-id exchange directory

}  // namespace fr::simjob
