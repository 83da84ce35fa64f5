// GPU progress (gpu.cpp): stream writes of an op's position into the log around each launch, or
// events polled from a thread where stream writes are missing.
#pragma once

#include <cuda.h>
#include <nccl.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "agent.h"
#include "fr/flight_log.h"

namespace fr::agent {

// How GPU progress is tracked; decided once, at the first launched op that can decide it.
enum GpuMode : int { kGpuUndecided = 0, kGpuMarkers = 1, kGpuEvents = 2, kGpuNone = 3 };

// The driver's functions the agent calls, loaded from libcuda.so.1 at first use; a forked child
// keeps them (dlopen'ed libraries survive fork).
struct CudaApi {
  void* lib;
  CUresult (*ctx_get_current)(CUcontext*);
  CUresult (*ctx_get_device)(CUdevice*);                                 // optional
  CUresult (*device_get_attribute)(int*, CUdevice_attribute, CUdevice);  // optional
  CUresult (*mem_host_register)(void*, size_t, unsigned int);
  CUresult (*mem_host_get_device_pointer)(CUdeviceptr*, void*, unsigned int);
  CUresult (*stream_write_value64)(CUstream, CUdeviceptr, cuuint64_t, unsigned int);
  CUresult (*stream_is_capturing)(CUstream, CUstreamCaptureStatus*);
  CUresult (*event_create)(CUevent*, unsigned int);
  CUresult (*event_record)(CUevent, CUstream);
  CUresult (*event_query)(CUevent);
  CUresult (*event_destroy)(CUevent);
  CUresult (*exchange_capture_mode)(CUstreamCaptureMode*);
  CUresult (*capture_info_v3)(CUstream, CUstreamCaptureStatus*, cuuint64_t*, CUgraph*,
                              const CUgraphNode**, const CUgraphEdgeData**, size_t*);
  CUresult (*capture_info_v2)(CUstream, CUstreamCaptureStatus*, cuuint64_t*, CUgraph*,
                              const CUgraphNode**, size_t*);
  // The replay kernel (replay_kernel.h): optional, graphs fall back to host-side replay tracking.
  CUresult (*stream_get_ctx)(CUstream, CUcontext*);
  CUresult (*module_load_data)(CUmodule*, const void*);
  CUresult (*module_get_function)(CUfunction*, CUmodule, const char*);
  CUresult (*func_load)(CUfunction);  // CUDA 12.4 on; optional
  CUresult (*launch_kernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                            unsigned, CUstream, void**, void**);
};

// Events waiting for the poller: one per marker that the stream could not write itself.
inline constexpr uint32_t kMaxPending = 4096;
struct Pending {
  CUevent event;     // null: free entry
  uint64_t* target;  // gpu_started or gpu_completed of a communicator entry
  uint64_t index;
};
inline constexpr uint32_t kEventStreams = 64;
// The replay kernel, loaded once per CUDA context (a module belongs to one context).
inline constexpr uint32_t kMaxKernelContexts = 16;
struct KernelSlot {
  CUcontext ctx;
  CUfunction fn;
};

struct GpuState {
  int mode;         // GpuMode (atomic)
  int cuda_absent;  // libcuda.so.1 could not be loaded: no capture check, no marker (atomic)
  int tries;
  uint64_t dev_base;  // device address of the log's mapping (CUdeviceptr)
  pthread_mutex_t lock;
  int cuda_loaded;  // 0 not tried, 1 loaded, -1 unavailable (atomic)
  CudaApi cuda;
  Pending pending[kMaxPending];
  uint32_t pending_used;  // under lock
  int poller_started;
  // Streams whose stream write failed: their progress comes from events from then on, while the
  // other streams keep markers (a stream of another context, say, fails where the rest work).
  // Keys are stream + 1 (the NULL stream is 0); written under lock, read without it.
  uint64_t event_streams[kEventStreams];   // (atomic)
  uint32_t event_stream_count;             // (atomic)
  KernelSlot kernels[kMaxKernelContexts];  // under lock
  uint32_t kernels_used;
  int kernel_failed;
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
