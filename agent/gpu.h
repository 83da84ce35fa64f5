// GPU progress (gpu.cpp): stream writes of an op's position into the log around each launch, or
// events polled from a thread where stream writes are missing.
#pragma once

#include <nccl.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "agent.h"
#include "fr/flight_log.h"

namespace fr::agent {

// How GPU progress is tracked; decided once, at the first launched op that can decide it.
enum GpuMode : int { kGpuUndecided = 0, kGpuMarkers = 1, kGpuEvents = 2, kGpuNone = 3 };

struct GpuState {
  int mode;         // GpuMode (atomic)
  int cuda_absent;  // libcuda.so.1 could not be loaded: no capture check, no marker (atomic)
  int tries;
  uint64_t dev_base;  // device address of the log's mapping (CUdeviceptr)
  pthread_mutex_t lock;
};
FR_HIDDEN extern constinit GpuState g_gpu;

// Whether `stream` is being captured into a CUDA graph (loads the driver table at first use).
// kCaptureUnknown when the driver cannot tell (e.g. the legacy stream while another stream
// captures in global mode): nothing may be enqueued into it then.
enum StreamCapture : int { kNotCapturing = 0, kCapturing = 1, kCaptureUnknown = 2 };
FR_HIDDEN int gpu_stream_capture(uint64_t stream);
// Decides the tracking mode once (loads libcuda, registers the log). Returns the mode.
FR_HIDDEN int gpu_prepare();
// Places the "started" marker for `index` on `stream` before a launch; false if untracked.
FR_HIDDEN bool gpu_before(int32_t slot, uint64_t stream, uint64_t index);
// Places the "completed" marker after a launch; false if untracked.
FR_HIDDEN bool gpu_after(int32_t slot, uint64_t stream, uint64_t index);
FR_HIDDEN void gpu_forget_in_child();
// Writes `value` to `word` (a word of the log) from `stream`: a stream memory write, captured into
// the graph when the stream is capturing. False when markers are not in use or the write failed.
FR_HIDDEN bool gpu_write_word(uint64_t stream, uint64_t* word, uint64_t value);
// The driver's capture id and graph of a capturing stream; false when it cannot tell.
FR_HIDDEN bool gpu_capture_info(uint64_t stream, uint64_t* capture_id, uint64_t* graph);
// Captures the replay kernel (replay_kernel.h) into `stream`'s capture: each replay then adds one
// to *counter (a word of the log) and resets the positions of graph `ordinal`. False when the
// kernel cannot be had or launched; the graph's replays are then tracked from the host.
FR_HIDDEN bool gpu_capture_replay_kernel(uint64_t stream, uint64_t* counter, uint32_t ordinal);

}  // namespace fr::agent
